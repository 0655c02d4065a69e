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
    // In the order of their names.
    let mut names = vec![
        (
            "namespaceObject",
            namespace_object.map(json_value).unwrap_or(Value::from(())),
        ),
        ("object", object),
        ("oldObject", old_object),
        ("operation", Value::from(operation)),
        ("refs", document(serde_json::Value::Object(refs))),
        (
            "request",
            json_value(shared_or_copy(shared.request, request)),
        ),
    ];
    if !extra.is_empty() {
        names.extend(extra.into_iter().map(|(name, v)| (name, document(v))));
        // A name given again replaces the earlier value, as in a map.
        names.reverse();
        names.sort_by_key(|(name, _)| *name);
        names.dedup_by_key(|(name, _)| *name);
    }
    Value::from_object(TextVariables(names))
}

/// The variables of a text, in the order of their names, charging each lookup (see
/// [`text_context`]). A handful: searched in order, not built into a map for each text.
#[derive(Debug)]
struct TextVariables(Vec<(&'static str, Value)>);

impl minijinja::value::Object for TextVariables {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let key = key.as_str()?;
        let (_, value) = self.0.iter().find(|(name, _)| *name == key)?;
        meter::charge(value.as_str().map_or(8, |s| s.len().max(8)));
        Some(value.clone())
    }

    fn enumerate(self: &Arc<Self>) -> minijinja::value::Enumerator {
        minijinja::value::Enumerator::Values(self.0.iter().map(|(k, _)| Value::from(*k)).collect())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_texts_variables_are_found_by_name_and_listed_in_order() {
        let object = json!({"metadata": {"name": "web"}});
        let request = json!({"uid": "u"});
        let variables = Variables {
            object: &object,
            old_object: None,
            operation: "CREATE",
            request: &request,
            namespace_object: None,
            refs: serde_json::Map::new(),
            shared: crate::rule::Shared::default(),
        };
        let context = text_context(variables, vec![("value", json!(3)), ("data", json!("d"))]);
        let env = minijinja::Environment::new();
        let rendered = env
            .render_str(
                "{{ object.metadata.name }} {{ request.uid }} {{ operation }} {{ data }} {{ value }} {{ oldObject is none }}",
                &context,
            )
            .expect("renders");
        assert_eq!(rendered, "web u CREATE d 3 True");
        let names: Vec<String> = context
            .try_iter()
            .expect("enumerable")
            .map(|name| name.to_string())
            .collect();
        assert_eq!(
            names,
            [
                "data",
                "namespaceObject",
                "object",
                "oldObject",
                "operation",
                "refs",
                "request",
                "value"
            ]
        );
        assert!(
            env.render_str("{{ nothing }}", &context)
                .is_ok_and(|text| text.is_empty())
        );
    }
}
