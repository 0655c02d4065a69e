//! PolicyException: exempts named policies (or some of their rules) for selected objects.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cel::MatchCondition;
use crate::common::ResourceSelector;

/// Kind of the exception object.
pub const EXCEPTION_KIND: &str = "PolicyException";

/// An exception to named policies for selected objects. kanon honours it only in the
/// namespaces its operator names (`--exception-namespace`), so that writing one is a
/// permission an operator grants, not one every namespace has.
// Two print columns are strings: the lint takes their `type_` for a repeated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "policy.kanon.dev",
    version = "v1alpha1",
    kind = "PolicyException",
    doc = "PolicyException exempts the objects it selects from named kanon policies (or some of their rules), until it expires.",
    namespaced,
    shortname = "kex",
    category = "kanon",
    status = "ExceptionStatus",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Expires", type_ = "string", json_path = ".spec.expiresAt"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PolicyExceptionSpec {
    /// The policies it exempts from (at least one), each whole or only some of its rules.
    pub policies: Vec<ExemptedPolicy>,
    /// Which objects are exempt; OR-ed, at least one (an exception for every object would
    /// switch the policy off: delete or change the policy instead). Matched as the policies
    /// match: a Pod selector also selects the pod templates of workloads.
    pub resource_selectors: Vec<ResourceSelector>,
    /// CEL conditions the request must also meet, all of them (`object`, `oldObject`,
    /// `request`), as a ValidatingAdmissionPolicy's match conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_conditions: Vec<MatchCondition>,
    /// When the exception stops applying (RFC 3339, e.g. `2026-12-31T23:59:59Z`); none: it
    /// applies until deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub expires_at: Option<String>,
    /// Why the objects are exempt, and who decided: shown wherever the exception is applied.
    pub reason: String,
}

/// A policy an exception exempts from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExemptedPolicy {
    /// `ClusterValidatePolicy`, `ValidatePolicy`, `ClusterOverridePolicy` or `OverridePolicy`.
    pub kind: String,
    /// The policy's name.
    pub name: String,
    /// The namespace of a ValidatePolicy or OverridePolicy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The policy's rules to exempt from, each by its `name` or by place (`validateRules[0]`,
    /// `overrideRules[1]`); empty: the whole policy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
}

/// Status of a PolicyException.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExceptionStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: `True` when every policy and rule it names exists and it is honoured; `False`
    /// with the reason (`Invalid`, `PolicyNotFound`, `RuleNotFound`, `Expired`) and a
    /// message. kanon watches exceptions only in its exception namespaces: one written
    /// elsewhere gets no status at all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The policies it exempts from, as found (`Kind/name`, `Kind/namespace/name`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<String>,
}
