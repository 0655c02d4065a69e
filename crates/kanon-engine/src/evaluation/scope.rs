//! Where one policy's rules are evaluated on one request: the request, the [`Evaluation`], the
//! object's namespace (read once per request), and the policy. Every rule language resolves its
//! references and gathers its variables here.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::lookup::{Lookup, ObjectQuery};

use super::Evaluation;
use crate::language::cel::PolicyBudget;
use crate::references::{CompiledRef, RefScope};
use crate::request::Request;
use crate::rule::{RuleError, Variables};
use crate::selector::labels_of;

/// Reads the object's namespace once per request, only if a policy needs it (its labels for a
/// namespace selector, or `namespaceObject` for a rule).
pub(crate) struct NamespaceLabels<'a> {
    lookup: &'a dyn Lookup,
    namespace: Option<&'a str>,
    cached: Option<Result<Option<Arc<Value>>, RuleError>>,
}

impl<'a> NamespaceLabels<'a> {
    pub(crate) fn new(lookup: &'a dyn Lookup, namespace: Option<&'a str>) -> Self {
        NamespaceLabels {
            lookup,
            namespace,
            cached: None,
        }
    }

    /// Reads the namespace, once.
    async fn load(&mut self) -> &Result<Option<Arc<Value>>, RuleError> {
        if self.cached.is_none() {
            let loaded = match self.namespace {
                None => Ok(None),
                Some(ns) => {
                    let query = ObjectQuery {
                        api_version: "v1",
                        kind: "Namespace",
                        namespace: None,
                        policy: "",
                        confined_to: None,
                        label_selector: None,
                    };
                    match self.lookup.get(query, ns).await {
                        Ok(Some(object)) => Ok(Some(object)),
                        Ok(None) => Err(RuleError::NamespaceNotFound {
                            namespace: ns.to_string(),
                        }),
                        Err(error) => Err(RuleError::Lookup {
                            field: "namespaceSelector".to_string(),
                            error,
                        }),
                    }
                }
            };
            self.cached = Some(loaded);
        }
        match &self.cached {
            Some(loaded) => loaded,
            None => unreachable!("set above"),
        }
    }

    /// The labels of the namespace.
    pub(crate) async fn labels(&mut self) -> Result<Option<&Map<String, Value>>, RuleError> {
        match self.load().await {
            Ok(object) => Ok(object.as_deref().and_then(labels_of)),
            Err(e) => Err(e.clone()),
        }
    }

    /// The namespace object, for `namespaceObject`; `None` when unknown.
    pub(crate) async fn object(&mut self) -> Option<Arc<Value>> {
        self.load().await.as_ref().ok().and_then(Clone::clone)
    }
}

/// What evaluating one policy's rules on one request needs besides the rules.
pub(crate) struct Scope<'a, 'n> {
    /// The request.
    pub(crate) request: &'a Request,
    /// Lookups, program host, deadline.
    pub(crate) evaluation: &'a Evaluation<'a>,
    /// The object's namespace.
    pub(crate) namespaces: &'n mut NamespaceLabels<'a>,
    /// The policy being run (`Kind/name`, `Kind/namespace/name`), on whose behalf lookups are
    /// made.
    pub(crate) policy: &'a str,
    /// What the policy's CEL may still spend on this request, within its owner's ceiling.
    pub(crate) budget: PolicyBudget<'a>,
}

impl<'a> Scope<'a, '_> {
    /// The variables every rule language sees, for a rule on `object` with its resolved
    /// references `refs`: the one place they are gathered.
    pub(crate) async fn variables<'o>(
        &mut self,
        object: &'o Value,
        refs: Map<String, Value>,
    ) -> Variables<'o>
    where
        'a: 'o,
    {
        Variables {
            object,
            old_object: self.request.old_object.as_ref(),
            operation: self.request.operation.as_str(),
            request: &self.request.info,
            namespace_object: self.namespaces.object().await,
            refs,
        }
    }

    /// A rule's references resolved against `object`, by name.
    pub(crate) async fn resolve(
        &mut self,
        references: &[(impl AsRef<str>, CompiledRef)],
        object: &Value,
    ) -> Result<Map<String, Value>, RuleError> {
        let mut refs = Map::new();
        if !references.is_empty() {
            // Placeholders in references see the same variables as the program, bar `refs`.
            let base = if references.iter().any(|(_, r)| r.needs_context()) {
                let variables = self.variables(object, Map::new()).await;
                Some(crate::program::text_context(variables, Vec::new()))
            } else {
                None
            };
            let scope = RefScope {
                object,
                old_object: self.request.old_object.as_ref(),
                namespace: self.request.namespace.as_deref(),
                lookup: self.evaluation.lookup(),
                policy: self.policy,
                context: base.as_ref(),
            };
            for (name, reference) in references {
                if let Some(value) = reference.resolve(&scope).await? {
                    refs.insert(name.as_ref().to_string(), value);
                }
            }
        }
        Ok(refs)
    }
}
