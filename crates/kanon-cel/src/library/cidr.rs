//! Kubernetes' CIDR library: `cidr(string)`, `isCIDR`, `string(cidr)`, `containsIP`,
//! `containsCIDR`, `ip`, `masked` and `prefixLength`, over prefixes parsed as Go's
//! `netip.ParsePrefix` parses them. A CIDR is a `net.CIDR` object whose canonical form is Go's
//! `Prefix.String()` (host bits kept, as written).

use crate::env::Env;
use crate::error::EvalError;
use crate::function::no_overload;
use crate::value::Value;

use super::ip::{Addr, ip_of, ip_value, parse_addr, parse_ip};
use super::{
    CIDR_TYPE, STRING_TRAVERSAL, actual_size, canonical, go_quote, opaque, scaled_cost, string_arg,
};

/// A prefix: an address and a length in bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prefix {
    pub addr: Addr,
    pub bits: u32,
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.bits)
    }
}

impl Prefix {
    pub fn masked(&self) -> Prefix {
        Prefix {
            addr: self.addr.masked(self.bits),
            bits: self.bits,
        }
    }

    /// Go's `Prefix.Contains`.
    pub fn contains(&self, addr: &Addr) -> bool {
        self.addr.bit_len() == addr.bit_len()
            && self.addr.masked(self.bits) == addr.masked(self.bits)
    }

    /// Go's `Prefix.Overlaps`.
    pub fn overlaps(&self, other: &Prefix) -> bool {
        if self == other {
            return true;
        }
        if self.addr.bit_len() != other.addr.bit_len() {
            return false;
        }
        let bits = self.bits.min(other.bits);
        bits == 0 || self.addr.masked(bits) == other.addr.masked(bits)
    }
}

/// Go's `netip.ParsePrefix`, with its error texts.
pub fn parse_prefix(input: &str) -> Result<Prefix, String> {
    let error = |message: &str| format!("netip.ParsePrefix({}): {message}", go_quote(input));
    let Some(slash) = input.rfind('/') else {
        return Err(error("no '/'"));
    };
    let addr = parse_addr(&input[..slash]).map_err(|message| error(&message))?;
    if matches!(&addr, Addr::V6(_, zone) if !zone.is_empty()) {
        return Err(error("IPv6 zones cannot be present in a prefix"));
    }
    let bits_text = &input[slash + 1..];
    let bad_bits = || error(&format!("bad bits after slash: {}", go_quote(bits_text)));
    if bits_text.len() > 1 && !matches!(bits_text.as_bytes()[0], b'1'..=b'9') {
        return Err(bad_bits());
    }
    let bits: i64 = bits_text.parse().map_err(|_| bad_bits())?;
    if bits < 0 || bits > i64::from(addr.bit_len()) {
        return Err(error("prefix length out of range"));
    }
    Ok(Prefix {
        addr,
        bits: bits as u32,
    })
}

/// Kubernetes' `parseCIDR`: Go's parse, refusing IPv4-mapped IPv6 addresses.
pub fn parse_cidr(raw: &str) -> Result<Prefix, String> {
    let prefix = parse_prefix(raw).map_err(|error| {
        format!("network address parse error during conversion from string: {error}")
    })?;
    if prefix.addr.is_4in6() {
        return Err(format!(
            "IPv4-mapped IPv6 address {} is not allowed",
            go_quote(raw)
        ));
    }
    Ok(prefix)
}

/// `cidr(string)`'s error wraps `parseCIDR`'s, itself wrapped (Kubernetes says it twice).
fn cidr_from_string(raw: &str) -> Result<Prefix, EvalError> {
    parse_cidr(raw).map_err(|error| {
        EvalError::Invalid(format!(
            "network address parse error during conversion from string: {error}"
        ))
    })
}

pub fn cidr_value<'a>(prefix: &Prefix) -> Value<'a> {
    opaque(CIDR_TYPE, prefix.to_string())
}

pub fn cidr_of(value: &Value<'_>) -> Option<Prefix> {
    canonical(value, CIDR_TYPE).and_then(|text| parse_prefix(text).ok())
}

pub(crate) fn install(env: &mut Env) {
    env.function("string_to_cidr", "cidr(string) -> net.CIDR", |_, args| {
        cidr_from_string(string_arg("cidr", args, 0)?).map(|prefix| cidr_value(&prefix))
    });
    env.function("is_cidr", "isCIDR(string) -> bool", |_, args| {
        Ok(Value::Bool(
            parse_cidr(string_arg("isCIDR", args, 0)?).is_ok(),
        ))
    });
    for id in ["string_to_cidr", "is_cidr"] {
        env.set_name_cost(id, |args| {
            scaled_cost(actual_size(&args[0]), STRING_TRAVERSAL)
        });
    }
    env.function(
        "cidr_to_string",
        "string(net.CIDR) -> string",
        |_, args| match canonical(&args[0], CIDR_TYPE) {
            Some(text) => Ok(Value::string(text)),
            None => Err(no_overload("string", args)),
        },
    );

    env.method(
        "cidr_contains_ip_string",
        "net.CIDR.containsIP(string) -> bool",
        |_, args| {
            let prefix = cidr_of(&args[0]).ok_or_else(|| no_overload("containsIP", args))?;
            // Kubernetes turns a string that is not an IP into "no such overload", not a parse error.
            let addr = parse_ip(string_arg("containsIP", args, 1)?)
                .map_err(|_| no_overload("containsIP", args))?;
            Ok(Value::Bool(prefix.contains(&addr)))
        },
    );
    env.method(
        "cidr_contains_ip_ip",
        "net.CIDR.containsIP(net.IP) -> bool",
        |_, args| {
            let prefix = cidr_of(&args[0]).ok_or_else(|| no_overload("containsIP", args))?;
            let addr = ip_of(&args[1]).ok_or_else(|| no_overload("containsIP", args))?;
            Ok(Value::Bool(prefix.contains(&addr)))
        },
    );
    env.set_name_cost("cidr_contains_ip_string", |args| {
        contains_ip_cost(args, true)
    });
    env.set_name_cost("cidr_contains_ip_ip", |args| contains_ip_cost(args, false));
    // Dispatched at run time, the overload's id is not "cidr_contains_ip_string": no parse cost.
    env.set_dispatched_cost("cidr_contains_ip_string", |args| {
        contains_ip_cost(args, false)
    });

    env.method(
        "cidr_contains_cidr_string",
        "net.CIDR.containsCIDR(string) -> bool",
        |_, args| {
            let prefix = cidr_of(&args[0]).ok_or_else(|| no_overload("containsCIDR", args))?;
            let other = cidr_from_string(string_arg("containsCIDR", args, 1)?)?;
            Ok(Value::Bool(contains_cidr(&prefix, &other)))
        },
    );
    env.method(
        "cidr_contains_cidr",
        "net.CIDR.containsCIDR(net.CIDR) -> bool",
        |_, args| {
            let prefix = cidr_of(&args[0]).ok_or_else(|| no_overload("containsCIDR", args))?;
            let other = cidr_of(&args[1]).ok_or_else(|| no_overload("containsCIDR", args))?;
            Ok(Value::Bool(contains_cidr(&prefix, &other)))
        },
    );
    env.set_name_cost("cidr_contains_cidr_string", |args| {
        contains_cidr_cost(args, true)
    });
    env.set_name_cost("cidr_contains_cidr", |args| contains_cidr_cost(args, false));
    env.set_dispatched_cost("cidr_contains_cidr_string", |args| {
        contains_cidr_cost(args, false)
    });

    env.method("cidr_ip", "net.CIDR.ip() -> net.IP", |_, args| {
        let prefix = cidr_of(&args[0]).ok_or_else(|| no_overload("ip", args))?;
        Ok(ip_value(&prefix.addr))
    });
    env.method(
        "cidr_prefix_length",
        "net.CIDR.prefixLength() -> int",
        |_, args| {
            let prefix = cidr_of(&args[0]).ok_or_else(|| no_overload("prefixLength", args))?;
            Ok(Value::Int(i64::from(prefix.bits)))
        },
    );
    env.method("cidr_masked", "net.CIDR.masked() -> net.CIDR", |_, args| {
        let prefix = cidr_of(&args[0]).ok_or_else(|| no_overload("masked", args))?;
        Ok(cidr_value(&prefix.masked()))
    });
}

fn contains_cidr(prefix: &Prefix, other: &Prefix) -> bool {
    prefix.overlaps(other) && prefix.bits <= other.bits
}

fn contains_ip_cost(args: &[Value<'_>], from_string: bool) -> u64 {
    let size = actual_size(&args[0]);
    let mut cost = scaled_cost(size + size, STRING_TRAVERSAL);
    if from_string {
        cost += scaled_cost(actual_size(&args[1]), STRING_TRAVERSAL);
    }
    cost
}

fn contains_cidr_cost(args: &[Value<'_>], from_string: bool) -> u64 {
    let size = actual_size(&args[0]);
    let mut cost =
        scaled_cost(size + size, STRING_TRAVERSAL) + scaled_cost(size, STRING_TRAVERSAL) + 1;
    if from_string {
        cost += scaled_cost(actual_size(&args[1]), STRING_TRAVERSAL);
    }
    cost
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn cidr(text: &str) -> Value<'static> {
        function("cidr", vec![s(text)]).unwrap_or_else(|error| panic!("{error}"))
    }

    fn ip(text: &str) -> Value<'static> {
        function("ip", vec![s(text)]).unwrap_or_else(|error| panic!("{error}"))
    }

    #[test]
    fn parsing_follows_go_netip() {
        assert_eq!(
            parse_cidr("192.168.0.1/24").map(|p| p.to_string()),
            Ok("192.168.0.1/24".to_owned())
        );
        assert_eq!(
            parse_cidr("2001:DB8::/32").map(|p| p.to_string()),
            Ok("2001:db8::/32".to_owned())
        );
        assert_eq!(
            error_text(function("cidr", vec![s("1.2.3.4")])),
            "network address parse error during conversion from string: network address parse error during conversion from string: netip.ParsePrefix(\"1.2.3.4\"): no '/'"
        );
        assert_eq!(
            parse_prefix("1.2.3.4/33").unwrap_err(),
            "netip.ParsePrefix(\"1.2.3.4/33\"): prefix length out of range"
        );
        assert_eq!(
            parse_prefix("1.2.3.4/08").unwrap_err(),
            "netip.ParsePrefix(\"1.2.3.4/08\"): bad bits after slash: \"08\""
        );
        assert_eq!(
            parse_prefix("1.2.3.4/").unwrap_err(),
            "netip.ParsePrefix(\"1.2.3.4/\"): bad bits after slash: \"\""
        );
        assert_eq!(
            parse_prefix("1.2.3/8").unwrap_err(),
            "netip.ParsePrefix(\"1.2.3/8\"): ParseAddr(\"1.2.3\"): IPv4 address too short"
        );
        assert_eq!(
            parse_prefix("fe80::1%eth0/64").unwrap_err(),
            "netip.ParsePrefix(\"fe80::1%eth0/64\"): IPv6 zones cannot be present in a prefix"
        );
        assert_eq!(
            parse_cidr("::ffff:1.2.3.4/120").unwrap_err(),
            "IPv4-mapped IPv6 address \"::ffff:1.2.3.4/120\" is not allowed"
        );
        assert!(truth(function("isCIDR", vec![s("10.0.0.0/8")])));
        assert!(!truth(function("isCIDR", vec![s("10.0.0.0")])));
    }

    #[test]
    fn cidr_functions() {
        assert!(truth(method(
            "containsIP",
            vec![cidr("192.168.0.0/24"), s("192.168.0.1")]
        )));
        assert!(!truth(method(
            "containsIP",
            vec![cidr("192.168.0.0/24"), s("192.168.1.1")]
        )));
        assert!(truth(method(
            "containsIP",
            vec![cidr("192.168.0.0/24"), ip("192.168.0.1")]
        )));
        assert!(!truth(method(
            "containsIP",
            vec![cidr("::/0"), ip("192.168.0.1")]
        )));
        assert!(truth(method(
            "containsIP",
            vec![cidr("0.0.0.0/0"), ip("192.168.0.1")]
        )));
        assert!(truth(method(
            "containsIP",
            vec![cidr("2001:db8::/32"), s("2001:db8::1")]
        )));
        assert_eq!(
            error_text(method("containsIP", vec![cidr("10.0.0.0/8"), s("bad")])),
            "no such overload"
        );
        assert!(truth(method(
            "containsCIDR",
            vec![cidr("192.168.0.0/16"), s("192.168.10.0/24")]
        )));
        assert!(!truth(method(
            "containsCIDR",
            vec![cidr("192.168.0.0/16"), s("192.0.0.0/8")]
        )));
        assert!(truth(method(
            "containsCIDR",
            vec![cidr("192.168.0.0/16"), cidr("192.168.0.0/16")]
        )));
        assert!(!truth(method(
            "containsCIDR",
            vec![cidr("192.168.0.0/16"), cidr("10.0.0.0/24")]
        )));
        assert_eq!(
            error_text(method("containsCIDR", vec![cidr("10.0.0.0/8"), s("bad")])),
            "network address parse error during conversion from string: network address parse error during conversion from string: netip.ParsePrefix(\"bad\"): no '/'"
        );
        assert_value(
            function(
                "string",
                vec![method("ip", vec![cidr("192.168.0.1/24")]).unwrap()],
            ),
            s("192.168.0.1"),
        );
        assert_value(
            function(
                "string",
                vec![method("masked", vec![cidr("192.168.0.1/24")]).unwrap()],
            ),
            s("192.168.0.0/24"),
        );
        assert_value(
            function(
                "string",
                vec![method("masked", vec![cidr("2001:db8::1/31")]).unwrap()],
            ),
            s("2001:db8::/31"),
        );
        assert_value(
            method("prefixLength", vec![cidr("192.168.0.0/24")]),
            Value::Int(24),
        );
        assert!(cidr("10.0.0.0/8").equals(&cidr("10.0.0.0/8")));
        assert!(!cidr("10.0.0.1/8").equals(&cidr("10.0.0.0/8")));
    }

    #[test]
    fn cidr_costs() {
        // /24 is 3 bytes: ceil(6 × 0.1) = 1, and the string's 11 characters: ceil(1.1) = 2.
        assert_eq!(
            method_cost("containsIP", vec![cidr("192.168.0.0/24"), s("192.168.0.1")]),
            3
        );
        assert_eq!(
            method_cost(
                "containsCIDR",
                vec![cidr("192.168.0.0/24"), cidr("192.168.0.0/24")]
            ),
            3
        );
        assert_eq!(method_cost("ip", vec![cidr("192.168.0.0/24")]), 1);
    }
}
