//! How the engine reads cluster objects (namespaces, owners, referenced objects) without
//! touching the network: through the [`Lookup`] trait, which the cluster runtime implements
//! over its watch caches and `kanon apply` over `--context` files ([`ObjectStore`]).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

/// A lookup that failed (as opposed to an object that does not exist).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("looking up {what}: {message}")]
pub struct LookupError {
    /// What was looked up, e.g. `v1/Namespace default`.
    pub what: String,
    /// Why it failed.
    pub message: String,
}

/// Read access to cluster objects.
pub trait Lookup: Send + Sync {
    /// The object of type `api_version`/`kind` with this namespace (`None` for cluster-scoped
    /// objects) and name; `Ok(None)` when it does not exist.
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<Value>>, LookupError>;

    /// Every object of type `api_version`/`kind` in `namespace` (`None`: cluster-scoped
    /// objects, or all namespaces for a namespaced type), in a stable order.
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Result<Vec<Arc<Value>>, LookupError>;
}

/// A lookup that knows no objects: every object is absent.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoObjects;

impl Lookup for NoObjects {
    fn list(&self, _: &str, _: &str, _: Option<&str>) -> Result<Vec<Arc<Value>>, LookupError> {
        Ok(Vec::new())
    }

    fn get(
        &self,
        _: &str,
        _: &str,
        _: Option<&str>,
        _: &str,
    ) -> Result<Option<Arc<Value>>, LookupError> {
        Ok(None)
    }
}

type ObjectKey = (String, String, Option<String>, String);

/// An in-memory set of objects, for offline evaluation and tests.
#[derive(Debug, Clone, Default)]
pub struct ObjectStore {
    objects: HashMap<ObjectKey, Arc<Value>>,
}

/// An object that cannot be stored because it lacks an identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("object has no {missing}")]
pub struct MissingIdentity {
    /// The missing field (`apiVersion`, `kind` or `metadata.name`).
    pub missing: &'static str,
}

impl ObjectStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) an object, keyed by its `apiVersion`, `kind`, `metadata.namespace`
    /// and `metadata.name`.
    pub fn insert(&mut self, object: Value) -> Result<(), MissingIdentity> {
        let text = |pointer: &str| {
            object
                .pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let api_version = text("/apiVersion").ok_or(MissingIdentity {
            missing: "apiVersion",
        })?;
        let kind = text("/kind").ok_or(MissingIdentity { missing: "kind" })?;
        let name = text("/metadata/name").ok_or(MissingIdentity {
            missing: "metadata.name",
        })?;
        let namespace = text("/metadata/namespace").filter(|n| !n.is_empty());
        self.objects
            .insert((api_version, kind, namespace, name), Arc::new(object));
        Ok(())
    }

    /// Number of objects held.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

impl Lookup for ObjectStore {
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<Value>>, LookupError> {
        let key = (
            api_version.to_string(),
            kind.to_string(),
            namespace.map(str::to_string),
            name.to_string(),
        );
        Ok(self.objects.get(&key).cloned())
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Result<Vec<Arc<Value>>, LookupError> {
        let mut found: Vec<(&ObjectKey, &Arc<Value>)> = self
            .objects
            .iter()
            .filter(|((a, k, ns, _), _)| {
                a == api_version && k == kind && (namespace.is_none() || ns.as_deref() == namespace)
            })
            .collect();
        found.sort_by(|a, b| a.0.cmp(b.0));
        Ok(found.into_iter().map(|(_, v)| v.clone()).collect())
    }
}
