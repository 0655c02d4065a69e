//! Validate conditions (Exist, NotExist, Equal, NotEqual, In, NotIn, Gt, Gte, Lt, Lte, Regex)
//! with constants and references, `valueProcess`, `affectMode`, messages; and the verdicts of
//! validate policies (Deny, Warn, Audit; every rejection reported, in order).

mod common;

use common::*;
use kanon_api::Operation;
use kanon_engine::{Decision, NoObjects, ObjectStore, PolicySet, Request};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A Deployment with fields of every type to test against. Its annotations hold numbers,
/// numeric strings and quantities as text, as annotations do.
fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "labels": {"app": "web", "tier": "front"},
            "annotations": {
                "five": "5", "ten": "10", "nine": "9", "ratio": "0.75", "cpu": "500m",
                "memory": "1Gi", "half-gi": "512Mi", "empty": "", "word": "abc",
                "pattern": "^w[a-z]+$", "bad-pattern": "a(",
            },
        },
        "spec": {
            "replicas": 3,
            "paused": false,
            "ratio": 1.5,
            "nothing": null,
            "zones": ["a", "b"],
            "template": {"spec": {"containers": [
                {"name": "app", "image": "registry.corp/app:1", "args": ["--port", "80"],
                 "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}},
                {"name": "sidecar", "image": "registry.corp/envoy:2",
                 "resources": {"limits": {"cpu": "2", "memory": "64Mi"}}},
            ]}},
        },
    })
}

fn current(path: &str) -> Value {
    json!({"from": "current", "path": path})
}

/// A ClusterValidatePolicy named `name` whose only rule is `condition`.
fn condition_policy(name: &str, condition: Value) -> Value {
    cvp(
        name,
        json!({"validateRules": [{"template": {"type": "condition", "condition": condition}}]}),
    )
}

/// Validates a CREATE of `object` against one condition with a lookup.
fn judge_with(condition: Value, object: &Value, lookup: &dyn kanon_engine::Lookup) -> Decision {
    let set = set_of(&[condition_policy("check", condition)]);
    kanon_engine::block_on(set.validate(&create(object), None, lookup))
}

fn judge(condition: Value, object: &Value) -> Decision {
    judge_with(condition, object, &NoObjects)
}

/// Whether `condition` (given the message `HIT`) denies `object`; an evaluation error fails the
/// test.
#[track_caller]
fn denies_with(condition: Value, object: &Value, lookup: &dyn kanon_engine::Lookup) -> bool {
    let mut condition = condition;
    condition["message"] = json!("HIT");
    let d = judge_with(condition.clone(), object, lookup);
    assert!(d.warnings.is_empty(), "{condition}: {d:?}");
    assert_eq!(
        d.applied_policies,
        ["ClusterValidatePolicy/check"],
        "{condition}: {d:?}"
    );
    if d.allowed {
        assert!(d.messages.is_empty(), "{d:?}");
        false
    } else {
        assert_eq!(
            d.messages,
            ["ClusterValidatePolicy/check: HIT"],
            "{condition}"
        );
        true
    }
}

#[track_caller]
fn denies(condition: Value, object: &Value) -> bool {
    denies_with(condition, object, &NoObjects)
}

// ---------------------------------------------------------------------------------------------
// Exist, NotExist
// ---------------------------------------------------------------------------------------------

#[test]
fn exist_and_not_exist() {
    let object = deployment();
    let rows = [
        ("/spec/replicas", true),
        ("/spec/paused", true),
        ("/metadata/annotations/empty", true),
        ("/spec/zones", true),
        ("/metadata/labels", true),
        ("$.spec.replicas", true),
        ("$.metadata.labels.tier", true),
        ("/spec/nope", false),
        ("/spec/nothing", false),
        ("/spec/replicas/deeper", false),
        ("/spec/zones/7", false),
        ("$.spec.nope", false),
        ("$.spec.template.spec.containers[*].nope", false),
        ("$.spec.template.spec.containers[*].image", true),
    ];
    for (path, exists) in rows {
        assert_eq!(
            denies(json!({"cond": "Exist", "dataRef": current(path)}), &object),
            exists,
            "Exist {path}"
        );
        assert_eq!(
            denies(
                json!({"cond": "NotExist", "dataRef": current(path)}),
                &object
            ),
            !exists,
            "NotExist {path}"
        );
    }
    // Exist and NotExist take no value.
    let errors = compile_errors(&condition_policy(
        "x",
        json!({"cond": "Exist", "dataRef": current("/a"), "value": {"string": "b"}}),
    ));
    assert_error(
        &errors,
        "spec.validateRules[0].template.condition",
        "Exist takes no value",
    );
}

// ---------------------------------------------------------------------------------------------
// Equal, NotEqual
// ---------------------------------------------------------------------------------------------

#[test]
fn equal_and_not_equal_by_value() {
    let object = deployment();
    // (data path, compared value, equal?)
    let rows = [
        ("/spec/replicas", json!({"integer": 3}), true),
        ("/spec/replicas", json!({"integer": 4}), false),
        ("/spec/replicas", json!({"string": "3"}), true),
        ("/spec/replicas", json!({"float": "3.0"}), true),
        ("/spec/replicas", json!({"float": 3}), true),
        ("/spec/ratio", json!({"float": "1.5"}), true),
        ("/spec/ratio", json!({"string": "1.50"}), true),
        ("/metadata/annotations/five", json!({"integer": 5}), true),
        ("/metadata/annotations/five", json!({"float": "5.0"}), true),
        ("/metadata/annotations/five", json!({"integer": 50}), false),
        // Quantities by value.
        ("/metadata/annotations/cpu", json!({"string": "0.5"}), true),
        ("/metadata/annotations/cpu", json!({"float": 0.5}), true),
        ("/metadata/annotations/cpu", json!({"string": "500m"}), true),
        (
            "/metadata/annotations/cpu",
            json!({"string": "501m"}),
            false,
        ),
        (
            "/metadata/annotations/memory",
            json!({"string": "1024Mi"}),
            true,
        ),
        (
            "/metadata/annotations/memory",
            json!({"integer": 1073741824}),
            true,
        ),
        (
            "/metadata/annotations/memory",
            json!({"string": "1G"}),
            false,
        ),
        // Text and booleans exactly.
        ("/metadata/labels/app", json!({"string": "web"}), true),
        ("/metadata/labels/app", json!({"string": "Web"}), false),
        ("/metadata/annotations/empty", json!({"string": ""}), true),
        ("/spec/paused", json!({"boolean": false}), true),
        ("/spec/paused", json!({"boolean": true}), false),
        ("/spec/paused", json!({"string": "false"}), false),
        // Structured values as JSON.
        ("/spec/zones", json!({"stringSlice": ["a", "b"]}), true),
        ("/spec/zones", json!({"stringSlice": ["b", "a"]}), false),
        (
            "/metadata/labels",
            json!({"stringMap": {"tier": "front", "app": "web"}}),
            true,
        ),
    ];
    for (path, value, equal) in rows {
        let c = |cond: &str| json!({"cond": cond, "dataRef": current(path), "value": value});
        assert_eq!(denies(c("Equal"), &object), equal, "{path} Equal {value}");
        assert_eq!(
            denies(c("NotEqual"), &object),
            !equal,
            "{path} NotEqual {value}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Gt, Gte, Lt, Lte
// ---------------------------------------------------------------------------------------------

#[test]
fn ordering_compares_numbers_numeric_strings_and_quantities_by_value() {
    use std::cmp::Ordering::{self, *};
    let object = deployment();
    // (data path, compared value, how data compares with it)
    let rows: Vec<(&str, Value, Ordering)> = vec![
        ("/spec/replicas", json!({"integer": 5}), Less),
        ("/spec/replicas", json!({"integer": 3}), Equal),
        ("/spec/replicas", json!({"float": "2.5"}), Greater),
        ("/spec/replicas", json!({"string": "3"}), Equal),
        ("/spec/replicas", json!({"string": "10"}), Less),
        ("/spec/ratio", json!({"float": 1.25}), Greater),
        // Numeric strings as numbers, not text: "5" < 10, "10" > "9".
        ("/metadata/annotations/five", json!({"integer": 10}), Less),
        ("/metadata/annotations/ten", json!({"string": "9"}), Greater),
        ("/metadata/annotations/ten", json!({"integer": 9}), Greater),
        ("/metadata/annotations/ratio", json!({"float": "0.8"}), Less),
        // Quantities as quantities.
        ("/metadata/annotations/cpu", json!({"string": "1"}), Less),
        (
            "/metadata/annotations/cpu",
            json!({"string": "250m"}),
            Greater,
        ),
        ("/metadata/annotations/cpu", json!({"float": "0.5"}), Equal),
        (
            "/metadata/annotations/memory",
            json!({"string": "1000Mi"}),
            Greater,
        ),
        (
            "/metadata/annotations/memory",
            json!({"string": "1G"}),
            Greater,
        ),
        (
            "/metadata/annotations/memory",
            json!({"string": "2Gi"}),
            Less,
        ),
        (
            "/metadata/annotations/half-gi",
            json!({"string": "0.5Gi"}),
            Equal,
        ),
        (
            "/metadata/annotations/half-gi",
            json!({"integer": 536870912}),
            Equal,
        ),
        (
            "/spec/template/spec/containers/1/resources/limits/cpu",
            json!({"string": "1500m"}),
            Greater,
        ),
        // Text that is neither, in its natural order.
        ("/metadata/labels/app", json!({"string": "api"}), Greater),
        ("/metadata/labels/app", json!({"string": "zeta"}), Less),
    ];
    for (path, value, ordering) in rows {
        for (cond, holds) in [
            ("Gt", ordering == Greater),
            ("Gte", ordering != Less),
            ("Lt", ordering == Less),
            ("Lte", ordering != Greater),
        ] {
            assert_eq!(
                denies(
                    json!({"cond": cond, "dataRef": current(path), "value": value}),
                    &object
                ),
                holds,
                "{path} {cond} {value}"
            );
        }
    }
}

#[test]
fn ordering_values_that_cannot_be_ordered_is_an_evaluation_error() {
    // Text against a number has no order: an error naming both, under the failure policy.
    let d = judge(
        json!({"cond": "Gt", "dataRef": current("/metadata/annotations/word"), "value": {"integer": 3}}),
        &deployment(),
    );
    assert!(!d.allowed);
    assert_eq!(d.messages.len(), 1);
    assert!(
        d.messages[0].starts_with(
            "ClusterValidatePolicy/check: spec.validateRules[0].template.condition: cannot order"
        ) && d.messages[0].contains("cannot order \"abc\" and 3"),
        "{:?}",
        d.messages
    );
}

// ---------------------------------------------------------------------------------------------
// In, NotIn
// ---------------------------------------------------------------------------------------------

#[test]
fn in_and_not_in_constant_lists() {
    let object = deployment();
    // (data path, list, in?)
    let rows = [
        (
            "/metadata/labels/app",
            json!({"stringSlice": ["api", "web"]}),
            true,
        ),
        (
            "/metadata/labels/app",
            json!({"stringSlice": ["api", "db"]}),
            false,
        ),
        (
            "/metadata/labels/app",
            json!({"stringSlice": ["WEB"]}),
            false,
        ),
        // Numbers by value, whichever side is text.
        (
            "/metadata/annotations/five",
            json!({"integerSlice": [1, 5, 9]}),
            true,
        ),
        (
            "/metadata/annotations/five",
            json!({"integerSlice": [1, 9]}),
            false,
        ),
        ("/spec/replicas", json!({"stringSlice": ["1", "3"]}), true),
        ("/spec/replicas", json!({"floatSlice": ["2.5", 3.0]}), true),
        ("/spec/ratio", json!({"floatSlice": [0.5, "1.5"]}), true),
        ("/spec/ratio", json!({"integerSlice": [1, 2]}), false),
        (
            "/metadata/annotations/cpu",
            json!({"stringSlice": ["0.5", "1"]}),
            true,
        ),
        // A list under test: all its items (In) / none of them (NotIn).
        ("/spec/zones", json!({"stringSlice": ["a", "b", "c"]}), true),
    ];
    for (path, list, found) in rows {
        let c = |cond: &str| json!({"cond": cond, "dataRef": current(path), "value": list});
        assert_eq!(denies(c("In"), &object), found, "{path} In {list}");
        assert_eq!(denies(c("NotIn"), &object), !found, "{path} NotIn {list}");
    }
    // A list partly in the other is neither all in nor none in.
    let partly = json!({"stringSlice": ["a", "z"]});
    for cond in ["In", "NotIn"] {
        assert!(
            !denies(
                json!({"cond": cond, "dataRef": current("/spec/zones"), "value": partly}),
                &object
            ),
            "{cond}"
        );
    }
    // In and NotIn need a list.
    let errors = compile_errors(&condition_policy(
        "x",
        json!({"cond": "In", "dataRef": current("/a"), "value": {"string": "b"}}),
    ));
    assert_error(
        &errors,
        "spec.validateRules[0].template.condition.value",
        "In needs a list",
    );
}

#[test]
fn in_and_not_in_referenced_lists() {
    let object = deployment();
    // A list selected from the object itself.
    let names = current("$.spec.template.spec.containers[*].name");
    assert!(denies(
        json!({"cond": "In", "dataRef": current("/metadata/labels/app"), "valueRef": names}),
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "sidecar"}},
                "spec": {"template": {"spec": {"containers": [{"name": "app"}, {"name": "sidecar"}]}}}}),
    ));
    assert!(denies(
        json!({"cond": "NotIn", "dataRef": current("/metadata/labels/app"), "valueRef": names}),
        &object,
    ));
    // A list held by another object.
    let mut store = ObjectStore::new();
    store
        .insert(json!({"apiVersion": "example.com/v1", "kind": "Allowlist", "metadata": {"name": "apps"},
                       "spec": {"apps": ["web", "api"], "replicas": [1, 2, 3]}}))
        .unwrap();
    let allowlist = |path: &str| json!({"from": "k8s", "path": path, "k8s": {"apiVersion": "example.com/v1", "kind": "Allowlist", "name": "apps"}});
    let rows = [
        ("/metadata/labels/app", "/spec/apps", true),
        ("/metadata/labels/tier", "/spec/apps", false),
        ("/spec/replicas", "/spec/replicas", true),
        ("/metadata/annotations/five", "/spec/replicas", false),
    ];
    for (data, list, found) in rows {
        for (cond, hit) in [("In", found), ("NotIn", !found)] {
            assert_eq!(
                denies_with(
                    json!({"cond": cond, "dataRef": current(data), "valueRef": allowlist(list)}),
                    &object,
                    &store
                ),
                hit,
                "{data} {cond} {list}"
            );
        }
    }
    // A referenced list that is missing: nothing to compare with, so neither holds.
    for cond in ["In", "NotIn"] {
        assert!(
            !denies_with(
                json!({"cond": cond, "dataRef": current("/metadata/labels/app"), "valueRef": allowlist("/spec/nope")}),
                &object,
                &store
            ),
            "{cond}"
        );
    }
    // A referenced value that is not a list: an evaluation error saying so.
    let d = judge_with(
        json!({"cond": "In", "dataRef": current("/metadata/labels/app"), "valueRef": allowlist("/metadata/name")}),
        &object,
        &store,
    );
    assert!(!d.allowed);
    assert!(
        d.messages[0].contains("expected a list to look in, got \"apps\""),
        "{:?}",
        d.messages
    );
}

// ---------------------------------------------------------------------------------------------
// Regex
// ---------------------------------------------------------------------------------------------

#[test]
fn regex_matches_text_and_numbers() {
    let object = deployment();
    let rows = [
        ("/metadata/labels/app", "^w.b$", true),
        ("/metadata/labels/app", "eb", true),
        ("/metadata/labels/app", "^eb", false),
        ("/metadata/labels/app", "(?i)^WEB$", true),
        ("/spec/replicas", r"^\d+$", true),
        ("/spec/ratio", r"^1\.5$", true),
        ("/spec/paused", "^false$", true),
        (
            "/spec/template/spec/containers/0/image",
            r"^registry\.corp/",
            true,
        ),
        (
            "/spec/template/spec/containers/0/image",
            r"^docker\.io/",
            false,
        ),
        ("/metadata/annotations/empty", "^$", true),
    ];
    for (path, pattern, matches) in rows {
        assert_eq!(
            denies(
                json!({"cond": "Regex", "dataRef": current(path), "value": {"string": pattern}}),
                &object
            ),
            matches,
            "{path} ~ {pattern}"
        );
    }
    // A pattern from a reference.
    assert!(denies(
        json!({"cond": "Regex", "dataRef": current("/metadata/labels/app"), "valueRef": current("/metadata/annotations/pattern")}),
        &object
    ));
    // A bad referenced pattern is an evaluation error naming it.
    let d = judge(
        json!({"cond": "Regex", "dataRef": current("/metadata/labels/app"), "valueRef": current("/metadata/annotations/bad-pattern")}),
        &object,
    );
    assert!(!d.allowed);
    assert!(
        d.messages[0].contains("invalid regular expression `a(`"),
        "{:?}",
        d.messages
    );
}

#[test]
fn a_bad_regex_makes_the_policy_invalid() {
    for (value, field, needle) in [
        (
            json!({"string": "a("}),
            "spec.validateRules[0].template.condition.value.string",
            "invalid regular expression",
        ),
        (
            json!({"string": "[z-a]"}),
            "spec.validateRules[0].template.condition.value.string",
            "invalid regular expression",
        ),
        (
            json!({"integer": 3}),
            "spec.validateRules[0].template.condition.value",
            "Regex needs a string pattern",
        ),
    ] {
        let errors = compile_errors(&condition_policy(
            "x",
            json!({"cond": "Regex", "dataRef": current("/metadata/name"), "value": value}),
        ));
        assert_error(&errors, field, needle);
    }
}

// ---------------------------------------------------------------------------------------------
// valueProcess
// ---------------------------------------------------------------------------------------------

#[test]
fn value_process_with_integers_decimals_and_percentages() {
    let object = deployment(); // replicas: 3
    // (cond, value, operation, operand, holds?) — replicas <cond> (value <op> operand)
    let rows = [
        ("Equal", json!({"integer": 1}), "+", json!(2), true),
        ("Equal", json!({"integer": 4}), "-", json!(1), true),
        ("Equal", json!({"integer": 1}), "*", json!(3), true),
        ("Equal", json!({"integer": 9}), "/", json!(3), true),
        ("Equal", json!({"integer": 6}), "*", json!("0.5"), true),
        ("Equal", json!({"integer": 6}), "*", json!("50%"), true),
        ("Equal", json!({"integer": 6}), "/", json!("2"), true),
        ("Equal", json!({"float": "2.5"}), "+", json!("0.5"), true),
        ("Gt", json!({"integer": 2}), "+", json!(3), false),
        ("Lt", json!({"integer": 10}), "*", json!("0.5"), true),
        ("Lt", json!({"integer": 10}), "*", json!("25%"), false),
        ("Gte", json!({"integer": 6}), "*", json!("50%"), true),
        ("Lte", json!({"integer": 4}), "*", json!("75%"), true),
        ("Lt", json!({"integer": 4}), "*", json!("75%"), false),
        ("Gt", json!({"string": "10"}), "-", json!("7.5"), true),
        ("In", json!({"integerSlice": [1, 2]}), "+", json!(1), false),
    ];
    for (cond, value, operation, operand, holds) in rows {
        if cond == "In" {
            // A list cannot take arithmetic: an evaluation error, not a silent pass.
            let d = judge(
                json!({"cond": cond, "dataRef": current("/spec/replicas"), "value": value,
                       "valueProcess": {"operation": operation, "operationWith": operand}}),
                &object,
            );
            assert!(
                !d.allowed && d.messages[0].contains("valueProcess needs a number or a quantity"),
                "{d:?}"
            );
            continue;
        }
        assert_eq!(
            denies(
                json!({"cond": cond, "dataRef": current("/spec/replicas"), "value": value,
                       "valueProcess": {"operation": operation, "operationWith": operand}}),
                &object
            ),
            holds,
            "replicas {cond} ({value} {operation} {operand})"
        );
    }
}

#[test]
fn value_process_on_referenced_values_and_quantities() {
    let object = deployment();
    // The sidecar's CPU limit (2) × 25% = 500m = the app's.
    let app_cpu = current("/spec/template/spec/containers/0/resources/limits/cpu");
    let sidecar_cpu = current("/spec/template/spec/containers/1/resources/limits/cpu");
    for (cond, operand, holds) in [
        ("Equal", json!("25%"), true),
        ("Equal", json!("0.25"), true),
        ("Lt", json!("0.3"), true),
        ("Gt", json!("20%"), true),
        ("Equal", json!(4), false),
    ] {
        assert_eq!(
            denies(
                json!({"cond": cond, "dataRef": app_cpu, "valueRef": sidecar_cpu,
                       "valueProcess": {"operation": "*", "operationWith": operand}}),
                &object
            ),
            holds,
            "{cond} {operand}"
        );
    }
    // Memory quantities stay exact: 1Gi / 2 = 512Mi.
    assert!(denies(
        json!({"cond": "Equal", "dataRef": current("/metadata/annotations/half-gi"),
               "valueRef": current("/metadata/annotations/memory"),
               "valueProcess": {"operation": "/", "operationWith": 2}}),
        &object
    ));
    // A numeric string referenced takes + and -.
    assert!(denies(
        json!({"cond": "Equal", "dataRef": current("/metadata/annotations/ten"),
               "valueRef": current("/metadata/annotations/five"),
               "valueProcess": {"operation": "+", "operationWith": 5}}),
        &object
    ));
    // A missing referenced value is not processed and not hit.
    assert!(!denies(
        json!({"cond": "Lt", "dataRef": current("/spec/replicas"), "valueRef": current("/spec/nope"),
               "valueProcess": {"operation": "*", "operationWith": "50%"}}),
        &object
    ));
    // Adding to a quantity has no exact meaning: an evaluation error saying so.
    let d = judge(
        json!({"cond": "Lt", "dataRef": app_cpu, "valueRef": current("/metadata/annotations/memory"),
               "valueProcess": {"operation": "+", "operationWith": 1}}),
        &object,
    );
    assert!(!d.allowed);
    assert!(
        d.messages[0].contains("a quantity can only be multiplied or divided by a number"),
        "{:?}",
        d.messages
    );
}

#[test]
fn value_process_operands_are_checked_when_the_policy_is_written() {
    for (operation, operand, needle) in [
        (
            "*",
            json!("abc"),
            "is not an integer, a decimal or a percentage",
        ),
        (
            "*",
            json!("5%%"),
            "is not an integer, a decimal or a percentage",
        ),
        ("/", json!(0), "division by zero"),
        ("/", json!("0%"), "division by zero"),
    ] {
        let errors = compile_errors(&condition_policy(
            "x",
            json!({"cond": "Lt", "dataRef": current("/spec/replicas"), "value": {"integer": 1},
                   "valueProcess": {"operation": operation, "operationWith": operand}}),
        ));
        assert_error(
            &errors,
            "spec.validateRules[0].template.condition.valueProcess.operationWith",
            needle,
        );
    }
}

// ---------------------------------------------------------------------------------------------
// affectMode and messages
// ---------------------------------------------------------------------------------------------

#[test]
fn affect_mode_allow_denies_when_the_condition_does_not_hold() {
    let object = deployment();
    let condition = |replicas_max: i64, mode: Option<&str>| {
        let mut c = json!({"cond": "Lte", "dataRef": current("/spec/replicas"), "value": {"integer": replicas_max},
                           "message": "{{ object.metadata.name }}: {{ data }} replicas, at most {{ value }} allowed"});
        if let Some(m) = mode {
            c["affectMode"] = json!(m);
        }
        c
    };
    // The condition holds (3 <= 5): reject (the default) denies, allow admits.
    for mode in [None, Some("reject")] {
        let d = judge(condition(5, mode), &object);
        assert!(!d.allowed, "{mode:?}");
        assert_eq!(
            d.messages,
            ["ClusterValidatePolicy/check: web: 3 replicas, at most 5 allowed"]
        );
    }
    let d = judge(condition(5, Some("allow")), &object);
    assert!(d.allowed && d.messages.is_empty(), "{d:?}");
    // It does not hold (3 > 2): allow denies, with the message all the same.
    let d = judge(condition(2, Some("allow")), &object);
    assert!(!d.allowed);
    assert_eq!(
        d.messages,
        ["ClusterValidatePolicy/check: web: 3 replicas, at most 2 allowed"]
    );
    let d = judge(condition(2, None), &object);
    assert!(d.allowed, "{d:?}");
    // Without a message, a default that says what happened (never an empty reason).
    let d = judge(
        json!({"cond": "Gt", "dataRef": current("/spec/replicas"), "value": {"integer": 1}}),
        &object,
    );
    assert_eq!(
        d.messages,
        ["ClusterValidatePolicy/check: Gt condition holds"]
    );
    let d = judge(
        json!({"cond": "Gt", "dataRef": current("/spec/replicas"), "value": {"integer": 5}, "affectMode": "allow"}),
        &object,
    );
    assert_eq!(
        d.messages,
        ["ClusterValidatePolicy/check: Gt condition does not hold"]
    );
    // allow on a missing field: the condition does not hold, so the object is denied.
    let d = judge(
        json!({"cond": "Equal", "dataRef": current("/spec/nope"), "value": {"integer": 1}, "affectMode": "allow"}),
        &object,
    );
    assert!(!d.allowed, "{d:?}");
    assert_eq!(
        d.messages,
        ["ClusterValidatePolicy/check: Equal condition does not hold"]
    );
}

#[test]
fn messages_are_templates_over_the_request() {
    let object = deployment();
    let d = judge(
        json!({"cond": "In", "dataRef": current("/metadata/labels/tier"), "value": {"stringSlice": ["front", "back"]},
               "message": "{{ operation }} of {{ request.kind.kind }} {{ object.metadata.namespace }}/{{ object.metadata.name }}: tier \"{{ data }}\" is in {{ value | join(', ') }}\nsecond line {{ data | upper }}"}),
        &object,
    );
    assert_eq!(
        d.messages,
        [
            "ClusterValidatePolicy/check: CREATE of Deployment default/web: tier \"front\" is in front, back\nsecond line FRONT"
        ]
    );
    // A message that does not compile makes the policy invalid, at the message's field.
    let errors = compile_errors(&condition_policy(
        "x",
        json!({"cond": "Exist", "dataRef": current("/a"), "message": "bad {{ data "}),
    ));
    assert_error(
        &errors,
        "spec.validateRules[0].template.condition.message",
        "syntax error",
    );
    // A message reading something undefined does not change the verdict: the denial stands,
    // the message says what it could, and a warning names the message's field.
    let d = judge(
        json!({"cond": "Exist", "dataRef": current("/metadata/name"), "message": "Deployment {{ object.metadata.nmae }} is named"}),
        &object,
    );
    assert!(!d.allowed);
    assert_eq!(
        d.messages,
        ["ClusterValidatePolicy/check: Deployment <absent> is named"]
    );
    assert_eq!(d.warnings.len(), 1, "{d:?}");
    assert!(
        d.warnings[0].starts_with(
            "ClusterValidatePolicy/check: spec.validateRules[0].template.condition.message could not be rendered (line 1: undefined value"
        ),
        "{:?}",
        d.warnings
    );
}

/// A Pod created from `generateName`, as controllers and most manifests create them: it has
/// no `metadata.name` when admission sees it.
fn generated_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "web-", "namespace": "default"},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]}
    })
}

#[test]
fn a_message_that_cannot_be_rendered_never_turns_a_denial_into_an_admission() {
    // Under failurePolicy Ignore a failing rule would be skipped: the message must not fail it.
    let policy = cvp(
        "owner",
        json!({"failurePolicy": "Ignore", "validateRules": [{"template": {"type": "condition", "condition": {
            "cond": "Exist", "dataRef": current("/metadata/ownerReferences"), "affectMode": "allow",
            "message": "Pod {{ object.metadata.name }} has no controller"}}}]}),
    );
    let set = set_of(&[policy]);
    let d = kanon_engine::block_on(set.validate(&create(&generated_pod()), None, &NoObjects));
    assert!(!d.allowed, "{d:?}");
    assert_eq!(
        d.messages,
        ["ClusterValidatePolicy/owner: Pod <absent> has no controller"]
    );
    assert!(
        d.warnings.iter().any(|w| w
            .contains("spec.validateRules[0].template.condition.message could not be rendered")
            && w.contains("the denial stands")),
        "{:?}",
        d.warnings
    );
    assert!(
        d.policy_results
            .iter()
            .all(|r| r.outcome == kanon_engine::PolicyOutcome::Rejected),
        "{:?}",
        d.policy_results
    );
    // A message that renders nothing useful, or fails outright, falls back to the rule's own
    // words, naming the rule.
    for message in [
        "{{ object.metadata.name }}",
        "{{ fail('no') }}",
        "{{ object.metadata.name | upper }} is bad",
    ] {
        let d = judge(
            json!({"cond": "Exist", "dataRef": current("/metadata/ownerReferences"), "affectMode": "allow", "message": message}),
            &generated_pod(),
        );
        assert!(!d.allowed, "{message}: {d:?}");
        assert_eq!(d.messages.len(), 1, "{message}: {d:?}");
        assert!(
            d.messages[0]
                == "ClusterValidatePolicy/check: spec.validateRules[0]: Exist condition does not hold (its message could not be rendered)"
                || d.messages[0].contains("<absent>"),
            "{message}: {:?}",
            d.messages
        );
        assert_eq!(d.warnings.len(), 1, "{message}: {d:?}");
    }
    // A message that renders is untouched and warns of nothing.
    let mut named = generated_pod();
    named["metadata"]["name"] = json!("web-x1");
    let d = judge(
        json!({"cond": "Exist", "dataRef": current("/metadata/ownerReferences"), "affectMode": "allow",
               "message": "Pod {{ object.metadata.name }} has no controller"}),
        &named,
    );
    assert_eq!(
        d.messages,
        ["ClusterValidatePolicy/check: Pod web-x1 has no controller"]
    );
    assert!(d.warnings.is_empty(), "{d:?}");
}

#[test]
fn a_message_sees_the_selected_value_that_decided() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [
            {"name": "a", "image": "registry.example.com/a:1.0"},
            {"name": "b", "image": "docker.io/b:1.0"},
            {"name": "c", "image": "quay.io/c:1.0"},
        ]}
    });
    // reject: the first value that hits.
    let d = judge(
        json!({"cond": "Regex", "dataRef": current("$.spec.containers[*].image"), "value": {"string": "^(docker|quay)\\.io/"},
               "message": "image {{ data }} comes from a public registry"}),
        &pod,
    );
    assert_eq!(
        d.messages,
        ["ClusterValidatePolicy/check: image docker.io/b:1.0 comes from a public registry"]
    );
    // allow: the first value that misses.
    let d = judge(
        json!({"cond": "Regex", "dataRef": current("$.spec.containers[*].image"), "value": {"string": "^registry\\.example\\.com/"},
               "affectMode": "allow", "message": "image {{ data }} is not from {{ value }}"}),
        &pod,
    );
    assert_eq!(
        d.messages,
        [
            "ClusterValidatePolicy/check: image docker.io/b:1.0 is not from ^registry\\.example\\.com/"
        ]
    );
}

/// A Pod whose second container and init container have no memory limit.
fn pod_with_limits() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "initContainers": [{"name": "setup", "image": "busybox"}],
            "containers": [
                {"name": "app", "image": "nginx", "resources": {"limits": {"memory": "1Gi"}}},
                {"name": "sidecar", "image": "envoy"},
            ]
        }
    })
}

#[test]
fn a_quantifier_sees_every_item_even_those_that_lack_the_field() {
    // Every container has a memory limit: the sidecar has none, so the Pod is denied, and
    // the message names it through `item`.
    let every = |path: &str| {
        json!({"cond": "Exist", "dataRef": current(path), "affectMode": "allow",
               "message": "container {{ item.name }} has no memory limit"})
    };
    let d = judge(
        every("$.spec.containers[*].resources.limits.memory"),
        &pod_with_limits(),
    );
    assert!(!d.allowed, "{d:?}");
    assert_eq!(
        d.messages,
        ["ClusterValidatePolicy/check: container sidecar has no memory limit"]
    );
    // Init containers too, in one path.
    let mut pod = pod_with_limits();
    pod["spec"]["containers"][1]["resources"] = json!({"limits": {"memory": "64Mi"}});
    assert!(judge(every("$.spec.containers[*].resources.limits.memory"), &pod).allowed);
    let d = judge(
        every("$.spec['initContainers','containers'][*].resources.limits.memory"),
        &pod,
    );
    assert_eq!(
        d.messages,
        ["ClusterValidatePolicy/check: container setup has no memory limit"]
    );
    // A comparison under `allow` is a miss on an item that lacks the field.
    let d = judge(
        json!({"cond": "Lte", "dataRef": current("$.spec.containers[*].resources.limits.memory"),
               "value": {"string": "2Gi"}, "affectMode": "allow",
               "message": "container {{ item.name }}: memory limit {{ data }} is over {{ value }}"}),
        &pod_with_limits(),
    );
    assert_eq!(
        d.messages,
        ["ClusterValidatePolicy/check: container sidecar: memory limit None is over 2Gi"]
    );
    // Under `reject`, one item that has the field denies; none, none does.
    let privileged = json!({"cond": "Exist", "dataRef": current("$.spec.containers[*].securityContext.privileged"),
                            "message": "container {{ item.name }} sets privileged"});
    assert!(judge(privileged.clone(), &pod_with_limits()).allowed);
    let mut pod = pod_with_limits();
    pod["spec"]["containers"][1]["securityContext"] = json!({"privileged": false});
    assert_eq!(
        judge(privileged, &pod).messages,
        ["ClusterValidatePolicy/check: container sidecar sets privileged"]
    );
    // An empty selection is one absent value: Exist under allow denies, NotExist passes.
    let mut pod = pod_with_limits();
    pod["spec"]["containers"] = json!([]);
    assert!(!judge(every("$.spec.containers[*].resources.limits.memory"), &pod).allowed);
    assert!(
        judge(
            json!({"cond": "NotExist", "dataRef": current("$.spec.containers[*].resources.limits.memory"), "affectMode": "allow"}),
            &pod
        )
        .allowed
    );
}

// ---------------------------------------------------------------------------------------------
// Missing values
// ---------------------------------------------------------------------------------------------

const COMPARISONS: [&str; 9] = [
    "Equal", "NotEqual", "In", "NotIn", "Gt", "Gte", "Lt", "Lte", "Regex",
];

fn constant_for(cond: &str) -> Value {
    match cond {
        "In" | "NotIn" => json!({"stringSlice": ["a"]}),
        "Regex" => json!({"string": ".*"}),
        _ => json!({"integer": 1}),
    }
}

#[test]
fn a_condition_on_a_missing_value_is_never_hit_and_never_an_error() {
    let object = deployment();
    let missing = [
        current("/spec/nope"),
        current("/spec/nothing"),
        current("/metadata/annotations/nope"),
        current("/spec/replicas/deeper"),
        current("$.spec.nope"),
        current("$.spec.template.spec.containers[*].nope"),
        json!({"from": "old", "path": "/spec/replicas"}),
        json!({"from": "owner", "path": "/spec/replicas"}),
    ];
    for cond in COMPARISONS {
        for data in &missing {
            // The value under test is missing.
            assert!(
                !denies(
                    json!({"cond": cond, "dataRef": data, "value": constant_for(cond)}),
                    &object
                ),
                "{cond} on missing {data}"
            );
            // The value compared with is missing.
            assert!(
                !denies(
                    json!({"cond": cond, "dataRef": current("/metadata/labels/app"), "valueRef": data}),
                    &object
                ),
                "{cond} with missing valueRef {data}"
            );
            // Both.
            assert!(
                !denies(
                    json!({"cond": cond, "dataRef": data, "valueRef": data}),
                    &object
                ),
                "{cond} on missing {data} both sides"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// JSONPath selecting several values
// ---------------------------------------------------------------------------------------------

#[test]
fn several_selected_values_are_each_tested() {
    let pod = |images: &[&str]| {
        let containers: Vec<Value> = images
            .iter()
            .enumerate()
            .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
            .collect();
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
               "spec": {"containers": containers}})
    };
    let images = current("$.spec.containers[*].image");
    // reject NotIn an allowlist: one image outside it is enough; `data` is that image.
    let not_allowed = json!({"cond": "NotIn", "dataRef": images, "value": {"stringSlice": ["nginx", "envoy"]},
                             "message": "image {{ data }} is not allowed"});
    let d = judge(
        not_allowed.clone(),
        &pod(&["nginx", "evil", "envoy", "worse"]),
    );
    assert!(!d.allowed);
    assert_eq!(
        d.messages,
        ["ClusterValidatePolicy/check: image evil is not allowed"]
    );
    assert!(judge(not_allowed.clone(), &pod(&["nginx", "envoy"])).allowed);
    // reject In a denylist: one image in it is enough.
    let banned = json!({"cond": "In", "dataRef": images, "value": {"stringSlice": ["evil"]}});
    assert!(!judge(banned.clone(), &pod(&["nginx", "evil"])).allowed);
    assert!(judge(banned, &pod(&["nginx", "envoy"])).allowed);
    // allow Regex: every image must match; `data` is the first that does not.
    let registry = json!({"cond": "Regex", "dataRef": images, "value": {"string": "^registry\\.corp/"},
                          "affectMode": "allow", "message": "{{ data }} is not from registry.corp"});
    assert!(
        judge(
            registry.clone(),
            &pod(&["registry.corp/a", "registry.corp/b"])
        )
        .allowed
    );
    let d = judge(
        registry.clone(),
        &pod(&["registry.corp/a", "docker.io/b", "quay.io/c"]),
    );
    assert_eq!(
        d.messages,
        ["ClusterValidatePolicy/check: docker.io/b is not from registry.corp"]
    );
    // Quantities of every container: one over the limit is enough.
    let object = deployment();
    let cpu = current("$.spec.template.spec.containers[*].resources.limits.cpu");
    assert!(denies(
        json!({"cond": "Gt", "dataRef": cpu, "value": {"string": "1"}}),
        &object
    ));
    assert!(!denies(
        json!({"cond": "Gt", "dataRef": cpu, "value": {"string": "2"}}),
        &object
    ));
    assert!(denies(
        json!({"cond": "Lt", "dataRef": cpu, "value": {"string": "1"}}),
        &object
    ));
    assert!(!denies(
        json!({"cond": "Lte", "dataRef": cpu, "value": {"integer": 2}, "affectMode": "allow"}),
        &object
    ));
    assert!(denies(
        json!({"cond": "Lte", "dataRef": cpu, "value": {"string": "1"}, "affectMode": "allow"}),
        &object
    ));
    // No value selected: not hit under reject; under allow, not holding, so denied.
    let none = current("$.spec.template.spec.initContainers[*].image");
    assert!(!denies(
        json!({"cond": "NotIn", "dataRef": none, "value": {"stringSlice": ["x"]}}),
        &object
    ));
    assert!(denies(
        json!({"cond": "Regex", "dataRef": none, "value": {"string": "x"}, "affectMode": "allow"}),
        &object
    ));
    // Exist and NotExist look at the selection as a whole.
    assert!(denies(
        json!({"cond": "Exist", "dataRef": images}),
        &pod(&["a"])
    ));
    assert!(denies(
        json!({"cond": "NotExist", "dataRef": none}),
        &object
    ));
}

// ---------------------------------------------------------------------------------------------
// Verdicts: Deny, Warn, Audit; all rejections in order
// ---------------------------------------------------------------------------------------------

/// A validate policy document of `kind` rejecting every object with `reason`.
fn rejecting(doc: fn(&str, Value) -> Value, name: &str, actions: Value, reason: &str) -> Value {
    doc(
        name,
        json!({
            "validationActions": actions,
            "validateRules": [{"program": format!("{{\"valid\": false, \"reason\": \"{reason}\"}}")}],
        }),
    )
}

fn validate_create(set: &PolicySet, object: &Value) -> Decision {
    kanon_engine::block_on(set.validate(&create(object), None, &NoObjects))
}

#[test]
fn deny_warn_and_audit() {
    let object = deployment();
    // Deny (the default): rejected, the message prefixed with the policy.
    for actions in [None, Some(json!([])), Some(json!(["Deny"]))] {
        let mut doc = rejecting(cvp, "no-web", json!(["Deny"]), "web is closed");
        match &actions {
            Some(a) => doc["spec"]["validationActions"] = a.clone(),
            None => {
                doc["spec"]
                    .as_object_mut()
                    .unwrap()
                    .remove("validationActions");
            }
        }
        let d = validate_create(&set_of(&[doc]), &object);
        assert!(!d.allowed, "{actions:?}");
        assert_eq!(d.messages, ["ClusterValidatePolicy/no-web: web is closed"]);
        assert!(d.warnings.is_empty() && d.audit_annotations.is_empty());
    }
    // Warn: admitted with a warning.
    let d = validate_create(
        &set_of(&[rejecting(cvp, "soon", json!(["Warn"]), "deprecated")]),
        &object,
    );
    assert!(d.allowed && d.messages.is_empty(), "{d:?}");
    assert_eq!(d.warnings, ["ClusterValidatePolicy/soon: deprecated"]);
    assert!(d.audit_annotations.is_empty());
    // Audit: admitted with an audit annotation `<kind>.<name>` (namespaced: `<kind>.<ns>.<name>`).
    let d = validate_create(
        &set_of(&[rejecting(cvp, "watch", json!(["Audit"]), "noted")]),
        &object,
    );
    assert!(
        d.allowed && d.messages.is_empty() && d.warnings.is_empty(),
        "{d:?}"
    );
    assert_eq!(
        serde_json::to_value(&d.audit_annotations).unwrap(),
        json!({"clustervalidatepolicy.watch": "noted"})
    );
    let d = validate_create(
        &set_of(&[rejecting(
            |n, s| vp("default", n, s),
            "watch",
            json!(["Audit"]),
            "noted",
        )]),
        &object,
    );
    assert_eq!(
        serde_json::to_value(&d.audit_annotations).unwrap(),
        json!({"validatepolicy.default.watch": "noted"})
    );
    // Combined.
    let d = validate_create(
        &set_of(&[rejecting(cvp, "both", json!(["Warn", "Audit"]), "r")]),
        &object,
    );
    assert!(d.allowed);
    assert_eq!(d.warnings, ["ClusterValidatePolicy/both: r"]);
    assert_eq!(d.audit_annotations.len(), 1);
    let d = validate_create(
        &set_of(&[rejecting(cvp, "both", json!(["Audit", "Deny"]), "r")]),
        &object,
    );
    assert!(!d.allowed);
    assert_eq!(d.messages, ["ClusterValidatePolicy/both: r"]);
    assert_eq!(d.audit_annotations["clustervalidatepolicy.both"], "r");
    // An object that passes gets none of them.
    let d = validate_create(
        &set_of(&[cvp(
            "pass",
            json!({"validationActions": ["Warn", "Audit"], "validateRules": [{"program": "{\"valid\": true}"}]}),
        )]),
        &object,
    );
    assert!(
        d.allowed && d.warnings.is_empty() && d.audit_annotations.is_empty(),
        "{d:?}"
    );
    assert_eq!(d.applied_policies, ["ClusterValidatePolicy/pass"]);
}

#[test]
fn audit_keys_are_valid_annotation_names() {
    let long = "a-very-long-policy-name-that-goes-on-and-on-and-on-and-on-and-on";
    let d = validate_create(
        &set_of(&[rejecting(cvp, long, json!(["Audit"]), "r")]),
        &deployment(),
    );
    let key = d.audit_annotations.keys().next().unwrap().clone();
    assert!(key.len() <= 63, "{key}");
    assert!(
        key.starts_with("clustervalidatepolicy.a-very-long"),
        "{key}"
    );
    assert!(
        key.ends_with(|c: char| c.is_ascii_alphanumeric()),
        "a qualified name ends with an alphanumeric character: {key}"
    );
}

#[test]
fn every_rejection_is_reported_in_order_each_prefixed_with_its_policy() {
    let set = set_of(&[
        vp(
            "default",
            "a-namespaced",
            json!({"validateRules": [{"program": "{\"valid\": false, \"reason\": \"ns\"}"}]}),
        ),
        rejecting(cvp, "b-second", json!(["Deny"]), "second"),
        cvp(
            "a-first",
            json!({"validateRules": [
                {"program": "{\"valid\": false, \"reason\": \"first rule\"}"},
                {"program": "{\"valid\": true}"},
                {"template": {"type": "condition", "condition": {"cond": "Exist", "dataRef": {"from": "current", "path": "/metadata/name"}, "message": "third rule"}}},
            ]}),
        ),
        rejecting(cvp, "c-warns", json!(["Warn"]), "just so you know"),
        cvp(
            "d-passes",
            json!({"validateRules": [{"program": "{\"valid\": true, \"warnings\": [\"fyi\"]}"}]}),
        ),
    ]);
    let d = validate_create(&set, &deployment());
    assert!(!d.allowed);
    assert_eq!(
        d.messages,
        [
            "ClusterValidatePolicy/a-first: first rule",
            "ClusterValidatePolicy/a-first: third rule",
            "ClusterValidatePolicy/b-second: second",
            "ValidatePolicy/default/a-namespaced: ns",
        ]
    );
    assert_eq!(
        d.warnings,
        [
            "ClusterValidatePolicy/c-warns: just so you know",
            "ClusterValidatePolicy/d-passes: fyi",
        ]
    );
    assert_eq!(
        d.applied_policies,
        [
            "ClusterValidatePolicy/a-first",
            "ClusterValidatePolicy/b-second",
            "ClusterValidatePolicy/c-warns",
            "ClusterValidatePolicy/d-passes",
            "ValidatePolicy/default/a-namespaced",
        ]
    );
}

#[test]
fn evaluation_errors_follow_each_policys_failure_policy() {
    let broken = |name: &str, failure_policy: &str| {
        cvp(
            name,
            json!({"failurePolicy": failure_policy, "validateRules": [{"template": {"type": "condition", "condition": {
                "cond": "Equal", "dataRef": {"from": "k8s", "path": "/data/x", "k8s": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "absent"}},
                "value": {"string": "x"},
            }}}]}),
        )
    };
    let set = set_of(&[
        broken("a-fails", "Fail"),
        broken("b-ignored", "Ignore"),
        rejecting(cvp, "c-rejects", json!(["Deny"]), "no"),
    ]);
    let d = validate_create(&set, &deployment());
    assert!(!d.allowed);
    assert_eq!(
        d.messages,
        [
            "ClusterValidatePolicy/a-fails: spec.validateRules[0].template.condition.dataRef.k8s: v1 ConfigMap default/absent was not found",
            "ClusterValidatePolicy/c-rejects: no",
        ]
    );
    assert_eq!(
        d.warnings,
        [
            "ClusterValidatePolicy/b-ignored: skipped (failurePolicy Ignore): spec.validateRules[0].template.condition.dataRef.k8s: v1 ConfigMap default/absent was not found"
        ]
    );
}

#[test]
fn conditions_judge_the_mutated_object_and_the_old_one_on_delete() {
    let set = set_of(&[
        cop(
            "label",
            json!({"overrideRules": [{"overriders": {"template": {"type": "labels", "operation": "add", "path": "team", "value": {"string": "core"}}}}]}),
        ),
        condition_policy(
            "team-required",
            json!({"cond": "Exist", "dataRef": current("/metadata/labels/team"), "affectMode": "allow", "message": "a team label is required"}),
        ),
    ]);
    let object = deployment();
    // review(): the override runs first, so the condition holds.
    let d = kanon_engine::block_on(set.review(&create(&object), &NoObjects));
    assert!(d.allowed, "{d:?}");
    assert_eq!(
        d.patched.as_ref().unwrap()["metadata"]["labels"]["team"],
        "core"
    );
    // validate() alone sees the object as sent.
    let d = validate_create(&set, &object);
    assert_eq!(
        d.messages,
        ["ClusterValidatePolicy/team-required: a team label is required"]
    );
    // On DELETE the object under test is the old object.
    let mut old = object.clone();
    old["metadata"]["labels"]["team"] = json!("core");
    let req = Request::from_objects(Operation::Delete, None, Some(old)).unwrap();
    assert!(kanon_engine::block_on(set.review(&req, &NoObjects)).allowed);
    let req = Request::from_objects(Operation::Delete, None, Some(object)).unwrap();
    assert!(!kanon_engine::block_on(set.review(&req, &NoObjects)).allowed);
}

#[test]
fn the_message_is_rendered_only_for_a_denial() {
    // The message names the very field whose absence makes the condition miss: rendering it
    // when nothing is denied would fail the policy.
    let condition = json!({
        "cond": "NotEqual",
        "dataRef": current("/spec/strategy/type"),
        "value": {"string": "RollingUpdate"},
        "message": "strategy {{ object.spec.strategy.type }} is not allowed",
    });
    let d = judge(condition.clone(), &deployment());
    assert!(
        d.allowed && d.messages.is_empty() && d.warnings.is_empty(),
        "{d:?}"
    );
    let mut recreate = deployment();
    recreate["spec"]["strategy"] = json!({"type": "Recreate"});
    let d = judge(condition, &recreate);
    assert_eq!(
        d.messages,
        ["ClusterValidatePolicy/check: strategy Recreate is not allowed"]
    );
}

#[test]
fn create_has_no_old_object_even_when_one_is_given() {
    let condition = json!({"cond": "Exist", "dataRef": {"from": "old", "path": "/metadata/name"}, "message": "HIT"});
    let set = set_of(&[condition_policy("check", condition)]);
    let request =
        Request::from_objects(Operation::Create, Some(deployment()), Some(deployment())).unwrap();
    assert_eq!(request.old_object, None);
    assert!(kanon_engine::block_on(set.validate(&request, None, &NoObjects)).allowed);
    let update =
        Request::from_objects(Operation::Update, Some(deployment()), Some(deployment())).unwrap();
    assert!(!kanon_engine::block_on(set.validate(&update, None, &NoObjects)).allowed);
}
