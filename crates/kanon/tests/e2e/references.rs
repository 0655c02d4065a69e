//! What policies read besides the object: the namespace (`namespaceSelector`,
//! `namespaceObject`), the owner, other cluster objects and HTTP services, with the limits on
//! each.

use std::time::Duration;

use serde_json::{Value, json};

use crate::Scenario;
use crate::admission::{install, pod, policy};
use crate::env::Env;

pub const SCENARIOS: &[Scenario] = &[
    (
        "references::namespace_selector_follows_namespace_labels",
        namespace_selector_follows_namespace_labels,
    ),
    (
        "references::owner_is_read_from_the_apiserver",
        owner_is_read_from_the_apiserver,
    ),
    (
        "references::k8s_objects_by_name_and_by_selector",
        k8s_objects_by_name_and_by_selector,
    ),
    (
        "references::a_namespaced_policy_never_reads_another_namespace",
        a_namespaced_policy_never_reads_another_namespace,
    ),
    (
        "references::http_services_are_asked_and_private_addresses_refused",
        http_services_are_asked_and_private_addresses_refused,
    ),
    (
        "references::secrets_are_not_readable_unless_allowed",
        secrets_are_not_readable_unless_allowed,
    ),
];

fn label(object: &Value, key: &str) -> Option<String> {
    object
        .pointer(&format!("/metadata/labels/{key}"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn namespace_selector_follows_namespace_labels(env: &mut Env) {
    let (prod, dev) = ("ref-prod", "ref-dev");
    env.namespace(prod, json!({"ref.kanon.dev/env": "prod"}));
    env.namespace(dev, json!({"ref.kanon.dev/env": "dev"}));
    install(
        env,
        &policy(
            "ClusterValidatePolicy",
            None,
            "ref-prod-approval",
            json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                "namespaceSelector": {"matchLabels": {"ref.kanon.dev/env": "prod"}},
                "validateRules": [{"template": {"type": "condition", "condition": {
                    "cond": "NotExist", "dataRef": {"from": "current", "path": "/metadata/labels/approved"},
                    "message": "production pods need approval",
                }}}],
            }),
        ),
    );
    // The program sees the namespace object too.
    install(
        env,
        &policy(
            "ClusterOverridePolicy",
            None,
            "ref-ns-env",
            json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": dev},
                                      {"apiVersion": "v1", "kind": "Pod", "namespace": prod}],
                "overrideRules": [{"overriders": {"program": concat!(
                    "{% if object.metadata.labels is not defined %}- {op: add, path: /metadata/labels, value: {}}\n{% endif %}",
                    "- op: add\n  path: /metadata/labels/env\n  value: {{ namespaceObject.metadata.labels['ref.kanon.dev/env'] | tojson }}\n")}}],
            }),
        ),
    );
    let refused = env
        .create(&pod(prod, "p", json!({})))
        .expect_err("denied in prod");
    assert!(
        refused.contains("ClusterValidatePolicy/ref-prod-approval: production pods need approval"),
        "{refused}"
    );
    let approved = env
        .create(&pod(prod, "p", json!({"approved": "yes"})))
        .expect("approved in prod");
    assert_eq!(label(&approved, "env").as_deref(), Some("prod"));
    let in_dev = env
        .create(&pod(dev, "p", json!({})))
        .expect("dev needs no approval");
    assert_eq!(label(&in_dev, "env").as_deref(), Some("dev"));
    // Relabelled, dev becomes prod for kanon as soon as the Namespace watch says so.
    let out = env.kubectl(&[
        "label",
        "namespace",
        dev,
        "ref.kanon.dev/env=prod",
        "--overwrite",
    ]);
    assert!(out.status.success());
    let took = env.wait_for("the new namespace labels", Duration::from_secs(10), || {
        env.create(&pod(dev, &format!("q{}", rand_suffix()), json!({})))
            .is_err()
    });
    eprintln!(
        "e2e: namespace relabel -> effect: {:.0} ms",
        took.as_secs_f64() * 1e3
    );
    env.delete_policy("ClusterValidatePolicy", None, "ref-prod-approval");
    env.delete_policy("ClusterOverridePolicy", None, "ref-ns-env");
}

/// A short suffix that differs between calls, for names.
fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() % 1_000_000_000)
        .unwrap_or_default()
}

fn owner_is_read_from_the_apiserver(env: &mut Env) {
    let ns = "ref-owner";
    env.namespace(ns, json!({}));
    let owner = env
        .create(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "owner", "namespace": ns, "labels": {"tier": "gold"}}}))
        .expect("the owner");
    install(
        env,
        &policy(
            "ClusterOverridePolicy",
            None,
            "ref-owner-tier",
            json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": ns}],
                "overrideRules": [{"overriders": {"template": {"type": "labels", "operation": "add",
                    "path": "tier", "valueRef": {"from": "owner", "path": "/metadata/labels/tier"}}}}],
            }),
        ),
    );
    let mut owned = pod(ns, "owned", json!({}));
    owned["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
        "uid": owner["metadata"]["uid"], "controller": true,
    }]);
    let created = env.create(&owned).expect("admitted");
    assert_eq!(
        label(&created, "tier").as_deref(),
        Some("gold"),
        "{created}"
    );
    // An owner that does not exist is an evaluation error (failurePolicy Fail: denied).
    let mut orphan = pod(ns, "orphan", json!({}));
    orphan["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "0000", "controller": true,
    }]);
    let refused = env.create(&orphan).expect_err("the owner is missing");
    assert!(
        refused.contains("ClusterOverridePolicy/ref-owner-tier")
            && refused.contains("the owner v1 ConfigMap ref-owner/gone was not found"),
        "{refused}"
    );
    env.delete_policy("ClusterOverridePolicy", None, "ref-owner-tier");
}

fn k8s_objects_by_name_and_by_selector(env: &mut Env) {
    let ns = "ref-k8s";
    env.namespace(ns, json!({}));
    env.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": "limits", "namespace": ns, "labels": {"kind": "limits"}},
                      "data": {"max": "2"}}));
    env.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": "limits-extra", "namespace": ns, "labels": {"kind": "limits"}},
                      "data": {"max": "9"}}));
    install(
        env,
        &policy(
            "ClusterOverridePolicy",
            None,
            "ref-k8s-quota",
            json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": ns}],
                "overrideRules": [{"overriders": {"template": {"type": "labels", "operation": "add",
                    "path": "quota", "valueRef": {"from": "k8s", "path": "/data/max", "k8s": {
                        "apiVersion": "v1", "kind": "ConfigMap",
                        "namespace": "{{ object.metadata.namespace }}", "name": "limits"}}}}}],
            }),
        ),
    );
    install(
        env,
        &policy(
            "ClusterValidatePolicy",
            None,
            "ref-k8s-count",
            json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": ns}],
                "validationActions": ["Warn"],
                "validateRules": [{"template": {"type": "condition", "condition": {
                    "cond": "Exist",
                    "dataRef": {"from": "k8s", "path": "$[*].metadata.name", "k8s": {
                        "apiVersion": "v1", "kind": "ConfigMap", "namespace": ns,
                        "labelSelector": {"matchLabels": {"kind": "limits"}}}},
                    "message": "limits found: {{ refs.data | join(',') }}",
                }}}],
            }),
        ),
    );
    let out = env.kubectl_stdin(
        &["create", "-o", "json", "-f", "-"],
        &pod(ns, "a", json!({})).to_string(),
    );
    assert!(out.status.success(), "{}", crate::env::text(&out));
    let created: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(label(&created, "quota").as_deref(), Some("2"), "{created}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("limits found: limits,limits-extra"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The referenced object changes: new requests see it once the short cache lapses.
    env.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": "limits", "namespace": ns, "labels": {"kind": "limits"}},
                      "data": {"max": "3"}}));
    env.wait_for("the new ConfigMap value", Duration::from_secs(5), || {
        env.create(&pod(ns, &format!("b{}", rand_suffix()), json!({})))
            .map(|p| label(&p, "quota").as_deref() == Some("3"))
            .unwrap_or(false)
    });
    let metrics = env.kanon.metrics();
    assert!(
        metrics.contains("kanon_lookups_total{source=\"k8s\",cache=\"miss\"}"),
        "lookup metrics missing:\n{metrics}"
    );
    env.delete_policy("ClusterOverridePolicy", None, "ref-k8s-quota");
    env.delete_policy("ClusterValidatePolicy", None, "ref-k8s-count");
}

fn a_namespaced_policy_never_reads_another_namespace(env: &mut Env) {
    let (mine, theirs) = ("ref-mine", "ref-theirs");
    env.namespace(mine, json!({}));
    env.namespace(theirs, json!({}));
    for ns in [mine, theirs] {
        env.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "shared", "namespace": ns, "labels": {"kind": "shared"}},
                          "data": {"owner": ns}}));
    }
    // Naming another namespace is refused when the policy is written.
    let reaching = policy(
        "ValidatePolicy",
        Some(mine),
        "reaching",
        json!({"validateRules": [{"template": {"type": "condition", "condition": {
            "cond": "Exist", "dataRef": {"from": "k8s", "path": "/data/owner", "k8s": {
                "apiVersion": "v1", "kind": "ConfigMap", "namespace": theirs, "name": "shared"}}}}}]}),
    );
    let refused = env.apply_policy(&reaching).expect_err("refused at write");
    assert!(
        refused.contains("reads objects only in its own namespace"),
        "{refused}"
    );
    // A namespace computed per request, and a listing with no namespace: only its own.
    install(
        env,
        &policy(
            "OverridePolicy",
            Some(mine),
            "peek",
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                   "failurePolicy": "Fail",
                   "overrideRules": [{"overriders": {"template": {"type": "labels", "operation": "add",
                       "path": "seen", "valueRef": {"from": "k8s", "path": "$[*].data.owner", "k8s": {
                           "apiVersion": "v1", "kind": "ConfigMap",
                           "labelSelector": {"matchLabels": {"kind": "shared"}}}}}}}]}),
        ),
    );
    let refused_or_labelled = env.create(&pod(mine, "a", json!({})));
    // One ConfigMap is visible (its own namespace's), so the label is that one value list.
    match refused_or_labelled {
        Ok(p) => panic!("a list is not a label value, expected an evaluation error: {p}"),
        Err(message) => assert!(
            message.contains(&format!("[\"{mine}\"]")) && !message.contains(theirs),
            "{message}"
        ),
    }
    env.delete_policy("OverridePolicy", Some(mine), "peek");
}

fn http_services_are_asked_and_private_addresses_refused(env: &mut Env) {
    let ns = "ref-http";
    env.namespace(ns, json!({}));
    env.service
        .allowed
        .lock()
        .unwrap()
        .insert("good".into(), true);
    env.service
        .allowed
        .lock()
        .unwrap()
        .insert("bad".into(), false);
    let url = format!(
        "http://127.0.0.1:{}/allowed/{{{{ object.metadata.name }}}}",
        env.service.port
    );
    install(
        env,
        &policy(
            "ClusterValidatePolicy",
            None,
            "ref-http-ask",
            json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": ns}],
                "validateRules": [{"template": {"type": "condition", "condition": {
                    "cond": "Equal", "dataRef": {"from": "http", "path": "/body/allowed",
                        "http": {"url": url, "auth": {"staticToken": "e2e-token"}}},
                    "value": {"boolean": false},
                    "message": "the registry service refused {{ object.metadata.name }}",
                }}}],
            }),
        ),
    );
    env.create(&pod(ns, "good", json!({})))
        .expect("the service allows it");
    let refused = env
        .create(&pod(ns, "bad", json!({})))
        .expect_err("the service refuses it");
    assert!(
        refused.contains("ClusterValidatePolicy/ref-http-ask: the registry service refused bad"),
        "{refused}"
    );
    let requests = env.service.requests.lock().unwrap().clone();
    assert!(
        requests
            .iter()
            .any(|r| r == "/allowed/good Bearer e2e-token"),
        "{requests:?}"
    );
    // The cloud metadata address is refused without a connection: an evaluation error.
    install(
        env,
        &policy(
            "ClusterValidatePolicy",
            None,
            "ref-http-metadata",
            json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": ns}],
                "validateRules": [{"template": {"type": "condition", "condition": {
                    "cond": "Exist", "dataRef": {"from": "http",
                        "http": {"url": "http://169.254.169.254/latest/meta-data/"}},
                }}}],
            }),
        ),
    );
    let refused = env
        .create(&pod(ns, "good", json!({})))
        .expect_err("metadata address refused");
    assert!(
        refused.contains("ClusterValidatePolicy/ref-http-metadata")
            && refused.contains("forbidden"),
        "{refused}"
    );
    env.delete_policy("ClusterValidatePolicy", None, "ref-http-ask");
    env.delete_policy("ClusterValidatePolicy", None, "ref-http-metadata");
}

fn secrets_are_not_readable_unless_allowed(env: &mut Env) {
    let ns = "ref-secrets";
    env.namespace(ns, json!({}));
    env.apply(&json!({"apiVersion": "v1", "kind": "Secret",
                      "metadata": {"name": "db", "namespace": ns}, "stringData": {"password": "hunter2"}}));
    install(
        env,
        &policy(
            "ClusterOverridePolicy",
            None,
            "ref-secret-leak",
            json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": ns}],
                "overrideRules": [{"overriders": {"template": {"type": "labels", "operation": "add",
                    "path": "leak", "valueRef": {"from": "k8s", "path": "/data/password", "k8s": {
                        "apiVersion": "v1", "kind": "Secret", "namespace": ns, "name": "db"}}}}}],
            }),
        ),
    );
    let refused = env.create(&pod(ns, "p", json!({}))).expect_err("refused");
    assert!(
        refused
            .contains("Secrets are not readable through references unless the operator allows it"),
        "{refused}"
    );
    assert!(!refused.contains("aHVudGVyMg"), "{refused}");
    env.delete_policy("ClusterOverridePolicy", None, "ref-secret-leak");
}
