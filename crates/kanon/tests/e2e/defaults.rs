//! Built-in objects generated at random from a seed (Pods, Deployments, StatefulSets,
//! DaemonSets, Jobs, CronJobs, Services, NetworkPolicies, RoleBindings, Secrets, Namespaces,
//! HorizontalPodAutoscalers; with and without the fields their kinds default), each created by
//! kube-apiserver in a server-side dry run and defaulted by kanon
//! (`kanon_engine::apply_builtin_defaults`, then `kanon_engine::apply_admission_plugins`: what
//! `kanon apply` and `kanon test` do to a manifest before judging it): every field either
//! changed must be the same on both sides, a Pod's service account token, priority and default
//! tolerations included (the token volume's random name read as kanon's offline name).
//!
//! Left out of the comparison, as not defaulting: metadata but labels, status (set by the
//! registry's strategy) but a Namespace's phase, a Namespace's finalizers, a Secret's
//! `stringData` (moved into `data` by the conversion to the internal type), a Service's
//! allocated addresses and node ports, a Job's generated selector and labels, and the empty
//! values Go writes for a struct field the object leaves out (`resources: {}`,
//! `creationTimestamp: null`).
//!
//! The same for every plain object of a built-in kind among the repository's examples and the
//! library's tests (`examples/resources`, `examples/suites/*/resources`, `library/tests`), put
//! in the test's namespace; those the apiserver refuses (a ServiceAccount or PriorityClass it
//! does not have, a value of the wrong type on purpose) are left out, and at least eighty
//! must be compared.
//!
//! `KANON_DEFAULTS_CASES` cases (default 60) from `KANON_DEFAULTS_SEED` (default fixed).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::Scenario;
use crate::env::{Env, text};
use crate::random::{Random, setting};

pub const SCENARIOS: &[Scenario] = &[(
    "defaults::kanon_defaults_built_in_objects_as_kube_apiserver_does",
    kanon_defaults_built_in_objects_as_kube_apiserver_does,
)];

const NAMESPACE: &str = "defaults";
const DEFAULT_SEED: u64 = 20_261_130;
const DEFAULT_CASES: usize = 60;

/// A container; its port is `port` (distinct in a Pod, where host networking makes each a host
/// port).
fn container(random: &mut Random, name: &str, port: u16) -> Value {
    let image = *random.pick(&[
        "nginx",
        "nginx:latest",
        "nginx:1.27",
        "Busybox",
        "registry.example:5000/team/app",
        "ghcr.io/org/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "localhost/app:dev",
    ]);
    let mut c = json!({"name": name, "image": image});
    if random.chance(20) {
        c["imagePullPolicy"] = json!(*random.pick(&["Always", "Never", "IfNotPresent"]));
    }
    if random.chance(40) {
        let mut port = json!({"containerPort": port});
        if random.chance(30) {
            port["protocol"] = json!("UDP");
        }
        c["ports"] = json!([port]);
    }
    if random.chance(50) {
        let mut resources = json!({});
        if random.chance(70) {
            resources["limits"] = json!({"cpu": *random.pick(&["500m", "2"]), "memory": "64Mi"});
        }
        if random.chance(50) {
            resources["requests"] = json!({"cpu": "100m"});
        }
        c["resources"] = resources;
    }
    if random.chance(40) {
        let handler = match random.below(3) {
            0 => json!({"httpGet": {"port": 8080}}),
            1 => json!({"tcpSocket": {"port": 8080}}),
            _ => json!({"exec": {"command": ["true"]}}),
        };
        let mut probe = handler;
        if random.chance(30) {
            probe["periodSeconds"] = json!(5);
        }
        c[*random.pick(&["readinessProbe", "livenessProbe", "startupProbe"])] = probe;
    }
    if random.chance(30) {
        c["env"] =
            json!([{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]);
    }
    if random.chance(15) {
        c["lifecycle"] = json!({"preStop": {"httpGet": {"port": 8080, "path": "/stop"}}});
    }
    c
}

/// A pod spec; `pod` adds what only a Pod (not a template) may have defaulted.
fn pod_spec(random: &mut Random, pod: bool) -> Value {
    let count = 1 + random.below(2);
    let containers: Vec<Value> = (0..count)
        .map(|i| container(random, &format!("c{i}"), 8080 + i as u16))
        .collect();
    // No token volume from the ServiceAccount admission plugin.
    let mut spec = json!({"containers": containers, "automountServiceAccountToken": false});
    if random.chance(30) {
        let mut init = container(random, "init", 9090);
        if random.chance(50) {
            init["restartPolicy"] = json!("Always");
        } else if let Some(init) = init.as_object_mut() {
            // Only a sidecar may have probes or a lifecycle.
            for key in [
                "readinessProbe",
                "livenessProbe",
                "startupProbe",
                "lifecycle",
            ] {
                init.remove(key);
            }
        }
        spec["initContainers"] = json!([init]);
    }
    if random.chance(20) {
        // A workload's template may only say `Always`.
        spec["restartPolicy"] = json!(if pod { "OnFailure" } else { "Always" });
    }
    if random.chance(20) {
        spec["dnsPolicy"] = json!("Default");
    }
    if random.chance(20) {
        spec["terminationGracePeriodSeconds"] = json!(5);
    }
    if pod && random.chance(20) {
        spec["hostNetwork"] = json!(true);
    }
    if pod && random.chance(20) {
        spec["resources"] = json!({"limits": {"cpu": "4", "memory": "1Gi"}});
    }
    if random.chance(50) {
        let volume = match random.below(6) {
            0 => json!({"name": "v"}),
            1 => json!({"name": "v", "secret": {"secretName": "s"}}),
            2 => json!({"name": "v", "configMap": {"name": "c"}}),
            3 => json!({"name": "v", "hostPath": {"path": "/tmp/x"}}),
            4 => json!({"name": "v", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token"}}]}}),
            _ => json!({"name": "v", "downwardAPI": {"items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}),
        };
        spec["volumes"] = json!([volume]);
    }
    spec
}

fn template(random: &mut Random, labels: &Value) -> Value {
    json!({"metadata": {"labels": labels}, "spec": pod_spec(random, false)})
}

/// One object to create.
fn object(random: &mut Random, index: usize) -> Value {
    let name = format!("d{index}");
    let metadata = json!({"name": name, "namespace": NAMESPACE});
    let labels = json!({"app": name});
    let selector = json!({"matchLabels": labels});
    match random.below(12) {
        0 | 1 => json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": pod_spec(random, true)}),
        2 => {
            let mut spec = json!({"selector": selector, "template": template(random, &labels)});
            if random.chance(30) {
                spec["replicas"] = json!(3);
            }
            match random.below(4) {
                0 => spec["strategy"] = json!({"type": "Recreate"}),
                1 => spec["strategy"] = json!({"rollingUpdate": {"maxSurge": 1}}),
                _ => {}
            }
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata, "spec": spec})
        }
        3 => {
            let mut spec = json!({"selector": selector, "serviceName": name,
                "template": template(random, &labels)});
            match random.below(3) {
                0 => spec["updateStrategy"] = json!({"type": "OnDelete"}),
                1 => spec["podManagementPolicy"] = json!("Parallel"),
                _ => {}
            }
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": metadata, "spec": spec})
        }
        4 => {
            let mut spec = json!({"selector": selector, "template": template(random, &labels)});
            if random.chance(30) {
                spec["updateStrategy"] = json!({"type": "OnDelete"});
            }
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": metadata, "spec": spec})
        }
        5 => {
            let mut pod = template(random, &labels);
            pod["spec"]["restartPolicy"] = json!("Never");
            let mut spec = json!({"template": pod});
            if random.chance(30) {
                spec["parallelism"] = json!(2);
            }
            if random.chance(20) {
                spec["completions"] = json!(3);
            }
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec})
        }
        6 => {
            let mut pod = template(random, &labels);
            pod["spec"]["restartPolicy"] = json!("OnFailure");
            let mut spec =
                json!({"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": pod}}});
            if random.chance(30) {
                spec["concurrencyPolicy"] = json!("Forbid");
            }
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": metadata, "spec": spec})
        }
        7 => {
            let mut port = json!({"port": 80});
            if random.chance(40) {
                port["targetPort"] = json!(*random.pick(&[json!(8080), json!("http")]));
            }
            if random.chance(20) {
                port["protocol"] = json!("UDP");
            }
            let mut spec = json!({"selector": labels, "ports": [port]});
            match random.below(4) {
                0 => spec["type"] = json!("NodePort"),
                1 => spec["type"] = json!("LoadBalancer"),
                2 => spec["sessionAffinity"] = json!("ClientIP"),
                _ => {}
            }
            json!({"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec})
        }
        8 => {
            let mut spec = json!({"podSelector": {},
                "ingress": [{"ports": [{"port": 80}]}]});
            if random.chance(50) {
                spec["egress"] = json!([{"ports": [{"port": 53, "protocol": "UDP"}]}]);
            }
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": metadata, "spec": spec})
        }
        9 => json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": metadata, "roleRef": {"kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "name": "ann"}, {"kind": "Group", "name": "devs"},
                {"kind": "ServiceAccount", "name": "default", "namespace": NAMESPACE}]}),
        10 => {
            let mut secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": metadata,
                "stringData": {"k": "v"}});
            if random.chance(30) {
                secret["type"] = json!("kubernetes.io/tls");
                secret["stringData"] = json!({"tls.crt": "", "tls.key": ""});
            }
            secret
        }
        _ => {
            let mut spec = json!({"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                "name": "web"}, "maxReplicas": 5});
            if random.chance(50) {
                spec["behavior"] = json!({"scaleDown": {"stabilizationWindowSeconds": 60}});
            }
            json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": metadata, "spec": spec})
        }
    }
}

/// The object's leaves by JSON pointer (an empty object or list is a leaf).
fn leaves(value: &Value, at: &str, out: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                let key = key.replace('~', "~0").replace('/', "~1");
                leaves(child, &format!("{at}/{key}"), out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (index, child) in items.iter().enumerate() {
                leaves(child, &format!("{at}/{index}"), out);
            }
        }
        other => {
            out.insert(at.to_owned(), other.clone());
        }
    }
}

/// The plain objects of built-in kinds among the repository's examples and the library's
/// tests, in the test's namespace (each named after its place, so none collides).
fn corpus() -> Vec<Value> {
    let root = crate::env::repo();
    let mut dirs = vec![root.join("examples/resources"), root.join("library/tests")];
    if let Ok(suites) = std::fs::read_dir(root.join("examples/suites")) {
        let mut suites: Vec<_> = suites.filter_map(Result::ok).map(|e| e.path()).collect();
        suites.sort();
        dirs.extend(
            suites
                .into_iter()
                .map(|s| s.join("resources"))
                .filter(|d| d.is_dir()),
        );
    }
    let mut out = Vec::new();
    for dir in dirs {
        for mut object in crate::env::documents(&dir) {
            let kind = object["kind"].as_str().unwrap_or_default().to_owned();
            let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
            let plain = !kind.is_empty()
                && kind != "AdmissionReview"
                && !kind.ends_with("List")
                && !api_version.starts_with("policy.kanon.dev")
                && kanon_engine::apply_builtin_defaults(&mut object.clone());
            if !plain || kind == "Namespace" {
                continue;
            }
            if object.pointer("/metadata/namespace").is_some() {
                object["metadata"]["namespace"] = json!(NAMESPACE);
            }
            let name = object["metadata"]["name"].as_str().unwrap_or("unnamed");
            object["metadata"]["name"] = json!(format!("corpus-{}-{name}", out.len()));
            object["metadata"]
                .as_object_mut()
                .map(|m| m.remove("generateName"));
            out.push(object);
        }
    }
    out
}

/// `object` with the service account token volume the apiserver named at random
/// (`kube-api-access-` and five characters) named as kanon names it offline.
fn offline_token_volume(object: Value) -> Value {
    let text = object.to_string();
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find("kube-api-access-") {
        let (before, from) = rest.split_at(at);
        out.push_str(before);
        let generated = &from["kube-api-access-".len()..];
        if generated.len() >= 5 && generated.as_bytes()[5..].first() == Some(&b'"') {
            out.push_str(kanon_engine::TOKEN_VOLUME);
            rest = &generated[5..];
        } else {
            out.push_str("kube-api-access-");
            rest = generated;
        }
    }
    out.push_str(rest);
    serde_json::from_str(&out).expect("still JSON")
}

/// Whether a difference at `path` is not the kind's defaulting (see the module's doc).
fn not_defaulting(kind: &str, path: &str, server: Option<&Value>, kanon: Option<&Value>) -> bool {
    let under = |prefix: &str| path == prefix || path.starts_with(&format!("{prefix}/"));
    if under("/metadata") && !under("/metadata/labels") {
        return true;
    }
    if under("/status") && !(kind == "Namespace" && path == "/status/phase") {
        return true;
    }
    let go_zero = kanon.is_none()
        && server.is_some_and(|v| v.is_null() || v == &json!({}))
        && [
            "/resources",
            "/creationTimestamp",
            "/metadata",
            "/status",
            "/spec",
        ]
        .iter()
        .any(|end| path.ends_with(end));
    if go_zero {
        return true;
    }
    match kind {
        "Namespace" => under("/spec/finalizers"),
        // The deprecated alias the registry copies serviceAccountName into.
        "Pod" => under("/spec/serviceAccount"),
        "Service" => {
            under("/spec/clusterIP")
                || under("/spec/clusterIPs")
                || under("/spec/ipFamilies")
                || under("/spec/ipFamilyPolicy")
                || under("/spec/healthCheckNodePort")
                || (path.starts_with("/spec/ports/") && path.ends_with("/nodePort"))
        }
        // The registry labels the template after admission, and the Job's labels defaulted
        // from the template's are the same Go map, so the stored Job has them too.
        "Job" => {
            under("/spec/selector")
                || ((path.starts_with("/spec/template/metadata/labels/")
                    || path.starts_with("/metadata/labels/"))
                    && !path.ends_with("/app"))
        }
        // Converting to the internal type moves `stringData` into `data`: not defaulting.
        "Secret" => under("/stringData") || under("/data"),
        _ => false,
    }
}

fn kanon_defaults_built_in_objects_as_kube_apiserver_does(env: &mut Env) {
    let seed = setting("KANON_DEFAULTS_SEED", DEFAULT_SEED);
    let count = setting("KANON_DEFAULTS_CASES", DEFAULT_CASES);
    let mut random = Random(seed);
    env.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}));
    let mut objects: Vec<Value> = (0..count).map(|i| object(&mut random, i)).collect();
    objects.push(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "defaults-probe"}}));
    let corpus = corpus();
    let generated = objects.len();
    objects.extend(corpus);

    let mut differences = String::new();
    let mut defaulted_fields = 0;
    let mut compared = 0;
    for (index, input) in objects.iter().enumerate() {
        let out = env.kubectl_stdin(
            &["create", "--dry-run=server", "-o", "json", "-f", "-"],
            &input.to_string(),
        );
        if index >= generated && !out.status.success() {
            // A repository object this cluster refuses (what it names is not here): not
            // compared.
            continue;
        }
        assert!(out.status.success(), "{input}: {}", text(&out));
        if index >= generated {
            compared += 1;
        }
        let server: Value = serde_json::from_slice(&out.stdout).expect("an object");
        let server = offline_token_volume(server);
        let mut kanon = input.clone();
        assert!(
            kanon_engine::apply_builtin_defaults(&mut kanon),
            "kanon does not know the kind of {input}"
        );
        kanon_engine::apply_admission_plugins(
            kanon_api::Operation::Create,
            &mut kanon,
            None,
            &kanon_engine::ObjectStore::new(),
        );
        let kind = input["kind"].as_str().unwrap_or_default();
        let (mut before, mut theirs, mut ours) =
            (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        leaves(input, "", &mut before);
        leaves(&server, "", &mut theirs);
        leaves(&kanon, "", &mut ours);
        let changed = theirs
            .iter()
            .chain(&ours)
            .filter(|(path, value)| before.get(*path) != Some(value))
            .map(|(path, _)| path.clone())
            .chain(before.keys().cloned())
            .collect::<std::collections::BTreeSet<_>>();
        for path in changed {
            let (server_value, kanon_value) = (theirs.get(&path), ours.get(&path));
            if server_value == kanon_value || not_defaulting(kind, &path, server_value, kanon_value)
            {
                if server_value == kanon_value && before.get(&path) != server_value {
                    defaulted_fields += 1;
                }
                continue;
            }
            let _ = writeln!(
                differences,
                "{kind} {}: {path}: kube-apiserver {}, kanon {}\n  input: {input}",
                input["metadata"]["name"].as_str().unwrap_or_default(),
                server_value.map_or("(none)".into(), Value::to_string),
                kanon_value.map_or("(none)".into(), Value::to_string),
            );
        }
    }
    assert!(
        differences.is_empty(),
        "kanon's defaulting differs from kube-apiserver's (seed {seed}):\n{differences}"
    );
    assert!(
        compared >= 80,
        "only {compared} of the repository's objects were compared"
    );
    // The objects are not vacuous: many fields were defaulted, and the same on both sides.
    assert!(
        defaulted_fields >= count * 3,
        "only {defaulted_fields} defaulted fields"
    );
}
