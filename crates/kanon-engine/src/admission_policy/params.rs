//! A binding's params: the objects of the policy's `paramKind` its `paramRef` names or selects,
//! read through kanon's lookups (offline: the `--context` objects), each evaluated in turn, as
//! kube-apiserver collects them.

use std::sync::Arc;

use serde_json::Value;

use super::manifest::{self, ParamKind};
use crate::error::FieldError;
use crate::lookup::{Lookup, ObjectQuery};
use crate::selector::{LabelMatcher, labels_of};

/// A compiled `paramRef`.
#[derive(Debug, Clone)]
pub(crate) struct ParamRef {
    choice: Choice,
    namespace: Option<String>,
    deny_when_missing: bool,
}

#[derive(Debug, Clone)]
enum Choice {
    Name(String),
    Selector(LabelMatcher),
}

impl ParamRef {
    pub(crate) fn compile(
        written: &manifest::ParamRef,
        at: &str,
        errors: &mut Vec<FieldError>,
    ) -> Option<Self> {
        let choice = match (&written.name, &written.selector) {
            (Some(name), None) if !name.is_empty() => Choice::Name(name.clone()),
            (None, Some(selector)) => Choice::Selector(LabelMatcher::compile(
                selector,
                &format!("{at}.selector"),
                errors,
            )),
            (Some(_), Some(_)) => {
                errors.push(FieldError::new(
                    at,
                    "`name` and `selector` are mutually exclusive",
                ));
                return None;
            }
            _ => {
                errors.push(FieldError::new(
                    at,
                    "one of `name` or `selector` must be set",
                ));
                return None;
            }
        };
        let deny_when_missing = match written.parameter_not_found_action.as_deref() {
            Some("Deny") => true,
            Some("Allow") => false,
            None => {
                errors.push(FieldError::new(
                    format!("{at}.parameterNotFoundAction"),
                    "is required",
                ));
                false
            }
            Some(other) => {
                errors.push(FieldError::new(
                    format!("{at}.parameterNotFoundAction"),
                    format!("unsupported value `{other}`: supported values: Allow, Deny"),
                ));
                false
            }
        };
        Some(ParamRef {
            choice,
            namespace: written.namespace.clone().filter(|n| !n.is_empty()),
            deny_when_missing,
        })
    }
}

/// Where one binding's params come from.
#[derive(Debug, Clone)]
pub(crate) struct Params {
    kind: Option<ParamKind>,
    reference: Option<ParamRef>,
}

/// The params to evaluate a binding with: `None` is one evaluation with `params` null.
pub(crate) type Collected = Vec<Option<Arc<Value>>>;

impl Params {
    pub(crate) fn new(kind: Option<ParamKind>, reference: Option<ParamRef>) -> Self {
        Params { kind, reference }
    }

    /// The params for a request in `namespace` (`""`: cluster-scoped). An error is a
    /// configuration error of the binding, in kube-apiserver's words.
    pub(crate) async fn collect(
        &self,
        lookup: &dyn Lookup,
        namespace: &str,
        policy: &str,
    ) -> Result<Collected, String> {
        // Without a paramKind, or a binding that names no params: one evaluation, params null.
        let (Some(kind), Some(reference)) = (&self.kind, &self.reference) else {
            return Ok(vec![None]);
        };
        let described = describe(kind);
        let namespaced = match scope_of(lookup, kind) {
            Some(namespaced) => namespaced,
            // Not a kind kanon knows (a custom kind offline): namespaced when the binding says
            // where its params live.
            None if reference.namespace.is_some() => true,
            None => {
                return Err(format!(
                    "paramKind kind `{described}` not known (give paramRef.namespace for a namespaced custom kind, or run where its CustomResourceDefinition is served)"
                ));
            }
        };
        let namespace = if namespaced {
            match (&reference.namespace, namespace) {
                (Some(own), _) => Some(own.as_str()),
                (None, "") => {
                    return Err("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources".to_owned());
                }
                (None, request) => Some(request),
            }
        } else {
            if reference.namespace.is_some() {
                return Err(
                    "paramRef.namespace must not be provided for a cluster-scoped `paramKind`"
                        .to_owned(),
                );
            }
            None
        };
        let query = ObjectQuery {
            api_version: &kind.api_version,
            kind: &kind.kind,
            namespace,
            policy,
            confined_to: None,
            label_selector: None,
        };
        let found: Vec<Arc<Value>> = match &reference.choice {
            Choice::Name(name) => lookup
                .get(query, name)
                .await
                .map_err(|e| e.to_string())?
                .into_iter()
                .collect(),
            Choice::Selector(selector) => lookup
                .list(query)
                .await
                .map_err(|e| e.to_string())?
                .into_iter()
                .filter(|object| selector.matches(labels_of(object)))
                .collect(),
        };
        if found.is_empty() && reference.deny_when_missing {
            return Err(
                "no params found for policy binding with `Deny` parameterNotFoundAction".to_owned(),
            );
        }
        Ok(found.into_iter().map(Some).collect())
    }
}

/// `group/version, Kind=kind`, as Kubernetes prints a GroupVersionKind.
fn describe(kind: &ParamKind) -> String {
    format!("{}, Kind={}", kind.api_version, kind.kind)
}

/// Whether the kind is namespaced, when the lookup's kinds (or the built-in ones) know it.
fn scope_of(lookup: &dyn Lookup, kind: &ParamKind) -> Option<bool> {
    crate::lookup::kinds_of(lookup)?
        .kind(&kind.api_version, &kind.kind)
        .map(|known| known.kind.namespaced)
}
