//! Kubernetes' admission policies as written: ValidatingAdmissionPolicy and its binding
//! (`admissionregistration.k8s.io/v1`), MutatingAdmissionPolicy and its binding (`v1beta1`, and
//! `v1` as Kubernetes 1.36 serves it: the same fields). Decoded strictly: a field kube-apiserver
//! does not know is an error at its path, as `kubectl apply` would report it.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kanon_api::{AuditAnnotation, MatchCondition, Mutation, Validation, Variable};
use serde::Deserialize;
use serde_json::Value;

use crate::error::FieldError;

/// The group of Kubernetes' admission policies.
pub const GROUP: &str = "admissionregistration.k8s.io";

/// Which of the four kinds a document is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmissionKind {
    /// `ValidatingAdmissionPolicy` (v1).
    ValidatingPolicy,
    /// `ValidatingAdmissionPolicyBinding` (v1).
    ValidatingBinding,
    /// `MutatingAdmissionPolicy` (v1beta1, v1).
    MutatingPolicy,
    /// `MutatingAdmissionPolicyBinding` (v1beta1, v1).
    MutatingBinding,
}

impl AdmissionKind {
    /// The `kind` string.
    pub fn as_str(self) -> &'static str {
        match self {
            AdmissionKind::ValidatingPolicy => "ValidatingAdmissionPolicy",
            AdmissionKind::ValidatingBinding => "ValidatingAdmissionPolicyBinding",
            AdmissionKind::MutatingPolicy => "MutatingAdmissionPolicy",
            AdmissionKind::MutatingBinding => "MutatingAdmissionPolicyBinding",
        }
    }
}

impl fmt::Display for AdmissionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The admission policy kind of a document, if it is one at a version kanon reads:
/// `admissionregistration.k8s.io/v1` for every kind, `v1beta1` for the mutating ones (what
/// Kubernetes 1.35 serves).
pub fn admission_kind_of(document: &Value) -> Option<AdmissionKind> {
    let api_version = document.get("apiVersion").and_then(Value::as_str)?;
    let kind = document.get("kind").and_then(Value::as_str)?;
    let version = api_version.strip_prefix(GROUP)?.strip_prefix('/')?;
    let kind = match kind {
        "ValidatingAdmissionPolicy" => AdmissionKind::ValidatingPolicy,
        "ValidatingAdmissionPolicyBinding" => AdmissionKind::ValidatingBinding,
        "MutatingAdmissionPolicy" => AdmissionKind::MutatingPolicy,
        "MutatingAdmissionPolicyBinding" => AdmissionKind::MutatingBinding,
        _ => return None,
    };
    let validating = matches!(
        kind,
        AdmissionKind::ValidatingPolicy | AdmissionKind::ValidatingBinding
    );
    match version {
        "v1" => Some(kind),
        "v1beta1" if !validating => Some(kind),
        _ => None,
    }
}

/// The metadata kanon reads: the name. Every other field is accepted and left alone.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Metadata {
    /// The object's name.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(flatten)]
    _rest: serde_json::Map<String, Value>,
}

/// A whole document: `apiVersion`, `kind`, `metadata`, `spec` (and a `status`, ignored).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest<S> {
    /// The apiVersion, as written (known from [`admission_kind_of`]).
    #[allow(dead_code)]
    pub api_version: String,
    /// The kind, as written (known from [`admission_kind_of`]).
    #[allow(dead_code)]
    pub kind: String,
    /// Its metadata.
    #[serde(default)]
    pub metadata: Metadata,
    /// What it says.
    pub spec: S,
    /// Written by the apiserver; ignored.
    #[serde(default)]
    #[allow(dead_code)]
    pub status: Option<Value>,
}

impl<S> Manifest<S> {
    /// The name, empty when missing.
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
}

/// `spec.paramKind`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParamKind {
    /// The params' apiVersion.
    #[serde(default)]
    pub api_version: String,
    /// The params' kind.
    #[serde(default)]
    pub kind: String,
}

/// `matchConstraints` of a policy, `matchResources` of a binding.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MatchResources {
    /// Labels of the object's namespace (or of a Namespace itself).
    #[serde(default)]
    pub namespace_selector: Option<LabelSelector>,
    /// Labels of the object (or of the old object).
    #[serde(default)]
    pub object_selector: Option<LabelSelector>,
    /// The requests that match.
    #[serde(default)]
    pub resource_rules: Vec<NamedRule>,
    /// The requests that do not, whatever else matches.
    #[serde(default)]
    pub exclude_resource_rules: Vec<NamedRule>,
    /// `Exact` or `Equivalent` (the default).
    #[serde(default)]
    pub match_policy: Option<String>,
}

/// A `NamedRuleWithOperations`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NamedRule {
    /// Names the rule is limited to; empty: any.
    #[serde(default)]
    pub resource_names: Vec<String>,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT` or `*`.
    #[serde(default)]
    pub operations: Vec<String>,
    /// API groups (`""` is the core group; `*` any).
    #[serde(default)]
    pub api_groups: Vec<String>,
    /// API versions (`*` any).
    #[serde(default)]
    pub api_versions: Vec<String>,
    /// Resources (`pods`, `pods/status`, `*`, `*/*`, `*/scale`).
    #[serde(default)]
    pub resources: Vec<String>,
    /// `Cluster`, `Namespaced` or `*` (the default).
    #[serde(default)]
    pub scope: Option<String>,
}

/// A ValidatingAdmissionPolicy's spec.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidatingPolicySpec {
    /// The kind of the bindings' params.
    #[serde(default)]
    pub param_kind: Option<ParamKind>,
    /// The requests it can match (required).
    #[serde(default)]
    pub match_constraints: Option<MatchResources>,
    /// Its checks.
    #[serde(default)]
    pub validations: Vec<Validation>,
    /// `Fail` (the default) or `Ignore`.
    #[serde(default)]
    pub failure_policy: Option<String>,
    /// Audit annotations.
    #[serde(default)]
    pub audit_annotations: Vec<AuditAnnotation>,
    /// Conditions that must all hold for it to run.
    #[serde(default)]
    pub match_conditions: Vec<MatchCondition>,
    /// Named expressions.
    #[serde(default)]
    pub variables: Vec<Variable>,
}

/// A MutatingAdmissionPolicy's spec.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MutatingPolicySpec {
    /// The kind of the bindings' params.
    #[serde(default)]
    pub param_kind: Option<ParamKind>,
    /// The requests it can match (required).
    #[serde(default)]
    pub match_constraints: Option<MatchResources>,
    /// Named expressions.
    #[serde(default)]
    pub variables: Vec<Variable>,
    /// Its changes, applied in order.
    #[serde(default)]
    pub mutations: Vec<Mutation>,
    /// `Fail` (the default) or `Ignore`.
    #[serde(default)]
    pub failure_policy: Option<String>,
    /// Conditions that must all hold for it to run.
    #[serde(default)]
    pub match_conditions: Vec<MatchCondition>,
    /// `Never` or `IfNeeded` (required by the apiserver).
    #[serde(default)]
    pub reinvocation_policy: Option<String>,
}

/// `spec.paramRef` of a binding.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParamRef {
    /// One param by name.
    #[serde(default)]
    pub name: Option<String>,
    /// The params' namespace (namespaced param kinds; default: the request's).
    #[serde(default)]
    pub namespace: Option<String>,
    /// Every param whose labels match (each evaluated in turn).
    #[serde(default)]
    pub selector: Option<LabelSelector>,
    /// `Allow` or `Deny` when no param is found.
    #[serde(default)]
    pub parameter_not_found_action: Option<String>,
}

/// A binding's spec (both kinds; `validationActions` only for ValidatingAdmissionPolicy's).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingSpec {
    /// The policy it binds.
    #[serde(default)]
    pub policy_name: String,
    /// Where its params come from.
    #[serde(default)]
    pub param_ref: Option<ParamRef>,
    /// Narrows the policy's match constraints.
    #[serde(default)]
    pub match_resources: Option<MatchResources>,
    /// `Deny`, `Warn`, `Audit` (validating bindings).
    #[serde(default)]
    pub validation_actions: Option<Vec<String>>,
}

/// Decodes `document` as `T`, every problem at its field path: a field kube-apiserver does not
/// know (an unknown field, at any depth) is one.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    document: &Value,
) -> Result<T, Vec<FieldError>> {
    let mut unknown = Vec::new();
    let mut record = |path: serde_ignored::Path<'_>| {
        let field = crate::policy::ignored_path(&path);
        // metadata is free-form.
        if !field.starts_with("metadata") {
            unknown.push(FieldError::new(field, "unknown field"));
        }
    };
    let de = serde_ignored::Deserializer::new(document, &mut record);
    let decoded: Result<T, _> = serde_path_to_error::deserialize(de);
    match decoded {
        Ok(value) if unknown.is_empty() => Ok(value),
        Ok(_) => Err(unknown),
        Err(error) => {
            let field = error.path().to_string();
            let field = if field == "." { String::new() } else { field };
            unknown.push(FieldError::new(field, error.into_inner().to_string()));
            Err(unknown)
        }
    }
}
