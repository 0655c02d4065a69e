//! CEL values, evaluated directly over JSON: a Kubernetes object is read in place (a borrowed
//! `serde_json::Value` becomes a [`Value`] without copying), and only what an expression builds
//! is allocated.
//!
//! Also how cel-go writes values in text (a double as `string()` writes it, `%v` and `%T` in its
//! messages), and `cel.@mapInsert`, which the interpreter also calls to grow a comprehension's
//! map in place.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use indexmap::IndexMap;
use serde_json::Value as Json;

use crate::error::EvalError;
use crate::time::{Duration, Timestamp};
use crate::types::Type;

/// A CEL value. `'a` is the lifetime of the JSON documents the evaluation reads.
#[derive(Debug, Clone)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    String(Str<'a>),
    Bytes(Arc<[u8]>),
    List(List<'a>),
    Map(Map<'a>),
    Duration(Duration),
    Timestamp(Timestamp),
    Type(Type),
    /// `optional.of(x)` is `Optional(Some(x))`, `optional.none()` is `Optional(None)`.
    Optional(Option<Arc<Value<'a>>>),
    /// A typed object built by `Name{field: value}` (MutatingAdmissionPolicy's `Object{…}` and
    /// `JSONPatch{…}`).
    Object(Arc<Object<'a>>),
}

/// A string, borrowed from the JSON being read or owned when computed.
#[derive(Debug, Clone)]
pub enum Str<'a> {
    Borrowed(&'a str),
    Owned(Arc<str>),
}

impl Str<'_> {
    pub fn as_str(&self) -> &str {
        match self {
            Str::Borrowed(text) => text,
            Str::Owned(text) => text,
        }
    }
}

impl PartialEq for Str<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}
impl Eq for Str<'_> {}

impl Hash for Str<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

/// A list, borrowed from JSON or built by the expression.
#[derive(Debug, Clone)]
pub enum List<'a> {
    Json(&'a [Json]),
    Owned(Arc<Vec<Value<'a>>>),
    /// Two lists joined without copying (cel-go's `+` of lists costs 1 whatever their sizes, so
    /// it must not take time in proportion to them either).
    Concat(Arc<Concat<'a>>),
}

/// The two parts of a [`List::Concat`] and its length.
#[derive(Debug)]
pub struct Concat<'a> {
    first: List<'a>,
    second: List<'a>,
    len: usize,
}

/// Lists this long or shorter are copied when joined; longer ones are chained.
const COPY_BELOW: usize = 64;

impl<'a> List<'a> {
    pub fn len(&self) -> usize {
        match self {
            List::Json(items) => items.len(),
            List::Owned(items) => items.len(),
            List::Concat(concat) => concat.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, index: usize) -> Option<Value<'a>> {
        let mut list = self;
        let mut index = index;
        loop {
            match list {
                List::Json(items) => return items.get(index).map(Value::from_json),
                List::Owned(items) => return items.get(index).cloned(),
                List::Concat(concat) => {
                    let first = concat.first.len();
                    if index < first {
                        list = &concat.first;
                    } else {
                        index -= first;
                        list = &concat.second;
                    }
                }
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = Value<'a>> + '_ {
        (0..self.len()).filter_map(move |index| self.get(index))
    }

    pub fn from_values(values: Vec<Value<'a>>) -> Self {
        List::Owned(Arc::new(values))
    }

    /// `self + other`: copied when short, chained when long.
    pub fn concat(&self, other: &List<'a>) -> List<'a> {
        if other.is_empty() {
            return self.clone();
        }
        if self.is_empty() {
            return other.clone();
        }
        let len = self.len() + other.len();
        if len <= COPY_BELOW {
            let mut joined = Vec::with_capacity(len);
            joined.extend(self.iter());
            joined.extend(other.iter());
            return List::from_values(joined);
        }
        List::Concat(Arc::new(Concat {
            first: self.clone(),
            second: other.clone(),
            len,
        }))
    }

    /// Appends `other` in place when this list is owned and not shared (a comprehension's
    /// accumulator, which cel-go also grows in place); else copies this list first, so that an
    /// accumulator is copied once, not chained at every step.
    pub fn append(self, other: &List<'a>) -> List<'a> {
        let mut items = match self {
            List::Owned(items) => items,
            list => Arc::new(list.iter().collect()),
        };
        Arc::make_mut(&mut items).extend(other.iter());
        List::Owned(items)
    }
}

/// A map key: CEL allows bool, int, uint and string keys. An int and a uint are different keys
/// (as in cel-go), but a lookup finds either (CEL's heterogeneous equality). cel-go's maps built by
/// literals take any key besides: a double (found only by an equal double), null, and values
/// found by nothing (a list: Go compares it by identity).
#[derive(Debug, Clone)]
pub enum Key<'a> {
    Bool(bool),
    Int(i64),
    Uint(u64),
    String(Str<'a>),
    Double(f64),
    Null,
    Other(Box<Value<'a>>),
}

impl PartialEq for Key<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Key::Bool(a), Key::Bool(b)) => a == b,
            (Key::String(a), Key::String(b)) => a == b,
            (Key::Int(a), Key::Int(b)) => a == b,
            (Key::Uint(a), Key::Uint(b)) => a == b,
            (Key::Double(a), Key::Double(b)) => a == b,
            (Key::Null, Key::Null) => true,
            _ => false,
        }
    }
}
impl Eq for Key<'_> {}

impl Hash for Key<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            Key::Bool(value) => {
                0u8.hash(state);
                value.hash(state);
            }
            Key::Int(value) => {
                1u8.hash(state);
                (*value as i128).hash(state);
            }
            Key::Uint(value) => {
                2u8.hash(state);
                value.hash(state);
            }
            Key::String(value) => {
                3u8.hash(state);
                value.hash(state);
            }
            Key::Double(value) => {
                4u8.hash(state);
                // 0.0 and -0.0 are equal keys.
                (if *value == 0.0 { 0.0f64 } else { *value })
                    .to_bits()
                    .hash(state);
            }
            Key::Null => 5u8.hash(state),
            Key::Other(_) => 6u8.hash(state),
        }
    }
}

impl<'a> Key<'a> {
    /// The key a value stands for, if it is one of CEL's key types (bool, int, uint, string).
    pub fn from_value(value: &Value<'a>) -> Option<Key<'a>> {
        Some(match value {
            Value::Bool(value) => Key::Bool(*value),
            Value::Int(value) => Key::Int(*value),
            Value::Uint(value) => Key::Uint(*value),
            Value::String(value) => Key::String(value.clone()),
            _ => return None,
        })
    }

    /// The key any value makes in a map cel-go builds.
    pub fn from_any(value: &Value<'a>) -> Key<'a> {
        match value {
            Value::Double(value) => Key::Double(*value),
            Value::Null => Key::Null,
            other => Key::from_value(other).unwrap_or_else(|| Key::Other(Box::new(other.clone()))),
        }
    }

    pub fn to_value(&self) -> Value<'a> {
        match self {
            Key::Bool(value) => Value::Bool(*value),
            Key::Int(value) => Value::Int(*value),
            Key::Uint(value) => Value::Uint(*value),
            Key::String(value) => Value::String(value.clone()),
            Key::Double(value) => Value::Double(*value),
            Key::Null => Value::Null,
            Key::Other(value) => (**value).clone(),
        }
    }
}

/// A map, borrowed from a JSON object (string keys) or built by the expression.
#[derive(Debug, Clone)]
pub enum Map<'a> {
    Json(&'a serde_json::Map<String, Json>),
    Owned(Arc<IndexMap<Key<'a>, Value<'a>>>),
}

impl<'a> Map<'a> {
    pub fn len(&self) -> usize {
        match self {
            Map::Json(entries) => entries.len(),
            Map::Owned(entries) => entries.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value under a key; a double key finds an equal integral key.
    pub fn get(&self, key: &Value<'a>) -> Option<Value<'a>> {
        match self {
            Map::Json(entries) => match key {
                Value::String(name) => json_get(entries, name.as_str()).map(Value::from_json),
                _ => None,
            },
            Map::Owned(entries) => match key {
                Value::Double(number) => entries
                    .get(&Key::Double(*number))
                    .or_else(|| {
                        let integral = number.fract() == 0.0 && number.is_finite();
                        let as_int = (integral
                            && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18)
                                .contains(number))
                        .then(|| entries.get(&Key::Int(*number as i64)))
                        .flatten();
                        as_int.or_else(|| {
                            (integral && (0.0..1.844_674_407_370_955_2e19).contains(number))
                                .then(|| entries.get(&Key::Uint(*number as u64)))
                                .flatten()
                        })
                    })
                    .cloned(),
                Value::Null => entries.get(&Key::Null).cloned(),
                Value::Int(number) => entries
                    .get(&Key::Int(*number))
                    .or_else(|| {
                        u64::try_from(*number)
                            .ok()
                            .and_then(|number| entries.get(&Key::Uint(number)))
                    })
                    .cloned(),
                Value::Uint(number) => entries
                    .get(&Key::Uint(*number))
                    .or_else(|| {
                        i64::try_from(*number)
                            .ok()
                            .and_then(|number| entries.get(&Key::Int(number)))
                    })
                    .cloned(),
                other => entries.get(&Key::from_value(other)?).cloned(),
            },
        }
    }

    pub fn get_str(&self, name: &str) -> Option<Value<'a>> {
        match self {
            Map::Json(entries) => json_get(entries, name).map(Value::from_json),
            Map::Owned(entries) => entries
                .get(&Key::String(Str::Owned(Arc::from(name))))
                .cloned(),
        }
    }

    pub fn contains(&self, key: &Value<'a>) -> bool {
        self.get(key).is_some()
    }

    /// The first entry, in the map's order.
    pub fn first(&self) -> Option<(Value<'a>, Value<'a>)> {
        match self {
            Map::Json(entries) => entries.iter().next().map(|(key, value)| {
                (
                    Value::String(Str::Borrowed(key.as_str())),
                    Value::from_json(value),
                )
            }),
            Map::Owned(entries) => entries
                .first()
                .map(|(key, value)| (key.to_value(), value.clone())),
        }
    }

    /// The keys, in the map's order.
    pub fn keys(&self) -> Vec<Value<'a>> {
        match self {
            Map::Json(entries) => entries
                .keys()
                .map(|key| Value::String(Str::Borrowed(key.as_str())))
                .collect(),
            Map::Owned(entries) => entries.keys().map(Key::to_value).collect(),
        }
    }

    /// The entries, in the map's order.
    pub fn entries(&self) -> Vec<(Value<'a>, Value<'a>)> {
        match self {
            Map::Json(entries) => entries
                .iter()
                .map(|(key, value)| {
                    (
                        Value::String(Str::Borrowed(key.as_str())),
                        Value::from_json(value),
                    )
                })
                .collect(),
            Map::Owned(entries) => entries
                .iter()
                .map(|(key, value)| (key.to_value(), value.clone()))
                .collect(),
        }
    }
}

/// A JSON object's entry: small objects (most of a Kubernetes object's) are searched in order,
/// which is faster than hashing the key with the map's SipHash.
pub(crate) fn json_get<'j>(
    entries: &'j serde_json::Map<String, Json>,
    name: &str,
) -> Option<&'j Json> {
    if entries.len() <= 16 {
        return entries
            .iter()
            .find(|(key, _)| key.as_str() == name)
            .map(|(_, value)| value);
    }
    entries.get(name)
}

/// A typed object built by a struct literal: its type name and its fields in the order written.
#[derive(Debug, Clone)]
pub struct Object<'a> {
    pub type_name: Arc<str>,
    pub fields: IndexMap<Arc<str>, Value<'a>>,
}

/// Fields whose names start with this are bookkeeping of an opaque value (how apimachinery
/// holds a quantity), not part of what it is: equality ignores them.
pub(crate) const BOOKKEEPING: char = '@';

/// Marks an opaque value cel-go holds by pointer (a quantity `add` or `sub` made): its type's
/// `Equal` takes only values, so such a value on the right of `==` is no such overload
/// (`quantity('1') == quantity('1').add(0)`), and `!=` holds.
pub(crate) const HELD_BY_POINTER: &str = "@pointer";

impl Object<'_> {
    fn visible(&self) -> impl Iterator<Item = (&Arc<str>, &Value<'_>)> {
        self.fields
            .iter()
            .filter(|(name, _)| !name.starts_with(BOOKKEEPING))
    }
}

impl<'a> Value<'a> {
    /// Whether it is a bool, int, uint, double or string: what may key a map lookup, and what a
    /// constant list may hold to become a set lookup.
    pub(crate) fn is_primitive(&self) -> bool {
        matches!(
            self,
            Value::Bool(_) | Value::Int(_) | Value::Uint(_) | Value::Double(_) | Value::String(_)
        )
    }

    /// About how many values this one holds that it owns (what it reads in place from JSON is
    /// not counted): one per list item, map entry and object field, one per 32 bytes of string.
    /// Shared parts count each time they are reached (an over-estimate), and counting stops
    /// once past `limit`, so it takes at most about `limit` steps whatever the value.
    pub fn owned_size(&self, limit: usize) -> usize {
        enum Work<'v, 'a> {
            Value(&'v Value<'a>),
            List(&'v List<'a>),
        }
        let mut total = 0usize;
        let mut stack = vec![Work::Value(self)];
        while let Some(work) = stack.pop() {
            if total > limit {
                break;
            }
            match work {
                Work::List(List::Json(_)) => {}
                Work::List(List::Owned(items)) => {
                    total += items.len();
                    stack.extend(items.iter().map(Work::Value));
                }
                Work::List(List::Concat(concat)) => {
                    stack.push(Work::List(&concat.first));
                    stack.push(Work::List(&concat.second));
                }
                Work::Value(value) => match value {
                    Value::String(Str::Owned(text)) => total += text.len() / 32 + 1,
                    Value::Bytes(bytes) => total += bytes.len() / 32 + 1,
                    Value::List(list) => stack.push(Work::List(list)),
                    Value::Map(Map::Owned(entries)) => {
                        total += entries.len();
                        stack.extend(entries.values().map(Work::Value));
                    }
                    Value::Optional(Some(inner)) => stack.push(Work::Value(inner)),
                    Value::Object(object) => {
                        total += object.fields.len();
                        stack.extend(object.fields.values().map(Work::Value));
                    }
                    _ => {}
                },
            }
        }
        total
    }

    /// A JSON document as a CEL value, read in place. Numbers that fit an int are ints, others
    /// doubles (as kube-apiserver decodes unstructured objects).
    pub fn from_json(json: &'a Json) -> Value<'a> {
        match json {
            Json::Null => Value::Null,
            Json::Bool(value) => Value::Bool(*value),
            Json::Number(number) => {
                if let Some(int) = number.as_i64() {
                    Value::Int(int)
                } else {
                    Value::Double(number.as_f64().unwrap_or(f64::NAN))
                }
            }
            Json::String(text) => Value::String(Str::Borrowed(text)),
            Json::Array(items) => Value::List(List::Json(items)),
            Json::Object(entries) => Value::Map(Map::Json(entries)),
        }
    }

    pub fn string(text: impl Into<Arc<str>>) -> Value<'a> {
        Value::String(Str::Owned(text.into()))
    }

    pub fn list(values: Vec<Value<'a>>) -> Value<'a> {
        Value::List(List::from_values(values))
    }

    /// The value's type at run time (`type(x)`).
    pub fn type_of(&self) -> Type {
        match self {
            Value::Null => Type::Null,
            Value::Bool(_) => Type::Bool,
            Value::Int(_) => Type::Int,
            Value::Uint(_) => Type::Uint,
            Value::Double(_) => Type::Double,
            Value::String(_) => Type::String,
            Value::Bytes(_) => Type::Bytes,
            Value::List(_) => Type::list(Type::Dyn),
            Value::Map(_) => Type::map(Type::Dyn, Type::Dyn),
            Value::Duration(_) => Type::Duration,
            Value::Timestamp(_) => Type::Timestamp,
            Value::Type(_) => Type::Type(None),
            Value::Optional(_) => Type::optional(Type::Dyn),
            Value::Object(object) => Type::Object(object.type_name.clone()),
        }
    }

    /// CEL's equality (`==`): numbers compare across int, uint and double; lists and maps
    /// element-wise; values of different types are unequal (never an error).
    pub fn equals(&self, other: &Value<'_>) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::String(a), Value::String(b)) => a.as_str() == b.as_str(),
            (Value::Bytes(a), Value::Bytes(b)) => a == b,
            (Value::Duration(a), Value::Duration(b)) => a == b,
            (Value::Timestamp(a), Value::Timestamp(b)) => a == b,
            (Value::Type(a), Value::Type(b)) => a.runtime_name() == b.runtime_name(),
            (Value::Optional(a), Value::Optional(b)) => match (a, b) {
                (None, None) => true,
                (Some(a), Some(b)) => a.equals(b),
                _ => false,
            },
            (Value::List(a), Value::List(b)) => {
                a.len() == b.len() && a.iter().zip(b.iter()).all(|(a, b)| a.equals(&b))
            }
            (Value::Map(a), Value::Map(b)) => {
                a.len() == b.len()
                    && a.entries().iter().all(|(key, value)| {
                        let key = rebind(key);
                        b.get(&key).is_some_and(|other| value.equals(&other))
                    })
            }
            (Value::Object(a), Value::Object(b)) => {
                a.type_name == b.type_name
                    && a.visible().count() == b.visible().count()
                    && a.visible().all(|(name, value)| {
                        b.fields.get(name).is_some_and(|other| value.equals(other))
                    })
            }
            (a, b) => match numeric_order(a, b) {
                Some(ordering) => ordering == Ordering::Equal,
                None => false,
            },
        }
    }

    /// CEL's ordering (`<`, `<=`, …): numbers across types, strings, bytes, bools, durations and
    /// timestamps. `None` when the two cannot be ordered (including NaN).
    pub fn compare(&self, other: &Value<'_>) -> Option<Ordering> {
        match (self, other) {
            (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
            (Value::String(a), Value::String(b)) => Some(a.as_str().cmp(b.as_str())),
            (Value::Bytes(a), Value::Bytes(b)) => Some(a.cmp(b)),
            (Value::Duration(a), Value::Duration(b)) => Some(a.cmp(b)),
            (Value::Timestamp(a), Value::Timestamp(b)) => Some(a.cmp(b)),
            (a, b) => numeric_order(a, b),
        }
    }

    /// The value as JSON, for patches and messages. Fails on values JSON cannot hold (bytes are
    /// base64, durations and timestamps their string forms, as Kubernetes serializes them).
    pub fn to_json(&self) -> Result<Json, String> {
        Ok(match self {
            Value::Null => Json::Null,
            Value::Bool(value) => Json::Bool(*value),
            Value::Int(value) => Json::from(*value),
            Value::Uint(value) => Json::from(*value),
            Value::Double(value) => serde_json::Number::from_f64(*value)
                .map(Json::Number)
                .ok_or_else(|| format!("{value} cannot be written as JSON"))?,
            Value::String(text) => Json::String(text.as_str().to_owned()),
            Value::Bytes(bytes) => Json::String(crate::time::base64_encode(bytes)),
            Value::List(items) => Json::Array(
                items
                    .iter()
                    .map(|item| item.to_json())
                    .collect::<Result<_, _>>()?,
            ),
            Value::Map(Map::Json(entries)) => Json::Object((*entries).clone()),
            Value::Map(Map::Owned(entries)) => {
                let mut object = serde_json::Map::with_capacity(entries.len());
                for (key, value) in entries.iter() {
                    let key = match key {
                        Key::String(text) => text.as_str().to_owned(),
                        other => {
                            return Err(format!(
                                "a map key {} cannot be written as a JSON field name",
                                other.to_value()
                            ));
                        }
                    };
                    object.insert(key, value.to_json()?);
                }
                Json::Object(object)
            }
            Value::Duration(duration) => Json::String(duration.to_string()),
            Value::Timestamp(timestamp) => Json::String(timestamp.to_string()),
            Value::Type(kind) => Json::String(kind.runtime_name().to_owned()),
            Value::Optional(_) => {
                return Err("an optional value cannot be written as JSON".to_owned());
            }
            Value::Object(object) => {
                let mut fields = serde_json::Map::with_capacity(object.fields.len());
                for (name, value) in &object.fields {
                    fields.insert(name.to_string(), value.to_json()?);
                }
                Json::Object(fields)
            }
        })
    }
}

/// A key taken from one map, to look up in another (the lifetimes of the two maps differ).
fn rebind<'b>(value: &Value<'_>) -> Value<'b> {
    match value {
        Value::Bool(value) => Value::Bool(*value),
        Value::Int(value) => Value::Int(*value),
        Value::Uint(value) => Value::Uint(*value),
        Value::Double(value) => Value::Double(*value),
        Value::String(text) => Value::string(text.as_str()),
        _ => Value::Null,
    }
}

/// The order of two numbers of any of CEL's numeric types (exact between integers).
fn numeric_order(a: &Value<'_>, b: &Value<'_>) -> Option<Ordering> {
    match (a, b) {
        (Value::Int(a), Value::Int(b)) => Some(a.cmp(b)),
        (Value::Uint(a), Value::Uint(b)) => Some(a.cmp(b)),
        (Value::Int(a), Value::Uint(b)) => Some((*a as i128).cmp(&(*b as i128))),
        (Value::Uint(a), Value::Int(b)) => Some((*a as i128).cmp(&(*b as i128))),
        (Value::Double(a), Value::Double(b)) => a.partial_cmp(b),
        (Value::Double(a), Value::Int(b)) => compare_double_int(*a, *b as i128, false),
        (Value::Double(a), Value::Uint(b)) => compare_double_int(*a, *b as i128, true),
        (Value::Int(a), Value::Double(b)) => {
            compare_double_int(*b, *a as i128, false).map(Ordering::reverse)
        }
        (Value::Uint(a), Value::Double(b)) => {
            compare_double_int(*b, *a as i128, true).map(Ordering::reverse)
        }
        _ => None,
    }
}

/// cel-go's comparison of a double with an int or uint: outside the integer type's range the
/// double decides by sign; inside, the integer is converted to a double (lossy above 2^53,
/// exactly as cel-go compares).
fn compare_double_int(double: f64, int: i128, unsigned: bool) -> Option<Ordering> {
    if double.is_nan() {
        return None;
    }
    let (low, high) = if unsigned {
        (0.0, u64::MAX as f64)
    } else {
        (i64::MIN as f64, i64::MAX as f64)
    };
    if double < low {
        return Some(Ordering::Less);
    }
    if double > high {
        return Some(Ordering::Greater);
    }
    double.partial_cmp(&(int as f64))
}

impl fmt::Display for Value<'_> {
    /// CEL-like text of the value, for messages (strings quoted inside lists and maps).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("null"),
            Value::Bool(value) => write!(f, "{value}"),
            Value::Int(value) => write!(f, "{value}"),
            Value::Uint(value) => write!(f, "{value}u"),
            Value::Double(value) => write!(f, "{value}"),
            Value::String(text) => write!(f, "{:?}", text.as_str()),
            Value::Bytes(bytes) => write!(f, "b{:?}", String::from_utf8_lossy(bytes)),
            Value::List(items) => {
                f.write_str("[")?;
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
            Value::Map(entries) => {
                f.write_str("{")?;
                for (index, (key, value)) in entries.entries().iter().enumerate() {
                    if index > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{key}: {value}")?;
                }
                f.write_str("}")
            }
            Value::Duration(duration) => write!(f, "duration({:?})", duration.to_string()),
            Value::Timestamp(timestamp) => write!(f, "timestamp({:?})", timestamp.to_string()),
            Value::Type(kind) => f.write_str(kind.runtime_name()),
            Value::Optional(None) => f.write_str("optional.none()"),
            Value::Optional(Some(inner)) => write!(f, "optional.of({inner})"),
            Value::Object(object) => {
                write!(f, "{}{{", object.type_name)?;
                for (index, (name, value)) in object.fields.iter().enumerate() {
                    if index > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{name}: {value}")?;
                }
                f.write_str("}")
            }
        }
    }
}

/// A value as Go's `%v` writes a cel-go value (in messages: `no such key: a`).
pub(crate) fn go_text(value: &Value<'_>) -> String {
    match value {
        Value::String(text) => text.as_str().to_owned(),
        Value::Uint(value) => value.to_string(),
        Value::Double(value) => format_double(*value),
        Value::Null => "NULL_VALUE".to_owned(),
        other => other.to_string(),
    }
}

/// The Go type of a cel-go value, as `%T` writes it (in cel-go's messages).
pub(crate) fn go_type_name(value: &Value<'_>) -> &'static str {
    match value {
        Value::Null => "types.Null",
        Value::Bool(_) => "types.Bool",
        Value::Int(_) => "types.Int",
        Value::Uint(_) => "types.Uint",
        Value::Double(_) => "types.Double",
        Value::String(_) => "types.String",
        Value::Bytes(_) => "types.Bytes",
        Value::List(_) => "*types.baseList",
        Value::Map(_) => "*types.baseMap",
        Value::Duration(_) => "types.Duration",
        Value::Timestamp(_) => "types.Timestamp",
        Value::Type(_) => "*types.Type",
        Value::Optional(_) => "*types.Optional",
        Value::Object(_) => "*types.Object",
    }
}

/// A double as cel-go's `string(double)` writes it: Go's `%g`, the shortest digits that read
/// back the same (`1e+06`, `123456`, `0.0001`, `1e-05`, `+Inf`, `NaN`).
pub(crate) fn format_double(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: `d.ddddde±x`.
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if negative { "-" } else { "" };
    // Go's %g with the shortest digits uses an exponent when it is < -4 or >= 6.
    let use_exponent = !(-4..6).contains(&exponent);
    if use_exponent {
        let mut text = String::from(sign);
        text.push_str(&digits[..1]);
        if digits.len() > 1 {
            text.push('.');
            text.push_str(&digits[1..]);
        }
        text.push('e');
        text.push(if exponent < 0 { '-' } else { '+' });
        text.push_str(&format!("{:02}", exponent.abs()));
        text
    } else if exponent < 0 {
        format!("{sign}0.{}{digits}", "0".repeat((-exponent - 1) as usize))
    } else {
        let whole = exponent as usize + 1;
        if digits.len() <= whole {
            format!("{sign}{digits}{}", "0".repeat(whole - digits.len()))
        } else {
            format!("{sign}{}.{}", &digits[..whole], &digits[whole..])
        }
    }
}

/// `cel.@mapInsert`: in place when the map is owned and not shared (a comprehension's
/// accumulator, which cel-go also grows in place), else on a copy.
pub(crate) fn map_insert_owned<'a>(
    map: Value<'a>,
    entries: &[(Value<'a>, Value<'a>)],
) -> Result<Value<'a>, EvalError> {
    let mut map = match map {
        Value::Map(Map::Owned(map)) => map,
        Value::Map(map) => Arc::new(
            map.entries()
                .into_iter()
                .map(|(key, value)| (Key::from_any(&key), value))
                .collect(),
        ),
        // cel-go's bare refusal (`types.MaybeNoSuchOverloadErr`).
        _ => return Err(EvalError::NoSuchOverload("no such overload".to_owned())),
    };
    let copy = Arc::make_mut(&mut map);
    for (key, value) in entries {
        let key = Key::from_any(key);
        if copy.contains_key(&key) {
            return Err(EvalError::Invalid(format!(
                "insert failed: key {} already exists",
                go_text(&key.to_value())
            )));
        }
        copy.insert(key, value.clone());
    }
    Ok(Value::Map(Map::Owned(map)))
}
