//! kanon's policy library against upstream's own definitions.
//!
//! `library/pod-security/<level>/` must decide every Pod of Kubernetes' Pod Security fixtures
//! (Go module `k8s.io/pod-security-admission` v0.35.8, `test/testdata/<level>/v1.35/{pass,fail}`,
//! fetched from the Go module proxy at test time, not committed) as Pod Security admission does:
//! each `pass` Pod admitted, each `fail` Pod denied, by `kanon apply` on the level's directory
//! alone. A Pod that passes the restricted level passes baseline too; one that fails baseline
//! fails restricted.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const PSA_MODULE: &str = "k8s.io/pod-security-admission@v0.35.8";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The fixtures of `level` that should `pass` or `fail`.
fn fixtures(level: &str, verdict: &str) -> PathBuf {
    let module = kanon_control_plane::go_module(PSA_MODULE)
        .unwrap_or_else(|e| panic!("fetching Pod Security's fixtures: {e:#}"));
    let dir = module.join(format!("test/testdata/{level}/v1.35/{verdict}"));
    assert!(dir.is_dir(), "{} is not in {PSA_MODULE}", dir.display());
    dir
}

/// `(fixture file name, allowed, messages)` for every Pod in `resources`, judged by `policies`.
fn judged(policies: &Path, resources: &Path) -> Vec<(String, bool, Vec<String>)> {
    let out = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .arg("apply")
        .arg("--policy")
        .arg(policies)
        .arg("--resource")
        .arg(resources)
        .args(["--output", "json"])
        .output()
        .expect("kanon runs");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "kanon apply failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<Value> = serde_json::from_slice(&out.stdout).expect("kanon prints JSON");
    answers
        .iter()
        .map(|answer| {
            let source = answer["source"].as_str().unwrap_or_default();
            let name = Path::new(source)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let messages = answer["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            (name, answer["allowed"] == Value::Bool(true), messages)
        })
        .collect()
}

/// Every fixture of `fixtures` judged `allowed` (or not) by the policies of `level`.
fn each_judged(level: &str, fixtures: &Path, allowed: bool) {
    let policies = repo().join("library/pod-security").join(level);
    let answers = judged(&policies, fixtures);
    let expected = std::fs::read_dir(fixtures)
        .expect("the fixtures")
        .filter(|entry| {
            entry
                .as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "yaml"))
        })
        .count();
    assert_eq!(answers.len(), expected, "one answer per fixture");
    let wrong: Vec<String> = answers
        .iter()
        .filter(|(_, admitted, _)| *admitted != allowed)
        .map(|(name, admitted, messages)| format!("{name}: allowed={admitted} {messages:?}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} fixtures in {} judged wrongly by library/pod-security/{level}:\n{}",
        wrong.len(),
        answers.len(),
        fixtures.display(),
        wrong.join("\n")
    );
}

#[test]
fn baseline_admits_every_pod_pod_security_admits_at_baseline() {
    each_judged("baseline", &fixtures("baseline", "pass"), true);
}

#[test]
fn baseline_denies_every_pod_pod_security_denies_at_baseline() {
    each_judged("baseline", &fixtures("baseline", "fail"), false);
}

#[test]
fn baseline_admits_every_pod_that_passes_restricted() {
    each_judged("baseline", &fixtures("restricted", "pass"), true);
}

#[test]
fn restricted_admits_every_pod_pod_security_admits_at_restricted() {
    each_judged("restricted", &fixtures("restricted", "pass"), true);
}

#[test]
fn restricted_denies_every_pod_pod_security_denies_at_restricted() {
    each_judged("restricted", &fixtures("restricted", "fail"), false);
}

#[test]
fn restricted_denies_every_pod_baseline_denies() {
    each_judged("restricted", &fixtures("baseline", "fail"), false);
}

#[test]
fn a_denial_names_the_check_and_the_container() {
    let answers = judged(
        &repo().join("library/pod-security/baseline"),
        &fixtures("baseline", "fail").join("privileged1.yaml"),
    );
    assert_eq!(
        answers[0].2,
        [
            "ClusterValidatePolicy/pss-baseline-privileged: privileged (container \"initcontainer1\" must not set securityContext.privileged=true)"
        ]
    );
}

#[test]
fn the_library_suites_pass_without_a_warning() {
    let out = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .args(["test", "library"])
        .current_dir(repo())
        .output()
        .expect("kanon runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(summary.ends_with(" passed, 0 failed"), "{summary}");
    // Every suite ran.
    for suite in [
        "pod-security-baseline",
        "pod-security-restricted",
        "best-practices",
    ] {
        assert!(stdout.contains(&format!("PASS {suite}: ")), "{stdout}");
    }
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
}
