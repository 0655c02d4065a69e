//! Rule programs: minijinja templates run in a sandbox (and, for hand-written ones that are not
//! contained, in a worker process: see [`crate::host`]).
//!
//! A program has no loader (no file access), no network, an instruction budget (fuel), a
//! recursion limit and an output size limit. Undefined values are semi-strict: printing or
//! reading through an undefined value is an error (a typo fails loudly), while `if x` and
//! `x is defined` may probe for absence. Programs compile once per policy generation.
//!
//! An override program renders a list of RFC 6902 operations (YAML or JSON), or
//! `{patches: [...]}`; a validate program renders `{valid, reason, warnings}`. Empty output
//! means no operations, or valid.

mod error;
mod json;
mod library;
mod meter;
mod output;
pub(crate) mod reads;
mod runtime;
mod text;

use std::sync::Arc;

use minijinja::Value;
use minijinja::value::Serde;

use crate::rule::Variables;

pub use error::ProgramError;
pub use json::json_value;
pub use output::{patch_from_output, verdict_from_output};
pub use runtime::{Metered, Program, ProgramKind, ProgramLimits};
pub use text::{MAX_TEXT_ADDITIONS, TEXT_FILTERS, TEXT_FUNCTIONS, TEXT_READ_BYTES};

/// The variables of a rule as program values: `object`, `oldObject`, `operation`, `request`,
/// `namespaceObject` and `refs`. Documents are wrapped, not converted: programs read only the
/// parts they touch.
pub fn context(variables: Variables<'_>) -> Value {
    let (object, old_object) = documents(&variables);
    minijinja::context! {
        object => object,
        oldObject => old_object,
        operation => variables.operation,
        request => Value::from(Serde(variables.request)),
        namespaceObject => variables.namespace_object
            .as_deref()
            .map(|o| Value::from(Serde(o)))
            .unwrap_or(Value::from(())),
        refs => Value::from(Serde(serde_json::Value::Object(variables.refs))),
    }
}

/// `object` and `oldObject` as program values, read in place: the request's shared copies
/// where it holds them, else copies made here.
fn documents(variables: &Variables<'_>) -> (Value, Value) {
    let object = json_value(shared_or_copy(
        variables.shared.object.clone(),
        variables.object,
    ));
    let old_object = variables
        .old_object
        .map(|old| json_value(shared_or_copy(variables.shared.old_object.clone(), old)))
        .unwrap_or(Value::from(()));
    (object, old_object)
}

/// `shared` when the request holds the document shared, else a copy of `document`.
fn shared_or_copy(
    shared: Option<Arc<serde_json::Value>>,
    document: &serde_json::Value,
) -> Arc<serde_json::Value> {
    shared.unwrap_or_else(|| Arc::new(document.clone()))
}

/// The variables of a placeholder text (a condition's message, a reference's field): those of
/// [`context`], every document read in place, and `extra` (a message's `data`, `value`,
/// `item`). Each variable a text names is charged to its rendering, every time it names it
/// (see [`meter`]).
pub fn text_context(
    variables: Variables<'_>,
    extra: Vec<(&'static str, serde_json::Value)>,
) -> Value {
    let document = |v: serde_json::Value| json_value(Arc::new(v));
    let (object, old_object) = documents(&variables);
    let Variables {
        operation,
        request,
        namespace_object,
        refs,
        shared,
        ..
    } = variables;
    let mut names = vec![
        ("object", object),
        ("oldObject", old_object),
        ("operation", Value::from(operation)),
        (
            "request",
            json_value(shared_or_copy(shared.request, request)),
        ),
        (
            "namespaceObject",
            namespace_object.map(json_value).unwrap_or(Value::from(())),
        ),
        ("refs", document(serde_json::Value::Object(refs))),
    ];
    names.extend(extra.into_iter().map(|(name, v)| (name, document(v))));
    Value::from_object(TextVariables(names.into_iter().collect()))
}

/// The variables of a text, charging each lookup (see [`text_context`]).
#[derive(Debug)]
struct TextVariables(std::collections::BTreeMap<&'static str, Value>);

impl minijinja::value::Object for TextVariables {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let value = self.0.get(key.as_str()?)?;
        meter::charge(value.as_str().map_or(8, |s| s.len().max(8)));
        Some(value.clone())
    }

    fn enumerate(self: &Arc<Self>) -> minijinja::value::Enumerator {
        minijinja::value::Enumerator::Values(self.0.keys().map(|k| Value::from(*k)).collect())
    }
}
