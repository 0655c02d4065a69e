//! The policy library as the Helm chart installs it (`charts/kanon/templates/library.yaml`).
//!
//! The chart's copy of the library (`charts/kanon/library/`, written by `cargo xtask library`)
//! must be the library's files, links followed. What `helm template` renders from it must be the
//! library's policies with only the chart's changes: the mode in every ClusterValidatePolicy's
//! `validationActions`, the excluded namespaces in every namespaceSelector, the chart's labels.
//! And kanon must judge with the rendered policies as the values say: a privileged Pod warned in
//! `Warn` mode, refused in the default `Deny` mode, left alone in an excluded namespace.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{Value, json};

/// The library folders the chart copies, relative to `library/` (as in xtask).
const LIBRARY_DIRS: [&str; 3] = [
    "pod-security/baseline",
    "pod-security/restricted",
    "best-practices",
];

const REGENERATE: &str = "run `cargo xtask library` to copy the library into the chart again";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `*.yaml` files of `dir`, by name, with their content (links followed).
fn yaml_files(dir: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".yaml") {
            let text = std::fs::read_to_string(entry.path())
                .unwrap_or_else(|e| panic!("reading {}: {e}", entry.path().display()));
            files.insert(name, text);
        }
    }
    files
}

#[test]
fn the_charts_copy_of_the_library_is_the_library() {
    let root = repo();
    let mut problems = Vec::new();
    for dir in LIBRARY_DIRS {
        let library = yaml_files(&root.join("library").join(dir));
        assert!(!library.is_empty(), "library/{dir} has no policy");
        let chart_dir = root.join("charts/kanon/library").join(dir);
        let chart = yaml_files(&chart_dir);
        for (name, text) in &library {
            match chart.get(name) {
                Some(copy) if copy == text => {}
                Some(_) => problems.push(format!(
                    "charts/kanon/library/{dir}/{name} differs from library/{dir}/{name}"
                )),
                None => problems.push(format!("charts/kanon/library/{dir}/{name} is missing")),
            }
        }
        for name in chart.keys().filter(|n| !library.contains_key(*n)) {
            problems.push(format!(
                "charts/kanon/library/{dir}/{name} is not in library/{dir}/ (stale)"
            ));
        }
        // A link in the chart would be packaged as the link, not as the policy.
        if let Ok(entries) = std::fs::read_dir(&chart_dir) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_symlink()) {
                    problems.push(format!(
                        "charts/kanon/library/{dir}/{} is a link, not a copy",
                        entry.file_name().to_string_lossy()
                    ));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the chart's copy of the library is stale; {REGENERATE}:\n  {}",
        problems.join("\n  ")
    );
}

/// `helm`, from the control plane's toolchain (downloaded on first use).
fn helm() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        kanon_control_plane::Toolchain::ensure(&mut std::io::stderr())
            .unwrap_or_else(|e| panic!("helm (`cargo xtask cluster build`): {e:#}"))
            .helm
    })
}

/// What the chart's library template renders with `values` (`--set` arguments), as YAML text.
fn render(values: &[&str]) -> String {
    let mut command = Command::new(helm());
    command.args(["template", "kanon", "--namespace", "kanon-system"]);
    command.arg(repo().join("charts/kanon"));
    command.args(["--show-only", "templates/library.yaml"]);
    for value in values {
        command.args(["--set", value]);
    }
    let out = command.output().expect("helm runs");
    assert!(
        out.status.success(),
        "helm template {values:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("helm prints UTF-8")
}

fn parse(text: &str, source: &str) -> Vec<Value> {
    kanon_engine::parse_documents(text, source, false)
        .unwrap_or_else(|e| panic!("{source} does not parse: {e}"))
}

/// `kind/name` of a policy.
fn id(policy: &Value) -> String {
    format!(
        "{}/{}",
        policy["kind"].as_str().unwrap_or_default(),
        policy["metadata"]["name"].as_str().unwrap_or_default()
    )
}

#[test]
fn the_chart_renders_each_library_policy_with_only_the_mode_exclusions_and_labels_changed() {
    let library = repo().join("library");
    let best_practices: Vec<String> = yaml_files(&library.join("best-practices"))
        .into_keys()
        .map(|n| n.trim_end_matches(".yaml").to_string())
        .collect();
    let rendered = render(&[
        "library.podSecurity=restricted",
        "library.validationActions={Warn,Audit}",
        "library.excludedNamespaces={ci,sandbox}",
        &format!("library.bestPractices={{{}}}", best_practices.join(",")),
    ]);
    let mut rendered: BTreeMap<String, Value> = parse(&rendered, "helm template")
        .into_iter()
        .map(|policy| (id(&policy), policy))
        .collect();

    let mut expected = Vec::new();
    for dir in ["pod-security/restricted", "best-practices"] {
        for (name, text) in yaml_files(&library.join(dir)) {
            expected.extend(parse(&text, &format!("library/{dir}/{name}")));
        }
    }
    let excluded = json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                          "values": ["ci", "sandbox"]});
    let mut validations = 0;
    for mut policy in expected {
        let id = id(&policy);
        let Some(mut got) = rendered.remove(&id) else {
            panic!("{id} is not rendered");
        };
        // The chart's labels, then the library's own as written.
        let labels = got["metadata"]["labels"]
            .as_object_mut()
            .unwrap_or_else(|| panic!("{id} has no labels"));
        assert_eq!(
            labels.remove("app.kubernetes.io/managed-by"),
            Some(json!("Helm")),
            "{id}"
        );
        assert_eq!(
            labels.remove("app.kubernetes.io/instance"),
            Some(json!("kanon")),
            "{id}"
        );
        for label in [
            "helm.sh/chart",
            "app.kubernetes.io/name",
            "app.kubernetes.io/version",
        ] {
            assert!(labels.remove(label).is_some(), "{id}: no {label} label");
        }
        if labels.is_empty() {
            got["metadata"].as_object_mut().map(|m| m.remove("labels"));
        }
        let validation = policy["kind"] == "ClusterValidatePolicy";
        let spec = &mut policy["spec"];
        if validation {
            spec["validationActions"] = json!(["Warn", "Audit"]);
            validations += 1;
        }
        let selector = spec
            .as_object_mut()
            .expect("a spec")
            .entry("namespaceSelector")
            .or_insert_with(|| json!({}));
        match selector["matchExpressions"].as_array_mut() {
            Some(expressions) => expressions.push(excluded.clone()),
            None => selector["matchExpressions"] = json!([excluded]),
        }
        assert_eq!(
            got, policy,
            "{id}: the rendered policy is not the library's with the chart's changes"
        );
    }
    assert!(
        rendered.is_empty(),
        "rendered but not in the library: {:?}",
        rendered.keys()
    );
    assert!(
        validations > 15,
        "only {validations} ClusterValidatePolicies"
    );
}

/// A Pod in `namespace` with a privileged container named `app`.
fn privileged_pod(namespace: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "root", "namespace": namespace},
           "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.0",
                                    "securityContext": {"privileged": true}}]}})
}

/// `kanon apply` of the policies `helm template` renders with `values` to a privileged Pod in
/// each of `namespaces` (the namespaces exist, labelled as kube-apiserver labels them): each
/// verdict's `(allowed, messages, warnings)`.
fn judge_privileged_pods(
    values: &[&str],
    namespaces: &[&str],
) -> Vec<(bool, Vec<String>, Vec<String>)> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let policies = dir.path().join("policies.yaml");
    std::fs::write(&policies, render(values)).expect("writing the rendered policies");
    let pods: Vec<String> = namespaces
        .iter()
        .map(|ns| privileged_pod(ns).to_string())
        .collect();
    let resources = dir.path().join("pods.yaml");
    std::fs::write(&resources, pods.join("\n---\n")).expect("writing the Pods");
    let context: Vec<String> = namespaces
        .iter()
        .map(|ns| {
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}}})
            .to_string()
        })
        .collect();
    let namespaces_file = dir.path().join("namespaces.yaml");
    std::fs::write(&namespaces_file, context.join("\n---\n")).expect("writing the Namespaces");
    let out = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .arg("apply")
        .arg("--policy")
        .arg(&policies)
        .arg("--resource")
        .arg(&resources)
        .arg("--context")
        .arg(&namespaces_file)
        .args(["--output", "json"])
        .output()
        .expect("kanon runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "kanon apply refused the rendered policies: {stderr}"
    );
    assert!(!stderr.contains("warning:"), "{stderr}");
    let verdicts: Vec<Value> = serde_json::from_slice(&out.stdout).expect("kanon prints JSON");
    let texts = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    verdicts
        .iter()
        .map(|v| {
            (
                v["allowed"] == Value::Bool(true),
                texts(&v["messages"]),
                texts(&v["warnings"]),
            )
        })
        .collect()
}

const PRIVILEGED: &str = "ClusterValidatePolicy/pss-baseline-privileged: privileged (container \"app\" must not set securityContext.privileged=true)";

#[test]
fn in_warn_mode_the_charts_restricted_level_warns_of_a_privileged_pod_and_admits_it() {
    let verdicts = judge_privileged_pods(
        &[
            "library.podSecurity=restricted",
            "library.validationActions={Warn}",
            "library.excludedNamespaces={sandbox}",
        ],
        &["apps", "sandbox"],
    );
    let (allowed, messages, warnings) = &verdicts[0];
    assert!(*allowed, "denied in Warn mode: {messages:?}");
    assert!(messages.is_empty(), "{messages:?}");
    assert!(
        warnings.iter().any(|w| w.contains(PRIVILEGED)),
        "no warning naming the privileged container: {warnings:?}"
    );
    // Restricted's own checks warn too (this Pod runs as root and keeps its capabilities).
    assert!(
        warnings.iter().any(|w| w.contains("pss-restricted-")),
        "{warnings:?}"
    );
    // The excluded namespace: not a word.
    assert_eq!(
        verdicts[1],
        (true, vec![], vec![]),
        "in an excluded namespace"
    );
}

#[test]
fn by_default_the_charts_baseline_level_refuses_a_privileged_pod() {
    let verdicts = judge_privileged_pods(&["library.podSecurity=baseline"], &["apps"]);
    let (allowed, messages, warnings) = &verdicts[0];
    assert!(!*allowed, "admitted in the default Deny mode: {warnings:?}");
    assert_eq!(messages, &[PRIVILEGED]);
    assert!(warnings.is_empty(), "{warnings:?}");
}
