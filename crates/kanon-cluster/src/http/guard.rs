//! Which addresses kanon may call: the guard against server-side request forgery.
//!
//! A policy author chooses the URL of an `http` reference, and kanon runs inside the cluster
//! with its network position: without a guard, a policy could make kanon read the cloud
//! metadata service (credentials of the node), the kubelet, or any in-cluster service that
//! trusts its callers by address. So kanon refuses every address that is not plainly public
//! (loopback, private, link-local, shared, multicast, reserved ...) unless the operator allows
//! its network ([`super::HttpConfig::allowed_networks`]).
//!
//! The check runs twice, on what would actually be dialled:
//! - on a literal IP in the URL, before anything is sent (hyper never resolves those);
//! - on every address a host name resolves to, inside the client's resolver
//!   ([`GuardedResolver`]): the connection can only go to an address that passed, so a DNS
//!   answer (or a rebinding one that changes between a check and the connection) cannot
//!   smuggle a private address in.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// The end of every refusal: what kanon refuses and how to get past it.
const POLICY: &str = "kanon does not call loopback, link-local, private or metadata addresses \
                      unless the operator allows the network";

/// The operator's allowances over the default refusals.
#[derive(Debug, Clone)]
pub(crate) struct AddressGuard {
    allowed: Vec<IpNet>,
}

impl AddressGuard {
    /// A guard that lets `allowed` networks through although they are refused by default.
    pub(crate) fn new(allowed: Vec<IpNet>) -> Self {
        AddressGuard { allowed }
    }

    /// Why `ip` is refused (`a loopback address`), or `None` when kanon may call it.
    pub(crate) fn refusal(&self, ip: IpAddr) -> Option<Cow<'static, str>> {
        // An address written in an IPv6 form that embeds an IPv4 address reaches that IPv4
        // address, so an allowance of the IPv4 network covers it too.
        let embedded = match ip {
            IpAddr::V4(_) => None,
            IpAddr::V6(v6) => embedded_v4(v6).map(|(_, v4)| IpAddr::V4(v4)),
        };
        let allowed = self
            .allowed
            .iter()
            .any(|net| net.contains(&ip) || embedded.is_some_and(|v4| net.contains(&v4)));
        if allowed {
            return None;
        }
        classify(ip)
    }

    /// The refusal of a literal IP in a URL, as the reason of a `Forbidden` error.
    pub(crate) fn check_literal(&self, ip: IpAddr) -> Result<(), Refused> {
        match self.refusal(ip) {
            None => Ok(()),
            Some(why) => Err(Refused {
                message: format!("{ip} is {why}; {POLICY}"),
            }),
        }
    }
}

/// A refused target: the reason of a `Forbidden` lookup error. It travels through reqwest's
/// error chain when the resolver refuses, where [`super`] finds it again by downcasting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct Refused {
    message: String,
}

impl Refused {
    /// `host` resolved only to refused addresses (each with why).
    fn resolved(host: &str, refused: &[(IpAddr, Cow<'static, str>)]) -> Self {
        // A name may resolve to dozens of addresses; a few tell the story.
        const SHOWN: usize = 4;
        let mut shown: Vec<String> = refused
            .iter()
            .take(SHOWN)
            .map(|(ip, why)| format!("{ip}, {why}"))
            .collect();
        if refused.len() > SHOWN {
            shown.push(format!("{} more", refused.len() - SHOWN));
        }
        Refused {
            message: format!("`{host}` resolves to {}; {POLICY}", shown.join("; ")),
        }
    }
}

/// The client's resolver: resolves with the system's resolver (through tokio) and keeps only
/// the addresses the guard lets through.
#[derive(Debug, Clone)]
pub(crate) struct GuardedResolver {
    guard: Arc<AddressGuard>,
}

impl GuardedResolver {
    /// A resolver that filters with `guard`.
    pub(crate) fn new(guard: Arc<AddressGuard>) -> Self {
        GuardedResolver { guard }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let guard = self.guard.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            // Port 0: reqwest puts the URL's (or the scheme's) port in afterwards.
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut allowed = Vec::new();
            let mut refused: Vec<(IpAddr, Cow<'static, str>)> = Vec::new();
            for addr in resolved {
                match guard.refusal(addr.ip()) {
                    None => allowed.push(addr),
                    Some(why) => {
                        if !refused.iter().any(|(ip, _)| *ip == addr.ip()) {
                            refused.push((addr.ip(), why));
                        }
                    }
                }
            }
            if allowed.is_empty() {
                if refused.is_empty() {
                    let message = format!("`{host}` resolves to no address");
                    return Err(std::io::Error::new(std::io::ErrorKind::NotFound, message).into());
                }
                return Err(Refused::resolved(&host, &refused).into());
            }
            if !refused.is_empty() {
                tracing::debug!(
                    host = %host,
                    refused = refused.len(),
                    "dropped refused addresses of an HTTP lookup's host"
                );
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// Why `ip` is refused by default, or `None` for an address kanon may call.
pub(crate) fn classify(ip: IpAddr) -> Option<Cow<'static, str>> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4).map(Cow::Borrowed),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// The IPv4 ranges refused by default (RFC 6890 and its successors). `Ipv4Addr`'s own
/// predicates cover part of them; the rest (shared, benchmarking, `this network`) are not
/// stable in std, so they are written out.
fn classify_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    let why = if ip.is_unspecified() {
        "an unspecified address"
    } else if o[0] == 0 {
        // Linux connects 0.0.0.0/8 to the local host.
        "a \"this network\" address (0.0.0.0/8)"
    } else if ip.is_loopback() {
        "a loopback address"
    } else if ip.is_private() {
        "a private address"
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        "a shared (carrier-grade NAT) address, where some clouds serve metadata"
    } else if ip.is_link_local() {
        "a link-local address, where cloud metadata services live"
    } else if o[..3] == [192, 0, 0] {
        "an IETF protocol assignment (192.0.0.0/24)"
    } else if ip.is_documentation() {
        "a documentation address"
    } else if o[0] == 198 && (o[1] & 0xfe) == 18 {
        "a benchmarking address (198.18.0.0/15)"
    } else if o[..3] == [192, 88, 99] {
        "a 6to4 relay anycast address"
    } else if ip.is_multicast() {
        "a multicast address"
    } else if ip.is_broadcast() {
        "the broadcast address"
    } else if o[0] >= 240 {
        "a reserved address (240.0.0.0/4)"
    } else {
        return None;
    };
    Some(why)
}

/// The IPv6 ranges refused by default; forms that embed an IPv4 address are judged by it.
fn classify_v6(ip: Ipv6Addr) -> Option<Cow<'static, str>> {
    let s = ip.segments();
    if ip.is_unspecified() {
        return Some(Cow::Borrowed("an unspecified address"));
    }
    if ip.is_loopback() {
        return Some(Cow::Borrowed("a loopback address"));
    }
    if let Some((form, v4)) = embedded_v4(ip) {
        return match (classify_v4(v4), form) {
            (Some(why), _) => Some(Cow::Owned(format!("{form} form of {v4}, {why}"))),
            // IPv4-compatible addresses are deprecated (RFC 4291) and have no legitimate use.
            (None, Embedding::Compatible) => {
                Some(Cow::Borrowed("a deprecated IPv4-compatible IPv6 address"))
            }
            (None, _) => None,
        };
    }
    let why = if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
        "a local-use NAT64 address (64:ff9b:1::/48)"
    } else if s[0] == 0x2001 && s[1] == 0 {
        // Teredo hides the IPv4 addresses it reaches; it has no place in a cluster.
        "a Teredo tunnelling address (2001::/32)"
    } else if s[0] == 0x2001 && s[1] == 0x0db8 {
        "a documentation address"
    } else if s[0] == 0x0100 && s[1] == 0 && s[2] == 0 && s[3] == 0 {
        "a discard-only address (100::/64)"
    } else if (s[0] & 0xfe00) == 0xfc00 {
        "a private (unique local) address"
    } else if (s[0] & 0xffc0) == 0xfe80 {
        "a link-local address"
    } else if (s[0] & 0xffc0) == 0xfec0 {
        "a site-local address (a deprecated private range)"
    } else if (s[0] & 0xff00) == 0xff00 {
        "a multicast address"
    } else {
        return None;
    };
    Some(Cow::Borrowed(why))
}

/// How an IPv6 address embeds an IPv4 one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Embedding {
    /// `::ffff:a.b.c.d`.
    Mapped,
    /// `::a.b.c.d` (deprecated).
    Compatible,
    /// `64:ff9b::a.b.c.d`, translated by a NAT64 gateway.
    Nat64,
    /// `2002:AABB:CCDD::/48`, 6to4.
    SixToFour,
}

impl std::fmt::Display for Embedding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Embedding::Mapped => "an IPv4-mapped",
            Embedding::Compatible => "an IPv4-compatible",
            Embedding::Nat64 => "a NAT64",
            Embedding::SixToFour => "a 6to4",
        })
    }
}

/// The IPv4 address an IPv6 address reaches in the end, when it embeds one. `::` and `::1`
/// are not IPv4-compatible addresses (they are judged as themselves before this is asked).
fn embedded_v4(ip: Ipv6Addr) -> Option<(Embedding, Ipv4Addr)> {
    let s = ip.segments();
    let o = ip.octets();
    let tail = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    if s[..5] == [0; 5] && s[5] == 0xffff {
        Some((Embedding::Mapped, tail))
    } else if s[..6] == [0; 6] && !ip.is_unspecified() && !ip.is_loopback() {
        Some((Embedding::Compatible, tail))
    } else if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        Some((Embedding::Nat64, tail))
    } else if s[0] == 0x2002 {
        Some((Embedding::SixToFour, Ipv4Addr::new(o[2], o[3], o[4], o[5])))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> Option<String> {
        let ip: IpAddr = text.parse().expect("an IP address");
        classify(ip).map(Cow::into_owned)
    }

    #[test]
    fn refuses_the_default_ranges() {
        for text in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.255.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "100.100.100.200",
            "169.254.169.254",
            "192.0.0.192",
            "192.0.2.1",
            "198.18.0.1",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "::8.8.8.8",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "fd00:ec2::254",
            "fc00::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "2001::1",
        ] {
            assert!(refused(text).is_some(), "{text} should be refused");
        }
    }

    #[test]
    fn lets_public_addresses_through() {
        for text in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2606:4700:4700::1111",
            "2a00:1450:4001::1",
        ] {
            assert_eq!(refused(text), None, "{text} should be allowed");
        }
    }

    #[test]
    fn allowances_cover_embedded_forms() {
        let guard = AddressGuard::new(vec!["10.0.0.0/8".parse().expect("a network")]);
        let refusal = |t: &str| guard.refusal(t.parse().expect("an IP address"));
        assert_eq!(refusal("10.1.2.3"), None);
        assert_eq!(refusal("::ffff:10.1.2.3"), None);
        assert!(refusal("127.0.0.1").is_some());
        assert!(refusal("11.0.0.1").is_none());
    }

    #[test]
    fn names_the_embedded_address() {
        assert_eq!(
            refused("::ffff:127.0.0.1").as_deref(),
            Some("an IPv4-mapped form of 127.0.0.1, a loopback address")
        );
    }
}
