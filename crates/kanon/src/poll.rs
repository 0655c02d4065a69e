//! Watching files by polling: what `kanon serve` does with its policy directory
//! (`--policies`) and with the objects that stand for the cluster (`--objects`). Polling, not
//! inotify: a mounted ConfigMap's files are links into a directory that is swapped whole, and
//! polling sees that the same way on every file system.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::inputs::collect_files;

/// What the document files under some paths look like from outside: each file's path, size,
/// modification time (and, on Unix, inode), or why a path could not be listed. Any change is a
/// reason to load again; a change that leaves the contents as they were costs one load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fingerprint {
    /// Every document file, in the order they are read.
    Files(Vec<FileStamp>),
    /// Why a path could not be listed (or the fingerprint could not be taken).
    Unreadable(String),
}

/// One file of a [`Fingerprint`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStamp {
    path: PathBuf,
    /// `None` when the file vanished between listing and looking.
    meta: Option<(u64, Option<SystemTime>, u64)>,
}

/// Fingerprints the document files under `paths` (`*.yaml`, `*.yml`, `*.json`; directories
/// recursively, in name order, leaving out names that start with `.` when `skip_hidden`): the
/// files the loaders read.
pub fn fingerprint(paths: &[PathBuf], skip_hidden: bool) -> Fingerprint {
    let mut files = Vec::new();
    for path in paths {
        let listed = match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => {
                collect_files(path, skip_hidden, &mut files).map_err(|e| e.to_string())
            }
            Ok(_) => {
                files.push(path.clone());
                Ok(())
            }
            Err(e) => Err(format!("{}: {e}", path.display())),
        };
        if let Err(e) = listed {
            return Fingerprint::Unreadable(e);
        }
    }
    Fingerprint::Files(files.into_iter().map(|path| stamp(&path)).collect())
}

fn stamp(path: &Path) -> FileStamp {
    // Follows symlinks: a ConfigMap's files are links into a directory that is swapped whole.
    let meta = std::fs::metadata(path)
        .ok()
        .map(|m| (m.len(), m.modified().ok(), inode(&m)));
    FileStamp {
        path: path.to_path_buf(),
        meta,
    }
}

#[cfg(unix)]
fn inode(meta: &std::fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(meta)
}

#[cfg(not(unix))]
fn inode(_: &std::fs::Metadata) -> u64 {
    0
}

/// Keeps what was loaded from `paths` in step with the files: every `interval` it
/// fingerprints them and, when they changed and stayed unchanged for one more interval (so a
/// file caught half-written is not loaded), fingerprints and `load`s them again, off the async
/// threads, and hands the result to `apply` (`Err` when loading panicked). `loaded` is the
/// fingerprint taken before what is in force was loaded. Runs until the task is dropped.
pub async fn poll_files<T, L, A>(
    paths: Vec<PathBuf>,
    skip_hidden: bool,
    interval: Duration,
    loaded: Fingerprint,
    load: L,
    mut apply: A,
) where
    T: Send + 'static,
    L: Fn(&[PathBuf]) -> T + Send + Sync + 'static,
    A: FnMut(Result<T, String>),
{
    let paths = std::sync::Arc::new(paths);
    let load = std::sync::Arc::new(load);
    let mut loaded_print = loaded;
    let mut last_print = loaded_print.clone();
    let mut ticks = tokio::time::interval(interval.max(Duration::from_millis(1)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await; // the first tick is immediate
    loop {
        ticks.tick().await;
        let print = {
            let paths = paths.clone();
            tokio::task::spawn_blocking(move || fingerprint(&paths, skip_hidden))
                .await
                .unwrap_or_else(|e| Fingerprint::Unreadable(format!("fingerprint failed: {e}")))
        };
        let settled = print == last_print;
        last_print = print;
        if !settled || last_print == loaded_print {
            continue;
        }
        tracing::debug!("watched files changed; loading them");
        let reload = {
            let (paths, load) = (paths.clone(), load.clone());
            tokio::task::spawn_blocking(move || (fingerprint(&paths, skip_hidden), load(&paths)))
                .await
        };
        let loaded = match reload {
            Ok((print, loaded)) => {
                loaded_print = print;
                Ok(loaded)
            }
            Err(e) => {
                loaded_print = Fingerprint::Unreadable(format!("load failed: {e}"));
                Err(e.to_string())
            }
        };
        last_print = loaded_print.clone();
        apply(loaded);
    }
}
