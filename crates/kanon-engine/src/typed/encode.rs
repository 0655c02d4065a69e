//! A decoded value written back as Go's encoder writes the kind's Go type, for the fields a
//! mutation wrote: `omitempty` fields that are empty are left out, `null` in a field that is
//! not a pointer, list or map becomes its zero value, integers are integers, quantities and
//! times canonical.
//!
//! A struct's fields the value lacks are written as Go writes a zero field: a struct held by
//! value as its zero (`resources: {}`, `creationTimestamp: null`), a field that is not
//! `omitempty` as its zero value; fields the type does not declare are kept (strict decoding
//! refuses them before).

use kanon_schema::{GoShape, GoStruct, GoTypes, Object, Schema, Shape, Type, go_shape};
use serde_json::{Map, Value};

use super::{MICRO_TIME, Place, QUANTITY, TIME, json_number_text};

/// `value` at `place` written back: `None` when the field is left out.
pub(super) fn written_back(
    schema: &Schema,
    go: &GoTypes,
    place: &Place<'_>,
    value: &Value,
) -> Option<Value> {
    let encoder = Encoder { schema, go };
    let written = encoder.value(place.go_type, place.ty, value);
    (!(place.omitempty && encoder.empty(place.go_type, place.ty, &written))).then_some(written)
}

/// Whether Go's `omitempty` leaves `value` at `place` out (`place` being `omitempty`).
pub(super) fn omitted(schema: &Schema, go: &GoTypes, place: &Place<'_>, value: &Value) -> bool {
    Encoder { schema, go }.empty(place.go_type, place.ty, value)
}

struct Encoder<'s> {
    schema: &'s Schema,
    go: &'s GoTypes,
}

impl Encoder<'_> {
    /// Whether Go's `omitempty` leaves the value out: `false`, `0`, `""`, a nil pointer, list or
    /// map, an empty list or map. A struct (Quantity and Time included) never is.
    fn empty(&self, go_type: Option<&str>, ty: &Type, value: &Value) -> bool {
        if go_type.is_some_and(|go| go.starts_with('*')) {
            return value.is_null();
        }
        let Some((ty, name)) = self.schema.deref(ty) else {
            return false;
        };
        if name.is_some_and(|name| self.go.get(name).is_some()) {
            return false;
        }
        match (&ty.shape, value) {
            (Shape::Object(_) | Shape::IntOrString, _) => false,
            (_, Value::Null) => true,
            (_, Value::Bool(b)) => !b,
            (_, Value::Number(n)) => n.as_f64() == Some(0.0),
            (_, Value::String(s)) => s.is_empty(),
            (_, Value::Array(items)) => items.is_empty(),
            (_, Value::Object(map)) => map.is_empty(),
        }
    }

    fn value(&self, go_type: Option<&str>, ty: &Type, value: &Value) -> Value {
        let Some((ty, name)) = self.schema.deref(ty) else {
            return value.clone();
        };
        let pointer = go_type.is_some_and(|go| go.starts_with('*'));
        let shape = go_type.map(go_shape);
        if value.is_null() {
            return if pointer || matches!(ty.shape, Shape::List(_) | Shape::Map(_) | Shape::Any) {
                Value::Null
            } else {
                self.zero(ty, name)
            };
        }
        match name {
            Some(QUANTITY) => return quantity(value),
            Some(TIME) => return time(value, false),
            Some(MICRO_TIME) => return time(value, true),
            Some(other) if self.go.get(other).is_some_and(|s| s.custom) => {
                return match (&ty.shape, value) {
                    (Shape::IntOrString, Value::Number(n)) => integer(n),
                    _ => value.clone(),
                };
            }
            _ => {}
        }
        match (&ty.shape, value) {
            (Shape::Object(object), Value::Object(map)) => {
                let Some(structure) = name.and_then(|name| self.go.get(name)) else {
                    return value.clone();
                };
                let mut out = Map::new();
                for (key, item) in map {
                    match (structure.field(key), object.fields.get(key)) {
                        (Some(field), Some(field_type)) => {
                            let go = Some(field.go_type.as_str());
                            let written = self.value(go, field_type, item);
                            if !(field.omitempty && self.empty(go, field_type, &written)) {
                                out.insert(key.clone(), written);
                            }
                        }
                        _ => {
                            out.insert(key.clone(), item.clone());
                        }
                    }
                }
                self.absent_fields(structure, object, &mut out);
                Value::Object(out)
            }
            (Shape::List(list), Value::Array(items)) => {
                let item_go = match shape {
                    Some(GoShape::Slice(items)) => Some(items),
                    _ => None,
                };
                Value::Array(
                    items
                        .iter()
                        .map(|item| self.value(item_go, &list.items, item))
                        .collect(),
                )
            }
            (Shape::Map(values), Value::Object(map)) => {
                let value_go = match shape {
                    Some(GoShape::Map(values)) => Some(values),
                    _ => None,
                };
                Value::Object(
                    map.iter()
                        .map(|(key, item)| (key.clone(), self.value(value_go, values, item)))
                        .collect(),
                )
            }
            (Shape::Integer | Shape::IntOrString, Value::Number(n)) => integer(n),
            _ => value.clone(),
        }
    }

    /// The fields of `structure` that `out` lacks, as Go writes a zero field when it is not left
    /// out: non-`omitempty` ones, and structs held by value (never empty).
    fn absent_fields(&self, structure: &GoStruct, object: &Object, out: &mut Map<String, Value>) {
        for field in &structure.fields {
            if out.contains_key(&field.name) {
                continue;
            }
            let Some(field_type) = object.fields.get(&field.name) else {
                continue;
            };
            let go = Some(field.go_type.as_str());
            let zero = self.value(go, field_type, &Value::Null);
            if !(field.omitempty && self.empty(go, field_type, &zero)) {
                out.insert(field.name.clone(), zero);
            }
        }
    }

    /// The zero value of a type that is not a pointer, list or map, as Go writes it.
    fn zero(&self, ty: &Type, name: Option<&str>) -> Value {
        match name {
            Some(QUANTITY) => return Value::String("0".into()),
            Some(TIME | MICRO_TIME) => return Value::Null,
            _ => {}
        }
        match &ty.shape {
            Shape::Boolean => Value::Bool(false),
            Shape::Integer | Shape::Number | Shape::IntOrString => Value::from(0),
            Shape::String => Value::String(String::new()),
            Shape::Object(object) => {
                let Some(structure) = name.and_then(|name| self.go.get(name)) else {
                    return Value::Object(Map::new());
                };
                if structure.custom {
                    return Value::Null;
                }
                let mut out = Map::new();
                self.absent_fields(structure, object, &mut out);
                Value::Object(out)
            }
            _ => Value::Null,
        }
    }
}

/// An integer field's number as Go writes it back (`2.0` read as `2`).
fn integer(number: &serde_json::Number) -> Value {
    json_number_text(number)
        .parse::<i64>()
        .map_or_else(|_| Value::Number(number.clone()), Value::from)
}

/// A quantity in canonical form, as `resource.Quantity` writes itself.
fn quantity(value: &Value) -> Value {
    super::quantity_of(value).map_or_else(|| value.clone(), |q| Value::String(q.canonical_text()))
}

/// A time in UTC, whole seconds (`metav1.Time`) or microseconds (`metav1.MicroTime`), as they
/// write themselves.
fn time(value: &Value, micro: bool) -> Value {
    let Value::String(text) = value else {
        return value.clone();
    };
    let Ok(parsed) = kanon_cel::Timestamp::parse(text) else {
        return value.clone();
    };
    let civil = parsed.civil_utc();
    let mut out = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        civil.year, civil.month, civil.day, civil.hour, civil.minute, civil.second
    );
    if micro {
        out.push_str(&format!(".{:06}", civil.nanos / 1000));
    }
    out.push('Z');
    Value::String(out)
}
