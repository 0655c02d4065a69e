//! kanon-cel's values in the oracle's canonical rendering (`render` in tests/oracle/main.go):
//! the two must write equal values identically, so every rule here has its twin there.

use kanon_cel::Value;
use kanon_cel::library::{CIDR_TYPE, FORMAT_TYPE, IP_TYPE, QUANTITY_TYPE, SEMVER_TYPE, URL_TYPE};

/// The hidden field in which kanon-cel keeps an opaque value's canonical text
/// (`library::CANONICAL`, private to the crate).
const CANONICAL: &str = "#";

pub fn render(value: &Value<'_>) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(value) => value.to_string(),
        Value::Int(value) => value.to_string(),
        Value::Uint(value) => format!("{value}u"),
        Value::Double(value) => double(*value),
        Value::String(text) => quote(text.as_str()),
        Value::Bytes(bytes) => quote_bytes(bytes),
        Value::List(items) => {
            let items: Vec<String> = items.iter().map(|item| render(&item)).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Map(map) => {
            // Map order is not part of a CEL value: entries sorted by their rendering.
            let mut entries: Vec<String> = map
                .entries()
                .iter()
                .map(|(key, value)| format!("{}: {}", render(key), render(value)))
                .collect();
            entries.sort();
            format!("{{{}}}", entries.join(", "))
        }
        Value::Duration(duration) => format!("duration({})", seconds(duration.nanos)),
        // kanon's Display is Go's RFC3339Nano at the timestamp's own offset.
        Value::Timestamp(timestamp) => format!("timestamp({timestamp})"),
        Value::Type(kind) => format!("type({})", kind.runtime_name()),
        Value::Optional(None) => "optional.none()".to_owned(),
        Value::Optional(Some(inner)) => format!("optional.of({})", render(inner)),
        Value::Object(object) => {
            let name = &*object.type_name;
            let canonical = match object.fields.get(CANONICAL) {
                Some(Value::String(text)) => Some(text.as_str()),
                _ => None,
            };
            match canonical {
                Some(text) if name == QUANTITY_TYPE => {
                    format!("{name}({})", quote(&quantity_decimal(text)))
                }
                Some(text)
                    if [IP_TYPE, CIDR_TYPE, URL_TYPE, SEMVER_TYPE, FORMAT_TYPE].contains(&name) =>
                {
                    format!("{name}({})", quote(text))
                }
                _ => {
                    let fields: Vec<String> = object
                        .fields
                        .iter()
                        .map(|(field, value)| format!("{field}: {}", render(value)))
                        .collect();
                    format!("{name}{{{}}}", fields.join(", "))
                }
            }
        }
    }
}

/// Double quotes; `"`, `\`, newline and tab escaped, other controls as `\xHH`.
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for character in text.chars() {
        match character {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `b"…"`: printable ASCII as is, every other byte as `\xHH`.
fn quote_bytes(bytes: &[u8]) -> String {
    let mut out = String::from("b\"");
    for &byte in bytes {
        match byte {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(byte as char);
            }
            0x20..0x7f => out.push(byte as char),
            _ => out.push_str(&format!("\\x{byte:02x}")),
        }
    }
    out.push('"');
    out
}

/// The shortest digits that read back as the same float (Rust's `{:e}`, like Go's
/// `FormatFloat(f, 'e', -1, 64)`), placed as a plain decimal when the exponent is in [-7, 21).
fn double(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    let scientific = format!("{value:e}");
    let (sign, scientific) = match scientific.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", scientific.as_str()),
    };
    let (mantissa, exponent) = scientific.split_once('e').expect("{:e} writes an exponent");
    let exponent: i64 = exponent.parse().expect("{:e} writes an integer exponent");
    format!(
        "{sign}{}",
        place_digits(&mantissa.replace('.', ""), exponent)
    )
}

/// `d.ddd × 10^exponent`, as main.go's `placeDigits`.
fn place_digits(digits: &str, exponent: i64) -> String {
    if !(-7..21).contains(&exponent) {
        let mut text = digits[..1].to_owned();
        if digits.len() > 1 {
            text.push('.');
            text.push_str(&digits[1..]);
        }
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{text}e{sign}{}", exponent.unsigned_abs());
    }
    if exponent < 0 {
        return format!("0.{}{digits}", "0".repeat((-exponent - 1) as usize));
    }
    let whole = exponent as usize + 1;
    if digits.len() <= whole {
        format!("{digits}{}.0", "0".repeat(whole - digits.len()))
    } else {
        format!("{}.{}", &digits[..whole], &digits[whole..])
    }
}

/// Nanoseconds exactly as seconds: `90s`, `-0.5s`, `0.000000001s`.
fn seconds(nanos: i64) -> String {
    let sign = if nanos < 0 { "-" } else { "" };
    let magnitude = nanos.unsigned_abs();
    let mut text = format!("{sign}{}", magnitude / 1_000_000_000);
    let fraction = magnitude % 1_000_000_000;
    if fraction != 0 {
        let digits = format!("{fraction:09}");
        text.push('.');
        text.push_str(digits.trim_end_matches('0'));
    }
    text.push('s');
    text
}

/// kanon's canonical quantity text (`[-]<digits>e<exponent>`, value digits × 10^exponent, or
/// `0`) as a plain decimal without trailing fractional zeros.
fn quantity_decimal(canonical: &str) -> String {
    let (negative, rest) = match canonical.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, canonical),
    };
    let Some((digits, exponent)) = rest.split_once('e') else {
        return canonical.to_owned();
    };
    let Ok(exponent) = exponent.parse::<i64>() else {
        return canonical.to_owned();
    };
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return "0".to_owned();
    }
    let mut text = if exponent >= 0 {
        format!("{digits}{}", "0".repeat(exponent as usize))
    } else {
        let point = exponent.unsigned_abs() as usize;
        let padded = if digits.len() <= point {
            format!("{}{digits}", "0".repeat(point - digits.len() + 1))
        } else {
            digits.to_owned()
        };
        let (whole, fraction) = padded.split_at(padded.len() - point);
        let fraction = fraction.trim_end_matches('0');
        if fraction.is_empty() {
            whole.to_owned()
        } else {
            format!("{whole}.{fraction}")
        }
    };
    if negative {
        text.insert(0, '-');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_and_decimals_render_as_main_go_does() {
        assert_eq!(double(1.5), "1.5");
        assert_eq!(double(3.0), "3.0");
        assert_eq!(double(1e30), "1e+30");
        assert_eq!(double(-0.0), "-0.0");
        assert_eq!(double(1e-9), "1e-9");
        assert_eq!(double(0.001), "0.001");
        assert_eq!(seconds(-1_500_000_000), "-1.5s");
        assert_eq!(seconds(i64::MIN), "-9223372036.854775808s");
        assert_eq!(quantity_decimal("15e-1"), "1.5");
        assert_eq!(quantity_decimal("-5e-3"), "-0.005");
        assert_eq!(quantity_decimal("1e3"), "1000");
        assert_eq!(quantity_decimal("0"), "0");
    }
}
