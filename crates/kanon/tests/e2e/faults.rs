//! Faults: kanon stopped (the apiserver applies each webhook's failure policy), and the
//! apiserver restarted (kanon keeps serving its last policies and its watches come back by
//! themselves).

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::Scenario;
use crate::admission::{add_label, install, pod, pod_create_review, policy};
use crate::env::{Env, IGNORE_LABEL};

pub const SCENARIOS: &[Scenario] = &[
    (
        "faults::kanon_stopped_the_apiserver_applies_the_failure_policy",
        kanon_stopped_the_apiserver_applies_the_failure_policy,
    ),
    (
        "faults::apiserver_restarted_kanon_serves_and_recovers",
        apiserver_restarted_kanon_serves_and_recovers,
    ),
];

fn label(object: &Value, key: &str) -> Option<String> {
    object
        .pointer(&format!("/metadata/labels/{key}"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn kanon_stopped_the_apiserver_applies_the_failure_policy(env: &mut Env) {
    let (strict, lenient) = ("fault-fail", "fault-ignore");
    env.namespace(strict, json!({}));
    env.namespace(lenient, json!({IGNORE_LABEL: "ignore"}));
    install(
        env,
        &policy(
            "ClusterOverridePolicy",
            None,
            "fault-mark",
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": strict},
                                         {"apiVersion": "v1", "kind": "Pod", "namespace": lenient}],
                   "overrideRules": [add_label("marked", "yes")]}),
        ),
    );
    let marked = env
        .create(&pod(lenient, "before", json!({})))
        .expect("admitted");
    assert_eq!(label(&marked, "marked").as_deref(), Some("yes"));

    env.kanon.stop();
    // Fail: nothing gets in unchecked.
    let refused = env
        .create(&pod(strict, "while-down", json!({})))
        .expect_err("a Fail webhook that cannot be called denies");
    assert!(refused.contains("failed calling webhook"), "{refused}");
    assert!(
        env.get("v1", "Pod", "pods", Some(strict), "while-down")
            .is_none()
    );
    // Ignore: admitted, unchanged.
    let admitted = env
        .create(&pod(lenient, "while-down", json!({})))
        .expect("an Ignore webhook that cannot be called admits");
    assert_eq!(label(&admitted, "marked"), None, "{admitted}");

    env.kanon.start();
    let marked = env
        .create(&pod(strict, "after", json!({})))
        .expect("admitted again");
    assert_eq!(label(&marked, "marked").as_deref(), Some("yes"));
    env.delete_policy("ClusterOverridePolicy", None, "fault-mark");
}

fn apiserver_restarted_kanon_serves_and_recovers(env: &mut Env) {
    let ns = "fault-restart";
    env.namespace(ns, json!({}));
    install(
        env,
        &policy(
            "ClusterOverridePolicy",
            None,
            "fault-before",
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": ns}],
                   "overrideRules": [add_label("before", "yes")]}),
        ),
    );
    env.cluster
        .control_plane_mut()
        .stop_apiserver()
        .expect("the apiserver stops");
    // kanon stays ready and keeps answering with the policies it had.
    assert_eq!(env.kanon.get("/readyz"), "200");
    let body = pod_create_review(&pod(ns, "direct", json!({})), "during-the-outage").to_string();
    let out = Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "5",
            "-H",
            "Content-Type: application/json",
        ])
        .arg("--cacert")
        .arg(env.kanon.cert_dir.join("ca.crt"))
        .args(["--data-binary", &body])
        .arg(format!(
            "https://127.0.0.1:{}/mutate?timeout=5s",
            env.kanon.port
        ))
        .output()
        .expect("curl runs");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(answer["response"]["uid"], "during-the-outage", "{answer}");
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert_eq!(answer["response"]["patchType"], "JSONPatch", "{answer}");
    // A replica that starts now cannot list anything: alive, but not ready.
    let mut late = env.replica("late-replica");
    late.spawn();
    env.wait_for(
        "the late replica's /healthz",
        Duration::from_secs(20),
        || late.get("/healthz") == "200",
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        late.get("/readyz"),
        "503",
        "ready without having listed anything"
    );

    let restarted = Instant::now();
    env.cluster
        .control_plane_mut()
        .start_apiserver()
        .expect("the apiserver starts again");
    late.wait_ready();
    late.stop();
    // A policy written after the restart takes effect without restarting kanon: its watches
    // came back by themselves.
    install(
        env,
        &policy(
            "ClusterOverridePolicy",
            None,
            "fault-after",
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": ns}],
                   "overrideRules": [add_label("after", "yes")]}),
        ),
    );
    let created = env.create(&pod(ns, "p", json!({}))).expect("admitted");
    assert_eq!(
        label(&created, "before").as_deref(),
        Some("yes"),
        "{created}"
    );
    assert_eq!(
        label(&created, "after").as_deref(),
        Some("yes"),
        "{created}"
    );
    eprintln!(
        "e2e: apiserver restart -> a new policy in force: {:.1} s",
        restarted.elapsed().as_secs_f64()
    );
    let metrics = env.kanon.metrics();
    assert!(
        metrics.contains("kanon_policy_watch_errors_total"),
        "the outage was not seen:\n{metrics}"
    );
    env.delete_policy("ClusterOverridePolicy", None, "fault-before");
    env.delete_policy("ClusterOverridePolicy", None, "fault-after");
}
