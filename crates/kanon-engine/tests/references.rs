//! References (`dataRef`, `valueRef`): the current and old objects by JSON pointer or JSONPath,
//! the owner, other cluster objects by name or label selector (with `{{ }}` placeholders), and
//! HTTP, which offline evaluation cannot reach.

mod common;

use std::sync::Arc;

use common::*;
use kanon_api::Operation;
use kanon_engine::{
    Lookup, LookupError, LookupFuture, NoObjects, ObjectQuery, ObjectStore, Request,
};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn pod_named(name: &str, owners: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web", "config": "web-config"},
                     "ownerReferences": owners},
        "spec": {"replicas": 2, "containers": [
            {"name": "app", "image": "nginx", "ports": [{"containerPort": 80}, {"containerPort": 443}]},
            {"name": "sidecar", "image": "envoy", "ports": [{"containerPort": 9901}]},
        ]},
    })
}

fn web_pod() -> Value {
    pod_named("web-abc-1", json!([]))
}

fn owner_ref(kind: &str, name: &str, controller: Option<bool>) -> Value {
    let mut r =
        json!({"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": format!("uid-{name}")});
    if let Some(c) = controller {
        r["controller"] = json!(c);
    }
    r
}

fn replica_set(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "namespace": "default"},
           "spec": {"replicas": replicas}})
}

fn config_map(namespace: &str, name: &str, labels: Value, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": namespace, "labels": labels}, "data": data})
}

/// A cluster with ConfigMaps in two namespaces, ReplicaSets and a Node.
fn cluster() -> ObjectStore {
    let mut store = ObjectStore::new();
    for object in [
        config_map(
            "default",
            "web-config",
            json!({"team": "core", "app": "web"}),
            json!({"max": "3", "owner": "alice"}),
        ),
        config_map(
            "default",
            "api-config",
            json!({"team": "core", "app": "api"}),
            json!({"max": "5"}),
        ),
        config_map("default", "other", json!({"team": "edge"}), json!({})),
        config_map(
            "kube-system",
            "secret-ish",
            json!({"team": "core"}),
            json!({"token": "s3cr3t"}),
        ),
        replica_set("web-abc", 3),
        replica_set("web-old", 1),
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1", "labels": {"zone": "a"}}}),
    ] {
        store.insert(object).unwrap();
    }
    store
}

/// A ClusterValidatePolicy whose condition is `Exist` on `data_ref` with the message
/// `{{ data | tojson }}`: a denial then shows the resolved value.
fn show(data_ref: Value) -> Value {
    cvp(
        "show",
        json!({"validateRules": [{"template": {"type": "condition", "condition": {
            "cond": "Exist", "dataRef": data_ref, "message": "{{ refs.data | tojson }}",
        }}}]}),
    )
}

/// What `data_ref` resolves to for `request`: `Ok(None)` when nothing is there, `Err` with the
/// evaluation error (the text after the policy name).
fn resolve_with(
    doc: Value,
    request: &Request,
    lookup: &dyn Lookup,
) -> Result<Option<Value>, String> {
    let set = set_of(&[doc]);
    let d = kanon_engine::block_on(set.validate(request, None, lookup));
    if d.allowed {
        assert!(d.messages.is_empty() && d.warnings.is_empty(), "{d:?}");
        return Ok(None);
    }
    assert_eq!(d.messages.len(), 1, "{d:?}");
    let (policy, text) = d.messages[0].split_once(": ").unwrap();
    assert!(policy.ends_with("/show"), "{policy}");
    match serde_json::from_str(text) {
        Ok(value) => Ok(Some(value)),
        Err(_) => Err(text.to_string()),
    }
}

fn resolve(
    data_ref: Value,
    request: &Request,
    lookup: &dyn Lookup,
) -> Result<Option<Value>, String> {
    resolve_with(show(data_ref), request, lookup)
}

// ---------------------------------------------------------------------------------------------
// current and old
// ---------------------------------------------------------------------------------------------

#[test]
fn current_by_json_pointer_and_jsonpath() {
    let req = create(&web_pod());
    let rows: Vec<(&str, Option<Value>)> = vec![
        ("/metadata/name", Some(json!("web-abc-1"))),
        ("/spec/replicas", Some(json!(2))),
        ("/spec/containers/1/image", Some(json!("envoy"))),
        (
            "/metadata/labels",
            Some(json!({"app": "web", "config": "web-config"})),
        ),
        ("/spec/nope", None),
        ("/spec/containers/9", None),
        // JSONPath selecting one node: that node.
        ("$.metadata.name", Some(json!("web-abc-1"))),
        ("$.spec.containers[0].image", Some(json!("nginx"))),
        ("$['metadata']['labels']['app']", Some(json!("web"))),
        ("$.spec.nope", None),
        // JSONPath that may select several: the list of what it selects, in order.
        (
            "$.spec.containers[*].image",
            Some(json!(["nginx", "envoy"])),
        ),
        (
            "$.spec.containers[*].ports[*].containerPort",
            Some(json!([80, 443, 9901])),
        ),
        ("$..containerPort", Some(json!([80, 443, 9901]))),
        (
            "$.spec.containers[?(@.name == 'sidecar')].image",
            Some(json!(["envoy"])),
        ),
        ("$.spec.containers[0:1].name", Some(json!(["app"]))),
        ("$.spec.containers[*].nope", None),
    ];
    for (path, expected) in rows {
        assert_eq!(
            resolve(json!({"from": "current", "path": path}), &req, &NoObjects),
            Ok(expected.clone()),
            "{path}"
        );
    }
    // No path: the whole object.
    assert_eq!(
        resolve(json!({"from": "current"}), &req, &NoObjects),
        Ok(Some(web_pod()))
    );
}

#[test]
fn old_object_by_json_pointer_and_jsonpath() {
    let old = pod_named("web-abc-1", json!([]));
    let mut new = old.clone();
    new["spec"]["replicas"] = json!(5);
    let update =
        Request::from_objects(Operation::Update, Some(new.clone()), Some(old.clone())).unwrap();
    assert_eq!(
        resolve(
            json!({"from": "old", "path": "/spec/replicas"}),
            &update,
            &NoObjects
        ),
        Ok(Some(json!(2)))
    );
    assert_eq!(
        resolve(
            json!({"from": "current", "path": "$.spec.replicas"}),
            &update,
            &NoObjects
        ),
        Ok(Some(json!(5)))
    );
    assert_eq!(
        resolve(
            json!({"from": "old", "path": "$.spec.containers[*].name"}),
            &update,
            &NoObjects
        ),
        Ok(Some(json!(["app", "sidecar"])))
    );
    // CREATE has no old object: nothing there.
    assert_eq!(
        resolve(
            json!({"from": "old", "path": "/spec/replicas"}),
            &create(&new),
            &NoObjects
        ),
        Ok(None)
    );
    // DELETE: the object under test and the old object are the object being deleted.
    let delete = Request::from_objects(Operation::Delete, None, Some(old)).unwrap();
    for from in ["current", "old"] {
        assert_eq!(
            resolve(
                json!({"from": from, "path": "/spec/replicas"}),
                &delete,
                &NoObjects
            ),
            Ok(Some(json!(2))),
            "{from}"
        );
    }
    // A condition comparing the new value with the old one: replicas may not shrink.
    let shrink = cvp(
        "no-shrink",
        json!({"validateRules": [{"template": {"type": "condition", "condition": {
            "cond": "Lt", "dataRef": {"from": "current", "path": "/spec/replicas"},
            "valueRef": {"from": "old", "path": "/spec/replicas"},
            "message": "replicas may not shrink from {{ value }} to {{ data }}",
        }}}]}),
    );
    let set = set_of(&[shrink]);
    assert!(kanon_engine::block_on(set.validate(&update, None, &NoObjects)).allowed);
    let mut smaller = new.clone();
    smaller["spec"]["replicas"] = json!(1);
    let req = Request::from_objects(Operation::Update, Some(smaller), Some(new)).unwrap();
    assert_eq!(
        kanon_engine::block_on(set.validate(&req, None, &NoObjects)).messages,
        ["ClusterValidatePolicy/no-shrink: replicas may not shrink from 5 to 1"]
    );
}

#[test]
fn reference_paths_are_checked_when_the_policy_is_written() {
    let rows = [
        (
            "spec/replicas",
            "spec.validateRules[0].template.condition.dataRef.path",
            "is not a JSON pointer: it must start with `/` (e.g. `/spec/replicas`",
        ),
        (
            "/a/~2",
            "spec.validateRules[0].template.condition.dataRef.path",
            "`~` at offset 3 must be followed by `0`",
        ),
        (
            "$.spec[",
            "spec.validateRules[0].template.condition.dataRef.path",
            "`$.spec[` is not a JSONPath",
        ),
    ];
    for (path, field, needle) in rows {
        let errors = compile_errors(&show(json!({"from": "current", "path": path})));
        assert_error(&errors, field, needle);
    }
}

// ---------------------------------------------------------------------------------------------
// owner
// ---------------------------------------------------------------------------------------------

#[test]
fn owner_is_the_controller_else_the_first_reference() {
    let store = cluster();
    let replicas = || json!({"from": "owner", "path": "/spec/replicas"});
    let rows = [
        // The controller, wherever it is listed.
        (
            json!([
                owner_ref("ReplicaSet", "web-old", None),
                owner_ref("ReplicaSet", "web-abc", Some(true))
            ]),
            3,
        ),
        (
            json!([
                owner_ref("ReplicaSet", "web-old", Some(false)),
                owner_ref("ReplicaSet", "web-abc", Some(true))
            ]),
            3,
        ),
        // No controller: the first.
        (
            json!([
                owner_ref("ReplicaSet", "web-old", None),
                owner_ref("ReplicaSet", "web-abc", None)
            ]),
            1,
        ),
        (json!([owner_ref("ReplicaSet", "web-abc", Some(false))]), 3),
    ];
    for (owners, expected) in rows {
        let req = create(&pod_named("p", owners.clone()));
        assert_eq!(
            resolve(replicas(), &req, &store),
            Ok(Some(json!(expected))),
            "{owners}"
        );
    }
    // No ownerReferences (or an empty list): nothing there, so a condition is not hit.
    for object in [pod_named("p", json!([])), {
        let mut p = web_pod();
        p["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("ownerReferences");
        p
    }] {
        assert_eq!(resolve(replicas(), &create(&object), &store), Ok(None));
    }
    // A cluster-scoped owner (a Node owns mirror pods) is found too.
    let mirror = pod_named(
        "mirror",
        json!([{"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "u", "controller": true}]),
    );
    assert_eq!(
        resolve(
            json!({"from": "owner", "path": "/metadata/labels/zone"}),
            &create(&mirror),
            &store
        ),
        Ok(Some(json!("a")))
    );
}

#[test]
fn a_missing_owner_is_an_evaluation_error() {
    let store = cluster();
    let req = create(&pod_named(
        "p",
        json!([owner_ref("ReplicaSet", "gone", Some(true))]),
    ));
    assert_eq!(
        resolve(json!({"from": "owner", "path": "/spec/replicas"}), &req, &store),
        Err("spec.validateRules[0].template.condition.dataRef: the owner apps/v1 ReplicaSet default/gone was not found".into())
    );
    // Under Ignore: admitted with a warning.
    let mut doc = show(json!({"from": "owner", "path": "/spec/replicas"}));
    doc["spec"]["failurePolicy"] = json!("Ignore");
    let d = kanon_engine::block_on(set_of(&[doc]).validate(&req, None, &store));
    assert!(d.allowed);
    assert_eq!(
        d.warnings,
        [
            "ClusterValidatePolicy/show: skipped (failurePolicy Ignore): spec.validateRules[0].template.condition.dataRef: the owner apps/v1 ReplicaSet default/gone was not found"
        ]
    );
}

#[test]
fn owner_values_feed_conditions_and_templates() {
    let store = cluster();
    let object = pod_named("p", json!([owner_ref("ReplicaSet", "web-abc", Some(true))]));
    // A condition comparing the object with its owner.
    let set = set_of(&[cvp(
        "match-owner",
        json!({"validateRules": [{"template": {"type": "condition", "condition": {
            "cond": "NotEqual", "dataRef": {"from": "current", "path": "/spec/replicas"},
            "valueRef": {"from": "owner", "path": "/spec/replicas"},
            "message": "{{ data }} replicas, the owner has {{ value }}",
        }}}]}),
    )]);
    assert_eq!(
        kanon_engine::block_on(set.validate(&create(&object), None, &store)).messages,
        ["ClusterValidatePolicy/match-owner: 2 replicas, the owner has 3"]
    );
    // A label copied from the owner.
    let set = set_of(&[cop(
        "owner-label",
        json!({"overrideRules": [{"overriders": {"template": {
            "type": "labels", "operation": "add", "path": "owner-replicas",
            "valueRef": {"from": "owner", "path": "$.spec.replicas"},
        }}}]}),
    )]);
    let d = kanon_engine::block_on(set.mutate(&create(&object), &store));
    assert_eq!(
        d.patched.as_ref().unwrap()["metadata"]["labels"]["owner-replicas"],
        "3"
    );
}

// ---------------------------------------------------------------------------------------------
// k8s
// ---------------------------------------------------------------------------------------------

fn k8s(path: &str, target: Value) -> Value {
    json!({"from": "k8s", "path": path, "k8s": target})
}

#[test]
fn k8s_by_name_with_placeholders() {
    let store = cluster();
    let req = create(&web_pod());
    let rows = [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "web-config"}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "{{ object.metadata.namespace }}",
               "name": "{{ object.metadata.labels.config }}"}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "{{ request.namespace }}",
               "name": "{{ object.metadata.labels.app }}-config"}),
        json!({"apiVersion": "{{ 'v' ~ 1 }}", "kind": "{{ 'config' | title }}Map", "namespace": "default",
               "name": "{{ object.metadata.labels['app'] ~ '-' ~ 'config' }}"}),
    ];
    for target in rows {
        assert_eq!(
            resolve(k8s("/data/max", target.clone()), &req, &store),
            Ok(Some(json!("3"))),
            "{target}"
        );
    }
    // The whole object without a path.
    assert_eq!(
        resolve(
            json!({"from": "k8s", "k8s": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "namespace": "default", "name": "web-abc"}}),
            &req,
            &store
        ),
        Ok(Some(replica_set("web-abc", 3)))
    );
    // A cluster-scoped object: no namespace.
    assert_eq!(
        resolve(
            k8s(
                "/metadata/labels/zone",
                json!({"apiVersion": "v1", "kind": "Node", "name": "node-1"})
            ),
            &req,
            &store
        ),
        Ok(Some(json!("a")))
    );
    // A path the object does not have: nothing there.
    assert_eq!(
        resolve(
            k8s(
                "/data/nope",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "web-config"})
            ),
            &req,
            &store
        ),
        Ok(None)
    );
}

#[test]
fn k8s_objects_that_do_not_exist_and_placeholders_that_fail_are_evaluation_errors() {
    let store = cluster();
    let req = create(&web_pod());
    let at = "spec.validateRules[0].template.condition.dataRef.k8s";
    let rows = [
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "{{ object.metadata.name }}"}),
            format!("{at}: v1 ConfigMap default/web-abc-1 was not found"),
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "web-config"}),
            format!(
                "{at}: v1 ConfigMap web-config was not found (no namespace given: looked up as a cluster-scoped object)"
            ),
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "{{ object.metadata.labels.nope }}"}),
            format!("{at}.name: line 1: undefined value"),
        ),
    ];
    for (target, expected) in rows {
        let got = resolve(k8s("/data/max", target.clone()), &req, &store).unwrap_err();
        assert!(got.starts_with(&expected), "{target}: {got}");
    }
    // A lookup that fails (as opposed to an object that is absent).
    struct Broken;
    impl Lookup for Broken {
        fn get<'a>(
            &'a self,
            query: ObjectQuery<'a>,
            name: &'a str,
        ) -> LookupFuture<'a, Option<Arc<Value>>> {
            Box::pin(std::future::ready(Err(LookupError::NotSynced {
                what: query.describe(Some(name)),
            })))
        }
        fn list<'a>(&'a self, query: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>> {
            Box::pin(std::future::ready(Err(LookupError::NotSynced {
                what: query.describe(None),
            })))
        }
    }
    assert_eq!(
        resolve(
            k8s(
                "/data/max",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "web-config"})
            ),
            &req,
            &Broken
        ),
        Err(format!(
            "{at}: looking up v1/ConfigMap default/web-config: not synced yet (the cache is still loading)"
        ))
    );
    assert_eq!(
        resolve(
            k8s(
                "$[*].data",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "labelSelector": {}})
            ),
            &req,
            &Broken
        ),
        Err(format!(
            "{at}: looking up v1/ConfigMap in namespace default: not synced yet (the cache is still loading)"
        ))
    );
}

#[test]
fn k8s_by_label_selector_gives_the_list_of_matching_objects() {
    let store = cluster();
    let req = create(&web_pod());
    let names = |selector: Value| {
        resolve(
            k8s(
                "$[*].metadata.name",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "labelSelector": selector}),
            ),
            &req,
            &store,
        )
    };
    assert_eq!(
        names(json!({"matchLabels": {"team": "core"}})),
        Ok(Some(json!(["api-config", "web-config"])))
    );
    assert_eq!(
        names(
            json!({"matchExpressions": [{"key": "team", "operator": "In", "values": ["core", "edge"]}]})
        ),
        Ok(Some(json!(["api-config", "other", "web-config"])))
    );
    assert_eq!(
        names(
            json!({"matchLabels": {"team": "core"}, "matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["api"]}]})
        ),
        Ok(Some(json!(["web-config"])))
    );
    assert_eq!(
        names(json!({})),
        Ok(Some(json!(["api-config", "other", "web-config"])))
    );
    // Placeholders in selector values, evaluated on the object.
    assert_eq!(
        names(json!({"matchLabels": {"app": "{{ object.metadata.labels.app }}"}})),
        Ok(Some(json!(["web-config"])))
    );
    assert_eq!(
        names(
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["{{ object.metadata.labels.app }}", "api"]}]})
        ),
        Ok(Some(json!(["api-config", "web-config"])))
    );
    // No object matches: nothing there (NotExist holds, other conditions are not hit).
    assert_eq!(names(json!({"matchLabels": {"team": "nobody"}})), Ok(None));
    assert_eq!(
        resolve(
            json!({"from": "k8s", "k8s": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "labelSelector": {"matchLabels": {"team": "nobody"}}}}),
            &req,
            &store
        ),
        Ok(None)
    );
    // Without a path, the list of objects itself.
    let list = resolve(
        json!({"from": "k8s", "k8s": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "labelSelector": {"matchLabels": {"app": "api"}}}}),
        &req,
        &store,
    )
    .unwrap()
    .unwrap();
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    assert_eq!(list[0]["metadata"]["name"], "api-config");
    // A cluster policy listing without a namespace sees every namespace.
    assert_eq!(
        resolve(
            k8s(
                "$[*].metadata.name",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "labelSelector": {"matchLabels": {"team": "core"}}})
            ),
            &req,
            &store
        ),
        Ok(Some(json!(["api-config", "web-config", "secret-ish"])))
    );
}

#[test]
fn k8s_targets_are_checked_when_the_policy_is_written() {
    let at = "spec.validateRules[0].template.condition.dataRef";
    let rows = [
        (
            json!({"from": "k8s"}),
            format!("{at}.k8s"),
            "is required for from: k8s",
        ),
        (
            k8s("/a", json!({"apiVersion": "v1", "kind": "ConfigMap"})),
            format!("{at}.k8s"),
            "set name or labelSelector",
        ),
        (
            k8s(
                "/a",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "labelSelector": {}}),
            ),
            format!("{at}.k8s"),
            "set name or labelSelector, not both",
        ),
        (
            k8s(
                "/a",
                json!({"apiVersion": "", "kind": "ConfigMap", "name": "a"}),
            ),
            format!("{at}.k8s.apiVersion"),
            "must not be empty",
        ),
        (
            k8s(
                "/a",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "{{ object."}),
            ),
            format!("{at}.k8s.name"),
            "placeholder: line 1: syntax error",
        ),
        (
            k8s(
                "/a",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "labelSelector": {"matchLabels": {"app": "{{ }}"}}}),
            ),
            format!("{at}.k8s.labelSelector.matchLabels.app"),
            "placeholder: line 1: syntax error",
        ),
        (
            k8s(
                "/a",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Near", "values": ["{{ object.kind }}"]}]}}),
            ),
            format!("{at}.k8s.labelSelector.matchExpressions[0].operator"),
            "unknown operator `Near`",
        ),
        (
            json!({"from": "current", "path": "/a", "k8s": {"apiVersion": "v1", "kind": "ConfigMap", "name": "a"}}),
            format!("{at}.k8s"),
            "is only used with from: k8s",
        ),
    ];
    for (data_ref, field, needle) in rows {
        let errors = compile_errors(&show(data_ref.clone()));
        assert_error(&errors, &field, needle);
    }
}

#[test]
fn namespaced_policies_read_only_their_own_namespace() {
    let store = cluster();
    let req = create(&web_pod());
    let show_in = |data_ref: Value| {
        vp(
            "default",
            "show",
            json!({"validateRules": [{"template": {"type": "condition", "condition": {
                "cond": "Exist", "dataRef": data_ref, "message": "{{ refs.data | tojson }}",
            }}}]}),
        )
    };
    // Its own namespace: fine.
    assert_eq!(
        resolve_with(
            show_in(k8s(
                "/data/max",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "web-config"})
            )),
            &req,
            &store
        ),
        Ok(Some(json!("3")))
    );
    // Another namespace, written down: the policy is invalid.
    let errors = compile_errors(&show_in(k8s(
        "/data/token",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "kube-system", "name": "secret-ish"}),
    )));
    assert_error(
        &errors,
        "spec.validateRules[0].template.condition.dataRef.k8s.namespace",
        "a namespaced policy reads objects only in its own namespace `default`, not `kube-system`",
    );
    // Another namespace, from a placeholder: an evaluation error, and nothing is read.
    let mut object = web_pod();
    object["metadata"]["annotations"] = json!({"ns": "kube-system"});
    assert_eq!(
        resolve_with(
            show_in(k8s("/data/token", json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "{{ object.metadata.annotations.ns }}", "name": "secret-ish"}))),
            &create(&object),
            &store
        ),
        Err("spec.validateRules[0].template.condition.dataRef.k8s.namespace: a namespaced policy reads objects only in its own namespace `default`, not `kube-system`".into())
    );
    // Listing without a namespace: cluster-scoped objects and its own namespace's only.
    assert_eq!(
        resolve_with(
            show_in(k8s(
                "$[*].metadata.name",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "labelSelector": {"matchLabels": {"team": "core"}}})
            )),
            &req,
            &store
        ),
        Ok(Some(json!(["api-config", "web-config"])))
    );
    // Cluster-scoped objects by name are readable.
    assert_eq!(
        resolve_with(
            show_in(k8s(
                "/metadata/labels/zone",
                json!({"apiVersion": "v1", "kind": "Node", "name": "node-1"})
            )),
            &req,
            &store
        ),
        Ok(Some(json!("a")))
    );
}

// ---------------------------------------------------------------------------------------------
// http
// ---------------------------------------------------------------------------------------------

#[test]
fn http_references_are_a_clear_error_offline() {
    let http = json!({"from": "http", "path": "$.body.allowed", "http": {"url": "https://policy.example/check", "method": "GET"}});
    let req = create(&web_pod());
    let offline = "HTTP references are not available here (offline evaluation has no network; they are resolved by `kanon serve` in a cluster)";
    assert_eq!(
        resolve(http.clone(), &req, &NoObjects),
        Err(format!(
            "spec.validateRules[0].template.condition.dataRef.http: looking up GET https://policy.example/check: {offline}"
        ))
    );
    // In a valueRef of a condition and of an override template, under each failure policy.
    let condition = |failure_policy: &str| {
        cvp(
            "remote",
            json!({"failurePolicy": failure_policy, "validateRules": [{"template": {"type": "condition", "condition": {
                "cond": "In", "dataRef": {"from": "current", "path": "/metadata/name"}, "valueRef": http,
            }}}]}),
        )
    };
    let d = kanon_engine::block_on(set_of(&[condition("Fail")]).validate(&req, None, &NoObjects));
    assert_eq!(
        d.messages,
        [format!(
            "ClusterValidatePolicy/remote: spec.validateRules[0].template.condition.valueRef.http: looking up GET https://policy.example/check: {offline}"
        )]
    );
    let d = kanon_engine::block_on(set_of(&[condition("Ignore")]).validate(&req, None, &NoObjects));
    assert!(d.allowed);
    assert_eq!(
        d.warnings,
        [format!(
            "ClusterValidatePolicy/remote: skipped (failurePolicy Ignore): spec.validateRules[0].template.condition.valueRef.http: looking up GET https://policy.example/check: {offline}"
        )]
    );
    let set = set_of(&[cop(
        "remote-label",
        json!({"overrideRules": [{"overriders": {"template": {"type": "labels", "operation": "add", "path": "x", "valueRef": http}}}]}),
    )]);
    let d = kanon_engine::block_on(set.mutate(&req, &NoObjects));
    assert_eq!(
        d.messages,
        [format!(
            "ClusterOverridePolicy/remote-label: spec.overrideRules[0].overriders.template.valueRef.http: looking up GET https://policy.example/check: {offline}"
        )]
    );
    // The request description is checked when the policy is written.
    let errors = compile_errors(&show(
        json!({"from": "http", "http": {"url": "", "method": "GET"}}),
    ));
    assert_error(
        &errors,
        "spec.validateRules[0].template.condition.dataRef.http.url",
        "must not be empty",
    );
    let errors = compile_errors(&show(json!({"from": "http"})));
    assert_error(
        &errors,
        "spec.validateRules[0].template.condition.dataRef.http",
        "is required for from: http",
    );
}

/// A lookup whose HTTP service answers every call with `answer`, recording the calls.
struct FakeService {
    answer: kanon_engine::HttpAnswer,
    calls: std::sync::Mutex<Vec<kanon_engine::HttpCall>>,
}

impl FakeService {
    fn answering(status: u16, body: &str) -> Self {
        FakeService {
            answer: kanon_engine::HttpAnswer {
                status,
                headers: [("content-type".to_string(), "application/json".to_string())].into(),
                body: body.as_bytes().to_vec(),
            },
            calls: std::sync::Mutex::new(Vec::new()),
        }
    }

    fn calls(&self) -> Vec<kanon_engine::HttpCall> {
        self.calls.lock().unwrap().clone()
    }
}

impl Lookup for FakeService {
    fn get<'a>(&'a self, _: ObjectQuery<'a>, _: &'a str) -> LookupFuture<'a, Option<Arc<Value>>> {
        Box::pin(std::future::ready(Ok(None)))
    }
    fn list<'a>(&'a self, _: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }
    fn http<'a>(
        &'a self,
        call: &'a kanon_engine::HttpCall,
    ) -> LookupFuture<'a, kanon_engine::HttpAnswer> {
        self.calls.lock().unwrap().push(call.clone());
        Box::pin(std::future::ready(Ok(self.answer.clone())))
    }
}

#[test]
fn http_answers_are_status_header_and_body_with_placeholders_rendered() {
    let req = create(&web_pod());
    let service = FakeService::answering(200, r#"{"allowed": true, "quota": 3}"#);
    let http = json!({"from": "http", "http": {
        "url": "https://policy.example/{{ object.metadata.namespace }}/check",
        "params": {"name": "{{ object.metadata.name }}", "fixed": "1"},
        "header": {"X-Team": "{{ object.metadata.labels.app }}"},
        "timeoutSeconds": 2,
    }});
    assert_eq!(
        resolve(http, &req, &service),
        Ok(Some(json!({
            "status": 200,
            "header": {"content-type": "application/json"},
            "body": {"allowed": true, "quota": 3},
        })))
    );
    let calls = service.calls();
    assert_eq!(calls.len(), 1);
    let call = &calls[0];
    assert_eq!(call.describe(), "GET https://policy.example/default/check");
    assert_eq!(
        call.params,
        [
            ("fixed".to_string(), "1".to_string()),
            ("name".to_string(), "web-abc-1".to_string())
        ]
        .into()
    );
    assert_eq!(
        call.headers,
        [("X-Team".to_string(), "web".to_string())].into()
    );
    assert_eq!(call.timeout, Some(std::time::Duration::from_secs(2)));
    assert_eq!(call.policy, "ClusterValidatePolicy/show");
    assert_eq!(call.token, None);
    assert_eq!(call.body, None);

    // A path into the answer; a POST body rendered from the object; a token from a Secret.
    let service = FakeService::answering(200, r#"{"allowed": false}"#);
    let http = json!({"from": "http", "path": "/body/allowed", "http": {
        "url": "http://checker.policy.svc/review", "method": "POST",
        "body": "{\"image\": {{ object.spec.containers[0].image | tojson }}}",
        "auth": {"secretRef": {"namespace": "kanon", "name": "checker"}},
    }});
    assert_eq!(resolve(http, &req, &service), Ok(Some(json!(false))));
    let call = &service.calls()[0];
    assert_eq!(call.describe(), "POST http://checker.policy.svc/review");
    assert_eq!(call.body, Some(json!({"image": "nginx"})));
    assert_eq!(
        call.token,
        Some(kanon_engine::HttpToken::Secret {
            namespace: "kanon".into(),
            name: "checker".into(),
            key: "token".into(),
        })
    );
    // Tokens never show in debug output (logs).
    let static_token = kanon_engine::HttpToken::Static("s3cr3t".into());
    assert!(!format!("{static_token:?}").contains("s3cr3t"));
}

#[test]
fn http_errors_name_the_service_and_what_it_answered() {
    let req = create(&web_pod());
    let at = "spec.validateRules[0].template.condition.dataRef.http";
    let http = json!({"from": "http", "http": {"url": "https://policy.example/check"}});
    let rows = [
        (
            FakeService::answering(503, "overloaded, try later"),
            format!("{at}: https://policy.example/check answered HTTP 503: overloaded, try later"),
        ),
        (
            FakeService::answering(200, "<html>ok</html>"),
            format!(
                "{at}: https://policy.example/check answered with a body that is not JSON: expected value at line 1 column 1"
            ),
        ),
    ];
    for (service, expected) in rows {
        assert_eq!(resolve(http.clone(), &req, &service), Err(expected));
    }
    // An empty body is null, not an error.
    let service = FakeService::answering(204, "");
    assert_eq!(
        resolve(http.clone(), &req, &service),
        Ok(Some(
            json!({"status": 204, "header": {"content-type": "application/json"}, "body": null})
        ))
    );
    // A body template that does not render JSON.
    let bad_body = json!({"from": "http", "http": {"url": "https://policy.example/check", "method": "POST", "body": "{{ object.metadata.name }}"}});
    let got = resolve(bad_body, &req, &FakeService::answering(200, "{}")).unwrap_err();
    assert!(
        got.starts_with(&format!("{at}.body: the rendered body is not JSON")),
        "{got}"
    );
}

#[test]
fn http_references_are_checked_when_the_policy_is_written() {
    let rows = [
        (
            json!({"url": "ftp://x/y"}),
            "url",
            "`ftp://x/y` is not an http:// or https:// URL",
        ),
        (
            json!({"url": "https://x", "body": {"a": 1}}),
            "body",
            "is sent only with method: POST",
        ),
        (
            json!({"url": "https://x", "auth": {}}),
            "auth",
            "set staticToken or secretRef",
        ),
        (
            json!({"url": "https://x", "auth": {"staticToken": "t", "secretRef": {"namespace": "a", "name": "b"}}}),
            "auth",
            "set staticToken or secretRef, not both",
        ),
        (
            json!({"url": "https://x", "timeoutSeconds": 60}),
            "timeoutSeconds",
            "60 is outside 1..=30",
        ),
    ];
    for (http, field, message) in rows {
        let errors = compile_errors(&show(json!({"from": "http", "http": http})));
        assert_error(
            &errors,
            &format!("spec.validateRules[0].template.condition.dataRef.http.{field}"),
            message,
        );
    }
    // A namespaced policy's token comes from its own namespace only.
    let policy = vp(
        "shop",
        "remote",
        json!({"validateRules": [{"template": {"type": "condition", "condition": {
            "cond": "Exist",
            "dataRef": {"from": "http", "http": {"url": "https://x", "auth": {"secretRef": {"namespace": "kanon", "name": "t"}}}},
        }}}]}),
    );
    assert_error(
        &compile_errors(&policy),
        "spec.validateRules[0].template.condition.dataRef.http.auth.secretRef.namespace",
        "a namespaced policy reads Secrets only in its own namespace `shop`, not `kanon`",
    );
}

/// One recorded query: type, namespace, policy, confinement.
type Query = (String, Option<String>, String, Option<String>);

/// An [`ObjectStore`] that records who asked for what.
struct Recording {
    store: ObjectStore,
    queries: std::sync::Mutex<Vec<Query>>,
}

impl Recording {
    fn record(&self, query: &ObjectQuery<'_>) {
        self.queries.lock().unwrap().push((
            format!("{}/{}", query.api_version, query.kind),
            query.namespace.map(str::to_string),
            query.policy.to_string(),
            query.confined_to.map(str::to_string),
        ));
    }
}

impl Lookup for Recording {
    fn get<'a>(
        &'a self,
        query: ObjectQuery<'a>,
        name: &'a str,
    ) -> LookupFuture<'a, Option<Arc<Value>>> {
        self.record(&query);
        self.store.get(query, name)
    }
    fn list<'a>(&'a self, query: ObjectQuery<'a>) -> LookupFuture<'a, Vec<Arc<Value>>> {
        self.record(&query);
        self.store.list(query)
    }
}

#[test]
fn lookups_say_which_policy_asks_and_where_a_namespaced_one_is_confined() {
    let lookup = Recording {
        store: cluster(),
        queries: std::sync::Mutex::new(Vec::new()),
    };
    let req = create(&web_pod());
    let listing = json!({"from": "k8s", "path": "$[*].metadata.name", "k8s": {
        "apiVersion": "v1", "kind": "ConfigMap", "labelSelector": {"matchLabels": {"team": "core"}},
    }});
    let namespaced = vp(
        "default",
        "show",
        json!({"validateRules": [{"template": {"type": "condition", "condition": {
            "cond": "Exist", "dataRef": listing.clone(), "message": "{{ refs.data | tojson }}",
        }}}]}),
    );
    // Listed without a namespace, a namespaced policy still sees only its own namespace
    // (and the store is told so); kube-system's ConfigMap stays out.
    assert_eq!(
        resolve_with(namespaced, &req, &lookup),
        Ok(Some(json!(["api-config", "web-config"])))
    );
    assert_eq!(
        resolve(listing, &req, &lookup)
            .unwrap()
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let queries: Vec<_> = lookup
        .queries
        .lock()
        .unwrap()
        .iter()
        .filter(|q| q.0 != "v1/Namespace") // the request's namespace, for `namespaceObject`
        .cloned()
        .collect();
    assert_eq!(
        queries,
        [
            (
                "v1/ConfigMap".to_string(),
                None,
                "ValidatePolicy/default/show".to_string(),
                Some("default".to_string())
            ),
            (
                "v1/ConfigMap".to_string(),
                None,
                "ClusterValidatePolicy/show".to_string(),
                None
            ),
        ]
    );
}
