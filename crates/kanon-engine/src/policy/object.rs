//! Policy objects as written: their identity and their decoding (strict: unknown fields and
//! kinitiras leftovers are errors).

use std::fmt;

use kanon_api::{
    API_VERSION, ClusterOverridePolicy, ClusterValidatePolicy, OverridePolicy, PolicyKind,
    ValidatePolicy,
};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{FieldError, InvalidPolicy};

/// The identity of a policy: kind, namespace (namespaced kinds) and name; for a Kubernetes
/// admission policy, also its binding.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PolicyId {
    /// The kind. For a Kubernetes admission policy (`binding` set), the kanon kind whose
    /// webhook it runs in: ClusterOverridePolicy for a MutatingAdmissionPolicy,
    /// ClusterValidatePolicy for a ValidatingAdmissionPolicy.
    pub kind: PolicyKind,
    /// The namespace, for namespaced kinds.
    pub namespace: Option<String>,
    /// The name (of the admission policy, when `binding` is set).
    pub name: String,
    /// The binding of a ValidatingAdmissionPolicy or MutatingAdmissionPolicy: each binding of
    /// such a policy is evaluated as a policy of its own. `None` for kanon's kinds.
    pub binding: Option<String>,
}

impl PolicyId {
    /// The identity of a policy of one of kanon's kinds.
    pub fn new(kind: PolicyKind, namespace: Option<String>, name: impl Into<String>) -> Self {
        PolicyId {
            kind,
            namespace,
            name: name.into(),
            binding: None,
        }
    }

    /// The `kind` as written: kanon's kind, or `ValidatingAdmissionPolicy` /
    /// `MutatingAdmissionPolicy` for a binding of one.
    pub fn kind_name(&self) -> &'static str {
        match (&self.binding, self.kind) {
            (None, kind) => kind.as_str(),
            (Some(_), PolicyKind::ClusterOverridePolicy | PolicyKind::OverridePolicy) => {
                "MutatingAdmissionPolicy"
            }
            (Some(_), _) => "ValidatingAdmissionPolicy",
        }
    }
}

impl Ord for PolicyId {
    /// Evaluation order: by kind; within a kind, Kubernetes' admission policies before kanon's
    /// own (kube-apiserver runs its policy plugins before its webhooks); then namespace, name
    /// and binding.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (
            self.kind,
            self.binding.is_none(),
            &self.namespace,
            &self.name,
            &self.binding,
        )
            .cmp(&(
                other.kind,
                other.binding.is_none(),
                &other.namespace,
                &other.name,
                &other.binding,
            ))
    }
}

impl PartialOrd for PolicyId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for PolicyId {
    /// `Kind/name`, or `Kind/namespace/name` for namespaced kinds;
    /// `ValidatingAdmissionPolicy/name with binding b` for a binding of an admission policy.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.namespace, &self.binding) {
            (_, Some(binding)) => write!(
                f,
                "{}/{} with binding {binding}",
                self.kind_name(),
                self.name
            ),
            (Some(ns), None) => write!(f, "{}/{}/{}", self.kind, ns, self.name),
            (None, None) => write!(f, "{}/{}", self.kind, self.name),
        }
    }
}

/// The kanon policy kind of a document, if it is one: `apiVersion` must be
/// `policy.kanon.dev/v1alpha1` and `kind` one of the four.
pub fn policy_kind_of(document: &Value) -> Option<PolicyKind> {
    let api_version = document.get("apiVersion").and_then(Value::as_str)?;
    let kind = document.get("kind").and_then(Value::as_str)?;
    (api_version == API_VERSION)
        .then(|| PolicyKind::from_kind(kind))
        .flatten()
}

/// A decoded policy object of any of the four kinds.
#[derive(Clone, Debug)]
pub enum PolicyObject {
    /// A ClusterOverridePolicy.
    ClusterOverride(ClusterOverridePolicy),
    /// An OverridePolicy.
    Override(OverridePolicy),
    /// A ClusterValidatePolicy.
    ClusterValidate(ClusterValidatePolicy),
    /// A ValidatePolicy.
    Validate(ValidatePolicy),
}

/// Formats a serde_ignored path as a field path (`spec.overrideRules[0].overriders.foo`).
pub(crate) fn ignored_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", ignored_path(parent)),
        Path::Map { parent, key } => {
            let parent = ignored_path(parent);
            if parent.is_empty() {
                key.clone()
            } else {
                format!("{parent}.{key}")
            }
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => ignored_path(parent),
    }
}

/// Checks `document` against `kind`'s schema ([`crate::shape`]), then deserializes it as `T`.
/// Every problem of the shape check is returned at once: when one of them stops decoding (a
/// wrong type or value, a missing field) they are the error; unknown fields alone do not, and
/// are returned beside the value. What serde still rejects is the error at serde's path, in the
/// shape check's words.
pub(crate) fn decode_reporting_unknown<T: DeserializeOwned>(
    kind: Option<PolicyKind>,
    document: &Value,
) -> Result<(T, Vec<FieldError>), Vec<FieldError>> {
    use crate::shape::{self, PathStep, Problem};
    use serde_path_to_error::Segment;

    let problems = kind.map(|k| shape::check(k, document)).unwrap_or_default();
    let fatal = problems.iter().any(Problem::is_fatal);
    let mut reported: Vec<FieldError> = problems.into_iter().map(|p| p.error).collect();
    if fatal {
        return Err(reported);
    }
    // serde_ignored stays as a second look: a field the schema allows but the type skips is
    // still reported.
    let mut unknown = Vec::new();
    let mut record = |path: serde_ignored::Path<'_>| {
        let field = ignored_path(&path);
        // kube's derived types carry apiVersion and kind as constants, not as fields.
        if field != "apiVersion" && field != "kind" {
            unknown.push(FieldError::new(field, "unknown field"));
        }
    };
    let de = serde_ignored::Deserializer::new(document.clone(), &mut record);
    let result: Result<T, _> = serde_path_to_error::deserialize(de);
    for u in unknown {
        if !reported.iter().any(|r| r.field == u.field) {
            reported.push(u);
        }
    }
    match result {
        Ok(value) => Ok((value, reported)),
        Err(e) => {
            let field = e.path().to_string();
            let field = if field == "." { String::new() } else { field };
            let steps: Vec<PathStep> = e
                .path()
                .iter()
                .map_while(|segment| match segment {
                    Segment::Seq { index } => Some(PathStep::Index(*index)),
                    Segment::Map { key } => Some(PathStep::Key(key.clone())),
                    Segment::Enum { variant } => Some(PathStep::Key(variant.clone())),
                    Segment::Unknown => None,
                })
                .collect();
            let message = e.into_inner().to_string();
            let message = match kind {
                Some(kind) => shape::explain_decode_error(kind, document, &steps, &message),
                None => message,
            };
            reported.push(FieldError::new(field, message));
            Err(reported)
        }
    }
}

/// kinitiras fields that kanon replaces; a policy carrying them is rejected with the way out.
pub(super) fn kinitiras_leftovers(document: &Value, errors: &mut Vec<FieldError>) {
    let spec = document.get("spec");
    let rules = |key| {
        spec.and_then(|s| s.get(key))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
    };
    for (i, rule) in rules("overrideRules").enumerate() {
        for field in ["cue", "renderedCue"] {
            if rule.pointer(&format!("/overriders/{field}")).is_some() {
                errors.push(FieldError::new(
                    format!("spec.overrideRules[{i}].overriders.{field}"),
                    "kinitiras CUE is not supported: rewrite it as a minijinja rule `program` (see `kanon render` for examples)",
                ));
            }
        }
    }
    for (i, rule) in rules("validateRules").enumerate() {
        for field in ["cue", "renderedCue"] {
            if rule.get(field).is_some() {
                errors.push(FieldError::new(
                    format!("spec.validateRules[{i}].{field}"),
                    "kinitiras CUE is not supported: rewrite it as a minijinja rule `program` (see `kanon render` for examples)",
                ));
            }
        }
    }
}

impl PolicyObject {
    /// Decodes a policy document strictly: an unknown field, a kinitiras `cue` field or a type
    /// error is an [`InvalidPolicy`] naming the field.
    pub fn decode(document: &Value) -> Result<Self, InvalidPolicy> {
        let (object, problems) = Self::decode_reporting(document)?;
        if problems.is_empty() {
            Ok(object)
        } else {
            Err(InvalidPolicy {
                policy: object.id().to_string(),
                errors: problems,
            })
        }
    }

    /// Decodes a policy document. A document that cannot be read at all (not a policy kind, a
    /// type error) is an [`InvalidPolicy`]; unknown fields and kinitiras `cue` fields are
    /// returned beside the object, to be reported together with the compile errors.
    pub fn decode_reporting(document: &Value) -> Result<(Self, Vec<FieldError>), InvalidPolicy> {
        let kind = policy_kind_of(document);
        let name = document
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let namespace = document
            .pointer("/metadata/namespace")
            .and_then(Value::as_str);
        let label = match (kind, namespace) {
            (Some(k), Some(ns)) if k.is_namespaced() => format!("{k}/{ns}/{name}"),
            (Some(k), _) => format!("{k}/{name}"),
            (None, _) => format!(
                "{}/{name}",
                document.get("kind").and_then(Value::as_str).unwrap_or("?")
            ),
        };
        let invalid = |errors| InvalidPolicy {
            policy: label.clone(),
            errors,
        };
        let Some(kind) = kind else {
            return Err(invalid(vec![FieldError::new(
                "kind",
                format!(
                    "not a kanon policy: apiVersion must be {API_VERSION} and kind one of ClusterOverridePolicy, OverridePolicy, ClusterValidatePolicy, ValidatePolicy"
                ),
            )]));
        };
        let mut problems = Vec::new();
        kinitiras_leftovers(document, &mut problems);
        let decoded = match kind {
            PolicyKind::ClusterOverridePolicy => decode_reporting_unknown(Some(kind), document)
                .map(|(p, u)| (PolicyObject::ClusterOverride(p), u)),
            PolicyKind::OverridePolicy => decode_reporting_unknown(Some(kind), document)
                .map(|(p, u)| (PolicyObject::Override(p), u)),
            PolicyKind::ClusterValidatePolicy => decode_reporting_unknown(Some(kind), document)
                .map(|(p, u)| (PolicyObject::ClusterValidate(p), u)),
            PolicyKind::ValidatePolicy => decode_reporting_unknown(Some(kind), document)
                .map(|(p, u)| (PolicyObject::Validate(p), u)),
        };
        let (object, found) = match decoded {
            Ok((object, found)) => (Some(object), found),
            Err(found) => (None, found),
        };
        // A kinitiras field is reported once, with its way out, not also as unknown.
        let kinitiras = problems.len();
        for f in found {
            if !problems[..kinitiras].iter().any(|p| p.field == f.field) {
                problems.push(f);
            }
        }
        match object {
            Some(object) => Ok((object, problems)),
            None => Err(invalid(problems)),
        }
    }

    /// Its selectors and rules, for the check against Kubernetes' kinds.
    pub(super) fn written(&self) -> crate::kubernetes::Written<'_> {
        use crate::kubernetes::Written;
        match self {
            PolicyObject::ClusterOverride(p) => Written {
                selectors: &p.spec.resource_selectors,
                override_rules: &p.spec.override_rules,
                validate_rules: &[],
            },
            PolicyObject::Override(p) => Written {
                selectors: &p.spec.resource_selectors,
                override_rules: &p.spec.override_rules,
                validate_rules: &[],
            },
            PolicyObject::ClusterValidate(p) => Written {
                selectors: &p.spec.resource_selectors,
                override_rules: &[],
                validate_rules: &p.spec.validate_rules,
            },
            PolicyObject::Validate(p) => Written {
                selectors: &p.spec.resource_selectors,
                override_rules: &[],
                validate_rules: &p.spec.validate_rules,
            },
        }
    }

    /// The policy's metadata.
    pub fn metadata(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        match self {
            PolicyObject::ClusterOverride(p) => &p.metadata,
            PolicyObject::Override(p) => &p.metadata,
            PolicyObject::ClusterValidate(p) => &p.metadata,
            PolicyObject::Validate(p) => &p.metadata,
        }
    }

    /// The policy's identity.
    pub fn id(&self) -> PolicyId {
        let (kind, meta) = match self {
            PolicyObject::ClusterOverride(p) => (PolicyKind::ClusterOverridePolicy, &p.metadata),
            PolicyObject::Override(p) => (PolicyKind::OverridePolicy, &p.metadata),
            PolicyObject::ClusterValidate(p) => (PolicyKind::ClusterValidatePolicy, &p.metadata),
            PolicyObject::Validate(p) => (PolicyKind::ValidatePolicy, &p.metadata),
        };
        let namespace = if kind.is_namespaced() {
            meta.namespace.clone()
        } else {
            None
        };
        PolicyId::new(kind, namespace, meta.name.clone().unwrap_or_default())
    }
}
