//! The shape check of a policy document: its fields, types and enum values against the
//! OpenAPI v3 schema of its kind's CRD (the one the apiserver enforces, generated from the
//! types in `kanon-api`), before serde decodes it.
//!
//! serde stops at the first error and speaks of Rust types (`expected struct ConstantValue`);
//! this check walks the whole document and reports every problem at once, each by field path
//! (`spec.validateRules[1].template.condition.dataRef`) and in the words of a policy author:
//! an unknown field with the one that was probably meant, a wrong type with what to write
//! instead, a value outside an enum with the allowed values, a missing required field.
//! [`explain_decode_error`] puts what serde still finds afterwards in the same words.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kanon_api::{PolicyKind, VERSION};
use serde_json::{Map, Value};

use crate::error::FieldError;

/// What kind of problem a [`Problem`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    /// A field the schema does not have; decoding skips it.
    UnknownField,
    /// A value of the wrong JSON type (a string where an integer goes, ...).
    WrongType,
    /// A value of the right type that the schema does not allow (outside an enum or a range).
    WrongValue,
    /// A required field that is absent.
    Missing,
}

/// One place where a policy document does not fit the schema of its kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// What kind of problem it is.
    pub kind: ProblemKind,
    /// The field path and the message for the policy's author.
    pub error: FieldError,
}

impl Problem {
    /// Whether the document cannot be decoded with this problem: every kind but an unknown
    /// field, which decoding skips (and the policy stays usable, with the field reported).
    pub fn is_fatal(&self) -> bool {
        self.kind != ProblemKind::UnknownField
    }
}

/// One step of a field path, to find the place of a decoding error in the document and the
/// schema ([`explain_decode_error`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathStep {
    /// A field of an object, or a key of a map.
    Key(String),
    /// An item of a list.
    Index(usize),
}

/// Checks `document` (a policy of `kind`, whose `apiVersion` and `kind` were already checked)
/// against the schema of `kind`'s CRD. Returns every problem, in document order; empty when
/// the document fits.
pub fn check(kind: PolicyKind, document: &Value) -> Vec<Problem> {
    let Some(root) = schema_of(kind) else {
        return Vec::new();
    };
    let mut checker = Checker::default();
    checker.value(root, document, None);
    checker.problems
}

/// Rewrites a serde error message into the words of [`check`]'s messages, with no Rust type
/// names: for what serde rejects after the shape check passed (a form the schema leaves open,
/// such as a boolean where a number goes). `path` is where serde failed, in `document`.
/// A message that is none of serde's own is returned unchanged.
pub fn explain_decode_error(
    kind: PolicyKind,
    document: &Value,
    path: &[PathStep],
    message: &str,
) -> String {
    let value = value_at(document, path);
    let node = schema_of(kind).and_then(|root| node_at(root, path));
    // The schema describes what goes here better than serde's name for the type, unless it
    // leaves the value open.
    let wanted_words = |serde_says: &str| match node {
        Some(n) if !matches!(n.shape, Shape::Any) => expected(n),
        _ => plain_expected(serde_says),
    };
    let found_words = |serde_says: &str| match value {
        Some(v) => describe(v),
        None => plain_unexpected(serde_says),
    };
    if let Some(rest) = message.strip_prefix("invalid type: ") {
        let (found, wanted) = rest.split_once(", expected ").unwrap_or((rest, ""));
        return format!(
            "must be {}, not {}",
            wanted_words(wanted),
            found_words(found)
        );
    }
    if let Some(rest) = message.strip_prefix("invalid value: ") {
        // The value has the right type but not the right range: serde's expectation (`i32`)
        // carries the range, the schema's type alone does not.
        let (found, wanted) = rest.split_once(", expected ").unwrap_or((rest, ""));
        return format!(
            "must be {}, not {}",
            plain_expected(wanted),
            found_words(found)
        );
    }
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        // `` `x`, expected one of `A`, `B` `` or `` `x`, there are no variants ``.
        let (found, wanted) = rest.split_once(", expected ").unwrap_or((rest, ""));
        let found = backticked(found).into_iter().next().unwrap_or_default();
        let allowed = backticked(wanted);
        if allowed.is_empty() {
            return format!("`{found}` is not allowed here");
        }
        return format!(
            "must be one of {}, not `{found}`{}",
            list(allowed.iter().map(|a| format!("`{a}`"))),
            did_you_mean(&found, allowed.iter().map(String::as_str)),
        );
    }
    if let Some(rest) = message.strip_prefix("missing field ") {
        return format!("field {rest} is required");
    }
    if let Some(rest) = message.strip_prefix("unknown field ") {
        let (found, _) = rest.split_once(", expected ").unwrap_or((rest, ""));
        return format!("unknown field {found}");
    }
    if let Some(name) = message.strip_prefix("data did not match any variant of untagged enum ") {
        let wanted = match name.trim() {
            // kanon-api's only untagged type: the schema leaves it open, serde does not.
            "NumberOrString" => {
                "a number, written as a JSON number (0.5) or as a string (\"0.5\")".to_string()
            }
            other => wanted_words(other),
        };
        return format!("must be {wanted}, not {}", found_words(""));
    }
    // The parser's own words (k8s-openapi's times), with what it was reading.
    if node.is_some_and(|n| n.time) {
        return format!("must be a time such as `2024-01-01T00:00:00Z` (RFC 3339): {message}");
    }
    message.to_string()
}

// ---------------------------------------------------------------------------------------------
// The schema, as the check reads it
// ---------------------------------------------------------------------------------------------

/// One node of a structural schema, reduced to what the check enforces.
#[derive(Debug)]
struct Node {
    /// `null` is a value here.
    nullable: bool,
    /// The allowed values, when the schema lists them.
    allowed: Vec<Value>,
    /// A string in RFC 3339 (`format: date-time`), which serde parses.
    time: bool,
    shape: Shape,
}

#[derive(Debug)]
enum Shape {
    /// Any JSON value: `x-kubernetes-preserve-unknown-fields` without a type.
    Any,
    /// `x-kubernetes-int-or-string`.
    IntOrString,
    String,
    /// An integer within the range of its format (`int32`, `int64`).
    Integer {
        min: i64,
        max: i64,
    },
    Number,
    Boolean,
    List(Box<Node>),
    Object(Object),
}

#[derive(Debug)]
struct Object {
    properties: BTreeMap<String, Node>,
    required: Vec<String>,
    /// The values of a map (`additionalProperties`).
    values: Option<Box<Node>>,
    /// `x-kubernetes-preserve-unknown-fields`: fields the schema does not list are kept.
    open: bool,
}

impl Node {
    fn new(shape: Shape) -> Node {
        Node {
            nullable: false,
            allowed: Vec::new(),
            time: false,
            shape,
        }
    }

    fn any() -> Node {
        Node::new(Shape::Any)
    }

    /// Reads one node of a CRD's schema.
    ///
    /// `anyOf`, `oneOf`, `allOf` and `not` are not read: kanon's generated schemas use none of
    /// them, and leaving them out can only let more through, to serde, never reject a valid
    /// policy.
    fn from_schema(s: &JSONSchemaProps) -> Node {
        let preserve = s.x_kubernetes_preserve_unknown_fields == Some(true);
        let shape = if s.x_kubernetes_int_or_string == Some(true) {
            Shape::IntOrString
        } else {
            match s.type_.as_deref() {
                Some("string") => Shape::String,
                Some("integer") => match s.format.as_deref() {
                    Some("int32") => Shape::Integer {
                        min: i32::MIN.into(),
                        max: i32::MAX.into(),
                    },
                    _ => Shape::Integer {
                        min: i64::MIN,
                        max: i64::MAX,
                    },
                },
                Some("number") => Shape::Number,
                Some("boolean") => Shape::Boolean,
                Some("array") => Shape::List(Box::new(match &s.items {
                    Some(JSONSchemaPropsOrArray::Schema(items)) => Node::from_schema(items),
                    _ => Node::any(),
                })),
                Some("object") => Shape::Object(Object {
                    properties: s
                        .properties
                        .iter()
                        .flatten()
                        .map(|(k, v)| (k.clone(), Node::from_schema(v)))
                        .collect(),
                    required: s.required.clone().unwrap_or_default(),
                    values: match &s.additional_properties {
                        Some(JSONSchemaPropsOrBool::Schema(v)) => {
                            Some(Box::new(Node::from_schema(v)))
                        }
                        Some(JSONSchemaPropsOrBool::Bool(true)) => Some(Box::new(Node::any())),
                        _ => None,
                    },
                    open: preserve,
                }),
                // No type: preserve-unknown-fields alone, or a form this check does not know.
                _ => Shape::Any,
            }
        };
        Node {
            nullable: s.nullable == Some(true),
            allowed: s.enum_.iter().flatten().map(|j| j.0.clone()).collect(),
            time: s.format.as_deref() == Some("date-time"),
            shape,
        }
    }
}

/// `metadata`, which kube leaves out of a CRD's schema (the apiserver knows it): the fields of
/// an ObjectMeta, with the types of those a policy's author writes.
fn object_meta() -> Node {
    let string = || Node::new(Shape::String);
    let time = || Node {
        time: true,
        ..string()
    };
    let integer = || {
        Node::new(Shape::Integer {
            min: i64::MIN,
            max: i64::MAX,
        })
    };
    let string_map = || {
        Node::new(Shape::Object(Object {
            properties: BTreeMap::new(),
            required: Vec::new(),
            values: Some(Box::new(string())),
            open: false,
        }))
    };
    let list = |item: Node| Node::new(Shape::List(Box::new(item)));
    let properties = [
        ("annotations", string_map()),
        ("creationTimestamp", time()),
        ("deletionGracePeriodSeconds", integer()),
        ("deletionTimestamp", time()),
        ("finalizers", list(string())),
        ("generateName", string()),
        ("generation", integer()),
        ("labels", string_map()),
        // Written by the apiserver, not by authors: their insides are left to serde.
        ("managedFields", list(Node::any())),
        ("name", string()),
        ("namespace", string()),
        ("ownerReferences", list(Node::any())),
        ("resourceVersion", string()),
        ("selfLink", string()),
        ("uid", string()),
    ];
    Node::new(Shape::Object(Object {
        properties: properties
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        required: Vec::new(),
        values: None,
        open: false,
    }))
}

/// The root of a kind's schema, with `apiVersion`, `kind` and `metadata`, which the CRD's
/// schema leaves to the apiserver.
fn root_of(schema: &JSONSchemaProps) -> Node {
    let mut root = Node::from_schema(schema);
    if let Shape::Object(o) = &mut root.shape {
        o.properties
            .insert("apiVersion".into(), Node::new(Shape::String));
        o.properties.insert("kind".into(), Node::new(Shape::String));
        o.properties.insert("metadata".into(), object_meta());
        if !o.required.iter().any(|r| r == "metadata") {
            // serde needs it; the apiserver always has it.
            o.required.insert(0, "metadata".into());
        }
    }
    root
}

/// Each kind's schema, read once from the CRDs `kanon-api` generates.
static SCHEMAS: LazyLock<Vec<(PolicyKind, Node)>> = LazyLock::new(|| {
    kanon_api::crds()
        .iter()
        .filter_map(|crd| {
            let kind = PolicyKind::from_kind(&crd.spec.names.kind)?;
            let version = crd.spec.versions.iter().find(|v| v.name == VERSION)?;
            let schema = version.schema.as_ref()?.open_api_v3_schema.as_ref()?;
            Some((kind, root_of(schema)))
        })
        .collect()
});

fn schema_of(kind: PolicyKind) -> Option<&'static Node> {
    SCHEMAS.iter().find(|(k, _)| *k == kind).map(|(_, n)| n)
}

/// The schema node at `path`; `None` where the schema does not describe the place.
fn node_at<'a>(mut node: &'a Node, path: &[PathStep]) -> Option<&'a Node> {
    for step in path {
        node = match (&node.shape, step) {
            (Shape::Object(o), PathStep::Key(k)) => match o.properties.get(k) {
                Some(n) => n,
                None => o.values.as_deref()?,
            },
            (Shape::List(item), PathStep::Index(_)) => item,
            _ => return None,
        };
    }
    Some(node)
}

fn value_at<'a>(mut value: &'a Value, path: &[PathStep]) -> Option<&'a Value> {
    for step in path {
        value = match step {
            PathStep::Key(k) => value.get(k.as_str())?,
            PathStep::Index(i) => value.get(*i)?,
        };
    }
    Some(value)
}

// ---------------------------------------------------------------------------------------------
// The check
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
struct Checker {
    problems: Vec<Problem>,
    /// The field path of the value being checked.
    path: String,
    /// How many values were let through only because the schema leaves them open: to prefer,
    /// among the ways to write a value, the one the schema describes.
    open_values: usize,
}

impl Checker {
    fn report(&mut self, kind: ProblemKind, message: String) {
        self.problems.push(Problem {
            kind,
            error: FieldError::new(self.path.clone(), message),
        });
    }

    /// Appends `.key` to the path; returns the length to truncate back to.
    fn enter_key(&mut self, key: &str) -> usize {
        let mark = self.path.len();
        if !self.path.is_empty() {
            self.path.push('.');
        }
        self.path.push_str(key);
        mark
    }

    fn enter_index(&mut self, index: usize) -> usize {
        let mark = self.path.len();
        self.path.push_str(&format!("[{index}]"));
        mark
    }

    /// Checks `value` against `node`; `name` is the value's field name or map key (`None` for
    /// a list item), for hints.
    fn value(&mut self, node: &Node, value: &Value, name: Option<&str>) {
        if value.is_null() && node.nullable {
            return;
        }
        let fits = match &node.shape {
            Shape::Any => {
                self.open_values += 1;
                true
            }
            Shape::IntOrString => is_integer(value) || value.is_string(),
            Shape::String => value.is_string(),
            Shape::Integer { min, max } => {
                if let Value::Number(n) = value
                    && is_integer(value)
                {
                    // A u64 beyond i64 is out of every range.
                    let inside = n.as_i64().is_some_and(|i| (*min..=*max).contains(&i));
                    if !inside {
                        self.report(
                            ProblemKind::WrongValue,
                            format!("must be an integer between {min} and {max}, not {n}"),
                        );
                        return;
                    }
                    true
                } else {
                    false
                }
            }
            Shape::Number => value.is_number(),
            Shape::Boolean => value.is_boolean(),
            Shape::List(item) => match value.as_array() {
                Some(items) => {
                    for (i, v) in items.iter().enumerate() {
                        let mark = self.enter_index(i);
                        self.value(item, v, None);
                        self.path.truncate(mark);
                    }
                    true
                }
                None => false,
            },
            Shape::Object(o) => match value.as_object() {
                Some(map) => {
                    self.object(o, map);
                    true
                }
                None => false,
            },
        };
        if !fits {
            let hint = hint(node, value, name);
            self.report(
                ProblemKind::WrongType,
                format!("must be {}, not {}{hint}", expected(node), describe(value)),
            );
        } else if !node.allowed.is_empty() && !node.allowed.contains(value) {
            let mean = match value.as_str() {
                Some(s) => did_you_mean(s, node.allowed.iter().filter_map(Value::as_str)),
                None => String::new(),
            };
            self.report(
                ProblemKind::WrongValue,
                format!(
                    "must be one of {}, not {}{mean}",
                    allowed(&node.allowed),
                    quoted(value)
                ),
            );
        }
    }

    fn object(&mut self, o: &Object, map: &Map<String, Value>) {
        for (key, v) in map {
            let mark = self.enter_key(key);
            match o.properties.get(key) {
                // The apiserver drops a `null` it does not allow on an optional field, and serde
                // reads it as absent or rejects it depending on the Rust type: serde decides.
                Some(prop) if v.is_null() && !prop.nullable && !o.required.contains(key) => {}
                Some(prop) => self.value(prop, v, Some(key)),
                None => match &o.values {
                    Some(values) => self.value(values, v, Some(key)),
                    None if o.open => {}
                    None => {
                        let message = match suggestion(key, o.properties.keys()) {
                            Some(meant) => format!("unknown field; did you mean `{meant}`?"),
                            None => format!(
                                "unknown field; known fields: {}",
                                list(o.properties.keys().map(|k| format!("`{k}`")))
                            ),
                        };
                        self.report(ProblemKind::UnknownField, message);
                    }
                },
            }
            self.path.truncate(mark);
        }
        for required in &o.required {
            if !map.contains_key(required) {
                let mark = self.enter_key(required);
                let message = match o.properties.get(required) {
                    Some(n) if !n.allowed.is_empty() => {
                        format!("is required: {}", allowed(&n.allowed))
                    }
                    _ => "is required".to_string(),
                };
                self.report(ProblemKind::Missing, message);
                self.path.truncate(mark);
            }
        }
    }
}

/// `; write `name: ...``: the value rewritten in the form `node` takes, when there is one
/// obvious way (`value: 2` → `value: {integer: 2}`, `"CREATE"` → `["CREATE"]`).
fn hint(node: &Node, value: &Value, name: Option<&str>) -> String {
    let Some(rewritten) = rewrite(node, value) else {
        return String::new();
    };
    match name {
        Some(name) => format!("; write `{name}: {}`", flow(&rewritten)),
        None => format!("; write `{}`", flow(&rewritten)),
    }
}

/// Whether `value` fits `node`, and if so how many of its parts only fit because the schema
/// leaves them open (fewer is a closer fit).
fn fit(node: &Node, value: &Value) -> Option<usize> {
    let mut checker = Checker::default();
    checker.value(node, value, None);
    checker.problems.is_empty().then_some(checker.open_values)
}

/// `value` in the form `node` takes, when one is obvious.
fn rewrite(node: &Node, value: &Value) -> Option<Value> {
    // An empty list or object says nothing of what was meant (`[]` would fit any list field).
    let empty = match value {
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    };
    if empty {
        return None;
    }
    let candidate = match (&node.shape, value) {
        (Shape::Object(o), v) if !v.is_object() => {
            // The one field of the object that takes the value best (`integer` for 2, before
            // `float`, which takes anything).
            let mut fits: Vec<(usize, &String)> = o
                .properties
                .iter()
                .filter_map(|(k, n)| fit(n, v).map(|open| (open, k)))
                .collect();
            fits.sort();
            match fits.as_slice() {
                [(best, key), rest @ ..] if rest.first().is_none_or(|(o, _)| o > best) => {
                    Value::Object(Map::from_iter([((*key).clone(), v.clone())]))
                }
                _ => return None,
            }
        }
        (Shape::List(_), v) if !v.is_array() => Value::Array(vec![v.clone()]),
        (Shape::String | Shape::IntOrString, Value::Number(_) | Value::Bool(_)) => {
            Value::String(value.to_string())
        }
        (Shape::Integer { .. }, Value::String(s)) => {
            Value::Number(s.trim().parse::<i64>().ok()?.into())
        }
        (Shape::Number, Value::String(s)) => match s.trim().parse::<i64>() {
            Ok(i) => Value::Number(i.into()),
            Err(_) => Value::Number(serde_json::Number::from_f64(s.trim().parse().ok()?)?),
        },
        (Shape::Boolean, Value::String(s)) => Value::Bool(s.trim().parse().ok()?),
        _ => return None,
    };
    fit(node, &candidate).map(|_| candidate)
}

/// An integer as serde reads one: not a decimal number, even `2.0`.
fn is_integer(value: &Value) -> bool {
    matches!(value, Value::Number(n) if n.is_i64() || n.is_u64())
}

// ---------------------------------------------------------------------------------------------
// Words
// ---------------------------------------------------------------------------------------------

/// What `node` takes, as a noun phrase: `an integer`, `a list of strings`, `one of `A`, `B``.
fn expected(node: &Node) -> String {
    if !node.allowed.is_empty() {
        return format!("one of {}", allowed(&node.allowed));
    }
    match &node.shape {
        Shape::Any => "any value".into(),
        Shape::IntOrString => "an integer or a string".into(),
        Shape::String => "a string".into(),
        Shape::Integer { .. } => "an integer".into(),
        Shape::Number => "a number".into(),
        Shape::Boolean => "true or false".into(),
        Shape::List(item) => match plural(item) {
            Some(items) => format!("a list of {items}"),
            None if !item.allowed.is_empty() => {
                format!("a list, each item one of {}", allowed(&item.allowed))
            }
            None => "a list".into(),
        },
        Shape::Object(o) if !o.properties.is_empty() => format!(
            "an object with fields {}",
            list(o.properties.keys().map(|k| format!("`{k}`")))
        ),
        Shape::Object(o) => match o.values.as_deref().and_then(plural) {
            Some(values) => format!("a map of {values}"),
            None if o.values.is_some() => "a map".into(),
            None => "an object".into(),
        },
    }
}

/// The plural of what `node` takes, when it is short: `strings`, `objects`.
fn plural(node: &Node) -> Option<&'static str> {
    if !node.allowed.is_empty() {
        return None;
    }
    Some(match node.shape {
        Shape::Any => return None,
        Shape::IntOrString => "integers or strings",
        Shape::String => "strings",
        Shape::Integer { .. } => "integers",
        Shape::Number => "numbers",
        Shape::Boolean => "booleans",
        Shape::List(_) => "lists",
        Shape::Object(_) => "objects",
    })
}

/// What `value` is, as a noun phrase: `a string ("2")`, `an integer (7)`, `a list`.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("a boolean ({b})"),
        Value::Number(n) if n.is_f64() => format!("a decimal number ({n})"),
        Value::Number(n) => format!("an integer ({n})"),
        Value::String(s) => format!("a string ({})", short(s)),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// A string as JSON, cut after 40 characters: a message quotes it, it need not repeat it whole.
fn short(s: &str) -> String {
    const MAX: usize = 40;
    match s.char_indices().nth(MAX) {
        Some((end, _)) => {
            let json = Value::from(&s[..end]).to_string();
            format!("{}…\"", json.strip_suffix('"').unwrap_or(&json))
        }
        None => Value::from(s).to_string(),
    }
}

/// A value in backticks: strings as written, anything else as JSON.
fn quoted(value: &Value) -> String {
    match value {
        Value::String(s) => format!("`{s}`"),
        other => format!("`{other}`"),
    }
}

fn allowed(values: &[Value]) -> String {
    list(values.iter().map(quoted))
}

/// `a, b, c`, or the first twelve and how many more.
fn list(items: impl Iterator<Item = String>) -> String {
    const MAX: usize = 12;
    let items: Vec<String> = items.collect();
    if items.len() > MAX {
        format!("{} and {} more", items[..MAX].join(", "), items.len() - MAX)
    } else {
        items.join(", ")
    }
}

/// A value as YAML flow text, as an author would write it inline: `{integer: 2}`, `["CREATE"]`.
fn flow(value: &Value) -> String {
    match value {
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(flow).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{k}: {}", flow(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::String(s) => short(s),
        other => other.to_string(),
    }
}

/// `; did you mean `x`?` when one of `known` is close to `found`, else nothing.
fn did_you_mean<'a>(found: &str, known: impl Iterator<Item = &'a str>) -> String {
    match suggestion(found, known) {
        Some(meant) => format!("; did you mean `{meant}`?"),
        None => String::new(),
    }
}

/// The name among `known` closest to `found`: equal but for case, or a few edits away (more
/// for longer names). `None` when none is close.
fn suggestion<'a, S: AsRef<str> + ?Sized + 'a>(
    found: &str,
    known: impl Iterator<Item = &'a S>,
) -> Option<&'a str> {
    let found_lower = found.to_lowercase();
    let limit = match found.chars().count() {
        // Any one- or two-letter name is one edit from another: only case counts.
        0..=2 => 0,
        3..=4 => 1,
        5..=8 => 2,
        _ => 3,
    };
    known
        .map(AsRef::as_ref)
        .filter_map(|k| {
            let distance = edit_distance(&found_lower, &k.to_lowercase(), limit)?;
            Some((distance, k))
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// The edit distance between `a` and `b` ([`kanon_schema::edit_distance`]: insertions,
/// deletions, substitutions and swaps of neighbours), or `None` when it is over `limit`.
fn edit_distance(a: &str, b: &str, limit: usize) -> Option<usize> {
    // Unequal lengths cost at least their difference: this also keeps a huge unknown key from
    // costing a quadratic comparison.
    if a.chars().count().abs_diff(b.chars().count()) > limit {
        return None;
    }
    let distance = kanon_schema::edit_distance(a, b);
    (distance <= limit).then_some(distance)
}

/// The names in backticks in a serde message: `` `A`, `B` or `C` `` gives A, B, C.
fn backticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// serde's name for what it expected (`i32`, `a sequence`, `struct ConstantValue`), in an
/// author's words.
fn plain_expected(serde_says: &str) -> String {
    let s = serde_says.trim();
    let range = |min: i128, max: i128| format!("an integer between {min} and {max}");
    match s {
        "i8" => range(i8::MIN.into(), i8::MAX.into()),
        "i16" => range(i16::MIN.into(), i16::MAX.into()),
        "i32" | "a 32-bit integer" => range(i32::MIN.into(), i32::MAX.into()),
        "i64" => range(i64::MIN.into(), i64::MAX.into()),
        "u8" => range(0, u8::MAX.into()),
        "u16" => range(0, u16::MAX.into()),
        "u32" => range(0, u32::MAX.into()),
        "u64" => range(0, u64::MAX.into()),
        "i128" | "u128" | "isize" | "usize" => "an integer".into(),
        "f32" | "f64" => "a number".into(),
        "a string" | "a borrowed string" | "a character" | "char" => "a string".into(),
        "a boolean" | "bool" => "true or false".into(),
        "a map" => "an object".into(),
        "unit" | "null" => "null".into(),
        "IntOrString" => "an integer or a string".into(),
        "Quantity" => "a quantity, such as `500m` or `1Gi`".into(),
        "Time" | "MicroTime" => "a time, such as `2024-01-01T00:00:00Z`".into(),
        _ if s.starts_with("a sequence") || s.starts_with("tuple") => "a list".into(),
        _ if s.starts_with("struct") || s.starts_with("a map") => "an object".into(),
        _ if s.starts_with("enum") || s.starts_with("variant") || s.contains("identifier") => {
            "one of the allowed values".into()
        }
        // k8s-openapi's structs call themselves by their type name (`ObjectMeta`).
        _ if s.chars().next().is_some_and(char::is_uppercase) && !s.contains(' ') => {
            "an object".into()
        }
        _ => "a value of another form".into(),
    }
}

/// serde's description of what it found (`string "x"`, `integer `7``), in an author's words,
/// for when the document does not have the value at serde's path.
fn plain_unexpected(serde_says: &str) -> String {
    let s = serde_says.trim();
    let inner = |prefix: &str| s.strip_prefix(prefix).map(|v| v.trim().trim_matches('`'));
    if let Some(v) = inner("string ") {
        return format!("a string ({v})");
    }
    if let Some(v) = inner("integer ") {
        return format!("an integer ({v})");
    }
    if let Some(v) = inner("floating point ") {
        return format!("a decimal number ({v})");
    }
    if let Some(v) = inner("boolean ") {
        return format!("a boolean ({v})");
    }
    match s {
        "sequence" => "a list".into(),
        "map" => "an object".into(),
        "null" | "unit value" | "" => "null".into(),
        _ => "a value of another form".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_swaps_as_one() {
        assert_eq!(edit_distance("nmae", "name", 3), Some(1));
        assert_eq!(edit_distance("dataref", "dataref", 3), Some(0));
        assert_eq!(edit_distance("kitten", "sitting", 3), Some(3));
        assert_eq!(edit_distance("", "abc", 3), Some(3));
        assert_eq!(edit_distance("a", "abcdef", 3), None);
        assert_eq!(edit_distance("abcd", "wxyz", 2), None);
    }

    #[test]
    fn suggestions_prefer_the_closest_name() {
        let known = ["dataRef", "valueRef", "value", "cond"];
        assert_eq!(suggestion("dataref", known.iter()), Some("dataRef"));
        assert_eq!(suggestion("valu", known.iter()), Some("value"));
        assert_eq!(suggestion("condition", known.iter()), None);
        // Short names only by case.
        assert_eq!(suggestion("%", ["+", "-"].iter()), None);
        assert_eq!(suggestion("gt", ["Gt", "Lt"].iter()), Some("Gt"));
    }

    #[test]
    fn every_kind_has_a_schema() {
        for kind in PolicyKind::ALL {
            let root = schema_of(kind).map(|n| &n.shape);
            assert!(matches!(root, Some(Shape::Object(_))), "{kind}");
        }
    }
}
