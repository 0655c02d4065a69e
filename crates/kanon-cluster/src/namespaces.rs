//! The Namespace cache: a metadata-only watch of every Namespace, kept as ready-made JSON
//! documents (`apiVersion`, `kind`, `metadata`), because every request in a namespace whose
//! policies have a `namespaceSelector` or read `namespaceObject` asks for one.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::metrics::ClusterMetrics;

#[derive(Debug, Default)]
struct Contents {
    namespaces: HashMap<String, Arc<Value>>,
    /// Filled during a relist, swapped in when it is complete.
    relisting: Option<HashMap<String, Arc<Value>>>,
}

/// Every Namespace's metadata; cheap to clone (clones share the cache).
#[derive(Debug, Clone)]
pub struct NamespaceCache {
    contents: Arc<RwLock<Contents>>,
    synced: watch::Receiver<bool>,
}

/// Why a namespace cannot be read from the cache.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the Namespace cache has not synced yet")]
pub struct NotSynced;

impl NamespaceCache {
    /// Starts watching Namespaces on the current runtime. The cache answers once the first
    /// listing is complete ([`NamespaceCache::wait_synced`]); then it keeps its last contents
    /// through apiserver outages while the watch retries.
    pub fn start(client: Client, metrics: ClusterMetrics) -> Self {
        let (synced_tx, synced) = watch::channel(false);
        let cache = NamespaceCache {
            contents: Arc::new(RwLock::new(Contents::default())),
            synced,
        };
        let contents = cache.contents.clone();
        let api: Api<PartialObjectMeta<Namespace>> = Api::all(client);
        tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default())
                .backoff(crate::backoff::WatchBackoff::new())
                .boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => {
                        if apply(&contents, event) {
                            synced_tx.send_replace(true);
                        }
                    }
                    Err(error) => {
                        metrics.watch_error("Namespace");
                        let error = crate::apiserver_error::describe_watch(&error);
                        tracing::warn!(%error, "the Namespace watch failed; retrying");
                    }
                }
            }
        });
        cache
    }

    /// Whether the first listing is complete.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits until the first listing is complete.
    pub async fn wait_synced(&self) {
        let mut synced = self.synced.clone();
        let _ = synced.wait_for(|s| *s).await;
    }

    /// The Namespace `name` (`apiVersion`, `kind` and `metadata`), `Ok(None)` when there is
    /// none.
    pub fn get(&self, name: &str) -> Result<Option<Arc<Value>>, NotSynced> {
        if !self.is_synced() {
            return Err(NotSynced);
        }
        let contents = match self.contents.read() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        Ok(contents.namespaces.get(name).cloned())
    }

    /// Every Namespace, by name.
    pub fn list(&self) -> Result<Vec<Arc<Value>>, NotSynced> {
        if !self.is_synced() {
            return Err(NotSynced);
        }
        let contents = match self.contents.read() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut all: Vec<(&String, &Arc<Value>)> = contents.namespaces.iter().collect();
        all.sort_by(|a, b| a.0.cmp(b.0));
        Ok(all.into_iter().map(|(_, v)| v.clone()).collect())
    }
}

/// The document kept for a namespace: its metadata without the managed fields.
fn document(meta: PartialObjectMeta<Namespace>) -> Option<(String, Arc<Value>)> {
    let mut metadata = serde_json::to_value(&meta.metadata).ok()?;
    if let Some(map) = metadata.as_object_mut() {
        map.remove("managedFields");
    }
    let name = meta.metadata.name?;
    Some((
        name,
        Arc::new(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata})),
    ))
}

/// Applies one watch event; true when a listing has just completed.
fn apply(contents: &RwLock<Contents>, event: watcher::Event<PartialObjectMeta<Namespace>>) -> bool {
    let mut contents = match contents.write() {
        Ok(c) => c,
        Err(poisoned) => poisoned.into_inner(),
    };
    match event {
        watcher::Event::Apply(meta) => {
            if let Some((name, doc)) = document(meta) {
                contents.namespaces.insert(name, doc);
            }
        }
        watcher::Event::Delete(meta) => {
            if let Some(name) = meta.metadata.name {
                contents.namespaces.remove(&name);
            }
        }
        watcher::Event::Init => contents.relisting = Some(HashMap::new()),
        watcher::Event::InitApply(meta) => {
            if let Some((name, doc)) = document(meta) {
                contents
                    .relisting
                    .get_or_insert_with(HashMap::new)
                    .insert(name, doc);
            }
        }
        watcher::Event::InitDone => {
            contents.namespaces = contents.relisting.take().unwrap_or_default();
            return true;
        }
    }
    false
}
