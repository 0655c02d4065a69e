//! ClusterValidatePolicy and ValidatePolicy: validation.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cel::CelValidation;
use crate::common::{
    ConstantValue, FailurePolicy, Operation, PolicyStatus, ResourceRefer, ResourceSelector,
};

/// A cluster-wide validation policy: its rules judge every object its selectors match.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "policy.kanon.dev",
    version = "v1alpha1",
    kind = "ClusterValidatePolicy",
    doc = "ClusterValidatePolicy admits or rejects matching objects cluster-wide by evaluating its validation rules.",
    shortname = "cvp",
    category = "kanon",
    status = "PolicyStatus",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterValidatePolicySpec {
    /// Which objects the policy applies to; OR-ed. Empty: every object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_selectors: Vec<ResourceSelector>,
    /// Label selector on the namespace of a namespaced object (on a Namespace, on its own
    /// labels). Cluster-scoped objects are not affected by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// What an evaluation error of this policy does: `Fail` (default) denies, `Ignore` skips
    /// the policy with a warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<FailurePolicy>,
    /// What a failed rule does: any of `Deny` (default), `Warn`, `Audit`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validation_actions: Vec<ValidationAction>,
    /// Whether a policy that selects Pods also applies to the pod templates of workloads
    /// (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob) when they are created or
    /// updated; default true. Its rules then see the template as a Pod (`metadata` of the
    /// template, the workload's namespace and name, `spec` of the template), and a denial names
    /// the template (`spec.template: ...`). `false`: Pods only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_templates: Option<bool>,
    /// The rules, evaluated in order.
    pub validate_rules: Vec<ValidateRule>,
}

/// A namespaced validation policy: its rules judge objects of its own namespace only.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "policy.kanon.dev",
    version = "v1alpha1",
    kind = "ValidatePolicy",
    doc = "ValidatePolicy admits or rejects matching objects in its own namespace by evaluating its validation rules.",
    namespaced,
    shortname = "vp",
    category = "kanon",
    status = "PolicyStatus",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ValidatePolicySpec {
    /// Which objects of the policy's namespace it applies to; OR-ed. Empty: every object of
    /// the namespace. A selector's `namespace`, if set, must be the policy's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_selectors: Vec<ResourceSelector>,
    /// What an evaluation error of this policy does: `Fail` (default) denies, `Ignore` skips
    /// the policy with a warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<FailurePolicy>,
    /// What a failed rule does: any of `Deny` (default), `Warn`, `Audit`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validation_actions: Vec<ValidationAction>,
    /// Whether a policy that selects Pods also applies to the pod templates of workloads
    /// (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob) when they are created or
    /// updated; default true. Its rules then see the template as a Pod (`metadata` of the
    /// template, the workload's namespace and name, `spec` of the template), and a denial names
    /// the template (`spec.template: ...`). `false`: Pods only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_templates: Option<bool>,
    /// The rules, evaluated in order.
    pub validate_rules: Vec<ValidateRule>,
}

/// What a failed validation does, as in ValidatingAdmissionPolicy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ValidationAction {
    /// Reject the request.
    Deny,
    /// Return admission warnings.
    Warn,
    /// Write audit annotations.
    Audit,
}

/// One validation rule: a condition template, a program and/or CEL validations; the object must
/// pass each part that is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValidateRule {
    /// A name unique within the policy, by which a PolicyException may exempt from this rule
    /// alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The operations the rule applies to; `*` or empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_operations: Vec<Operation>,
    /// A structured condition, rendered once into a rule program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<ValidateTemplate>,
    /// A rule program (minijinja) that renders `{valid, reason, warnings}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// CEL validations, with ValidatingAdmissionPolicy's fields and meanings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cel: Option<CelValidation>,
}

/// A structured validation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValidateTemplate {
    /// The template type; `condition` is the only one.
    #[serde(rename = "type")]
    pub type_: ValidateTemplateType,
    /// The condition, for `type: condition`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<ValidateCondition>,
}

/// Validate template types.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ValidateTemplateType {
    /// A condition on a value of the object or of a referenced source.
    #[default]
    Condition,
}

/// A condition: `dataRef`'s value compared with `value` or `valueRef`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValidateCondition {
    /// `reject` (default): deny when the condition holds; `allow`: deny when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affect_mode: Option<AffectMode>,
    /// The comparison.
    pub cond: Cond,
    /// The value under test.
    pub data_ref: ResourceRefer,
    /// A constant to compare with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<ConstantValue>,
    /// A referenced value to compare with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_ref: Option<ResourceRefer>,
    /// Arithmetic applied to the compared value before comparing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_process: Option<ValueProcess>,
    /// The denial text; may hold `{{ expression }}` placeholders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// When a condition denies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AffectMode {
    /// Deny when the condition holds.
    #[default]
    Reject,
    /// Deny when the condition does not hold.
    Allow,
}

/// Comparison operators of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Cond {
    /// The value exists.
    Exist,
    /// The value does not exist.
    NotExist,
    /// Equal to the compared value.
    Equal,
    /// Not equal to the compared value.
    NotEqual,
    /// One of the compared list.
    In,
    /// None of the compared list.
    NotIn,
    /// Greater than.
    Gt,
    /// Greater than or equal.
    Gte,
    /// Less than.
    Lt,
    /// Less than or equal.
    Lte,
    /// Matches the compared regular expression.
    Regex,
}

/// Arithmetic on the compared value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValueProcess {
    /// `+`, `-`, `*` or `/`.
    pub operation: ArithmeticOp,
    /// The operand: an integer (`3`), a decimal string (`"0.5"`) or a percentage (`"50%"`).
    pub operation_with: IntOrString,
}

/// Arithmetic operators of [`ValueProcess`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ArithmeticOp {
    /// Add.
    #[serde(rename = "+")]
    Add,
    /// Subtract.
    #[serde(rename = "-")]
    Subtract,
    /// Multiply.
    #[serde(rename = "*")]
    Multiply,
    /// Divide.
    #[serde(rename = "/")]
    Divide,
}
