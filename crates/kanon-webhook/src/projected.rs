//! Reading a review with its object projected: only the parts of `request.object` and
//! `request.oldObject` some policy may read ([`Projection`]) become values; the rest of their
//! text is checked as JSON and dropped.
//!
//! A skipped value is read as strictly as a decoded one (strings as UTF-8 with valid escapes,
//! numbers in range, nesting under serde_json's limit), so a body is refused exactly when the
//! whole reading would refuse it, and the value given is the whole reading's with the skipped
//! fields left out.

use std::borrow::Cow;
use std::fmt;

use kanon_engine::{Projection, Selected};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parses a review, decoding of its object and old object only what `projection` keeps.
pub fn parse(bytes: &[u8], projection: &Projection) -> Result<Value, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = Review(projection).deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// `review` (read whole) with what `projection` leaves out of its object and old object removed:
/// what [`parse`] gives for the same text, made the plain way (for tests and fuzzing).
pub fn pruned(mut review: Value, projection: &Projection) -> Value {
    fn prune(value: &mut Value, projection: &Projection) {
        let Value::Object(fields) = value else {
            return;
        };
        fields.retain(|name, _| projection.select(name) != Selected::Skip);
        for (name, field) in fields.iter_mut() {
            if let Selected::Within(within) = projection.select(name) {
                prune(field, within);
            }
        }
    }
    if let Some(request) = review.get_mut("request").and_then(Value::as_object_mut) {
        for name in ["object", "oldObject"] {
            if let Some(object) = request.get_mut(name) {
                prune(object, projection);
            }
        }
    }
    review
}

/// How the fields of a map are read: `None` skips one.
trait Fields<'p>: Copy {
    fn field(self, name: &str) -> Option<Part<'p>>;
}

/// How one field is read.
#[derive(Clone, Copy)]
enum Part<'p> {
    Whole,
    Request(&'p Projection),
    Projected(&'p Projection),
}

impl<'de> DeserializeSeed<'de> for Part<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        match self {
            Part::Whole => Value::deserialize(deserializer),
            Part::Request(projection) => deserializer.deserialize_any(Within(Request(projection))),
            Part::Projected(projection) => deserializer.deserialize_any(Within(Object(projection))),
        }
    }
}

/// The review: its `request` is read as [`Request`].
#[derive(Clone, Copy)]
struct Review<'p>(&'p Projection);

impl<'p> Fields<'p> for Review<'p> {
    fn field(self, name: &str) -> Option<Part<'p>> {
        Some(match name {
            "request" => Part::Request(self.0),
            _ => Part::Whole,
        })
    }
}

impl<'de> DeserializeSeed<'de> for Review<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(Within(self))
    }
}

/// The review's request: its `object` and `oldObject` are projected.
#[derive(Clone, Copy)]
struct Request<'p>(&'p Projection);

impl<'p> Fields<'p> for Request<'p> {
    fn field(self, name: &str) -> Option<Part<'p>> {
        Some(match name {
            "object" | "oldObject" => Part::Projected(self.0),
            _ => Part::Whole,
        })
    }
}

/// A projected object (or a part of one).
#[derive(Clone, Copy)]
struct Object<'p>(&'p Projection);

impl<'p> Fields<'p> for Object<'p> {
    fn field(self, name: &str) -> Option<Part<'p>> {
        match self.0.select(name) {
            Selected::Skip => None,
            Selected::Whole => Some(Part::Whole),
            Selected::Within(projection) => Some(Part::Projected(projection)),
        }
    }
}

/// Reads a value: a map by its fields' parts, anything else whole.
struct Within<F>(F);

impl<'de, 'p, F: Fields<'p>> Visitor<'de> for Within<F> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut fields = Map::new();
        while let Some(key) = map.next_key_seed(Key)? {
            match self.0.field(&key) {
                Some(part) => {
                    let value = map.next_value_seed(part)?;
                    fields.insert(key.into_owned(), value);
                }
                None => map.next_value_seed(Skip)?,
            }
        }
        Ok(Value::Object(fields))
    }
}

/// A map's key, borrowed from the body unless it has escapes: a key whose value is skipped is
/// not copied.
#[derive(Clone, Copy)]
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(key))
    }

    fn visit_str<E>(self, key: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(key.to_owned()))
    }

    fn visit_string<E>(self, key: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(key))
    }
}

/// A value read as strictly as [`Value`] reads it, and dropped.
#[derive(Clone, Copy)]
struct Skip;

impl<'de> DeserializeSeed<'de> for Skip {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Skip)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key_seed(Skip)?.is_some() {
            map.next_value_seed(Skip)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
