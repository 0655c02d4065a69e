//! JSON documents as program values, read in place: a program reads only the parts of the
//! object it touches, and helpers get the JSON back without a conversion.

use std::sync::Arc;

use minijinja::Value;
use minijinja::value::Serde;

/// A step from a JSON node to one of its children.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// A JSON document (or a node inside it) as programs see it, without converting it: children
/// are read on access, and helpers get the JSON back as it is.
#[derive(Debug)]
pub(super) struct JsonNode {
    root: Arc<serde_json::Value>,
    path: Vec<Step>,
}

static JSON_NULL: serde_json::Value = serde_json::Value::Null;

impl JsonNode {
    /// The node this wrapper stands for.
    pub(super) fn node(&self) -> &serde_json::Value {
        let mut node: &serde_json::Value = &self.root;
        for step in &self.path {
            let next = match step {
                Step::Key(k) => node.get(k.as_str()),
                Step::Index(i) => node.get(*i),
            };
            match next {
                Some(n) => node = n,
                None => return &JSON_NULL,
            }
        }
        node
    }

    fn child(&self, step: Step, value: &serde_json::Value) -> Value {
        // A text's reads are paid for (see `meter`); a container's children are paid for as
        // they are read in turn.
        super::meter::charge(match value {
            serde_json::Value::String(s) => s.len().max(8),
            _ => 8,
        });
        match value {
            serde_json::Value::Object(_) | serde_json::Value::Array(_) => {
                let mut path = self.path.clone();
                path.push(step);
                Value::from_object(JsonNode {
                    root: self.root.clone(),
                    path,
                })
            }
            scalar => json_scalar(scalar),
        }
    }
}

fn json_scalar(value: &serde_json::Value) -> Value {
    match value {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(u)) => Value::from(u),
            _ => Value::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::from(s.as_str()),
        other => Value::from(Serde(other.clone())),
    }
}

impl minijinja::value::Object for JsonNode {
    fn repr(self: &Arc<Self>) -> minijinja::value::ObjectRepr {
        match self.node() {
            serde_json::Value::Array(_) => minijinja::value::ObjectRepr::Seq,
            _ => minijinja::value::ObjectRepr::Map,
        }
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        match self.node() {
            serde_json::Value::Object(map) => {
                let k = key.as_str()?;
                map.get(k).map(|v| self.child(Step::Key(k.to_string()), v))
            }
            serde_json::Value::Array(items) => {
                let i = key.as_usize()?;
                items.get(i).map(|v| self.child(Step::Index(i), v))
            }
            _ => None,
        }
    }

    fn enumerate(self: &Arc<Self>) -> minijinja::value::Enumerator {
        match self.node() {
            serde_json::Value::Object(map) => {
                if super::meter::active() {
                    super::meter::charge(map.keys().map(|k| k.len().max(8)).sum());
                }
                minijinja::value::Enumerator::Values(
                    map.keys().map(|k| Value::from(k.as_str())).collect(),
                )
            }
            serde_json::Value::Array(items) => minijinja::value::Enumerator::Seq(items.len()),
            _ => minijinja::value::Enumerator::Empty,
        }
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        match self.node() {
            serde_json::Value::Object(map) => Some(map.len()),
            serde_json::Value::Array(items) => Some(items.len()),
            _ => Some(0),
        }
    }
}

/// A JSON document as a program value, read lazily (no up-front conversion).
pub fn json_value(document: Arc<serde_json::Value>) -> Value {
    match &*document {
        serde_json::Value::Object(_) | serde_json::Value::Array(_) => {
            Value::from_object(JsonNode {
                root: document,
                path: Vec::new(),
            })
        }
        scalar => json_scalar(scalar),
    }
}
