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
    // Helm's way of saying the template rendered nothing.
    if String::from_utf8_lossy(&out.stderr)
        .contains("could not find template templates/library.yaml")
    {
        return String::new();
    }
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
    // The level alone is that level in each mode the actions name: each check once per mode,
    // named after it.
    let mut per_mode = Vec::new();
    for policy in expected {
        let pod_security = policy["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("pss-"));
        if !pod_security {
            per_mode.push(policy);
            continue;
        }
        for (mode, action) in [("warn", "Warn"), ("audit", "Audit")] {
            let mut copy = policy.clone();
            let name = format!("{}-{mode}", policy["metadata"]["name"].as_str().unwrap());
            copy["metadata"]["name"] = json!(name);
            copy["metadata"]["labels"]["pod-security.kanon.dev/mode"] = json!(mode);
            copy["spec"]["validationActions"] = json!([action]);
            per_mode.push(copy);
        }
    }
    let mut validations = 0;
    for mut policy in per_mode {
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
            if spec["validationActions"] != json!(["Warn"])
                && spec["validationActions"] != json!(["Audit"])
            {
                spec["validationActions"] = json!(["Warn", "Audit"]);
            }
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
    let pods: Vec<Value> = namespaces.iter().map(|ns| privileged_pod(ns)).collect();
    let namespaces: Vec<Value> = namespaces.iter().map(|ns| namespace(ns, &[])).collect();
    judge(values, &pods, &namespaces)
        .into_iter()
        .map(|v| (v.allowed, v.messages, v.warnings))
        .collect()
}

/// A Namespace as kube-apiserver labels it, with `labels` besides.
fn namespace(name: &str, labels: &[(&str, &str)]) -> Value {
    let mut all = serde_json::Map::new();
    all.insert("kubernetes.io/metadata.name".into(), json!(name));
    for (key, value) in labels {
        all.insert((*key).into(), json!(value));
    }
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": all}})
}

/// One verdict of `kanon apply`.
#[derive(Debug)]
struct Verdict {
    allowed: bool,
    messages: Vec<String>,
    warnings: Vec<String>,
    audit_annotations: usize,
}

/// `kanon apply` of the policies `helm template` renders with `values` to `pods`, with
/// `namespaces` as the cluster's: each Pod's verdict. kanon must take the rendered policies
/// without a warning.
fn judge(values: &[&str], pods: &[Value], namespaces: &[Value]) -> Vec<Verdict> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let policies = dir.path().join("policies.yaml");
    std::fs::write(&policies, render(values)).expect("writing the rendered policies");
    let documents = |values: &[Value]| -> String {
        let texts: Vec<String> = values.iter().map(Value::to_string).collect();
        texts.join("\n---\n")
    };
    let resources = dir.path().join("pods.yaml");
    std::fs::write(&resources, documents(pods)).expect("writing the Pods");
    let namespaces_file = dir.path().join("namespaces.yaml");
    std::fs::write(&namespaces_file, documents(namespaces)).expect("writing the Namespaces");
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
        "kanon apply refused the rendered policies ({values:?}): {stderr}"
    );
    assert!(!stderr.contains("warning:"), "{values:?}: {stderr}");
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
        .map(|v| Verdict {
            allowed: v["allowed"] == Value::Bool(true),
            messages: texts(&v["messages"]),
            warnings: texts(&v["warnings"]),
            audit_annotations: v["auditAnnotations"].as_object().map_or(0, |a| a.len()),
        })
        .collect()
}

/// What the privileged check says of `privileged_pod`, in `mode`.
fn privileged(mode: &str) -> String {
    format!(
        "ClusterValidatePolicy/pss-baseline-privileged-{mode}: privileged (container \"app\" must not set securityContext.privileged=true)"
    )
}

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
        warnings.iter().any(|w| w.contains(&privileged("warn"))),
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
    assert_eq!(messages, &[privileged("enforce")]);
    assert!(warnings.is_empty(), "{warnings:?}");
}

/// Pod Security admission's reading of a Namespace's labels (`PolicyToEvaluate` in
/// k8s.io/pod-security-admission), for one mode: the level (0 privileged, 1 baseline, 2
/// restricted) that mode applies there, given the chart's level for each mode (`None`: the mode
/// is off, and kanon installs nothing for it).
fn psa_level(mode: &str, defaults: &BTreeMap<&str, Option<u8>>, labels: &[(&str, &str)]) -> u8 {
    let Some(default) = defaults[mode] else {
        return 0;
    };
    let parse = |value: &str| match value {
        "privileged" => Some(0),
        "baseline" => Some(1),
        "restricted" => Some(2),
        _ => None,
    };
    let label = |mode: &str| {
        labels
            .iter()
            .find(|(k, _)| *k == format!("pod-security.kubernetes.io/{mode}"))
            .map(|(_, v)| *v)
    };
    match (mode, label(mode)) {
        // An invalid enforce level fails closed; warn and audit fail open.
        ("enforce", Some(value)) => parse(value).unwrap_or(2),
        (_, Some(value)) => parse(value).unwrap_or(0),
        // Without a warn label, warn follows an enforce label that is stricter.
        ("warn", None) => match label("enforce").and_then(parse) {
            Some(enforce) if enforce > default => enforce,
            _ => default,
        },
        (_, None) => default,
    }
}

#[test]
fn every_pod_security_combination_judges_pods_as_pod_security_admission_would() {
    // The library's own fixture Pods: one restricted admits, one only baseline admits, one
    // baseline refuses; with the level each needs.
    let text = std::fs::read_to_string(repo().join("library/tests/pod-security/pods.yaml"))
        .expect("the library's test Pods");
    let fixtures: Vec<(Value, u8)> = parse(&text, "pods.yaml")
        .into_iter()
        .filter_map(|pod| {
            let needs = match pod["metadata"]["name"].as_str()? {
                "locked-down" => 3,
                "plain" => 2,
                "host-admin" => 1,
                _ => return None,
            };
            Some((pod, needs))
        })
        .collect();
    assert_eq!(fixtures.len(), 3);
    let label_sets: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("unlabelled", vec![]),
        (
            "privileged",
            vec![
                ("pod-security.kubernetes.io/enforce", "privileged"),
                ("pod-security.kubernetes.io/warn", "privileged"),
                ("pod-security.kubernetes.io/audit", "privileged"),
            ],
        ),
        (
            "enforce-restricted",
            vec![("pod-security.kubernetes.io/enforce", "restricted")],
        ),
        (
            "enforce-baseline",
            vec![("pod-security.kubernetes.io/enforce", "baseline")],
        ),
        (
            "split",
            vec![
                ("pod-security.kubernetes.io/enforce", "baseline"),
                ("pod-security.kubernetes.io/warn", "restricted"),
                ("pod-security.kubernetes.io/audit", "privileged"),
            ],
        ),
        (
            "invalid",
            vec![
                ("pod-security.kubernetes.io/enforce", "strict"),
                ("pod-security.kubernetes.io/warn", "strict"),
                ("pod-security.kubernetes.io/audit", "strict"),
            ],
        ),
        (
            "audit-baseline",
            vec![
                ("pod-security.kubernetes.io/audit", "baseline"),
                ("pod-security.kubernetes.io/enforce", "privileged"),
            ],
        ),
    ];
    let namespaces: Vec<Value> = label_sets
        .iter()
        .map(|(name, labels)| namespace(name, labels))
        .collect();
    let mut pods = Vec::new();
    for (name, _) in &label_sets {
        for (pod, _) in &fixtures {
            let mut pod = pod.clone();
            pod["metadata"]["namespace"] = json!(name);
            pods.push(pod);
        }
    }
    let level = |text: &str| match text {
        "baseline" => Some(1),
        "restricted" => Some(2),
        _ => None,
    };
    let mut problems = Vec::new();
    let mut combinations = 0;
    for enforce in ["none", "baseline", "restricted"] {
        for warn in ["none", "baseline", "restricted"] {
            for audit in ["none", "baseline", "restricted"] {
                let values = [
                    format!("library.podSecurity.enforce={enforce}"),
                    format!("library.podSecurity.warn={warn}"),
                    format!("library.podSecurity.audit={audit}"),
                ];
                let values: Vec<&str> = values.iter().map(String::as_str).collect();
                if (enforce, warn, audit) == ("none", "none", "none") {
                    assert_eq!(render(&values).trim(), "", "nothing is installed");
                    continue;
                }
                combinations += 1;
                let defaults = BTreeMap::from([
                    ("enforce", level(enforce)),
                    ("warn", level(warn)),
                    ("audit", level(audit)),
                ]);
                let verdicts = judge(&values, &pods, &namespaces);
                let mut verdicts = verdicts.iter();
                for (name, labels) in &label_sets {
                    for (pod, needs) in &fixtures {
                        let verdict = verdicts.next().expect("a verdict per Pod");
                        // A Pod fails a level it does not reach.
                        let fails = |mode| psa_level(mode, &defaults, labels) >= *needs;
                        let expected = (!fails("enforce"), fails("warn"), fails("audit"));
                        let found = (
                            verdict.allowed,
                            !verdict.warnings.is_empty(),
                            verdict.audit_annotations > 0,
                        );
                        if expected != found {
                            problems.push(format!(
                                "enforce {enforce}, warn {warn}, audit {audit}: Pod {} in Namespace {name}: (allowed, warned, audited) expected {expected:?}, found {found:?}: {verdict:?}",
                                pod["metadata"]["name"]
                            ));
                        }
                    }
                }
            }
        }
    }
    assert_eq!(combinations, 26);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_usual_rollout_renders_distinct_policies_named_by_level_and_mode() {
    let rendered = render(&[
        "library.podSecurity.enforce=baseline",
        "library.podSecurity.warn=restricted",
        "library.podSecurity.audit=restricted",
        "library.podSecurity.exemptions.usernames={system:serviceaccount:ci:deployer}",
        "library.podSecurity.exemptions.runtimeClasses={kata}",
        "library.podSecurity.exemptions.namespaces={kube-system}",
    ]);
    let policies = parse(&rendered, "helm template");
    let mut names: Vec<&str> = policies
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str())
        .collect();
    let count = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), count, "every name once");
    for mode in ["enforce", "warn", "audit"] {
        let of_mode: Vec<&&str> = names
            .iter()
            .filter(|n| n.ends_with(&format!("-{mode}")))
            .collect();
        // Every check of either level, once: the restricted level reaches any Namespace
        // labelled so.
        assert_eq!(of_mode.len(), 19, "{mode}: {of_mode:?}");
    }
    assert!(names.contains(&"pss-baseline-privileged-enforce"));
    assert!(names.contains(&"pss-restricted-run-as-non-root-warn"));
    for policy in &policies {
        let name = policy["metadata"]["name"].as_str().unwrap();
        let conditions = &policy["spec"]["validateRules"][0]["cel"]["matchConditions"];
        let named: Vec<&str> = conditions
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(
            named,
            [
                "pod-security-level",
                "pod-security-exempt-usernames",
                "pod-security-exempt-runtime-classes"
            ],
            "{name}"
        );
        let expressions = policy["spec"]["namespaceSelector"]["matchExpressions"]
            .as_array()
            .unwrap();
        assert!(
            expressions.contains(&json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]})),
            "{name}"
        );
    }
    // Exempt users and runtime classes are admitted where others are refused.
    let host_admin = |name: &str, runtime: Option<&str>| {
        let mut pod = privileged_pod("apps");
        pod["metadata"]["name"] = json!(name);
        if let Some(runtime) = runtime {
            pod["spec"]["runtimeClassName"] = json!(runtime);
        }
        pod
    };
    let verdicts = judge(
        &[
            "library.podSecurity.enforce=baseline",
            "library.podSecurity.exemptions.runtimeClasses={kata}",
        ],
        &[
            host_admin("plain", None),
            host_admin("kata", Some("kata")),
            host_admin("runc", Some("runc")),
        ],
        &[namespace("apps", &[])],
    );
    let allowed: Vec<bool> = verdicts.iter().map(|v| v.allowed).collect();
    assert_eq!(allowed, [false, true, false]);
}
