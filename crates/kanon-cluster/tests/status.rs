//! The status a policy should have, and when it needs writing.

use std::sync::Arc;

use kanon_cluster::policies::Entry;
use kanon_cluster::status::{desired_status, matches};
use kanon_engine::{FieldError, compile_document};
use serde_json::json;

fn ready_entry(generation: i64) -> Entry {
    let document = json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterOverridePolicy",
        "metadata": {"name": "labels"},
        "spec": {"overrideRules": [{"overriders": {"template": {
            "type": "labels", "operation": "add", "path": "team", "value": {"string": "a"}}}}]},
    });
    Entry {
        uid: "u".into(),
        generation: Some(generation),
        compiled: Some(Arc::new(compile_document(&document).unwrap())),
        errors: Vec::new(),
        warnings: Vec::new(),
        object: None,
        observed_status: None,
    }
}

#[test]
fn a_ready_policy_reports_its_generation_and_rendered_programs() {
    let status = desired_status(&ready_entry(3), None, "2026-11-23T10:00:00Z");
    assert_eq!(status["observedGeneration"], 3);
    assert_eq!(
        status["conditions"],
        json!([{"type": "Ready", "status": "True", "reason": "Compiled",
                "message": "the policy compiled and is in force",
                "lastTransitionTime": "2026-11-23T10:00:00Z", "observedGeneration": 3}])
    );
    assert_eq!(
        status["renderedPrograms"][0]["field"],
        "spec.overrideRules[0].overriders.template"
    );
    assert!(
        status["renderedPrograms"][0]["program"]
            .as_str()
            .unwrap()
            .contains("team")
    );
}

#[test]
fn an_invalid_policy_is_ready_false_with_every_error_by_field() {
    let mut entry = ready_entry(2);
    entry.errors = vec![
        FieldError::new(
            "spec.overrideRules[0].overriders.plaintext[0].path",
            "not a JSON pointer",
        ),
        FieldError::new("spec.resourceSelectors[0].kind", "must not be empty"),
    ];
    let status = desired_status(&entry, None, "t0");
    let condition = &status["conditions"][0];
    assert_eq!(condition["status"], "False");
    assert_eq!(condition["reason"], "Invalid");
    assert_eq!(
        condition["message"],
        "spec.overrideRules[0].overriders.plaintext[0].path: not a JSON pointer; spec.resourceSelectors[0].kind: must not be empty"
    );
    // An object that could not be read at all.
    entry.compiled = None;
    entry.errors.clear();
    let status = desired_status(&entry, None, "t0");
    assert_eq!(
        status["conditions"][0]["message"],
        "the policy could not be read"
    );
    // A message past the Condition's limit is cut, at a character boundary.
    entry.errors = vec![FieldError::new("spec", "é".repeat(20_000))];
    let status = desired_status(&entry, None, "t0");
    let message = status["conditions"][0]["message"].as_str().unwrap();
    assert!(
        message.len() <= 32_010 && message.ends_with(" …"),
        "{}",
        message.len()
    );
}

#[test]
fn the_transition_time_is_kept_while_the_condition_holds_and_writes_only_on_change() {
    let entry = ready_entry(1);
    let written = desired_status(&entry, None, "t0");
    // Seen again later: the same status, so nothing to write, and the time stays.
    let again = desired_status(&entry, Some(&written), "t1");
    assert_eq!(again, written);
    assert!(matches(Some(&written), &again));
    // A new generation: to write, still since t0.
    let next = desired_status(&ready_entry(2), Some(&written), "t2");
    assert!(!matches(Some(&written), &next));
    assert_eq!(next["conditions"][0]["lastTransitionTime"], "t0");
    // The condition flips: a new transition time.
    let mut broken = ready_entry(3);
    broken.errors = vec![FieldError::new("spec", "bad")];
    let flipped = desired_status(&broken, Some(&next), "t3");
    assert_eq!(flipped["conditions"][0]["lastTransitionTime"], "t3");
    // Two replicas that wrote the same status at different moments do not fight.
    let mut other_replica = written.clone();
    other_replica["conditions"][0]["lastTransitionTime"] = json!("t0-and-a-bit");
    assert!(matches(Some(&other_replica), &written));
    // Nothing written yet: to write.
    assert!(!matches(None, &written));
}
