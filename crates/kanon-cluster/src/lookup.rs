//! The engine's [`Lookup`] in a cluster: Namespaces from the Namespace cache, other objects
//! through the [`ObjectReader`], HTTP services through [`HttpLookups`], the kinds a policy being
//! written is checked against from [`CustomKinds`].

use std::sync::Arc;

use kanon_engine::{HttpAnswer, HttpCall, LookupFuture, ObjectQuery};
use kanon_engine::{Lookup, LookupError};
use serde_json::Value;

use crate::custom_kinds::CustomKinds;
use crate::http::{HttpLookups, TokenSource};
use crate::metrics::{ClusterMetrics, LookupSource};
use crate::namespaces::NamespaceCache;
use crate::objects::ObjectReader;

/// Reads the cluster and HTTP services for policies.
pub struct ClusterLookup {
    namespaces: NamespaceCache,
    objects: Arc<ObjectReader>,
    http: HttpLookups,
    metrics: ClusterMetrics,
    kinds: Option<CustomKinds>,
}

impl ClusterLookup {
    /// A lookup over these sources.
    pub fn new(
        namespaces: NamespaceCache,
        objects: Arc<ObjectReader>,
        http: HttpLookups,
        metrics: ClusterMetrics,
    ) -> Self {
        ClusterLookup {
            namespaces,
            objects,
            http,
            metrics,
            kinds: None,
        }
    }

    /// The lookup, with `kinds` for checking policy objects being written (without it, the
    /// built-in kinds alone).
    pub fn with_kinds(mut self, kinds: CustomKinds) -> Self {
        self.kinds = Some(kinds);
        self
    }

    fn is_namespace(query: &ObjectQuery<'_>) -> bool {
        query.api_version == "v1" && query.kind == "Namespace"
    }

    fn not_synced(&self, what: String) -> LookupError {
        let error = LookupError::NotSynced { what };
        self.metrics.lookup_error(LookupSource::Namespaces, &error);
        error
    }
}

/// Bearer tokens of HTTP references, from Secrets read through the apiserver.
impl TokenSource for ObjectReader {
    fn token<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        key: &'a str,
    ) -> LookupFuture<'a, String> {
        Box::pin(self.secret_text(namespace, name, key))
    }
}

impl Lookup for ClusterLookup {
    fn get<'a>(
        &'a self,
        query: ObjectQuery<'a>,
        name: &'a str,
    ) -> LookupFuture<'a, Option<Arc<Value>>> {
        if Self::is_namespace(&query) {
            let found = match self.namespaces.get(name) {
                Ok(found) => {
                    self.metrics.lookup_hit(LookupSource::Namespaces);
                    Ok(found)
                }
                Err(_) => Err(self.not_synced(query.describe(Some(name)))),
            };
            return Box::pin(std::future::ready(found));
        }
        self.objects.get(query, name)
    }

    fn list<'a>(&'a self, query: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>> {
        if Self::is_namespace(&query) {
            let found = match self.namespaces.list() {
                Ok(found) => {
                    self.metrics.lookup_hit(LookupSource::Namespaces);
                    Ok(found)
                }
                Err(_) => Err(self.not_synced(query.describe(None))),
            };
            return Box::pin(std::future::ready(found));
        }
        self.objects.list(query)
    }

    fn http<'a>(&'a self, call: &'a HttpCall) -> LookupFuture<'a, HttpAnswer> {
        Box::pin(self.http.call(call))
    }

    fn kinds(&self) -> Option<kanon_engine::Kinds> {
        self.kinds.as_ref().and_then(CustomKinds::current)
    }
}
