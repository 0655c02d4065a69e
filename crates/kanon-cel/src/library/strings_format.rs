//! `string.format(list)` as cel-go's strings extension formats before version 4, with the
//! `en_US` locale kube-apiserver leaves in place: `%s`, `%d`, `%f`, `%e`, `%b`, `%x`, `%X`,
//! `%o`, `%%`, and a precision (`%.2f`). Fixed-point numbers are grouped by thousands and
//! scientific ones written `1.234500×10⁰³`, as golang.org/x/text's printer writes them.

use crate::error::EvalError;
use crate::format_clauses::{Clause, parse_clause};
use crate::function::Ctx;
use crate::value::{Key, Value};

use super::{STRING_TRAVERSAL, go_quote, scaled_cost};

const DEFAULT_PRECISION: usize = 6;
/// Output up to this many bytes costs nothing beyond the call (cel-go's meter); more is
/// charged a tenth of a unit per byte.
const FREE_OUTPUT: usize = 4096;

/// Formats `template` with `args`; the output beyond the template's length is charged to the
/// budget as it grows (the call's own cost covers only the template).
pub(crate) fn format(
    ctx: &mut Ctx<'_, '_>,
    template: &str,
    args: &[Value<'_>],
) -> Result<String, EvalError> {
    let bytes = template.as_bytes();
    let mut out = String::with_capacity(template.len());
    let mut index = 0;
    let mut next_arg = 0;
    let mut literal_start = 0;
    while index < bytes.len() {
        if bytes[index] != b'%' {
            index += 1;
            continue;
        }
        out.push_str(&template[literal_start..index]);
        if bytes.get(index + 1) == Some(&b'%') {
            out.push('%');
            index += 2;
            literal_start = index;
            continue;
        }
        let Some(arg) = args.get(next_arg) else {
            return Err(invalid(format!("index {next_arg} out of range")));
        };
        if index + 1 >= bytes.len() {
            return Err(invalid("unexpected end of string".to_owned()));
        }
        let (read, clause) = parse_clause(&template[index + 1..])
            .map_err(|error| invalid(format!("could not parse formatting clause: {error}")))?;
        if let Clause::Fixed(Some(precision)) = clause
            && precision > FREE_OUTPUT
        {
            // A huge precision allocates before anything is returned: charge it first.
            ctx.budget.charge(scaled_cost(
                (precision - FREE_OUTPUT) as u64,
                STRING_TRAVERSAL,
            ))?;
        }
        let formatted = format_clause(clause, arg)
            .map_err(|error| invalid(format!("error during formatting: {error}")))?;
        // cel-go charges only the template; output beyond FREE_OUTPUT bytes is charged here so
        // that memory stays bounded by cost.
        let before = out.len().max(FREE_OUTPUT);
        out.push_str(&formatted);
        if out.len() > before {
            ctx.budget
                .charge(scaled_cost((out.len() - before) as u64, STRING_TRAVERSAL))?;
        }
        index += 1 + read;
        literal_start = index;
        next_arg += 1;
    }
    out.push_str(&template[literal_start..]);
    Ok(out)
}

fn invalid(message: String) -> EvalError {
    EvalError::Invalid(message)
}

fn type_name(value: &Value<'_>) -> String {
    value.type_of().runtime_name().to_owned()
}

fn format_clause(clause: Clause, arg: &Value<'_>) -> Result<String, String> {
    match clause {
        Clause::String => format_string(arg),
        Clause::Decimal => match arg {
            Value::Int(value) => Ok(value.to_string()),
            Value::Uint(value) => Ok(value.to_string()),
            other => Err(format!(
                "decimal clause can only be used on integers, was given {}",
                type_name(other)
            )),
        },
        Clause::Fixed(precision) => {
            let number = float_arg(arg).ok_or_else(|| {
                format!(
                    "fixed-point clause can only be used on doubles, was given {}",
                    type_name(arg)
                )
            })?;
            Ok(localized_fixed(
                number,
                precision.unwrap_or(DEFAULT_PRECISION),
            ))
        }
        Clause::Scientific(precision) => {
            let number = float_arg(arg).ok_or_else(|| {
                format!(
                    "scientific clause can only be used on doubles, was given {}",
                    type_name(arg)
                )
            })?;
            Ok(localized_scientific(
                number,
                precision.unwrap_or(DEFAULT_PRECISION),
            ))
        }
        Clause::Binary => match arg {
            Value::Int(value) => Ok(signed_radix(*value, |magnitude| format!("{magnitude:b}"))),
            Value::Uint(value) => Ok(format!("{value:b}")),
            Value::Bool(value) => Ok(if *value { "1" } else { "0" }.to_owned()),
            other => Err(format!(
                "only integers and bools can be formatted as binary, was given {}",
                type_name(other)
            )),
        },
        Clause::Hex(upper) => {
            let text = match arg {
                Value::String(text) => text
                    .as_str()
                    .bytes()
                    .map(|byte| format!("{byte:02x}"))
                    .collect(),
                Value::Bytes(bytes) => bytes.iter().map(|byte| format!("{byte:02x}")).collect(),
                Value::Int(value) => signed_radix(*value, |magnitude| format!("{magnitude:x}")),
                Value::Uint(value) => format!("{value:x}"),
                other => {
                    return Err(format!(
                        "only integers, byte buffers, and strings can be formatted as hex, was given {}",
                        type_name(other)
                    ));
                }
            };
            Ok(if upper { text.to_uppercase() } else { text })
        }
        Clause::Octal => match arg {
            Value::Int(value) => Ok(signed_radix(*value, |magnitude| format!("{magnitude:o}"))),
            Value::Uint(value) => Ok(format!("{value:o}")),
            other => Err(format!(
                "octal clause can only be used on integers, was given {}",
                type_name(other)
            )),
        },
    }
}

/// Go writes a negative number in another base as `-` and the magnitude's digits.
fn signed_radix(value: i64, digits: fn(u64) -> String) -> String {
    if value < 0 {
        format!("-{}", digits(value.unsigned_abs()))
    } else {
        digits(value as u64)
    }
}

/// A double, or one of the strings cel-go accepts in its place.
fn float_arg(value: &Value<'_>) -> Option<f64> {
    match value {
        Value::Double(number) => Some(*number),
        Value::String(text) => match text.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

fn string_error(value: &Value<'_>) -> String {
    format!(
        "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, durations, and timestamps, was given {}",
        type_name(value)
    )
}

/// `%s`: the value as CEL's `string()` writes it; lists and maps as CEL-like literals.
fn format_string(value: &Value<'_>) -> Result<String, String> {
    match value {
        Value::List(_) | Value::Map(_) => format_aggregate(value),
        Value::Null => Ok("null".to_owned()),
        Value::Bool(value) => Ok(value.to_string()),
        Value::Int(value) => Ok(value.to_string()),
        Value::Uint(value) => Ok(value.to_string()),
        Value::Double(number) => Ok(go_format_g(*number)),
        Value::String(text) => Ok(text.as_str().to_owned()),
        Value::Bytes(bytes) => String::from_utf8(bytes.to_vec())
            .map_err(|_| "invalid UTF-8 in bytes, cannot convert to string".to_owned()),
        Value::Duration(duration) => Ok(duration.to_string()),
        Value::Timestamp(timestamp) => Ok(timestamp.to_string()),
        Value::Type(kind) => Ok(kind.runtime_name().to_owned()),
        other => Err(string_error(other)),
    }
}

/// An element of a list or map inside `%s`: cel-go's `clauseForType` then `quoteForCEL`.
fn format_element(value: &Value<'_>) -> Result<String, String> {
    Ok(match value {
        Value::String(text) => go_quote(text.as_str()),
        Value::Bytes(bytes) => format!("b{}", go_quote(&String::from_utf8_lossy(bytes))),
        Value::Double(number) => {
            let text = go_fixed(*number, DEFAULT_PRECISION);
            if number.is_finite() {
                text
            } else {
                go_quote(&text)
            }
        }
        Value::Timestamp(timestamp) => format!("timestamp({})", go_quote(&timestamp.to_string())),
        Value::Duration(duration) => format!("duration({})", go_quote(&duration.to_string())),
        Value::List(_) | Value::Map(_) => format_aggregate(value)?,
        Value::Null | Value::Bool(_) | Value::Int(_) | Value::Uint(_) | Value::Type(_) => {
            format_string(value)?
        }
        other => return Err(format!("no formatting function for {}", type_name(other))),
    })
}

fn format_aggregate(value: &Value<'_>) -> Result<String, String> {
    match value {
        Value::List(list) => {
            let items = list
                .iter()
                .map(|item| format_element(&item))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(format!("[{}]", items.join(", ")))
        }
        Value::Map(map) => {
            let mut pairs = Vec::with_capacity(map.len());
            for (key, value) in map.entries() {
                let key_text = match Key::from_value(&key) {
                    Some(Key::String(text)) => go_quote(text.as_str()),
                    Some(Key::Bool(flag)) => flag.to_string(),
                    Some(Key::Int(number)) => number.to_string(),
                    Some(Key::Uint(number)) => number.to_string(),
                    _ => {
                        return Err(format!(
                            "no formatting function for map key of type {}",
                            type_name(&key)
                        ));
                    }
                };
                pairs.push((key_text, format_element(&value)?));
            }
            // Sorted by the written key, as cel-go sorts them (stably).
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            let entries: Vec<String> = pairs
                .into_iter()
                .map(|(key, value)| format!("{key}:{value}"))
                .collect();
            Ok(format!("{{{}}}", entries.join(", ")))
        }
        other => format_string(other),
    }
}

/// Go's `%.<precision>f`: NaN and infinities as Go writes them.
fn go_fixed(number: f64, precision: usize) -> String {
    if number.is_nan() {
        "NaN".to_owned()
    } else if number.is_infinite() {
        if number > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        format!("{number:.precision$}")
    }
}

/// `%.<precision>f` through the en_US printer: thousands grouped with commas, `∞` for infinity,
/// zero without a sign.
fn localized_fixed(number: f64, precision: usize) -> String {
    let number = if number == 0.0 { 0.0 } else { number };
    if number.is_nan() {
        return "NaN".to_owned();
    }
    if number.is_infinite() {
        return if number > 0.0 { "∞" } else { "-∞" }.to_owned();
    }
    let text = format!("{number:.precision$}");
    let (sign, digits) = match text.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", text.as_str()),
    };
    let (whole, fraction) = match digits.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (digits, None),
    };
    let mut grouped = String::with_capacity(text.len() + whole.len() / 3);
    grouped.push_str(sign);
    for (index, digit) in whole.chars().enumerate() {
        if index > 0 && (whole.len() - index) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    if let Some(fraction) = fraction {
        grouped.push('.');
        grouped.push_str(fraction);
    }
    grouped
}

/// What cel-go writes for `%.<precision>e`: `%<precision>e` (its precision becomes a width)
/// through the en_US printer: six decimals and a superscript power of ten (`1.234500×10⁰³`),
/// padded to `width` characters (only NaN and infinities are that short); zero has no sign.
fn localized_scientific(number: f64, width: usize) -> String {
    let number = if number == 0.0 { 0.0 } else { number };
    let text = if number.is_nan() {
        "NaN".to_owned()
    } else if number.is_infinite() {
        if number > 0.0 { "∞" } else { "-∞" }.to_owned()
    } else {
        let text = format!("{number:.6e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((text.as_str(), "0"));
        let exponent: i32 = exponent.parse().unwrap_or(0);
        let mut written = format!("{mantissa}×10");
        if exponent < 0 {
            written.push('⁻');
        }
        for digit in format!("{:02}", exponent.unsigned_abs()).chars() {
            written.push(superscript(digit));
        }
        written
    };
    let written = text.chars().count();
    if written < width {
        format!("{}{text}", " ".repeat(width - written))
    } else {
        text
    }
}

fn superscript(digit: char) -> char {
    match digit {
        '0' => '⁰',
        '1' => '¹',
        '2' => '²',
        '3' => '³',
        '4' => '⁴',
        '5' => '⁵',
        '6' => '⁶',
        '7' => '⁷',
        '8' => '⁸',
        _ => '⁹',
    }
}

/// A double as cel-go's `string()` writes it: Go's `%g` with the shortest digits that read back
/// the same (`1.5`, `1e+20`, `1.23456789e+08`, `-0`, `NaN`, `+Inf`).
pub(crate) fn go_format_g(number: f64) -> String {
    if number.is_nan() {
        return "NaN".to_owned();
    }
    if number.is_infinite() {
        return if number > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: `d.ddde±x`.
    let text = format!("{number:e}");
    let (mantissa, exponent) = text.split_once('e').unwrap_or((text.as_str(), "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    // Go's %g with the shortest digits switches to an exponent below 1e-4 and from 1e6 up.
    if !(-4..6).contains(&exponent) {
        let rest = &digits[1..];
        let point = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        return format!(
            "{sign}{}{point}e{exponent_sign}{:02}",
            &digits[..1],
            exponent.unsigned_abs()
        );
    }
    if exponent < 0 {
        return format!("{sign}0.{}{digits}", "0".repeat((-exponent - 1) as usize));
    }
    let whole = exponent as usize + 1;
    if digits.len() <= whole {
        format!("{sign}{digits}{}", "0".repeat(whole - digits.len()))
    } else {
        format!("{sign}{}.{}", &digits[..whole], &digits[whole..])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::Value;

    fn fmt(template: &str, args: Vec<Value<'static>>) -> Result<Value<'static>, crate::EvalError> {
        method("format", vec![s(template), Value::list(args)])
    }

    #[test]
    fn doubles_as_go_writes_them() {
        assert_eq!(go_format_g(1.5), "1.5");
        assert_eq!(go_format_g(1e20), "1e+20");
        assert_eq!(go_format_g(1e-7), "1e-07");
        assert_eq!(go_format_g(123456789.0), "1.23456789e+08");
        assert_eq!(go_format_g(123456.0), "123456");
        assert_eq!(go_format_g(1e6), "1e+06");
        assert_eq!(go_format_g(-0.0), "-0");
        assert_eq!(go_format_g(0.0001), "0.0001");
        assert_eq!(go_format_g(0.00001), "1e-05");
        assert_eq!(go_format_g(100.0), "100");
    }

    #[test]
    fn format_matches_kube_apiserver() {
        // Expected texts from kube-apiserver 1.35's environment.
        assert_value(
            fmt(
                "%f|%e|%.0f|%.1e|%f",
                vec![
                    Value::Double(-1234567.5),
                    Value::Double(-0.0001234),
                    Value::Double(2.5),
                    Value::Double(123456.0),
                    Value::Double(1.0e21),
                ],
            ),
            s(
                "-1,234,567.500000|-1.234000×10⁻⁰⁴|2|1.234560×10⁰⁵|1,000,000,000,000,000,000,000.000000",
            ),
        );
        assert_value(
            fmt(
                "%f|%f|%f|%e",
                vec![
                    Value::Double(f64::NAN),
                    Value::Double(f64::INFINITY),
                    s("-Infinity"),
                    Value::Double(f64::INFINITY),
                ],
            ),
            s("NaN|∞|-∞|     ∞"),
        );
        assert_value(
            fmt("%e|%e", vec![Value::Double(0.0), Value::Double(1.0e100)]),
            s("0.000000×10⁰⁰|1.000000×10¹⁰⁰"),
        );
        assert_value(
            fmt(
                "%.10f|%.3f",
                vec![Value::Double(1.0 / 3.0), Value::Double(0.0005)],
            ),
            s("0.3333333333|0.001"),
        );
        assert_value(
            fmt(
                "%s|%s|%s|%s|%s",
                vec![
                    Value::Bytes(b"abc".to_vec().into()),
                    Value::Null,
                    Value::Type(crate::Type::Int),
                    Value::Uint(1),
                    Value::Double(-0.0),
                ],
            ),
            s("abc|null|int|1|-0"),
        );
        assert_value(
            fmt(
                "%s",
                vec![Value::list(vec![
                    Value::Double(1.5),
                    Value::Double(2.0),
                    Value::Double(f64::NAN),
                ])],
            ),
            s("[1.500000, 2.000000, \"NaN\"]"),
        );
        assert_value(
            fmt("%d|%d", vec![Value::Int(-5), Value::Uint(u64::MAX)]),
            s("-5|18446744073709551615"),
        );
        assert_value(
            fmt(
                "%x|%o|%b|%X|%x",
                vec![
                    Value::Int(-255),
                    Value::Int(-255),
                    Value::Int(-5),
                    Value::Bytes(vec![0xff, 1].into()),
                    s("hello"),
                ],
            ),
            s("-ff|-377|-101|FF01|68656c6c6f"),
        );
        assert_value(
            fmt(
                "%s %s",
                vec![
                    Value::list(vec![
                        Value::Int(1),
                        s("a"),
                        Value::Bytes(b"x".to_vec().into()),
                        Value::Double(2.0),
                    ]),
                    s("x"),
                ],
            ),
            s("[1, \"a\", b\"x\", 2.000000] x"),
        );
        assert_value(fmt("100%% %s", vec![s("sure")]), s("100% sure"));
        assert_value(fmt("%.2s", vec![s("abc")]), s("abc"));
    }

    #[test]
    fn format_errors_match_kube_apiserver() {
        assert_eq!(
            error_text(fmt("%d", vec![Value::Double(1.5)])),
            "error during formatting: decimal clause can only be used on integers, was given double"
        );
        assert_eq!(
            error_text(fmt("%z", vec![Value::Int(1)])),
            "could not parse formatting clause: unrecognized formatting clause \"z\""
        );
        assert_eq!(
            error_text(fmt("%", vec![Value::Int(1)])),
            "unexpected end of string"
        );
        assert_eq!(
            error_text(fmt("%s %s", vec![Value::Int(1)])),
            "index 1 out of range"
        );
        assert_eq!(
            error_text(fmt("%.f", vec![Value::Double(1.5)])),
            "could not parse formatting clause: error while parsing precision: error while converting precision to integer: strconv.Atoi: parsing \"\": invalid syntax"
        );
        assert_eq!(
            error_text(fmt("%10f", vec![Value::Double(1.5)])),
            "could not parse formatting clause: unrecognized formatting clause \"1\""
        );
        assert_eq!(
            error_text(fmt("%s", vec![Value::Optional(None)])),
            "error during formatting: string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, durations, and timestamps, was given optional_type"
        );
    }
}
