//! The expected objects are kube-apiserver 1.35.8's defaulting of the same input (dry-run
//! creates; fields set by admission plugins and the registry left out). The e2e suite
//! `defaults::` compares generated objects with a running apiserver.

use serde_json::{Value, json};

use super::kinds;
use crate::typed::Typed;

fn defaulted(mut object: Value) -> Value {
    let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
    let kind = object["kind"].as_str().unwrap_or_default().to_owned();
    let typed = Typed::builtin(&api_version, &kind).expect("a built-in kind");
    typed.default_object(&mut object, false);
    // Defaulting twice changes nothing more.
    let mut again = object.clone();
    typed.default_object(&mut again, false);
    assert_eq!(again, object, "defaulting is not idempotent");
    object
}

#[test]
fn every_type_with_a_defaulting_function_is_in_the_schema() {
    let schema = kanon_schema::Schema::builtin().expect("the embedded schema");
    for name in kinds::NAMED {
        assert!(kinds::defaulter(name).is_some(), "{name} has no defaulter");
        assert!(
            schema.named_type(name).is_some(),
            "{name} is not in the schema"
        );
    }
}

#[test]
fn a_pod_is_defaulted_as_the_apiserver_defaults_it() {
    let pod = defaulted(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {
            "containers": [{
                "name": "app", "image": "nginx",
                "ports": [{"containerPort": 80}],
                "resources": {"limits": {"cpu": "0.0001", "memory": "64Mi"}, "requests": {"memory": "32Mi"}},
                "livenessProbe": {"httpGet": {"port": 80}},
                "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            }],
            "initContainers": [{"name": "init", "image": "busybox:1.36"}],
            "volumes": [
                {"name": "scratch"},
                {"name": "s", "secret": {"secretName": "x"}},
                {"name": "h", "hostPath": {"path": "/x"}},
                {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
            ],
        },
    }));
    assert_eq!(
        pod["spec"],
        json!({
            "containers": [{
                "name": "app", "image": "nginx",
                "imagePullPolicy": "Always",
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {"limits": {"cpu": "1m", "memory": "64Mi"}, "requests": {"cpu": "1m", "memory": "32Mi"}},
                "livenessProbe": {
                    "httpGet": {"port": 80, "path": "/", "scheme": "HTTP"},
                    "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3,
                },
                "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name", "apiVersion": "v1"}}}],
            }],
            "initContainers": [{
                "name": "init", "image": "busybox:1.36",
                "imagePullPolicy": "IfNotPresent",
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
            }],
            "volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "s", "secret": {"secretName": "x", "defaultMode": 420}},
                {"name": "h", "hostPath": {"path": "/x", "type": ""}},
                {"name": "t", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}},
            ],
            "dnsPolicy": "ClusterFirst",
            "restartPolicy": "Always",
            "securityContext": {},
            "terminationGracePeriodSeconds": 30,
            "schedulerName": "default-scheduler",
            "enableServiceLinks": true,
        })
    );
}

#[test]
fn a_host_network_pod_gets_host_ports_and_pod_level_requests() {
    let pod = defaulted(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {
            "hostNetwork": true,
            "resources": {"limits": {"cpu": "2", "memory": "1Gi"}},
            "containers": [
                {"name": "a", "image": "a:1", "ports": [{"containerPort": 8080}],
                 "resources": {"requests": {"cpu": "500m"}}},
                {"name": "b", "image": "b:1", "resources": {"requests": {"cpu": "250m"}}},
            ],
            "initContainers": [
                {"name": "side", "image": "s:1", "restartPolicy": "Always",
                 "resources": {"requests": {"cpu": "100m"}}},
                {"name": "init", "image": "i:1", "resources": {"requests": {"cpu": "2"}}},
            ],
        },
    }));
    assert_eq!(
        pod["spec"]["containers"][0]["ports"][0],
        json!({"containerPort": 8080, "hostPort": 8080, "protocol": "TCP"})
    );
    // Containers and the sidecar: 850m; the init container with the sidecar: 2100m, larger.
    assert_eq!(
        pod["spec"]["resources"],
        json!({"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "2100m", "memory": "1Gi"}})
    );
}

#[test]
fn workloads_are_defaulted_with_their_pod_templates() {
    let template = json!({"metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}});
    let deployment = defaulted(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template},
    }));
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], json!(1));
    assert_eq!(
        spec["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
    );
    assert_eq!(spec["revisionHistoryLimit"], json!(10));
    assert_eq!(spec["progressDeadlineSeconds"], json!(600));
    let pod_spec = &spec["template"]["spec"];
    assert_eq!(pod_spec["restartPolicy"], json!("Always"));
    assert_eq!(
        pod_spec["containers"][0]["imagePullPolicy"],
        json!("IfNotPresent")
    );
    // Only a Pod gets `enableServiceLinks`; a template does not.
    assert_eq!(pod_spec.get("enableServiceLinks"), None);

    let recreate = defaulted(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"strategy": {"type": "Recreate"}, "template": template},
    }));
    assert_eq!(recreate["spec"]["strategy"], json!({"type": "Recreate"}));

    let job = defaulted(json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
        "spec": {"template": template},
    }));
    assert_eq!(job["metadata"]["labels"], json!({"app": "web"}));
    for (field, value) in [
        ("completions", json!(1)),
        ("parallelism", json!(1)),
        ("backoffLimit", json!(6)),
        ("completionMode", json!("NonIndexed")),
        ("suspend", json!(false)),
        ("podReplacementPolicy", json!("TerminatingOrFailed")),
        ("manualSelector", json!(false)),
    ] {
        assert_eq!(job["spec"][field], value, "{field}");
    }

    let stateful = defaulted(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s"},
        "spec": {"serviceName": "s", "template": template},
    }));
    assert_eq!(
        stateful["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    );
    assert_eq!(
        stateful["spec"]["persistentVolumeClaimRetentionPolicy"],
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
    );
}

#[test]
fn services_namespaces_and_bindings_are_defaulted() {
    let service = defaulted(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}, {"port": 53, "protocol": "UDP", "targetPort": "dns"}]},
    }));
    assert_eq!(
        service["spec"],
        json!({
            "type": "LoadBalancer", "sessionAffinity": "None",
            "externalTrafficPolicy": "Cluster", "internalTrafficPolicy": "Cluster",
            "allocateLoadBalancerNodePorts": true,
            "ports": [
                {"port": 80, "protocol": "TCP", "targetPort": 80},
                {"port": 53, "protocol": "UDP", "targetPort": "dns"},
            ],
        })
    );
    let namespace =
        defaulted(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}));
    assert_eq!(
        namespace["metadata"]["labels"],
        json!({"kubernetes.io/metadata.name": "shop"})
    );
    assert_eq!(namespace["status"], json!({"phase": "Active"}));

    let binding = defaulted(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "b"},
        "roleRef": {"kind": "Role", "name": "r"},
        "subjects": [{"kind": "User", "name": "ann"}, {"kind": "ServiceAccount", "name": "sa"}],
    }));
    assert_eq!(
        binding["roleRef"]["apiGroup"],
        json!("rbac.authorization.k8s.io")
    );
    assert_eq!(
        binding["subjects"][0]["apiGroup"],
        json!("rbac.authorization.k8s.io")
    );
    assert_eq!(binding["subjects"][1].get("apiGroup"), None);
}

#[test]
fn what_is_set_stays_and_wrong_shapes_are_left_alone() {
    let pod = defaulted(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"restartPolicy": "Never", "dnsPolicy": "Default", "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "a", "image": "a", "imagePullPolicy": "Never"}, "not an object"]},
    }));
    assert_eq!(pod["spec"]["restartPolicy"], json!("Never"));
    assert_eq!(pod["spec"]["dnsPolicy"], json!("Default"));
    // A pointer set to 0 is set.
    assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], json!(0));
    assert_eq!(
        pod["spec"]["containers"][0]["imagePullPolicy"],
        json!("Never")
    );
    assert_eq!(pod["spec"]["containers"][1], json!("not an object"));
}

#[test]
fn a_template_seen_as_a_pod_gets_only_what_a_template_gets() {
    let typed = Typed::builtin("v1", "Pod").expect("Pod is built in");
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {},
        "spec": {"containers": [{"name": "a", "image": "a:1", "resources": {"limits": {"cpu": "1"}}}]}});
    typed.default_object(&mut pod, true);
    assert_eq!(pod["spec"].get("enableServiceLinks"), None);
    assert_eq!(
        pod["spec"]["containers"][0]["resources"],
        json!({"limits": {"cpu": "1"}})
    );
    assert_eq!(pod["spec"]["restartPolicy"], json!("Always"));
}

#[test]
fn resource_quantities_are_written_canonical_as_the_apiserver_writes_them_back() {
    let pod = defaulted(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "nginx:1",
            "resources": {"limits": {"memory": "0.5Gi", "cpu": 2}, "requests": {"cpu": "0.1"}}}]},
    }));
    let resources = &pod["spec"]["containers"][0]["resources"];
    assert_eq!(resources["limits"], json!({"memory": "512Mi", "cpu": "2"}));
    assert_eq!(resources["requests"]["cpu"], "100m");
}

#[test]
fn only_the_kinds_said_to_read_metadata_are_defaulted_anew_after_a_label_change() {
    // CEL mutations skip defaulting after a change to labels or annotations alone of an object
    // defaulting left as it was, except for the kinds whose defaulting reads them: every
    // built-in kind is checked, with a template whose labels a defaulter could copy.
    let schema = kanon_schema::Schema::builtin().expect("the embedded schema");
    let variants: [fn(&mut serde_json::Map<String, Value>); 5] = [
        |metadata| {
            metadata.remove("labels");
        },
        |metadata| {
            metadata.insert("labels".into(), json!({}));
        },
        |metadata| {
            metadata.insert("labels".into(), json!({"other": "b"}));
        },
        |metadata| {
            metadata.insert("annotations".into(), json!({"note": "x"}));
        },
        |metadata| {
            metadata.remove("annotations");
        },
    ];
    let mut checked = 0;
    for kind in schema.kinds() {
        let Some(typed) = Typed::builtin(&kind.api_version, &kind.kind) else {
            continue;
        };
        let mut object = json!({
            "apiVersion": kind.api_version, "kind": kind.kind,
            "metadata": {"name": "n", "labels": {"app": "a"}, "annotations": {"a": "b"}},
            "spec": {"template": {"metadata": {"labels": {"app": "a"}}}},
        });
        typed.default_object(&mut object, false);
        let changed_by_defaulting = variants
            .iter()
            .filter(|variant| {
                let mut changed = object.clone();
                if let Some(metadata) = changed["metadata"].as_object_mut() {
                    variant(metadata);
                }
                let mut again = changed.clone();
                typed.default_object(&mut again, false);
                again != changed
            })
            .count();
        assert_eq!(
            changed_by_defaulting > 0,
            typed.defaulting_reads_metadata(),
            "{} {}: {changed_by_defaulting} of the label and annotation changes are defaulted anew",
            kind.api_version,
            kind.kind
        );
        checked += 1;
    }
    assert!(checked > 50, "only {checked} kinds checked");
}
