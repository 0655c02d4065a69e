//! The objects that stand for the cluster when there is none: Namespaces (for
//! `namespaceSelector`), owners and the objects `k8s` references read. `kanon apply --context`
//! (alias `--objects`), a suite's `context:` and `kanon serve --policies DIR --objects PATH`
//! all load them with [`load_objects`]; `kanon serve` serves them through [`LiveObjects`], kept
//! in step with the files by [`watch_objects`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use kanon_engine::lookup::{LookupFuture, ObjectQuery};
use kanon_engine::{Lookup, ObjectStore};
use kanon_webhook::source::InputError;
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
        source: kanon_engine::lookup::MissingIdentity,
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

/// What the objects files look like from outside: every file under the paths (in name order)
/// with its size, modification time and inode, or why a path could not be listed. Any change
/// is a reason to load again; a change that leaves the objects as they were costs one load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(Result<Vec<FileStamp>, String>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    path: PathBuf,
    /// `None` when the file vanished between listing and looking.
    meta: Option<(u64, Option<SystemTime>, u64)>,
}

fn stamp_files(path: &Path, out: &mut Vec<FileStamp>) -> Result<(), String> {
    // Follows symlinks: a mounted ConfigMap's files are links into a directory swapped whole.
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .and_then(|entries| entries.map(|e| e.map(|e| e.path())).collect())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        entries.sort();
        for entry in entries {
            stamp_files(&entry, out)?;
        }
    } else {
        out.push(FileStamp {
            path: path.to_path_buf(),
            meta: Some((meta.len(), meta.modified().ok(), inode(&meta))),
        });
    }
    Ok(())
}

#[cfg(unix)]
fn inode(meta: &std::fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(meta)
}

#[cfg(not(unix))]
fn inode(_: &std::fs::Metadata) -> u64 {
    0
}

/// Fingerprints the files under `paths`.
pub fn fingerprint(paths: &[PathBuf]) -> Fingerprint {
    let mut files = Vec::new();
    for path in paths {
        if let Err(e) = stamp_files(path, &mut files) {
            return Fingerprint(Err(e));
        }
    }
    Fingerprint(Ok(files))
}

/// Keeps `live` in step with the objects under `paths`, as `kanon serve` does with its
/// policy directory: every `interval` it fingerprints the files and, when they changed and
/// stayed unchanged for one more interval (so a file caught half-written is not loaded),
/// loads them again. Good objects replace the served ones; on an error the last good objects
/// stay, and the error is logged naming the file and document. `loaded` is the fingerprint
/// taken before the objects `live` serves were loaded. Runs until the task is dropped.
pub async fn watch_objects(
    paths: Vec<PathBuf>,
    live: Arc<LiveObjects>,
    interval: Duration,
    loaded: Fingerprint,
) {
    let paths = Arc::new(paths);
    let mut loaded_print = loaded;
    let mut last_print = loaded_print.clone();
    let mut ticks = tokio::time::interval(interval.max(Duration::from_millis(1)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await; // the first tick is immediate
    loop {
        ticks.tick().await;
        let print = {
            let paths = paths.clone();
            match tokio::task::spawn_blocking(move || fingerprint(&paths)).await {
                Ok(print) => print,
                Err(e) => Fingerprint(Err(format!("fingerprint failed: {e}"))),
            }
        };
        let settled = print == last_print;
        last_print = print;
        if !settled || last_print == loaded_print {
            continue;
        }
        let reload = {
            let paths = paths.clone();
            tokio::task::spawn_blocking(move || (fingerprint(&paths), load_objects(&paths))).await
        };
        let (print, loaded) = match reload {
            Ok(done) => done,
            Err(e) => {
                tracing::error!(error = %e, "loading the objects failed; the previous objects stay");
                continue;
            }
        };
        loaded_print = print;
        last_print = loaded_print.clone();
        match loaded {
            Ok(store) => {
                tracing::info!(objects = store.len(), "objects reloaded");
                live.replace(store);
            }
            Err(error) => {
                tracing::error!(%error, "cannot reload the objects; the previous objects stay");
            }
        }
    }
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
