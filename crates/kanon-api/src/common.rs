//! Types shared by override and validate policies: selectors, operations, failure policy,
//! constant values, references and status.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Schema for a field that holds any JSON value (object, array or scalar), kept verbatim by the
/// apiserver.
pub fn any_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// Schema for a field that holds any JSON value, `null` included (kept, not pruned).
pub fn any_json_nullable(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "x-kubernetes-preserve-unknown-fields": true, "nullable": true })
}

/// Deserializes a present field as `Some`, even when it is `null` (absent stays `None` through
/// `#[serde(default)]`), so that `value: null` can be written.
pub fn present<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(d).map(Some)
}

/// Schema for a number written either as a JSON number or as a string (`0.5` or `"0.5"`).
pub(crate) fn number_or_string(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "x-kubernetes-preserve-unknown-fields": true,
        "description": "A number, written as a JSON number (0.5) or as a string (\"0.5\")."
    })
}

/// Schema for a list of numbers, each written as a JSON number or a string.
fn number_or_string_list(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": { "x-kubernetes-preserve-unknown-fields": true },
        "description": "Numbers, each written as a JSON number (0.5) or as a string (\"0.5\")."
    })
}

/// A number that policies may write as a JSON number or, as kinitiras did, as a string.
///
/// The text is kept as written so that decimal values stay exact; the engine parses it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum NumberOrString {
    /// A JSON number.
    Number(serde_json::Number),
    /// A string holding a number, e.g. `"0.5"`.
    String(String),
}

impl NumberOrString {
    /// The number's text as written (`0.5` and `"0.5"` both give `0.5`).
    pub fn text(&self) -> String {
        match self {
            NumberOrString::Number(n) => n.to_string(),
            NumberOrString::String(s) => s.clone(),
        }
    }
}

/// The admission operations a rule applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Operation {
    /// Object creation.
    #[serde(rename = "CREATE")]
    Create,
    /// Object update.
    #[serde(rename = "UPDATE")]
    Update,
    /// Object deletion.
    #[serde(rename = "DELETE")]
    Delete,
    /// Connect (exec, attach, port-forward, proxy).
    #[serde(rename = "CONNECT")]
    Connect,
    /// Every operation.
    #[serde(rename = "*")]
    All,
}

impl Operation {
    /// The wire name (`CREATE`, ..., `*`).
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
            Operation::All => "*",
        }
    }
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an evaluation error of a policy (a failing lookup, a missing referenced object, a failing
/// patch or program) does to the request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum FailurePolicy {
    /// Deny the request with a message naming the policy and the error.
    #[default]
    Fail,
    /// Skip the policy (its changes are discarded), log, count it and add a warning.
    Ignore,
}

/// Selects objects by type and, optionally, by namespace, name, labels or fields.
///
/// Precedence: `name` set → the name alone decides; otherwise `labelSelector` and
/// `fieldSelector` are AND-ed; neither set → every object of this `apiVersion` and `kind`.
/// `namespace`, when set, must equal the object's namespace in every case.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSelector {
    /// The object's `apiVersion`, exactly (`v1`, `apps/v1`).
    pub api_version: String,
    /// The object's `kind`, exactly (case-sensitive).
    pub kind: String,
    /// When set, the object's namespace must equal it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// When set, the object's name must equal it, and the label and field selectors are not
    /// consulted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Standard Kubernetes label selector on the object's labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Selector on arbitrary fields of the object, addressed by JSON pointer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_selector: Option<FieldSelector>,
}

/// Selects objects by the values of their fields. All entries are AND-ed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldSelector {
    /// JSON pointer → value: each field must exist and equal the value (numbers and booleans
    /// compare by their JSON text, so `/spec/replicas: "3"` matches `replicas: 3`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_fields: BTreeMap<String, String>,
    /// Requirements on fields, AND-ed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<FieldSelectorRequirement>,
}

/// One requirement on a field of the object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldSelectorRequirement {
    /// JSON pointer to the field, e.g. `/metadata/annotations/app.kubernetes.io~1name`
    /// (`~1` stands for `/` and `~0` for `~` inside a key).
    pub field: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: SelectorOperator,
    /// The values for `In` and `NotIn`; must be empty for `Exists` and `DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// kinitiras' name for `values`, accepted so its policies port unchanged. Set one of the two.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub value: Vec<String>,
}

/// Operators of a field selector requirement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SelectorOperator {
    /// The field exists and its value is one of `values`.
    #[default]
    In,
    /// The field is absent, or its value is none of `values`.
    NotIn,
    /// The field exists.
    Exists,
    /// The field is absent.
    DoesNotExist,
}

/// A constant value. Set exactly one field.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConstantValue {
    /// A string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string: Option<String>,
    /// An integer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integer: Option<i64>,
    /// A decimal number, as a JSON number or a string (`"1.5"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "number_or_string")]
    pub float: Option<NumberOrString>,
    /// A boolean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boolean: Option<bool>,
    /// A list of strings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string_slice: Option<Vec<String>>,
    /// A list of integers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integer_slice: Option<Vec<i64>>,
    /// A list of decimal numbers, each a JSON number or a string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "number_or_string_list")]
    pub float_slice: Option<Vec<NumberOrString>>,
    /// A map of strings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string_map: Option<BTreeMap<String, String>>,
}

/// Where a value comes from: the object, its old version, its owner, another cluster object or
/// an HTTP service.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRefer {
    /// The source of the value.
    pub from: RefSource,
    /// Where in the source the value is: a JSON pointer (`/spec/replicas`) or a JSONPath
    /// (`$.spec.containers[*].image`). Absent: the whole source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The object to read, for `from: k8s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k8s: Option<ObjectRefer>,
    /// The request to send, for `from: http`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpRefer>,
}

/// Sources of a [`ResourceRefer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RefSource {
    /// The object under review.
    Current,
    /// The previous version of the object (UPDATE, DELETE).
    Old,
    /// The object's controller owner, else its first ownerReference.
    Owner,
    /// Another cluster object, described by `k8s`.
    K8s,
    /// The response of an HTTP request, described by `http`: `{status, header, body}`.
    Http,
}

/// Another cluster object, found by name or by label selector. Every string may hold
/// `{{ expression }}` placeholders evaluated against the request (e.g.
/// `{{ object.metadata.namespace }}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRefer {
    /// The object's `apiVersion`.
    pub api_version: String,
    /// The object's `kind`.
    pub kind: String,
    /// The object's namespace; absent for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The object's name. Set `name` or `labelSelector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Selects the objects by label; the value is then the list of matching objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// An HTTP request whose response (`{status, header, body}`) is the referenced value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpRefer {
    /// The URL; may hold `{{ expression }}` placeholders.
    pub url: String,
    /// `GET` (default) or `POST`.
    #[serde(default)]
    pub method: HttpMethod,
    /// Request headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub header: BTreeMap<String, String>,
    /// Query parameters; values may hold `{{ expression }}` placeholders.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, String>,
    /// A JSON body, sent with `POST`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub body: Option<serde_json::Value>,
    /// Authentication sent with the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<HttpAuth>,
    /// Upper bound on the request's duration, in seconds; the admission request's own deadline
    /// bounds it too. Between 1 and 30.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 30))]
    pub timeout_seconds: Option<i32>,
}

/// HTTP methods of an [`HttpRefer`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum HttpMethod {
    /// GET.
    #[default]
    #[serde(rename = "GET")]
    Get,
    /// POST.
    #[serde(rename = "POST")]
    Post,
}

/// Authentication of an HTTP reference: a bearer token, given inline or read from a Secret.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpAuth {
    /// Sent as `Authorization: Bearer <staticToken>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub static_token: Option<String>,
    /// A Secret key holding the bearer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretKeyRefer>,
}

/// A key of a Secret.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRefer {
    /// The Secret's namespace.
    pub namespace: String,
    /// The Secret's name.
    pub name: String,
    /// The key in the Secret's data; `token` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// Status of every policy kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: `True` when the policy compiled and is in force; `False` with a reason and a
    /// message naming the field at fault.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The rule programs that this policy's templates render to, one per templated rule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rendered_programs: Vec<RenderedProgram>,
    /// Likely mistakes found when the policy was compiled, which do not keep it from being in
    /// force (`field: message`, e.g. a path that no selected kind has, or a validate rule that
    /// also judges DELETE).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A rule program rendered from a template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RenderedProgram {
    /// Field path of the template, e.g. `spec.overrideRules[0].overriders.template`.
    pub field: String,
    /// The program text.
    pub program: String,
}
