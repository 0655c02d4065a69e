//! Structured templates rendered into rule programs, once per policy generation.
//!
//! The programs are ordinary minijinja programs (what `kanon render` prints and the policy's
//! status shows), built only from the helpers any author may call. Values that come from the
//! policy are embedded as literals; referenced values arrive at run time as `refs.value`
//! (override `valueRef`), `refs.data` and `refs.value` (condition `dataRef`/`valueRef`).

mod condition;
mod overrides;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kanon_api::ConstantValue;
use serde_json::Value;

use crate::error::FieldError;
use crate::quantity::Decimal;

pub use condition::compile_condition;
pub use overrides::compile_override;

/// A JSON value as a minijinja literal (JSON syntax, with `none` for `null`).
pub fn literal(value: &Value) -> String {
    match value {
        Value::Null => "none".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(_) => value.to_string(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(literal).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", Value::String(k.clone()), literal(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Parses a decimal written as a number or a string (`0.5`, `"0.5"`).
pub(super) fn decimal_of(text: &str) -> Option<Decimal> {
    Decimal::parse(text.trim())
}

/// The one value a [`ConstantValue`] holds, as JSON; an error unless exactly one field is set.
pub fn constant_json(
    value: &ConstantValue,
    field: &str,
    errors: &mut Vec<FieldError>,
) -> Option<Value> {
    let mut found: Vec<(&str, Value)> = Vec::new();
    let number = |text: String, errors: &mut Vec<FieldError>, at: String| -> Value {
        match text
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
        {
            Some(n) if decimal_of(&text).is_some() => Value::Number(n),
            _ => {
                errors.push(FieldError::new(
                    at,
                    format!("`{text}` is not a decimal number"),
                ));
                Value::Null
            }
        }
    };
    if let Some(s) = &value.string {
        found.push(("string", Value::String(s.clone())));
    }
    if let Some(i) = value.integer {
        found.push(("integer", Value::from(i)));
    }
    if let Some(f) = &value.float {
        found.push(("float", number(f.text(), errors, format!("{field}.float"))));
    }
    if let Some(b) = value.boolean {
        found.push(("boolean", Value::Bool(b)));
    }
    if let Some(list) = &value.string_slice {
        found.push(("stringSlice", Value::from(list.clone())));
    }
    if let Some(list) = &value.integer_slice {
        found.push(("integerSlice", Value::from(list.clone())));
    }
    if let Some(list) = &value.float_slice {
        let items = list
            .iter()
            .enumerate()
            .map(|(i, f)| number(f.text(), errors, format!("{field}.floatSlice[{i}]")))
            .collect();
        found.push(("floatSlice", Value::Array(items)));
    }
    if let Some(map) = &value.string_map {
        found.push((
            "stringMap",
            Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect(),
            ),
        ));
    }
    match found.len() {
        1 => found.pop().map(|(_, v)| v),
        0 => {
            errors.push(FieldError::new(field, "set one of string, integer, float, boolean, stringSlice, integerSlice, floatSlice, stringMap"));
            None
        }
        _ => {
            let names: Vec<&str> = found.iter().map(|(n, _)| *n).collect();
            errors.push(FieldError::new(
                field,
                format!("set only one value, not {}", names.join(" and ")),
            ));
            None
        }
    }
}

/// The operand of a `valueProcess`: an integer, a decimal string or a percentage.
pub(super) fn operand(
    with: &IntOrString,
    field: &str,
    errors: &mut Vec<FieldError>,
) -> Option<String> {
    match with {
        IntOrString::Int(i) => Some(i.to_string()),
        IntOrString::String(s) => {
            let s = s.trim();
            let (text, percent) = match s.strip_suffix('%') {
                Some(t) => (t.trim(), true),
                None => (s, false),
            };
            match decimal_of(text) {
                Some(d) if percent => Some(format!("{}", d.to_f64() / 100.0)),
                Some(_) => Some(text.to_string()),
                None => {
                    errors.push(FieldError::new(
                        field,
                        format!("`{s}` is not an integer, a decimal or a percentage"),
                    ));
                    None
                }
            }
        }
    }
}
