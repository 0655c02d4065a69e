//! What a policy finds of one object when it is judged as audit judges it: a [`Finding`] per
//! policy, or per rule, with a [`ResultStatus`] (OpenReports' results).

use std::sync::Arc;

use kanon_api::{ResultStatus, ValidationAction};
use serde::Serialize;

use crate::policy::{CompiledPolicy, PolicyRules};

/// What one policy, or one rule of it, found about one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The policy (`Kind/name`, `Kind/namespace/name`, or an admission policy's binding).
    #[serde(serialize_with = "text")]
    pub policy: Arc<str>,
    /// The rule: its `name`, else its place (`validateRules[1]`, `validations[0]`); `None` when
    /// the finding is about the whole policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// What was found.
    pub result: ResultStatus,
    /// Why (empty on a pass).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The policy's severity (`policy.kanon.dev/severity`), if it gives one.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "maybe_text")]
    pub severity: Option<Arc<str>>,
    /// The policy's category (`policy.kanon.dev/category`), if it gives one.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "maybe_text")]
    pub category: Option<Arc<str>>,
}

/// What a rejection by a policy with these actions is: a failure when it denies or audits, a
/// warning when it only warns.
pub(crate) fn rejection(actions: &[ValidationAction]) -> ResultStatus {
    if actions.iter().all(|a| *a == ValidationAction::Warn) && !actions.is_empty() {
        ResultStatus::Warn
    } else {
        ResultStatus::Fail
    }
}

/// The name a report gives a rule of a kanon validate policy: its own, else its place.
pub(crate) fn rule_label(policy: &CompiledPolicy, index: usize) -> String {
    match &policy.rules {
        PolicyRules::Validate { rules, .. } => {
            match rules.get(index).and_then(|r| r.name.clone()) {
                Some(name) => name,
                None => format!("validateRules[{index}]"),
            }
        }
        PolicyRules::Override(_) => format!("overrideRules[{index}]"),
    }
}

fn text<S: serde::Serializer>(value: &Arc<str>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(value)
}

fn maybe_text<S: serde::Serializer>(
    value: &Option<Arc<str>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => serializer.serialize_str(value),
        None => serializer.serialize_none(),
    }
}
