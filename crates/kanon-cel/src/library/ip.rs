//! Kubernetes' IP library: `ip(string)`, `isIP`, `ip.isCanonical`, `string(ip)`, `family` and
//! the `is…` tests, over addresses parsed as Go's `net/netip` parses them (no zones, no
//! IPv4-mapped IPv6 addresses). An IP is a `net.IP` object whose canonical form is Go's
//! `Addr.String()`.

use std::net::Ipv6Addr;

use crate::env::Env;
use crate::error::EvalError;
use crate::function::no_overload;
use crate::value::Value;

use super::{
    IP_TYPE, STRING_TRAVERSAL, actual_size, canonical, go_quote, opaque, scaled_cost, string_arg,
};

/// An address as `net/netip` holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addr {
    V4([u8; 4]),
    V6([u8; 16], String),
}

impl Addr {
    pub fn bit_len(&self) -> u32 {
        match self {
            Addr::V4(_) => 32,
            Addr::V6(..) => 128,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            Addr::V4(bytes) => bytes,
            Addr::V6(bytes, _) => bytes,
        }
    }

    /// `::ffff:a.b.c.d`.
    pub fn is_4in6(&self) -> bool {
        matches!(self, Addr::V6(bytes, _) if bytes[..10].iter().all(|byte| *byte == 0) && bytes[10] == 0xff && bytes[11] == 0xff)
    }

    pub fn is_unspecified(&self) -> bool {
        self.bytes().iter().all(|byte| *byte == 0)
    }

    pub fn is_loopback(&self) -> bool {
        match self {
            Addr::V4(bytes) => bytes[0] == 127,
            Addr::V6(bytes, _) => bytes[..15].iter().all(|byte| *byte == 0) && bytes[15] == 1,
        }
    }

    pub fn is_multicast(&self) -> bool {
        match self {
            Addr::V4(bytes) => bytes[0] & 0xf0 == 0xe0,
            Addr::V6(bytes, _) => bytes[0] == 0xff,
        }
    }

    pub fn is_link_local_multicast(&self) -> bool {
        match self {
            Addr::V4(bytes) => bytes[0] == 224 && bytes[1] == 0 && bytes[2] == 0,
            Addr::V6(bytes, _) => bytes[0] == 0xff && bytes[1] & 0x0f == 0x02,
        }
    }

    pub fn is_link_local_unicast(&self) -> bool {
        match self {
            Addr::V4(bytes) => bytes[0] == 169 && bytes[1] == 254,
            Addr::V6(bytes, _) => bytes[0] == 0xfe && bytes[1] & 0xc0 == 0x80,
        }
    }

    /// Go's `IsGlobalUnicast`: private IPv4 and ULA IPv6 addresses count as global.
    pub fn is_global_unicast(&self) -> bool {
        if let Addr::V4(bytes) = self
            && *bytes == [255, 255, 255, 255]
        {
            return false;
        }
        !self.is_unspecified()
            && !self.is_loopback()
            && !self.is_multicast()
            && !self.is_link_local_unicast()
    }

    /// The address with its low `128 - bits` (or `32 - bits`) bits cleared.
    pub fn masked(&self, bits: u32) -> Addr {
        let mut masked = self.clone();
        let bytes: &mut [u8] = match &mut masked {
            Addr::V4(bytes) => bytes,
            Addr::V6(bytes, zone) => {
                zone.clear();
                bytes
            }
        };
        for (index, byte) in bytes.iter_mut().enumerate() {
            let start = index as u32 * 8;
            if start >= bits {
                *byte = 0;
            } else if bits - start < 8 {
                *byte &= 0xffu8 << (8 - (bits - start));
            }
        }
        masked
    }
}

impl std::fmt::Display for Addr {
    /// Go's `Addr.String()`: dotted IPv4, RFC 5952 IPv6 (IPv4-mapped as `::ffff:a.b.c.d`), and
    /// the zone after `%`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Addr::V4(bytes) => write!(f, "{}.{}.{}.{}", bytes[0], bytes[1], bytes[2], bytes[3]),
            Addr::V6(bytes, zone) => {
                write!(f, "{}", Ipv6Addr::from(*bytes))?;
                if !zone.is_empty() {
                    write!(f, "%{zone}")?;
                }
                Ok(())
            }
        }
    }
}

fn addr_error(input: &str, message: &str, at: Option<&str>) -> String {
    match at {
        Some(at) if !at.is_empty() => format!(
            "ParseAddr({}): {message} (at {})",
            go_quote(input),
            go_quote(at)
        ),
        _ => format!("ParseAddr({}): {message}", go_quote(input)),
    }
}

/// Go's `netip.ParseAddr`, with its error texts.
pub fn parse_addr(input: &str) -> Result<Addr, String> {
    for byte in input.bytes() {
        match byte {
            b'.' => return parse_ipv4(input, input).map(Addr::V4),
            b':' => return parse_ipv6(input),
            b'%' => return Err(addr_error(input, "missing IPv6 address", None)),
            _ => {}
        }
    }
    Err(addr_error(input, "unable to parse IP", None))
}

/// The four fields of `text` (a part of `input`, which errors name).
fn parse_ipv4(input: &str, text: &str) -> Result<[u8; 4], String> {
    let bytes = text.as_bytes();
    let mut fields = [0u8; 4];
    let mut value: u32 = 0;
    let mut position = 0;
    let mut digits = 0;
    for (index, byte) in bytes.iter().enumerate() {
        match byte {
            b'0'..=b'9' => {
                if digits == 1 && value == 0 {
                    return Err(addr_error(
                        input,
                        "IPv4 field has octet with leading zero",
                        None,
                    ));
                }
                value = value * 10 + u32::from(byte - b'0');
                digits += 1;
                if value > 255 {
                    return Err(addr_error(input, "IPv4 field has value >255", None));
                }
            }
            b'.' => {
                if index == 0 || index == bytes.len() - 1 || bytes[index - 1] == b'.' {
                    return Err(addr_error(
                        input,
                        "IPv4 field must have at least one digit",
                        Some(&text[index..]),
                    ));
                }
                if position == 3 {
                    return Err(addr_error(input, "IPv4 address too long", None));
                }
                fields[position] = value as u8;
                position += 1;
                value = 0;
                digits = 0;
            }
            _ => {
                return Err(addr_error(
                    input,
                    "unexpected character",
                    Some(&text[index..]),
                ));
            }
        }
    }
    if position < 3 {
        return Err(addr_error(input, "IPv4 address too short", None));
    }
    fields[3] = value as u8;
    Ok(fields)
}

fn parse_ipv6(input: &str) -> Result<Addr, String> {
    let (mut rest, zone) = match input.find('%') {
        Some(at) => {
            let zone = &input[at + 1..];
            if zone.is_empty() {
                return Err(addr_error(input, "zone must be a non-empty string", None));
            }
            (&input[..at], zone)
        }
        None => (input, ""),
    };
    let end = input.len() - if zone.is_empty() { 0 } else { zone.len() + 1 };
    let mut ip = [0u8; 16];
    let mut ellipsis: Option<usize> = None;
    if rest.starts_with("::") {
        ellipsis = Some(0);
        rest = &rest[2..];
        if rest.is_empty() {
            return Ok(Addr::V6(ip, zone.to_owned()));
        }
    }
    let mut i = 0;
    while i < 16 {
        let bytes = rest.as_bytes();
        let mut offset = 0;
        let mut accumulator: u32 = 0;
        while offset < bytes.len() {
            let digit = match bytes[offset] {
                c @ b'0'..=b'9' => c - b'0',
                c @ b'a'..=b'f' => c - b'a' + 10,
                c @ b'A'..=b'F' => c - b'A' + 10,
                _ => break,
            };
            accumulator = (accumulator << 4) + u32::from(digit);
            if offset > 3 {
                return Err(addr_error(
                    input,
                    "each group must have 4 or less digits",
                    Some(rest),
                ));
            }
            if accumulator > 0xffff {
                return Err(addr_error(input, "IPv6 field has value >=2^16", Some(rest)));
            }
            offset += 1;
        }
        if offset == 0 {
            return Err(addr_error(
                input,
                "each colon-separated field must have at least one digit",
                Some(rest),
            ));
        }
        if bytes.get(offset) == Some(&b'.') {
            if ellipsis.is_none() && i != 12 {
                return Err(addr_error(
                    input,
                    "embedded IPv4 address must replace the final 2 fields of the address",
                    Some(rest),
                ));
            }
            if i + 4 > 16 {
                return Err(addr_error(
                    input,
                    "too many hex fields to fit an embedded IPv4 at the end of the address",
                    Some(rest),
                ));
            }
            let fields = parse_ipv4(input, &input[end - rest.len()..end])?;
            ip[i..i + 4].copy_from_slice(&fields);
            rest = "";
            i += 4;
            break;
        }
        ip[i] = (accumulator >> 8) as u8;
        ip[i + 1] = accumulator as u8;
        i += 2;
        rest = &rest[offset..];
        if rest.is_empty() {
            break;
        }
        if !rest.starts_with(':') {
            return Err(addr_error(
                input,
                "unexpected character, want colon",
                Some(rest),
            ));
        } else if rest.len() == 1 {
            return Err(addr_error(
                input,
                "colon must be followed by more characters",
                Some(rest),
            ));
        }
        rest = &rest[1..];
        if rest.starts_with(':') {
            if ellipsis.is_some() {
                return Err(addr_error(input, "multiple :: in address", Some(rest)));
            }
            ellipsis = Some(i);
            rest = &rest[1..];
            if rest.is_empty() {
                break;
            }
        }
    }
    if !rest.is_empty() {
        return Err(addr_error(
            input,
            "trailing garbage after address",
            Some(rest),
        ));
    }
    if i < 16 {
        let Some(ellipsis) = ellipsis else {
            return Err(addr_error(input, "address string too short", None));
        };
        let shift = 16 - i;
        for j in (ellipsis..i).rev() {
            ip[j + shift] = ip[j];
        }
        for byte in &mut ip[ellipsis..ellipsis + shift] {
            *byte = 0;
        }
    } else if ellipsis.is_some() {
        return Err(addr_error(
            input,
            "the :: must expand to at least one field of zeros",
            None,
        ));
    }
    Ok(Addr::V6(ip, zone.to_owned()))
}

/// Kubernetes' `parseIPAddr`: Go's parse, refusing zones and IPv4-mapped IPv6 addresses.
pub fn parse_ip(raw: &str) -> Result<Addr, String> {
    let addr = parse_addr(raw).map_err(|error| {
        format!(
            "IP Address {} parse error during conversion from string: {error}",
            go_quote(raw)
        )
    })?;
    if matches!(&addr, Addr::V6(_, zone) if !zone.is_empty()) {
        return Err(format!(
            "IP address {} with zone value is not allowed",
            go_quote(raw)
        ));
    }
    if addr.is_4in6() {
        return Err(format!(
            "IPv4-mapped IPv6 address {} is not allowed",
            go_quote(raw)
        ));
    }
    Ok(addr)
}

/// An IP value.
pub fn ip_value<'a>(addr: &Addr) -> Value<'a> {
    opaque(IP_TYPE, addr.to_string())
}

/// The address an IP value holds.
pub fn ip_of(value: &Value<'_>) -> Option<Addr> {
    canonical(value, IP_TYPE).and_then(|text| parse_addr(text).ok())
}

pub(crate) fn install(env: &mut Env) {
    env.function("string_to_ip", "ip(string) -> net.IP", |_, args| {
        let text = string_arg("ip", args, 0)?;
        parse_ip(text)
            .map(|addr| ip_value(&addr))
            .map_err(EvalError::Invalid)
    });
    env.set_name_cost("string_to_ip", |args| {
        scaled_cost(actual_size(&args[0]), STRING_TRAVERSAL)
    });
    env.function("is_ip", "isIP(string) -> bool", |_, args| {
        Ok(Value::Bool(parse_ip(string_arg("isIP", args, 0)?).is_ok()))
    });
    env.set_name_cost("is_ip", |args| {
        scaled_cost(actual_size(&args[0]), STRING_TRAVERSAL)
    });
    env.function(
        "ip_is_canonical",
        "ip.isCanonical(string) -> bool",
        |_, args| {
            let text = string_arg("ip.isCanonical", args, 0)?;
            let addr = parse_ip(text).map_err(EvalError::Invalid)?;
            Ok(Value::Bool(addr.to_string() == text))
        },
    );
    env.set_name_cost("ip_is_canonical", |args| {
        scaled_cost(actual_size(&args[0]) * 2, STRING_TRAVERSAL)
    });
    env.function(
        "ip_to_string",
        "string(net.IP) -> string",
        |_, args| match canonical(&args[0], IP_TYPE) {
            Some(text) => Ok(Value::string(text)),
            None => Err(no_overload("string", args)),
        },
    );
    env.method("ip_family", "net.IP.family() -> int", |_, args| {
        let addr = ip_of(&args[0]).ok_or_else(|| no_overload("family", args))?;
        Ok(Value::Int(if matches!(addr, Addr::V4(_)) { 4 } else { 6 }))
    });
    env.method(
        "ip_is_unspecified",
        "net.IP.isUnspecified() -> bool",
        |_, args| test(args, "isUnspecified", Addr::is_unspecified),
    );
    env.method(
        "ip_is_loopback",
        "net.IP.isLoopback() -> bool",
        |_, args| test(args, "isLoopback", Addr::is_loopback),
    );
    env.method(
        "ip_is_link_local_multicast",
        "net.IP.isLinkLocalMulticast() -> bool",
        |_, args| test(args, "isLinkLocalMulticast", Addr::is_link_local_multicast),
    );
    env.method(
        "ip_is_link_local_unicast",
        "net.IP.isLinkLocalUnicast() -> bool",
        |_, args| test(args, "isLinkLocalUnicast", Addr::is_link_local_unicast),
    );
    env.method(
        "ip_is_global_unicast",
        "net.IP.isGlobalUnicast() -> bool",
        |_, args| test(args, "isGlobalUnicast", Addr::is_global_unicast),
    );
}

fn test<'a>(
    args: &[Value<'a>],
    function: &str,
    predicate: fn(&Addr) -> bool,
) -> Result<Value<'a>, EvalError> {
    let addr = ip_of(&args[0]).ok_or_else(|| no_overload(function, args))?;
    Ok(Value::Bool(predicate(&addr)))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn ip(text: &str) -> Value<'static> {
        function("ip", vec![s(text)]).unwrap_or_else(|error| panic!("{error}"))
    }

    #[test]
    fn parsing_follows_go_netip() {
        for (input, expected) in [
            ("192.168.0.1", "192.168.0.1"),
            ("::1", "::1"),
            ("2001:db8::68", "2001:db8::68"),
            ("2001:DB8:0:0:0:0:0:68", "2001:db8::68"),
            ("fe80::0:0:1", "fe80::1"),
            ("1:0:0:2:0:0:0:3", "1:0:0:2::3"),
            ("1:0:2:3:4:5:6:7", "1:0:2:3:4:5:6:7"),
            ("::", "::"),
            ("::1.2.3.4", "::102:304"),
        ] {
            assert_eq!(
                parse_ip(input).map(|addr| addr.to_string()),
                Ok(expected.to_owned()),
                "{input}"
            );
        }
        assert_eq!(
            parse_ip("1.2.3").unwrap_err(),
            "IP Address \"1.2.3\" parse error during conversion from string: ParseAddr(\"1.2.3\"): IPv4 address too short"
        );
        assert_eq!(
            parse_ip("::ffff:1.2.3.4").unwrap_err(),
            "IPv4-mapped IPv6 address \"::ffff:1.2.3.4\" is not allowed"
        );
        assert_eq!(
            parse_ip("fe80::1%eth0").unwrap_err(),
            "IP address \"fe80::1%eth0\" with zone value is not allowed"
        );
        assert_eq!(
            parse_addr("192.168.0.01").unwrap_err(),
            "ParseAddr(\"192.168.0.01\"): IPv4 field has octet with leading zero"
        );
        assert_eq!(
            parse_addr("1.2.3.256").unwrap_err(),
            "ParseAddr(\"1.2.3.256\"): IPv4 field has value >255"
        );
        assert_eq!(
            parse_addr("1..2.3").unwrap_err(),
            "ParseAddr(\"1..2.3\"): IPv4 field must have at least one digit (at \".2.3\")"
        );
        assert_eq!(
            parse_addr("1.2.3.4.5").unwrap_err(),
            "ParseAddr(\"1.2.3.4.5\"): IPv4 address too long"
        );
        assert_eq!(
            parse_addr("a.b").unwrap_err(),
            "ParseAddr(\"a.b\"): unexpected character (at \"a.b\")"
        );
        assert_eq!(
            parse_addr("foo").unwrap_err(),
            "ParseAddr(\"foo\"): unable to parse IP"
        );
        assert_eq!(
            parse_addr("1::2::3").unwrap_err(),
            "ParseAddr(\"1::2::3\"): multiple :: in address (at \":3\")"
        );
        assert_eq!(
            parse_addr("1:2:3").unwrap_err(),
            "ParseAddr(\"1:2:3\"): address string too short"
        );
        assert_eq!(
            parse_addr("12345::").unwrap_err(),
            "ParseAddr(\"12345::\"): each group must have 4 or less digits (at \"12345::\")"
        );
        assert_eq!(
            parse_addr("%eth0").unwrap_err(),
            "ParseAddr(\"%eth0\"): missing IPv6 address"
        );
    }

    #[test]
    fn ip_functions() {
        assert_value(
            function("string", vec![ip("2001:DB8::68")]),
            s("2001:db8::68"),
        );
        assert_value(method("family", vec![ip("127.0.0.1")]), Value::Int(4));
        assert_value(method("family", vec![ip("::1")]), Value::Int(6));
        assert!(truth(function("isIP", vec![s("::1")])));
        assert!(!truth(function("isIP", vec![s("::ffff:1.2.3.4")])));
        assert!(truth(function("ip.isCanonical", vec![s("127.0.0.1")])));
        assert!(!truth(function("ip.isCanonical", vec![s("2001:DB8::68")])));
        assert_eq!(
            error_text(function("ip.isCanonical", vec![s("bad")])),
            "IP Address \"bad\" parse error during conversion from string: ParseAddr(\"bad\"): unable to parse IP"
        );
        assert!(truth(method("isUnspecified", vec![ip("0.0.0.0")])));
        assert!(truth(method("isUnspecified", vec![ip("::")])));
        assert!(!truth(method("isUnspecified", vec![ip("127.0.0.1")])));
        assert!(truth(method("isLoopback", vec![ip("127.0.0.2")])));
        assert!(truth(method("isLoopback", vec![ip("::1")])));
        assert!(!truth(method("isLoopback", vec![ip("::2")])));
        assert!(truth(method("isLinkLocalMulticast", vec![ip("224.0.0.1")])));
        assert!(!truth(method(
            "isLinkLocalMulticast",
            vec![ip("224.0.1.1")]
        )));
        assert!(truth(method("isLinkLocalMulticast", vec![ip("ff02::1")])));
        assert!(truth(method(
            "isLinkLocalUnicast",
            vec![ip("169.254.169.254")]
        )));
        assert!(truth(method("isLinkLocalUnicast", vec![ip("fe80::1")])));
        assert!(!truth(method("isLinkLocalUnicast", vec![ip("fec0::1")])));
        assert!(truth(method("isGlobalUnicast", vec![ip("192.168.0.1")])));
        assert!(truth(method("isGlobalUnicast", vec![ip("2001:db8::68")])));
        assert!(!truth(method(
            "isGlobalUnicast",
            vec![ip("255.255.255.255")]
        )));
        assert!(!truth(method("isGlobalUnicast", vec![ip("ff00::1")])));
        assert!(ip("127.0.0.1").equals(&ip("127.0.0.1")));
        assert!(ip("::1").equals(&ip("0::1")));
        assert!(!ip("::1").equals(&ip("::2")));
    }

    #[test]
    fn ip_costs() {
        assert_eq!(function_cost("ip", vec![s("192.168.0.1")]), 2);
        assert_eq!(function_cost("ip.isCanonical", vec![s("192.168.0.1")]), 3);
        assert_eq!(method_cost("family", vec![ip("::1")]), 1);
    }
}
