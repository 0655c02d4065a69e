//! The oracle binary: tests/oracle/main.go built with `go` once per version of its sources and
//! cached outside the repository, under `<cache>/cel-oracle/<hash>/cel-oracle` where `<cache>` is
//! kanon's cache root (as kanon-control-plane chooses it: `$KANON_CACHE_DIR`, else
//! `${XDG_CACHE_HOME:-$HOME/.cache}/kanon`) and `<hash>` covers main.go, go.mod and go.sum.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The Go sources of the oracle, relative to the crate.
const SOURCES: [&str; 3] = ["main.go", "go.mod", "go.sum"];

pub fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle")
}

/// The cached binary, built first if missing. Panics with a message saying what to do when it
/// cannot be built (no `go`, a failed build). The tests of one process build it once: they run
/// on threads of one process, whose builds would share a temporary name.
pub fn oracle_binary() -> PathBuf {
    static BINARY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BINARY.get_or_init(build).clone()
}

fn build() -> PathBuf {
    let sources = source_dir();
    let mut hash = Fnv::new();
    for name in SOURCES {
        let path = sources.join(name);
        let bytes =
            fs::read(&path).unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
        hash.write(name.as_bytes());
        hash.write(&(bytes.len() as u64).to_le_bytes());
        hash.write(&bytes);
    }
    let dir = cache_dir()
        .join("cel-oracle")
        .join(format!("{:016x}", hash.0));
    let binary = dir.join("cel-oracle");
    if binary.is_file() {
        return binary;
    }
    fs::create_dir_all(&dir).unwrap_or_else(|error| panic!("creating {}: {error}", dir.display()));
    let go = go_binary();
    // Built under a temporary name and renamed when complete, so a binary in place is whole
    // even when two test runs build at once.
    let partial = dir.join(format!("cel-oracle.partial-{}", std::process::id()));
    eprintln!(
        "building the CEL oracle (kube-apiserver's CEL environment) into {} …",
        binary.display()
    );
    let output = Command::new(&go)
        .current_dir(&sources)
        .args([
            "build",
            "-mod=readonly",
            "-buildvcs=false",
            "-trimpath",
            "-o",
        ])
        .arg(&partial)
        .arg(".")
        // Never another Go, no workspace above us, static binary, no flags from the caller's
        // environment changing the build.
        .env("GOTOOLCHAIN", "local")
        .env("GOWORK", "off")
        .env("CGO_ENABLED", "0")
        .env("GOFLAGS", "")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "cannot run `{}`: the CEL oracle test needs Go 1.25 or newer \
                 (https://go.dev/dl/) on PATH or in /usr/local/go/bin ({error})",
                go.display()
            )
        });
    if !output.status.success() {
        let _ = fs::remove_file(&partial);
        panic!(
            "`go build` of the CEL oracle in {} failed ({}):\n{}",
            sources.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    fs::rename(&partial, &binary).unwrap_or_else(|error| {
        // Another test run built it at the same time: its binary is as good.
        if binary.is_file() {
            let _ = fs::remove_file(&partial);
            return;
        }
        panic!(
            "renaming {} to {}: {error}",
            partial.display(),
            binary.display()
        )
    });
    binary
}

/// kanon's cache root, chosen as kanon-control-plane's `cache_dir` chooses it.
fn cache_dir() -> PathBuf {
    fn non_empty(name: &str) -> Option<PathBuf> {
        std::env::var_os(name)
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
    }
    if let Some(dir) = non_empty("KANON_CACHE_DIR") {
        return dir;
    }
    if let Some(dir) = non_empty("XDG_CACHE_HOME") {
        return dir.join("kanon");
    }
    match non_empty("HOME") {
        Some(home) => home.join(".cache").join("kanon"),
        None => panic!(
            "cannot choose a cache directory for the CEL oracle: none of KANON_CACHE_DIR, \
             XDG_CACHE_HOME, HOME is set"
        ),
    }
}

/// `go` on PATH, else the standard install location.
fn go_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let go = dir.join("go");
            if go.is_file() {
                return go;
            }
        }
    }
    PathBuf::from("/usr/local/go/bin/go")
}

/// FNV-1a, 64 bits: a hash whose value never changes between Rust releases (unlike std's
/// `DefaultHasher`), so the cache key is stable.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}
