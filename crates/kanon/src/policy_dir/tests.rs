//! The policy directory of `kanon serve --policies DIR`: loading, and watching for changes.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kanon_engine::PolicySet;
use kanon_webhook::{Metrics, PolicyState, Publisher};

use super::watch_directory;
use crate::inputs::load_directory;

const INTERVAL: Duration = Duration::from_millis(20);
const DEADLINE: Duration = Duration::from_secs(10);

fn label_policy(name: &str, value: &str) -> String {
    format!(
        "apiVersion: policy.kanon.dev/v1alpha1\nkind: ClusterOverridePolicy\nmetadata:\n  name: {name}\nspec:\n  resourceSelectors:\n  - apiVersion: v1\n    kind: Pod\n  overrideRules:\n  - overriders:\n      plaintext:\n      - op: add\n        path: /metadata/labels/team\n        value: {value}\n"
    )
}

/// A policy that parses but does not compile: an unknown plaintext operation.
fn invalid_policy(name: &str) -> String {
    format!(
        "apiVersion: policy.kanon.dev/v1alpha1\nkind: ClusterOverridePolicy\nmetadata:\n  name: {name}\nspec:\n  resourceSelectors:\n  - apiVersion: v1\n    kind: Pod\n  overrideRules:\n  - overriders:\n      plaintext:\n      - op: frobnicate\n        path: /metadata/labels/team\n        value: x\n"
    )
}

fn label_policy_json(name: &str) -> String {
    serde_json::json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterOverridePolicy",
        "metadata": {"name": name},
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "overrideRules": [{"overriders": {"plaintext": [
                {"op": "add", "path": "/metadata/labels/team", "value": "x"}
            ]}}]
        }
    })
    .to_string()
}

const BAD_YAML: &str = "apiVersion: policy.kanon.dev/v1alpha1\nkind: [unclosed\n";

/// Writes `dir/name` whole (through a hidden file and a rename, as editors and ConfigMap
/// updates do), so that a poll never sees it half-written.
fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    let parent = path.parent().unwrap();
    std::fs::create_dir_all(parent).unwrap();
    let temp = parent.join(format!(
        ".{}.tmp",
        path.file_name().unwrap().to_str().unwrap()
    ));
    std::fs::write(&temp, text).unwrap();
    std::fs::rename(&temp, &path).unwrap();
}

fn names(set: &PolicySet) -> Vec<String> {
    set.policies().iter().map(|p| p.id.to_string()).collect()
}

fn reload_failures(metrics: &Metrics) -> u64 {
    let text = metrics.encode();
    text.lines()
        .find_map(|line| {
            line.strip_prefix(r#"kanon_policy_reload_failures_total{source="directory"} "#)
        })
        .map_or(0, |value| value.parse().unwrap())
}

fn gauge(metrics: &Metrics, name: &str) -> f64 {
    let text = metrics.encode();
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .parse()
        .unwrap()
}

/// Waits until `check` holds, or fails after [`DEADLINE`].
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits for `generation` to move past `after`, and returns it.
async fn next_generation(state: &PolicyState, after: u64) -> u64 {
    eventually(&format!("a generation after {after}"), || {
        state.generation() > after
    })
    .await;
    state.generation()
}

struct Watch {
    state: Arc<PolicyState>,
    metrics: Arc<Metrics>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn watch(dir: &Path) -> Watch {
    let state = PolicyState::new();
    let metrics = Metrics::new();
    let publisher = Publisher::new(state.clone(), metrics.clone(), "directory");
    let task = tokio::spawn(watch_directory(
        dir.to_path_buf(),
        Arc::new(publisher),
        INTERVAL,
    ));
    Watch {
        state,
        metrics,
        task,
    }
}

#[test]
fn load_directory_reads_nested_files_in_name_order_and_skips_hidden_ones() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "b.yaml", &label_policy("b", "x"));
    write(
        dir.path(),
        "a.yml",
        &format!(
            "{}---\n{}",
            label_policy("a1", "x"),
            label_policy("a2", "x")
        ),
    );
    write(dir.path(), "sub/c.json", &label_policy_json("c"));
    write(dir.path(), "notes.txt", "not a policy");
    // A mounted ConfigMap's hidden copies.
    write(dir.path(), "..data/b.yaml", &label_policy("b", "x"));
    write(dir.path(), ".hidden.yaml", BAD_YAML);
    let set = load_directory(dir.path()).unwrap();
    let mut found = names(&set);
    found.sort();
    assert_eq!(
        found,
        [
            "ClusterOverridePolicy/a1",
            "ClusterOverridePolicy/a2",
            "ClusterOverridePolicy/b",
            "ClusterOverridePolicy/c"
        ]
    );
}

#[test]
fn load_directory_reports_every_problem_by_file() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a-good.yaml", &label_policy("good", "x"));
    write(dir.path(), "b-broken.yaml", BAD_YAML);
    write(dir.path(), "c-invalid.yaml", &invalid_policy("invalid"));
    write(
        dir.path(),
        "d-other.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
    );
    let problems = load_directory(dir.path()).unwrap_err();
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(problems[0].contains("b-broken.yaml"), "{problems:#?}");
    assert!(problems[1].contains("c-invalid.yaml"), "{problems:#?}");
    assert!(
        problems[1].contains("ClusterOverridePolicy/invalid is invalid"),
        "{problems:#?}"
    );
    assert!(
        problems[1].contains("spec.overrideRules[0].overriders.plaintext[0]"),
        "{problems:#?}"
    );
    assert!(problems[2].contains("d-other.yaml"), "{problems:#?}");
    assert!(
        problems[2].contains("is not a policy kanon reads"),
        "{problems:#?}"
    );
}

#[test]
fn load_directory_of_an_empty_directory_is_an_empty_set() {
    let dir = tempfile::tempdir().unwrap();
    assert!(load_directory(dir.path()).unwrap().is_empty());
    let missing = dir.path().join("missing");
    let problems = load_directory(&missing).unwrap_err();
    assert_eq!(problems.len(), 1);
    assert!(problems[0].contains("missing"), "{problems:?}");
}

#[test]
fn duplicate_policies_across_files_are_a_problem() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", &label_policy("same", "x"));
    write(dir.path(), "b.yaml", &label_policy("same", "y"));
    let problems = load_directory(dir.path()).unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
}

#[tokio::test]
async fn initial_load_puts_the_directory_in_force() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", &label_policy("a", "x"));
    write(dir.path(), "b.yaml", &label_policy("b", "x"));
    let w = watch(dir.path());
    next_generation(&w.state, 0).await;
    assert!(w.state.is_ready());
    assert_eq!(
        names(&w.state.current()),
        ["ClusterOverridePolicy/a", "ClusterOverridePolicy/b"]
    );
    assert_eq!(gauge(&w.metrics, "kanon_policies"), 2.0);
    assert_eq!(gauge(&w.metrics, "kanon_ready"), 1.0);
    assert_eq!(reload_failures(&w.metrics), 0);
    // Nothing changes: no reload.
    tokio::time::sleep(INTERVAL * 5).await;
    assert_eq!(w.state.generation(), 1);
}

#[tokio::test]
async fn an_empty_directory_is_ready_with_no_policies() {
    let dir = tempfile::tempdir().unwrap();
    let w = watch(dir.path());
    next_generation(&w.state, 0).await;
    assert!(w.state.is_ready());
    assert!(w.state.current().is_empty());
    assert_eq!(gauge(&w.metrics, "kanon_ready"), 1.0);
}

#[tokio::test]
async fn changes_are_picked_up_and_bad_sets_keep_the_last_good_one() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", &label_policy("a", "x"));
    let w = watch(dir.path());
    let generation = next_generation(&w.state, 0).await;
    assert_eq!(names(&w.state.current()), ["ClusterOverridePolicy/a"]);

    // A changed file is picked up.
    write(dir.path(), "a.yaml", &label_policy("a-renamed", "x"));
    let generation = next_generation(&w.state, generation).await;
    assert_eq!(
        names(&w.state.current()),
        ["ClusterOverridePolicy/a-renamed"]
    );

    // And a new one.
    write(dir.path(), "b.yaml", &label_policy("b", "x"));
    let generation = next_generation(&w.state, generation).await;
    assert_eq!(
        names(&w.state.current()),
        ["ClusterOverridePolicy/a-renamed", "ClusterOverridePolicy/b"]
    );

    // Bad YAML: counted, and the last good set keeps serving.
    write(dir.path(), "b.yaml", BAD_YAML);
    eventually("a reload failure", || reload_failures(&w.metrics) == 1).await;
    // An invalid policy: counted too.
    write(dir.path(), "b.yaml", &invalid_policy("b"));
    eventually("a second reload failure", || {
        reload_failures(&w.metrics) == 2
    })
    .await;
    assert_eq!(w.state.generation(), generation);
    assert!(w.state.is_ready());
    assert_eq!(w.state.current().len(), 2);
    assert_eq!(gauge(&w.metrics, "kanon_ready"), 1.0);

    // Fixed: back in step.
    write(dir.path(), "b.yaml", &label_policy("b2", "fixed"));
    let generation = next_generation(&w.state, generation).await;
    assert_eq!(
        names(&w.state.current()),
        [
            "ClusterOverridePolicy/a-renamed",
            "ClusterOverridePolicy/b2"
        ]
    );

    // A deleted file takes its policy away.
    std::fs::remove_file(dir.path().join("a.yaml")).unwrap();
    next_generation(&w.state, generation).await;
    assert_eq!(names(&w.state.current()), ["ClusterOverridePolicy/b2"]);
    assert_eq!(gauge(&w.metrics, "kanon_policies"), 1.0);
    assert_eq!(reload_failures(&w.metrics), 2);
}

#[tokio::test]
async fn a_start_that_never_loads_stays_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", &label_policy("a", "x"));
    write(dir.path(), "b.yaml", BAD_YAML);
    let w = watch(dir.path());
    eventually("the first failure", || reload_failures(&w.metrics) == 1).await;
    tokio::time::sleep(INTERVAL * 5).await;
    assert!(!w.state.is_ready());
    assert_eq!(w.state.generation(), 0);
    assert!(w.state.current().is_empty());
    assert_eq!(gauge(&w.metrics, "kanon_ready"), 0.0);
    // Unchanged files are not retried (nor the failure counted again).
    assert_eq!(reload_failures(&w.metrics), 1);

    // Still broken differently: another failure, still not ready.
    write(dir.path(), "b.yaml", &invalid_policy("b"));
    eventually("the second failure", || reload_failures(&w.metrics) == 2).await;
    assert!(!w.state.is_ready());

    // Fixed: ready.
    std::fs::remove_file(dir.path().join("b.yaml")).unwrap();
    next_generation(&w.state, 0).await;
    assert!(w.state.is_ready());
    assert_eq!(names(&w.state.current()), ["ClusterOverridePolicy/a"]);
}

#[tokio::test]
async fn a_missing_directory_is_not_ready_until_it_appears() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("policies");
    let w = watch(&dir);
    eventually("the first failure", || reload_failures(&w.metrics) == 1).await;
    assert!(!w.state.is_ready());
    write(&dir, "a.yaml", &label_policy("a", "x"));
    next_generation(&w.state, 0).await;
    assert_eq!(names(&w.state.current()), ["ClusterOverridePolicy/a"]);
}

#[test]
fn a_policy_file_larger_than_64_mib_is_refused_by_name_without_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", &label_policy("a", "x"));
    // Sparse: the size is known before a byte is read.
    let huge = dir.path().join("huge.yaml");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(300 << 20)
        .unwrap();
    let error = crate::inputs::read_documents(&[dir.path().to_path_buf()])
        .map(|docs| docs.len())
        .unwrap_err()
        .to_string();
    assert_eq!(
        error,
        format!(
            "{}: larger than 64 MiB, the most kanon reads from one file (split it into several files)",
            huge.display()
        )
    );
}
