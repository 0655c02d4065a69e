//! The objects that stand for the cluster when there is none: Namespaces (for
//! `namespaceSelector`), owners and the objects `k8s` references read. `kanon apply --context`
//! (alias `--objects`), a suite's `context:` and `kanon serve --policies DIR --objects PATH`
//! all load them with [`load_objects`]; `kanon serve` serves them through [`LiveObjects`], kept
//! in step with the files by [`watch_objects`].

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::inputs::InputError;
use crate::poll::{Fingerprint, poll_files};
use kanon_engine::{Lookup, ObjectStore};
use kanon_engine::{LookupFuture, ObjectQuery};
use serde_json::Value;

/// Why the objects could not be loaded; the message names the file (and the document past
/// a file's first).
#[derive(Debug, thiserror::Error)]
pub enum ObjectsError {
    /// A path could not be read, or its text is not YAML/JSON.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A document lacks what identifies an object.
    #[error("{origin}: {source} (an object needs apiVersion, kind and metadata.name)")]
    Identity {
        /// `file` or `file (document N)`.
        origin: String,
        /// What is missing.
        source: kanon_engine::MissingIdentity,
    },
}

/// Reads every document under `paths` (files, directories read recursively, `-` for standard
/// input; see [`crate::inputs`]) into a store keyed by apiVersion, kind, namespace and name.
/// Any kind of object is accepted; a later object with the same identity replaces an earlier.
pub fn load_objects(paths: &[PathBuf]) -> Result<ObjectStore, ObjectsError> {
    let mut store = ObjectStore::new();
    for doc in crate::inputs::read_documents(paths)? {
        let origin = doc.origin();
        store
            .insert(doc.value)
            .map_err(|source| ObjectsError::Identity { origin, source })?;
    }
    Ok(store)
}

/// A [`Lookup`] over a store that can be replaced while reviews read it: each lookup reads
/// the store in force when it starts.
#[derive(Debug)]
pub struct LiveObjects {
    current: RwLock<Arc<ObjectStore>>,
}

impl LiveObjects {
    /// Serves `store` until [`LiveObjects::replace`].
    pub fn new(store: ObjectStore) -> Self {
        LiveObjects {
            current: RwLock::new(Arc::new(store)),
        }
    }

    /// Puts `store` in force for the lookups that start from now on.
    pub fn replace(&self, store: ObjectStore) {
        // A panic elsewhere while holding the lock cannot leave a half-written Arc behind.
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(store);
    }

    fn snapshot(&self) -> Arc<ObjectStore> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Lookup for LiveObjects {
    fn get<'a>(
        &'a self,
        query: ObjectQuery<'a>,
        name: &'a str,
    ) -> LookupFuture<'a, Option<Arc<Value>>> {
        let store = self.snapshot();
        Box::pin(async move { store.get(query, name).await })
    }

    fn list<'a>(&'a self, query: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>> {
        let store = self.snapshot();
        Box::pin(async move { store.list(query).await })
    }
}

/// Keeps `live` in step with the objects under `paths`, as `kanon serve` does with its
/// policy directory ([`poll_files`]): when the files changed and stayed unchanged for one more
/// interval, they are loaded again. Good objects replace the served ones; on an error the last
/// good objects stay, and the error is logged naming the file and document. `loaded` is the
/// fingerprint taken before the objects `live` serves were loaded ([`fingerprint`]). Runs
/// until the task is dropped.
pub async fn watch_objects(
    paths: Vec<PathBuf>,
    live: Arc<LiveObjects>,
    interval: Duration,
    loaded: Fingerprint,
) {
    poll_files(
        paths,
        false,
        interval,
        loaded,
        load_objects,
        |loaded| match loaded {
            Ok(Ok(store)) => {
                tracing::info!(objects = store.len(), "objects reloaded");
                live.replace(store);
            }
            Ok(Err(error)) => {
                tracing::error!(%error, "cannot reload the objects; the previous objects stay");
            }
            Err(error) => {
                tracing::error!(%error, "loading the objects failed; the previous objects stay");
            }
        },
    )
    .await;
}

/// The fingerprint of the objects files under `paths`, taken before loading them, that
/// [`watch_objects`] starts from.
pub fn fingerprint(paths: &[PathBuf]) -> Fingerprint {
    crate::poll::fingerprint(paths, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kanon_engine::block_on;
    use serde_json::json;

    fn namespace_query() -> ObjectQuery<'static> {
        ObjectQuery {
            api_version: "v1",
            kind: "Namespace",
            namespace: None,
            policy: "",
            confined_to: None,
            label_selector: None,
        }
    }

    #[test]
    fn replaced_objects_are_seen_by_later_lookups() {
        let mut store = ObjectStore::new();
        store
            .insert(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}))
            .unwrap();
        let live = LiveObjects::new(store);
        assert!(
            block_on(live.get(namespace_query(), "a"))
                .unwrap()
                .is_some()
        );
        assert!(
            block_on(live.get(namespace_query(), "b"))
                .unwrap()
                .is_none()
        );
        let mut store = ObjectStore::new();
        store
            .insert(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "b"}}))
            .unwrap();
        live.replace(store);
        assert!(
            block_on(live.get(namespace_query(), "a"))
                .unwrap()
                .is_none()
        );
        assert_eq!(block_on(live.list(namespace_query())).unwrap().len(), 1);
    }

    #[test]
    fn a_document_without_identity_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("objects.yaml");
        std::fs::write(
            &file,
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: v1\nmetadata: {name: b}\n",
        )
        .unwrap();
        let error = load_objects(std::slice::from_ref(&file))
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            format!(
                "{} (document 2): object has no kind (an object needs apiVersion, kind and metadata.name)",
                file.display()
            )
        );
        // The fingerprint sees a change of content.
        let before = fingerprint(std::slice::from_ref(&file));
        std::fs::write(
            &file,
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n",
        )
        .unwrap();
        assert_ne!(before, fingerprint(std::slice::from_ref(&file)));
    }
}
