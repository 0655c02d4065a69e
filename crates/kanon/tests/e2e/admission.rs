//! Policies of all four kinds mutating and judging Pods, Deployments (and the Pods their
//! ReplicaSets create) and Namespaces, as kube-apiserver calls kanon.

use std::time::Duration;

use kube::api::PostParams;
use serde_json::{Value, json};

use crate::Scenario;
use crate::env::{Env, text};

pub const SCENARIOS: &[Scenario] = &[
    (
        "admission::cluster_policies_mutate_deny_and_warn",
        cluster_policies_mutate_deny_and_warn,
    ),
    (
        "admission::deployments_and_the_pods_their_replicasets_create",
        deployments_and_the_pods_their_replicasets_create,
    ),
    ("admission::namespaces_are_judged", namespaces_are_judged),
    (
        "admission::namespaced_policies_stay_in_their_namespace",
        namespaced_policies_stay_in_their_namespace,
    ),
    (
        "admission::dry_run_is_answered_without_side_effects",
        dry_run_is_answered_without_side_effects,
    ),
];

/// A Pod in `namespace`.
pub fn pod(namespace: &str, name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.0"}]},
    })
}

/// A Pod-create AdmissionReview of `pod`, as kube-apiserver sends it.
pub fn pod_create_review(pod: &Value, uid: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": pod["metadata"]["namespace"],
            "name": pod["metadata"]["name"],
            "operation": "CREATE",
            "userInfo": {"username": "e2e"},
            "object": pod,
            "dryRun": false,
        },
    })
}

/// A policy document.
pub fn policy(kind: &str, namespace: Option<&str>, name: &str, spec: Value) -> Value {
    let mut doc = json!({
        "apiVersion": kanon_api::API_VERSION,
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    });
    if let Some(ns) = namespace {
        doc["metadata"]["namespace"] = json!(ns);
    }
    doc
}

/// A `labels` template that adds `key: value`.
pub fn add_label(key: &str, value: &str) -> Value {
    json!({"overriders": {"template": {"type": "labels", "operation": "add", "path": key,
                                          "value": {"string": value}}}})
}

/// Applies a policy and waits until kanon has it in force with `Ready=True`.
pub fn install(env: &Env, document: &Value) {
    env.apply_policy(document)
        .unwrap_or_else(|e| panic!("applying {document}: {e}"));
    let text = |p: &str| {
        document
            .pointer(p)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let kind = text("/kind").unwrap_or_default();
    let name = text("/metadata/name").unwrap_or_default();
    let namespace = text("/metadata/namespace");
    let status = env.wait_policy_status(&kind, namespace.as_deref(), &name);
    assert_eq!(
        status.pointer("/status/conditions/0/status"),
        Some(&json!("True")),
        "{kind} {name} is not ready: {status}"
    );
}

fn label(object: &Value, key: &str) -> Option<String> {
    object
        .pointer(&format!("/metadata/labels/{}", key.replace('/', "~1")))
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn cluster_policies_mutate_deny_and_warn(env: &mut Env) {
    let ns = "adm-pods";
    env.namespace(ns, json!({}));
    let pods = json!([{"apiVersion": "v1", "kind": "Pod", "namespace": ns}]);
    install(
        env,
        &policy(
            "ClusterOverridePolicy",
            None,
            "adm-team",
            json!({"resourceSelectors": pods, "overrideRules": [add_label("team", "platform")]}),
        ),
    );
    install(
        env,
        &policy(
            "ClusterValidatePolicy",
            None,
            "adm-forbidden",
            json!({"resourceSelectors": pods, "validateRules": [{"template": {"type": "condition", "condition": {
                "cond": "Equal", "dataRef": {"from": "current", "path": "/metadata/labels/forbidden"},
                "value": {"string": "yes"},
                "message": "{{ object.metadata.name }} is marked forbidden",
            }}}]}),
        ),
    );
    install(
        env,
        &policy(
            "ClusterValidatePolicy",
            None,
            "adm-owner",
            json!({"resourceSelectors": pods, "validationActions": ["Warn"], "validateRules": [{"template": {"type": "condition", "condition": {
                "cond": "NotExist", "dataRef": {"from": "current", "path": "/metadata/labels/owner"},
                "message": "every pod should name its owner",
            }}}]}),
        ),
    );

    // Mutated: the label is on the stored object.
    let created = env
        .create(&pod(ns, "plain", json!({"owner": "alice"})))
        .expect("an ordinary pod is admitted");
    assert_eq!(
        label(&created, "team").as_deref(),
        Some("platform"),
        "{created}"
    );
    let stored = env
        .get("v1", "Pod", "pods", Some(ns), "plain")
        .expect("stored");
    assert_eq!(label(&stored, "team").as_deref(), Some("platform"));

    // Denied, with the policy's name and message, as kubectl shows it.
    let manifest = pod(ns, "marked", json!({"forbidden": "yes", "owner": "bob"}));
    let out = env.kubectl_stdin(&["create", "-f", "-"], &manifest.to_string());
    assert!(!out.status.success(), "a forbidden pod was admitted");
    let shown = text(&out);
    assert!(
        shown.contains("denied the request")
            && shown.contains("ClusterValidatePolicy/adm-forbidden: marked is marked forbidden"),
        "{shown}"
    );
    assert!(env.get("v1", "Pod", "pods", Some(ns), "marked").is_none());

    // Warned: admitted, and kubectl prints the warning.
    let manifest = pod(ns, "anonymous", json!({}));
    let out = env.kubectl_stdin(&["create", "-f", "-"], &manifest.to_string());
    assert!(out.status.success(), "{}", text(&out));
    let shown = text(&out);
    assert!(
        shown.contains("Warning: ClusterValidatePolicy/adm-owner: every pod should name its owner"),
        "{shown}"
    );

    for (kind, name) in [
        ("ClusterOverridePolicy", "adm-team"),
        ("ClusterValidatePolicy", "adm-forbidden"),
        ("ClusterValidatePolicy", "adm-owner"),
    ] {
        env.delete_policy(kind, None, name);
    }
}

fn deployments_and_the_pods_their_replicasets_create(env: &mut Env) {
    let ns = "adm-deploy";
    env.namespace(ns, json!({}));
    install(
        env,
        &policy(
            "ClusterOverridePolicy",
            None,
            "adm-deploy-annotate",
            json!({
                "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": ns}],
                "overrideRules": [{"overriders": {"template": {"type": "annotations", "operation": "add",
                    "path": "kanon.dev/reviewed", "value": {"string": "yes"}}}}],
            }),
        ),
    );
    install(
        env,
        &policy(
            "ClusterOverridePolicy",
            None,
            "adm-deploy-pods",
            json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": ns}],
                "overrideRules": [add_label("kanon.dev/from-controller", "yes"), {"overriders": {"template": {
                    "type": "resources", "operation": "add",
                    "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}},
                }}}],
            }),
        ),
    );
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "app", "image": "registry.example/web:1"}]}},
        },
    });
    let created = env.create(&deployment).expect("the Deployment is admitted");
    assert_eq!(
        created.pointer("/metadata/annotations/kanon.dev~1reviewed"),
        Some(&json!("yes")),
        "{created}"
    );
    // kube-controller-manager creates a ReplicaSet, which creates the Pods through kanon.
    let api = env.api("v1", "Pod", "pods", Some(ns));
    let mut pods = Vec::new();
    env.wait_for("the Deployment's Pods", Duration::from_secs(30), || {
        pods = env
            .runtime
            .block_on(api.list(&Default::default()))
            .map(|l| l.items)
            .unwrap_or_default();
        pods.len() == 2
    });
    for pod in &pods {
        let pod = serde_json::to_value(pod).expect("JSON");
        assert_eq!(
            label(&pod, "kanon.dev/from-controller").as_deref(),
            Some("yes"),
            "{pod}"
        );
        assert_eq!(
            pod.pointer("/spec/containers/0/resources/limits/cpu"),
            Some(&json!("500m")),
            "{pod}"
        );
        assert_eq!(
            pod.pointer("/metadata/ownerReferences/0/kind"),
            Some(&json!("ReplicaSet")),
            "{pod}"
        );
    }
    env.delete_policy("ClusterOverridePolicy", None, "adm-deploy-annotate");
    env.delete_policy("ClusterOverridePolicy", None, "adm-deploy-pods");
}

fn namespaces_are_judged(env: &mut Env) {
    let selected = json!([{"apiVersion": "v1", "kind": "Namespace",
                           "labelSelector": {"matchLabels": {"e2e.kanon.dev/checked": "yes"}}}]);
    install(
        env,
        &policy(
            "ClusterValidatePolicy",
            None,
            "adm-ns-team",
            json!({"resourceSelectors": selected, "validateRules": [{"targetOperations": ["CREATE"], "template": {"type": "condition", "condition": {
                "cond": "NotExist", "dataRef": {"from": "current", "path": "/metadata/labels/team"},
                "message": "namespace {{ object.metadata.name }} needs a team label",
            }}}]}),
        ),
    );
    install(
        env,
        &policy(
            "ClusterOverridePolicy",
            None,
            "adm-ns-annotate",
            json!({"resourceSelectors": selected, "overrideRules": [{"overriders": {"template": {
                "type": "annotations", "operation": "add", "path": "kanon.dev/owner", "valueRef": {
                    "from": "current", "path": "/metadata/labels/team"}}}}]}),
        ),
    );
    let _ = env.kubectl(&[
        "delete",
        "namespace",
        "adm-ns-a",
        "adm-ns-b",
        "--ignore-not-found",
    ]);
    let refused = env
        .create(&json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": "adm-ns-a", "labels": {"e2e.kanon.dev/checked": "yes"}}}))
        .expect_err("a namespace without a team is refused");
    assert!(
        refused
            .contains("ClusterValidatePolicy/adm-ns-team: namespace adm-ns-a needs a team label"),
        "{refused}"
    );
    let created = env
        .create(&json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": "adm-ns-b", "labels": {"e2e.kanon.dev/checked": "yes", "team": "payments"}}}))
        .expect("a namespace with a team is admitted");
    assert_eq!(
        created.pointer("/metadata/annotations/kanon.dev~1owner"),
        Some(&json!("payments")),
        "{created}"
    );
    env.delete_policy("ClusterValidatePolicy", None, "adm-ns-team");
    env.delete_policy("ClusterOverridePolicy", None, "adm-ns-annotate");
}

fn namespaced_policies_stay_in_their_namespace(env: &mut Env) {
    let (mine, other) = ("adm-mine", "adm-other");
    env.namespace(mine, json!({}));
    env.namespace(other, json!({}));
    let all_pods = json!([{"apiVersion": "v1", "kind": "Pod"}]);
    install(
        env,
        &policy(
            "OverridePolicy",
            Some(mine),
            "stamp",
            json!({"resourceSelectors": all_pods, "overrideRules": [add_label("stamped-by", "mine")]}),
        ),
    );
    install(
        env,
        &policy(
            "ValidatePolicy",
            Some(mine),
            "no-latest",
            json!({"resourceSelectors": all_pods, "validateRules": [{"template": {"type": "condition", "condition": {
                "cond": "Equal", "dataRef": {"from": "current", "path": "/metadata/labels/version"},
                "value": {"string": "latest"}, "message": "no latest here",
            }}}]}),
        ),
    );
    let here = env.create(&pod(mine, "a", json!({}))).expect("admitted");
    assert_eq!(label(&here, "stamped-by").as_deref(), Some("mine"));
    let refused = env
        .create(&pod(mine, "b", json!({"version": "latest"})))
        .expect_err("denied in its own namespace");
    assert!(
        refused.contains("ValidatePolicy/adm-mine/no-latest: no latest here"),
        "{refused}"
    );
    // Elsewhere: neither mutated nor judged.
    let there = env
        .create(&pod(other, "b", json!({"version": "latest"})))
        .expect("another namespace's pod is not judged");
    assert_eq!(label(&there, "stamped-by"), None, "{there}");
    // A namespaced policy that names another namespace is refused when written.
    let reaching = policy(
        "OverridePolicy",
        Some(mine),
        "reaching",
        json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": other}],
               "overrideRules": [add_label("x", "y")]}),
    );
    let refused = env.apply_policy(&reaching).expect_err("refused at write");
    assert!(
        refused.contains("OverridePolicy/adm-mine/reaching is invalid")
            && refused.contains("spec.resourceSelectors[0].namespace"),
        "{refused}"
    );
    env.delete_policy("OverridePolicy", Some(mine), "stamp");
    env.delete_policy("ValidatePolicy", Some(mine), "no-latest");
}

fn dry_run_is_answered_without_side_effects(env: &mut Env) {
    let ns = "adm-dry";
    env.namespace(ns, json!({}));
    install(
        env,
        &policy(
            "ClusterOverridePolicy",
            None,
            "adm-dry-label",
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": ns}],
                   "overrideRules": [{"overriders": {"program": concat!(
                       "{% if object.metadata.labels is not defined %}- {op: add, path: /metadata/labels, value: {}}\n{% endif %}",
                       "- op: add\n  path: /metadata/labels/dry-run\n  value: \"{{ request.dryRun | tojson }}\"\n")}}]}),
        ),
    );
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let answered = env
        .create_with(&pod(ns, "preview", json!({})), &params)
        .expect("a dry run is answered");
    assert_eq!(
        label(&answered, "dry-run").as_deref(),
        Some("true"),
        "{answered}"
    );
    assert!(
        env.get("v1", "Pod", "pods", Some(ns), "preview").is_none(),
        "a dry run stored nothing"
    );
    let out = env.kubectl_stdin(
        &["create", "--dry-run=server", "-o", "json", "-f", "-"],
        &pod(ns, "preview", json!({})).to_string(),
    );
    assert!(out.status.success(), "{}", text(&out));
    let shown: Value = serde_json::from_slice(&out.stdout).expect("kubectl prints JSON");
    assert_eq!(label(&shown, "dry-run").as_deref(), Some("true"), "{shown}");
    env.delete_policy("ClusterOverridePolicy", None, "adm-dry-label");
}
