//! The defaulting functions of kube-apiserver 1.35.8's built-in API groups
//! (`SetDefaults_<Type>` in `k8s.io/kubernetes/pkg/apis/<group>/<version>/defaults.go`), by the
//! OpenAPI component of the type each defaults, with the feature gates at their 1.35 defaults
//! (`PodLevelResources`, `ImageVolume`, `JobPodReplacementPolicy`,
//! `SELinuxMountReadWriteOncePod` on; `MaxUnavailableStatefulSet` off).
//!
//! Each works on the JSON of one value of its type, as the Go function works on the decoded
//! struct: a field "unset" is one the Go struct would hold as nil or its zero value (absent,
//! `null`, `""`, `0`). Values of the wrong shape are left alone (strict decoding refuses them
//! first in the apiserver).
//!
//! Left out: `resource.k8s.io/v1` `DeviceTaint.timeAdded` (the apiserver writes the time of the
//! request; the engine has no clock) and `PodLogOptions` (not an object anyone admits).

use serde_json::{Map, Value, json};

use super::image;
use crate::quantity::Quantity;

type Object = Map<String, Value>;

/// Whether the defaulting function of the kind named `component` reads the object's own
/// labels or annotations (or its name, which it writes into a label): a Namespace is labelled
/// with its name; a ReplicationController and a Job take their template's labels when they
/// have none. Every other defaulter leaves `metadata` unread, so a change to labels or
/// annotations alone leaves an object defaulting gave nothing more to.
pub(super) fn reads_metadata(component: &str) -> bool {
    matches!(
        component.rsplit_once('.'),
        Some((CORE, "Namespace" | "ReplicationController") | (BATCH, "Job"))
    )
}

/// The defaulting function of the type named `component`, if it has one.
pub(super) fn defaulter(component: &str) -> Option<fn(&mut Object)> {
    let (group, name) = component.rsplit_once('.')?;
    Some(match (group, name) {
        (CORE, "Pod") => pod,
        (CORE, "PodSpec") => pod_spec,
        (CORE, "Container") | (CORE, "EphemeralContainer") => container,
        (CORE, "Volume") => volume,
        (CORE, "Service") => service,
        (CORE, "Probe") => probe,
        (CORE, "SecretVolumeSource")
        | (CORE, "ConfigMapVolumeSource")
        | (CORE, "DownwardAPIVolumeSource")
        | (CORE, "ProjectedVolumeSource") => volume_mode,
        (CORE, "Secret") => secret,
        (CORE, "ServiceAccountTokenProjection") => token_projection,
        (CORE, "PersistentVolume") => persistent_volume,
        (CORE, "PersistentVolumeClaim") => persistent_volume_claim,
        (CORE, "PersistentVolumeClaimSpec") => claim_spec,
        (CORE, "Endpoints") => endpoints,
        (CORE, "HTTPGetAction") => http_get,
        (CORE, "Namespace") => namespace,
        (CORE, "NamespaceStatus") => namespace_status,
        (CORE, "NodeStatus") => node_status,
        (CORE, "ObjectFieldSelector") => field_selector,
        (CORE, "LimitRangeItem") => limit_range_item,
        (CORE, "HostPathVolumeSource") => host_path,
        (CORE, "ReplicationController") => replication_controller,
        (APPS, "Deployment") => deployment,
        (APPS, "DaemonSet") => daemon_set,
        (APPS, "StatefulSet") => stateful_set,
        (APPS, "ReplicaSet") => replica_set,
        (BATCH, "Job") => job,
        (BATCH, "CronJob") => cron_job,
        (BATCH, "PodFailurePolicyOnPodConditionsPattern") => condition_pattern,
        (NETWORKING, "NetworkPolicyPort") => network_policy_port,
        (NETWORKING, "NetworkPolicy") => network_policy,
        (NETWORKING, "IngressClass") => ingress_class,
        (RBAC, "ClusterRoleBinding") | (RBAC, "RoleBinding") => role_binding,
        (RBAC, "Subject") => subject,
        (AUTOSCALING_V1, "HorizontalPodAutoscaler") => autoscaler_v1,
        (AUTOSCALING_V2, "HorizontalPodAutoscaler") => autoscaler_v2,
        (STORAGE, "StorageClass") => storage_class,
        (STORAGE, "CSIDriver") => csi_driver,
        (SCHEDULING, "PriorityClass") => priority_class,
        (DISCOVERY, "EndpointPort") => endpoint_port,
        (RESOURCE, "ExactDeviceRequest") | (RESOURCE, "DeviceSubRequest") => device_request,
        (FLOWCONTROL, "FlowSchemaSpec") => flow_schema_spec,
        (FLOWCONTROL, "ExemptPriorityLevelConfiguration") => exempt_priority_level,
        (FLOWCONTROL, "LimitedPriorityLevelConfiguration") => limited_priority_level,
        (FLOWCONTROL, "QueuingConfiguration") => queuing,
        (ADMISSION_V1 | ADMISSION_V1BETA1, "ValidatingWebhook") => webhook,
        (ADMISSION_V1 | ADMISSION_V1BETA1, "MutatingWebhook") => mutating_webhook,
        // `Rule` is embedded in these, which the schema flattens.
        (ADMISSION_V1 | ADMISSION_V1BETA1, "RuleWithOperations" | "NamedRuleWithOperations") => {
            rule
        }
        (ADMISSION_V1 | ADMISSION_V1BETA1, "ServiceReference") => service_reference,
        (
            ADMISSION_V1 | ADMISSION_V1BETA1,
            "ValidatingAdmissionPolicySpec" | "MutatingAdmissionPolicySpec",
        ) => policy_spec,
        (ADMISSION_V1 | ADMISSION_V1BETA1, "MatchResources") => match_resources,
        _ => return None,
    })
}

/// Every type named in [`defaulter`], for the test that checks the schema has each.
#[cfg(test)]
pub(super) const NAMED: &[&str] = &[
    "io.k8s.api.core.v1.Pod",
    "io.k8s.api.core.v1.PodSpec",
    "io.k8s.api.core.v1.Container",
    "io.k8s.api.core.v1.EphemeralContainer",
    "io.k8s.api.core.v1.Volume",
    "io.k8s.api.core.v1.Service",
    "io.k8s.api.core.v1.Probe",
    "io.k8s.api.core.v1.SecretVolumeSource",
    "io.k8s.api.core.v1.ConfigMapVolumeSource",
    "io.k8s.api.core.v1.DownwardAPIVolumeSource",
    "io.k8s.api.core.v1.ProjectedVolumeSource",
    "io.k8s.api.core.v1.Secret",
    "io.k8s.api.core.v1.ServiceAccountTokenProjection",
    "io.k8s.api.core.v1.PersistentVolume",
    "io.k8s.api.core.v1.PersistentVolumeClaim",
    "io.k8s.api.core.v1.PersistentVolumeClaimSpec",
    "io.k8s.api.core.v1.Endpoints",
    "io.k8s.api.core.v1.HTTPGetAction",
    "io.k8s.api.core.v1.Namespace",
    "io.k8s.api.core.v1.NamespaceStatus",
    "io.k8s.api.core.v1.NodeStatus",
    "io.k8s.api.core.v1.ObjectFieldSelector",
    "io.k8s.api.core.v1.LimitRangeItem",
    "io.k8s.api.core.v1.HostPathVolumeSource",
    "io.k8s.api.core.v1.ReplicationController",
    "io.k8s.api.apps.v1.Deployment",
    "io.k8s.api.apps.v1.DaemonSet",
    "io.k8s.api.apps.v1.StatefulSet",
    "io.k8s.api.apps.v1.ReplicaSet",
    "io.k8s.api.batch.v1.Job",
    "io.k8s.api.batch.v1.CronJob",
    "io.k8s.api.batch.v1.PodFailurePolicyOnPodConditionsPattern",
    "io.k8s.api.networking.v1.NetworkPolicyPort",
    "io.k8s.api.networking.v1.NetworkPolicy",
    "io.k8s.api.networking.v1.IngressClass",
    "io.k8s.api.rbac.v1.ClusterRoleBinding",
    "io.k8s.api.rbac.v1.RoleBinding",
    "io.k8s.api.rbac.v1.Subject",
    "io.k8s.api.autoscaling.v1.HorizontalPodAutoscaler",
    "io.k8s.api.autoscaling.v2.HorizontalPodAutoscaler",
    "io.k8s.api.storage.v1.StorageClass",
    "io.k8s.api.storage.v1.CSIDriver",
    "io.k8s.api.scheduling.v1.PriorityClass",
    "io.k8s.api.discovery.v1.EndpointPort",
    "io.k8s.api.resource.v1.ExactDeviceRequest",
    "io.k8s.api.resource.v1.DeviceSubRequest",
    "io.k8s.api.flowcontrol.v1.FlowSchemaSpec",
    "io.k8s.api.flowcontrol.v1.ExemptPriorityLevelConfiguration",
    "io.k8s.api.flowcontrol.v1.LimitedPriorityLevelConfiguration",
    "io.k8s.api.flowcontrol.v1.QueuingConfiguration",
    "io.k8s.api.admissionregistration.v1.ValidatingWebhook",
    "io.k8s.api.admissionregistration.v1.MutatingWebhook",
    "io.k8s.api.admissionregistration.v1.RuleWithOperations",
    "io.k8s.api.admissionregistration.v1.NamedRuleWithOperations",
    "io.k8s.api.admissionregistration.v1.ServiceReference",
    "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec",
    "io.k8s.api.admissionregistration.v1.MatchResources",
    "io.k8s.api.admissionregistration.v1beta1.MutatingAdmissionPolicySpec",
    "io.k8s.api.admissionregistration.v1beta1.MatchResources",
    "io.k8s.api.admissionregistration.v1beta1.NamedRuleWithOperations",
];

const CORE: &str = "io.k8s.api.core.v1";
const APPS: &str = "io.k8s.api.apps.v1";
const BATCH: &str = "io.k8s.api.batch.v1";
const NETWORKING: &str = "io.k8s.api.networking.v1";
const RBAC: &str = "io.k8s.api.rbac.v1";
const AUTOSCALING_V1: &str = "io.k8s.api.autoscaling.v1";
const AUTOSCALING_V2: &str = "io.k8s.api.autoscaling.v2";
const STORAGE: &str = "io.k8s.api.storage.v1";
const SCHEDULING: &str = "io.k8s.api.scheduling.v1";
const DISCOVERY: &str = "io.k8s.api.discovery.v1";
const RESOURCE: &str = "io.k8s.api.resource.v1";
const FLOWCONTROL: &str = "io.k8s.api.flowcontrol.v1";
const ADMISSION_V1: &str = "io.k8s.api.admissionregistration.v1";
const ADMISSION_V1BETA1: &str = "io.k8s.api.admissionregistration.v1beta1";

// What Go holds as nil, or as its zero value, for a field of the JSON.

/// A pointer, map or list field Go holds as nil: absent or `null`.
fn unset(object: &Object, key: &str) -> bool {
    object.get(key).is_none_or(Value::is_null)
}

/// A field Go holds as its zero value or nil: absent, `null`, `""`, `0`, `false`, empty.
fn zero(object: &Object, key: &str) -> bool {
    match object.get(key) {
        None | Some(Value::Null) => true,
        Some(Value::String(text)) => text.is_empty(),
        Some(Value::Number(number)) => number.as_f64() == Some(0.0),
        Some(Value::Bool(b)) => !b,
        Some(Value::Array(items)) => items.is_empty(),
        Some(Value::Object(map)) => map.is_empty(),
    }
}

/// Sets `key` to `value` when it is unset (a pointer field).
fn set_unset(object: &mut Object, key: &str, value: Value) {
    if unset(object, key) {
        object.insert(key.to_owned(), value);
    }
}

/// Sets `key` to `value` when it is zero (a value field).
fn set_zero(object: &mut Object, key: &str, value: Value) {
    if zero(object, key) {
        object.insert(key.to_owned(), value);
    }
}

/// The object at `key`, created empty when unset (Go's non-pointer struct field, always
/// there); `None` when something else is there.
fn structure<'o>(object: &'o mut Object, key: &str) -> Option<&'o mut Object> {
    if unset(object, key) {
        object.insert(key.to_owned(), Value::Object(Object::new()));
    }
    object.get_mut(key)?.as_object_mut()
}

/// The object at `key`, when there is one (a pointer field that is not nil).
fn present<'o>(object: &'o mut Object, key: &str) -> Option<&'o mut Object> {
    object.get_mut(key)?.as_object_mut()
}

/// The string at `key`, or `""`.
fn text<'o>(object: &'o Object, key: &str) -> &'o str {
    object.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The objects in the list at `key`.
fn items<'o>(object: &'o mut Object, key: &str) -> impl Iterator<Item = &'o mut Object> {
    object
        .get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

// core/v1

fn pod(pod: &mut Object) {
    let Some(spec) = structure(pod, "spec") else {
        return;
    };
    for key in ["containers", "initContainers"] {
        for container in items(spec, key) {
            requests_from_limits(container);
        }
    }
    pod_level_resources(spec);
    set_unset(spec, "enableServiceLinks", json!(true));
    if spec.get("hostNetwork") == Some(&Value::Bool(true)) {
        for key in ["containers", "initContainers"] {
            for container in items(spec, key) {
                for port in items(container, "ports") {
                    if zero(port, "hostPort")
                        && let Some(container_port) = port.get("containerPort").cloned()
                    {
                        port.insert("hostPort".into(), container_port);
                    }
                }
            }
        }
    }
}

/// A container's requests gain each limit it has no request for.
fn requests_from_limits(container: &mut Object) {
    let Some(resources) = present(container, "resources") else {
        return;
    };
    let limits = resources.get("limits").and_then(Value::as_object).cloned();
    let Some(limits) = limits.filter(|limits| !limits.is_empty()) else {
        return;
    };
    if let Some(requests) = structure(resources, "requests") {
        for (name, limit) in limits {
            requests.entry(name).or_insert(limit);
        }
    }
}

/// The pod-level `resources`' defaulting: hugepage limits from the containers', then requests
/// from the containers' requests (where overcommit is allowed) and the pod's limits.
fn pod_level_resources(spec: &mut Object) {
    // Most Pods have none: the containers are summed only for one that has.
    if !spec.get("resources").is_some_and(Value::is_object) {
        return;
    }
    let container_limits = aggregate(spec, "limits");
    let container_requests = aggregate(spec, "requests");
    let Some(resources) = present(spec, "resources") else {
        return;
    };
    let list = |resources: &Object, key: &str| {
        resources
            .get(key)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let supported = |name: &str| matches!(name, "cpu" | "memory") || hugepages(name);
    // Hugepage limits.
    let (limits, requests) = (list(resources, "limits"), list(resources, "requests"));
    if !limits.is_empty() || !requests.is_empty() {
        let mut pod_limits = limits.clone();
        for (name, quantity) in &container_limits {
            if hugepages(name) && !requests.contains_key(name) {
                pod_limits
                    .entry(name.clone())
                    .or_insert_with(|| Value::String(quantity.canonical_text()));
            }
        }
        if !pod_limits.is_empty() {
            resources.insert("limits".into(), Value::Object(pod_limits));
        }
    }
    // Requests.
    let limits = list(resources, "limits");
    if limits.is_empty() {
        return;
    }
    let mut pod_requests = list(resources, "requests");
    for (name, quantity) in &container_requests {
        let overcommit =
            (!name.contains('/') || name.contains("kubernetes.io/")) && !hugepages(name);
        if supported(name) && overcommit && !pod_requests.contains_key(name) {
            pod_requests.insert(name.clone(), Value::String(quantity.canonical_text()));
        }
    }
    for (name, limit) in limits {
        if supported(&name) && !pod_requests.contains_key(&name) {
            pod_requests.insert(name, limit);
        }
    }
    if !pod_requests.is_empty() {
        resources.insert("requests".into(), Value::Object(pod_requests));
    }
}

fn hugepages(name: &str) -> bool {
    name.starts_with("hugepages-")
}

/// The pod's containers' `requests` or `limits` summed as the scheduler sums them
/// (`resourcehelper.AggregateContainerRequests`/`Limits`): the containers and sidecars (init
/// containers that restart `Always`) add up; each other init container runs with the sidecars
/// before it, and the largest of those wins where it is larger.
fn aggregate(spec: &Object, key: &str) -> Vec<(String, Quantity)> {
    let list = |container: &Value| -> Vec<(String, Quantity)> {
        container
            .pointer(&format!("/resources/{key}"))
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(name, value)| Some((name.clone(), crate::typed::quantity_of(value)?)))
            .collect()
    };
    let containers = |key: &str| {
        spec.get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
    };
    let mut total: Vec<(String, Quantity)> = Vec::new();
    for container in containers("containers") {
        add(&mut total, &list(container));
    }
    let mut sidecars: Vec<(String, Quantity)> = Vec::new();
    let mut init: Vec<(String, Quantity)> = Vec::new();
    for container in containers("initContainers") {
        let own = list(container);
        let running = if container.get("restartPolicy").and_then(Value::as_str) == Some("Always") {
            add(&mut total, &own);
            add(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut running = own;
            add(&mut running, &sidecars);
            running
        };
        largest(&mut init, &running);
    }
    largest(&mut total, &init);
    total
}

fn add(list: &mut Vec<(String, Quantity)>, more: &[(String, Quantity)]) {
    for (name, quantity) in more {
        match list.iter_mut().find(|(n, _)| n == name) {
            Some((_, sum)) => *sum = sum.plus(*quantity).unwrap_or(*sum),
            None => list.push((name.clone(), *quantity)),
        }
    }
}

fn largest(list: &mut Vec<(String, Quantity)>, other: &[(String, Quantity)]) {
    for (name, quantity) in other {
        match list.iter_mut().find(|(n, _)| n == name) {
            Some((_, held)) if *quantity > *held => *held = *quantity,
            Some(_) => {}
            None => list.push((name.clone(), *quantity)),
        }
    }
}

fn pod_spec(spec: &mut Object) {
    set_zero(spec, "dnsPolicy", json!("ClusterFirst"));
    set_zero(spec, "restartPolicy", json!("Always"));
    set_unset(spec, "securityContext", json!({}));
    set_unset(spec, "terminationGracePeriodSeconds", json!(30));
    set_zero(spec, "schedulerName", json!("default-scheduler"));
}

fn container(container: &mut Object) {
    if zero(container, "imagePullPolicy") {
        let always = image::pulls_always(text(container, "image"));
        let policy = if always { "Always" } else { "IfNotPresent" };
        container.insert("imagePullPolicy".into(), json!(policy));
    }
    set_zero(
        container,
        "terminationMessagePath",
        json!("/dev/termination-log"),
    );
    set_zero(container, "terminationMessagePolicy", json!("File"));
}

fn volume(volume: &mut Object) {
    // `VolumeSource` is embedded: every field but the name is a source (all pointers).
    if volume
        .iter()
        .all(|(key, value)| key == "name" || value.is_null())
    {
        volume.insert("emptyDir".into(), json!({}));
    }
    if let Some(image) = present(volume, "image")
        && zero(image, "pullPolicy")
    {
        let always = image::pulls_always(text(image, "reference"));
        let policy = if always { "Always" } else { "IfNotPresent" };
        image.insert("pullPolicy".into(), json!(policy));
    }
}

fn service(service: &mut Object) {
    let Some(spec) = structure(service, "spec") else {
        return;
    };
    set_zero(spec, "sessionAffinity", json!("None"));
    match text(spec, "sessionAffinity") {
        "None" => {
            spec.remove("sessionAffinityConfig");
        }
        "ClientIP" => {
            let has_timeout = member(
                spec,
                &["sessionAffinityConfig", "clientIP", "timeoutSeconds"],
            )
            .is_some_and(|v| !v.is_null());
            if !has_timeout {
                spec.insert(
                    "sessionAffinityConfig".into(),
                    json!({"clientIP": {"timeoutSeconds": 10800}}),
                );
            }
        }
        _ => {}
    }
    set_zero(spec, "type", json!("ClusterIP"));
    for port in items(spec, "ports") {
        set_zero(port, "protocol", json!("TCP"));
        let target_unset = match port.get("targetPort") {
            None | Some(Value::Null) => true,
            Some(Value::Number(n)) => n.as_f64() == Some(0.0),
            Some(Value::String(s)) => s.is_empty(),
            _ => false,
        };
        if target_unset {
            let port_number = port.get("port").cloned().unwrap_or(json!(0));
            port.insert("targetPort".into(), port_number);
        }
    }
    let kind = text(spec, "type").to_owned();
    let external_ips = !zero(spec, "externalIPs");
    let externally_accessible =
        kind == "LoadBalancer" || kind == "NodePort" || (kind == "ClusterIP" && external_ips);
    if externally_accessible {
        set_zero(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if matches!(kind.as_str(), "NodePort" | "LoadBalancer" | "ClusterIP") {
        set_unset(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if kind == "LoadBalancer" {
        set_unset(spec, "allocateLoadBalancerNodePorts", json!(true));
        let ingress = service
            .get_mut("status")
            .and_then(|status| status.pointer_mut("/loadBalancer/ingress"))
            .and_then(Value::as_array_mut);
        for entry in ingress
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            if !zero(entry, "ip") {
                set_unset(entry, "ipMode", json!("VIP"));
            }
        }
    }
}

/// The value at `path` (keys and list indexes) below `object`.
fn member<'o>(object: &'o Object, path: &[&str]) -> Option<&'o Value> {
    let (first, rest) = path.split_first()?;
    crate::typed::at(object.get(*first)?, rest)
}

fn probe(probe: &mut Object) {
    set_zero(probe, "timeoutSeconds", json!(1));
    set_zero(probe, "periodSeconds", json!(10));
    set_zero(probe, "successThreshold", json!(1));
    set_zero(probe, "failureThreshold", json!(3));
}

fn volume_mode(source: &mut Object) {
    set_unset(source, "defaultMode", json!(420));
}

fn secret(secret: &mut Object) {
    set_zero(secret, "type", json!("Opaque"));
}

fn token_projection(projection: &mut Object) {
    set_unset(projection, "expirationSeconds", json!(3600));
}

fn persistent_volume(volume: &mut Object) {
    if let Some(status) = structure(volume, "status") {
        set_zero(status, "phase", json!("Pending"));
    }
    if let Some(spec) = structure(volume, "spec") {
        set_zero(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
        set_unset(spec, "volumeMode", json!("Filesystem"));
    }
}

fn persistent_volume_claim(claim: &mut Object) {
    if let Some(status) = structure(claim, "status") {
        set_zero(status, "phase", json!("Pending"));
    }
}

fn claim_spec(spec: &mut Object) {
    set_unset(spec, "volumeMode", json!("Filesystem"));
}

fn endpoints(endpoints: &mut Object) {
    for subset in items(endpoints, "subsets") {
        for port in items(subset, "ports") {
            set_zero(port, "protocol", json!("TCP"));
        }
    }
}

fn http_get(action: &mut Object) {
    set_zero(action, "path", json!("/"));
    set_zero(action, "scheme", json!("HTTP"));
}

fn namespace(namespace: &mut Object) {
    let name = namespace
        .get("metadata")
        .and_then(|metadata| metadata.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if name.is_empty() {
        return;
    }
    let Some(metadata) = structure(namespace, "metadata") else {
        return;
    };
    if let Some(labels) = structure(metadata, "labels") {
        labels.insert("kubernetes.io/metadata.name".into(), Value::String(name));
    }
}

fn namespace_status(status: &mut Object) {
    set_zero(status, "phase", json!("Active"));
}

fn node_status(status: &mut Object) {
    if unset(status, "allocatable")
        && let Some(capacity) = status.get("capacity").filter(|c| !c.is_null()).cloned()
    {
        status.insert("allocatable".into(), capacity);
    }
}

fn field_selector(selector: &mut Object) {
    set_zero(selector, "apiVersion", json!("v1"));
}

fn limit_range_item(item: &mut Object) {
    if text(item, "type") != "Container" {
        return;
    }
    let list = |item: &Object, key: &str| {
        item.get(key)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let mut default = list(item, "default");
    for (name, value) in list(item, "max") {
        default.entry(name).or_insert(value);
    }
    let mut default_request = list(item, "defaultRequest");
    for (name, value) in default.clone().into_iter().chain(list(item, "min")) {
        default_request.entry(name).or_insert(value);
    }
    for (key, list) in [("default", default), ("defaultRequest", default_request)] {
        if !list.is_empty() {
            item.insert(key.into(), Value::Object(list));
        }
    }
}

fn host_path(source: &mut Object) {
    set_unset(source, "type", json!(""));
}

fn replication_controller(controller: &mut Object) {
    let labels = member(controller, &["spec", "template", "metadata", "labels"])
        .filter(|labels| !labels.is_null())
        .cloned();
    let Some(labels) = labels else {
        return;
    };
    if let Some(spec) = structure(controller, "spec")
        && zero(spec, "selector")
    {
        spec.insert("selector".into(), labels.clone());
    }
    if let Some(metadata) = structure(controller, "metadata")
        && zero(metadata, "labels")
    {
        metadata.insert("labels".into(), labels);
    }
}

// apps/v1

fn deployment(deployment: &mut Object) {
    let Some(spec) = structure(deployment, "spec") else {
        return;
    };
    set_unset(spec, "replicas", json!(1));
    if let Some(strategy) = structure(spec, "strategy") {
        set_zero(strategy, "type", json!("RollingUpdate"));
        if text(strategy, "type") == "RollingUpdate"
            && let Some(rolling) = structure(strategy, "rollingUpdate")
        {
            set_unset(rolling, "maxUnavailable", json!("25%"));
            set_unset(rolling, "maxSurge", json!("25%"));
        }
    }
    set_unset(spec, "revisionHistoryLimit", json!(10));
    set_unset(spec, "progressDeadlineSeconds", json!(600));
}

fn daemon_set(daemon_set: &mut Object) {
    let Some(spec) = structure(daemon_set, "spec") else {
        return;
    };
    if let Some(strategy) = structure(spec, "updateStrategy") {
        set_zero(strategy, "type", json!("RollingUpdate"));
        if text(strategy, "type") == "RollingUpdate"
            && let Some(rolling) = structure(strategy, "rollingUpdate")
        {
            set_unset(rolling, "maxUnavailable", json!(1));
            set_unset(rolling, "maxSurge", json!(0));
        }
    }
    set_unset(spec, "revisionHistoryLimit", json!(10));
}

fn stateful_set(stateful_set: &mut Object) {
    let Some(spec) = structure(stateful_set, "spec") else {
        return;
    };
    set_zero(spec, "podManagementPolicy", json!("OrderedReady"));
    if let Some(strategy) = structure(spec, "updateStrategy") {
        if zero(strategy, "type") {
            strategy.insert("type".into(), json!("RollingUpdate"));
            set_unset(strategy, "rollingUpdate", json!({}));
        }
        if text(strategy, "type") == "RollingUpdate"
            && let Some(rolling) = present(strategy, "rollingUpdate")
        {
            set_unset(rolling, "partition", json!(0));
        }
    }
    if let Some(retention) = structure(spec, "persistentVolumeClaimRetentionPolicy") {
        set_zero(retention, "whenDeleted", json!("Retain"));
        set_zero(retention, "whenScaled", json!("Retain"));
    }
    set_unset(spec, "replicas", json!(1));
    set_unset(spec, "revisionHistoryLimit", json!(10));
}

fn replica_set(replica_set: &mut Object) {
    if let Some(spec) = structure(replica_set, "spec") {
        set_unset(spec, "replicas", json!(1));
    }
}

// batch/v1

fn job(job: &mut Object) {
    let template_labels = member(job, &["spec", "template", "metadata", "labels"])
        .filter(|labels| !labels.is_null())
        .cloned();
    let Some(spec) = structure(job, "spec") else {
        return;
    };
    if unset(spec, "completions") && unset(spec, "parallelism") {
        spec.insert("completions".into(), json!(1));
        spec.insert("parallelism".into(), json!(1));
    }
    set_unset(spec, "parallelism", json!(1));
    if unset(spec, "backoffLimit") {
        let limit = if unset(spec, "backoffLimitPerIndex") {
            6
        } else {
            i32::MAX
        };
        spec.insert("backoffLimit".into(), json!(limit));
    }
    set_unset(spec, "completionMode", json!("NonIndexed"));
    set_unset(spec, "suspend", json!(false));
    if unset(spec, "podReplacementPolicy") {
        let policy = if unset(spec, "podFailurePolicy") {
            "TerminatingOrFailed"
        } else {
            "Failed"
        };
        spec.insert("podReplacementPolicy".into(), json!(policy));
    }
    set_unset(spec, "manualSelector", json!(false));
    if let Some(labels) = template_labels
        && let Some(metadata) = structure(job, "metadata")
        && zero(metadata, "labels")
    {
        metadata.insert("labels".into(), labels);
    }
}

fn cron_job(cron_job: &mut Object) {
    let Some(spec) = structure(cron_job, "spec") else {
        return;
    };
    set_zero(spec, "concurrencyPolicy", json!("Allow"));
    set_unset(spec, "suspend", json!(false));
    set_unset(spec, "successfulJobsHistoryLimit", json!(3));
    set_unset(spec, "failedJobsHistoryLimit", json!(1));
}

fn condition_pattern(pattern: &mut Object) {
    set_zero(pattern, "status", json!("True"));
}

// networking/v1

fn network_policy_port(port: &mut Object) {
    set_unset(port, "protocol", json!("TCP"));
}

fn network_policy(policy: &mut Object) {
    let Some(spec) = structure(policy, "spec") else {
        return;
    };
    if zero(spec, "policyTypes") {
        let mut types = vec![json!("Ingress")];
        if !zero(spec, "egress") {
            types.push(json!("Egress"));
        }
        spec.insert("policyTypes".into(), Value::Array(types));
    }
}

fn ingress_class(class: &mut Object) {
    if let Some(parameters) = class
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .and_then(|spec| present(spec, "parameters"))
    {
        set_unset(parameters, "scope", json!("Cluster"));
    }
}

// rbac/v1

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

fn role_binding(binding: &mut Object) {
    if let Some(role) = structure(binding, "roleRef") {
        set_zero(role, "apiGroup", json!(RBAC_GROUP));
    }
}

fn subject(subject: &mut Object) {
    // A ServiceAccount's group is "", which Go leaves out (`omitempty`).
    if zero(subject, "apiGroup") && matches!(text(subject, "kind"), "User" | "Group") {
        subject.insert("apiGroup".into(), json!(RBAC_GROUP));
    }
}

// autoscaling

fn autoscaler_v1(autoscaler: &mut Object) {
    if let Some(spec) = structure(autoscaler, "spec") {
        set_unset(spec, "minReplicas", json!(1));
    }
}

fn autoscaler_v2(autoscaler: &mut Object) {
    let Some(spec) = structure(autoscaler, "spec") else {
        return;
    };
    set_unset(spec, "minReplicas", json!(1));
    if zero(spec, "metrics") {
        spec.insert(
            "metrics".into(),
            json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 80}}}]),
        );
    }
    if let Some(behavior) = present(spec, "behavior") {
        let up = json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
            {"type": "Pods", "value": 4, "periodSeconds": 15},
            {"type": "Percent", "value": 100, "periodSeconds": 15}]});
        let down = json!({"selectPolicy": "Max", "policies": [
            {"type": "Percent", "value": 100, "periodSeconds": 15}]});
        for (key, defaults) in [("scaleUp", up), ("scaleDown", down)] {
            let mut rules = defaults;
            if let (Some(rules), Some(from)) = (
                rules.as_object_mut(),
                behavior.get(key).and_then(Value::as_object),
            ) {
                for field in [
                    "selectPolicy",
                    "stabilizationWindowSeconds",
                    "policies",
                    "tolerance",
                ] {
                    if let Some(value) = from.get(field).filter(|v| !v.is_null()) {
                        rules.insert(field.into(), value.clone());
                    }
                }
            }
            behavior.insert(key.into(), rules);
        }
    }
}

// storage/v1, scheduling/v1, discovery/v1, resource/v1

fn storage_class(class: &mut Object) {
    set_unset(class, "reclaimPolicy", json!("Delete"));
    set_unset(class, "volumeBindingMode", json!("Immediate"));
}

fn csi_driver(driver: &mut Object) {
    let Some(spec) = structure(driver, "spec") else {
        return;
    };
    set_unset(spec, "attachRequired", json!(true));
    set_unset(spec, "podInfoOnMount", json!(false));
    set_unset(spec, "storageCapacity", json!(false));
    set_unset(spec, "fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
    set_zero(spec, "volumeLifecycleModes", json!(["Persistent"]));
    set_unset(spec, "requiresRepublish", json!(false));
    set_unset(spec, "seLinuxMount", json!(false));
}

fn priority_class(class: &mut Object) {
    set_unset(class, "preemptionPolicy", json!("PreemptLowerPriority"));
}

fn endpoint_port(port: &mut Object) {
    set_unset(port, "name", json!(""));
    set_unset(port, "protocol", json!("TCP"));
}

fn device_request(request: &mut Object) {
    set_zero(request, "allocationMode", json!("ExactCount"));
    if text(request, "allocationMode") == "ExactCount" {
        set_zero(request, "count", json!(1));
    }
}

// flowcontrol/v1

fn flow_schema_spec(spec: &mut Object) {
    set_zero(spec, "matchingPrecedence", json!(1000));
}

fn exempt_priority_level(level: &mut Object) {
    set_unset(level, "nominalConcurrencyShares", json!(0));
    set_unset(level, "lendablePercent", json!(0));
}

fn limited_priority_level(level: &mut Object) {
    set_unset(level, "nominalConcurrencyShares", json!(30));
    set_unset(level, "lendablePercent", json!(0));
}

fn queuing(queuing: &mut Object) {
    set_zero(queuing, "handSize", json!(8));
    set_zero(queuing, "queues", json!(64));
    set_zero(queuing, "queueLengthLimit", json!(50));
}

// admissionregistration/v1 and v1beta1

fn webhook(webhook: &mut Object) {
    set_unset(webhook, "failurePolicy", json!("Fail"));
    set_unset(webhook, "matchPolicy", json!("Equivalent"));
    set_unset(webhook, "namespaceSelector", json!({}));
    set_unset(webhook, "objectSelector", json!({}));
    set_unset(webhook, "timeoutSeconds", json!(10));
}

fn mutating_webhook(hook: &mut Object) {
    webhook(hook);
    set_unset(hook, "reinvocationPolicy", json!("Never"));
}

fn rule(rule: &mut Object) {
    set_unset(rule, "scope", json!("*"));
}

fn service_reference(service: &mut Object) {
    set_unset(service, "port", json!(443));
}

fn policy_spec(spec: &mut Object) {
    set_unset(spec, "failurePolicy", json!("Fail"));
}

fn match_resources(resources: &mut Object) {
    set_unset(resources, "matchPolicy", json!("Equivalent"));
    set_unset(resources, "namespaceSelector", json!({}));
    set_unset(resources, "objectSelector", json!({}));
}
