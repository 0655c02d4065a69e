//! Override evaluation: target operations, evaluation order, each step seeing the previous
//! result, the patch as the diff original → final, and failure policies.

mod common;

use common::*;
use kanon_api::Operation;
use kanon_engine::{NoObjects, PolicySet, Request};
use serde_json::{Value, json};

fn web_pod() -> Value {
    pod("default", "web", json!({"app": "web"}))
}

// ---------------------------------------------------------------------------------------------
// 4. Operations
// ---------------------------------------------------------------------------------------------

/// Whether a policy whose only rule has these `targetOperations` mutates a request with
/// `operation`.
fn mutates_on(targets: Option<Value>, operation: Operation) -> bool {
    let mut rule = hit_rule("op");
    if let Some(t) = targets {
        rule["targetOperations"] = t;
    }
    let set = set_of(&[cop("ops", json!({"overrideRules": [rule]}))]);
    let object = web_pod();
    let d = kanon_engine::block_on(set.mutate(&request(operation, &object), &NoObjects));
    assert!(d.allowed, "{d:?}");
    let applied = d.applied_policies == ["ClusterOverridePolicy/ops"];
    assert!(applied || d.applied_policies.is_empty(), "{d:?}");
    let patched = d.patched.as_ref().expect("a patched object");
    assert_eq!(applied, patched.get("hit-op").is_some(), "{d:?}");
    assert_eq!(applied, !d.patch.0.is_empty(), "{d:?}");
    applied
}

#[test]
fn target_operations() {
    use Operation::*;
    let all = [Create, Update, Delete, Connect];
    let rows: Vec<(Option<Value>, &[Operation])> = vec![
        (None, &[Create, Update, Connect]),
        (Some(json!([])), &[Create, Update, Connect]),
        (Some(json!(["*"])), &[Create, Update, Connect]),
        (Some(json!(["CREATE"])), &[Create]),
        (Some(json!(["UPDATE"])), &[Update]),
        (Some(json!(["CONNECT"])), &[Connect]),
        (Some(json!(["DELETE"])), &[]),
        (Some(json!(["CREATE", "UPDATE"])), &[Create, Update]),
        (Some(json!(["UPDATE", "CONNECT"])), &[Update, Connect]),
        (Some(json!(["CREATE", "*"])), &[Create, Update, Connect]),
        (
            Some(json!(["CREATE", "UPDATE", "DELETE", "CONNECT"])),
            &[Create, Update, Connect],
        ),
    ];
    let mut failures = Vec::new();
    for (targets, expected) in rows {
        for op in all {
            let want = expected.contains(&op);
            let got = mutates_on(targets.clone(), op);
            if got != want {
                failures.push(format!(
                    "targetOperations {targets:?} on {op}: expected {want}, got {got}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn delete_gets_no_patch_even_from_delete_rules() {
    for targets in [json!(["DELETE"]), json!(["*"]), json!([])] {
        let mut rule = hit_rule("x");
        rule["targetOperations"] = targets;
        let set = set_of(&[cop("on-delete", json!({"overrideRules": [rule]}))]);
        let old = web_pod();
        let req = Request::from_objects(Operation::Delete, None, Some(old.clone())).unwrap();
        let d = kanon_engine::block_on(set.mutate(&req, &NoObjects));
        assert!(d.allowed);
        assert!(d.patch.0.is_empty(), "{d:?}");
        assert!(d.applied_policies.is_empty(), "{d:?}");
        assert_eq!(
            d.patched.as_ref(),
            Some(&old),
            "on DELETE the object under test is the old object"
        );
        // review() does not patch either.
        let r = kanon_engine::block_on(set.review(&req, &NoObjects));
        assert!(r.allowed && r.patch.0.is_empty(), "{r:?}");
    }
}

#[test]
fn rules_apply_only_for_their_operations_within_one_policy() {
    let mut on_create = trace_rule("create");
    on_create["targetOperations"] = json!(["CREATE"]);
    let mut on_update = trace_rule("update");
    on_update["targetOperations"] = json!(["UPDATE"]);
    let always = trace_rule("always");
    let set = set_of(&[cop(
        "p",
        json!({"overrideRules": [on_create, on_update, always]}),
    )]);
    let object = web_pod();
    let cases = [
        (Operation::Create, json!(["create", "always"])),
        (Operation::Update, json!(["update", "always"])),
        (Operation::Connect, json!(["always"])),
    ];
    for (op, trace) in cases {
        let d = kanon_engine::block_on(set.mutate(&request(op, &object), &NoObjects));
        assert_eq!(d.patched.as_ref().unwrap()["trace"], trace, "{op}");
        assert_eq!(d.applied_policies, ["ClusterOverridePolicy/p"], "{op}");
    }
}

#[test]
fn update_mutates_the_new_object_and_diffs_against_it() {
    let set = set_of(&[cop(
        "p",
        json!({"overrideRules": [plaintext_rule(json!([
            {"op": "replace", "path": "/metadata/labels/app", "value": "patched"}
        ]))]}),
    )]);
    let old = pod("default", "web", json!({"app": "old"}));
    let new = pod("default", "web", json!({"app": "new"}));
    let req = Request::from_objects(Operation::Update, Some(new.clone()), Some(old)).unwrap();
    let d = kanon_engine::block_on(set.mutate(&req, &NoObjects));
    assert_eq!(
        d.patched.as_ref().unwrap()["metadata"]["labels"]["app"],
        "patched"
    );
    assert_eq!(
        serde_json::to_value(&d.patch).unwrap(),
        json!([{"op": "replace", "path": "/metadata/labels/app", "value": "patched"}])
    );
    assert_patch_is_diff(&new, &d);
}

// ---------------------------------------------------------------------------------------------
// 6. Ordering
// ---------------------------------------------------------------------------------------------

fn ordering_policies() -> Vec<Value> {
    vec![
        cop("b", json!({"overrideRules": [trace_rule("cop/b")]})),
        op(
            "default",
            "a",
            json!({"overrideRules": [trace_rule("op/a")]}),
        ),
        cop(
            "policy-9",
            json!({"overrideRules": [trace_rule("cop/policy-9")]}),
        ),
        op(
            "default",
            "z",
            json!({"overrideRules": [trace_rule("op/z")]}),
        ),
        cop("a", json!({"overrideRules": [trace_rule("cop/a")]})),
        cop(
            "policy-10",
            json!({"overrideRules": [trace_rule("cop/policy-10")]}),
        ),
        op(
            "default",
            "m",
            json!({"overrideRules": [trace_rule("op/m")]}),
        ),
        // Other namespaces' policies never run here.
        op(
            "other",
            "0",
            json!({"overrideRules": [trace_rule("op/other/0")]}),
        ),
        // Validate policies never run in mutate.
        cvp("0-first", json!({"validateRules": [{}]})),
    ]
}

#[test]
fn cluster_policies_by_name_then_namespaced_by_name_whatever_the_input_order() {
    let expected_trace = json!([
        "cop/a",
        "cop/b",
        "cop/policy-10",
        "cop/policy-9",
        "op/a",
        "op/m",
        "op/z"
    ]);
    let expected_applied = [
        "ClusterOverridePolicy/a",
        "ClusterOverridePolicy/b",
        "ClusterOverridePolicy/policy-10",
        "ClusterOverridePolicy/policy-9",
        "OverridePolicy/default/a",
        "OverridePolicy/default/m",
        "OverridePolicy/default/z",
    ];
    let base = ordering_policies();
    let n = base.len();
    // Every rotation, and every rotation reversed.
    for shift in 0..n {
        for reverse in [false, true] {
            let mut docs = base.clone();
            docs.rotate_left(shift);
            if reverse {
                docs.reverse();
            }
            let set = set_of_any(&docs);
            let object = web_pod();
            let d = mutate_create(&set, &object);
            assert!(d.allowed, "{d:?}");
            assert_eq!(
                d.patched.as_ref().unwrap()["trace"],
                expected_trace,
                "shift {shift} reverse {reverse}"
            );
            assert_eq!(
                d.applied_policies, expected_applied,
                "shift {shift} reverse {reverse}"
            );
            assert_patch_is_diff(&object, &d);
        }
    }
}

#[test]
fn rules_and_operations_apply_in_list_order() {
    let set = set_of(&[cop(
        "p",
        json!({"overrideRules": [
            plaintext_rule(json!([
                {"op": "add", "path": "/trace/-", "value": "r0.0"},
                {"op": "add", "path": "/trace/-", "value": "r0.1"},
            ])),
            trace_rule("r1"),
            plaintext_rule(json!([
                {"op": "add", "path": "/trace/0", "value": "r2 at front"},
                {"op": "add", "path": "/trace/-", "value": "r2.1"},
            ])),
        ]}),
    )]);
    let object = web_pod();
    let d = mutate_create(&set, &object);
    assert_eq!(
        d.patched.as_ref().unwrap()["trace"],
        json!(["r2 at front", "r0.0", "r0.1", "r1", "r2.1"])
    );
    assert_patch_is_diff(&object, &d);
}

#[test]
fn each_step_sees_the_previous_result() {
    // Within one rule, across rules of one policy, and across policies: every later `test`,
    // `replace`, `copy`, `move` and `remove` relies on what an earlier step did.
    let set = set_of(&[
        cop(
            "a-first",
            json!({"overrideRules": [
                plaintext_rule(json!([
                    {"op": "add", "path": "/metadata/annotations", "value": {}},
                    {"op": "add", "path": "/metadata/annotations/example.com~1step", "value": "1"},
                    {"op": "test", "path": "/metadata/annotations/example.com~1step", "value": "1"},
                    {"op": "replace", "path": "/metadata/annotations/example.com~1step", "value": "2"},
                ])),
                plaintext_rule(json!([
                    {"op": "test", "path": "/metadata/annotations/example.com~1step", "value": "2"},
                    {"op": "copy", "from": "/metadata/annotations/example.com~1step", "path": "/metadata/labels/copied"},
                ])),
            ]}),
        ),
        cop(
            "b-second",
            json!({"overrideRules": [plaintext_rule(json!([
                {"op": "test", "path": "/metadata/labels/copied", "value": "2"},
                {"op": "move", "from": "/metadata/labels/copied", "path": "/metadata/labels/moved"},
                {"op": "replace", "path": "/metadata/annotations/example.com~1step", "value": "3"},
            ]))]}),
        ),
        op(
            "default",
            "c-third",
            json!({"overrideRules": [plaintext_rule(json!([
                {"op": "test", "path": "/metadata/annotations/example.com~1step", "value": "3"},
                {"op": "test", "path": "/metadata/labels/moved", "value": "2"},
                {"op": "remove", "path": "/metadata/labels/app"},
            ]))]}),
        ),
    ]);
    let object = web_pod();
    let d = mutate_create(&set, &object);
    assert!(d.allowed, "{d:?}");
    assert_eq!(
        d.applied_policies,
        [
            "ClusterOverridePolicy/a-first",
            "ClusterOverridePolicy/b-second",
            "OverridePolicy/default/c-third"
        ]
    );
    let patched = d.patched.as_ref().unwrap();
    assert_eq!(
        patched["metadata"]["annotations"],
        json!({"example.com/step": "3"})
    );
    assert_eq!(patched["metadata"]["labels"], json!({"moved": "2"}));
    assert_patch_is_diff(&object, &d);
}

#[test]
fn the_patch_is_the_diff_from_original_to_final() {
    // Intermediate states do not show: add-then-remove and replace-then-restore give no
    // operation; only the net change is patched.
    let set = set_of(&[
        cop(
            "a",
            json!({"overrideRules": [plaintext_rule(json!([
                {"op": "add", "path": "/metadata/labels/temp", "value": "x"},
                {"op": "replace", "path": "/metadata/labels/app", "value": "changed"},
                {"op": "add", "path": "/metadata/labels/keep", "value": "yes"},
            ]))]}),
        ),
        cop(
            "b",
            json!({"overrideRules": [plaintext_rule(json!([
                {"op": "remove", "path": "/metadata/labels/temp"},
                {"op": "replace", "path": "/metadata/labels/app", "value": "web"},
            ]))]}),
        ),
    ]);
    let object = web_pod();
    let d = mutate_create(&set, &object);
    assert_eq!(
        serde_json::to_value(&d.patch).unwrap(),
        json!([{"op": "add", "path": "/metadata/labels/keep", "value": "yes"}])
    );
    assert_patch_is_diff(&object, &d);
    assert_eq!(d.applied_policies.len(), 2);

    // A policy that changes nothing net applies but yields an empty patch.
    let set = set_of(&[cop(
        "noop",
        json!({"overrideRules": [plaintext_rule(json!([
            {"op": "add", "path": "/metadata/labels/app", "value": "web"},
            {"op": "test", "path": "/metadata/labels/app", "value": "web"},
        ]))]}),
    )]);
    let d = mutate_create(&set, &object);
    assert!(d.patch.0.is_empty(), "{d:?}");
    assert_eq!(d.applied_policies, ["ClusterOverridePolicy/noop"]);
    assert_eq!(d.patched.as_ref(), Some(&object));

    // No policy at all: no patch, the object unchanged.
    let d = mutate_create(&PolicySet::default(), &object);
    assert!(d.allowed && d.patch.0.is_empty() && d.applied_policies.is_empty());
    assert_eq!(d.patched.as_ref(), Some(&object));
}

#[test]
fn keys_with_slashes_and_tildes_are_patched_and_diffed_escaped() {
    let set = set_of(&[cop(
        "p",
        json!({"overrideRules": [plaintext_rule(json!([
            {"op": "add", "path": "/metadata/labels/app.kubernetes.io~1name", "value": "web"},
            {"op": "add", "path": "/metadata/labels/odd~0key", "value": "t"},
        ]))]}),
    )]);
    let object = web_pod();
    let d = mutate_create(&set, &object);
    let labels = &d.patched.as_ref().unwrap()["metadata"]["labels"];
    assert_eq!(labels["app.kubernetes.io/name"], "web");
    assert_eq!(labels["odd~key"], "t");
    let patch = serde_json::to_value(&d.patch).unwrap();
    let paths: Vec<&str> = patch
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"/metadata/labels/app.kubernetes.io~1name"),
        "{paths:?}"
    );
    assert!(paths.contains(&"/metadata/labels/odd~0key"), "{paths:?}");
    assert_patch_is_diff(&object, &d);
}

// ---------------------------------------------------------------------------------------------
// 7. Failure policies
// ---------------------------------------------------------------------------------------------

/// A policy whose first rule succeeds (adds a label and a trace entry) and whose second
/// rule's second operation fails (a `test` that does not hold).
fn failing_policy(name: &str, failure_policy: Option<&str>) -> Value {
    let mut spec = json!({"overrideRules": [
        plaintext_rule(json!([
            {"op": "add", "path": "/metadata/labels/partial", "value": name},
            {"op": "add", "path": "/trace/-", "value": name},
        ])),
        plaintext_rule(json!([
            {"op": "add", "path": "/metadata/labels/also-partial", "value": name},
            {"op": "test", "path": "/metadata/labels/app", "value": "not-web"},
        ])),
    ]});
    if let Some(fp) = failure_policy {
        spec["failurePolicy"] = json!(fp);
    }
    cop(name, spec)
}

const FAILING_FIELD: &str = "spec.overrideRules[1].overriders.plaintext[1]";

#[test]
fn fail_is_the_default_and_denies_naming_policy_and_field() {
    for fp in [None, Some("Fail")] {
        let set = set_of(&[failing_policy("bad", fp)]);
        let object = web_pod();
        let d = mutate_create(&set, &object);
        assert!(!d.allowed, "{d:?}");
        assert_eq!(d.messages.len(), 1, "{d:?}");
        let m = &d.messages[0];
        assert!(m.starts_with("ClusterOverridePolicy/bad: "), "{m}");
        assert!(m.contains(FAILING_FIELD), "{m}");
        assert!(m.contains("test /metadata/labels/app"), "{m}");
        assert!(
            m.contains("\"web\""),
            "the message says what the value is: {m}"
        );
        assert!(d.patch.0.is_empty(), "a denied request gets no patch");
        assert_eq!(
            d.patched.as_ref(),
            Some(&object),
            "a denied request keeps the received object"
        );
        assert!(d.applied_policies.is_empty(), "{d:?}");
        assert!(d.warnings.is_empty(), "{d:?}");
    }
}

#[test]
fn ignore_skips_the_policy_rolls_back_all_its_changes_and_warns() {
    let set = set_of(&[failing_policy("bad", Some("Ignore"))]);
    let object = web_pod();
    let d = mutate_create(&set, &object);
    assert!(d.allowed, "{d:?}");
    assert!(d.messages.is_empty(), "{d:?}");
    assert_eq!(d.warnings.len(), 1, "{d:?}");
    let w = &d.warnings[0];
    assert!(w.starts_with("ClusterOverridePolicy/bad: "), "{w}");
    assert!(w.contains("Ignore"), "{w}");
    assert!(w.contains(FAILING_FIELD), "{w}");
    // Both the earlier rule's and the same rule's earlier operations are rolled back.
    assert!(d.patch.0.is_empty(), "{d:?}");
    assert_eq!(d.patched.as_ref(), Some(&object));
    assert!(
        d.applied_policies.is_empty(),
        "a skipped policy is not applied: {d:?}"
    );
}

#[test]
fn an_ignored_failure_never_changes_other_policies_results() {
    let good = |name: &str| cop(name, json!({"overrideRules": [trace_rule(name)]}));
    // The failing policy sits between two good ones; a later one tests that the failing
    // policy's partial label is absent, so it would break if the rollback were incomplete.
    let checker = cop(
        "z-checker",
        json!({"overrideRules": [plaintext_rule(json!([
            {"op": "add", "path": "/metadata/labels/partial", "value": "checker"},
            {"op": "test", "path": "/trace", "value": ["a-good"]},
        ]))]}),
    );
    let with_failure = set_of(&[
        good("a-good"),
        failing_policy("m-bad", Some("Ignore")),
        checker.clone(),
    ]);
    let without = set_of(&[good("a-good"), checker]);
    let object = web_pod();
    let d1 = mutate_create(&with_failure, &object);
    let d2 = mutate_create(&without, &object);
    assert!(d1.allowed && d2.allowed, "{d1:?} {d2:?}");
    assert_eq!(d1.patched, d2.patched);
    assert_eq!(d1.patch, d2.patch);
    assert_eq!(
        d1.applied_policies,
        [
            "ClusterOverridePolicy/a-good",
            "ClusterOverridePolicy/z-checker"
        ]
    );
    assert_eq!(d1.applied_policies, d2.applied_policies);
    assert_eq!(d1.warnings.len(), 1);
    assert!(d1.warnings[0].starts_with("ClusterOverridePolicy/m-bad: "));
    assert!(d2.warnings.is_empty());
    assert_patch_is_diff(&object, &d1);
}

#[test]
fn a_failing_policy_under_fail_does_not_stop_or_change_the_others() {
    let good = |name: &str| cop(name, json!({"overrideRules": [trace_rule(name)]}));
    let set = set_of(&[
        good("a-good"),
        failing_policy("b-bad", None),
        good("c-good"),
        failing_policy("d-bad", Some("Ignore")),
        failing_policy("e-bad", Some("Fail")),
    ]);
    let d = mutate_create(&set, &web_pod());
    assert!(!d.allowed);
    // Every failing policy is reported, in order, each under its own failure policy.
    assert_eq!(d.messages.len(), 2, "{d:?}");
    assert!(
        d.messages[0].starts_with("ClusterOverridePolicy/b-bad: "),
        "{d:?}"
    );
    assert!(
        d.messages[1].starts_with("ClusterOverridePolicy/e-bad: "),
        "{d:?}"
    );
    assert_eq!(d.warnings.len(), 1, "{d:?}");
    assert!(
        d.warnings[0].starts_with("ClusterOverridePolicy/d-bad: "),
        "{d:?}"
    );
    // The good policies still ran (on a state without the failed policies' changes).
    assert_eq!(
        d.applied_policies,
        [
            "ClusterOverridePolicy/a-good",
            "ClusterOverridePolicy/c-good"
        ]
    );
    assert!(d.patch.0.is_empty());
}

#[test]
fn failure_messages_name_each_kind_of_plaintext_error() {
    let rows = [
        (
            json!({"op": "remove", "path": "/metadata/labels/nope"}),
            "remove /metadata/labels/nope: nothing exists",
        ),
        (
            json!({"op": "replace", "path": "/metadata/annotations/x", "value": "v"}),
            "replace /metadata/annotations/x: nothing exists",
        ),
        (
            json!({"op": "add", "path": "/metadata/annotations/x", "value": "v"}),
            "add /metadata/annotations/x: the parent `/metadata/annotations` does not exist",
        ),
        (
            json!({"op": "move", "from": "/nope", "path": "/x"}),
            "move /x: nothing exists at `/nope`",
        ),
        (
            json!({"op": "copy", "from": "/nope", "path": "/x"}),
            "copy /x: nothing exists at `/nope`",
        ),
        (
            json!({"op": "add", "path": "/trace/7", "value": 1}),
            "not a valid position in an array of 1 items (use an index up to 1",
        ),
    ];
    for (operation, needle) in rows {
        let set = set_of(&[cop(
            "p",
            json!({"overrideRules": [trace_rule("before"), plaintext_rule(json!([operation]))]}),
        )]);
        let d = mutate_create(&set, &web_pod());
        assert!(!d.allowed, "{operation}");
        assert_eq!(d.messages.len(), 1);
        let m = &d.messages[0];
        assert!(
            m.starts_with(
                "ClusterOverridePolicy/p: spec.overrideRules[1].overriders.plaintext[0]: "
            ),
            "{m}"
        );
        assert!(m.contains(needle), "{m} should contain {needle}");
    }
}

#[test]
fn invalid_policy_meets_its_failure_policy() {
    // A policy that did not compile (e.g. got in while kanon was down) denies under Fail and
    // is skipped with a warning under Ignore; its message lists the field at fault.
    let bad = |fp: &str| {
        cop(
            "invalid",
            json!({
                "failurePolicy": fp,
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                "overrideRules": [plaintext_rule(json!([{"op": "add", "path": "metadata.labels.x", "value": "1"}]))],
            }),
        )
    };
    let good = cop("z-good", json!({"overrideRules": [trace_rule("good")]}));
    let object = web_pod();

    let d = mutate_create(&set_of_any(&[bad("Fail"), good.clone()]), &object);
    assert!(!d.allowed);
    assert_eq!(d.messages.len(), 1);
    let m = &d.messages[0];
    assert!(
        m.starts_with("ClusterOverridePolicy/invalid: the policy is invalid: "),
        "{m}"
    );
    assert!(
        m.contains("spec.overrideRules[0].overriders.plaintext[0].path"),
        "{m}"
    );
    assert_eq!(d.applied_policies, ["ClusterOverridePolicy/z-good"]);

    let d = mutate_create(&set_of_any(&[bad("Ignore"), good]), &object);
    assert!(d.allowed);
    assert_eq!(d.warnings.len(), 1);
    assert!(
        d.warnings[0].contains("ClusterOverridePolicy/invalid"),
        "{d:?}"
    );
    assert!(
        d.warnings[0].contains("spec.overrideRules[0].overriders.plaintext[0].path"),
        "{d:?}"
    );
    assert_eq!(d.patched.as_ref().unwrap()["trace"], json!(["good"]));
    assert_eq!(d.applied_policies, ["ClusterOverridePolicy/z-good"]);

    // Objects its selectors do not select are not affected by the invalid policy.
    let d = mutate_create(&set_of_any(&[bad("Fail")]), &node("n"));
    assert!(
        d.allowed && d.messages.is_empty() && d.warnings.is_empty(),
        "{d:?}"
    );
}

#[test]
fn invalid_validate_policy_meets_its_failure_policy_in_validate_and_review() {
    // A validate rule with no check makes the policy invalid; the request meets its failure
    // policy, and review() drops the mutation patch when it denies.
    let vpol = |fp: &str| {
        cvp(
            "check",
            json!({
                "failurePolicy": fp,
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                "validateRules": [{"targetOperations": ["CREATE"]}],
            }),
        )
    };
    let mutator = cop("m", json!({"overrideRules": [trace_rule("m")]}));
    let object = web_pod();
    let req = create(&object);

    let set = set_of_any(&[mutator.clone(), vpol("Fail")]);
    let v = kanon_engine::block_on(set.validate(&req, None, &NoObjects));
    assert!(!v.allowed);
    assert_eq!(v.messages.len(), 1);
    assert!(
        v.messages[0].starts_with("ClusterValidatePolicy/check: the policy is invalid: "),
        "{v:?}"
    );
    assert!(
        v.messages[0].contains("spec.validateRules[0]: no check"),
        "{v:?}"
    );
    assert!(v.patch.0.is_empty(), "validation never patches");
    let r = kanon_engine::block_on(set.review(&req, &NoObjects));
    assert!(!r.allowed);
    assert!(
        r.patch.0.is_empty(),
        "a denied review carries no patch: {r:?}"
    );
    assert_eq!(r.patched.as_ref(), Some(&object));
    assert_eq!(r.messages, v.messages);

    let set = set_of_any(&[mutator, vpol("Ignore")]);
    let r = kanon_engine::block_on(set.review(&req, &NoObjects));
    assert!(r.allowed, "{r:?}");
    assert_eq!(r.warnings.len(), 1);
    assert!(
        r.warnings[0].starts_with("ClusterValidatePolicy/check: "),
        "{r:?}"
    );
    assert_eq!(r.applied_policies, ["ClusterOverridePolicy/m"]);
    assert_eq!(r.patched.as_ref().unwrap()["trace"], json!(["m"]));
    assert_patch_is_diff(&object, &r);
}

#[test]
fn an_invalid_policy_meets_only_the_operations_its_rules_target() {
    // As in Kubernetes, where a webhook whose rules do not name the operation is never
    // called, an invalid policy's failure policy applies only to the requests it would
    // otherwise have handled: its rules' operations are known even when it did not compile.
    let mut rule = plaintext_rule(json!([{"op": "add", "path": "no-slash", "value": 1}]));
    rule["targetOperations"] = json!(["CREATE"]);
    let set = set_of_any(&[cop("create-only", json!({"overrideRules": [rule]}))]);
    let object = web_pod();
    let d = kanon_engine::block_on(set.mutate(&request(Operation::Create, &object), &NoObjects));
    assert!(!d.allowed, "CREATE meets the invalid policy: {d:?}");
    assert!(
        d.messages[0].contains("spec.overrideRules[0].overriders.plaintext[0].path"),
        "{d:?}"
    );
    for op in [Operation::Update, Operation::Connect] {
        let d = kanon_engine::block_on(set.mutate(&request(op, &object), &NoObjects));
        assert!(
            d.allowed && d.messages.is_empty() && d.warnings.is_empty(),
            "{op}: {d:?}"
        );
    }

    let set = set_of_any(&[cvp(
        "create-only",
        json!({"validateRules": [{"targetOperations": ["CREATE"]}]}),
    )]);
    let d = kanon_engine::block_on(set.validate(
        &request(Operation::Create, &object),
        None,
        &NoObjects,
    ));
    assert!(!d.allowed, "{d:?}");
    for op in [Operation::Update, Operation::Delete, Operation::Connect] {
        let d = kanon_engine::block_on(set.validate(&request(op, &object), None, &NoObjects));
        assert!(d.allowed && d.messages.is_empty(), "{op}: {d:?}");
    }

    // An invalid policy with no rules at all still meets every request it selects.
    let set = set_of_any(&[cop(
        "no-rules",
        json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "fieldSelector": {"matchFields": {"x": "y"}}}],
               "overrideRules": []}),
    )]);
    let d = kanon_engine::block_on(set.mutate(&request(Operation::Update, &object), &NoObjects));
    assert!(!d.allowed, "{d:?}");
}

#[test]
fn policies_are_selected_by_the_object_as_received() {
    // Selection happens once, against the object as received (as kinitiras does); a label
    // added by an earlier policy does not make a later policy's label selector match, and a
    // label removed by an earlier policy does not unselect a later one.
    let set = set_of(&[
        cop(
            "a-adds-label",
            json!({"overrideRules": [plaintext_rule(json!([
                {"op": "add", "path": "/metadata/labels/added", "value": "yes"},
                {"op": "remove", "path": "/metadata/labels/app"},
            ]))]}),
        ),
        cop(
            "b-wants-added",
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod",
                                          "labelSelector": {"matchLabels": {"added": "yes"}}}],
                   "overrideRules": [trace_rule("b")]}),
        ),
        cop(
            "c-wants-app",
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod",
                                          "labelSelector": {"matchLabels": {"app": "web"}}}],
                   "overrideRules": [trace_rule("c")]}),
        ),
    ]);
    let d = mutate_create(&set, &web_pod());
    assert_eq!(
        d.applied_policies,
        [
            "ClusterOverridePolicy/a-adds-label",
            "ClusterOverridePolicy/c-wants-app"
        ]
    );
    assert_eq!(d.patched.as_ref().unwrap()["trace"], json!(["c"]));
}

#[test]
fn each_policy_reports_what_it_did() {
    use kanon_engine::{PolicyOutcome, PolicyResult};
    let set = set_of(&[
        cop(
            "a-patch",
            json!({"overrideRules": [plaintext_rule(json!([{"op": "add", "path": "/metadata/labels/x", "value": "1"}]))]}),
        ),
        cop(
            "b-noop",
            json!({"overrideRules": [{"overriders": {"program": ""}}]}),
        ),
        cop(
            "c-fail",
            json!({"failurePolicy": "Ignore", "overrideRules": [plaintext_rule(json!([{"op": "remove", "path": "/nope"}]))]}),
        ),
        cvp(
            "d-pass",
            json!({"validateRules": [{"program": "{\"valid\": true}"}]}),
        ),
        cvp(
            "e-reject",
            json!({"validationActions": ["Warn"], "validateRules": [{"program": "{\"valid\": false, \"reason\": \"no\"}"}]}),
        ),
    ]);
    let object = pod("default", "p", json!({"app": "web"}));
    let d = kanon_engine::block_on(set.review(&create(&object), &kanon_engine::NoObjects));
    let result = |policy: &str, outcome| PolicyResult {
        policy: policy.into(),
        outcome,
    };
    assert_eq!(
        d.policy_results,
        vec![
            result(
                "ClusterOverridePolicy/a-patch",
                PolicyOutcome::Mutated { patched: true }
            ),
            result(
                "ClusterOverridePolicy/b-noop",
                PolicyOutcome::Mutated { patched: false }
            ),
            result(
                "ClusterOverridePolicy/c-fail",
                PolicyOutcome::Failed {
                    ignored: true,
                    reason: "patch"
                }
            ),
            result("ClusterValidatePolicy/d-pass", PolicyOutcome::Passed),
            result("ClusterValidatePolicy/e-reject", PolicyOutcome::Rejected),
        ]
    );
}

#[test]
fn policies_not_run_by_the_deadline_fail_under_their_own_failure_policy() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let set = set_of(&[
        cop(
            "a-first",
            json!({"overrideRules": [plaintext_rule(json!([{"op": "add", "path": "/metadata/labels/a", "value": "1"}]))]}),
        ),
        cop(
            "b-fail",
            json!({"overrideRules": [plaintext_rule(json!([{"op": "add", "path": "/metadata/labels/b", "value": "1"}]))]}),
        ),
        cop(
            "c-ignore",
            json!({"failurePolicy": "Ignore", "overrideRules": [plaintext_rule(json!([{"op": "add", "path": "/metadata/labels/c", "value": "1"}]))]}),
        ),
        cop(
            "d-other-kind",
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}], "overrideRules": [plaintext_rule(json!([{"op": "add", "path": "/x", "value": 1}]))]}),
        ),
    ]);
    let object = pod("default", "p", json!({"app": "web"}));
    // The deadline passes once the first policy has run: it is asked once per candidate.
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let mut request = create(&object);
    request.deadline = Some(kanon_engine::Deadline::new(move || {
        counter.fetch_add(1, Ordering::SeqCst) >= 1
    }));
    let d = kanon_engine::block_on(set.mutate(&request, &kanon_engine::NoObjects));
    assert!(!d.allowed);
    assert_eq!(d.applied_policies, ["ClusterOverridePolicy/a-first"]);
    assert_eq!(
        d.messages,
        ["ClusterOverridePolicy/b-fail: the review's deadline passed before this policy ran"]
    );
    assert_eq!(
        d.warnings,
        [
            "ClusterOverridePolicy/c-ignore: skipped (failurePolicy Ignore): the review's deadline passed before this policy ran"
        ]
    );
    // Without a deadline everything applies.
    let d = kanon_engine::block_on(set.mutate(&create(&object), &kanon_engine::NoObjects));
    assert!(d.allowed && d.applied_policies.len() == 3, "{d:?}");
}

/// Polls `future` to its end with a waker that does nothing: how many times it was pending, and
/// its output.
fn poll_counting<F: std::future::Future>(future: F) -> (usize, F::Output) {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut pending = 0;
    loop {
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(output) => return (pending, output),
            std::task::Poll::Pending => pending += 1,
        }
    }
}

#[test]
fn an_evaluation_pauses_where_its_caller_asks_and_decides_the_same() {
    use kanon_engine::{Evaluation, Pause};
    let set = set_of(&[
        cop(
            "a",
            json!({"overrideRules": [plaintext_rule(json!([{"op": "add", "path": "/metadata/labels/a", "value": "1"}]))]}),
        ),
        cop(
            "b",
            json!({"overrideRules": [
                plaintext_rule(json!([{"op": "add", "path": "/metadata/labels/b", "value": "1"}])),
                plaintext_rule(json!([{"op": "add", "path": "/metadata/labels/c", "value": "1"}])),
            ]}),
        ),
        cvp(
            "d",
            json!({"validateRules": [{"cel": {"validations": [{"expression": "object.metadata.name == 'p'"}]}}]}),
        ),
    ]);
    let object = pod("default", "p", json!({"app": "web"}));
    let request = create(&object);
    let review = |pause: Option<Pause>| {
        let evaluation = Evaluation::new(&NoObjects).with_pause(pause);
        poll_counting(set.review_in(&request, &evaluation))
    };
    let (never, unpaused) = review(Some(Pause::new(|| false)));
    let (none, plain) = review(None);
    let (always, paused) = review(Some(Pause::new(|| true)));
    assert_eq!((never, none), (0, 0), "no pause asked, none taken");
    // Before the override policies are chosen (one pause point per 16 candidates), before
    // each policy that applies runs, and between the steps of one (`b` has two).
    assert!(always > 1 + 3, "{always} pauses");
    assert_eq!(format!("{unpaused:?}"), format!("{plain:?}"));
    assert_eq!(format!("{paused:?}"), format!("{plain:?}"));
    assert!(
        plain.allowed && plain.applied_policies.len() == 3,
        "{plain:?}"
    );
}
