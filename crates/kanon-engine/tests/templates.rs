//! Override templates rendered to rule programs: annotations, labels, nodeSelector,
//! resources, resourcesOversell, tolerations, affinity and field, each with add, replace,
//! remove and default, on every kind that keeps a pod spec (Pod, workloads with
//! `spec.template`, CronJob).

mod common;

use common::*;
use kanon_api::Operation;
use kanon_engine::{Decision, NoObjects, ObjectStore, Request};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Objects and helpers
// ---------------------------------------------------------------------------------------------

/// Two containers: `app` with limits only, `sidecar` with limits and a CPU request.
fn pod_spec() -> Value {
    json!({
        "containers": [
            {"name": "app", "image": "nginx", "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}},
            {"name": "sidecar", "image": "envoy", "resources": {
                "limits": {"cpu": "2", "memory": "256Mi"},
                "requests": {"cpu": "100m"},
            }},
        ],
    })
}

fn metadata() -> Value {
    json!({"name": "web", "namespace": "default", "labels": {"app": "web"}})
}

/// The object of `kind` holding `spec` as its pod spec.
fn holding(kind: &str, spec: Value) -> Value {
    match kind {
        "Pod" => json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata(), "spec": spec}),
        "Deployment" => json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata(),
            "spec": {"replicas": 3, "paused": false, "template": {"metadata": {"labels": {"app": "web"}}, "spec": spec}},
        }),
        "CronJob" => json!({
            "apiVersion": "batch/v1", "kind": "CronJob", "metadata": metadata(),
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": spec}}}},
        }),
        other => panic!("no test object of kind {other}"),
    }
}

/// Where each kind keeps its pod spec.
const KINDS: [(&str, &str); 3] = [
    ("Pod", "/spec"),
    ("Deployment", "/spec/template/spec"),
    ("CronJob", "/spec/jobTemplate/spec/template/spec"),
];

/// A ClusterOverridePolicy whose only rule is `template`.
fn template_policy(template: Value) -> Value {
    cop(
        "tpl",
        json!({"overrideRules": [{"overriders": {"template": template}}]}),
    )
}

/// Runs `template` on a CREATE of `object`; the request must be admitted and the patch must
/// be the diff original → final.
#[track_caller]
fn run(template: Value, object: &Value) -> Decision {
    let set = set_of(&[template_policy(template)]);
    let d = mutate_create(&set, object);
    assert!(d.allowed, "{d:#?}");
    assert_eq!(d.applied_policies, ["ClusterOverridePolicy/tpl"], "{d:#?}");
    assert_patch_is_diff(object, &d);
    d
}

fn patched(d: &Decision) -> &Value {
    d.patched.as_ref().expect("a patched object")
}

fn patch_of(d: &Decision) -> Value {
    serde_json::to_value(&d.patch).unwrap()
}

/// The value at `pointer` in `value`, or null.
fn at(value: &Value, pointer: &str) -> Value {
    value.pointer(pointer).cloned().unwrap_or(Value::Null)
}

/// Sets `pointer` (whose parent exists) in `object`; `null` removes it.
fn with(mut object: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let key = key.replace("~1", "/").replace("~0", "~");
    let map = object
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("no parent map at {parent}"));
    if value.is_null() {
        map.remove(&key);
    } else {
        map.insert(key, value);
    }
    object
}

// ---------------------------------------------------------------------------------------------
// annotations, labels, nodeSelector
// ---------------------------------------------------------------------------------------------

/// Where a string-map template writes, on an object of `kind` whose pod spec is at `spec`.
fn map_pointer(template_type: &str, spec: &str) -> String {
    match template_type {
        "annotations" => "/metadata/annotations".into(),
        "labels" => "/metadata/labels".into(),
        "nodeSelector" => format!("{spec}/nodeSelector"),
        other => panic!("{other}"),
    }
}

#[test]
fn string_map_templates_add_replace_remove_on_every_kind() {
    // (operation, key, value, map before (null: absent), map after (null: absent))
    let rows: Vec<(&str, &str, Option<&str>, Value, Value)> = vec![
        ("add", "team", Some("a"), json!(null), json!({"team": "a"})),
        (
            "add",
            "team",
            Some("a"),
            json!({"other": "x"}),
            json!({"other": "x", "team": "a"}),
        ),
        (
            "add",
            "team",
            Some("b"),
            json!({"team": "a"}),
            json!({"team": "b"}),
        ),
        (
            "add",
            "team",
            Some("a"),
            json!({"team": "a"}),
            json!({"team": "a"}),
        ),
        ("add", "team", Some("a"), json!({}), json!({"team": "a"})),
        (
            "replace",
            "team",
            Some("b"),
            json!({"team": "a", "o": "x"}),
            json!({"team": "b", "o": "x"}),
        ),
        (
            "replace",
            "team",
            Some("a"),
            json!(null),
            json!({"team": "a"}),
        ),
        (
            "replace",
            "team",
            Some("a"),
            json!({"other": "x"}),
            json!({"other": "x", "team": "a"}),
        ),
        (
            "remove",
            "team",
            None,
            json!({"team": "a", "other": "x"}),
            json!({"other": "x"}),
        ),
        (
            "remove",
            "team",
            None,
            json!({"other": "x"}),
            json!({"other": "x"}),
        ),
        ("remove", "team", None, json!(null), json!(null)),
        ("remove", "team", None, json!({"team": "a"}), json!({})),
        // Keys with `/` and `.` are keys, not paths.
        (
            "add",
            "example.com/owner.team",
            Some("payments"),
            json!({"a.b/c": "1"}),
            json!({"a.b/c": "1", "example.com/owner.team": "payments"}),
        ),
        (
            "remove",
            "a.b/c",
            None,
            json!({"a.b/c": "1", "a.b": "2", "c": "3"}),
            json!({"a.b": "2", "c": "3"}),
        ),
        (
            "add",
            "tilde~key",
            Some("t"),
            json!(null),
            json!({"tilde~key": "t"}),
        ),
    ];
    let mut failures = Vec::new();
    for template_type in ["annotations", "labels", "nodeSelector"] {
        for (kind, spec) in KINDS {
            for (operation, key, value, before, after) in &rows {
                let pointer = map_pointer(template_type, spec);
                let object = with(holding(kind, pod_spec()), &pointer, before.clone());
                let mut template =
                    json!({"type": template_type, "operation": operation, "path": key});
                if let Some(v) = value {
                    template["value"] = json!({"string": v});
                }
                let d = run(template, &object);
                let got = at(patched(&d), &pointer);
                if &got != after {
                    failures.push(format!(
                        "{template_type} {operation} {key} on {kind} with {before}: expected {after}, got {got}"
                    ));
                }
                // Nothing else changes, and no change means no patch.
                let mut rest = patched(&d).clone();
                let mut original = object.clone();
                for o in [&mut rest, &mut original] {
                    *o = with(o.clone(), &pointer, Value::Null);
                }
                assert_eq!(rest, original, "{template_type} {operation} on {kind}");
                if before == after {
                    assert!(
                        d.patch.0.is_empty(),
                        "{template_type} {operation} {key} on {kind}: {d:?}"
                    );
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn string_map_patches_are_minimal_and_escaped() {
    // The map exists: one `add` of the key, its `/` escaped.
    let object = holding("Pod", pod_spec());
    let d = run(
        json!({"type": "labels", "operation": "add", "path": "app.kubernetes.io/name", "value": {"string": "web"}}),
        &object,
    );
    assert_eq!(
        patch_of(&d),
        json!([{"op": "add", "path": "/metadata/labels/app.kubernetes.io~1name", "value": "web"}])
    );
    // The map is missing: it is created.
    let d = run(
        json!({"type": "annotations", "operation": "add", "path": "example.com/by", "value": {"string": "kanon"}}),
        &object,
    );
    assert_eq!(
        patch_of(&d),
        json!([{"op": "add", "path": "/metadata/annotations", "value": {"example.com/by": "kanon"}}])
    );
    // nodeSelector, missing, on a CronJob.
    let cron = holding("CronJob", pod_spec());
    let d = run(
        json!({"type": "nodeSelector", "operation": "replace", "path": "kubernetes.io/os", "value": {"string": "linux"}}),
        &cron,
    );
    assert_eq!(
        patch_of(&d),
        json!([{"op": "add", "path": "/spec/jobTemplate/spec/template/spec/nodeSelector", "value": {"kubernetes.io/os": "linux"}}])
    );
    // Removing a key that is present: one `remove`.
    let labelled = with(object.clone(), "/metadata/labels/tier", json!("front"));
    let d = run(
        json!({"type": "labels", "operation": "remove", "path": "tier"}),
        &labelled,
    );
    assert_eq!(
        patch_of(&d),
        json!([{"op": "remove", "path": "/metadata/labels/tier"}])
    );
}

#[test]
fn string_map_sets_and_removes_several_keys() {
    for template_type in ["annotations", "labels", "nodeSelector"] {
        for (kind, spec) in KINDS {
            let pointer = map_pointer(template_type, spec);
            let object = with(
                holding(kind, pod_spec()),
                &pointer,
                json!({"a": "0", "keep": "k", "x.io/y": "old"}),
            );
            for operation in ["add", "replace"] {
                let d = run(
                    json!({"type": template_type, "operation": operation, "value": {"stringMap": {"a": "1", "b": "2", "x.io/y": "new"}}}),
                    &object,
                );
                assert_eq!(
                    at(patched(&d), &pointer),
                    json!({"a": "1", "keep": "k", "x.io/y": "new", "b": "2"}),
                    "{template_type} {operation} on {kind}"
                );
            }
            // remove: the stringMap's keys are removed, whatever their values; absent ones
            // are no error.
            let d = run(
                json!({"type": template_type, "operation": "remove", "value": {"stringMap": {"a": "", "x.io/y": "", "absent": ""}}}),
                &object,
            );
            assert_eq!(
                at(patched(&d), &pointer),
                json!({"keep": "k"}),
                "{template_type} on {kind}"
            );
            // Nothing to remove: no patch.
            let d = run(
                json!({"type": template_type, "operation": "remove", "value": {"stringMap": {"absent": "", "other": ""}}}),
                &object,
            );
            assert!(d.patch.0.is_empty(), "{d:?}");
        }
    }
}

#[test]
fn scalar_values_become_strings() {
    let object = holding("Pod", pod_spec());
    for (value, text) in [
        (json!({"string": "plain"}), "plain"),
        (json!({"integer": 5}), "5"),
        (json!({"boolean": true}), "true"),
        (json!({"float": "1.5"}), "1.5"),
        (json!({"float": 0.25}), "0.25"),
    ] {
        let d = run(
            json!({"type": "annotations", "operation": "add", "path": "v", "value": value}),
            &object,
        );
        assert_eq!(
            patched(&d)["metadata"]["annotations"]["v"],
            json!(text),
            "{value}"
        );
    }
    // A list is no label value: a compile error at the field.
    let errors = compile_errors(&template_policy(
        json!({"type": "labels", "operation": "add", "path": "v", "value": {"stringSlice": ["a"]}}),
    ));
    assert_error(
        &errors,
        "spec.overrideRules[0].overriders.template.value",
        "take a string value",
    );
}

#[test]
fn value_ref_present_missing_and_structured() {
    let object = holding("Deployment", pod_spec());
    // From the object, by JSON pointer and by JSONPath; numbers become strings.
    let rows = [
        (json!({"from": "current", "path": "/metadata/name"}), "web"),
        (json!({"from": "current", "path": "/spec/replicas"}), "3"),
        (json!({"from": "current", "path": "/spec/paused"}), "false"),
        (
            json!({"from": "current", "path": "$.metadata.labels.app"}),
            "web",
        ),
        (
            json!({"from": "current", "path": "/spec/template/spec/containers/1/image"}),
            "envoy",
        ),
    ];
    for (value_ref, expected) in rows {
        for template_type in ["annotations", "labels", "nodeSelector"] {
            let d = run(
                json!({"type": template_type, "operation": "add", "path": "copied/from", "valueRef": value_ref}),
                &object,
            );
            let pointer = map_pointer(template_type, "/spec/template/spec");
            assert_eq!(
                at(patched(&d), &pointer)["copied/from"],
                json!(expected),
                "{template_type} {value_ref}"
            );
        }
    }
    // A missing value changes nothing and is no error.
    for path in ["/metadata/annotations/nope", "/spec/nope", "$.spec.nope"] {
        let d = run(
            json!({"type": "labels", "operation": "replace", "path": "x", "valueRef": {"from": "current", "path": path}}),
            &object,
        );
        assert!(d.patch.0.is_empty(), "{path}: {d:?}");
    }
    // No old object on CREATE: nothing to copy.
    let d = run(
        json!({"type": "labels", "operation": "add", "path": "x", "valueRef": {"from": "old", "path": "/metadata/name"}}),
        &object,
    );
    assert!(d.patch.0.is_empty(), "{d:?}");
    // On UPDATE, from the old object.
    let old = with(object.clone(), "/metadata/labels/version", json!("v1"));
    let new = with(object.clone(), "/metadata/labels/version", json!("v2"));
    let set = set_of(&[template_policy(
        json!({"type": "annotations", "operation": "add", "path": "previous-version", "valueRef": {"from": "old", "path": "/metadata/labels/version"}}),
    )]);
    let req = Request::from_objects(Operation::Update, Some(new.clone()), Some(old)).unwrap();
    let d = kanon_engine::block_on(set.mutate(&req, &NoObjects));
    assert_eq!(
        patch_of(&d),
        json!([{"op": "add", "path": "/metadata/annotations", "value": {"previous-version": "v1"}}])
    );
    // From another object, by name.
    let mut store = ObjectStore::new();
    store
        .insert(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "teams", "namespace": "default"}, "data": {"web": "payments"}}))
        .unwrap();
    let set = set_of(&[template_policy(json!({
        "type": "labels", "operation": "add", "path": "team",
        "valueRef": {"from": "k8s", "path": "/data/web", "k8s": {
            "apiVersion": "v1", "kind": "ConfigMap", "namespace": "{{ object.metadata.namespace }}", "name": "teams",
        }},
    }))]);
    let d = mutate_with(&set, &object, &store);
    assert_eq!(
        patched(&d)["metadata"]["labels"]["team"],
        "payments",
        "{d:?}"
    );

    // A map or a list cannot be a label: an evaluation error naming the field.
    let set = set_of(&[template_policy(
        json!({"type": "labels", "operation": "add", "path": "x", "valueRef": {"from": "current", "path": "/metadata/labels"}}),
    )]);
    let d = mutate_create(&set, &object);
    assert!(!d.allowed);
    assert_eq!(d.messages.len(), 1, "{d:?}");
    let m = &d.messages[0];
    assert!(
        m.starts_with("ClusterOverridePolicy/tpl: spec.overrideRules[0].overriders.template: ")
            && m.contains("valueRef: labels take text, not {\"app\": \"web\"}"),
        "{m}"
    );
}

#[test]
fn templates_on_objects_without_a_pod_spec_change_nothing() {
    let service = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": metadata(),
        "spec": {"ports": [{"port": 80}]},
    });
    let templates = [
        json!({"type": "nodeSelector", "operation": "add", "path": "a", "value": {"string": "b"}}),
        json!({"type": "resources", "operation": "add", "resources": {"limits": {"cpu": "1"}}}),
        json!({"type": "resourcesOversell", "operation": "add", "resourcesOversell": {"cpuFactor": "0.5"}}),
        json!({"type": "tolerations", "operation": "add", "tolerations": [{"key": "a", "operator": "Exists"}]}),
        json!({"type": "affinity", "operation": "add", "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}]}}}),
        json!({"type": "field", "within": "podSpec", "operation": "default", "path": "/a", "value": {"string": "b"}}),
        json!({"type": "field", "within": "containers", "operation": "add", "path": "/a", "value": {"string": "b"}}),
    ];
    for template in templates {
        let d = run(template.clone(), &service);
        assert!(d.patch.0.is_empty(), "{template}: {d:?}");
    }
    // Annotations and labels apply to any kind.
    let d = run(
        json!({"type": "annotations", "operation": "add", "path": "a", "value": {"string": "b"}}),
        &service,
    );
    assert_eq!(patched(&d)["metadata"]["annotations"], json!({"a": "b"}));
}

// ---------------------------------------------------------------------------------------------
// resources
// ---------------------------------------------------------------------------------------------

fn container_resources(d: &Decision, spec: &str) -> Vec<Value> {
    at(patched(d), &format!("{spec}/containers"))
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.get("resources").cloned().unwrap_or(Value::Null))
        .collect()
}

#[test]
fn resources_add_replace_remove_on_every_kind() {
    for (kind, spec) in KINDS {
        let object = holding(kind, pod_spec());
        for operation in ["add", "replace"] {
            let d = run(
                json!({"type": "resources", "operation": operation, "resources": {
                    "requests": {"cpu": "250m", "memory": "64Mi"},
                    "limits": {"cpu": "1500m"},
                }}),
                &object,
            );
            // Every container; quantities exactly as written; other entries kept.
            assert_eq!(
                container_resources(&d, spec),
                vec![
                    json!({"limits": {"cpu": "1500m", "memory": "1Gi"}, "requests": {"cpu": "250m", "memory": "64Mi"}}),
                    json!({"limits": {"cpu": "1500m", "memory": "256Mi"}, "requests": {"cpu": "250m", "memory": "64Mi"}}),
                ],
                "{operation} on {kind}"
            );
            for op in patch_of(&d).as_array().unwrap() {
                assert!(
                    op["path"]
                        .as_str()
                        .unwrap()
                        .starts_with(&format!("{spec}/containers/")),
                    "{op}"
                );
            }
        }
        // remove: the named entries go (values are ignored); empty sections go too; absent
        // entries are no error.
        let d = run(
            json!({"type": "resources", "operation": "remove", "resources": {
                "requests": {"cpu": "0", "ephemeral-storage": "0"},
                "limits": {"memory": "0"},
            }}),
            &object,
        );
        assert_eq!(
            container_resources(&d, spec),
            vec![
                json!({"limits": {"cpu": "500m"}}),
                json!({"limits": {"cpu": "2"}}),
            ],
            "remove on {kind}"
        );
        // Removing what is not there: no patch.
        let d = run(
            json!({"type": "resources", "operation": "remove", "resources": {"requests": {"nvidia.com/gpu": "0"}}}),
            &object,
        );
        assert!(d.patch.0.is_empty(), "{d:?}");
        // Setting what is already there: no patch.
        let d = run(
            json!({"type": "resources", "operation": "add", "resources": {"limits": {"cpu": "500m"}}, "containerNames": ["app"]}),
            &object,
        );
        assert!(d.patch.0.is_empty(), "{d:?}");
    }
}

#[test]
fn resources_container_names_narrow_and_missing_resources_are_created() {
    let spec = json!({"containers": [
        {"name": "app", "image": "nginx"},
        {"name": "sidecar", "image": "envoy"},
        {"name": "logger", "image": "fluent"},
    ]});
    for (kind, at_spec) in KINDS {
        let object = holding(kind, spec.clone());
        let d = run(
            json!({"type": "resources", "operation": "add", "containerNames": ["sidecar", "logger", "absent"],
                   "resources": {"limits": {"memory": "128Mi", "example.com/dongle": "1"}}}),
            &object,
        );
        assert_eq!(
            container_resources(&d, at_spec),
            vec![
                Value::Null,
                json!({"limits": {"memory": "128Mi", "example.com/dongle": "1"}}),
                json!({"limits": {"memory": "128Mi", "example.com/dongle": "1"}}),
            ],
            "{kind}"
        );
        // The patch adds whole `resources` maps where there were none, `/` escaped nowhere
        // needed.
        assert_eq!(
            patch_of(&d),
            json!([
                {"op": "add", "path": format!("{at_spec}/containers/1/resources"), "value": {"limits": {"memory": "128Mi", "example.com/dongle": "1"}}},
                {"op": "add", "path": format!("{at_spec}/containers/2/resources"), "value": {"limits": {"memory": "128Mi", "example.com/dongle": "1"}}},
            ])
        );
    }
    // No container named: nothing happens.
    let d = run(
        json!({"type": "resources", "operation": "add", "containerNames": ["nope"], "resources": {"limits": {"cpu": "1"}}}),
        &holding("Pod", spec),
    );
    assert!(d.patch.0.is_empty());
}

#[test]
fn resource_quantities_are_checked_when_the_policy_is_written() {
    let errors = compile_errors(&template_policy(
        json!({"type": "resources", "operation": "add", "resources": {"limits": {"cpu": "lots"}}}),
    ));
    assert_error(
        &errors,
        "spec.overrideRules[0].overriders.template.resources.limits.cpu",
        "`lots` is not a Kubernetes quantity",
    );
    // containerNames belongs to resources templates only.
    let errors = compile_errors(&template_policy(
        json!({"type": "labels", "operation": "add", "path": "a", "value": {"string": "b"}, "containerNames": ["app"]}),
    ));
    assert_error(
        &errors,
        "spec.overrideRules[0].overriders.template.containerNames",
        "is not used by type labels",
    );
}

// ---------------------------------------------------------------------------------------------
// resourcesOversell
// ---------------------------------------------------------------------------------------------

#[test]
fn oversell_requests_are_exact_fractions_of_limits() {
    let spec = json!({"containers": [
        {"name": "app", "image": "nginx", "resources": {"limits": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "2Gi"}}},
        {"name": "sidecar", "image": "envoy", "resources": {"limits": {"cpu": "2", "memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "1Mi"}}},
        {"name": "nolimits", "image": "busybox"},
    ]});
    for (kind, at_spec) in KINDS {
        let object = holding(kind, spec.clone());
        for (operation, cpu, memory) in [
            ("add", json!("0.25"), json!(0.5)),
            ("replace", json!(0.25), json!("0.5")),
        ] {
            let d = run(
                json!({"type": "resourcesOversell", "operation": operation, "resourcesOversell": {
                    "cpuFactor": cpu, "memoryFactor": memory, "diskFactor": "0.75",
                }}),
                &object,
            );
            assert_eq!(
                container_resources(&d, at_spec),
                vec![
                    json!({"limits": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "2Gi"},
                           "requests": {"cpu": "125m", "memory": "512Mi", "ephemeral-storage": "1536Mi"}}),
                    json!({"limits": {"cpu": "2", "memory": "256Mi"},
                           "requests": {"cpu": "500m", "memory": "128Mi"}}),
                    Value::Null,
                ],
                "{operation} on {kind}"
            );
        }
        // remove: the requests of each factor's resource go.
        let d = run(
            json!({"type": "resourcesOversell", "operation": "remove", "resourcesOversell": {"cpuFactor": "0.5"}}),
            &object,
        );
        assert_eq!(
            container_resources(&d, at_spec)[1],
            json!({"limits": {"cpu": "2", "memory": "256Mi"}, "requests": {"memory": "1Mi"}}),
            "{kind}"
        );
        // Removing requests that are not there: no patch.
        let d = run(
            json!({"type": "resourcesOversell", "operation": "remove", "resourcesOversell": {"diskFactor": "0.5"}}),
            &object,
        );
        assert!(d.patch.0.is_empty(), "{d:?}");
    }
}

#[test]
fn oversell_container_names_and_exact_patch() {
    let object = holding("Deployment", pod_spec());
    let d = run(
        json!({"type": "resourcesOversell", "operation": "add", "containerNames": ["app"],
               "resourcesOversell": {"cpuFactor": "0.25", "memoryFactor": "0.5"}}),
        &object,
    );
    assert_eq!(
        patch_of(&d),
        json!([{"op": "add", "path": "/spec/template/spec/containers/0/resources/requests",
                "value": {"cpu": "125m", "memory": "512Mi"}}])
    );
    // Exactness where floats would round: 1 × 0.1 = 100m, 3 × 0.333 = 999m, 100Mi × 0.3.
    let spec = json!({"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "3", "memory": "100Mi"}}}]});
    let d = run(
        json!({"type": "resourcesOversell", "operation": "add", "resourcesOversell": {"cpuFactor": "0.333", "memoryFactor": "0.3"}}),
        &holding("Pod", spec),
    );
    assert_eq!(
        patched(&d)["spec"]["containers"][0]["resources"]["requests"],
        json!({"cpu": "999m", "memory": "30Mi"})
    );
}

#[test]
fn oversell_factors_must_lie_strictly_between_zero_and_one() {
    for bad in [
        json!("0"),
        json!("1"),
        json!(1.5),
        json!("-0.5"),
        json!("half"),
        json!(0),
    ] {
        let errors = compile_errors(&template_policy(
            json!({"type": "resourcesOversell", "operation": "add", "resourcesOversell": {"memoryFactor": bad}}),
        ));
        assert_error(
            &errors,
            "spec.overrideRules[0].overriders.template.resourcesOversell.memoryFactor",
            "must be a number strictly between 0 and 1",
        );
    }
    let errors = compile_errors(&template_policy(
        json!({"type": "resourcesOversell", "operation": "add", "resourcesOversell": {}}),
    ));
    assert_error(
        &errors,
        "spec.overrideRules[0].overriders.template.resourcesOversell",
        "set at least one of cpuFactor, memoryFactor, diskFactor",
    );
}

#[test]
fn oversell_of_a_limit_that_is_no_quantity_is_an_evaluation_error() {
    let spec = json!({"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "lots"}}}]});
    let set = set_of(&[template_policy(
        json!({"type": "resourcesOversell", "operation": "add", "resourcesOversell": {"cpuFactor": "0.5"}}),
    )]);
    let d = mutate_create(&set, &holding("Pod", spec));
    assert!(!d.allowed);
    assert!(
        d.messages[0].contains("limits.cpu: `lots` is not a Kubernetes quantity"),
        "{:?}",
        d.messages
    );
}

// ---------------------------------------------------------------------------------------------
// tolerations
// ---------------------------------------------------------------------------------------------

#[test]
fn tolerations_add_replace_remove_on_every_kind() {
    let gpu = json!({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"});
    let zone_a = json!({"key": "zone", "operator": "Equal", "value": "a", "effect": "NoExecute"});
    let zone_b = json!({"key": "zone", "operator": "Equal", "value": "b", "effect": "NoExecute"});
    let spot = json!({"key": "spot", "operator": "Exists"});
    // (operation, template tolerations, before (null: absent), after (null: absent))
    let rows: Vec<(&str, Value, Value, Value)> = vec![
        ("add", json!([gpu]), json!(null), json!([gpu])),
        ("add", json!([gpu]), json!([zone_a]), json!([zone_a, gpu])),
        (
            "add",
            json!([gpu]),
            json!([gpu, zone_a]),
            json!([gpu, zone_a]),
        ),
        ("add", json!([gpu, spot]), json!([gpu]), json!([gpu, spot])),
        // replace: the matching entry (same key and effect) is swapped in place.
        (
            "replace",
            json!([zone_b]),
            json!([gpu, zone_a]),
            json!([gpu, zone_b]),
        ),
        // replace with nothing matching: the whole field.
        (
            "replace",
            json!([spot]),
            json!([gpu, zone_a]),
            json!([spot]),
        ),
        ("replace", json!([spot]), json!(null), json!([spot])),
        // remove: the matching entries; the field goes when empty; absent is no error.
        (
            "remove",
            json!([{"key": "zone"}]),
            json!([gpu, zone_a]),
            json!([gpu]),
        ),
        (
            "remove",
            json!([{"key": "zone", "value": "b"}]),
            json!([gpu, zone_a]),
            json!([gpu, zone_a]),
        ),
        (
            "remove",
            json!([{"key": "gpu"}, {"key": "zone"}]),
            json!([gpu, zone_a]),
            json!(null),
        ),
        ("remove", json!([spot]), json!([gpu]), json!([gpu])),
        ("remove", json!([spot]), json!(null), json!(null)),
    ];
    let mut failures = Vec::new();
    for (kind, spec) in KINDS {
        for (operation, tolerations, before, after) in &rows {
            let pointer = format!("{spec}/tolerations");
            let object = with(holding(kind, pod_spec()), &pointer, before.clone());
            let d = run(
                json!({"type": "tolerations", "operation": operation, "tolerations": tolerations}),
                &object,
            );
            let got = at(patched(&d), &pointer);
            if &got != after {
                failures.push(format!(
                    "{operation} {tolerations} on {kind} with {before}: expected {after}, got {got}"
                ));
            }
            if before == after {
                assert!(d.patch.0.is_empty(), "{operation} on {kind}: {d:?}");
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn tolerations_template_requires_tolerations() {
    let errors = compile_errors(&template_policy(
        json!({"type": "tolerations", "operation": "add"}),
    ));
    assert_error(
        &errors,
        "spec.overrideRules[0].overriders.template.tolerations",
        "is required for type tolerations",
    );
}

// ---------------------------------------------------------------------------------------------
// affinity
// ---------------------------------------------------------------------------------------------

fn zone_term(zone: &str) -> Value {
    json!({"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]})
}

fn node_required(terms: Value) -> Value {
    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}})
}

#[test]
fn affinity_add_replace_remove_on_every_kind() {
    let anti = json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}},
    ]}});
    let rows: Vec<(&str, Value, Value, Value)> = vec![
        // add: missing parents created; terms appended once.
        (
            "add",
            node_required(json!([zone_term("a")])),
            json!(null),
            node_required(json!([zone_term("a")])),
        ),
        (
            "add",
            node_required(json!([zone_term("b")])),
            node_required(json!([zone_term("a")])),
            node_required(json!([zone_term("a"), zone_term("b")])),
        ),
        (
            "add",
            node_required(json!([zone_term("a")])),
            node_required(json!([zone_term("a")])),
            node_required(json!([zone_term("a")])),
        ),
        (
            "add",
            anti.clone(),
            node_required(json!([zone_term("a")])),
            {
                let mut both = node_required(json!([zone_term("a")]));
                both["podAntiAffinity"] = anti["podAntiAffinity"].clone();
                both
            },
        ),
        // replace: the template's term list replaces the object's.
        (
            "replace",
            node_required(json!([zone_term("b")])),
            node_required(json!([zone_term("a"), zone_term("c")])),
            node_required(json!([zone_term("b")])),
        ),
        ("replace", anti.clone(), json!(null), anti.clone()),
        // remove: equal terms go; the field goes when empty.
        (
            "remove",
            node_required(json!([zone_term("a")])),
            node_required(json!([zone_term("a"), zone_term("c")])),
            node_required(json!([zone_term("c")])),
        ),
        (
            "remove",
            node_required(json!([zone_term("a")])),
            node_required(json!([zone_term("a")])),
            json!(null),
        ),
        (
            "remove",
            node_required(json!([zone_term("z")])),
            node_required(json!([zone_term("a")])),
            node_required(json!([zone_term("a")])),
        ),
        ("remove", anti.clone(), json!(null), json!(null)),
    ];
    let mut failures = Vec::new();
    for (kind, spec) in KINDS {
        for (operation, affinity, before, after) in &rows {
            let pointer = format!("{spec}/affinity");
            let object = with(holding(kind, pod_spec()), &pointer, before.clone());
            let d = run(
                json!({"type": "affinity", "operation": operation, "affinity": affinity}),
                &object,
            );
            let got = at(patched(&d), &pointer);
            if &got != after {
                failures.push(format!(
                    "{operation} {affinity} on {kind} with {before}: expected {after}, got {got}"
                ));
            }
            if before == after {
                assert!(d.patch.0.is_empty(), "{operation} on {kind}: {d:?}");
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------------

#[test]
fn templates_are_rendered_once_into_visible_programs() {
    let policy = compiled(&cop(
        "r",
        json!({"overrideRules": [
            {"overriders": {"plaintext": [{"op": "add", "path": "/a", "value": 1}]}},
            {"overriders": {"template": {"type": "labels", "operation": "add", "path": "a/b", "value": {"string": "c"}}}},
            {"overriders": {"template": {"type": "resourcesOversell", "operation": "add", "resourcesOversell": {"cpuFactor": "0.5"}}}},
        ]}),
    ));
    let fields: Vec<&str> = policy.rendered.iter().map(|r| r.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.overrideRules[1].overriders.template",
            "spec.overrideRules[2].overriders.template"
        ]
    );
    // The programs are ordinary minijinja with the policy's values embedded.
    assert!(
        policy.rendered[0].source.contains("\"a/b\""),
        "{}",
        policy.rendered[0].source
    );
    assert!(
        policy.rendered[1].source.contains("oversold("),
        "{}",
        policy.rendered[1].source
    );
}

#[test]
fn templates_and_plaintext_in_one_block_run_template_first() {
    // The template adds the label; the plaintext then sees it (a `test` would fail otherwise).
    let set = set_of(&[cop(
        "order",
        json!({"overrideRules": [{"overriders": {
            "template": {"type": "labels", "operation": "add", "path": "stage", "value": {"string": "template"}},
            "plaintext": [
                {"op": "test", "path": "/metadata/labels/stage", "value": "template"},
                {"op": "replace", "path": "/metadata/labels/stage", "value": "plaintext"},
            ],
        }}]}),
    )]);
    let object = holding("Pod", pod_spec());
    let d = mutate_create(&set, &object);
    assert!(d.allowed, "{d:?}");
    assert_eq!(patched(&d)["metadata"]["labels"]["stage"], "plaintext");
}

// ---------------------------------------------------------------------------------------------
// default: set only what is absent
// ---------------------------------------------------------------------------------------------

#[test]
fn resources_default_keeps_a_containers_own_request_and_sets_what_is_missing() {
    let spec = json!({"containers": [
        {"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "200m"}, "limits": {"memory": "1Gi"}}},
        {"name": "bare", "image": "busybox"},
    ]});
    let template = |operation: &str| {
        json!({"type": "resources", "operation": operation, "resources": {
            "requests": {"cpu": "100m", "memory": "64Mi"},
            "limits": {"memory": "128Mi"},
        }})
    };
    for (kind, at_spec) in KINDS {
        let object = holding(kind, spec.clone());
        let d = run(template("default"), &object);
        assert_eq!(
            container_resources(&d, at_spec),
            vec![
                // The Pod's own `cpu: 200m` request and memory limit stay; the missing memory
                // request is set.
                json!({"requests": {"cpu": "200m", "memory": "64Mi"}, "limits": {"memory": "1Gi"}}),
                json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}),
            ],
            "default on {kind}"
        );
        // `add` still overwrites: the request becomes 100m.
        let d = run(template("add"), &object);
        assert_eq!(
            container_resources(&d, at_spec)[0]["requests"]["cpu"],
            "100m",
            "{kind}"
        );
        // Nothing absent: no patch.
        let full = holding(
            kind,
            json!({"containers": [{"name": "app", "image": "nginx", "resources": {
                "requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}}]}),
        );
        let d = run(template("default"), &full);
        assert!(d.patch.0.is_empty(), "{kind}: {d:?}");
    }
}

#[test]
fn oversell_default_sets_a_request_only_where_there_is_none() {
    let spec = json!({"containers": [
        {"name": "app", "image": "nginx", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "300m"}}},
    ]});
    let d = run(
        json!({"type": "resourcesOversell", "operation": "default",
               "resourcesOversell": {"cpuFactor": "0.5", "memoryFactor": "0.5"}}),
        &holding("Pod", spec),
    );
    assert_eq!(
        patched(&d)["spec"]["containers"][0]["resources"]["requests"],
        json!({"cpu": "300m", "memory": "512Mi"})
    );
}

#[test]
fn string_map_default_keeps_an_existing_value() {
    for (kind, spec) in KINDS {
        for template_type in ["labels", "annotations", "nodeSelector"] {
            let pointer = map_pointer(template_type, spec);
            // (map before (null: absent), map after)
            let rows = [
                (json!(null), json!({"app": "other", "team": "a"})),
                (json!({"app": "web"}), json!({"app": "web", "team": "a"})),
                (
                    json!({"team": "b", "app": "web"}),
                    json!({"team": "b", "app": "web"}),
                ),
                // A null value is no value.
                (
                    json!({"team": null, "x": "y"}),
                    json!({"team": "a", "x": "y", "app": "other"}),
                ),
            ];
            for (before, after) in rows {
                let object = with(holding(kind, pod_spec()), &pointer, before.clone());
                let d = run(
                    json!({"type": template_type, "operation": "default",
                           "value": {"stringMap": {"app": "other", "team": "a"}}}),
                    &object,
                );
                assert_eq!(
                    at(patched(&d), &pointer),
                    after,
                    "{template_type} on {kind} with {before}"
                );
                if before == after {
                    assert!(d.patch.0.is_empty(), "{d:?}");
                }
            }
        }
    }
    // One key, and a valueRef: only where absent.
    let object = holding("Pod", pod_spec());
    let d = run(
        json!({"type": "labels", "operation": "default", "path": "app", "value": {"string": "x"}}),
        &object,
    );
    assert!(d.patch.0.is_empty(), "{d:?}");
    let d = run(
        json!({"type": "annotations", "operation": "default", "path": "owner",
               "valueRef": {"from": "current", "path": "/metadata/labels/app"}}),
        &object,
    );
    assert_eq!(
        patched(&d)["metadata"]["annotations"],
        json!({"owner": "web"})
    );
    let annotated = with(object, "/metadata/annotations", json!({"owner": "me"}));
    let d = run(
        json!({"type": "annotations", "operation": "default", "path": "owner",
               "valueRef": {"from": "current", "path": "/metadata/labels/app"}}),
        &annotated,
    );
    assert!(d.patch.0.is_empty(), "{d:?}");
}

#[test]
fn tolerations_and_affinity_default_only_where_the_pod_spec_has_none() {
    let gpu = json!({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"});
    let spot = json!({"key": "spot", "operator": "Exists"});
    let affinity = node_required(json!([zone_term("a")]));
    let other = node_required(json!([zone_term("b")]));
    for (kind, spec) in KINDS {
        let tolerations = format!("{spec}/tolerations");
        for (before, after) in [
            (json!(null), json!([gpu])),
            (json!([]), json!([gpu])),
            (json!([spot]), json!([spot])),
        ] {
            let object = with(holding(kind, pod_spec()), &tolerations, before.clone());
            let d = run(
                json!({"type": "tolerations", "operation": "default", "tolerations": [gpu]}),
                &object,
            );
            assert_eq!(at(patched(&d), &tolerations), after, "{kind} {before}");
        }
        let pointer = format!("{spec}/affinity");
        for (before, after) in [
            (json!(null), affinity.clone()),
            (json!({}), affinity.clone()),
            (other.clone(), other.clone()),
        ] {
            let object = with(holding(kind, pod_spec()), &pointer, before.clone());
            let d = run(
                json!({"type": "affinity", "operation": "default", "affinity": affinity}),
                &object,
            );
            assert_eq!(at(patched(&d), &pointer), after, "{kind} {before}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// init containers
// ---------------------------------------------------------------------------------------------

/// A pod spec with an init container and two containers, none with resources.
fn spec_with_init() -> Value {
    json!({
        "initContainers": [{"name": "migrate", "image": "flyway"}],
        "containers": [
            {"name": "app", "image": "nginx"},
            {"name": "sidecar", "image": "envoy", "resources": {"limits": {"cpu": "1"}}},
        ],
    })
}

#[test]
fn resources_cover_init_containers() {
    for (kind, at_spec) in KINDS {
        let object = holding(kind, spec_with_init());
        let d = run(
            json!({"type": "resources", "operation": "add", "resources": {"requests": {"cpu": "50m"}}}),
            &object,
        );
        assert_eq!(
            at(
                patched(&d),
                &format!("{at_spec}/initContainers/0/resources")
            ),
            json!({"requests": {"cpu": "50m"}}),
            "{kind}"
        );
        assert_eq!(
            container_resources(&d, at_spec),
            vec![
                json!({"requests": {"cpu": "50m"}}),
                json!({"limits": {"cpu": "1"}, "requests": {"cpu": "50m"}}),
            ]
        );
        // containerNames narrows across both lists (the patch follows the object's key order).
        let d = run(
            json!({"type": "resources", "operation": "default", "containerNames": ["migrate", "sidecar"],
                   "resources": {"requests": {"cpu": "50m"}}}),
            &object,
        );
        assert_eq!(
            patch_of(&d),
            json!([
                {"op": "add", "path": format!("{at_spec}/initContainers/0/resources"), "value": {"requests": {"cpu": "50m"}}},
                {"op": "add", "path": format!("{at_spec}/containers/1/resources/requests"), "value": {"cpu": "50m"}},
            ]),
            "{kind}"
        );
    }
    // Oversell too.
    let spec = json!({"initContainers": [{"name": "migrate", "image": "flyway",
                                          "resources": {"limits": {"cpu": "1"}}}]});
    let d = run(
        json!({"type": "resourcesOversell", "operation": "add", "resourcesOversell": {"cpuFactor": "0.5"}}),
        &holding("Pod", spec),
    );
    assert_eq!(
        patch_of(&d),
        json!([{"op": "add", "path": "/spec/initContainers/0/resources/requests", "value": {"cpu": "500m"}}])
    );
}

// ---------------------------------------------------------------------------------------------
// field
// ---------------------------------------------------------------------------------------------

#[test]
fn field_within_pod_spec_on_every_kind() {
    let run_as_non_root = |operation: &str| {
        json!({"type": "field", "within": "podSpec", "path": "/securityContext/runAsNonRoot",
               "operation": operation, "value": {"boolean": true}})
    };
    for (kind, spec) in KINDS {
        // The missing parent is created, in one operation.
        let object = holding(kind, pod_spec());
        let d = run(run_as_non_root("default"), &object);
        assert_eq!(
            patch_of(&d),
            json!([{"op": "add", "path": format!("{spec}/securityContext"), "value": {"runAsNonRoot": true}}]),
            "{kind}"
        );
        // An existing parent gains the field; its other fields stay.
        let object = with(
            holding(kind, pod_spec()),
            &format!("{spec}/securityContext"),
            json!({"runAsUser": 1000}),
        );
        let d = run(run_as_non_root("default"), &object);
        assert_eq!(
            at(patched(&d), &format!("{spec}/securityContext")),
            json!({"runAsUser": 1000, "runAsNonRoot": true}),
            "{kind}"
        );
        // An existing value: default keeps it, add and replace set it, remove removes it.
        let object = with(
            holding(kind, pod_spec()),
            &format!("{spec}/securityContext"),
            json!({"runAsNonRoot": false, "runAsUser": 1000}),
        );
        let d = run(run_as_non_root("default"), &object);
        assert!(d.patch.0.is_empty(), "{kind}: {d:?}");
        for operation in ["add", "replace"] {
            let d = run(run_as_non_root(operation), &object);
            assert_eq!(
                at(patched(&d), &format!("{spec}/securityContext")),
                json!({"runAsNonRoot": true, "runAsUser": 1000}),
                "{operation} on {kind}"
            );
        }
        let remove = json!({"type": "field", "within": "podSpec", "path": "/securityContext/runAsNonRoot",
                            "operation": "remove"});
        let d = run(remove.clone(), &object);
        assert_eq!(
            at(patched(&d), &format!("{spec}/securityContext")),
            json!({"runAsUser": 1000}),
            "{kind}"
        );
        // Removing what is not there: no patch, missing parents included.
        let d = run(remove, &holding(kind, pod_spec()));
        assert!(d.patch.0.is_empty(), "{kind}: {d:?}");
    }
    // A kind without a pod spec is left alone.
    let service =
        json!({"apiVersion": "v1", "kind": "Service", "metadata": metadata(), "spec": {}});
    let d = run(run_as_non_root("add"), &service);
    assert!(d.patch.0.is_empty(), "{d:?}");
}

#[test]
fn field_within_containers_covers_init_containers_and_narrows_by_name() {
    let spec = json!({
        "initContainers": [{"name": "migrate", "image": "flyway"}],
        "containers": [
            {"name": "app", "image": "nginx", "securityContext": {"allowPrivilegeEscalation": true}},
            {"name": "sidecar", "image": "envoy", "securityContext": {"runAsUser": 7}},
        ],
    });
    let template = |operation: &str, names: Value| {
        json!({"type": "field", "within": "containers", "path": "/securityContext/allowPrivilegeEscalation",
               "operation": operation, "value": {"boolean": false}, "containerNames": names})
    };
    for (kind, at_spec) in KINDS {
        let object = holding(kind, spec.clone());
        let d = run(template("default", json!([])), &object);
        assert_eq!(
            patch_of(&d),
            json!([
                {"op": "add", "path": format!("{at_spec}/initContainers/0/securityContext"), "value": {"allowPrivilegeEscalation": false}},
                {"op": "add", "path": format!("{at_spec}/containers/1/securityContext/allowPrivilegeEscalation"), "value": false},
            ]),
            "{kind}"
        );
        // The app container's own `true` stays under default, and is replaced under add.
        assert_eq!(
            at(
                patched(&d),
                &format!("{at_spec}/containers/0/securityContext")
            ),
            json!({"allowPrivilegeEscalation": true})
        );
        let d = run(template("add", json!(["app", "migrate"])), &object);
        assert_eq!(
            patch_of(&d),
            json!([
                {"op": "add", "path": format!("{at_spec}/initContainers/0/securityContext"), "value": {"allowPrivilegeEscalation": false}},
                {"op": "replace", "path": format!("{at_spec}/containers/0/securityContext/allowPrivilegeEscalation"), "value": false},
            ]),
            "{kind}"
        );
        let d = run(
            json!({"type": "field", "within": "containers", "path": "/securityContext/allowPrivilegeEscalation",
                   "operation": "remove", "containerNames": ["app", "sidecar"]}),
            &object,
        );
        assert_eq!(
            patch_of(&d),
            json!([{"op": "remove", "path": format!("{at_spec}/containers/0/securityContext/allowPrivilegeEscalation")}]),
            "{kind}"
        );
    }
}

#[test]
fn field_within_the_object_takes_any_key() {
    let template = |operation: &str| {
        json!({"type": "field", "path": "/metadata/annotations/a~1b", "operation": operation,
               "value": {"string": "x"}})
    };
    let object = holding("Pod", pod_spec());
    let d = run(template("default"), &object);
    assert_eq!(
        patch_of(&d),
        json!([{"op": "add", "path": "/metadata/annotations", "value": {"a/b": "x"}}])
    );
    let annotated = with(
        object.clone(),
        "/metadata/annotations",
        json!({"a/b": "mine"}),
    );
    let d = run(template("default"), &annotated);
    assert!(d.patch.0.is_empty(), "{d:?}");
    let d = run(template("replace"), &annotated);
    assert_eq!(patched(&d)["metadata"]["annotations"], json!({"a/b": "x"}));
    // Structured values, several missing parents at once, and `within: object` spelled out.
    let d = run(
        json!({"type": "field", "within": "object", "path": "/spec/dnsConfig/options",
               "operation": "add", "value": {"stringSlice": ["ndots:2"]}}),
        &object,
    );
    assert_eq!(
        patched(&d)["spec"]["dnsConfig"],
        json!({"options": ["ndots:2"]})
    );
    // A valueRef: copied where present, nothing where the reference is absent.
    let copy = |from: &str| {
        json!({"type": "field", "path": "/metadata/annotations/owner", "operation": "add",
               "valueRef": {"from": "current", "path": from}})
    };
    let d = run(copy("/metadata/labels"), &object);
    assert_eq!(
        patched(&d)["metadata"]["annotations"],
        json!({"owner": {"app": "web"}})
    );
    let d = run(copy("/metadata/missing"), &object);
    assert!(d.patch.0.is_empty(), "{d:?}");
}

#[test]
fn field_through_a_parent_that_is_no_object_is_an_evaluation_error() {
    let set = set_of(&[template_policy(
        json!({"type": "field", "within": "podSpec", "path": "/securityContext/runAsNonRoot",
               "operation": "default", "value": {"boolean": true}}),
    )]);
    for (kind, spec) in KINDS {
        let object = with(
            holding(kind, pod_spec()),
            &format!("{spec}/securityContext"),
            json!("restricted"),
        );
        let d = mutate_create(&set, &object);
        assert!(!d.allowed, "{kind}: {d:?}");
        assert_eq!(
            d.messages,
            [format!(
                "ClusterOverridePolicy/tpl: spec.overrideRules[0].overriders.template: `{spec}/securityContext` is a string, not an object: cannot set `{spec}/securityContext/runAsNonRoot`"
            )],
            "{kind}"
        );
    }
    // Lists are no objects either: containers are reached with `within: containers`.
    let set = set_of(&[template_policy(
        json!({"type": "field", "path": "/spec/containers/0/image", "operation": "remove"}),
    )]);
    let d = mutate_create(&set, &holding("Pod", pod_spec()));
    assert!(!d.allowed);
    assert!(
        d.messages[0].contains("`/spec/containers` is an array, not an object"),
        "{:?}",
        d.messages
    );
}

#[test]
fn field_templates_are_checked_when_the_policy_is_written() {
    let at = |name: &str| format!("spec.overrideRules[0].overriders.template{name}");
    let cases = [
        (
            json!({"type": "field", "operation": "add", "value": {"string": "x"}}),
            at(".path"),
            "is required for type field",
        ),
        (
            json!({"type": "field", "operation": "add", "path": "metadata.labels.a", "value": {"string": "x"}}),
            at(".path"),
            "is not a JSON pointer",
        ),
        (
            json!({"type": "field", "operation": "add", "path": "/a~2b", "value": {"string": "x"}}),
            at(".path"),
            "must be followed by",
        ),
        (
            json!({"type": "field", "operation": "default", "path": "/a"}),
            at(""),
            "default sets a value: set value or valueRef",
        ),
        (
            json!({"type": "field", "operation": "add", "path": "/a", "value": {"string": "x"},
                   "valueRef": {"from": "current", "path": "/b"}}),
            at(""),
            "set value or valueRef, not both",
        ),
        (
            json!({"type": "field", "operation": "remove", "path": "/a", "value": {"string": "x"}}),
            at(".value"),
            "remove takes no value",
        ),
        (
            json!({"type": "field", "within": "podSpec", "operation": "add", "path": "/a",
                   "value": {"string": "x"}, "containerNames": ["app"]}),
            at(".containerNames"),
            "only with within: containers",
        ),
        (
            json!({"type": "labels", "within": "podSpec", "operation": "add", "path": "a", "value": {"string": "x"}}),
            at(".within"),
            "is not used by type labels",
        ),
        (
            json!({"type": "field", "operation": "add", "path": "/a", "value": {"string": "x"},
                   "resources": {"limits": {"cpu": "1"}}}),
            at(".resources"),
            "is not used by type field",
        ),
    ];
    for (template, field, needle) in cases {
        let errors = compile_errors(&template_policy(template));
        assert_error(&errors, &field, needle);
    }
}
