//! ClusterOverridePolicy and OverridePolicy: mutation.

use k8s_openapi::api::core::v1::{Affinity, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cel::CelMutation;
use crate::common::{
    ConstantValue, FailurePolicy, NumberOrString, Operation, PolicyStatus, ResourceRefer,
    ResourceSelector,
};

/// A cluster-wide mutation policy: its rules patch every object its selectors match.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "policy.kanon.dev",
    version = "v1alpha1",
    kind = "ClusterOverridePolicy",
    doc = "ClusterOverridePolicy mutates matching objects cluster-wide by applying its override rules at admission.",
    shortname = "cop",
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
pub struct ClusterOverridePolicySpec {
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
    /// Whether a policy that selects Pods also applies to the pod templates of workloads
    /// (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob) when they are created or
    /// updated; default true. Its rules then see the template as a Pod (`metadata` of the
    /// template, the workload's namespace and name, `spec` of the template), and a denial names
    /// the template (`spec.template: ...`). `false`: Pods only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_templates: Option<bool>,
    /// The rules, applied in order.
    pub override_rules: Vec<OverrideRule>,
}

/// A namespaced mutation policy: its rules patch objects of its own namespace only.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "policy.kanon.dev",
    version = "v1alpha1",
    kind = "OverridePolicy",
    doc = "OverridePolicy mutates matching objects in its own namespace by applying its override rules at admission.",
    namespaced,
    shortname = "op",
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
pub struct OverridePolicySpec {
    /// Which objects of the policy's namespace it applies to; OR-ed. Empty: every object of
    /// the namespace. A selector's `namespace`, if set, must be the policy's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_selectors: Vec<ResourceSelector>,
    /// What an evaluation error of this policy does: `Fail` (default) denies, `Ignore` skips
    /// the policy with a warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<FailurePolicy>,
    /// Whether a policy that selects Pods also applies to the pod templates of workloads
    /// (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob) when they are created or
    /// updated; default true. Its rules then see the template as a Pod (`metadata` of the
    /// template, the workload's namespace and name, `spec` of the template), and a denial names
    /// the template (`spec.template: ...`). `false`: Pods only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_templates: Option<bool>,
    /// The rules, applied in order.
    pub override_rules: Vec<OverrideRule>,
}

/// One mutation rule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverrideRule {
    /// A name unique within the policy, by which a PolicyException may exempt from this rule
    /// alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The operations the rule applies to; `*` or empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_operations: Vec<Operation>,
    /// What the rule does. Within the block: template, then program, then cel, then plaintext.
    pub overriders: Overriders,
}

/// The overriders of one rule, run in the order template → program → cel → plaintext, each seeing
/// the result of the one before.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Overriders {
    /// A structured rule, rendered once into a rule program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<OverrideTemplate>,
    /// A rule program (minijinja) that renders a list of RFC 6902 operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// CEL mutations, with MutatingAdmissionPolicy's fields and meanings; run after the
    /// program and before the plaintext operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cel: Option<CelMutation>,
    /// RFC 6902 operations, applied in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plaintext: Vec<PlaintextOverrider>,
}

/// One RFC 6902 JSON patch operation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlaintextOverrider {
    /// The operation.
    pub op: PatchOp,
    /// JSON pointer to the target (`/metadata/labels/app.kubernetes.io~1name`).
    pub path: String,
    /// The value, for `add`, `replace` and `test` (`null` is a value).
    #[serde(
        default,
        deserialize_with = "crate::common::present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "crate::common::any_json_nullable")]
    pub value: Option<serde_json::Value>,
    /// JSON pointer to the source, for `copy` and `move`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

/// RFC 6902 operations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PatchOp {
    /// Add (or set) a member, or insert into an array.
    #[default]
    Add,
    /// Remove an existing member; an error when it does not exist.
    Remove,
    /// Replace an existing member; an error when it does not exist.
    Replace,
    /// Copy `from` to `path`.
    Copy,
    /// Move `from` to `path`.
    Move,
    /// Fail unless the member equals `value`.
    Test,
}

impl PatchOp {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            PatchOp::Add => "add",
            PatchOp::Remove => "remove",
            PatchOp::Replace => "replace",
            PatchOp::Copy => "copy",
            PatchOp::Move => "move",
            PatchOp::Test => "test",
        }
    }
}

/// A structured mutation, rendered once into a rule program.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverrideTemplate {
    /// What the template changes.
    #[serde(rename = "type")]
    pub type_: OverrideTemplateType,
    /// `add`, `replace`, `remove` or `default`.
    pub operation: TemplateOperation,
    /// For `annotations`, `labels` and `nodeSelector`: the key (any key, `/` and `.`
    /// included). For `field`: a JSON pointer below where `within` starts
    /// (`/securityContext/runAsNonRoot`, `/metadata/annotations/a~1b`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The value to set; a `stringMap` sets several keys (or, for `field`, an object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<ConstantValue>,
    /// Where the value to set comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_ref: Option<ResourceRefer>,
    /// For `resources`: the requests and limits to set (or, with `remove`, whose keys to
    /// remove).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// For `resourcesOversell`: request = limit × factor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_oversell: Option<ResourcesOversell>,
    /// For `tolerations`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// For `affinity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// For `field`: where `path` starts; `object` (default) when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<FieldWithin>,
    /// Containers the template applies to (`resources`, `resourcesOversell`, and `field`
    /// within `containers`), among both the containers and the init containers; empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_names: Vec<String>,
}

/// Override template types.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum OverrideTemplateType {
    /// `metadata.annotations`.
    #[default]
    Annotations,
    /// `metadata.labels`.
    Labels,
    /// The pod spec's `nodeSelector`.
    NodeSelector,
    /// The `resources` of the containers and init containers.
    Resources,
    /// The requests of the containers and init containers, derived from their limits.
    ResourcesOversell,
    /// The pod spec's `tolerations`.
    Tolerations,
    /// The pod spec's `affinity`.
    Affinity,
    /// Any field, named by the JSON pointer `path` below `within`.
    Field,
}

/// Where the `path` of a `field` template starts: `object` (the default), `podSpec` or
/// `containers`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum FieldWithin {
    /// The object's root.
    #[default]
    Object,
    /// The pod spec, wherever the kind keeps it (Pod `/spec`, workloads
    /// `/spec/template/spec`, CronJob `/spec/jobTemplate/spec/template/spec`); kinds without
    /// one are left alone.
    PodSpec,
    /// Each container and init container of the pod spec, narrowed by `containerNames`.
    Containers,
}

/// Template operations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum TemplateOperation {
    /// Set (maps, fields) or insert (lists).
    #[default]
    Add,
    /// Set (maps, fields) or replace the matching entries (lists).
    Replace,
    /// Delete the key, field or matching entries, if present.
    Remove,
    /// Set only what is absent (or null), creating missing parents; never overwrite a value
    /// the object has. Tolerations and affinity: only where the pod spec has none.
    Default,
}

/// Factors for `resourcesOversell`, each strictly between 0 and 1, written as a number or a
/// string (`"0.5"`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesOversell {
    /// `requests.cpu = limits.cpu × cpuFactor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::common::number_or_string")]
    pub cpu_factor: Option<NumberOrString>,
    /// `requests.memory = limits.memory × memoryFactor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::common::number_or_string")]
    pub memory_factor: Option<NumberOrString>,
    /// `requests.ephemeral-storage = limits.ephemeral-storage × diskFactor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::common::number_or_string")]
    pub disk_factor: Option<NumberOrString>,
}
