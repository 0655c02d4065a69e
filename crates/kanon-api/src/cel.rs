//! CEL rules: ValidatingAdmissionPolicy's and MutatingAdmissionPolicy's fields, with their
//! meanings, inside kanon's validate and override rules.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::ResourceRefer;

/// CEL validations, as in a ValidatingAdmissionPolicy: match conditions decide whether the rule
/// applies, variables are computed once per request (lazily, in order), every validation must
/// hold. The policy's `validationActions` and `failurePolicy` apply as they do to a VAP.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CelValidation {
    /// Conditions the request must meet for the rule to run, all of them (at most 64). One that
    /// is false skips the rule; one that fails to evaluate follows the policy's `failurePolicy`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_conditions: Vec<MatchCondition>,
    /// Named expressions the other expressions read as `variables.<name>`; each may read the
    /// ones before it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variables: Vec<Variable>,
    /// The expressions that must all hold (bool) for the object to be admitted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validations: Vec<Validation>,
    /// Audit annotations written when the rule runs (`valueExpression` gives a string, or null
    /// for none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audit_annotations: Vec<AuditAnnotation>,
    /// What only kanon has: values from outside the request (the object's owner, other cluster
    /// objects, HTTP services), resolved through kanon's lookups before the rule runs and read
    /// as `references.<name>`. One that cannot be resolved is an error under the policy's
    /// failure policy; one whose path selects nothing is absent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub references: BTreeMap<String, ResourceRefer>,
}

/// A named condition on the request (CEL, bool).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MatchCondition {
    /// Unique within the rule; named in messages.
    pub name: String,
    /// A CEL expression giving a bool.
    pub expression: String,
}

/// A named CEL expression, read by the rule's other expressions as `variables.<name>`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Variable {
    /// A CEL identifier, unique within the rule.
    pub name: String,
    /// A CEL expression of any type.
    pub expression: String,
}

/// One CEL validation: the object is admitted only if `expression` holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Validation {
    /// A CEL expression giving a bool.
    pub expression: String,
    /// The message of a denial; default `failed expression: <expression>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A CEL expression giving the message (a string); if it fails or gives an empty or
    /// multi-line string, `message` is used instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_expression: Option<String>,
    /// The reason of a denial: `Unauthorized`, `Forbidden`, `Invalid` (default) or
    /// `RequestEntityTooLarge`, which also sets its HTTP code (401, 403, 422, 413).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<ValidationReason>,
}

/// Why a CEL validation denies, as a ValidatingAdmissionPolicy says it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ValidationReason {
    /// HTTP 401.
    Unauthorized,
    /// HTTP 403.
    Forbidden,
    /// HTTP 422 (the default).
    #[default]
    Invalid,
    /// HTTP 413.
    RequestEntityTooLarge,
}

impl ValidationReason {
    /// The reason as a Status says it (`Invalid`).
    pub fn as_str(self) -> &'static str {
        match self {
            ValidationReason::Unauthorized => "Unauthorized",
            ValidationReason::Forbidden => "Forbidden",
            ValidationReason::Invalid => "Invalid",
            ValidationReason::RequestEntityTooLarge => "RequestEntityTooLarge",
        }
    }

    /// The HTTP status code the reason carries.
    pub fn code(self) -> u16 {
        match self {
            ValidationReason::Unauthorized => 401,
            ValidationReason::Forbidden => 403,
            ValidationReason::Invalid => 422,
            ValidationReason::RequestEntityTooLarge => 413,
        }
    }
}

/// An audit annotation: `<policy>/<key>` set to the value of `valueExpression`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditAnnotation {
    /// Lowercase letters, digits, `-`, `_` and `.`, at most 63 characters.
    pub key: String,
    /// A CEL expression giving a string (the value) or null (no annotation).
    pub value_expression: String,
}

/// CEL mutations, as in a MutatingAdmissionPolicy: match conditions and variables as for
/// validations, then each mutation in order, each seeing the result of the one before.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CelMutation {
    /// Conditions the request must meet for the mutations to run (at most 64).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_conditions: Vec<MatchCondition>,
    /// Named expressions the mutations read as `variables.<name>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variables: Vec<Variable>,
    /// The mutations, applied in order.
    pub mutations: Vec<Mutation>,
    /// Values from outside the request, read as `references.<name>` (as for validations).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub references: BTreeMap<String, ResourceRefer>,
}

/// One CEL mutation: a JSON patch or an apply configuration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Mutation {
    /// `JSONPatch` or `ApplyConfiguration`; the matching field below must be set.
    pub patch_type: PatchType,
    /// For `ApplyConfiguration`: an expression giving `Object{...}`, merged into the object
    /// with Kubernetes' structured-merge rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_configuration: Option<MutationExpression>,
    /// For `JSONPatch`: an expression giving a list of `JSONPatch{op, path, from, value}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_patch: Option<MutationExpression>,
}

/// The kind of a CEL mutation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum PatchType {
    /// RFC 6902 operations built by the expression.
    #[default]
    #[serde(rename = "JSONPatch")]
    JsonPatch,
    /// A partial object merged as server-side apply merges it.
    ApplyConfiguration,
}

/// The expression of a mutation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MutationExpression {
    /// The CEL expression.
    pub expression: String,
}
