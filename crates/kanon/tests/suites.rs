//! `kanon test` and `kanon render` end to end.

use std::path::Path;
use std::process::{Command, Output};

fn kanon(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kanon"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("the kanon binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn write(dir: &Path, name: &str, content: &str) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

const LABELS: &str = "apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterOverridePolicy
metadata:
  name: managed-by
spec:
  overrideRules:
  - overriders:
      template:
        type: labels
        operation: add
        path: app.kubernetes.io/managed-by
        value: {string: kanon}
";

const REPLICAS: &str = "apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata:
  name: max-replicas
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment}
  validateRules:
  - template:
      type: condition
      condition:
        cond: Gt
        dataRef: {from: current, path: /spec/replicas}
        value: {integer: 3}
        message: '{{ object.metadata.name }} wants {{ object.spec.replicas }} replicas'
";

const RESOURCES: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: big, namespace: default}
spec:
  replicas: 5
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: small, namespace: default}
spec:
  replicas: 1
";

fn suite_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "s/policies/labels.yaml", LABELS);
    write(dir.path(), "s/policies/replicas.yaml", REPLICAS);
    write(dir.path(), "s/resources.yaml", RESOURCES);
    dir
}

#[test]
fn passing_and_failing_cases_are_reported_with_a_closing_count() {
    let dir = suite_dir();
    write(
        dir.path(),
        "s/kanon-test.yaml",
        "name: replicas
policies: [policies/]
resources: [resources.yaml]
cases:
  - resource: {kind: Deployment, namespace: default, name: big}
    allowed: false
    messages: ['ClusterValidatePolicy/max-replicas: big wants 5 replicas']
  - resource: {kind: Deployment, namespace: default, name: small}
    allowed: true
    appliedPolicies: [ClusterOverridePolicy/managed-by, ClusterValidatePolicy/max-replicas]
    patched: {metadata: {labels: {app.kubernetes.io/managed-by: kanon}}}
  - resource: {kind: Deployment, namespace: default, name: small}
    patched: {metadata: {labels: {app.kubernetes.io/managed-by: someone-else}}}
  - resource: {kind: Deployment, namespace: default, name: missing}
    allowed: true
",
    );
    let out = kanon(dir.path(), &["test"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "PASS replicas: CREATE Deployment/default/big");
    assert_eq!(lines[1], "PASS replicas: CREATE Deployment/default/small");
    assert_eq!(lines[2], "FAIL replicas: CREATE Deployment/default/small");
    assert_eq!(
        lines[3].trim(),
        "patched: /metadata/labels/app.kubernetes.io~1managed-by: expected \"someone-else\", found \"kanon\""
    );
    assert_eq!(lines[4], "FAIL replicas: CREATE Deployment/default/missing");
    assert_eq!(lines[5].trim(), "no such resource in the suite's resources");
    assert_eq!(*lines.last().unwrap(), "2 passed, 2 failed");
}

#[test]
fn a_green_suite_exits_0() {
    let dir = suite_dir();
    write(
        dir.path(),
        "s/kanon-test.yaml",
        "policies: [policies/]
resources: [resources.yaml]
cases:
  - resource: {apiVersion: apps/v1, kind: Deployment, namespace: default, name: small}
    allowed: true
    warnings: []
",
    );
    let out = kanon(dir.path(), &["test", "s"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(text(&out.stdout).ends_with("1 passed, 0 failed\n"));
}

#[test]
fn bad_suites_are_bad_input() {
    let dir = suite_dir();
    write(
        dir.path(),
        "s/kanon-test.yaml",
        "policies: [policies/]\nresources: [resources.yaml]\ncases: []\nexpect: nothing\n",
    );
    let out = kanon(dir.path(), &["test"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("unknown field `expect`"),
        "{}",
        text(&out.stderr)
    );

    let empty = tempfile::tempdir().unwrap();
    let out = kanon(empty.path(), &["test"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no kanon-test.yaml found"),
        "{}",
        text(&out.stderr)
    );

    write(
        dir.path(),
        "s/kanon-test.yaml",
        "policies: [nowhere/]\nresources: [resources.yaml]\ncases: []\n",
    );
    let out = kanon(dir.path(), &["test"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("nowhere"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn render_prints_each_templates_program() {
    let dir = suite_dir();
    let out = kanon(dir.path(), &["render", "-p", "s/policies"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(
            "# ClusterOverridePolicy/managed-by spec.overrideRules[0].overriders.template\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("# ClusterValidatePolicy/max-replicas spec.validateRules[0].template\n"),
        "{stdout}"
    );
    // The rendered program is what runs: it holds the key and the comparison.
    assert!(
        stdout.contains("\"app.kubernetes.io/managed-by\": \"kanon\""),
        "{stdout}"
    );
    assert!(stdout.contains("compare(data, value) > 0"), "{stdout}");
    // The message is the second part, rendered apart from the verdict (only on a denial).
    assert!(
        stdout.contains("# ClusterValidatePolicy/max-replicas spec.validateRules[0].template.condition.message\n{{ object.metadata.name }} wants {{ object.spec.replicas }} replicas\n"),
        "{stdout}"
    );

    write(
        dir.path(),
        "bad.yaml",
        &LABELS.replace(
            "value: {string: kanon}",
            "value: {string: kanon, integer: 1}",
        ),
    );
    let out = kanon(dir.path(), &["render", "-p", "bad.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("spec.overrideRules[0].overriders.template.value: set only one value, not string and integer"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_example_suites_pass() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = kanon(&repo, &["test", "examples"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(summary.ends_with(" passed, 0 failed"), "{summary}");
    // Every template type, operator and suite folder is exercised.
    for suite in [
        "plaintext",
        "templates",
        "conditions",
        "programs",
        "references",
    ] {
        assert!(
            stdout.contains(&format!("PASS {suite}")),
            "no passing case from {suite}:\n{stdout}"
        );
    }
}
