//! The helpers every program may call (documented in the README's program reference): JSON
//! pointers and paths, quantities, base64, map edits, pod spec edits, condition comparisons,
//! regular expressions and `fail`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use minijinja::value::{Rest, Serde};
use minijinja::{Environment, Error, ErrorKind, Value};

use super::error::FAIL_MARK;
use super::json::JsonNode;
use crate::helpers::{process_value, values_equal};
use crate::quantity::{Decimal, Quantity};

/// The value at a JSON pointer inside a program value, navigated in place (no conversion of
/// the whole object); undefined when absent or null.
fn pointer_get(value: &Value, pointer: &str) -> Value {
    use minijinja::value::ValueKind;
    if pointer.is_empty() {
        return value.clone();
    }
    // Checked by the caller: a pointer that is not empty starts with `/`.
    let Some(rest) = pointer.strip_prefix('/') else {
        return Value::UNDEFINED;
    };
    let mut current = value.clone();
    for token in rest.split('/') {
        let token = token.replace("~1", "/").replace("~0", "~");
        let key = match current.kind() {
            ValueKind::Map => Value::from(token),
            ValueKind::Seq => match token.parse::<usize>() {
                Ok(i) => Value::from(i),
                Err(_) => return Value::UNDEFINED,
            },
            _ => return Value::UNDEFINED,
        };
        match current.get_item(&key) {
            Ok(next) if !next.is_undefined() && !next.is_none() => current = next,
            _ => return Value::UNDEFINED,
        }
    }
    current
}

/// A helper's JSON result as a program value, `null` as `none`.
fn json_or_none(result: serde_json::Value) -> Value {
    if result.is_null() {
        Value::from(())
    } else {
        Value::from(Serde(result))
    }
}

pub(super) fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.into())
}

fn to_json(value: &Value) -> Result<serde_json::Value, Error> {
    if let Some(node) = value.downcast_object_ref::<JsonNode>() {
        // What a text converts is charged to it like what it reads (see `meter`).
        let json = node.node().clone();
        super::meter::charge_json(&json);
        return Ok(json);
    }
    serde_json::to_value(value).map_err(|e| invalid(format!("cannot convert to JSON: {e}")))
}

fn parse_quantity(value: &Value) -> Result<Quantity, Error> {
    let text = match value.as_str() {
        Some(s) => s.to_string(),
        None if value.is_number() => value.to_string(),
        None => {
            return Err(invalid(format!(
                "expected a quantity, got {}",
                value.kind()
            )));
        }
    };
    text.parse::<Quantity>().map_err(|e| invalid(e.to_string()))
}

/// JSONPaths parsed by programs, cached per program environment.
type JsonPathCache = Arc<Mutex<HashMap<String, Arc<jsonpath_rust::parser::model::JpQuery>>>>;

fn cached_jsonpath(
    cache: &JsonPathCache,
    path: &str,
) -> Result<Arc<jsonpath_rust::parser::model::JpQuery>, Error> {
    let mut map = cache
        .lock()
        .map_err(|_| invalid("JSONPath cache poisoned"))?;
    if let Some(q) = map.get(path) {
        return Ok(q.clone());
    }
    let query = Arc::new(
        crate::jsonpath::parse_jsonpath(path)
            .map_err(|e| invalid(format!("invalid JSONPath `{path}`: {e}")))?,
    );
    if map.len() < 256 {
        map.insert(path.to_string(), query.clone());
    }
    Ok(query)
}

/// The helpers every program may call. Documented in the README's program reference.
pub(super) fn add_helpers(env: &mut Environment<'static>) {
    // jsonpath(value, "$.spec.containers[*].image") → list of matches.
    // pointer(value, "/a/b~1c") → the value there, or undefined; an error for text that is
    // not a JSON pointer (`resources.limits.memory`), which would otherwise read as absent.
    env.add_function(
        "pointer",
        |value: Value, pointer: String| -> Result<Value, Error> {
            crate::pointer::check(&pointer).map_err(|e| invalid(format!("pointer(): {e}")))?;
            Ok(pointer_get(&value, &pointer))
        },
    );
    // "a/b" | escape_pointer → "a~1b": a map key as a JSON pointer token.
    env.add_filter("escape_pointer", |key: String| {
        crate::pointer::escape(&key).into_owned()
    });
    // quantity("500m") → the value as a number (cores, bytes).
    env.add_function("quantity", |value: Value| -> Result<f64, Error> {
        Ok(parse_quantity(&value)?.to_f64())
    });
    // compare_quantities(a, b) → -1, 0 or 1.
    env.add_function(
        "compare_quantities",
        |a: Value, b: Value| -> Result<i32, Error> {
            Ok(match parse_quantity(&a)?.cmp(&parse_quantity(&b)?) {
                std::cmp::Ordering::Less => -1,
                std::cmp::Ordering::Equal => 0,
                std::cmp::Ordering::Greater => 1,
            })
        },
    );
    // scale_quantity("500m", "0.25") → "125m", exact and canonical.
    env.add_function(
        "scale_quantity",
        |value: Value, factor: Value| -> Result<String, Error> {
            let q = parse_quantity(&value)?;
            let text = factor
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| factor.to_string());
            let d = Decimal::parse(&text)
                .ok_or_else(|| invalid(format!("`{text}` is not a decimal factor")))?;
            q.scaled(d)
                .map(|r| r.to_string())
                .ok_or_else(|| invalid("quantity overflow"))
        },
    );
    env.add_filter("b64encode", |s: String| {
        base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
    });
    env.add_filter("b64decode", |s: String| -> Result<String, Error> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .map_err(|e| invalid(format!("invalid base64: {e}")))?;
        String::from_utf8(bytes).map_err(|_| invalid("decoded base64 is not UTF-8 text"))
    });
    // {{ fail("message") }} stops the program with an evaluation error.
    env.add_function("fail", |message: String| -> Result<Value, Error> {
        Err(invalid(format!("{FAIL_MARK}{message}")))
    });
    // with_keys(map, {"k": "v"}) → a copy of map with those keys set.
    env.add_function(
        "with_keys",
        |map: Value, keys: Value| -> Result<Value, Error> {
            crate::helpers::with_keys(to_json(&map)?, to_json(&keys)?)
                .map(|v| Value::from(Serde(v)))
                .map_err(invalid)
        },
    );
    // without_keys(map, ["k", ...]) → a copy of map without those keys.
    env.add_function(
        "without_keys",
        |map: Value, keys: Rest<Value>| -> Result<Value, Error> {
            let map = to_json(&map)?;
            let keys = keys.iter().map(to_json).collect::<Result<Vec<_>, _>>()?;
            crate::helpers::without_keys(map, &keys)
                .map(|v| Value::from(Serde(v)))
                .map_err(invalid)
        },
    );
    // with_defaults(map, {"k": "v"}) → a copy of map with those keys set where it has none.
    env.add_function(
        "with_defaults",
        |map: Value, keys: Value| -> Result<Value, Error> {
            crate::helpers::with_defaults(to_json(&map)?, to_json(&keys)?)
                .map(|v| Value::from(Serde(v)))
                .map_err(invalid)
        },
    );
    // field_op(doc, base, "/a/b", value, op) → the operation that sets (add, replace,
    // default) or removes (remove) the field at /a/b of doc (found at the pointer base),
    // creating missing parents; none when nothing changes.
    env.add_function(
        "field_op",
        |doc: Value,
         base: String,
         path: String,
         value: Value,
         op: String|
         -> Result<Value, Error> {
            let edit = crate::podspec::Edit::parse(&op).map_err(invalid)?;
            let value = if value.is_undefined() || value.is_none() {
                None
            } else {
                Some(to_json(&value)?)
            };
            let found =
                crate::helpers::field_op(&to_json(&doc)?, &base, &path, value.as_ref(), edit)
                    .map_err(invalid)?;
            Ok(found.map_or(Value::from(()), |op| Value::from(Serde(op.into_json()))))
        },
    );
    // pod_spec_pointer(object) → where the kind keeps its pod spec, or undefined.
    env.add_function(
        "pod_spec_pointer",
        |object: Value| -> Result<Value, Error> {
            let json = to_json(&object)?;
            Ok(crate::podspec::pod_spec_pointer(&json)
                .map(Value::from)
                .unwrap_or(Value::UNDEFINED))
        },
    );
    // Pod spec edits used by override templates; see the podspec module.
    env.add_function(
        "resources_with",
        |current: Value, template: Value, op: String| -> Result<Value, Error> {
            let edit = crate::podspec::Edit::parse(&op).map_err(invalid)?;
            Ok(Value::from(Serde(crate::podspec::resources_with(
                &to_json(&current)?,
                &to_json(&template)?,
                edit,
            ))))
        },
    );
    env.add_function(
        "oversold",
        |current: Value, factors: Value, op: String| -> Result<Value, Error> {
            let edit = crate::podspec::Edit::parse(&op).map_err(invalid)?;
            crate::podspec::oversold(&to_json(&current)?, &to_json(&factors)?, edit)
                .map(|v| Value::from(Serde(v)))
                .map_err(invalid)
        },
    );
    env.add_function(
        "tolerations_with",
        |current: Value, template: Value, op: String| -> Result<Value, Error> {
            let edit = crate::podspec::Edit::parse(&op).map_err(invalid)?;
            let result =
                crate::podspec::tolerations_with(&to_json(&current)?, &to_json(&template)?, edit);
            Ok(json_or_none(result))
        },
    );
    env.add_function(
        "affinity_with",
        |current: Value, template: Value, op: String| -> Result<Value, Error> {
            let edit = crate::podspec::Edit::parse(&op).map_err(invalid)?;
            let result =
                crate::podspec::affinity_with(&to_json(&current)?, &to_json(&template)?, edit);
            Ok(json_or_none(result))
        },
    );
    // equal(a, b): condition equality (numbers and quantities by value).
    env.add_function("equal", |a: Value, b: Value| -> Result<bool, Error> {
        Ok(values_equal(&to_json(&a)?, &to_json(&b)?))
    });
    // contains_all(list, x): x (or every item of x, when x is a list) is in list.
    env.add_function(
        "contains_all",
        |list: Value, x: Value| -> Result<bool, Error> {
            crate::helpers::contains_all(&to_json(&list)?, &to_json(&x)?).map_err(invalid)
        },
    );
    // contains_none(list, x): x (or no item of x, when x is a list) is in list.
    env.add_function(
        "contains_none",
        |list: Value, x: Value| -> Result<bool, Error> {
            crate::helpers::contains_none(&to_json(&list)?, &to_json(&x)?).map_err(invalid)
        },
    );
    // process_value(value, "+", "0.5"): valueProcess arithmetic; quantities stay exact under
    // * and /.
    env.add_function(
        "process_value",
        |value: Value, op: String, operand: String| -> Result<Value, Error> {
            process_value(&to_json(&value)?, &op, &operand)
                .map(|v| Value::from(Serde(v)))
                .map_err(invalid)
        },
    );
    // compare(a, b) → -1, 0, 1 with condition semantics (numbers, quantities, text); fails
    // when the two cannot be ordered.
    env.add_function("compare", |a: Value, b: Value| -> Result<i32, Error> {
        crate::helpers::compare(&to_json(&a)?, &to_json(&b)?).map_err(invalid)
    });
    // jsonpath(value, "$.spec.containers[*].image") → list of matches; each path is parsed
    // once per program.
    let paths: JsonPathCache = Arc::default();
    env.add_function(
        "jsonpath",
        move |value: Value, path: String| -> Result<Value, Error> {
            let query = cached_jsonpath(&paths, &path)?;
            // A document passed in from the context is queried in place.
            let converted;
            let json = match value.downcast_object_ref::<JsonNode>() {
                Some(node) => node.node(),
                None => {
                    converted = to_json(&value)?;
                    &converted
                }
            };
            // Selected in place and copied within the bound of one JSONPath, as references
            // are (a descent would otherwise copy each subtree once per ancestor).
            let found = crate::jsonpath::select(&query, json)
                .and_then(|found| crate::jsonpath::copied(&found))
                .map_err(|e| invalid(format!("JSONPath `{path}`: {e}")))?;
            Ok(Value::from(Serde(found)))
        },
    );
    let cache = crate::helpers::RegexCache::default();
    // regex_match(text, pattern): text as is; numbers and booleans as JSON writes them
    // (`3`, `1.5`, `false`), never minijinja's `False`.
    env.add_function(
        "regex_match",
        move |text: Value, pattern: String| -> Result<bool, Error> {
            let converted;
            let text = match text.as_str() {
                Some(s) => s,
                None => {
                    converted = crate::helpers::regex_text(&to_json(&text)?).into_owned();
                    converted.as_str()
                }
            };
            Ok(cache.get(&pattern).map_err(invalid)?.is_match(text))
        },
    );
}
