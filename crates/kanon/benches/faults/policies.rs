//! The bench's policies, its Pods and the AdmissionReviews sent straight to kanon.

use std::collections::BTreeMap;

use anyhow::{Result, ensure};
use base64::Engine as _;
use kanon_control_plane::kanon::bench_policy;
use serde_json::{Value, json};

use crate::{LABEL_A, LABEL_B, LABEL_HANG, LABEL_NAME, NS};

pub(crate) fn pods_selector() -> Value {
    json!([{"apiVersion": "v1", "kind": "Pod", "namespace": NS}])
}

/// A ClusterOverridePolicy adding `label` with `source` (`value` or `valueRef`).
pub(crate) fn label_policy(
    name: &str,
    label: &str,
    source: Value,
    selectors: Value,
    fail: &str,
) -> Value {
    let mut template = json!({"type": "labels", "operation": "add", "path": label});
    for (key, value) in source.as_object().into_iter().flatten() {
        template[key] = value.clone();
    }
    bench_policy(
        "ClusterOverridePolicy",
        name,
        json!({
            "failurePolicy": fail,
            "resourceSelectors": selectors,
            "overrideRules": [{"targetOperations": ["CREATE"],
                               "overriders": {"template": template}}],
        }),
    )
}

pub(crate) fn policy_a(value: &str) -> Value {
    label_policy(
        "faults-a",
        LABEL_A,
        json!({"value": {"string": value}}),
        pods_selector(),
        "Fail",
    )
}

pub(crate) fn policy_b(value: &str) -> Value {
    label_policy(
        "faults-b",
        LABEL_B,
        json!({"value": {"string": value}}),
        pods_selector(),
        "Fail",
    )
}

pub(crate) fn policy_name() -> Value {
    label_policy(
        "faults-name",
        LABEL_NAME,
        json!({"valueRef": {"from": "current", "path": "/metadata/name"}}),
        pods_selector(),
        "Fail",
    )
}

pub(crate) fn policy_forbidden() -> Value {
    bench_policy(
        "ClusterValidatePolicy",
        "faults-forbidden",
        json!({
            "failurePolicy": "Fail",
            "resourceSelectors": pods_selector(),
            "validateRules": [{"template": {"type": "condition", "condition": {
                "cond": "Equal",
                "dataRef": {"from": "current", "path": "/metadata/labels/forbidden"},
                "value": {"string": "yes"},
                "message": "{{ object.metadata.name }} is marked forbidden"}}}],
        }),
    )
}

/// The policy whose label comes from the server that never answers; it selects the Pods
/// labelled `lookup: hang`. `timeout`: the reference's `timeoutSeconds`.
pub(crate) fn policy_hang(port: u16, timeout: Option<u32>) -> Value {
    let mut http = json!({"url": format!("http://127.0.0.1:{port}/tier")});
    if let Some(seconds) = timeout {
        http["timeoutSeconds"] = json!(seconds);
    }
    label_policy(
        "faults-hang",
        LABEL_HANG,
        json!({"valueRef": {"from": "http", "path": "/body/tier", "http": http}}),
        json!([{"apiVersion": "v1", "kind": "Pod", "namespace": NS,
                "labelSelector": {"matchLabels": {"lookup": "hang"}}}]),
        "Ignore",
    )
}

pub(crate) fn pod(name: &str, labels: &BTreeMap<String, String>) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.0",
                                 "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}}}]},
    })
}

/// An AdmissionReview of a Pod CREATE in the bench namespace, as kube-apiserver sends it.
pub(crate) fn review(uid: &str, forbidden: bool) -> Value {
    let mut labels = BTreeMap::from([("app".to_string(), "bench".to_string())]);
    if forbidden {
        labels.insert("forbidden".into(), "yes".into());
    }
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "direct",
            "namespace": NS,
            "operation": "CREATE",
            "userInfo": {"username": "bench"},
            "object": pod("direct", &labels),
            "dryRun": false,
        },
    })
}

/// The labels a `/mutate` answer's patch sets (an error when it is not allowed).
pub(crate) fn patched_labels(body: &[u8]) -> Result<BTreeMap<String, String>> {
    let answer: Value = serde_json::from_slice(body)?;
    let response = &answer["response"];
    ensure!(response["allowed"] == true, "not allowed: {answer}");
    let mut labels = BTreeMap::new();
    let Some(patch) = response["patch"].as_str() else {
        return Ok(labels);
    };
    let patch: Value =
        serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(patch)?)?;
    for op in patch.as_array().into_iter().flatten() {
        let path = op["path"].as_str().unwrap_or_default();
        if let Some(key) = path.strip_prefix("/metadata/labels/") {
            if let Some(v) = op["value"].as_str() {
                labels.insert(key.replace("~1", "/").replace("~0", "~"), v.to_string());
            }
        } else if path == "/metadata/labels" {
            for (k, v) in op["value"].as_object().into_iter().flatten() {
                if let Some(v) = v.as_str() {
                    labels.insert(k.clone(), v.to_string());
                }
            }
        }
    }
    Ok(labels)
}
