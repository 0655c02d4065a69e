//! Resolving a reference on a request: its source (the object, its old version, its owner, a
//! cluster object, an HTTP service), then its path.

use std::sync::Arc;

use kanon_api::RefSource;
use serde_json::Value;

use super::CompiledRef;
use super::text::Text;
use crate::lookup::{Lookup, LookupError, ObjectQuery};
use crate::rule::RuleError;

/// What a reference is resolved against.
pub struct RefScope<'a> {
    /// The object under test.
    pub object: &'a Value,
    /// The previous object, if any.
    pub old_object: Option<&'a Value>,
    /// The object's namespace.
    pub namespace: Option<&'a str>,
    /// Cluster objects and HTTP services.
    pub lookup: &'a dyn Lookup,
    /// The policy the reference belongs to (`Kind/name`), on whose behalf lookups are made.
    pub policy: &'a str,
    /// The program context, for `{{ }}` placeholders; needed only when some reference
    /// [`CompiledRef::needs_context`].
    pub context: Option<&'a minijinja::Value>,
}

impl RefScope<'_> {
    /// `text` with its placeholders rendered against the program context; an error names the
    /// field `at.what`.
    pub(super) fn render(&self, text: &Text, at: &str, what: &str) -> Result<String, RuleError> {
        let empty = minijinja::Value::UNDEFINED;
        text.render(self.context.unwrap_or(&empty))
            .map_err(|e| RuleError::Reference {
                field: format!("{at}.{what}"),
                message: e.message,
            })
    }
}

impl CompiledRef {
    /// Resolves the value: `Ok(None)` when the source or the path holds nothing (a missing
    /// owner reference, an absent field, a label selector or a JSONPath that selects nothing);
    /// an error when a lookup fails or an object named by a reference does not exist.
    pub async fn resolve(&self, scope: &RefScope<'_>) -> Result<Option<Value>, RuleError> {
        let at = &self.field;
        // The object and its old version are read in place; looked-up objects are shared.
        let looked_up: Arc<Value>;
        let source: &Value = match self.source {
            RefSource::Current => scope.object,
            RefSource::Old => match scope.old_object {
                Some(o) => o,
                None => return Ok(None),
            },
            RefSource::Owner | RefSource::K8s | RefSource::Http => {
                let found = match self.source {
                    RefSource::Owner => self.owner(scope).await?,
                    RefSource::K8s => self.k8s(scope).await?,
                    _ => Some(self.http(scope).await?),
                };
                match found {
                    Some(o) => {
                        looked_up = o;
                        &looked_up
                    }
                    None => return Ok(None),
                }
            }
        };
        self.path.read(source, self.per_item, at)
    }

    /// The item at `index` of what the reference selects, for a JSONPath that selects items
    /// (see `path::Items`; for `$.spec.containers[*].image` the container, not its image) in the
    /// object or its old version; `None` for other paths and sources.
    pub fn item_at(
        &self,
        object: &Value,
        old_object: Option<&Value>,
        index: usize,
    ) -> Option<Value> {
        let source = match self.source {
            RefSource::Current => object,
            RefSource::Old => old_object?,
            _ => return None,
        };
        self.path.item(source, index)
    }

    /// A lookup made for the reference's part at `field` that failed.
    pub(super) fn lookup_error(&self, field: &str, error: LookupError) -> RuleError {
        RuleError::Lookup {
            field: field.to_string(),
            error,
        }
    }

    /// The query for objects of a type, on behalf of the policy in `scope`.
    pub(super) fn query<'q>(
        &'q self,
        scope: &RefScope<'q>,
        api_version: &'q str,
        kind: &'q str,
        namespace: Option<&'q str>,
    ) -> ObjectQuery<'q> {
        ObjectQuery {
            api_version,
            kind,
            namespace,
            policy: scope.policy,
            confined_to: self.own_namespace.as_deref(),
            label_selector: None,
        }
    }

    async fn owner(&self, scope: &RefScope<'_>) -> Result<Option<Arc<Value>>, RuleError> {
        let refs = scope
            .object
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array);
        let Some(refs) = refs.filter(|r| !r.is_empty()) else {
            return Ok(None);
        };
        let owner = refs
            .iter()
            .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
            .unwrap_or(&refs[0]);
        let text = |k: &str| owner.get(k).and_then(Value::as_str).unwrap_or_default();
        let (api_version, kind, name) = (text("apiVersion"), text("kind"), text("name"));
        let found = scope
            .lookup
            .get(self.query(scope, api_version, kind, scope.namespace), name)
            .await
            .map_err(|e| self.lookup_error(&self.field, e))?;
        // Owners of namespaced objects may be cluster-scoped (e.g. a Node).
        let found = match found {
            Some(o) => Some(o),
            None if scope.namespace.is_some() => scope
                .lookup
                .get(self.query(scope, api_version, kind, None), name)
                .await
                .map_err(|e| self.lookup_error(&self.field, e))?,
            None => None,
        };
        match found {
            Some(o) => Ok(Some(o)),
            None => Err(RuleError::NotFound {
                field: self.field.clone(),
                what: format!(
                    "the owner {api_version} {kind} {}{name}",
                    scope.namespace.map(|n| format!("{n}/")).unwrap_or_default()
                ),
                note: "",
            }),
        }
    }
}
