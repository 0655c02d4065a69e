//! Repository tasks: `cargo xtask crds` regenerates the committed CRD manifests;
//! `cargo xtask schema` regenerates the built-in kinds' schema that `kanon-schema` embeds;
//! `cargo xtask library` copies the policy library into the Helm chart;
//! `cargo xtask cluster ...` builds and runs the local Kubernetes control plane that kanon's
//! end-to-end tests use (see the `kanon-control-plane` crate).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kanon_control_plane::{ControlPlane, Options, Toolchain};

/// Folders that hold a copy of every CRD of kanon's own kinds, relative to the repository root.
const CRD_DIRS: [&str; 2] = ["crds", "charts/kanon/crds"];

/// The subfolder of each [`CRD_DIRS`] folder that holds the OpenReports CRDs
/// (`kanon_api::report_crds`): apart, because they are not kanon's (a cluster may have them from
/// another producer already). Helm installs every file under a chart's `crds/`, subfolders
/// included, and skips the CRDs that exist already.
const REPORT_CRD_SUBDIR: &str = "openreports";

/// The folders of `library/` that the Helm chart installs from, relative to `library/`; copied
/// to the same paths under `charts/kanon/library/` (Helm reads no file outside the chart).
const LIBRARY_DIRS: [&str; 3] = [
    "pod-security/baseline",
    "pod-security/restricted",
    "best-practices",
];

/// Where the chart keeps its copy of the library, relative to the repository root.
const CHART_LIBRARY: &str = "charts/kanon/library";

const USAGE: &str = "\
usage: cargo xtask <task>

tasks:
  crds                        regenerate the CRD manifests in crds/ and charts/kanon/crds/
                              (the OpenReports ones in their openreports/ subfolders)
  library                     copy library/pod-security/{baseline,restricted}/ and
                              library/best-practices/ into charts/kanon/library/ (links
                              followed), removing stale copies
  schema                      regenerate crates/kanon-schema/data/ (Kubernetes' built-in kinds
                              and types) from a temporary control plane's /openapi/v3
  go-types                    regenerate crates/kanon-schema/data/go-types-v1.35.json (the Go
                              names, omitempty and embedded structs of the built-in kinds)
                              with Go, from the pinned k8s.io/api module
  cluster build               build (first time: 5-15 min) or find the control-plane binaries
                              and Jaeger (the traces scenario's trace backend)
  cluster up [--dir DIR] [--no-controller-manager]
                              start etcd, kube-apiserver and kube-controller-manager on
                              127.0.0.1 in the background; prints `export KUBECONFIG=...`
  cluster down [--dir DIR]    stop the control plane that `cluster up` started in DIR
  cluster env [--dir DIR]     print shell exports of the tool paths (KANON_KUBECTL, ...,
                              PATH) and, if one runs in DIR, KUBECONFIG:
                              eval \"$(cargo xtask cluster env)\"

DIR defaults to target/kanon-cluster in the repository.";

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` prints the whole chain of causes on one line, without a backtrace.
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["crds"] => write_crds(),
        ["library"] => write_library(),
        ["schema"] => write_schema(),
        ["go-types"] => write_go_types(),
        ["cluster", "build"] => cluster_build(),
        ["cluster", "up", rest @ ..] => {
            let (dir, controller_manager) = cluster_options(rest, true)?;
            cluster_up(dir, controller_manager)
        }
        ["cluster", "down", rest @ ..] => cluster_down(&cluster_options(rest, false)?.0),
        ["cluster", "env", rest @ ..] => cluster_env(&cluster_options(rest, false)?.0),
        ["help" | "--help" | "-h"] => {
            println!("{USAGE}");
            Ok(())
        }
        [] => bail!("no task given\n\n{USAGE}"),
        _ => bail!("unknown task or arguments `{}`\n\n{USAGE}", args.join(" ")),
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Writes kanon's CRDs to every CRD folder and the OpenReports CRDs to its
/// [`REPORT_CRD_SUBDIR`], and removes stale `*.yaml` files from each of these folders.
fn write_crds() -> Result<()> {
    let root = repo_root();
    let crds = kanon_api::crds();
    let report_crds = kanon_api::report_crds();
    for dir in CRD_DIRS {
        let dir = root.join(dir);
        write_crd_dir(&dir, &crds)?;
        write_crd_dir(&dir.join(REPORT_CRD_SUBDIR), &report_crds)?;
    }
    Ok(())
}

/// Writes `crds` into `dir` (created if missing) and removes the `*.yaml` files there that are
/// not among them; subfolders are left alone.
fn write_crd_dir(dir: &Path, crds: &[CustomResourceDefinition]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut wanted = Vec::new();
    for crd in crds {
        let name = kanon_api::crd_file_name(crd);
        let yaml = kanon_api::crds_yaml(crd).context("serializing a CRD")?;
        let path = dir.join(&name);
        std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
        wanted.push(name);
    }
    remove_stale(dir, &wanted)
}

/// Removes the `*.yaml` files of `dir` that are not `wanted` (what a generator no longer
/// writes).
fn remove_stale(dir: &Path, wanted: &[String]) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.ends_with(".yaml") && !wanted.iter().any(|w| w == name) {
            std::fs::remove_file(&path)
                .with_context(|| format!("removing stale {}", path.display()))?;
            println!("removed stale {}", path.display());
        }
    }
    Ok(())
}

/// Copies every `*.yaml` of each [`LIBRARY_DIRS`] folder into the chart, as its content (a
/// link, like restricted's links to baseline's checks, becomes a file), and removes `*.yaml`
/// files there that the library no longer has.
fn write_library() -> Result<()> {
    let root = repo_root();
    for dir in LIBRARY_DIRS {
        let source = root.join("library").join(dir);
        let target = root.join(CHART_LIBRARY).join(dir);
        std::fs::create_dir_all(&target)
            .with_context(|| format!("creating {}", target.display()))?;
        let mut wanted = Vec::new();
        for entry in
            std::fs::read_dir(&source).with_context(|| format!("reading {}", source.display()))?
        {
            let path = entry?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if !name.ends_with(".yaml") {
                continue;
            }
            // `read` follows links.
            let content =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            let copy = target.join(name);
            // A link in the chart's copy would be packaged as a link: replaced by the file.
            let link = std::fs::symlink_metadata(&copy).is_ok_and(|m| m.file_type().is_symlink());
            if link || std::fs::read(&copy).ok().as_ref() != Some(&content) {
                let _ = std::fs::remove_file(&copy);
                std::fs::write(&copy, &content)
                    .with_context(|| format!("writing {}", copy.display()))?;
                println!("wrote {}", copy.display());
            }
            wanted.push(name.to_string());
        }
        remove_stale(&target, &wanted)?;
        println!("{}: {} files", target.display(), wanted.len());
    }
    Ok(())
}

/// Starts a temporary control plane (no controller manager: nothing here needs one), converts
/// its `/openapi/v3` and discovery documents with `kanon_schema::generate`, writes the data file
/// and stops the control plane.
fn write_schema() -> Result<()> {
    let toolchain = Toolchain::ensure(&mut std::io::stderr())?;
    let started = Instant::now();
    let control_plane = ControlPlane::start(
        &toolchain,
        Options {
            state_dir: None,
            controller_manager: false,
            detached: false,
            tracing_endpoint: None,
        },
    )?;
    eprintln!(
        "control plane up in {:.1?}: {}",
        started.elapsed(),
        control_plane.server()
    );
    let generated =
        kanon_schema::generate::generate(&mut |path| kubectl_get_raw(&control_plane, path));
    // Stopped before the result is looked at, so a failed conversion leaves nothing running.
    control_plane.stop()?;
    let schema = generated.context("reading the control plane's schema")?;
    let text = schema.to_json().context("writing the schema as JSON")?;
    // The file must read back as what was generated, or the staleness check could never pass.
    let reread = kanon_schema::Schema::from_json(&text).context("reading the written schema")?;
    if let Some(difference) = reread.first_difference(&schema) {
        bail!("the written schema reads back differently: {difference}");
    }
    let path = repo_root().join(kanon_schema::BUILTIN_PATH);
    std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    println!(
        "wrote {} ({} kinds, {} types, {} bytes) from kube-apiserver {} in {:.1?}",
        path.display(),
        schema.kinds().len(),
        schema.types().len(),
        text.len(),
        schema.kubernetes_version(),
        started.elapsed()
    );
    Ok(())
}

/// Runs the generator in crates/kanon-schema/go-types (Go on PATH or in /usr/local/go/bin) and
/// writes what it prints, once it reads back, as the embedded Go facts.
fn write_go_types() -> Result<()> {
    let root = repo_root();
    let go = ["/usr/local/go/bin/go"]
        .into_iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
        .unwrap_or_else(|| PathBuf::from("go"));
    let output = std::process::Command::new(&go)
        .current_dir(root.join("crates/kanon-schema/go-types"))
        .args(["run", "-mod=readonly", "-buildvcs=false", "."])
        .env("GOTOOLCHAIN", "local")
        .env("GOWORK", "off")
        .env("CGO_ENABLED", "0")
        .env("GOFLAGS", "")
        .output()
        .with_context(|| format!("running {} (Go 1.25 or newer is needed)", go.display()))?;
    if !output.status.success() {
        bail!(
            "the Go facts generator failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text = String::from_utf8(output.stdout).context("the generator wrote non-UTF-8")?;
    let facts = kanon_schema::GoTypes::from_json(&text).context("reading the generated facts")?;
    let path = root.join(kanon_schema::GO_TYPES_PATH);
    std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {} ({} structs)", path.display(), facts.len());
    Ok(())
}

/// `kubectl get --raw PATH` against `control_plane`: the response body, or kubectl's error.
fn kubectl_get_raw(control_plane: &ControlPlane, path: &str) -> Result<String, String> {
    let output = control_plane
        .kubectl()
        .args(["get", "--raw", path])
        .output()
        .map_err(|e| format!("running kubectl: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "kubectl get --raw {path}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    String::from_utf8(output.stdout).map_err(|e| format!("the answer is not UTF-8: {e}"))
}

/// Parses `[--dir DIR]` (and, for `up`, `[--no-controller-manager]`).
fn cluster_options(args: &[&str], up: bool) -> Result<(PathBuf, bool)> {
    let mut dir = None;
    let mut controller_manager = true;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match *arg {
            "--dir" => match args.next() {
                Some(value) => dir = Some(PathBuf::from(value)),
                None => bail!("--dir needs a directory\n\n{USAGE}"),
            },
            value if value.starts_with("--dir=") => {
                dir = Some(PathBuf::from(&value["--dir=".len()..]));
            }
            "--no-controller-manager" if up => controller_manager = false,
            other => bail!("unknown argument `{other}`\n\n{USAGE}"),
        }
    }
    let dir = dir.unwrap_or_else(|| repo_root().join("target").join("kanon-cluster"));
    Ok((dir, controller_manager))
}

/// Single-quotes `text` for a POSIX shell.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn cluster_build() -> Result<()> {
    let started = Instant::now();
    let toolchain = Toolchain::ensure(&mut std::io::stderr())?;
    println!(
        "kube-apiserver          {}",
        toolchain.kube_apiserver.display()
    );
    println!(
        "kube-controller-manager {}",
        toolchain.kube_controller_manager.display()
    );
    println!("etcd                    {}", toolchain.etcd.display());
    println!("kubectl                 {}", toolchain.kubectl.display());
    println!("helm                    {}", toolchain.helm.display());
    // The trace backend of the end-to-end traces scenario, built here too so that the suite
    // finds everything it needs.
    let jaeger = kanon_control_plane::ensure_jaeger(&mut std::io::stderr())?;
    println!("jaeger                  {}", jaeger.display());
    println!("ready in {:.1?}", started.elapsed());
    Ok(())
}

/// Starts a detached control plane and exits, leaving it running.
fn cluster_up(dir: PathBuf, controller_manager: bool) -> Result<()> {
    let toolchain = Toolchain::ensure(&mut std::io::stderr())?;
    let started = Instant::now();
    let control_plane = ControlPlane::start(
        &toolchain,
        Options {
            state_dir: Some(dir),
            controller_manager,
            detached: true,
            tracing_endpoint: None,
        },
    )?;
    let server = control_plane.server();
    let kubeconfig = control_plane.kubeconfig();
    let pids = control_plane.pids();
    let dir = control_plane.detach();
    // Status on standard error, the export on standard output: `eval "$(cargo xtask cluster
    // up)"` sets KUBECONFIG.
    eprintln!(
        "control plane up in {:.1?}: {server} (state and logs in {})",
        started.elapsed(),
        dir.display()
    );
    for (name, pid) in pids {
        eprintln!("  {name} pid {pid}");
    }
    eprintln!(
        "kubectl: {} (the one on PATH may be another program; see `cargo xtask cluster env`)",
        toolchain.kubectl.display()
    );
    eprintln!(
        "stop it with: cargo xtask cluster down --dir {}",
        shell_quote(&dir.display().to_string())
    );
    println!(
        "export KUBECONFIG={}",
        shell_quote(&kubeconfig.display().to_string())
    );
    Ok(())
}

fn cluster_down(dir: &Path) -> Result<()> {
    let started = Instant::now();
    let stopped = ControlPlane::stop_in(dir)?;
    if stopped.is_empty() {
        println!("no control plane was running in {}", dir.display());
    } else {
        println!(
            "stopped {} in {:.1?}",
            stopped.join(", "),
            started.elapsed()
        );
    }
    Ok(())
}

fn cluster_env(dir: &Path) -> Result<()> {
    let toolchain = Toolchain::find()?;
    for (name, path) in [
        ("KANON_KUBE_APISERVER", &toolchain.kube_apiserver),
        (
            "KANON_KUBE_CONTROLLER_MANAGER",
            &toolchain.kube_controller_manager,
        ),
        ("KANON_ETCD", &toolchain.etcd),
        ("KANON_KUBECTL", &toolchain.kubectl),
        ("KANON_HELM", &toolchain.helm),
    ] {
        println!("export {name}={}", shell_quote(&path.display().to_string()));
    }
    let dirs: Vec<String> = toolchain
        .bin_dirs()
        .iter()
        .map(|d| d.display().to_string())
        .collect();
    // First on PATH, so `kubectl` is this one and not another on the machine.
    println!("export PATH={}:\"$PATH\"", shell_quote(&dirs.join(":")));
    if !ControlPlane::running_in(dir)?.is_empty() {
        let kubeconfig = dir.join("kubeconfig");
        println!(
            "export KUBECONFIG={}",
            shell_quote(&kubeconfig.display().to_string())
        );
    }
    Ok(())
}
