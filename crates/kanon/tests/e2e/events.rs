//! Kubernetes Events (`kanon serve --events`) against the real apiserver: denials are Events on
//! the policy, a repeated denial one Event whose `series.count` counts it, distinct denials
//! past the policy's share one combined Event, so that the Events' counts add up to the
//! denials while their number stays small; a dry run writes none; an existing object the audit
//! finds failing gets one Event regarding it, its count updated by the later audits.

use std::time::Duration;

use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};

use crate::Scenario;
use crate::audit::{SYSTEM, auditor};
use crate::env::{Env, Restarted};

pub const SCENARIOS: &[Scenario] = &[
    (
        "events::denials_are_a_few_events_on_the_policy_whose_counts_add_up",
        denials_are_a_few_events_on_the_policy_whose_counts_add_up,
    ),
    (
        "events::an_object_the_audit_finds_failing_has_one_event",
        an_object_the_audit_finds_failing_has_one_event,
    ),
];

const SHOP: &str = "events-shop";
const AUDITED: &str = "events-audited";
const POLICY: &str = "events-no-debug";

/// ConfigMaps in `namespaces` may not say `debug: "true"`.
fn policy(namespaces: &[&str]) -> Value {
    let selectors: Vec<Value> = namespaces
        .iter()
        .map(|ns| json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": ns}))
        .collect();
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterValidatePolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "resourceSelectors": selectors,
            "validateRules": [{
                "name": "no-debug",
                "targetOperations": ["CREATE", "UPDATE"],
                "cel": {"validations": [{
                    "expression": "!has(object.data) || !('debug' in object.data) || object.data['debug'] != 'true'",
                    "message": "debug must be off",
                }]},
            }],
        },
    })
}

fn config_map(namespace: &str, name: &str, debug: bool) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"debug": debug.to_string()},
    })
}

/// kanon's Events in `namespace` regarding an object named `regarding`.
fn events(env: &Env, namespace: &str, regarding: &str) -> Vec<Value> {
    let api = env.api("events.k8s.io/v1", "Event", "events", Some(namespace));
    let list = env
        .runtime
        .block_on(api.list(&ListParams::default()))
        .expect("listing Events");
    list.items
        .into_iter()
        .map(|event| serde_json::to_value(event).expect("JSON"))
        .filter(|event| {
            event["reportingController"] == "kanon.dev/kanon"
                && event["regarding"]["name"] == regarding
        })
        .collect()
}

/// What an Event counts: its series' count, else one.
fn count(event: &Value) -> u64 {
    event["series"]["count"].as_u64().unwrap_or(1)
}

fn denials_are_a_few_events_on_the_policy_whose_counts_add_up(env: &mut Env) {
    env.namespace(SHOP, json!({}));
    let restarted = Restarted::with(env, &["--events=deny", "--events-series-interval", "1s"]);
    let env = &mut *restarted.env;
    env.apply_policy(&policy(&[SHOP]))
        .expect("the policy is written");
    let written = env.wait_policy_status("ClusterValidatePolicy", None, POLICY);
    let uid = written["metadata"]["uid"].clone();

    // The same create refused again and again (a controller retrying), then distinct ones.
    const REPEATED: u64 = 30;
    const DISTINCT: u64 = 40;
    for _ in 0..REPEATED {
        let refused = env.create(&config_map(SHOP, "bad", true));
        let message = refused.expect_err("refused");
        assert!(message.contains("debug must be off"), "{message}");
    }
    for i in 0..DISTINCT {
        env.create(&config_map(SHOP, &format!("bad-{i}"), true))
            .expect_err("refused");
    }
    // A dry run is refused alike, and writes no Event.
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    env.create_with(&config_map(SHOP, "dry", true), &dry_run)
        .expect_err("refused");

    // Every denial is counted, in a handful of Events: the repeated one's series, one Event
    // per distinct object within the policy's share, the rest in the combined Event.
    let mut found = Vec::new();
    env.wait_for(
        "the Events on the policy count every denial",
        Duration::from_secs(30),
        || {
            found = events(env, "default", POLICY);
            found.iter().map(count).sum::<u64>() == REPEATED + DISTINCT
        },
    );
    assert!(found.len() <= 15, "{} Events: {found:#?}", found.len());
    for event in &found {
        assert_eq!(event["type"], "Warning", "{event}");
        assert_eq!(event["reason"], "PolicyViolation", "{event}");
        assert_eq!(event["action"], "Denied", "{event}");
        assert_eq!(
            event["regarding"]["kind"], "ClusterValidatePolicy",
            "{event}"
        );
        assert_eq!(
            event["regarding"]["apiVersion"], "policy.kanon.dev/v1alpha1",
            "{event}"
        );
        assert_eq!(event["regarding"]["uid"], uid, "{event}");
        assert!(event["eventTime"].is_string(), "{event}");
        assert!(
            event["reportingInstance"]
                .as_str()
                .is_some_and(|i| !i.is_empty()),
            "{event}"
        );
    }
    let repeated: Vec<&Value> = found
        .iter()
        .filter(|e| e["related"]["name"] == "bad")
        .collect();
    let [repeated] = repeated.as_slice() else {
        panic!("one Event for the repeated denial: {found:#?}")
    };
    assert_eq!(count(repeated), REPEATED, "{repeated:#?}");
    assert_eq!(repeated["related"]["kind"], "ConfigMap");
    assert_eq!(repeated["related"]["namespace"], SHOP);
    assert_eq!(
        repeated["note"],
        format!("CREATE ConfigMap {SHOP}/bad: debug must be off")
    );
    assert!(repeated["series"]["lastObservedTime"].is_string());
    let combined: Vec<&Value> = found.iter().filter(|e| e["related"].is_null()).collect();
    let [combined] = combined.as_slice() else {
        panic!("one combined Event past the policy's share: {found:#?}")
    };
    assert!(
        combined["note"]
            .as_str()
            .is_some_and(|n| n.starts_with("(combined from similar events)")),
        "{combined:#?}"
    );
    assert!(
        found.iter().all(|e| e["related"]["name"] != "dry"),
        "no Event for a dry run: {found:#?}"
    );
    let metrics = env.kanon.metrics();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("kanon_events_written_total{action=\"denied\"}")),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("kanon_events_aggregated_total{action=\"denied\"}")),
        "{metrics}"
    );
    env.delete_policy("ClusterValidatePolicy", None, POLICY);
}

fn an_object_the_audit_finds_failing_has_one_event(env: &mut Env) {
    for namespace in [SYSTEM, AUDITED] {
        env.namespace(namespace, json!({}));
    }
    // Before the policy exists: admitted.
    for object in [
        config_map(AUDITED, "bad", true),
        config_map(AUDITED, "good", false),
    ] {
        env.apply(&object);
    }
    let mut auditor = auditor(
        env,
        "events-auditor",
        &[
            "--audit-interval",
            "2s",
            "--events=audit",
            "--events-series-interval",
            "1s",
        ],
    );
    auditor.start();
    env.apply_policy(&policy(&[AUDITED]))
        .expect("the policy is written");
    let written = env.wait_policy_status("ClusterValidatePolicy", None, POLICY);
    let policy_uid = written["metadata"]["uid"].clone();
    let bad_uid = env
        .get("v1", "ConfigMap", "configmaps", Some(AUDITED), "bad")
        .expect("the ConfigMap")["metadata"]["uid"]
        .clone();

    // The first audit writes the Event, the later ones count into it.
    let mut found = Vec::new();
    env.wait_for(
        "an Event regarding the failing object, counted by a later audit",
        Duration::from_secs(60),
        || {
            found = events(env, AUDITED, "bad");
            found.iter().any(|e| count(e) >= 3)
        },
    );
    let [event] = found.as_slice() else {
        panic!(
            "one Event, however many audits: {found:#?}\nthe auditor's log:\n{}",
            auditor.log_tail(30)
        )
    };
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "PolicyViolation");
    assert_eq!(event["action"], "Audited");
    assert_eq!(event["regarding"]["kind"], "ConfigMap");
    assert_eq!(event["regarding"]["namespace"], AUDITED);
    assert_eq!(event["regarding"]["uid"], bad_uid);
    assert_eq!(event["related"]["kind"], "ClusterValidatePolicy");
    assert_eq!(event["related"]["name"], POLICY);
    assert_eq!(event["related"]["uid"], policy_uid);
    assert_eq!(
        event["note"],
        format!("ClusterValidatePolicy/{POLICY} (rule no-debug): debug must be off")
    );
    assert!(events(env, AUDITED, "good").is_empty());
    let metrics = auditor.metrics();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("kanon_events_written_total{action=\"audited\"} 1")),
        "{metrics}"
    );
    auditor.stop();
    env.delete_policy("ClusterValidatePolicy", None, POLICY);
}
