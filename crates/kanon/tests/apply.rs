//! `kanon apply` end to end: the binary on the repository's examples and on bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(name: &str) -> PathBuf {
    repo().join("fixtures/admission-reviews").join(name)
}

fn kanon(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kanon"))
        .current_dir(repo())
        .args(args)
        .output()
        .expect("the kanon binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `kanon apply -o json` and returns (exit code, parsed verdicts).
fn apply_json(args: &[&str]) -> (i32, Vec<Value>) {
    let mut all = vec!["apply", "-o", "json"];
    all.extend_from_slice(args);
    let out = kanon(&all);
    let code = out.status.code().expect("exit code");
    let verdicts: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is JSON ({e}); stderr: {}", stderr(&out)));
    (code, verdicts.as_array().expect("a JSON array").clone())
}

fn verdict<'a>(verdicts: &'a [Value], name: &str) -> &'a Value {
    verdicts
        .iter()
        .find(|v| v["resource"]["name"] == name)
        .unwrap_or_else(|| panic!("no verdict for {name}"))
}

/// Writes `files` into a fresh temporary directory.
fn temp_files(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write temp file");
    }
    dir
}

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: default\n  labels:\n    app: web\nspec:\n  containers:\n  - name: c\n    image: nginx\n";

fn add_label_policy(name: &str, key: &str, value: &str) -> String {
    format!(
        "apiVersion: policy.kanon.dev/v1alpha1\nkind: ClusterOverridePolicy\nmetadata:\n  name: {name}\nspec:\n  resourceSelectors:\n  - apiVersion: v1\n    kind: Pod\n  overrideRules:\n  - overriders:\n      plaintext:\n      - op: add\n        path: /metadata/labels/{key}\n        value: {value}\n"
    )
}

#[test]
fn examples_are_all_allowed_with_the_documented_patches() {
    let (code, verdicts) = apply_json(&[
        "--policy",
        "examples/policies",
        "--resource",
        "examples/resources",
        "--context",
        "examples/context",
    ]);
    assert_eq!(code, 0);
    assert_eq!(verdicts.len(), 3);

    let web = verdict(&verdicts, "web-0");
    assert_eq!(web["allowed"], true);
    assert_eq!(
        web["resource"],
        json!({"apiVersion": "v1", "kind": "Pod", "namespace": "shop", "name": "web-0"})
    );
    assert_eq!(
        web["appliedPolicies"],
        json!([
            "ClusterOverridePolicy/web-labels",
            "OverridePolicy/shop/shop-env"
        ])
    );
    assert_eq!(
        web["patched"]["metadata"]["labels"],
        json!({"app": "web", "team": "storefront", "app.kubernetes.io/part-of": "storefront", "cost-center": "storefront"})
    );
    let paths: Vec<&str> = web["patch"]
        .as_array()
        .unwrap()
        .iter()
        .map(|op| op["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"/metadata/labels/app.kubernetes.io~1part-of"),
        "{paths:?}"
    );
    // The Ignore policy failed on every Pod and said so, naming itself.
    assert_eq!(web["warnings"].as_array().unwrap().len(), 1);
    assert!(
        web["warnings"][0]
            .as_str()
            .unwrap()
            .starts_with("ClusterOverridePolicy/legacy-cleanup: skipped (failurePolicy Ignore)")
    );

    let deploy = verdict(&verdicts, "api");
    assert_eq!(
        deploy["appliedPolicies"],
        json!(["ClusterOverridePolicy/prod-deployments"])
    );
    assert_eq!(deploy["patched"]["spec"]["revisionHistoryLimit"], 5);

    let batch = verdict(&verdicts, "report-1");
    assert_eq!(
        batch["appliedPolicies"],
        json!(["ClusterOverridePolicy/batch-priority"])
    );
    assert_eq!(
        batch["patch"],
        json!([{"op": "add", "path": "/spec/priorityClassName", "value": "batch-low"}])
    );
}

#[test]
fn namespace_selector_needs_the_namespace_from_context() {
    // Without --context the payments namespace is judged as the Namespace the apiserver
    // guarantees (its name label only): prod-deployments' selector (a label payments has in
    // examples/context) does not match it, and a note names the namespace and the flag.
    let out = kanon(&[
        "apply",
        "-o",
        "json",
        "--policy",
        "examples/policies",
        "--resource",
        "examples/resources/deployment-api.yaml",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let verdicts: Value = serde_json::from_slice(&out.stdout).expect("JSON verdicts");
    let deploy = verdict(verdicts.as_array().expect("a list"), "api");
    assert_eq!(deploy["allowed"], true);
    assert_eq!(deploy["messages"], json!([]));
    assert_eq!(deploy["patch"], json!([]));
    assert!(
        stderr(&out).contains(
            "note: namespace payments is not in --context: it was judged as the Namespace the \
             apiserver guarantees (its name and the label \
             kubernetes.io/metadata.name=payments, no other label)"
        ),
        "{}",
        stderr(&out)
    );

    // A selector on the name label matches the guaranteed Namespace, as in a cluster.
    let dir = temp_files(&[
        (
            "policy.yaml",
            "apiVersion: policy.kanon.dev/v1alpha1\nkind: ClusterValidatePolicy\nmetadata:\n  name: not-in-payments\nspec:\n  namespaceSelector:\n    matchLabels:\n      kubernetes.io/metadata.name: payments\n  resourceSelectors:\n  - apiVersion: v1\n    kind: Pod\n  validateRules:\n  - cel:\n      validations:\n      - expression: 'false'\n        message: no Pods in payments\n",
        ),
        (
            "pod.yaml",
            &POD.replace("namespace: default", "namespace: payments"),
        ),
    ]);
    let (code, verdicts) = apply_json(&[
        "--policy",
        &dir.path().join("policy.yaml").display().to_string(),
        "--resource",
        &dir.path().join("pod.yaml").display().to_string(),
    ]);
    assert_eq!(code, 1);
    assert_eq!(
        verdict(&verdicts, "p")["messages"],
        json!(["ClusterValidatePolicy/not-in-payments: no Pods in payments"])
    );

    // `--objects` is the same flag as `--context` (its name on `kanon serve`).
    let (code, verdicts) = apply_json(&[
        "--policy",
        "examples/policies",
        "--resource",
        "examples/resources/deployment-api.yaml",
        "--objects",
        "examples/context",
    ]);
    assert_eq!(code, 0);
    assert_eq!(
        verdict(&verdicts, "api")["appliedPolicies"],
        json!(["ClusterOverridePolicy/prod-deployments"])
    );
}

#[test]
fn yaml_is_the_default_output() {
    let out = kanon(&[
        "apply",
        "--policy",
        "examples/policies",
        "--resource",
        "examples/resources/pod-batch.yaml",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("- resource:\n"), "{text}");
    let parsed: Vec<Value> = serde_saphyr::from_str(&text).expect("output is YAML");
    assert_eq!(
        parsed[0]["appliedPolicies"],
        json!(["ClusterOverridePolicy/batch-priority"])
    );
}

#[test]
fn a_failing_policy_denies_with_exit_1_and_names_the_policy() {
    let (code, verdicts) = apply_json(&[
        "--policy",
        "examples/policies",
        "--policy",
        "examples/failures/cop-strict-remove.yaml",
        "--resource",
        "examples/resources/pod-web.yaml",
        "--context",
        "examples/context",
    ]);
    assert_eq!(code, 1);
    let web = verdict(&verdicts, "web-0");
    assert_eq!(web["allowed"], false);
    assert_eq!(web["patch"], json!([]));
    assert_eq!(
        web["messages"],
        json!([
            "ClusterOverridePolicy/strict-remove: spec.overrideRules[0].overriders.plaintext[0]: remove /spec/hostNetwork: nothing exists at `/spec/hostNetwork` (the deepest existing parent is `/spec`)"
        ])
    );
}

#[test]
fn an_invalid_policy_is_bad_input_with_every_error_by_field() {
    let out = kanon(&[
        "apply",
        "--policy",
        "examples/failures/cop-invalid.yaml",
        "--resource",
        "examples/resources",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = stderr(&out);
    assert!(
        err.contains(
            "examples/failures/cop-invalid.yaml: ClusterOverridePolicy/invalid is invalid:"
        ),
        "{err}"
    );
    for field in [
        "spec.resourceSelectors[0].fieldSelector.matchExpressions[0].field: `metadata.labels.app` is not a JSON pointer",
        "spec.overrideRules[0].overriders.plaintext[0].path: `metadata.labels.team` is not a JSON pointer",
        "spec.overrideRules[0].overriders.plaintext[1].value: is required for `replace`",
    ] {
        assert!(err.contains(field), "missing `{field}` in:\n{err}");
    }
}

#[test]
fn bad_input_exits_2_with_the_reason() {
    let cue = "apiVersion: policy.kanon.dev/v1alpha1\nkind: ClusterOverridePolicy\nmetadata:\n  name: old\nspec:\n  overrideRules:\n  - overriders:\n      cue: 'patches: []'\n";
    let template = "apiVersion: policy.kanon.dev/v1alpha1\nkind: ClusterOverridePolicy\nmetadata:\n  name: t\nspec:\n  overrideRules:\n  - overriders:\n      program: |\n        - op: add\n          {% if object.x %}\n";
    let unknown = "apiVersion: policy.kanon.dev/v1alpha1\nkind: ClusterOverridePolicy\nmetadata:\n  name: u\nspec:\n  resourceSelector: []\n  overrideRules: []\n";
    let dir = temp_files(&[
        (
            "bad.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: [unclosed\n",
        ),
        ("notpolicy.yaml", POD),
        ("cue.yaml", cue),
        ("template.yaml", template),
        ("unknown.yaml", unknown),
        ("pod.yaml", POD),
        ("empty.yaml", ""),
    ]);
    let p = |name: &str| dir.path().join(name).display().to_string();
    let cases: Vec<(Vec<String>, String)> = vec![
        (vec!["--policy".into(), p("missing.yaml"), "--resource".into(), p("pod.yaml")], format!("{}: No such file", p("missing.yaml"))),
        (vec!["--policy".into(), p("bad.yaml"), "--resource".into(), p("pod.yaml")], format!("{}: invalid YAML at line 3", p("bad.yaml"))),
        (vec!["--policy".into(), "examples/policies".into(), "--resource".into(), p("bad.yaml")], format!("{}: invalid YAML at line 3", p("bad.yaml"))),
        (vec!["--policy".into(), p("notpolicy.yaml"), "--resource".into(), p("pod.yaml")], "no policy found (skipped 1 document that is not a policy: Pod)".into()),
        (vec!["--policy".into(), p("cue.yaml"), "--resource".into(), p("pod.yaml")], "spec.overrideRules[0].overriders.cue: kinitiras CUE is not supported: rewrite it as a minijinja rule `program`".into()),
        (vec!["--policy".into(), p("template.yaml"), "--resource".into(), p("pod.yaml")], "ClusterOverridePolicy/t is invalid:\n  spec.overrideRules[0].overriders.program: line 2: syntax error: unexpected end of input, expected end of block".into()),
        (vec!["--policy".into(), p("unknown.yaml"), "--resource".into(), p("pod.yaml")], "spec.resourceSelector: unknown field".into()),
        (vec!["--policy".into(), "examples/policies".into(), "--resource".into(), p("empty.yaml")], "no resource to evaluate".into()),
        (vec!["--policy".into(), "examples/policies".into(), "--resource".into(), p("pod.yaml"), "--operation".into(), "UPDATE".into()], "UPDATE needs an old object (give it with --old-resource)".into()),
        (vec!["--policy".into(), "examples/policies".into(), "--resource".into(), p("pod.yaml"), "--operation".into(), "PATCH".into()], "unknown operation `PATCH`".into()),
        (vec!["--policy".into(), "examples/policies".into(), "--resource".into(), p("pod.yaml"), "--context".into(), p("empty.yaml"), "--context".into(), p("cue.yaml")], "".into()),
    ];
    for (args, want) in cases {
        let mut all = vec!["apply".to_string()];
        all.extend(args.clone());
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        let out = kanon(&refs);
        if want.is_empty() {
            // Context objects are not checked as policies: any object is fine there.
            assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
            continue;
        }
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&want),
            "{args:?}: expected `{want}` in:\n{}",
            stderr(&out)
        );
    }
}

#[test]
fn duplicate_policies_are_bad_input() {
    let policy = add_label_policy("dup", "a", "b");
    let dir = temp_files(&[("one.yaml", &policy), ("two.yaml", &policy)]);
    let resources = temp_files(&[("pod.yaml", POD)]);
    let out = kanon(&[
        "apply",
        "--policy",
        &dir.path().display().to_string(),
        "--resource",
        &resources.path().display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("ClusterOverridePolicy/dup is defined more than once"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn admission_reviews_bring_their_own_operation_and_old_object() {
    // A labels policy on every Pod; the review's object is patched exactly as the webhook would.
    let dir = temp_files(&[("policy.yaml", &add_label_policy("mark", "kanon", "seen"))]);
    let policy = dir.path().join("policy.yaml").display().to_string();
    let create = fixture("pod-create.json").display().to_string();
    let (code, verdicts) = apply_json(&["--policy", &policy, "--resource", &create]);
    assert_eq!(code, 0);
    assert_eq!(verdicts[0]["operation"], "CREATE");
    assert_eq!(
        verdicts[0]["appliedPolicies"],
        json!(["ClusterOverridePolicy/mark"])
    );
    assert_eq!(
        verdicts[0]["patched"]["metadata"]["labels"]["kanon"],
        "seen"
    );

    // DELETE is never patched, even though the policy applies to every operation.
    let delete = fixture("pod-delete.json").display().to_string();
    let (code, verdicts) = apply_json(&["--policy", &policy, "--resource", &delete]);
    assert_eq!(code, 0);
    assert_eq!(verdicts[0]["operation"], "DELETE");
    assert_eq!(verdicts[0]["patch"], json!([]));
}

#[test]
fn update_pairs_old_resources_by_identity() {
    let only_update = "apiVersion: policy.kanon.dev/v1alpha1\nkind: ClusterOverridePolicy\nmetadata:\n  name: on-update\nspec:\n  overrideRules:\n  - targetOperations: [UPDATE]\n    overriders:\n      plaintext:\n      - op: add\n        path: /metadata/labels/updated\n        value: \"yes\"\n";
    let old_pod = POD.replace("app: web", "app: old");
    let dir = temp_files(&[
        ("policy.yaml", only_update),
        ("pod.yaml", POD),
        ("old.yaml", &old_pod),
    ]);
    let path = |n: &str| dir.path().join(n).display().to_string();
    let (code, verdicts) = apply_json(&[
        "--policy",
        &path("policy.yaml"),
        "--resource",
        &path("pod.yaml"),
        "--operation",
        "UPDATE",
        "--old-resource",
        &path("old.yaml"),
    ]);
    assert_eq!(code, 0);
    assert_eq!(verdicts[0]["operation"], "UPDATE");
    assert_eq!(
        verdicts[0]["patch"],
        json!([{"op": "add", "path": "/metadata/labels/updated", "value": "yes"}])
    );
    // On CREATE the same policy does not apply.
    let (code, verdicts) = apply_json(&[
        "--policy",
        &path("policy.yaml"),
        "--resource",
        &path("pod.yaml"),
    ]);
    assert_eq!(code, 0);
    assert_eq!(verdicts[0]["appliedPolicies"], json!([]));
    assert_eq!(verdicts[0]["patch"], json!([]));
}

#[test]
fn resources_can_come_from_standard_input() {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .current_dir(repo())
        .args([
            "apply",
            "-o",
            "json",
            "--policy",
            "examples/policies",
            "--resource",
            "-",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn kanon");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(include_bytes!("../../../examples/resources/pod-batch.yaml"))
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let verdicts: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(verdicts[0]["source"], "-");
    assert_eq!(
        verdicts[0]["appliedPolicies"],
        json!(["ClusterOverridePolicy/batch-priority"])
    );
}

#[test]
fn crds_command_prints_the_committed_crds() {
    let out = kanon(&["crds"]);
    assert_eq!(out.status.code(), Some(0));
    let printed = String::from_utf8(out.stdout).unwrap();
    // kanon's CRDs: the files of crds/, not its openreports/ subfolder (OpenReports' kinds).
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("crds"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            printed.contains(&text),
            "{} is not in `kanon crds` output",
            file.display()
        );
    }
    assert_eq!(printed.matches("kind: CustomResourceDefinition").count(), 5);
}

#[test]
fn a_whole_manifest_is_read_for_the_policies_in_it() {
    // What `helm template` prints: a chart's objects, with a policy among them.
    let manifest = "\
apiVersion: v1
kind: ServiceAccount
metadata: {name: app}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: app}
spec: {selector: {matchLabels: {app: a}}, template: {metadata: {labels: {app: a}}, spec: {containers: [{name: c, image: nginx}]}}}
---
# A policy of the chart
apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata: {name: no-default}
spec:
  resourceSelectors: [{apiVersion: v1, kind: Pod}]
  validateRules:
  - targetOperations: [CREATE]
    cel:
      validations: [{expression: \"object.metadata.namespace != 'default'\", message: not in default}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: other}
spec: {selector: {matchLabels: {app: b}}, template: {metadata: {labels: {app: b}}, spec: {containers: [{name: c, image: nginx}]}}}
";
    let misspelt = "apiVersion: policy.kanon.dev/v1alpha1\nkind: ClusterValidatPolicy\nmetadata: {name: x}\nspec: {}\n";
    let dir = temp_files(&[
        ("chart.yaml", manifest),
        ("pod.yaml", POD),
        ("misspelt.yaml", misspelt),
    ]);
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let out = kanon(&["apply", "-p", &path("chart.yaml"), "-r", &path("pod.yaml")]);
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the policy judges the Pod: {err}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("ClusterValidatePolicy/no-default: not in default")
    );
    assert!(
        err.contains(
            "note: skipped 3 documents that are not a policy: ServiceAccount, Deployment (2)"
        ),
        "{err}"
    );
    // A kind of kanon's own API group that kanon does not read is a mistake, not skipped.
    let out = kanon(&[
        "apply",
        "-p",
        &path("misspelt.yaml"),
        "-p",
        &path("chart.yaml"),
        "-r",
        &path("pod.yaml"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out)
            .contains("policy.kanon.dev/v1alpha1 ClusterValidatPolicy is not a policy kanon reads"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn likely_mistakes_in_a_policy_are_warned_about_on_stderr() {
    // A path Pods do not have, in a rule that also judges DELETE: in force, with two warnings.
    let policy = "apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata:
  name: node
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: Pod}
  validateRules:
  - template:
      type: condition
      condition:
        cond: Exist
        affectMode: allow
        dataRef: {from: current, path: /spec/nodename}
";
    let dir = temp_files(&[("policy.yaml", policy), ("pod.yaml", POD)]);
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let out = kanon(&["apply", "-p", &path("policy.yaml"), "-r", &path("pod.yaml")]);
    let err = stderr(&out);
    // The rule is in force: the Pod has no nodeName, so it is denied.
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("warning: ClusterValidatePolicy/node ({}:1): spec.validateRules[0].template.condition.dataRef.path:", path("policy.yaml")))
            && err.contains("spec.validateRules[0].template.condition.dataRef.path: `/spec/nodename` does not exist in v1 Pod; did you mean `/spec/nodeName`?"),
        "{err}"
    );
    assert!(
        err.contains(&format!("warning: ClusterValidatePolicy/node ({}:1): spec.validateRules[0].targetOperations: is not set", path("policy.yaml"))),
        "{err}"
    );
}

/// Every policy under `examples/mistakes/` gets what its `# kanon says (error|warning): TEXT`
/// header says: an error makes `kanon apply` exit 2 with that text, a warning is printed and the
/// policy applies.
#[test]
fn every_mistake_in_the_examples_is_caught_as_its_header_says() {
    let dir = repo().join("examples/mistakes");
    let mut seen = 0;
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("examples/mistakes")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    entries.sort();
    for file in entries {
        let text = std::fs::read_to_string(&file).expect("readable");
        let (kind, said) = text
            .lines()
            .find_map(|l| l.strip_prefix("# kanon says ("))
            .and_then(|l| l.split_once("): "))
            .unwrap_or_else(|| panic!("{} has no `# kanon says` header", file.display()));
        let out = kanon(&[
            "apply",
            "-p",
            &file.to_string_lossy(),
            "-r",
            "examples/resources",
        ]);
        let err = stderr(&out);
        match kind {
            "error" => {
                assert_eq!(out.status.code(), Some(2), "{}: {err}", file.display());
                // `error: FILE: Kind/name is invalid:`, then one error per line.
                assert!(
                    err.starts_with("error:")
                        && err
                            .lines()
                            .any(|l| l.trim() == said.trim() || l.trim().starts_with(said.trim())),
                    "{}: expected an error with {said:?}\n{err}",
                    file.display()
                );
            }
            "warning" => {
                assert_ne!(out.status.code(), Some(2), "{}: {err}", file.display());
                assert!(
                    err.lines()
                        .any(|l| l.starts_with("warning:") && l.contains(said)),
                    "{}: expected a warning with {said:?}\n{err}",
                    file.display()
                );
            }
            other => panic!("{}: unknown kind {other}", file.display()),
        }
        seen += 1;
    }
    assert!(seen >= 6, "only {seen} mistakes checked");
}

#[test]
fn a_reader_that_goes_away_ends_the_output_without_a_panic() {
    // Enough output to fill a pipe, read by nobody.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kanon"))
        .args(["apply", "--policy", "examples/policies", "--resource"])
        .args(std::iter::repeat_n("examples/resources", 40))
        .args(["--output", "json"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kanon runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("kanon ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!out.status.success(), "no output could be written");
}

#[test]
fn exceptions_apply_only_from_the_named_namespaces_until_the_time_given() {
    let policies = "examples/suites/exceptions/policies";
    let resources = "examples/suites/exceptions/resources.yaml";
    let exempted = |verdicts: &[Value]| -> Vec<String> {
        verdict(verdicts, "invoice-0")["exceptions"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|e| e["exception"].as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    // No exception namespace: nothing is honoured, and each exception left out is reported.
    let out = kanon(&["apply", "-o", "json", "-p", policies, "-r", resources]);
    let verdicts: Vec<Value> = serde_json::from_slice(&out.stdout).expect("JSON verdicts");
    assert_eq!(verdict(&verdicts, "invoice-0")["allowed"], false);
    assert!(exempted(&verdicts).is_empty());
    assert!(
        stderr(&out).contains("warning: PolicyException/policy-exceptions/billing-legacy-images is not honoured: namespace policy-exceptions is not an exception namespace (--exception-namespace)"),
        "{}",
        stderr(&out)
    );
    let honoured = |now: &str| {
        apply_json(&[
            "-p",
            policies,
            "-r",
            resources,
            "--exception-namespace",
            "policy-exceptions",
            "--now",
            now,
        ])
        .1
    };
    let before = honoured("2026-12-31T23:59:58Z");
    assert_eq!(verdict(&before, "invoice-0")["allowed"], true);
    assert_eq!(
        exempted(&before),
        ["PolicyException/policy-exceptions/billing-legacy-images"]
    );
    let after = honoured("2026-12-31T23:59:59Z");
    assert_eq!(verdict(&after, "invoice-0")["allowed"], false);
    // A bad time is bad input.
    let out = kanon(&[
        "apply", "-p", policies, "-r", resources, "--now", "tomorrow",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("RFC 3339"), "{}", stderr(&out));
}

/// A reader that goes away ends a command quietly with the status a shell gives SIGPIPE (141),
/// without a panic's message: SIGPIPE itself stays ignored, so that a write to a program worker
/// that has just died cannot kill `kanon apply` or `kanon test` outright.
#[test]
fn a_command_whose_reader_goes_away_ends_quietly() {
    use std::io::Read;
    // The CRDs are some 380 KB, more than a pipe holds: kanon is still writing when the read
    // end is gone.
    let mut child = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .arg("crds")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the kanon binary runs");
    drop(child.stdout.take());
    let mut said = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut said)
        .expect("read stderr");
    let status = child.wait().expect("kanon ends");
    assert_eq!(status.code(), Some(141), "{status:?}: {said}");
    assert_eq!(said, "");
}

#[test]
fn a_binding_namespace_selector_meets_the_guaranteed_namespace_offline() {
    // No --context: each Pod's Namespace is the one the apiserver guarantees, so a binding
    // that leaves out kube-system by its name label judges shop and skips kube-system.
    let policy = "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: no-pods\nspec:\n  matchConstraints:\n    resourceRules:\n    - apiGroups: ['']\n      apiVersions: [v1]\n      operations: [CREATE]\n      resources: [pods]\n  validations:\n  - expression: 'false'\n    message: no Pods here\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata:\n  name: no-pods\nspec:\n  policyName: no-pods\n  validationActions: [Deny]\n  matchResources:\n    namespaceSelector:\n      matchExpressions:\n      - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system]}\n";
    let pods = format!(
        "{}---\n{}",
        POD.replace("name: p\n", "name: shop-pod\n")
            .replace("namespace: default", "namespace: shop"),
        POD.replace("name: p\n", "name: system-pod\n")
            .replace("namespace: default", "namespace: kube-system"),
    );
    let dir = temp_files(&[("policy.yaml", policy), ("pods.yaml", &pods)]);
    let out = kanon(&[
        "apply",
        "-o",
        "json",
        "--policy",
        &dir.path().join("policy.yaml").display().to_string(),
        "--resource",
        &dir.path().join("pods.yaml").display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let verdicts: Value = serde_json::from_slice(&out.stdout).expect("JSON verdicts");
    let verdicts = verdicts.as_array().expect("a list");
    let shop = verdict(verdicts, "shop-pod");
    assert_eq!(shop["allowed"], false, "{shop}");
    assert!(
        shop["messages"][0]
            .as_str()
            .is_some_and(|m| m.ends_with("no Pods here")),
        "{shop}"
    );
    assert_eq!(verdict(verdicts, "system-pod")["allowed"], true);
    for namespace in ["shop", "kube-system"] {
        assert!(
            stderr(&out).contains(&format!("note: namespace {namespace} is not in --context")),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn plain_resources_are_defaulted_as_the_apiserver_does_unless_told_not_to() {
    // The apiserver gives every Pod a restartPolicy and each `:latest` container
    // `imagePullPolicy: Always` before any webhook sees it; `--no-defaults` judges the
    // manifest as written.
    let policy = "apiVersion: policy.kanon.dev/v1alpha1\nkind: ClusterValidatePolicy\nmetadata:\n  name: pinned-pulls\nspec:\n  resourceSelectors:\n  - apiVersion: v1\n    kind: Pod\n  validateRules:\n  - cel:\n      validations:\n      - expression: \"has(object.spec.restartPolicy) && object.spec.containers.all(c, c.imagePullPolicy == 'Always')\"\n        message: restartPolicy and imagePullPolicy Always are required\n";
    let dir = temp_files(&[("policy.yaml", policy), ("pod.yaml", POD)]);
    let args = |extra: &[&str]| {
        let mut args = vec![
            "--policy".to_owned(),
            dir.path().join("policy.yaml").display().to_string(),
            "--resource".to_owned(),
            dir.path().join("pod.yaml").display().to_string(),
        ];
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        args
    };
    let defaulted = args(&[]);
    let (code, verdicts) = apply_json(&defaulted.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{verdicts:?}");
    let written = args(&["--no-defaults"]);
    let (code, verdicts) = apply_json(&written.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 1);
    assert_eq!(
        verdict(&verdicts, "p")["messages"],
        json!([
            "ClusterValidatePolicy/pinned-pulls: restartPolicy and imagePullPolicy Always are required"
        ])
    );
}

/// A CRD of a namespaced `example.com/v1` Widget with a typed spec.
const WIDGET_CRD: &str = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.example.com\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec:\n            type: object\n            properties:\n              size: {type: integer}\n              tags:\n                type: array\n                x-kubernetes-list-type: set\n                items: {type: string}\n";

#[test]
fn the_crds_among_the_context_serve_their_kinds_offline() {
    // A VAP over widgets is type-checked against the CRD's schema, as kube-controller-manager
    // checks it, and a MAP's apply configuration merges by it.
    let policies = "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: widget-size\nspec:\n  matchConstraints:\n    resourceRules:\n    - apiGroups: [example.com]\n      apiVersions: [v1]\n      operations: [CREATE]\n      resources: [widgets]\n  validations:\n  - expression: object.spec.sizee < 10\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata:\n  name: widget-size\nspec:\n  policyName: widget-size\n  validationActions: [Warn]\n---\napiVersion: admissionregistration.k8s.io/v1beta1\nkind: MutatingAdmissionPolicy\nmetadata:\n  name: widget-tags\nspec:\n  matchConstraints:\n    resourceRules:\n    - apiGroups: [example.com]\n      apiVersions: [v1]\n      operations: [CREATE]\n      resources: [widgets]\n  reinvocationPolicy: Never\n  mutations:\n  - patchType: ApplyConfiguration\n    applyConfiguration:\n      expression: \"Object{spec: Object.spec{tags: ['checked']}}\"\n---\napiVersion: admissionregistration.k8s.io/v1beta1\nkind: MutatingAdmissionPolicyBinding\nmetadata:\n  name: widget-tags\nspec:\n  policyName: widget-tags\n";
    let widget = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: shop}\nspec: {size: 3, tags: [blue]}\n";
    let dir = temp_files(&[
        ("crd.yaml", WIDGET_CRD),
        ("policies.yaml", policies),
        ("widget.yaml", widget),
    ]);
    let path = |name: &str| dir.path().join(name).display().to_string();
    let out = kanon(&[
        "apply",
        "-o",
        "json",
        "--policy",
        &path("policies.yaml"),
        "--resource",
        &path("widget.yaml"),
        "--context",
        &path("crd.yaml"),
    ]);
    let err = stderr(&out);
    assert!(
        err.contains("example.com/v1, Kind=Widget: ERROR: <input>:1:12: undefined field 'sizee'"),
        "{err}"
    );
    let verdicts: Value = serde_json::from_slice(&out.stdout).expect("JSON verdicts");
    let widget = verdict(verdicts.as_array().expect("a list"), "w");
    // The set gains the tag (`sizee` is no field of the object: the validation, a warning,
    // fails to evaluate).
    assert_eq!(
        widget["patched"]["spec"]["tags"],
        json!(["blue", "checked"]),
        "{widget}"
    );

    // Without the CRD, the apply configuration has no schema to merge by.
    let out = kanon(&[
        "apply",
        "-o",
        "json",
        "--policy",
        &path("policies.yaml"),
        "--resource",
        &path("widget.yaml"),
    ]);
    assert!(
        !stderr(&out).contains("undefined field 'sizee'"),
        "{}",
        stderr(&out)
    );
    let verdicts: Value = serde_json::from_slice(&out.stdout).expect("JSON verdicts");
    let widget = verdict(verdicts.as_array().expect("a list"), "w");
    assert!(
        widget["messages"]
            .to_string()
            .contains("an apply configuration needs the kind's schema"),
        "{widget}"
    );
}
