//! Rule programs: minijinja templates run in a sandbox.
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
mod output;
mod runtime;

use std::sync::Arc;

use minijinja::Value;
use minijinja::value::Serde;

use crate::rule::Variables;

pub use error::ProgramError;
pub use json::json_value;
pub use output::{patch_from_output, verdict_from_output};
pub use runtime::{Program, ProgramKind, ProgramLimits};

/// The variables of a rule as program values: `object`, `oldObject`, `operation`, `request`,
/// `namespaceObject` and `refs`. Documents are wrapped, not converted: programs read only the
/// parts they touch.
pub fn context(variables: Variables<'_>) -> Value {
    let document = |v: &serde_json::Value| json_value(Arc::new(v.clone()));
    minijinja::context! {
        object => document(variables.object),
        oldObject => variables.old_object.map(document).unwrap_or(Value::from(())),
        operation => variables.operation,
        request => Value::from(Serde(variables.request)),
        namespaceObject => variables.namespace_object
            .as_deref()
            .map(|o| Value::from(Serde(o)))
            .unwrap_or(Value::from(())),
        refs => Value::from(Serde(serde_json::Value::Object(variables.refs))),
    }
}
