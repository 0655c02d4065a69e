//! Type conversions: `int()`, `uint()`, `double()`, `string()`, `bytes()`, `bool()`.
//! Errors are worded as cel-go words them (its text reaches kube-apiserver's messages).

use std::sync::Arc;

use crate::env::Env;
use crate::error::EvalError;
use crate::function::no_overload;
use crate::value::{Value, format_double};

use super::{size_of, string_cost};

/// 2^63 and 2^64 as doubles: the first doubles outside int's and uint's ranges.
const TWO_63: f64 = 9_223_372_036_854_775_808.0;
const TWO_64: f64 = 18_446_744_073_709_551_616.0;

pub(crate) fn install(env: &mut Env) {
    env.function("int64_to_int64", "int(int) -> int", |_, args| {
        Ok(args[0].clone())
    });
    env.function(
        "uint64_to_int64",
        "int(uint) -> int",
        |_, args| match args[0] {
            Value::Uint(value) => i64::try_from(value)
                .map(Value::Int)
                .map_err(|_| EvalError::Overflow("integer")),
            _ => Err(no_overload("int", args)),
        },
    );
    env.function(
        "double_to_int64",
        "int(double) -> int",
        |_, args| match args[0] {
            // The bounds exclude -2^63 itself, as cel-go's checked conversion does.
            Value::Double(value) if value.is_finite() && value > -TWO_63 && value < TWO_63 => {
                Ok(Value::Int(value as i64))
            }
            Value::Double(_) => Err(EvalError::Overflow("integer")),
            _ => Err(no_overload("int", args)),
        },
    );
    env.function(
        "string_to_int64",
        "int(string) -> int",
        |_, args| match &args[0] {
            Value::String(text) => text
                .as_str()
                .parse::<i64>()
                .map(Value::Int)
                .map_err(|_| conversion_error("int")),
            _ => Err(no_overload("int", args)),
        },
    );

    env.function("uint64_to_uint64", "uint(uint) -> uint", |_, args| {
        Ok(args[0].clone())
    });
    env.function(
        "int64_to_uint64",
        "uint(int) -> uint",
        |_, args| match args[0] {
            Value::Int(value) => u64::try_from(value)
                .map(Value::Uint)
                .map_err(|_| EvalError::Overflow("unsigned integer")),
            _ => Err(no_overload("uint", args)),
        },
    );
    env.function(
        "double_to_uint64",
        "uint(double) -> uint",
        |_, args| match args[0] {
            Value::Double(value) if (0.0..TWO_64).contains(&value) => Ok(Value::Uint(value as u64)),
            Value::Double(_) => Err(EvalError::Overflow("unsigned integer")),
            _ => Err(no_overload("uint", args)),
        },
    );
    env.function(
        "string_to_uint64",
        "uint(string) -> uint",
        |_, args| match &args[0] {
            Value::String(text) => text
                .as_str()
                .parse::<u64>()
                .map(Value::Uint)
                .map_err(|_| conversion_error("uint")),
            _ => Err(no_overload("uint", args)),
        },
    );

    env.function("double_to_double", "double(double) -> double", |_, args| {
        Ok(args[0].clone())
    });
    env.function(
        "int64_to_double",
        "double(int) -> double",
        |_, args| match args[0] {
            Value::Int(value) => Ok(Value::Double(value as f64)),
            _ => Err(no_overload("double", args)),
        },
    );
    env.function(
        "uint64_to_double",
        "double(uint) -> double",
        |_, args| match args[0] {
            Value::Uint(value) => Ok(Value::Double(value as f64)),
            _ => Err(no_overload("double", args)),
        },
    );
    env.function(
        "string_to_double",
        "double(string) -> double",
        |_, args| match &args[0] {
            Value::String(text) => parse_double(text.as_str()).map(Value::Double),
            _ => Err(no_overload("double", args)),
        },
    );

    env.function("string_to_string", "string(string) -> string", |_, args| {
        Ok(args[0].clone())
    });
    env.function(
        "bool_to_string",
        "string(bool) -> string",
        |_, args| match args[0] {
            Value::Bool(value) => Ok(Value::string(if value { "true" } else { "false" })),
            _ => Err(no_overload("string", args)),
        },
    );
    env.function(
        "int64_to_string",
        "string(int) -> string",
        |_, args| match args[0] {
            Value::Int(value) => Ok(Value::string(value.to_string())),
            _ => Err(no_overload("string", args)),
        },
    );
    env.function(
        "uint64_to_string",
        "string(uint) -> string",
        |_, args| match args[0] {
            Value::Uint(value) => Ok(Value::string(value.to_string())),
            _ => Err(no_overload("string", args)),
        },
    );
    env.function(
        "double_to_string",
        "string(double) -> string",
        |_, args| match args[0] {
            Value::Double(value) => Ok(Value::string(format_double(value))),
            _ => Err(no_overload("string", args)),
        },
    );
    env.function(
        "bytes_to_string",
        "string(bytes) -> string",
        |_, args| match &args[0] {
            Value::Bytes(bytes) => std::str::from_utf8(bytes).map(Value::string).map_err(|_| {
                EvalError::Invalid("invalid UTF-8 in bytes, cannot convert to string".to_owned())
            }),
            _ => Err(no_overload("string", args)),
        },
    );
    env.set_cost("bytes_to_string", |args| string_cost(size_of(&args[0])));

    env.function("bytes_to_bytes", "bytes(bytes) -> bytes", |_, args| {
        Ok(args[0].clone())
    });
    env.function(
        "string_to_bytes",
        "bytes(string) -> bytes",
        |_, args| match &args[0] {
            Value::String(text) => Ok(Value::Bytes(Arc::from(text.as_str().as_bytes()))),
            _ => Err(no_overload("bytes", args)),
        },
    );
    env.set_cost("string_to_bytes", |args| string_cost(size_of(&args[0])));

    env.function("bool_to_bool", "bool(bool) -> bool", |_, args| {
        Ok(args[0].clone())
    });
    env.function(
        "string_to_bool",
        "bool(string) -> bool",
        |_, args| match &args[0] {
            Value::String(text) => match text.as_str() {
                "1" | "t" | "true" | "TRUE" | "True" => Ok(Value::Bool(true)),
                "0" | "f" | "false" | "FALSE" | "False" => Ok(Value::Bool(false)),
                _ => Err(conversion_error("bool")),
            },
            _ => Err(no_overload("bool", args)),
        },
    );
}

/// cel-go's text for a string that does not convert.
fn conversion_error(to: &str) -> EvalError {
    EvalError::Invalid(format!("type conversion error from 'string' to '{to}'"))
}

/// A double as Go's `strconv.ParseFloat` reads it (decimal, exponent, `inf`, `nan`).
fn parse_double(text: &str) -> Result<f64, EvalError> {
    go_parse_float(text).ok_or_else(|| conversion_error("double"))
}

/// Go's `strconv.ParseFloat(text, 64)`: decimal and hexadecimal (`0x1p3`) forms, underscores
/// between digits, `inf`/`infinity`/`nan` in any case; out of range is an error.
fn go_parse_float(text: &str) -> Option<f64> {
    let lowered = text.to_ascii_lowercase();
    let (negative, unsigned) = match lowered.as_bytes().first()? {
        b'+' => (false, &lowered[1..]),
        b'-' => (true, &lowered[1..]),
        _ => (false, &lowered[..]),
    };
    if unsigned == "inf" || unsigned == "infinity" {
        return Some(if negative {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if lowered == "nan" {
        return Some(f64::NAN);
    }
    if !underscores_ok(&lowered) {
        return None;
    }
    let digits: String = unsigned.chars().filter(|c| *c != '_').collect();
    let value = if let Some(hex) = digits.strip_prefix("0x") {
        parse_hex_float(hex)?
    } else {
        if digits.is_empty()
            || !digits
                .chars()
                .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | '+' | '-'))
        {
            return None;
        }
        digits.parse::<f64>().ok()?
    };
    if value.is_infinite() {
        return None;
    }
    Some(if negative { -value } else { value })
}

/// `mantissa p exponent` in hexadecimal (the part after `0x`); the exponent is required.
fn parse_hex_float(text: &str) -> Option<f64> {
    let (mantissa, exponent) = text.split_once('p')?;
    let exponent: i32 = exponent.parse().ok()?;
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let mut value = 0f64;
    for c in whole.chars() {
        value = value * 16.0 + f64::from(c.to_digit(16)?);
    }
    let mut scale = 1.0 / 16.0;
    for c in fraction.chars() {
        value += f64::from(c.to_digit(16)?) * scale;
        scale /= 16.0;
    }
    Some(value * 2f64.powi(exponent))
}

/// Go's `underscoreOK`: underscores only between digits (or after a base prefix).
fn underscores_ok(text: &str) -> bool {
    let bytes = text.trim_start_matches(['+', '-']).as_bytes();
    let mut saw = b'^';
    let mut index = 0;
    let mut hex = false;
    if bytes.len() >= 2 && bytes[0] == b'0' && matches!(bytes[1], b'b' | b'o' | b'x') {
        index = 2;
        saw = b'0';
        hex = bytes[1] == b'x';
    }
    while index < bytes.len() {
        let byte = bytes[index];
        index += 1;
        if byte.is_ascii_digit() || (hex && (b'a'..=b'f').contains(&byte)) {
            saw = b'0';
            continue;
        }
        if byte == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
            continue;
        }
        if saw == b'_' {
            return false;
        }
        saw = b'!';
    }
    saw != b'_'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_are_written_as_cel_go_writes_them() {
        assert_eq!(format_double(1.5), "1.5");
        assert_eq!(format_double(-0.25), "-0.25");
        assert_eq!(format_double(100.0), "100");
        assert_eq!(format_double(f64::NAN), "NaN");
        assert_eq!(format_double(f64::INFINITY), "+Inf");
        assert_eq!(format_double(0.0001), "0.0001");
        assert_eq!(format_double(0.00001), "1e-05");
        assert_eq!(format_double(1e6), "1e+06");
        assert_eq!(format_double(123456.0), "123456");
        assert_eq!(format_double(1234567.0), "1.234567e+06");
        assert_eq!(format_double(-4.5e-3), "-0.0045");
    }
}
