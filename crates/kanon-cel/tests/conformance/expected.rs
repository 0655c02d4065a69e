//! cel-spec's `cel.expr.Value` and `cel.expr.Type` as kanon-cel sees them: converted into a model
//! kanon-cel can represent (protobuf messages and enums cannot be), compared strictly with a
//! [`Value`] an evaluation gave, and turned into [`Value`]s for bindings.

use std::fmt;
use std::sync::Arc;

use kanon_cel::{Duration, Timestamp, Type, Value};

use super::textproto::{Message, Node};

/// Why a value or type from the data cannot be used.
#[derive(Debug, Clone, PartialEq)]
pub enum Unusable {
    /// It is (or holds) a protobuf message, enum or wrapper, which kanon-cel has no notion of.
    NeedsProtobuf(String),
    /// Anything else: data this harness does not understand, or kanon-cel cannot hold.
    Other(String),
}

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unusable::NeedsProtobuf(what) | Unusable::Other(what) => f.write_str(what),
        }
    }
}

/// An expected value: a `cel.expr.Value` restricted to what kanon-cel can produce.
#[derive(Debug, Clone)]
pub enum Expected {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    String(String),
    Bytes(Vec<u8>),
    Duration(Duration),
    Timestamp(Timestamp),
    List(Vec<Expected>),
    Map(Vec<(Expected, Expected)>),
    /// A type value by name as cel-spec writes it (`int`, `list`, `google.protobuf.Duration`).
    Type(String),
}

const DURATION_URL: &str = "[type.googleapis.com/google.protobuf.Duration]";
const TIMESTAMP_URL: &str = "[type.googleapis.com/google.protobuf.Timestamp]";

/// Reads a `cel.expr.Value`.
pub fn value(message: &Message) -> Result<Expected, Unusable> {
    let other = |problem: String| Unusable::Other(problem);
    // A oneof: its last member written is the value.
    let Some(field) = message.fields.last() else {
        return Err(other("a Value with no kind set".to_owned()));
    };
    let node = &field.value;
    Ok(match field.name.as_str() {
        "null_value" => Expected::Null,
        "bool_value" => Expected::Bool(node.bool().map_err(other)?),
        "int64_value" => Expected::Int(node.i64().map_err(other)?),
        "uint64_value" => Expected::Uint(node.u64().map_err(other)?),
        "double_value" => Expected::Double(node.f64().map_err(other)?),
        "string_value" => Expected::String(node.string().map_err(other)?),
        "bytes_value" => Expected::Bytes(node.bytes().map_err(other)?.to_vec()),
        "type_value" => {
            let name = node.string().map_err(other)?;
            if is_message_name(&name) {
                return Err(Unusable::NeedsProtobuf(format!("type value {name}")));
            }
            Expected::Type(name)
        }
        "enum_value" => {
            let body = node.as_message().map_err(other)?;
            let name = body.string("type").unwrap_or_default();
            return Err(Unusable::NeedsProtobuf(format!("enum value of {name}")));
        }
        "object_value" => object(node.as_message().map_err(other)?)?,
        "list_value" => {
            let body = node.as_message().map_err(other)?;
            let mut items = Vec::new();
            for item in body.all("values") {
                items.push(value(item.as_message().map_err(other)?)?);
            }
            Expected::List(items)
        }
        "map_value" => {
            let body = node.as_message().map_err(other)?;
            let mut entries = Vec::new();
            for entry in body.all("entries") {
                let entry = entry.as_message().map_err(other)?;
                let key = entry
                    .message("key")
                    .map_err(other)?
                    .cloned()
                    .unwrap_or_default();
                let val = entry
                    .message("value")
                    .map_err(other)?
                    .cloned()
                    .unwrap_or_default();
                entries.push((value(&key)?, value(&val)?));
            }
            Expected::Map(entries)
        }
        name => return Err(other(format!("unknown Value field {name}"))),
    })
}

/// An `object_value` (a `google.protobuf.Any`): only Duration and Timestamp, written expanded,
/// have kanon-cel counterparts.
fn object(any: &Message) -> Result<Expected, Unusable> {
    let other = |problem: String| Unusable::Other(problem);
    let Some(field) = any.fields.last() else {
        return Err(other("an empty object_value".to_owned()));
    };
    let body = match field.name.as_str() {
        DURATION_URL | TIMESTAMP_URL => field.value.as_message().map_err(other)?,
        "type_url" | "value" => {
            return Err(Unusable::NeedsProtobuf(
                "a packed google.protobuf.Any".to_owned(),
            ));
        }
        name => {
            let type_name = name.trim_matches(['[', ']']);
            let type_name = type_name.rsplit('/').next().unwrap_or(type_name);
            return Err(Unusable::NeedsProtobuf(format!("message {type_name}")));
        }
    };
    let seconds = match body.get("seconds") {
        Some(node) => node.i64().map_err(other)?,
        None => 0,
    };
    let nanos = match body.get("nanos") {
        Some(node) => node.i64().map_err(other)?,
        None => 0,
    };
    if field.name == DURATION_URL {
        // kanon-cel holds a duration as i64 nanoseconds (cel-go's range).
        let total = i128::from(seconds) * 1_000_000_000 + i128::from(nanos);
        let nanos = i64::try_from(total).map_err(|_| {
            other(format!(
                "duration {seconds}s {nanos}ns is beyond an i64 of nanoseconds"
            ))
        })?;
        Ok(Expected::Duration(Duration::from_nanos(nanos)))
    } else {
        let nanos = u32::try_from(nanos)
            .map_err(|_| other(format!("timestamp nanos {nanos} out of range")))?;
        let timestamp = Timestamp::new(seconds, nanos)
            .map_err(|error| other(format!("timestamp {seconds}s {nanos}ns: {error}")))?;
        Ok(Expected::Timestamp(timestamp))
    }
}

/// A qualified type name that is neither a CEL type nor Duration/Timestamp: a protobuf message
/// (`google.protobuf.Int64Value`, `cel.expr.conformance.proto3.TestAllTypes`).
fn is_message_name(name: &str) -> bool {
    name.contains('.')
        && !matches!(
            name,
            "google.protobuf.Duration" | "google.protobuf.Timestamp"
        )
}

/// Reads a `cel.expr.Type` into a kanon-cel type, for declarations.
pub fn kind(message: &Message) -> Result<Type, Unusable> {
    let other = |problem: String| Unusable::Other(problem);
    let Some(field) = message.fields.last() else {
        return Err(other("a Type with no kind set".to_owned()));
    };
    let node = &field.value;
    let nested = |name: &str| -> Result<Type, Unusable> {
        let body = node.as_message().map_err(other)?;
        match body.message(name).map_err(other)? {
            Some(inner) => kind(inner),
            None => Err(other(format!("{} without {name}", field.name))),
        }
    };
    Ok(match field.name.as_str() {
        "dyn" => Type::Dyn,
        "null" => Type::Null,
        "primitive" => primitive(node.enum_name().map_err(other)?)?,
        "wrapper" => {
            let name = node.enum_name().map_err(other)?;
            return Err(Unusable::NeedsProtobuf(format!("wrapper type of {name}")));
        }
        "well_known" => match node.enum_name().map_err(other)? {
            "TIMESTAMP" | "2" => Type::Timestamp,
            "DURATION" | "3" => Type::Duration,
            name => return Err(Unusable::NeedsProtobuf(format!("well-known type {name}"))),
        },
        "list_type" => Type::list(nested("elem_type")?),
        "map_type" => Type::map(nested("key_type")?, nested("value_type")?),
        "message_type" => match node.string().map_err(other)?.as_str() {
            "google.protobuf.Duration" => Type::Duration,
            "google.protobuf.Timestamp" => Type::Timestamp,
            name => return Err(Unusable::NeedsProtobuf(format!("message type {name}"))),
        },
        "type_param" => Type::Param(Arc::from(node.string().map_err(other)?)),
        "type" => {
            let body = node.as_message().map_err(other)?;
            if body.fields.is_empty() {
                Type::Type(None)
            } else {
                Type::type_of(kind(body)?)
            }
        }
        "error" => Type::Error,
        "abstract_type" => {
            let body = node.as_message().map_err(other)?;
            let name = body.string("name").map_err(other)?;
            let params: Vec<&Node> = body.all("parameter_types").collect();
            match (name.as_str(), params.as_slice()) {
                ("optional_type", [inner]) => {
                    Type::optional(kind(inner.as_message().map_err(other)?)?)
                }
                _ => {
                    return Err(other(format!(
                        "abstract type {name} with {} parameters",
                        params.len()
                    )));
                }
            }
        }
        name => return Err(other(format!("unsupported Type kind {name}"))),
    })
}

fn primitive(name: &str) -> Result<Type, Unusable> {
    Ok(match name {
        "BOOL" | "1" => Type::Bool,
        "INT64" | "2" => Type::Int,
        "UINT64" | "3" => Type::Uint,
        "DOUBLE" | "4" => Type::Double,
        "STRING" | "5" => Type::String,
        "BYTES" | "6" => Type::Bytes,
        other => return Err(Unusable::Other(format!("primitive type {other}"))),
    })
}

/// The value as a kanon-cel value (for bindings).
pub fn to_value(expected: &Expected) -> Value<'static> {
    match expected {
        Expected::Null => Value::Null,
        Expected::Bool(value) => Value::Bool(*value),
        Expected::Int(value) => Value::Int(*value),
        Expected::Uint(value) => Value::Uint(*value),
        Expected::Double(value) => Value::Double(*value),
        Expected::String(text) => Value::string(text.as_str()),
        Expected::Bytes(bytes) => Value::Bytes(Arc::from(bytes.as_slice())),
        Expected::Duration(duration) => Value::Duration(*duration),
        Expected::Timestamp(timestamp) => Value::Timestamp(*timestamp),
        Expected::List(items) => Value::list(items.iter().map(to_value).collect()),
        // `collect` builds the map type `Map::Owned` holds (an IndexMap) without naming it, so
        // this test needs no dependency of its own. Keys CEL cannot have are dropped: the data
        // has none.
        Expected::Map(entries) => Value::Map(kanon_cel::Map::Owned(Arc::new(
            entries
                .iter()
                .filter_map(|(key, value)| {
                    Some((kanon_cel::Key::from_value(&to_value(key))?, to_value(value)))
                })
                .collect(),
        ))),
        Expected::Type(name) => Value::Type(type_named(name)),
    }
}

/// The type a type value names, as kanon-cel's `type(x)` would give it.
fn type_named(name: &str) -> Type {
    match name {
        "list" => Type::list(Type::Dyn),
        "map" => Type::map(Type::Dyn, Type::Dyn),
        "type" => Type::Type(None),
        "optional_type" => Type::optional(Type::Dyn),
        "null_type" => Type::Null,
        name => kanon_cel::env::parse_type(name).unwrap_or_else(|_| Type::Object(Arc::from(name))),
    }
}

/// Whether an evaluation's result is exactly the expected value: the same CEL type (1 ≠ 1u ≠
/// 1.0), doubles bit for bit (or both NaN), lists in order, maps by entries in any order.
pub fn matches(expected: &Expected, got: &Value<'_>) -> bool {
    match (expected, got) {
        (Expected::Null, Value::Null) => true,
        (Expected::Bool(a), Value::Bool(b)) => a == b,
        (Expected::Int(a), Value::Int(b)) => a == b,
        (Expected::Uint(a), Value::Uint(b)) => a == b,
        (Expected::Double(a), Value::Double(b)) => {
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
        }
        (Expected::String(a), Value::String(b)) => a == b.as_str(),
        (Expected::Bytes(a), Value::Bytes(b)) => a.as_slice() == &**b,
        (Expected::Duration(a), Value::Duration(b)) => a == b,
        (Expected::Timestamp(a), Value::Timestamp(b)) => a == b,
        (Expected::Type(a), Value::Type(b)) => a == b.runtime_name(),
        (Expected::List(items), Value::List(list)) => {
            items.len() == list.len() && items.iter().zip(list.iter()).all(|(a, b)| matches(a, &b))
        }
        (Expected::Map(entries), Value::Map(map)) => {
            let got = map.entries();
            entries.len() == got.len()
                && entries.iter().all(|(key, value)| {
                    got.iter().any(|(got_key, got_value)| {
                        matches(key, got_key) && matches(value, got_value)
                    })
                })
        }
        _ => false,
    }
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expected::Null => f.write_str("null"),
            Expected::Bool(value) => write!(f, "{value}"),
            Expected::Int(value) => write!(f, "{value}"),
            Expected::Uint(value) => write!(f, "{value}u"),
            Expected::Double(value) => write!(f, "{}", double(*value)),
            Expected::String(text) => write!(f, "{text:?}"),
            Expected::Bytes(bytes) => write!(f, "b{}", bytes_text(bytes)),
            Expected::Duration(duration) => write!(f, "{}", duration_text(duration)),
            Expected::Timestamp(timestamp) => write!(f, "{}", timestamp_text(timestamp)),
            Expected::List(items) => {
                f.write_str("[")?;
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
            Expected::Map(entries) => {
                f.write_str("{")?;
                for (index, (key, value)) in entries.iter().enumerate() {
                    if index > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{key}: {value}")?;
                }
                f.write_str("}")
            }
            Expected::Type(name) => write!(f, "type {name}"),
        }
    }
}

/// A result written so that its CEL type shows (`1.0` for a double, `1u` for a uint), which
/// kanon-cel's own Display does not always do.
pub fn describe(value: &Value<'_>) -> String {
    match value {
        Value::Double(number) => double(*number),
        Value::Bytes(bytes) => format!("b{}", bytes_text(bytes)),
        Value::Duration(duration) => duration_text(duration),
        Value::Timestamp(timestamp) => timestamp_text(timestamp),
        Value::Type(kind) => format!("type {}", kind.runtime_name()),
        Value::List(list) => {
            let items: Vec<String> = list.iter().map(|item| describe(&item)).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Map(map) => {
            let entries: Vec<String> = map
                .entries()
                .iter()
                .map(|(key, value)| format!("{}: {}", describe(key), describe(value)))
                .collect();
            format!("{{{}}}", entries.join(", "))
        }
        other => other.to_string(),
    }
}

fn double(value: f64) -> String {
    // `{:?}` keeps `.0`, the sign of zero, `NaN` and `inf`.
    format!("{value:?}")
}

fn bytes_text(bytes: &[u8]) -> String {
    let mut text = String::from("\"");
    for &byte in bytes {
        match byte {
            b'"' => text.push_str("\\\""),
            b'\\' => text.push_str("\\\\"),
            0x20..=0x7e => text.push(byte as char),
            _ => text.push_str(&format!("\\x{byte:02x}")),
        }
    }
    text.push('"');
    text
}

fn duration_text(duration: &Duration) -> String {
    let sign = if duration.nanos < 0 { "-" } else { "" };
    let magnitude = duration.nanos.unsigned_abs();
    format!(
        "duration({sign}{}.{:09}s)",
        magnitude / 1_000_000_000,
        magnitude % 1_000_000_000
    )
}

fn timestamp_text(timestamp: &Timestamp) -> String {
    format!(
        "timestamp(seconds: {}, nanos: {})",
        timestamp.seconds, timestamp.nanos
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::textproto;

    fn expected(text: &str) -> Result<Expected, Unusable> {
        value(&textproto::parse(text).unwrap())
    }

    fn ok(text: &str) -> Expected {
        expected(text).unwrap()
    }

    #[test]
    fn reads_values() {
        assert!(matches!(ok("int64_value: -3"), Expected::Int(-3)));
        assert!(matches!(
            ok("uint64_value: 18446744073709551615"),
            Expected::Uint(u64::MAX)
        ));
        assert!(matches!(ok("null_value: NULL_VALUE"), Expected::Null));
        assert!(matches!(ok("null_value: 0"), Expected::Null));
        assert!(matches!(ok(r#"bytes_value: "\377""#), Expected::Bytes(bytes) if bytes == [0xff]));
        assert!(matches!(
            ok(r#"type_value: "google.protobuf.Duration""#),
            Expected::Type(_)
        ));
        let duration = ok(
            "object_value { [type.googleapis.com/google.protobuf.Duration] { seconds: -1 nanos: -5 } }",
        );
        assert!(
            matches!(duration, Expected::Duration(d) if d == Duration::from_nanos(-1_000_000_005))
        );
        let timestamp =
            ok("object_value { [type.googleapis.com/google.protobuf.Timestamp] { seconds: 3 } }");
        assert!(matches!(timestamp, Expected::Timestamp(t) if t.seconds == 3 && t.nanos == 0));
        let map = ok(
            "map_value { entries { key { string_value: 'k' } value { list_value { values { bool_value: true } } } } }",
        );
        assert_eq!(map.to_string(), r#"{"k": [true]}"#);

        let protobuf = |text: &str| matches!(expected(text), Err(Unusable::NeedsProtobuf(_)));
        assert!(protobuf("enum_value { type: 'x.E' value: 1 }"));
        assert!(protobuf(
            "object_value { [type.googleapis.com/cel.expr.conformance.proto3.TestAllTypes] {} }"
        ));
        assert!(protobuf("object_value { type_url: 'x' value: 'y' }"));
        assert!(protobuf(r#"type_value: "google.protobuf.Int64Value""#));
        assert!(protobuf(
            "list_value { values { enum_value { type: 'x.E' } } }"
        ));
        assert!(matches!(expected(""), Err(Unusable::Other(_))));
    }

    #[test]
    fn compares_strictly() {
        let one = |text: &str, got: Value<'static>| matches(&ok(text), &got);
        assert!(one("int64_value: 1", Value::Int(1)));
        assert!(!one("int64_value: 1", Value::Uint(1)));
        assert!(!one("int64_value: 1", Value::Double(1.0)));
        assert!(!one("uint64_value: 1", Value::Int(1)));
        assert!(!one("double_value: 1", Value::Int(1)));
        assert!(one("double_value: 1", Value::Double(1.0)));
        assert!(one("double_value: nan", Value::Double(-f64::NAN)));
        assert!(one("double_value: -0.0", Value::Double(-0.0)));
        assert!(!one("double_value: -0.0", Value::Double(0.0)));
        assert!(one("string_value: 'a'", Value::string("a")));
        assert!(!one(
            "string_value: 'a'",
            Value::Bytes(Arc::from(&b"a"[..]))
        ));
        assert!(one("type_value: 'int'", Value::Type(Type::Int)));
        assert!(one(
            "type_value: 'list'",
            Value::Type(Type::list(Type::Int))
        ));
        assert!(one(
            "type_value: 'google.protobuf.Duration'",
            Value::Type(Type::Duration)
        ));
        assert!(!one("type_value: 'int'", Value::string("int")));
        assert!(one("null_value: NULL_VALUE", Value::Null));
        assert!(!one("null_value: NULL_VALUE", Value::Optional(None)));

        let list = "list_value { values { int64_value: 1 } values { uint64_value: 2 } }";
        assert!(one(list, Value::list(vec![Value::Int(1), Value::Uint(2)])));
        assert!(!one(list, Value::list(vec![Value::Int(1), Value::Int(2)])));
        assert!(!one(list, Value::list(vec![Value::Uint(2), Value::Int(1)])));

        // Maps match by entries in any order, keys of the same type only.
        let map = "map_value { entries { key { int64_value: 1 } value { string_value: 'a' } } \
                   entries { key { bool_value: true } value { string_value: 'b' } } }";
        let got = to_value(&ok(map));
        assert!(matches(&ok(map), &got));
        let reversed = "map_value { entries { key { bool_value: true } value { string_value: 'b' } } \
                        entries { key { int64_value: 1 } value { string_value: 'a' } } }";
        assert!(matches(&ok(reversed), &got));
        let uint_key = "map_value { entries { key { uint64_value: 1 } value { string_value: 'a' } } \
                        entries { key { bool_value: true } value { string_value: 'b' } } }";
        assert!(!matches(&ok(uint_key), &got));
        assert!(!one("map_value {}", got));

        let duration = "object_value { [type.googleapis.com/google.protobuf.Duration] { seconds: 1 nanos: 2 } }";
        assert!(one(
            duration,
            Value::Duration(Duration::from_nanos(1_000_000_002))
        ));
        assert!(!one(duration, Value::Int(1_000_000_002)));
    }

    #[test]
    fn reads_types() {
        let kind_of = |text: &str| kind(&textproto::parse(text).unwrap());
        assert_eq!(kind_of("primitive: INT64"), Ok(Type::Int));
        assert_eq!(
            kind_of("list_type { elem_type { primitive: STRING } }"),
            Ok(Type::list(Type::String))
        );
        assert_eq!(
            kind_of("map_type { key_type { primitive: STRING } value_type { dyn {} } }"),
            Ok(Type::map(Type::String, Type::Dyn))
        );
        assert_eq!(
            kind_of("message_type: 'google.protobuf.Timestamp'"),
            Ok(Type::Timestamp)
        );
        assert_eq!(kind_of("well_known: DURATION"), Ok(Type::Duration));
        assert_eq!(kind_of("type {}"), Ok(Type::Type(None)));
        assert_eq!(
            kind_of("abstract_type { name: 'optional_type' parameter_types { primitive: INT64 } }"),
            Ok(Type::optional(Type::Int))
        );
        assert!(matches!(
            kind_of("wrapper: INT64"),
            Err(Unusable::NeedsProtobuf(_))
        ));
        assert!(matches!(
            kind_of("message_type: 'a.B'"),
            Err(Unusable::NeedsProtobuf(_))
        ));
        assert!(matches!(
            kind_of("well_known: ANY"),
            Err(Unusable::NeedsProtobuf(_))
        ));
    }
}
