//! The first error kube-apiserver's JSON decoding of an object into its kind's Go type meets,
//! in its words: a value of the wrong JSON type (`json: cannot unmarshal number into Go struct
//! field ObjectMeta.metadata.labels of type string`), a number that does not fit an integer
//! field (`cannot unmarshal number 1.5 into ... of type int32`), a quantity or a time that does
//! not parse (apimachinery's and Go's own messages).
//!
//! Go's decoder walks the document in order and keeps the first such error; so does this.
//! Fields the type does not declare are not errors here (strict decoding reports them, after).

use kanon_schema::{GoShape, GoStruct, GoTypes, Schema, Shape, Type, go_shape, without_pointer};
use serde_json::{Map, Value};

use super::go_time;
use super::{MICRO_TIME, Place, QUANTITY, TIME, json_number_text};

/// Where the decoder is: the struct whose field it read last (Go names errors after it) and
/// the JSON field names from the root, with the embedded structs fields are promoted from.
struct Context<'s> {
    structure: &'s str,
    fields: Vec<&'s str>,
}

/// The first decoding error of `value` at `place`, or `None`.
pub(super) fn first_error<'s>(
    schema: &'s Schema,
    go: &'s GoTypes,
    place: &Place<'s>,
    value: &Value,
) -> Option<Decoded> {
    let mut context = Context {
        structure: place.structure,
        fields: place.fields.clone(),
    };
    let mut decoder = Decoder {
        schema,
        go,
        saved: None,
    };
    match decoder.value(place.go_type, place.ty, value, &mut context) {
        Some(message) => Some(Decoded::Immediate(message)),
        None => decoder.saved.map(Decoded::Saved),
    }
}

/// A decoding error, as Go's decoder meets it: one a type decodes itself with (a quantity, a
/// time, an int-or-string) ends decoding at once and is the answer; a value of the wrong JSON
/// type is kept, decoding goes on, and the first kept is the answer when nothing ends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decoded {
    Immediate(String),
    Saved(String),
}

struct Decoder<'s> {
    schema: &'s Schema,
    go: &'s GoTypes,
    /// The first value of the wrong JSON type.
    saved: Option<String>,
}

/// The JSON type name Go's errors use.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn mismatch(found: &str, context: &Context<'_>, go_type: &str) -> Option<String> {
    Some(format!(
        "json: cannot unmarshal {found} into Go struct field {}.{} of type {go_type}",
        context.structure,
        context.fields.join(".")
    ))
}

/// The Go type Go's errors name for a scalar OpenAPI type, when the Go facts do not say.
fn scalar_go_name(ty: &Type) -> &'static str {
    match (&ty.shape, ty.format.as_deref()) {
        (Shape::Boolean, _) => "bool",
        (Shape::Integer, Some("int32")) => "int32",
        (Shape::Integer, _) => "int64",
        (Shape::Number, _) => "float64",
        _ => "string",
    }
}

/// The range of a Go integer type, by its name (`int32`), or by the OpenAPI format when the
/// type is a named one.
fn integer_range(go_type: &str, ty: &Type) -> (i128, i128) {
    match go_type {
        "int8" => (i8::MIN.into(), i8::MAX.into()),
        "int16" => (i16::MIN.into(), i16::MAX.into()),
        "int32" => (i32::MIN.into(), i32::MAX.into()),
        "uint8" => (0, u8::MAX.into()),
        "uint16" => (0, u16::MAX.into()),
        "uint32" => (0, u32::MAX.into()),
        "uint" | "uint64" => (0, u64::MAX.into()),
        "int" | "int64" => (i64::MIN.into(), i64::MAX.into()),
        _ if ty.format.as_deref() == Some("int32") => (i32::MIN.into(), i32::MAX.into()),
        _ => (i64::MIN.into(), i64::MAX.into()),
    }
}

impl<'s> Decoder<'s> {
    /// Keeps the first type error and goes on, as Go's decoder does.
    fn save(&mut self, error: Option<String>) -> Option<String> {
        if self.saved.is_none() {
            self.saved = error;
        }
        None
    }

    fn structure(
        &mut self,
        structure: &'s GoStruct,
        ty: &'s Type,
        map: &Map<String, Value>,
        context: &mut Context<'s>,
    ) -> Option<String> {
        let Shape::Object(object) = &ty.shape else {
            return None;
        };
        // The patch library writes the objects it touched with sorted keys (a Go map), and
        // the decoder reads them in that order.
        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (key, value) in entries {
            let (Some(field), Some(field_type)) = (structure.field(key), object.fields.get(key))
            else {
                continue;
            };
            let depth = context.fields.len();
            let outer = context.structure;
            context.fields.extend(field.via.iter().map(String::as_str));
            context.fields.push(field.name.as_str());
            context.structure = structure.short_name();
            let error = self.value(Some(&field.go_type), field_type, value, context);
            context.fields.truncate(depth);
            context.structure = outer;
            if error.is_some() {
                return error;
            }
        }
        None
    }

    fn value(
        &mut self,
        go_type: Option<&'s str>,
        ty: &'s Type,
        value: &Value,
        context: &mut Context<'s>,
    ) -> Option<String> {
        // null leaves a field at its zero value (a pointer, list or map nil): never an error.
        if value.is_null() {
            return None;
        }
        let (ty, name) = self.schema.deref(ty)?;
        let go_type = go_type.map(without_pointer);
        if matches!(ty.shape, Shape::IntOrString) {
            // IntOrString reads a string as is, anything else as an int32.
            return match value {
                Value::String(_) => None,
                other => self.integer(other, "int32", ty, context),
            };
        }
        match name {
            Some(QUANTITY) => return quantity_error(value),
            Some(TIME) | Some(MICRO_TIME) => {
                let Value::String(text) = value else {
                    return mismatch(kind(value), context, "string");
                };
                let layout = if name == Some(TIME) {
                    go_time::RFC3339
                } else {
                    go_time::RFC3339_MICRO
                };
                return go_time::parse_error(text, layout);
            }
            Some(other) if self.go.get(other).is_some_and(|s| s.custom) => return None,
            _ => {}
        }
        let shape = go_type.map(go_shape);
        match &ty.shape {
            Shape::Object(_) => {
                let Value::Object(map) = value else {
                    return self.save(mismatch(kind(value), context, go_type.unwrap_or("struct")));
                };
                let structure = name.and_then(|name| self.go.get(name))?;
                self.structure(structure, ty, map, context)
            }
            Shape::List(list) => {
                let go_name = go_type.unwrap_or("[]interface {}");
                if go_name == "[]byte" || go_name == "[]uint8" {
                    return match value {
                        Value::String(_) | Value::Array(_) => None,
                        other => self.save(mismatch(kind(other), context, "[]uint8")),
                    };
                }
                let Value::Array(items) = value else {
                    return self.save(mismatch(kind(value), context, go_name));
                };
                let item_go = match shape {
                    Some(GoShape::Slice(items)) => Some(items),
                    _ => None,
                };
                items
                    .iter()
                    .find_map(|item| self.value(item_go, &list.items, item, context))
            }
            Shape::Map(values) => {
                let Value::Object(map) = value else {
                    return self.save(mismatch(
                        kind(value),
                        context,
                        go_type.unwrap_or("map[string]string"),
                    ));
                };
                let value_go = match shape {
                    Some(GoShape::Map(values)) => Some(values),
                    _ => None,
                };
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                entries
                    .into_iter()
                    .find_map(|(_, item)| self.value(value_go, values, item, context))
            }
            Shape::String => match value {
                Value::String(_) => None,
                other => self.save(mismatch(kind(other), context, go_type.unwrap_or("string"))),
            },
            Shape::Boolean => match value {
                Value::Bool(_) => None,
                other => self.save(mismatch(kind(other), context, go_type.unwrap_or("bool"))),
            },
            Shape::Number => match value {
                Value::Number(_) => None,
                other => self.save(mismatch(kind(other), context, go_type.unwrap_or("float64"))),
            },
            Shape::Integer => {
                let go_name = go_type.unwrap_or_else(|| scalar_go_name(ty));
                let error = self.integer(value, go_name, ty, context);
                self.save(error)
            }
            Shape::IntOrString | Shape::Any | Shape::OneOf(_) | Shape::Ref(_) => None,
        }
    }

    fn integer(
        &self,
        value: &Value,
        go_name: &str,
        ty: &Type,
        context: &Context<'_>,
    ) -> Option<String> {
        let Value::Number(number) = value else {
            return mismatch(kind(value), context, go_name);
        };
        let text = json_number_text(number);
        let (low, high) = integer_range(go_name, ty);
        // Go parses the literal as written: `2.0` is written `2` by the apiserver's encoder,
        // `1.5` and `1e+21` do not parse as integers.
        match text.parse::<i128>() {
            Ok(n) if (low..=high).contains(&n) => None,
            _ => mismatch(&format!("number {text}"), context, go_name),
        }
    }
}

/// apimachinery's `Quantity.UnmarshalJSON`: a string (quotes removed) or any other literal,
/// parsed as a quantity; its error is the parser's, without a field.
fn quantity_error(value: &Value) -> Option<String> {
    let text = match value {
        Value::String(text) => text.trim().to_owned(),
        Value::Number(number) => json_number_text(number),
        // An object, list or boolean is its JSON text, which never parses.
        other => other.to_string(),
    };
    kanon_cel::library::quantity::parse(&text).err()
}
