//! The helper functions behind rule programs, as plain Rust on JSON values.
//!
//! Programs call them through minijinja (`program` registers each under its program name);
//! natively executed templates (`native`) call them directly. Either way a template's
//! semantics live here once, with the pod spec edits in `podspec` and quantities in
//! `quantity`.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::quantity::{Decimal, Quantity};

/// Orders two values by number or quantity value: numbers and numeric strings as numbers,
/// Kubernetes quantities (`500m`, `1Gi`) as quantities. `None` when either is neither.
fn numeric_order(a: &Value, b: &Value) -> Option<Ordering> {
    let number = |v: &Value| match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok().filter(|f| f.is_finite()),
        _ => None,
    };
    if let (Some(x), Some(y)) = (number(a), number(b)) {
        return x.partial_cmp(&y);
    }
    let quantity = |v: &Value| match v {
        Value::String(s) => s.parse::<Quantity>().ok(),
        Value::Number(n) => n.to_string().parse::<Quantity>().ok(),
        _ => None,
    };
    Some(quantity(a)?.cmp(&quantity(b)?))
}

/// Compares two values as a condition does: by number or quantity value when both are
/// numeric, else strings (and booleans) by their natural order. `None` when they cannot be
/// ordered.
pub fn compare_values(a: &Value, b: &Value) -> Option<Ordering> {
    numeric_order(a, b).or(match (a, b) {
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        _ => None,
    })
}

/// `compare(a, b)`: -1, 0 or 1 with condition semantics; an error when the two cannot be
/// ordered.
pub fn compare(a: &Value, b: &Value) -> Result<i32, String> {
    match compare_values(a, b) {
        Some(Ordering::Less) => Ok(-1),
        Some(Ordering::Equal) => Ok(0),
        Some(Ordering::Greater) => Ok(1),
        None => Err(format!("cannot order {a} and {b}")),
    }
}

/// Equality as a condition sees it (`equal(a, b)`): equal JSON, or equal numbers or
/// quantities (`"1"` = `1`, `"1000m"` = `"1"`).
pub fn values_equal(a: &Value, b: &Value) -> bool {
    a == b || numeric_order(a, b) == Some(Ordering::Equal)
}

/// The items a membership test looks in: `list` must be a list.
fn list_of(list: &Value) -> Result<&[Value], String> {
    match list {
        Value::Array(items) => Ok(items),
        other => Err(format!("expected a list to look in, got {other}")),
    }
}

/// The values a membership test looks for: the items of `x` when it is a list, else `x`.
fn sought(x: &Value) -> &[Value] {
    match x {
        Value::Array(items) => items,
        other => std::slice::from_ref(other),
    }
}

/// `contains_all(list, x)`: `x` (or every item of `x`, when `x` is a list) is in `list`.
pub fn contains_all(list: &Value, x: &Value) -> Result<bool, String> {
    let list = list_of(list)?;
    Ok(sought(x)
        .iter()
        .all(|i| list.iter().any(|l| values_equal(l, i))))
}

/// `contains_none(list, x)`: `x` (or no item of `x`, when `x` is a list) is in `list`.
pub fn contains_none(list: &Value, x: &Value) -> Result<bool, String> {
    let list = list_of(list)?;
    Ok(!sought(x)
        .iter()
        .any(|i| list.iter().any(|l| values_equal(l, i))))
}

/// `valueProcess` arithmetic (`process_value(value, op, operand)`): numbers (and numeric
/// strings) as floats; a quantity multiplied or divided by a decimal stays an exact quantity.
pub fn process_value(value: &Value, op: &str, operand: &str) -> Result<Value, String> {
    let number = match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    let with: f64 = operand
        .parse()
        .map_err(|_| format!("`{operand}` is not a number"))?;
    if let Some(x) = number {
        let result = match op {
            "+" => x + with,
            "-" => x - with,
            "*" => x * with,
            "/" if with == 0.0 => return Err("division by zero".into()),
            "/" => x / with,
            other => return Err(format!("unknown operation `{other}`")),
        };
        return serde_json::Number::from_f64(result)
            .map(Value::Number)
            .ok_or_else(|| format!("{x} {op} {with} is not a finite number"));
    }
    let quantity = value
        .as_str()
        .and_then(|s| s.parse::<Quantity>().ok())
        .ok_or_else(|| format!("valueProcess needs a number or a quantity, got {value}"))?;
    let factor = match op {
        "*" => Decimal::parse(operand),
        "/" => Decimal::parse(&format!("{:.9}", 1.0 / with)).filter(|_| with != 0.0),
        _ => None,
    }
    .ok_or_else(|| {
        format!("a quantity can only be multiplied or divided by a number, not `{op} {operand}`")
    })?;
    quantity
        .scaled(factor)
        .map(|q| Value::String(q.to_string()))
        .ok_or_else(|| "quantity overflow".to_string())
}

/// The text `regex_match` tests: a string as it is; numbers, booleans and structures as JSON
/// writes them (`3`, `1.5`, `false`).
pub fn regex_text(value: &Value) -> Cow<'_, str> {
    match value {
        Value::String(s) => Cow::Borrowed(s),
        other => Cow::Owned(other.to_string()),
    }
}

/// Regular expressions compiled on first use, at most 256 kept (per program, or per natively
/// executed condition).
#[derive(Clone, Debug, Default)]
pub struct RegexCache(Arc<Mutex<HashMap<String, Arc<regex::Regex>>>>);

impl RegexCache {
    /// The compiled `pattern` (1 MiB size limit, as for condition templates).
    pub fn get(&self, pattern: &str) -> Result<Arc<regex::Regex>, String> {
        let mut map = self.0.lock().map_err(|_| "regex cache poisoned")?;
        if let Some(re) = map.get(pattern) {
            return Ok(re.clone());
        }
        let re = Arc::new(
            regex::RegexBuilder::new(pattern)
                .size_limit(1 << 20)
                .build()
                .map_err(|e| format!("invalid regular expression `{pattern}`: {e}"))?,
        );
        if map.len() < 256 {
            map.insert(pattern.to_string(), re.clone());
        }
        Ok(re)
    }
}

/// `with_keys(map, keys)`: `map` (an object, or null for none) with the entries of `keys` set;
/// existing keys keep their place, new ones follow in order.
pub fn with_keys(map: Value, keys: Value) -> Result<Value, String> {
    let mut base = match map {
        Value::Object(m) => m,
        Value::Null => serde_json::Map::new(),
        other => {
            return Err(format!(
                "with_keys: expected a map, got {}",
                crate::document::type_name(&other)
            ));
        }
    };
    match keys {
        Value::Object(add) => base.extend(add),
        other => {
            return Err(format!(
                "with_keys: expected a map of keys, got {}",
                crate::document::type_name(&other)
            ));
        }
    }
    Ok(Value::Object(base))
}

/// `without_keys(map, key_or_list, ...)`: `map` (an object, or null for none) without the
/// keys given, each argument a key or a list of keys.
pub fn without_keys(map: Value, keys: &[Value]) -> Result<Value, String> {
    let mut base = match map {
        Value::Object(m) => m,
        Value::Null => serde_json::Map::new(),
        other => {
            return Err(format!(
                "without_keys: expected a map, got {}",
                crate::document::type_name(&other)
            ));
        }
    };
    for key in keys {
        match key {
            Value::String(k) => {
                base.shift_remove(k);
            }
            Value::Array(list) => {
                for k in list.iter().filter_map(Value::as_str) {
                    base.shift_remove(k);
                }
            }
            _ => return Err("without_keys: keys must be strings".to_string()),
        }
    }
    Ok(Value::Object(base))
}
