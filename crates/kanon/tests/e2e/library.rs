//! kanon's Pod Security library against kube-apiserver's own PodSecurity admission: every Pod of
//! Kubernetes' Pod Security fixtures (Go module `k8s.io/pod-security-admission` v0.35.8) and of
//! the library's suites is created (server-side dry run) in a namespace labelled
//! `pod-security.kubernetes.io/enforce=<level>`, and judged by `kanon apply` with
//! `library/pod-security/<level>/` as the apiserver's admission saw it (the same dry run in a
//! namespace that enforces nothing: defaults applied, AppArmor annotations copied to fields). Both must agree on the verdict, and a denial must name the
//! same checks with the same details: the apiserver lists them after
//! `violates PodSecurity "<level>:latest": `, kanon one per policy after the policy's name.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::Scenario;
use crate::env::{Env, IGNORE_LABEL, documents, repo, text};

pub const SCENARIOS: &[Scenario] = &[
    (
        "library::pod_security_agrees_with_the_apiservers_pod_security_admission",
        pod_security_agrees_with_the_apiservers_pod_security_admission,
    ),
    (
        "library::the_charts_modes_read_namespace_labels_as_the_apiserver_does",
        the_charts_modes_read_namespace_labels_as_the_apiserver_does,
    ),
];

const PSA_MODULE: &str = "k8s.io/pod-security-admission@v0.35.8";
const LEVELS: [&str; 2] = ["baseline", "restricted"];

/// A verdict: `None` when admitted, else the checks' details (`privileged (container "a" ...)`).
type Verdict = Option<Vec<String>>;

/// Every Pod to try, by a name unique across the fixture directories.
fn pods() -> BTreeMap<String, Value> {
    let module = kanon_control_plane::go_module(PSA_MODULE)
        .unwrap_or_else(|e| panic!("fetching Pod Security's fixtures: {e:#}"));
    let mut pods = BTreeMap::new();
    let mut sources: Vec<(String, std::path::PathBuf)> = Vec::new();
    for level in LEVELS {
        for verdict in ["pass", "fail"] {
            let dir = module.join(format!("test/testdata/{level}/v1.35/{verdict}"));
            for entry in std::fs::read_dir(&dir).expect("the fixtures") {
                let path = entry.expect("an entry").path();
                sources.push((format!("{level}-{verdict}-"), path));
            }
        }
    }
    sources.push((
        "library-".to_owned(),
        repo().join("library/tests/pod-security/pods.yaml"),
    ));
    for (prefix, path) in sources {
        for mut pod in documents(&path) {
            let name = pod["metadata"]["name"].as_str().unwrap_or_default();
            // Fixture names carry `_`, which a Pod's name may not.
            let name = format!("{prefix}{}", name.replace('_', "-"));
            pod["metadata"]["name"] = json!(name);
            // Created in the level's namespace.
            if let Some(metadata) = pod["metadata"].as_object_mut() {
                metadata.remove("namespace");
            }
            pods.insert(name, pod);
        }
    }
    pods
}

/// `kubectl create --dry-run=server` of `pod` in `namespace`: its admission, nothing stored.
fn dry_run_create(env: &Env, namespace: &str, pod: &Value) -> std::process::Output {
    env.kubectl_stdin(
        &[
            "create",
            "--dry-run=server",
            "-o",
            "name",
            "-n",
            namespace,
            "-f",
            "-",
        ],
        &pod.to_string(),
    )
}

/// What kube-apiserver's PodSecurity admission says of `pod` in `namespace`; `None` when the
/// apiserver refuses the Pod before PodSecurity sees it (a few fixtures are Pods the apiserver's
/// validation refuses, such as `procMount: Unmasked` without `hostUsers: false`).
fn apiserver_verdict(env: &Env, namespace: &str, level: &str, pod: &Value) -> Option<Verdict> {
    let out = dry_run_create(env, namespace, pod);
    if out.status.success() {
        return Some(None);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let marker = format!("violates PodSecurity \"{level}:latest\": ");
    match stderr.split_once(&marker) {
        Some((_, checks)) => Some(Some(vec![checks.trim_end().to_owned()])),
        None if stderr.contains(" is invalid: ") => None,
        None => panic!(
            "{}: refused for another reason: {}",
            pod["metadata"]["name"],
            text(&out)
        ),
    }
}

/// What `kanon apply` with the level's directory says of each Pod, by name.
fn kanon_verdicts(
    level: &str,
    pods: &BTreeMap<String, Value>,
    work: &Path,
) -> BTreeMap<String, Verdict> {
    let input = work.join(format!("pods-{level}"));
    std::fs::create_dir_all(&input).expect("a directory");
    for (name, pod) in pods {
        std::fs::write(input.join(format!("{name}.json")), pod.to_string()).expect("write a pod");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .arg("apply")
        .arg("--policy")
        .arg(repo().join("library/pod-security").join(level))
        .arg("--resource")
        .arg(&input)
        .args(["--output", "json"])
        .output()
        .expect("kanon runs");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "kanon apply failed: {}",
        text(&out)
    );
    let answers: Vec<Value> = serde_json::from_slice(&out.stdout).expect("kanon prints JSON");
    answers
        .iter()
        .map(|answer| {
            let name = answer["resource"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let verdict = (answer["allowed"] != Value::Bool(true)).then(|| {
                answer["messages"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(|m| {
                        m.split_once(": ")
                            .map_or(m, |(_, detail)| detail)
                            .to_owned()
                    })
                    .collect()
            });
            (name, verdict)
        })
        .collect()
}

/// Whether kanon's details are the apiserver's list: each of them in it, and nothing else (the
/// apiserver joins them with `, `, which the details themselves may contain).
fn same_checks(apiserver: &Verdict, kanon: &Verdict) -> bool {
    match (apiserver, kanon) {
        (None, None) => true,
        (Some(listed), Some(details)) => {
            let listed = &listed[0];
            let joined: usize = details.iter().map(String::len).sum::<usize>()
                + 2 * details.len().saturating_sub(1);
            details.iter().all(|d| listed.contains(d.as_str())) && joined == listed.len()
        }
        _ => false,
    }
}

/// Each Pod as the apiserver's admission sees it, from a dry run in `namespace` (which enforces
/// nothing); Pods the apiserver refuses as invalid are left out.
fn seen_by_admission(
    env: &Env,
    namespace: &str,
    pods: &BTreeMap<String, Value>,
) -> BTreeMap<String, Value> {
    pods.iter()
        .filter_map(|(name, pod)| {
            let out = env.kubectl_stdin(
                &[
                    "create",
                    "--dry-run=server",
                    "-o",
                    "json",
                    "-n",
                    namespace,
                    "-f",
                    "-",
                ],
                &pod.to_string(),
            );
            if !out.status.success() {
                assert!(
                    String::from_utf8_lossy(&out.stderr).contains(" is invalid: "),
                    "{name}: {}",
                    text(&out)
                );
                return None;
            }
            let mut seen: Value =
                serde_json::from_slice(&out.stdout).expect("kubectl prints the Pod");
            if let Some(metadata) = seen["metadata"].as_object_mut() {
                metadata.remove("namespace");
            }
            Some((name.clone(), seen))
        })
        .collect()
}

/// Waits for the default service account of `namespace`, which Pods need (the controller
/// manager makes it).
fn wait_for_service_account(env: &Env, namespace: &str) {
    let started = Instant::now();
    while !env
        .kubectl(&["get", "serviceaccount", "default", "-n", namespace])
        .status
        .success()
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no default service account in {namespace}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn pod_security_agrees_with_the_apiservers_pod_security_admission(env: &mut Env) {
    env.namespace("pss-none", json!({IGNORE_LABEL: "ignore"}));
    wait_for_service_account(env, "pss-none");
    let pods = pods();
    let seen = seen_by_admission(env, "pss-none", &pods);
    let work = tempfile::tempdir().expect("a work directory");
    let mut differences = Vec::new();
    let (mut compared, mut denied) = (0, 0);
    for level in LEVELS {
        let namespace = format!("pss-{level}");
        env.namespace(
            &namespace,
            json!({"pod-security.kubernetes.io/enforce": level, IGNORE_LABEL: "ignore"}),
        );
        wait_for_service_account(env, &namespace);
        let offline = kanon_verdicts(level, &seen, work.path());
        for name in seen.keys() {
            let pod = &pods[name];
            let Some(apiserver) = apiserver_verdict(env, &namespace, level, pod) else {
                continue;
            };
            compared += 1;
            let kanon = offline
                .get(name)
                .cloned()
                .unwrap_or_else(|| panic!("kanon did not judge {name}"));
            if apiserver.is_some() {
                denied += 1;
            }
            if !same_checks(&apiserver, &kanon) {
                differences.push(format!(
                    "{level} {name}:\n  apiserver: {apiserver:?}\n  kanon:     {kanon:?}"
                ));
            }
        }
        let _ = env.kubectl(&["delete", "namespace", &namespace, "--wait=false"]);
    }
    let _ = env.kubectl(&["delete", "namespace", "pss-none", "--wait=false"]);
    assert!(
        differences.is_empty(),
        "kanon's Pod Security library and kube-apiserver's PodSecurity admission disagree on {} of {} verdicts:\n{}",
        differences.len(),
        compared,
        differences.join("\n")
    );
    assert!(
        denied > 100,
        "only {denied} denials: the levels were not enforced"
    );
}

/// What a Pod meets in a Namespace: refused, and warned of (the apiserver's PodSecurity warnings,
/// kanon's warn-mode policies).
type Met = (bool, bool);

/// What kube-apiserver's PodSecurity admission does with `pod` in `namespace` (a server-side
/// dry run): refused, warned.
fn apiserver_meets(env: &Env, namespace: &str, pod: &Value) -> Met {
    let out = dry_run_create(env, namespace, pod);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        assert!(
            stderr.contains("violates PodSecurity"),
            "{}: refused for another reason: {}",
            pod["metadata"]["name"],
            text(&out)
        );
    }
    (
        !out.status.success(),
        stderr.contains("would violate PodSecurity"),
    )
}

/// The chart's Pod Security modes (`enforce`, `warn` and `audit` all at `baseline`, Namespace
/// labels read) and kube-apiserver's PodSecurity admission, on the library's fixture Pods in
/// Namespaces whose `pod-security.kubernetes.io/*` labels decide each mode's level (so that the
/// apiserver's defaults, privileged, and the chart's do not matter): both must refuse the same
/// Pods and warn of the same admitted ones, warn following enforce included.
fn the_charts_modes_read_namespace_labels_as_the_apiserver_does(env: &mut Env) {
    let rendered = env
        .control_plane()
        .helm()
        .args(["template", "kanon", "--namespace", "kanon-system"])
        .arg(repo().join("charts/kanon"))
        .args(["--show-only", "templates/library.yaml"])
        .args(["--set", "library.podSecurity.enforce=baseline"])
        .args(["--set", "library.podSecurity.warn=baseline"])
        .args(["--set", "library.podSecurity.audit=baseline"])
        .output()
        .expect("helm runs");
    assert!(
        rendered.status.success(),
        "helm template: {}",
        text(&rendered)
    );
    let work = tempfile::tempdir().expect("a work directory");
    let policies = work.path().join("policies.yaml");
    std::fs::write(&policies, &rendered.stdout).expect("writing the policies");

    const ENFORCE: &str = "pod-security.kubernetes.io/enforce";
    const WARN: &str = "pod-security.kubernetes.io/warn";
    // Each Namespace's labels; warn is absent only where enforce is at least baseline, where
    // the apiserver (default privileged) and the chart (default baseline) both warn at the
    // enforce level. (The apiserver refuses a Namespace with an invalid level, so invalid
    // values, which the chart reads as PodSecurity admission does, are held to its reading
    // offline: crates/kanon/tests/chart_library.rs.)
    let label_sets: [(&str, &[(&str, &str)]); 7] = [
        (
            "pss-labels-restricted",
            &[(ENFORCE, "restricted"), (WARN, "restricted")],
        ),
        (
            "pss-labels-split",
            &[(ENFORCE, "baseline"), (WARN, "restricted")],
        ),
        (
            "pss-labels-warn-only",
            &[(ENFORCE, "privileged"), (WARN, "baseline")],
        ),
        (
            "pss-labels-warn-restricted",
            &[(ENFORCE, "privileged"), (WARN, "restricted")],
        ),
        ("pss-labels-follow", &[(ENFORCE, "restricted")]),
        ("pss-labels-follow-baseline", &[(ENFORCE, "baseline")]),
        (
            "pss-labels-privileged",
            &[(ENFORCE, "privileged"), (WARN, "privileged")],
        ),
    ];
    let text_pods = std::fs::read_to_string(repo().join("library/tests/pod-security/pods.yaml"))
        .expect("the library's test Pods");
    let fixtures: Vec<Value> = kanon_engine::parse_documents(&text_pods, "pods.yaml", false)
        .expect("the library's test Pods parse")
        .into_iter()
        .filter(|pod| {
            matches!(
                pod["metadata"]["name"].as_str(),
                Some("locked-down" | "plain" | "host-admin")
            )
        })
        .collect();
    assert_eq!(fixtures.len(), 3);

    env.namespace("pss-labels-none", json!({IGNORE_LABEL: "ignore"}));
    wait_for_service_account(env, "pss-labels-none");
    let mut namespaces = Vec::new();
    let mut pods = Vec::new();
    let mut apiserver = Vec::new();
    for (name, labels) in label_sets {
        let mut all: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        all.insert(IGNORE_LABEL.to_owned(), json!("ignore"));
        env.namespace(name, Value::Object(all.clone()));
        wait_for_service_account(env, name);
        all.insert("kubernetes.io/metadata.name".to_owned(), json!(name));
        namespaces.push(json!({"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": name, "labels": all}}));
        for fixture in &fixtures {
            let mut pod = fixture.clone();
            pod["metadata"]["namespace"] = json!(name);
            apiserver.push(apiserver_meets(env, name, &pod));
            // kanon judges the Pod as admission saw it (defaulted, its token mounted).
            let mut unplaced = fixture.clone();
            if let Some(metadata) = unplaced["metadata"].as_object_mut() {
                metadata.remove("namespace");
            }
            let seen = seen_by_admission(
                env,
                "pss-labels-none",
                &BTreeMap::from([(String::new(), unplaced)]),
            );
            let mut seen = seen.into_values().next().expect("the Pod is valid");
            seen["metadata"]["namespace"] = json!(name);
            pods.push(seen);
        }
    }
    let write = |file: &str, values: &[Value]| {
        let texts: Vec<String> = values.iter().map(Value::to_string).collect();
        let path = work.path().join(file);
        std::fs::write(&path, texts.join("\n---\n")).expect("writing");
        path
    };
    let out = Command::new(env!("CARGO_BIN_EXE_kanon"))
        .arg("apply")
        .arg("--policy")
        .arg(&policies)
        .arg("--resource")
        .arg(write("pods.yaml", &pods))
        .arg("--context")
        .arg(write("namespaces.yaml", &namespaces))
        .args(["--no-defaults", "--output", "json"])
        .output()
        .expect("kanon runs");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "kanon apply: {}",
        text(&out)
    );
    let verdicts: Vec<Value> = serde_json::from_slice(&out.stdout).expect("kanon prints JSON");
    let mut differences = Vec::new();
    let (mut refused, mut warned) = (0, 0);
    for ((pod, verdict), expected) in pods.iter().zip(&verdicts).zip(&apiserver) {
        let refuses = verdict["allowed"] != Value::Bool(true);
        // PodSecurity admission leaves its warnings out of a refusal; kube-apiserver passes on
        // a webhook's warnings with its denial, so kanon's warn mode warns of a refused Pod too
        // (README, "Policy library"): compared where the Pod is admitted.
        let met: Met = (
            refuses,
            !refuses
                && verdict["warnings"]
                    .as_array()
                    .is_some_and(|w| !w.is_empty()),
        );
        refused += usize::from(expected.0);
        warned += usize::from(expected.1);
        if met != *expected {
            differences.push(format!(
                "Pod {} in {}: (refused, warned) apiserver {expected:?}, kanon {met:?}: {}",
                pod["metadata"]["name"], pod["metadata"]["namespace"], verdict
            ));
        }
    }
    for (name, _) in label_sets {
        let _ = env.kubectl(&["delete", "namespace", name, "--wait=false"]);
    }
    let _ = env.kubectl(&["delete", "namespace", "pss-labels-none", "--wait=false"]);
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    // Both refusals and warnings were met, in several Namespaces.
    assert!(
        refused >= 4 && warned >= 4,
        "refused {refused}, warned {warned}"
    );
}
