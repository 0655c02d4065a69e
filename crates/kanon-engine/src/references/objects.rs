//! `k8s` references: an object by name, or the objects a label selector matches, through the
//! lookups, confined to a namespaced policy's own namespace.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde_json::Value;

use super::target::{SelectorTarget, Target};
use super::text::Text;
use super::{CompiledRef, RefScope};
use crate::lookup::ObjectQuery;
use crate::rule::RuleError;
use crate::selector::{LabelMatcher, labels_of};

impl CompiledRef {
    /// The referenced object (by name), or the list of objects its label selector matches
    /// (`None` when none does: nothing is there to test).
    pub(super) async fn k8s(&self, scope: &RefScope<'_>) -> Result<Option<Arc<Value>>, RuleError> {
        let at = format!("{}.k8s", self.field);
        let Some(Target::Object(t)) = &self.target else {
            return Err(missing(at));
        };
        let render = |text: &Text, what: &str| scope.render(text, &at, what);
        let api_version = render(&t.api_version, "apiVersion")?;
        let kind = render(&t.kind, "kind")?;
        let namespace = match &t.namespace {
            Some(n) => Some(render(n, "namespace")?).filter(|n| !n.is_empty()),
            None => None,
        };
        if let (Some(own), Some(ns)) = (&self.own_namespace, &namespace)
            && own != ns
        {
            return Err(RuleError::Reference {
                field: format!("{at}.namespace"),
                message: format!(
                    "a namespaced policy reads objects only in its own namespace `{own}`, not `{ns}`"
                ),
            });
        }
        if let Some(name) = &t.name {
            let name = render(name, "name")?;
            let found = scope
                .lookup
                .get(
                    self.query(scope, &api_version, &kind, namespace.as_deref()),
                    &name,
                )
                .await
                .map_err(|e| self.lookup_error(&at, e))?;
            return match found {
                Some(object) => Ok(Some(object)),
                None => Err(match &namespace {
                    Some(ns) => RuleError::NotFound {
                        field: at,
                        what: format!("{api_version} {kind} {ns}/{name}"),
                        note: "",
                    },
                    None => RuleError::NotFound {
                        field: at,
                        what: format!("{api_version} {kind} {name}"),
                        note: " (no namespace given: looked up as a cluster-scoped object)",
                    },
                }),
            };
        }
        let selector = match &t.selector {
            None => LabelMatcher::default(),
            Some(SelectorTarget::Fixed(m)) => m.clone(),
            Some(SelectorTarget::Templated {
                match_labels,
                match_expressions,
            }) => {
                let what = "labelSelector";
                let mut labels = std::collections::BTreeMap::new();
                for (key, value) in match_labels {
                    labels.insert(key.clone(), render(value, what)?);
                }
                let mut expressions = Vec::new();
                for (key, operator, values) in match_expressions {
                    let values = values
                        .iter()
                        .map(|v| render(v, what))
                        .collect::<Result<Vec<_>, _>>()?;
                    expressions.push(LabelSelectorRequirement {
                        key: key.clone(),
                        operator: operator.clone(),
                        values: Some(values),
                    });
                }
                let selector = LabelSelector {
                    match_labels: Some(labels),
                    match_expressions: Some(expressions),
                };
                let mut errors = Vec::new();
                let matcher =
                    LabelMatcher::compile(&selector, &format!("{at}.{what}"), &mut errors);
                if let Some(e) = errors.into_iter().next() {
                    return Err(RuleError::Reference {
                        field: e.field,
                        message: e.message,
                    });
                }
                matcher
            }
        };
        // The apiserver filters by the selector (the lookup may use it); the filter below
        // stays, for lookups that do not.
        let selector_text = selector.query_text();
        let query = ObjectQuery {
            label_selector: selector_text.as_deref(),
            ..self.query(scope, &api_version, &kind, namespace.as_deref())
        };
        let listed = scope
            .lookup
            .list(query)
            .await
            .map_err(|e| self.lookup_error(&at, e))?;
        let items: Vec<Value> = listed
            .into_iter()
            .filter(|o| selector.matches(labels_of(o)))
            // A namespaced policy listing without a namespace sees cluster-scoped objects
            // and those of its own namespace, never another namespace's.
            .filter(|o| match &self.own_namespace {
                None => true,
                Some(own) => o
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .is_none_or(|ns| ns.is_empty() || ns == own),
            })
            .map(|o| (*o).clone())
            .collect();
        Ok((!items.is_empty()).then(|| Arc::new(Value::Array(items))))
    }
}

/// A reference whose target did not compile, resolved all the same (the policy is invalid, so
/// it never runs).
pub(super) fn missing(field: String) -> RuleError {
    RuleError::Defect {
        field,
        message: "missing".to_string(),
    }
}
