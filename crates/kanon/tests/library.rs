//! kanon's policy library against upstream's own definitions.
//!
//! `library/pod-security/<level>/` must decide every Pod of Kubernetes' Pod Security fixtures
//! (Go module `k8s.io/pod-security-admission` v0.35.8, `test/testdata/<level>/v1.35/{pass,fail}`,
//! fetched from the Go module proxy at test time, not committed) as Pod Security admission does:
//! each `pass` Pod admitted, each `fail` Pod denied, by `kanon apply` on the level's directory
//! alone. A Pod that passes the restricted level passes baseline too; one that fails baseline
//! fails restricted.
//!
//! Every library policy names its severity and category (`policy.kanon.dev/severity`, one of
//! the words OpenReports knows, and `policy.kanon.dev/category`), and they reach its findings.

use std::path::{Path, PathBuf};
use std::process::Command;

use kanon_engine::{Evaluation, Finding, NoObjects, PolicySet, block_on};
use serde_json::{Value, json};

const PSA_MODULE: &str = "k8s.io/pod-security-admission@v0.35.8";

/// The library's folders of policies, relative to `library/`.
const POLICY_DIRS: [&str; 3] = [
    "pod-security/baseline",
    "pod-security/restricted",
    "best-practices",
];

const SEVERITY: &str = "policy.kanon.dev/severity";
const CATEGORY: &str = "policy.kanon.dev/category";

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

/// The policies of `library/<dir>`: each file's path (`library/<dir>/<name>`, links followed)
/// with its documents, by name.
fn policies_of(dir: &str) -> Vec<(String, Vec<Value>)> {
    let mut files: Vec<(String, Vec<Value>)> = std::fs::read_dir(repo().join("library").join(dir))
        .unwrap_or_else(|e| panic!("reading library/{dir}: {e}"))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|x| x == "yaml"))
        .map(|path| {
            let source = format!(
                "library/{dir}/{}",
                path.file_name().unwrap_or_default().to_string_lossy()
            );
            let text =
                std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {source}: {e}"));
            let documents = kanon_engine::parse_documents(&text, &source, false)
                .unwrap_or_else(|e| panic!("{source} does not parse: {e}"));
            (source, documents)
        })
        .collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files
}

/// The value of `annotation` on `policy`, if it is a string.
fn annotation<'a>(policy: &'a Value, annotation: &str) -> Option<&'a str> {
    policy["metadata"]["annotations"][annotation].as_str()
}

#[test]
fn every_library_policy_names_a_severity_reports_accept_and_a_category() {
    let severities: Vec<&str> = kanon_api::Severity::ALL.map(|s| s.as_str()).to_vec();
    let mut problems = Vec::new();
    let mut policies = 0;
    for dir in POLICY_DIRS {
        for (source, documents) in policies_of(dir) {
            assert!(!documents.is_empty(), "{source} holds no policy");
            for policy in documents {
                policies += 1;
                let name = policy["metadata"]["name"].as_str().unwrap_or_default();
                match annotation(&policy, SEVERITY) {
                    None => problems.push(format!("{source} ({name}): no {SEVERITY} annotation")),
                    Some(severity) if !severities.contains(&severity) => problems.push(format!(
                        "{source} ({name}): {SEVERITY} `{severity}` is not one of {}",
                        severities.join(", ")
                    )),
                    Some(_) => {}
                }
                let category = annotation(&policy, CATEGORY).unwrap_or_default();
                if category.trim().is_empty() {
                    problems.push(format!("{source} ({name}): no {CATEGORY} annotation"));
                    continue;
                }
                // A Pod Security check in the Standards' terms, by the level it checks (the
                // restricted folder links baseline's own checks, which stay baseline's).
                if dir.starts_with("pod-security/") {
                    let expected = if name.starts_with("pss-baseline-") {
                        "Pod Security Standards (Baseline)"
                    } else if name.starts_with("pss-restricted-") {
                        "Pod Security Standards (Restricted)"
                    } else {
                        problems.push(format!("{source}: {name} names no Pod Security level"));
                        continue;
                    };
                    if category != expected {
                        problems.push(format!(
                            "{source} ({name}): {CATEGORY} `{category}`, not `{expected}`"
                        ));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(policies > 40, "only {policies} policies in the library");
}

/// A Pod that breaks several Pod Security checks: privileged, on a host port, with a hostPath
/// volume, running as root.
fn insecure_pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "root", "namespace": "apps"},
           "spec": {
               "containers": [{"name": "app", "image": "registry.example/app:latest",
                               "ports": [{"containerPort": 80, "hostPort": 80}],
                               "securityContext": {"privileged": true},
                               "volumeMounts": [{"name": "host", "mountPath": "/host"}]}],
               "volumes": [{"name": "host", "hostPath": {"path": "/var/run/docker.sock"}}]}})
}

/// What the background audit finds of `object` with the policies of `library/<dir>`, and
/// the severity and category each policy's file gives, by the policy's `Kind/name`.
fn audited(dir: &str, object: &Value) -> (Vec<Finding>, Vec<(String, Value)>) {
    let documents: Vec<Value> = policies_of(dir).into_iter().flat_map(|(_, d)| d).collect();
    let compiled = documents
        .iter()
        .map(|document| {
            kanon_engine::compile_document(document)
                .unwrap_or_else(|e| panic!("library/{dir}: {e}"))
        })
        .collect();
    let set = PolicySet::build(compiled).expect("no duplicate policies");
    let evaluation = Evaluation::new(&NoObjects);
    let findings =
        block_on(set.audit_in(object.clone(), &evaluation)).expect("the object is identified");
    let annotations = documents
        .iter()
        .map(|policy| {
            let id = format!(
                "{}/{}",
                policy["kind"].as_str().unwrap_or_default(),
                policy["metadata"]["name"].as_str().unwrap_or_default()
            );
            let given = json!([annotation(policy, SEVERITY), annotation(policy, CATEGORY)]);
            (id, given)
        })
        .collect();
    (findings, annotations)
}

#[test]
fn the_library_policies_severity_and_category_reach_their_audit_findings() {
    for dir in POLICY_DIRS {
        let (findings, annotations) = audited(dir, &insecure_pod());
        assert!(
            !findings.is_empty(),
            "library/{dir} finds nothing of the Pod"
        );
        for finding in &findings {
            let given = annotations
                .iter()
                .find(|(id, _)| **id == *finding.policy)
                .map(|(_, given)| given)
                .unwrap_or_else(|| panic!("{}: not a policy of library/{dir}", finding.policy));
            assert_eq!(
                &json!([finding.severity.as_deref(), finding.category.as_deref()]),
                given,
                "library/{dir}: {finding:?}"
            );
        }
    }

    let (baseline, _) = audited("pod-security/baseline", &insecure_pod());
    let privileged = baseline
        .iter()
        .find(|f| &*f.policy == "ClusterValidatePolicy/pss-baseline-privileged")
        .expect("a finding of pss-baseline-privileged");
    assert_eq!(privileged.result, kanon_api::ResultStatus::Fail);
    assert_eq!(privileged.severity.as_deref(), Some("high"));
    assert_eq!(
        privileged.category.as_deref(),
        Some("Pod Security Standards (Baseline)")
    );
    // The same check, linked into the restricted level, stays baseline's.
    let (restricted, _) = audited("pod-security/restricted", &insecure_pod());
    let run_as_non_root = restricted
        .iter()
        .find(|f| &*f.policy == "ClusterValidatePolicy/pss-restricted-run-as-non-root")
        .expect("a finding of pss-restricted-run-as-non-root");
    assert_eq!(run_as_non_root.result, kanon_api::ResultStatus::Fail);
    assert_eq!(run_as_non_root.severity.as_deref(), Some("medium"));
    assert_eq!(
        run_as_non_root.category.as_deref(),
        Some("Pod Security Standards (Restricted)")
    );
    assert!(
        restricted.iter().any(|f| {
            &*f.policy == "ClusterValidatePolicy/pss-baseline-privileged"
                && f.category.as_deref() == Some("Pod Security Standards (Baseline)")
        }),
        "{restricted:#?}"
    );
}
