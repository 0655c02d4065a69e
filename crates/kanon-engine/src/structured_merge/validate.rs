//! An apply configuration checked against the kind's schema as structured-merge-diff converts
//! it to a typed value, in its words: a field the type does not declare (which ends the check
//! of that object), a value of the wrong kind (`.spec.hostNetwork: expected boolean, got
//! &{x}`), items of a keyed list or set that cannot be told apart (`.spec.containers[name="app"]
//! .env: duplicate entries for key [name="C"]`), paths naming list items by key as it does.
//! And the conversion of the merged object to the kind's Go type that follows, which refuses a
//! fraction in an integer field.

use std::collections::HashSet;

use kanon_schema::{ListType, Schema, Shape, Type};
use serde_json::Value;

use super::go_format::{plain, sharp, type_name};
use super::{Node, item_key, node};

/// Adds to `errors` what is wrong with `value` as a `ty` at `path`; `nested` when the value
/// lies inside a CEL list or map rather than at an `Object` field (which changes how Go prints
/// it).
pub(super) fn check(
    schema: &Schema,
    ty: &Type,
    value: &Value,
    path: &str,
    nested: bool,
    errors: &mut Vec<String>,
) {
    let (resolved, _) = schema.deref(ty).unwrap_or((ty, None));
    match node(schema, ty) {
        Node::Untyped => {}
        Node::Struct { fields, .. } => match value {
            Value::Object(map) => {
                for (key, child) in map {
                    let at = format!("{path}.{key}");
                    match fields.get(key) {
                        Some(field) => check(schema, field, child, &at, false, errors),
                        None => {
                            // structured-merge-diff stops reading the object there.
                            errors.push(format!("{at}: field not declared in schema"));
                            break;
                        }
                    }
                }
            }
            other => errors.push(format!("{path}: expected map, got &{{{}}}", plain(other))),
        },
        Node::Map { values, .. } => match value {
            Value::Object(map) => {
                for (key, child) in map {
                    check(
                        schema,
                        values,
                        child,
                        &format!("{path}.{key}"),
                        true,
                        errors,
                    );
                }
            }
            other => errors.push(format!("{path}: expected map, got &{{{}}}", plain(other))),
        },
        Node::List(list) => {
            let Value::Array(items) = value else {
                errors.push(format!("{path}: expected list, got &{{{}}}", plain(value)));
                return;
            };
            let associative = matches!(list.list_type, Some(ListType::Map(_) | ListType::Set));
            let mut seen = HashSet::new();
            for (index, item) in items.iter().enumerate() {
                let element = if associative {
                    match item_key(schema, list, item) {
                        Ok(key) => key,
                        Err(error) => {
                            // Without its key an item's errors cannot be placed: the rest of
                            // the list goes unchecked.
                            errors.push(format!("{path}: element {index}: {error}"));
                            return;
                        }
                    }
                } else {
                    format!("[{index}]")
                };
                if associative && !seen.insert(element.clone()) {
                    errors.push(format!("{path}: duplicate entries for key {element}"));
                }
                check(
                    schema,
                    &list.items,
                    item,
                    &format!("{path}{element}"),
                    true,
                    errors,
                );
            }
        }
        Node::Leaf => {
            if let Some(message) = scalar_error(resolved, value, nested) {
                errors.push(format!("{path}: {message}"));
            }
        }
    }
}

/// structured-merge-diff's error for a scalar of the wrong kind. Its scalars are numbers (an
/// integer field takes a fraction here; the conversion to the Go type refuses it after),
/// strings, booleans, and untyped ones (int-or-string, quantities) that take any of those.
fn scalar_error(ty: &Type, value: &Value, nested: bool) -> Option<String> {
    match (&ty.shape, value) {
        (Shape::Boolean, Value::Bool(_))
        | (Shape::Integer | Shape::Number, Value::Number(_))
        | (Shape::String, Value::String(_)) => None,
        (Shape::Boolean, other) => Some(format!("expected boolean, got &{{{}}}", plain(other))),
        (Shape::Integer | Shape::Number, other) => Some(format!(
            "expected numeric (int or float), got {}",
            type_name(other, nested)
        )),
        (Shape::String, other) => Some(format!(
            "expected string, got &value.valueUnstructured{{Value:{}}}",
            sharp(other, nested)
        )),
        (_, Value::Number(_) | Value::String(_) | Value::Bool(_)) => None,
        (_, other) => Some(format!("expected any scalar, got &{{{}}}", plain(other))),
    }
}

/// The Go integer type of the first integer field of `value` (a `ty`) that holds a fraction,
/// which the conversion of a merged object to its Go type refuses (`cannot convert float64 to
/// int32`).
pub(crate) fn fractional_integer(
    schema: &Schema,
    ty: &Type,
    value: &Value,
) -> Option<&'static str> {
    let (resolved, _) = schema.deref(ty).unwrap_or((ty, None));
    match (node(schema, ty), value) {
        (Node::Struct { fields, .. }, Value::Object(map)) => map.iter().find_map(|(key, child)| {
            fields
                .get(key)
                .and_then(|field| fractional_integer(schema, field, child))
        }),
        (Node::Map { values, .. }, Value::Object(map)) => map
            .values()
            .find_map(|child| fractional_integer(schema, values, child)),
        (Node::List(list), Value::Array(items)) => items
            .iter()
            .find_map(|item| fractional_integer(schema, &list.items, item)),
        (Node::Leaf, Value::Number(number)) if matches!(resolved.shape, Shape::Integer) => {
            let whole = number.is_i64()
                || number.is_u64()
                || number.as_f64().is_some_and(|f| f.fract() == 0.0);
            (!whole).then_some(if resolved.format.as_deref() == Some("int32") {
                "int32"
            } else {
                "int64"
            })
        }
        _ => None,
    }
}
