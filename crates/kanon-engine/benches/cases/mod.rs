//! The Pod and the templates of the `template` benches, shared with
//! `examples/template_calls.rs` (which counts instructions for the same cases).

use serde_json::{Value, json};

/// A Pod with two containers, labels and annotations.
pub fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "shop", "labels": {"app": "web", "tier": "frontend"},
                     "annotations": {"kubernetes.io/psp": "restricted"}},
        "spec": {
            "containers": [
                {"name": "nginx", "image": "nginx:1.27", "ports": [{"containerPort": 80}],
                 "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}},
                {"name": "sidecar", "image": "busybox:1.36", "command": ["sh", "-c", "sleep 3600"]}
            ],
            "restartPolicy": "Always"
        }
    })
}

/// A ClusterOverridePolicy `name` selecting every Pod, with `overriders`.
pub fn override_policy(name: &str, overriders: Value) -> Value {
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterOverridePolicy",
        "metadata": {"name": name},
        "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                 "overrideRules": [{"overriders": overriders}]}
    })
}

/// The floor of a mutation: a plaintext `add` of a label.
pub fn floor() -> Value {
    override_policy(
        "plain",
        json!({"plaintext": [{"op": "add", "path": "/metadata/labels/team", "value": "shop"}]}),
    )
}

/// The policy running one `template`.
pub fn override_template(template: Value) -> Value {
    override_policy("tpl", json!({"template": template}))
}

/// One template of each type, each changing the Pod.
pub fn templates() -> Vec<(&'static str, Value)> {
    vec![
        (
            "labels",
            json!({"type": "labels", "operation": "add", "path": "team", "value": {"string": "shop"}}),
        ),
        (
            "annotations",
            json!({"type": "annotations", "operation": "add", "path": "kanon.dev/owner", "value": {"string": "platform"}}),
        ),
        (
            "nodeSelector",
            json!({"type": "nodeSelector", "operation": "add", "path": "disktype", "value": {"string": "ssd"}}),
        ),
        (
            "resources",
            json!({"type": "resources", "operation": "add", "containerNames": ["nginx"],
                             "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}}}),
        ),
        (
            "resourcesOversell",
            json!({"type": "resourcesOversell", "operation": "add",
                                     "resourcesOversell": {"cpuFactor": "0.5", "memoryFactor": "0.5"}}),
        ),
        (
            "tolerations",
            json!({"type": "tolerations", "operation": "add",
                               "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "shop", "effect": "NoSchedule"}]}),
        ),
        (
            "affinity",
            json!({"type": "affinity", "operation": "add", "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}}}),
        ),
    ]
}
