//! The harness against the real binaries: these tests build them on first use (5–10 min on two
//! cores, once per machine; see `Toolchain::ensure`) and then take well under a minute.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kanon_control_plane::{ControlPlane, KUBERNETES_VERSION, Options, Toolchain};

/// One `ensure` per test binary; the build itself is also guarded by a file lock.
fn toolchain() -> &'static Toolchain {
    static TOOLCHAIN: OnceLock<Toolchain> = OnceLock::new();
    TOOLCHAIN.get_or_init(|| {
        let started = Instant::now();
        let toolchain = Toolchain::ensure(&mut std::io::stderr())
            .unwrap_or_else(|e| panic!("building the control-plane binaries: {e:#}"));
        eprintln!("toolchain ready in {:.1?}", started.elapsed());
        toolchain
    })
}

fn start(options: Options) -> ControlPlane {
    let toolchain = toolchain();
    let started = Instant::now();
    let control_plane = ControlPlane::start(toolchain, options)
        .unwrap_or_else(|e| panic!("starting a control plane: {e:#}"));
    eprintln!(
        "control plane {} started in {:.1?}",
        control_plane.server(),
        started.elapsed()
    );
    control_plane
}

/// Runs `cmd`, fails the test with its output unless it succeeds, returns its standard output.
fn run(mut cmd: Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kubectl(control_plane: &ControlPlane, args: &[&str]) -> String {
    let mut cmd = control_plane.kubectl();
    cmd.args(args);
    run(cmd)
}

/// Polls `check` every 200 ms until it returns true or `timeout` passes.
fn eventually(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Whether `pid` is a live process (a zombie, waiting for its exit status to be collected,
/// counts as gone).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn assert_all_gone(pids: &[(&str, u32)]) {
    for (name, pid) in pids {
        assert!(!alive(*pid), "{name} (pid {pid}) is still running");
    }
}

#[test]
fn a_control_plane_serves_runs_controllers_and_survives_an_apiserver_restart() {
    let mut control_plane = start(Options::default());
    assert_eq!(Toolchain::find().ok().as_ref(), Some(toolchain()));
    let pids = control_plane.pids();
    assert_eq!(pids.len(), 3, "{pids:?}");
    assert!(control_plane.kubeconfig().is_file());
    assert!(
        control_plane
            .ca_pem()
            .starts_with("-----BEGIN CERTIFICATE-----")
    );
    // The files webhooks need to require kube-apiserver's client certificate, the key private.
    assert_eq!(
        std::fs::read_to_string(control_plane.ca_cert_file()).expect("the CA file"),
        control_plane.ca_pem()
    );
    let webhook_cert = std::fs::read_to_string(control_plane.webhook_client_cert_file())
        .expect("the webhook client certificate");
    assert!(webhook_cert.starts_with("-----BEGIN CERTIFICATE-----"));
    let key =
        std::fs::metadata(control_plane.webhook_client_key_file()).expect("the webhook client key");
    assert_eq!(key.permissions().mode() & 0o777, 0o600);

    let namespaces = kubectl(&control_plane, &["get", "namespaces", "--output=name"]);
    assert!(namespaces.contains("namespace/default"), "{namespaces}");
    assert!(namespaces.contains("namespace/kube-system"), "{namespaces}");

    // The version is stamped at build time; helm's kubeVersion checks depend on it.
    let version = kubectl(&control_plane, &["version", "--output=json"]);
    let version: serde_json::Value = serde_json::from_str(&version).unwrap();
    assert_eq!(
        version.pointer("/serverVersion/gitVersion"),
        Some(&serde_json::json!(KUBERNETES_VERSION)),
        "{version}"
    );

    // The controller manager turns a Deployment into a ReplicaSet and Pods (which nothing
    // runs: there is no kubelet).
    kubectl(
        &control_plane,
        &[
            "create",
            "deployment",
            "web",
            "--image=registry.invalid/web:1",
            "--replicas=2",
        ],
    );
    eventually(
        "the Deployment's ReplicaSet and 2 Pods",
        Duration::from_secs(30),
        || {
            let replica_sets = kubectl(
                &control_plane,
                &["get", "replicasets", "-l", "app=web", "-o", "name"],
            );
            let pods = kubectl(
                &control_plane,
                &["get", "pods", "-l", "app=web", "-o", "name"],
            );
            replica_sets.lines().count() == 1 && pods.lines().count() == 2
        },
    );

    // A service-account token, signed with the ECDSA key, is accepted by the apiserver.
    let token = kubectl(&control_plane, &["create", "token", "default"]);
    let empty_kubeconfig = control_plane.state_dir().join("empty-kubeconfig");
    std::fs::write(&empty_kubeconfig, "apiVersion: v1\nkind: Config\n").unwrap();
    let mut whoami = Command::new(&toolchain().kubectl);
    whoami.args([
        format!("--kubeconfig={}", empty_kubeconfig.display()),
        format!("--server={}", control_plane.server()),
        format!(
            "--certificate-authority={}",
            control_plane.state_dir().join("pki/ca.crt").display()
        ),
        format!("--token={}", token.trim()),
        "auth".to_owned(),
        "whoami".to_owned(),
        "--output=jsonpath={.status.userInfo.username}".to_owned(),
    ]);
    assert_eq!(run(whoami), "system:serviceaccount:default:default");

    let restart = Instant::now();
    control_plane.stop_apiserver().unwrap();
    let stopped = restart.elapsed();
    control_plane.start_apiserver().unwrap();
    eprintln!(
        "apiserver restarted in {:.1?} (stopped after {stopped:.1?})",
        restart.elapsed()
    );
    let deployments = kubectl(&control_plane, &["get", "deployments", "--output=name"]);
    assert_eq!(deployments.trim(), "deployment.apps/web");
    let pids = control_plane.pids();
    assert_eq!(pids.len(), 3, "{pids:?}");

    let state_dir = control_plane.state_dir().to_path_buf();
    let stop = Instant::now();
    control_plane.stop().unwrap();
    eprintln!("control plane stopped in {:.1?}", stop.elapsed());
    assert_all_gone(&pids);
    if std::env::var_os(kanon_control_plane::KEEP_STATE_ENV).is_none() {
        assert!(!state_dir.exists(), "the temporary state directory is left");
    }
}

#[test]
fn two_control_planes_run_at_once() {
    let first = start(Options::default());
    // The second without a controller manager: Pods are still admitted (the ServiceAccount
    // admission plugin is off, as no `default` ServiceAccount would ever appear).
    let second = start(Options {
        controller_manager: false,
        ..Options::default()
    });
    assert_ne!(first.server(), second.server());
    assert_eq!(second.pids().len(), 2);

    kubectl(&first, &["create", "namespace", "only-in-first"]);
    let first_namespaces = kubectl(&first, &["get", "namespaces", "-o", "name"]);
    let second_namespaces = kubectl(&second, &["get", "namespaces", "-o", "name"]);
    assert!(first_namespaces.contains("namespace/only-in-first"));
    assert!(!second_namespaces.contains("namespace/only-in-first"));
    assert!(second_namespaces.contains("namespace/kube-system"));
    kubectl(
        &second,
        &[
            "run",
            "lonely",
            "--image=registry.invalid/lonely:1",
            "--restart=Never",
        ],
    );

    // helm finds the cluster through the preset KUBECONFIG.
    let mut helm = second.helm();
    helm.args(["list", "--all-namespaces", "--output=json"]);
    assert_eq!(run(helm).trim(), "[]");

    let pids: Vec<_> = first.pids().into_iter().chain(second.pids()).collect();
    let dirs = [
        first.state_dir().to_path_buf(),
        second.state_dir().to_path_buf(),
    ];
    let stop = Instant::now();
    drop(first);
    drop(second);
    eprintln!("two control planes dropped in {:.1?}", stop.elapsed());
    assert_all_gone(&pids);
    if std::env::var_os(kanon_control_plane::KEEP_STATE_ENV).is_none() {
        for dir in dirs {
            assert!(!dir.exists(), "{} is left", dir.display());
        }
    }
}

#[test]
fn a_detached_control_plane_is_stopped_through_its_pids_file() {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("cluster");
    let control_plane = start(Options {
        state_dir: Some(state_dir.clone()),
        controller_manager: false,
        detached: true,
        tracing_endpoint: None,
    });
    let pids = control_plane.pids();
    let handed_off = control_plane.detach();
    assert_eq!(handed_off, state_dir);

    // Still running after the value is gone, and recorded.
    let running = ControlPlane::running_in(&state_dir).unwrap();
    assert_eq!(running.len(), 2, "{running:?}");
    let mut cmd = Command::new(&toolchain().kubectl);
    cmd.arg(format!(
        "--kubeconfig={}",
        state_dir.join("kubeconfig").display()
    ))
    .args(["get", "namespace", "default", "-o", "name"]);
    assert_eq!(run(cmd).trim(), "namespace/default");

    // A second start in the same directory would fight over its files.
    let error = ControlPlane::start(
        toolchain(),
        Options {
            state_dir: Some(state_dir.clone()),
            ..Options::default()
        },
    )
    .unwrap_err();
    assert!(format!("{error:#}").contains("still running"), "{error:#}");

    let stopped = ControlPlane::stop_in(&state_dir).unwrap();
    assert_eq!(stopped.len(), 2, "{stopped:?}");
    assert_all_gone(&pids);
    assert!(ControlPlane::running_in(&state_dir).unwrap().is_empty());
    assert!(!Path::new(&state_dir.join("pids")).exists());
    assert!(ControlPlane::stop_in(&state_dir).unwrap().is_empty());
}
