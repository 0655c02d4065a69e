//! What kube-apiserver 1.35's default mutating admission plugins do to a Pod before any webhook
//! sees it, for the offline commands (`kanon apply`, `kanon test`), which must show policies
//! the object a webhook would get. In a cluster the apiserver has done it already.
//!
//! - **ServiceAccount**: `serviceAccountName` is `default` when empty; unless the Pod or its
//!   ServiceAccount turns automounting off, a projected volume `kube-api-access-<5 random
//!   characters>` (the token, the cluster's CA, the namespace) is added and mounted read-only at
//!   `/var/run/secrets/kubernetes.io/serviceaccount` in every container and init container that
//!   mounts nothing there; the ServiceAccount's `imagePullSecrets` when the Pod has none.
//!   Offline the volume is named [`TOKEN_VOLUME`] (the random part cannot be known).
//! - **Priority**: `priority` (and `preemptionPolicy`) from the PriorityClass named, the
//!   global default one, or `0` and `PreemptLowerPriority` when there is none; kept from the old
//!   Pod on update.
//! - **DefaultTolerationSeconds**: tolerations of the `not-ready` and `unreachable` taints for
//!   300 s unless the Pod tolerates them already.
//!
//! Objects the plugins read (ServiceAccounts, PriorityClasses) come from the offline context; a
//! ServiceAccount it lacks is taken as one that exists and sets nothing (the cluster refuses a
//! Pod whose ServiceAccount does not exist). Not done: LimitRanger (defaults from LimitRanges),
//! the default StorageClass and IngressClass, RuntimeClass overhead.

use kanon_api::Operation;
use serde_json::{Value, json};

use crate::lookup::ObjectStore;

/// The offline name of the service account token volume (`kube-api-access-` and five
/// characters, as the apiserver names it, of the alphabet it draws them from).
pub const TOKEN_VOLUME: &str = "kube-api-access-xxxxx";
const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The PriorityClasses every cluster has: `(name, value)`.
const SYSTEM_PRIORITY_CLASSES: [(&str, i64); 2] = [
    ("system-node-critical", 2_000_001_000),
    ("system-cluster-critical", 2_000_000_000),
];

/// Runs the plugins on `object` (a Pod; anything else is left alone) as the apiserver runs them
/// on a request of `operation`, reading what they need from `context`.
pub fn apply_admission_plugins(
    operation: Operation,
    object: &mut Value,
    old: Option<&Value>,
    context: &ObjectStore,
) {
    let is_pod = object.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && object.get("kind").and_then(Value::as_str) == Some("Pod");
    if !is_pod {
        return;
    }
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .map(str::to_owned);
    // Mirror Pods (the kubelet's static Pods) are not given a service account.
    let mirror = object
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|annotations| annotations.contains_key(MIRROR_ANNOTATION));
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    match operation {
        Operation::Create => {
            if !mirror {
                service_account(spec, namespace.as_deref(), context);
            }
            priority(spec, context);
            toleration_seconds(spec);
        }
        Operation::Update => {
            keep_priority(spec, old);
            toleration_seconds(spec);
        }
        _ => {}
    }
}

type Spec = serde_json::Map<String, Value>;

fn service_account(spec: &mut Spec, namespace: Option<&str>, context: &ObjectStore) {
    let name = match spec.get("serviceAccountName").and_then(Value::as_str) {
        Some(name) if !name.is_empty() => name.to_owned(),
        _ => {
            spec.insert("serviceAccountName".into(), json!("default"));
            "default".to_owned()
        }
    };
    let account = context.object("v1", "ServiceAccount", namespace, &name);
    let automount = spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| {
            account
                .as_deref()
                .and_then(|a| a.get("automountServiceAccountToken"))
                .and_then(Value::as_bool)
        })
        .unwrap_or(true);
    if automount {
        mount_token(spec);
    }
    let has_pull_secrets = spec
        .get("imagePullSecrets")
        .and_then(Value::as_array)
        .is_some_and(|secrets| !secrets.is_empty());
    if !has_pull_secrets
        && let Some(secrets) = account
            .as_deref()
            .and_then(|a| a.get("imagePullSecrets"))
            .and_then(Value::as_array)
            .filter(|secrets| !secrets.is_empty())
    {
        let names: Vec<Value> = secrets
            .iter()
            .map(|s| json!({"name": s.get("name").cloned().unwrap_or(json!(""))}))
            .collect();
        spec.insert("imagePullSecrets".into(), Value::Array(names));
    }
}

fn mount_token(spec: &mut Spec) {
    let existing = spec
        .get("volumes")
        .and_then(Value::as_array)
        .and_then(|volumes| {
            volumes.iter().find_map(|v| {
                v.get("name")
                    .and_then(Value::as_str)
                    .filter(|name| name.starts_with("kube-api-access-"))
                    .map(str::to_owned)
            })
        });
    let volume = existing.clone().unwrap_or_else(|| TOKEN_VOLUME.to_owned());
    let mount = json!({"name": volume, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
    let mut needed = false;
    for field in ["initContainers", "containers"] {
        let Some(containers) = spec.get_mut(field).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in containers.iter_mut().filter_map(Value::as_object_mut) {
            let mounted = container
                .get("volumeMounts")
                .and_then(Value::as_array)
                .is_some_and(|mounts| {
                    mounts.iter().any(|m| {
                        m.get("mountPath").and_then(Value::as_str) == Some(TOKEN_MOUNT_PATH)
                    })
                });
            if mounted {
                continue;
            }
            needed = true;
            append(container, "volumeMounts", vec![mount.clone()]);
        }
    }
    if existing.is_some() || !needed {
        return;
    }
    let token = json!({
        "name": volume,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ],
        },
    });
    append(spec, "volumes", vec![token]);
}

fn priority(spec: &mut Spec, context: &ObjectStore) {
    let named = spec
        .get("priorityClassName")
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
        .map(str::to_owned);
    let class_of = |class: &Value| {
        let value = class.get("value").and_then(Value::as_i64).unwrap_or(0);
        let policy = class
            .get("preemptionPolicy")
            .and_then(Value::as_str)
            .unwrap_or("PreemptLowerPriority")
            .to_owned();
        (value, policy)
    };
    let (value, policy) = match &named {
        Some(name) => {
            let found = context
                .object("scheduling.k8s.io/v1", "PriorityClass", None, name)
                .map(|class| class_of(&class))
                .or_else(|| {
                    SYSTEM_PRIORITY_CLASSES
                        .iter()
                        .find(|(system, _)| system == name)
                        .map(|(_, value)| (*value, "PreemptLowerPriority".to_owned()))
                });
            // A class the context lacks: the cluster's value is unknown (and it refuses a
            // class that does not exist), so nothing is set.
            let Some(found) = found else {
                return;
            };
            found
        }
        None => {
            let default = context
                .objects("scheduling.k8s.io/v1", "PriorityClass", None)
                .into_iter()
                .filter(|class| class.get("globalDefault").and_then(Value::as_bool) == Some(true))
                .min_by_key(|class| class.get("value").and_then(Value::as_i64).unwrap_or(0));
            match default {
                Some(class) => {
                    if let Some(name) = class.pointer("/metadata/name").and_then(Value::as_str) {
                        spec.insert("priorityClassName".into(), json!(name));
                    }
                    class_of(&class)
                }
                None => (0, "PreemptLowerPriority".to_owned()),
            }
        }
    };
    // A Pod that gives another value is refused by the cluster: left as written.
    spec.entry("priority").or_insert(json!(value));
    spec.entry("preemptionPolicy").or_insert(json!(policy));
}

fn keep_priority(spec: &mut Spec, old: Option<&Value>) {
    let Some(old) = old.and_then(|old| old.get("spec")) else {
        return;
    };
    for field in ["priority", "preemptionPolicy"] {
        if spec.get(field).is_none_or(Value::is_null)
            && let Some(kept) = old.get(field).filter(|v| !v.is_null())
        {
            spec.insert(field.into(), kept.clone());
        }
    }
}

fn toleration_seconds(spec: &mut Spec) {
    let tolerations: Vec<&Value> = spec
        .get("tolerations")
        .and_then(Value::as_array)
        .map(|t| t.iter().collect())
        .unwrap_or_default();
    let tolerates = |taint: &str| {
        tolerations.iter().any(|t| {
            let key = t.get("key").and_then(Value::as_str).unwrap_or("");
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
            (key == taint || key.is_empty()) && (effect == "NoExecute" || effect.is_empty())
        })
    };
    let missing: Vec<Value> = ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"]
        .into_iter()
        .filter(|taint| !tolerates(taint))
        .map(|taint| {
            json!({"key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
        })
        .collect();
    if missing.is_empty() {
        return;
    }
    append(spec, "tolerations", missing);
}

/// Appends `items` to the list at `field`, made when there is none.
fn append(object: &mut Spec, field: &str, items: Vec<Value>) {
    match object.get_mut(field).and_then(Value::as_array_mut) {
        Some(list) => list.extend(items),
        None => {
            object.insert(field.into(), Value::Array(items));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "shop"}, "spec": spec})
    }

    #[test]
    fn a_pod_gets_what_the_default_plugins_add() {
        let mut object = pod(json!({"containers": [{"name": "app", "image": "nginx"}]}));
        apply_admission_plugins(Operation::Create, &mut object, None, &ObjectStore::new());
        let spec = &object["spec"];
        assert_eq!(spec["serviceAccountName"], "default");
        assert_eq!(
            spec["containers"][0]["volumeMounts"],
            json!([{"name": TOKEN_VOLUME, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH}])
        );
        assert_eq!(spec["volumes"][0]["name"], TOKEN_VOLUME);
        assert_eq!(spec["volumes"][0]["projected"]["defaultMode"], 420);
        assert_eq!(spec["priority"], 0);
        assert_eq!(spec["preemptionPolicy"], "PreemptLowerPriority");
        assert_eq!(
            spec["tolerations"],
            json!([
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ])
        );
    }

    #[test]
    fn what_the_pod_or_its_context_says_is_followed() {
        let mut context = ObjectStore::new();
        context
            .insert(json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "robot", "namespace": "shop"},
                "automountServiceAccountToken": false,
                "imagePullSecrets": [{"name": "registry"}]}))
            .expect("identity");
        context
            .insert(
                json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": "batch"}, "value": 100, "preemptionPolicy": "Never"}),
            )
            .expect("identity");
        let mut object = pod(json!({
            "serviceAccountName": "robot",
            "priorityClassName": "batch",
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "app", "image": "nginx"}],
        }));
        apply_admission_plugins(Operation::Create, &mut object, None, &context);
        let spec = &object["spec"];
        assert!(spec.get("volumes").is_none(), "automounting is off: {spec}");
        assert_eq!(spec["imagePullSecrets"], json!([{"name": "registry"}]));
        assert_eq!(spec["priority"], 100);
        assert_eq!(spec["preemptionPolicy"], "Never");
        assert_eq!(spec["tolerations"], json!([{"operator": "Exists"}]));
        // A built-in class; another kind is left alone.
        let mut critical =
            pod(json!({"priorityClassName": "system-node-critical", "containers": []}));
        apply_admission_plugins(Operation::Create, &mut critical, None, &context);
        assert_eq!(critical["spec"]["priority"], 2_000_001_000);
        let mut service = json!({"apiVersion": "v1", "kind": "Service", "spec": {}});
        apply_admission_plugins(Operation::Create, &mut service, None, &context);
        assert_eq!(
            service,
            json!({"apiVersion": "v1", "kind": "Service", "spec": {}})
        );
    }
}
