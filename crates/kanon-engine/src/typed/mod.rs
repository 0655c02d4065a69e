//! A built-in kind's object as kube-apiserver holds it: decoded into the kind's Go type and
//! written back. After a MutatingAdmissionPolicy's mutation (and a webhook's patch) the
//! apiserver decodes the patched JSON into the Go type, so
//!
//! - a value of the wrong type fails the whole request, whatever the failure policy
//!   ([`Typed::decode_error_at`], in Go's words), and
//! - what the next mutation sees is the object written back from Go: an empty list or map, a
//!   `null`, `""`, `0` or `false` in an `omitempty` field is gone, `2.0` in an integer field is
//!   `2`, quantities and times are canonical ([`Typed::round_trip_at`]).
//!
//! Both need the Go facts of `kanon_schema::GoTypes` beside the OpenAPI schema; kinds without
//! them (custom kinds, apiextensions, apiregistration) are decoded as they are.

mod decode;
mod defaults;
mod encode;
mod go_time;

pub(crate) use decode::Decoded;

use json_patch::jsonptr::{PointerBuf, Token};
use json_patch::{PatchOperation, RemoveOperation, ReplaceOperation};
use kanon_schema::{GoShape, GoTypes, Schema, Shape, Type, go_shape};
use serde_json::{Number, Value};

/// The value at `path` (pointer segments) of `object`.
fn at<'v, S: AsRef<str>>(object: &'v Value, path: &[S]) -> Option<&'v Value> {
    path.iter().try_fold(object, |value, segment| {
        let segment = segment.as_ref();
        match value {
            Value::Object(map) => map.get(segment),
            Value::Array(items) => items.get(segment.parse::<usize>().ok()?),
            _ => None,
        }
    })
}

/// The OpenAPI names of the types that decode themselves in ways the checks follow.
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
const TIME: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Time";
const MICRO_TIME: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime";

/// A built-in kind's type with its Go facts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Typed<'s> {
    schema: &'s Schema,
    go: &'s GoTypes,
    root: &'s str,
}

/// What lies at a path of a typed object: its type, its Go type, whether the field holding it
/// is `omitempty`, and what Go's errors name it by.
pub(crate) struct Place<'s> {
    ty: &'s Type,
    go_type: Option<&'s str>,
    omitempty: bool,
    /// The struct whose field the path read last.
    structure: &'s str,
    /// JSON field names from the root (list indexes and map keys left out, embedded structs
    /// in), as Go's errors spell a field.
    fields: Vec<&'s str>,
}

impl<'s> Typed<'s> {
    /// The kind `api_version`/`kind` of the embedded schema, when it is built in and its Go
    /// facts are known.
    pub(crate) fn builtin(api_version: &str, kind: &str) -> Option<Typed<'static>> {
        let schema = Schema::builtin().ok()?;
        let go = GoTypes::builtin()?;
        let kind = schema.kind(api_version, kind)?;
        go.get(&kind.type_name)?;
        Some(Typed {
            schema,
            go,
            root: &kind.type_name,
        })
    }

    /// What lies at `path` (JSON pointer segments), or `None` where the path leaves the typed
    /// part of the object (an undeclared field, a free-form or self-decoding value).
    pub(crate) fn place<S: AsRef<str>>(&self, path: &[S]) -> Option<Place<'s>> {
        let root = self.go.get(self.root)?;
        let mut place = Place {
            ty: self.schema.named_type(self.root)?,
            go_type: Some(root.go.as_str()),
            omitempty: false,
            structure: root.short_name(),
            fields: Vec::new(),
        };
        // The root type is the named type itself, not a reference to it.
        let mut root_name = Some(self.root);
        for segment in path {
            let segment = segment.as_ref();
            let (ty, name) = self.schema.deref(place.ty)?;
            let name = name.or(root_name.take());
            match &ty.shape {
                Shape::Object(object) => {
                    let structure = self.go.get(name?)?;
                    if structure.custom {
                        return None;
                    }
                    let field = structure.field(segment)?;
                    place.ty = object.fields.get(segment)?;
                    place.fields.extend(field.via.iter().map(String::as_str));
                    place.fields.push(field.name.as_str());
                    place.structure = structure.short_name();
                    place.go_type = Some(field.go_type.as_str());
                    place.omitempty = field.omitempty;
                }
                Shape::List(list) => {
                    place.ty = &list.items;
                    place.go_type = match place.go_type.map(go_shape) {
                        Some(GoShape::Slice(items)) => Some(items),
                        _ => None,
                    };
                    place.omitempty = false;
                }
                Shape::Map(values) => {
                    place.ty = values;
                    place.go_type = match place.go_type.map(go_shape) {
                        Some(GoShape::Map(values)) => Some(values),
                        _ => None,
                    };
                    place.omitempty = false;
                }
                _ => return None,
            }
        }
        Some(place)
    }

    /// The error the apiserver's decoding meets in `value` written at `path`, in its words
    /// (`json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type
    /// string`), or `None`.
    pub(crate) fn decode_error_at<S: AsRef<str>>(
        &self,
        path: &[S],
        value: &Value,
    ) -> Option<Decoded> {
        let place = self.place(path)?;
        decode::first_error(self.schema, self.go, &place, value)
    }

    /// Whether `object` has a value at `path`.
    pub(crate) fn holds<S: AsRef<str>>(&self, object: &Value, path: &[S]) -> bool {
        at(object, path).is_some()
    }

    /// The operation that makes the value at `path` of `object` what the apiserver writes back
    /// after decoding it (`whole`), or only leaves the field out when it is `omitempty` and
    /// empty (not `whole`): a `remove`, a `replace`, or `None` when nothing changes (or nothing
    /// is there, or the place is not typed).
    pub(crate) fn written_back_op<S: AsRef<str>>(
        &self,
        object: &Value,
        path: &[S],
        whole: bool,
    ) -> Option<PatchOperation> {
        let value = at(object, path)?;
        let place = self.place(path)?;
        let pointer = || PointerBuf::from_tokens(path.iter().map(|s| Token::new(s.as_ref())));
        if path.is_empty() {
            // The object itself is never left out; only a whole rewrite touches it.
            if !whole {
                return None;
            }
        }
        let written = if whole {
            self.round_trip(&place, value)
        } else if place.omitempty && encode::omitted(self.schema, self.go, &place, value) {
            None
        } else {
            return None;
        };
        match written {
            None => Some(PatchOperation::Remove(RemoveOperation { path: pointer() })),
            Some(written) if written != *value => Some(PatchOperation::Replace(ReplaceOperation {
                path: pointer(),
                value: written,
            })),
            Some(_) => None,
        }
    }

    /// The value at `place` as the apiserver writes it back after decoding it: `None` when the
    /// field is left out (`omitempty` and empty), else the value, canonical.
    pub(crate) fn round_trip(&self, place: &Place<'s>, value: &Value) -> Option<Value> {
        encode::written_back(self.schema, self.go, place, value)
    }
}

/// The quantity a value holds, written as a string (spaces around it ignored) or a number, as
/// `resource.Quantity` reads it; `None` for any other value or text.
pub(crate) fn quantity_of(value: &Value) -> Option<crate::quantity::Quantity> {
    match value {
        Value::String(text) => text.trim().parse().ok(),
        Value::Number(number) => json_number_text(number).parse().ok(),
        _ => None,
    }
}

/// A JSON number as Go's encoder writes it (what the apiserver's decoder then reads): integers
/// as they are, a float with no fraction below 1e21 as an integer (`2.0` is `2`), others in
/// Go's shortest form (`1.5`, `1e+21`, `1e-7`).
pub(crate) fn json_number_text(number: &Number) -> String {
    if number.is_i64() || number.is_u64() {
        return number.to_string();
    }
    let Some(float) = number.as_f64() else {
        return number.to_string();
    };
    let magnitude = float.abs();
    if magnitude != 0.0 && !(1e-6..1e21).contains(&magnitude) {
        // Rust writes `1e21` and `1e-7`; Go `1e+21` and `1e-07`, trimmed to `1e-7`.
        let text = format!("{float:e}");
        return match text.split_once('e') {
            Some((mantissa, exponent)) if !exponent.starts_with('-') => {
                format!("{mantissa}e+{exponent}")
            }
            _ => text,
        };
    }
    format!("{float}")
}

#[cfg(test)]
mod tests;
