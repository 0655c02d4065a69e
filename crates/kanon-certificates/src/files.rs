//! The certificate files the webhook server reads, written so that a reader never sees half a
//! file: each through a temporary file in the same directory, synced, then renamed into place.

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A file that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {source}", path.display())]
pub struct WriteError {
    /// The file (or the directory, when it could not be created).
    pub path: PathBuf,
    /// Why.
    pub source: io::Error,
}

/// One file to write into the certificate directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFile {
    /// Its name in the directory.
    pub name: &'static str,
    /// What it holds.
    pub content: Vec<u8>,
    /// Whether it holds a key: readable and writable by the owner only.
    pub private: bool,
}

/// Writes each of `files` into `dir` (created if needed) whose content differs from what the
/// file holds, in order, each atomically; returns the names written. Order matters to a
/// reader polling the directory: write a key before its certificate, a CA before what it
/// signed.
pub fn write_changed(dir: &Path, files: &[CertFile]) -> Result<Vec<&'static str>, WriteError> {
    fs::create_dir_all(dir).map_err(|source| WriteError {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut written = Vec::new();
    for file in files {
        let path = dir.join(file.name);
        if fs::read(&path).is_ok_and(|current| current == file.content) {
            continue;
        }
        write_atomically(&path, &file.content, file.private)
            .map_err(|source| WriteError { path, source })?;
        written.push(file.name);
    }
    Ok(written)
}

/// Writes `content` to a temporary file next to `path` and renames it into place; `private`
/// files are readable and writable by the owner only.
fn write_atomically(path: &Path, content: &[u8], private: bool) -> io::Result<()> {
    // Unique per write, so that two writers in one process never share a temporary file.
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = path.with_file_name(format!(
        ".{file_name}.{}.{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(if private { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = private;
    let result = options
        .open(&temporary)
        .and_then(|mut file| {
            file.write_all(content)?;
            file.sync_all()
        })
        .and_then(|()| fs::rename(&temporary, path));
    if result.is_err() {
        let _ = fs::remove_file(&temporary);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &'static str, content: &[u8], private: bool) -> CertFile {
        CertFile {
            name,
            content: content.to_vec(),
            private,
        }
    }

    #[test]
    fn files_are_written_only_when_they_change() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path().join("certs");
        let files = [file("a", b"1", false), file("k", b"2", true)];
        assert_eq!(write_changed(&dir, &files).unwrap(), ["a", "k"]);
        assert_eq!(write_changed(&dir, &files).unwrap(), Vec::<&str>::new());
        let files = [file("a", b"1", false), file("k", b"3", true)];
        assert_eq!(write_changed(&dir, &files).unwrap(), ["k"]);
        assert_eq!(fs::read(dir.join("k")).unwrap(), b"3");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = fs::metadata(dir.join("k")).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{mode:o}");
        }
        let leftovers: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn an_unwritable_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("a-file");
        fs::write(&blocker, "x").unwrap();
        let error = write_changed(&blocker.join("certs"), &[file("a", b"1", false)]).unwrap_err();
        assert!(error.to_string().contains("a-file"), "{error}");
    }
}
