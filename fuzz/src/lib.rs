//! Fixed setup shared by kanon's fuzz targets: the example policies (every kind, templates of
//! every type, conditions, programs, plaintext, references), a few hand-written programs that
//! call every helper, the examples' context objects as a lookup, and objects the policies
//! select.
//!
//! Everything here is fixed data compiled into the targets, so `expect` on it is a broken
//! example, never a finding.

use std::collections::HashSet;
use std::sync::Arc;

use kanon_engine::{
    CompiledPolicy, ObjectStore, PolicySet, compile_document_reporting, parse_documents,
};
use serde_json::{Value, json};

/// The example policy files, by path (relative to the repository root).
pub const POLICY_FILES: &[(&str, &str)] = &[
    (
        "examples/policies/cop-annotated-by-field.yaml",
        include_str!("../../examples/policies/cop-annotated-by-field.yaml"),
    ),
    (
        "examples/policies/cop-legacy-cleanup.yaml",
        include_str!("../../examples/policies/cop-legacy-cleanup.yaml"),
    ),
    (
        "examples/policies/cop-prod-deployments.yaml",
        include_str!("../../examples/policies/cop-prod-deployments.yaml"),
    ),
    (
        "examples/policies/cop-web-labels.yaml",
        include_str!("../../examples/policies/cop-web-labels.yaml"),
    ),
    (
        "examples/policies/op-shop-env.yaml",
        include_str!("../../examples/policies/op-shop-env.yaml"),
    ),
    (
        "examples/suites/conditions/policies/equality.yaml",
        include_str!("../../examples/suites/conditions/policies/equality.yaml"),
    ),
    (
        "examples/suites/conditions/policies/images.yaml",
        include_str!("../../examples/suites/conditions/policies/images.yaml"),
    ),
    (
        "examples/suites/conditions/policies/lists.yaml",
        include_str!("../../examples/suites/conditions/policies/lists.yaml"),
    ),
    (
        "examples/suites/conditions/policies/ordering.yaml",
        include_str!("../../examples/suites/conditions/policies/ordering.yaml"),
    ),
    (
        "examples/suites/conditions/policies/presence.yaml",
        include_str!("../../examples/suites/conditions/policies/presence.yaml"),
    ),
    (
        "examples/suites/conditions/policies/value-process.yaml",
        include_str!("../../examples/suites/conditions/policies/value-process.yaml"),
    ),
    (
        "examples/suites/programs/policies/cpu-requests.yaml",
        include_str!("../../examples/suites/programs/policies/cpu-requests.yaml"),
    ),
    (
        "examples/suites/programs/policies/failures.yaml",
        include_str!("../../examples/suites/programs/policies/failures.yaml"),
    ),
    (
        "examples/suites/programs/policies/namespace-env.yaml",
        include_str!("../../examples/suites/programs/policies/namespace-env.yaml"),
    ),
    (
        "examples/suites/programs/policies/registry-mirror.yaml",
        include_str!("../../examples/suites/programs/policies/registry-mirror.yaml"),
    ),
    (
        "examples/suites/programs/policies/request-context.yaml",
        include_str!("../../examples/suites/programs/policies/request-context.yaml"),
    ),
    (
        "examples/suites/programs/policies/secrets.yaml",
        include_str!("../../examples/suites/programs/policies/secrets.yaml"),
    ),
    (
        "examples/suites/references/policies/k8s.yaml",
        include_str!("../../examples/suites/references/policies/k8s.yaml"),
    ),
    (
        "examples/suites/references/policies/old.yaml",
        include_str!("../../examples/suites/references/policies/old.yaml"),
    ),
    (
        "examples/suites/references/policies/owner.yaml",
        include_str!("../../examples/suites/references/policies/owner.yaml"),
    ),
    (
        "examples/suites/templates/policies/affinity.yaml",
        include_str!("../../examples/suites/templates/policies/affinity.yaml"),
    ),
    (
        "examples/suites/templates/policies/annotations.yaml",
        include_str!("../../examples/suites/templates/policies/annotations.yaml"),
    ),
    (
        "examples/suites/templates/policies/labels.yaml",
        include_str!("../../examples/suites/templates/policies/labels.yaml"),
    ),
    (
        "examples/suites/templates/policies/node-selector.yaml",
        include_str!("../../examples/suites/templates/policies/node-selector.yaml"),
    ),
    (
        "examples/suites/templates/policies/oversell.yaml",
        include_str!("../../examples/suites/templates/policies/oversell.yaml"),
    ),
    (
        "examples/suites/templates/policies/resources.yaml",
        include_str!("../../examples/suites/templates/policies/resources.yaml"),
    ),
    (
        "examples/suites/templates/policies/tolerations.yaml",
        include_str!("../../examples/suites/templates/policies/tolerations.yaml"),
    ),
];

/// Context objects (Namespaces, ConfigMaps, ReplicaSets) the reference policies read.
const CONTEXT_FILES: &[(&str, &str)] = &[
    (
        "examples/context/namespaces.yaml",
        include_str!("../../examples/context/namespaces.yaml"),
    ),
    (
        "examples/suites/programs/context/namespaces.yaml",
        include_str!("../../examples/suites/programs/context/namespaces.yaml"),
    ),
    (
        "examples/suites/references/context/configmaps.yaml",
        include_str!("../../examples/suites/references/context/configmaps.yaml"),
    ),
    (
        "examples/suites/references/context/replicasets.yaml",
        include_str!("../../examples/suites/references/context/replicasets.yaml"),
    ),
];

/// Hand-written programs, one helper family each, so that one failing call (the usual fate
/// of a helper given fuzzed data) leaves the others running.
const HANDWRITTEN_OVERRIDE_PROGRAMS: &[&str] = &[
    // Pod spec location, quantities, exact scaling, container loops.
    r#"{%- set ns = namespace(ops=[]) -%}
{%- set at = pod_spec_pointer(object) -%}
{%- if at is defined -%}
{%- set spec = pointer(object, at) -%}
{%- for c in spec.containers | default([]) -%}
{%- set limits = c.resources.limits | default({}) if c.resources is defined else {} -%}
{%- if limits.cpu is defined -%}
{%- set half = scale_quantity(limits.cpu, "0.5") -%}
{%- set capped = "1" if compare_quantities(half, "1") > 0 else half -%}
{%- set ns.ops = ns.ops + [{"op": "add", "path": at ~ "/containers/" ~ loop.index0 ~ "/resources/requests", "value": with_keys(c.resources.requests | default({}), {"cpu": capped})}] -%}
{%- endif -%}
{%- endfor -%}
{%- endif -%}
{{ {"patches": ns.ops} | tojson }}"#,
    // Labels and annotations: keys as pointer tokens, base64, without_keys.
    r#"{%- set labels = object.metadata.labels | default({}) -%}
{%- for k, v in labels | items -%}
- op: add
  path: /metadata/annotations/{{ ("copy-" ~ k) | escape_pointer }}
  value: {{ (v ~ "") | b64encode | tojson }}
{% endfor -%}
{%- if labels | length > 0 -%}
- op: replace
  path: /metadata/labels
  value: {{ without_keys(labels, "drop", ["gone"]) | tojson }}
{%- endif -%}"#,
    // Pod spec edits as the templates use them.
    r#"{%- set at = pod_spec_pointer(object) -%}
{%- if at is defined -%}
{%- set spec = pointer(object, at) -%}
{%- set c = spec.containers[0] | default({}) -%}
- op: add
  path: {{ at }}/tolerations
  value: {{ tolerations_with(spec.tolerations | default([]), [{"key": "fuzz", "operator": "Exists", "effect": "NoSchedule"}], "add") | tojson }}
- op: add
  path: {{ at }}/affinity
  value: {{ affinity_with(spec.affinity | default({}), {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}, "replace") | tojson }}
- op: replace
  path: {{ at }}/containers/0/resources
  value: {{ oversold(resources_with(c.resources | default({}), {"limits": {"cpu": "2", "memory": "1Gi"}}, "add"), {"cpu": "0.25", "memory": 0.5}, "add") | tojson }}
{%- endif -%}"#,
    // JSONPath over the object, and references to the request.
    r#"{%- set images = jsonpath(object, "$.spec..containers[*].image") -%}
{%- set names = jsonpath(object, "$.metadata.name") -%}
{%- if images | length > 0 and request.operation is defined -%}
[{"op": "add", "path": "/metadata/annotations", "value": {{ {"images": images | join(","), "names": names | length ~ "", "op": request.operation ~ ""} | tojson }}}]
{%- endif -%}"#,
];

const HANDWRITTEN_VALIDATE_PROGRAMS: &[&str] = &[
    // Quantity arithmetic and a warning.
    r#"{%- set ns = namespace(total=0) -%}
{%- for cpu in jsonpath(object, "$..resources.limits.cpu") -%}
{%- set ns.total = ns.total + quantity(cpu) -%}
{%- endfor -%}
valid: {{ (ns.total <= 4) | tojson }}
reason: {{ ("limits add up to " ~ ns.total) | tojson }}
warnings: {{ (["over 2"] if ns.total > 2 else []) | tojson }}"#,
    // Condition helpers over whatever the object holds.
    r#"{%- set labels = object.metadata.labels | default({}) -%}
{%- set values = labels | list -%}
{"valid": {{ (contains_all(values, values) and contains_none(values, ["never-a-label"]) and equal(labels | length, values | length)) | tojson }},
 "reason": {{ (process_value(object.spec.replicas | default(1), "*", "2") ~ " " ~ compare(labels | length, 1)) | tojson }}}"#,
    // Regexes, base64 and failure.
    r#"{%- set name = object.metadata.name | default("") -%}
{%- if regex_match(name, "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$") -%}
{"valid": true}
{%- elif name | b64encode | b64decode == name -%}
{"valid": false, "reason": {{ ("bad name " ~ name) | tojson }}, "warnings": [{{ (old_object is defined) | tojson }}]}
{%- else -%}
{{ fail("unreachable") }}
{%- endif -%}"#,
];

/// Parses a YAML text of fixed data into its documents.
fn documents(path: &str, text: &str) -> Vec<Value> {
    parse_documents(text, path, false).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The hand-written program policies: cluster and namespaced, `Fail` and `Ignore`.
fn handwritten_policies() -> Vec<Value> {
    let api = kanon_api::API_VERSION;
    let mut docs = Vec::new();
    for (i, program) in HANDWRITTEN_OVERRIDE_PROGRAMS.iter().enumerate() {
        docs.push(json!({
            "apiVersion": api, "kind": "ClusterOverridePolicy",
            "metadata": {"name": format!("fuzz-override-{i}")},
            "spec": {
                "failurePolicy": if i % 2 == 0 { "Ignore" } else { "Fail" },
                "overrideRules": [{"overriders": {"program": program}}],
            },
        }));
    }
    for (i, program) in HANDWRITTEN_VALIDATE_PROGRAMS.iter().enumerate() {
        docs.push(json!({
            "apiVersion": api, "kind": "ClusterValidatePolicy",
            "metadata": {"name": format!("fuzz-validate-{i}")},
            "spec": {
                "failurePolicy": if i % 2 == 0 { "Fail" } else { "Ignore" },
                "validationActions": if i % 2 == 0 { json!(["Deny", "Audit"]) } else { json!(["Warn"]) },
                "validateRules": [{"program": program}],
            },
        }));
    }
    docs.push(json!({
        "apiVersion": api, "kind": "OverridePolicy",
        "metadata": {"name": "fuzz-plaintext", "namespace": "default"},
        "spec": {"overrideRules": [{"overriders": {
            "plaintext": [
                {"op": "add", "path": "/metadata/labels", "value": {"fuzz": "yes"}},
                {"op": "replace", "path": "/metadata/labels/fuzz", "value": "still"},
                {"op": "remove", "path": "/metadata/labels/fuzz"},
            ],
        }}]},
    }));
    docs.push(json!({
        "apiVersion": api, "kind": "ValidatePolicy",
        "metadata": {"name": "fuzz-condition", "namespace": "default"},
        "spec": {"validateRules": [{"template": {"type": "condition", "condition": {
            "cond": "Gte",
            "dataRef": {"from": "current", "path": "$.spec.containers[0].resources.limits.memory"},
            "value": {"string": "16Gi"},
        }}}]},
    }));
    docs
}

/// Every example policy document and the hand-written ones.
pub fn policy_documents() -> Vec<Value> {
    let mut docs: Vec<Value> = POLICY_FILES
        .iter()
        .flat_map(|(path, text)| documents(path, text))
        .collect();
    docs.extend(handwritten_policies());
    docs
}

/// Compiles documents into a policy set; policies with errors are kept with their defect
/// (as a cluster keeps them), later duplicates are dropped.
pub fn compile_set(documents: &[Value]) -> PolicySet {
    let mut seen = HashSet::new();
    let mut policies: Vec<Arc<CompiledPolicy>> = Vec::new();
    for document in documents {
        let Ok(compiled) = compile_document_reporting(document) else {
            continue;
        };
        if seen.insert(compiled.policy.id.to_string()) {
            policies.push(Arc::new(compiled.policy));
        }
    }
    PolicySet::build_shared(policies).expect("duplicates were dropped")
}

/// The example and hand-written policies as they are: each selects what its author meant.
pub fn example_policy_set() -> PolicySet {
    compile_set(&policy_documents())
}

/// The same policies with their resource selectors removed, so that every policy applies to
/// every object of any type (namespaced ones: of their own namespace).
pub fn unselective_policy_set() -> PolicySet {
    let mut docs = policy_documents();
    for doc in &mut docs {
        if let Some(spec) = doc.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("resourceSelectors");
            spec.remove("namespaceSelector");
        }
    }
    compile_set(&docs)
}

/// The examples' context objects (Namespaces, ConfigMaps, ReplicaSets) as a lookup.
pub fn context_lookup() -> ObjectStore {
    let mut store = ObjectStore::new();
    for (path, text) in CONTEXT_FILES {
        for object in documents(path, text) {
            store
                .insert(object)
                .expect("context objects have an identity");
        }
    }
    store
}

/// The types objects are given when a target chooses one: those the example policies select.
pub const TYPES: &[(&str, &str)] = &[
    ("v1", "Pod"),
    ("apps/v1", "Deployment"),
    ("batch/v1", "CronJob"),
    ("apps/v1", "StatefulSet"),
    ("v1", "ConfigMap"),
    ("batch/v1", "Job"),
    ("v1", "Namespace"),
    ("v1", "Secret"),
];

/// Namespaces objects are put in when a target chooses one: those the policies name.
pub const NAMESPACES: &[&str] = &["default", "shop", "payments", "analytics"];

/// A Pod most example policies select, with containers, resources and labels.
pub fn web_pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "labels": {"app": "web", "tier": "critical", "app.kubernetes.io/name": "web"},
            "annotations": {"example.com/owner": "team-a"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-6d4cf56db6", "uid": "1", "controller": true}],
        },
        "spec": {
            "containers": [
                {"name": "app", "image": "nginx:1.27",
                 "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}, "requests": {"cpu": "100m"}}},
                {"name": "sidecar", "image": "docker.io/envoyproxy/envoy:v1.31"},
            ],
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}],
            "nodeSelector": {"disk": "ssd"},
        },
    })
}

/// A Deployment many example policies select.
pub fn api_deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "api", "namespace": "payments", "labels": {"app": "api", "env": "prod", "tier": "critical"}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "api"}},
            "template": {
                "metadata": {"labels": {"app": "api"}},
                "spec": {"containers": [{"name": "api", "image": "registry.example.com/api:2",
                    "resources": {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "1", "memory": "2Gi"}}}]},
            },
        },
    })
}

/// A Namespace with labels.
pub fn shop_namespace() -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "labels": {"env": "staging"}}})
}

/// Objects for targets that need some object to judge.
pub fn sample_objects() -> Vec<Value> {
    vec![web_pod(), api_deployment(), shop_namespace()]
}

/// The checks of the policy file targets (`policy_yaml`, `policy_json`).
pub mod policies {
    use std::sync::{Arc, LazyLock};

    use kanon_api::Operation;
    use kanon_engine::{
        ObjectStore, PolicySet, Request, block_on, compile_document, compile_document_reporting,
        parse_documents, policy_kind_of,
    };
    use serde_json::Value;

    static LOOKUP: LazyLock<ObjectStore> = LazyLock::new(super::context_lookup);
    static REQUESTS: LazyLock<Vec<Request>> = LazyLock::new(|| {
        let mut requests = Vec::new();
        for object in super::sample_objects() {
            for operation in [Operation::Create, Operation::Update, Operation::Delete] {
                let old = (operation != Operation::Create).then(|| object.clone());
                requests.push(
                    Request::from_objects(operation, Some(object.clone()), old)
                        .expect("sample objects make requests"),
                );
            }
        }
        requests
    });

    /// The most policies of one input evaluated (their number does not change the paths).
    const MAX_EVALUATED: usize = 16;

    /// Parses `text` as a policy file, compiles every document and evaluates what decodes.
    pub fn check_text(text: &str, json: bool) {
        let documents = match parse_documents(text, "fuzz.yaml", json) {
            Ok(documents) => documents,
            Err(e) => {
                let _ = e.to_string();
                return;
            }
        };
        check_documents(&documents);
    }

    /// Compiles every document (every kind, Kubernetes' admission policies and their bindings
    /// included) and evaluates the ones that decode on a few objects, as mutation, validation
    /// and both.
    pub fn check_documents(documents: &[Value]) {
        let mut compiled = Vec::new();
        let mut admission = kanon_engine::AdmissionPolicies::new();
        for document in documents
            .iter()
            .filter(|d| kanon_engine::admission_kind_of(d).is_some())
        {
            admission.add(document);
        }
        match admission.compile() {
            Ok(bound) => compiled.extend(bound.into_iter().map(Arc::new)),
            Err(problems) => {
                let _ = problems.join("\n");
            }
        }
        for document in documents {
            let _ = policy_kind_of(document);
            if let Err(e) = compile_document(document) {
                let _ = e.to_string();
            }
            match compile_document_reporting(document) {
                Ok(c) => compiled.push(Arc::new(c.policy)),
                Err(e) => {
                    let _ = e.to_string();
                }
            }
        }
        if compiled.is_empty() || compiled.len() > MAX_EVALUATED {
            return;
        }
        let Ok(set) = PolicySet::build_shared(compiled) else {
            return;
        };
        for request in REQUESTS.iter() {
            let _ = block_on(set.review(request, &*LOOKUP));
            // The webhook's way: the object changed in place, the patch from the saved fields;
            // it must be the patch of the copying path.
            let copied = block_on(set.mutate(request, &*LOOKUP));
            let mut owned = request.clone();
            let in_place = block_on(set.mutate_patch(&mut owned, &*LOOKUP));
            assert_eq!(
                (in_place.allowed, &in_place.patch),
                (copied.allowed, &copied.patch),
                "the patch in place differs from the patch of a copy"
            );
        }
    }
}
