//! Where one policy's rules are evaluated on one request: the request, the [`Evaluation`], the
//! object's namespace (read once per request), and the policy. Every rule language resolves its
//! references and gathers its variables here.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::host::ProgramInput;
use crate::lookup::{Lookup, ObjectQuery};

use super::Evaluation;
use crate::language::cel::PolicyBudget;
use crate::references::{CompiledRef, RefScope};
use crate::request::Request;
use crate::rule::{RuleError, Shared, Variables};
use crate::selector::labels_of;

/// The documents rules read beside the object, gathered once per request and only if a policy
/// needs them: the object's namespace (its labels for a namespace selector, or
/// `namespaceObject` for a rule), and shared copies of the request's object, old object and
/// `request` that program contexts wrap (see [`Shared`]).
pub(crate) struct RequestDocuments<'a> {
    lookup: &'a dyn Lookup,
    namespace: Option<&'a str>,
    cached: Option<Result<Option<Arc<Value>>, RuleError>>,
    object: Option<Arc<Value>>,
    old_object: Option<Arc<Value>>,
    info: Option<Arc<Value>>,
}

impl<'a> RequestDocuments<'a> {
    pub(crate) fn new(lookup: &'a dyn Lookup, namespace: Option<&'a str>) -> Self {
        RequestDocuments {
            lookup,
            namespace,
            cached: None,
            object: None,
            old_object: None,
            info: None,
        }
    }

    /// Shared copies of `request`'s documents, made on first use: `object` shared only when it
    /// is the request's own object or old object (not a copy earlier policies changed). The
    /// request is borrowed for the whole review, so a copy never goes stale.
    fn shared(&mut self, request: &Request, object: &Value) -> Shared {
        let copy = |slot: &mut Option<Arc<Value>>, value: &Value| {
            slot.get_or_insert_with(|| Arc::new(value.clone())).clone()
        };
        let same = |candidate: Option<&Value>| candidate.is_some_and(|c| std::ptr::eq(c, object));
        let old_object = request
            .old_object
            .as_ref()
            .map(|old| copy(&mut self.old_object, old));
        let object = if same(request.object.as_ref()) {
            Some(copy(&mut self.object, object))
        } else if same(request.old_object.as_ref()) {
            old_object.clone()
        } else {
            None
        };
        Shared {
            object,
            old_object,
            request: Some(copy(&mut self.info, &request.info)),
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
    pub(crate) async fn namespace_object(&mut self) -> Option<Arc<Value>> {
        self.load().await.as_ref().ok().and_then(Clone::clone)
    }
}

/// What evaluating one policy's rules on one request needs besides the rules.
pub(crate) struct Scope<'a, 'n> {
    /// The request.
    pub(crate) request: &'a Request,
    /// Lookups, program host, deadline.
    pub(crate) evaluation: &'a Evaluation<'a>,
    /// The request's documents: its namespace, shared copies of its object and `request`.
    pub(crate) documents: &'n mut RequestDocuments<'a>,
    /// The policy being run (`Kind/name`, `Kind/namespace/name`), on whose behalf lookups are
    /// made.
    pub(crate) policy: &'a str,
    /// What the policy's CEL may still spend on this request, within its owner's ceiling.
    pub(crate) budget: PolicyBudget<'a>,
}

impl<'a> Scope<'a, '_> {
    /// The variables every rule language sees, for a rule on `object` with its resolved
    /// references `refs`, with the request's shared copies of its documents for a program
    /// context to wrap.
    pub(crate) async fn variables<'o>(
        &mut self,
        object: &'o Value,
        refs: Map<String, Value>,
    ) -> Variables<'o>
    where
        'a: 'o,
    {
        let mut variables = self.unshared_variables(object, refs).await;
        variables.shared = self.documents.shared(self.request, object);
        variables
    }

    /// The variables as the program host sees them: owned JSON, copied whole, so no shared
    /// copies are made for it.
    pub(crate) async fn program_input(
        &mut self,
        object: &Value,
        refs: Map<String, Value>,
    ) -> ProgramInput {
        ProgramInput::from(self.unshared_variables(object, refs).await)
    }

    /// The variables, gathered in this one place, without shared copies.
    async fn unshared_variables<'o>(
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
            namespace_object: self.documents.namespace_object().await,
            shared: Shared::default(),
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
