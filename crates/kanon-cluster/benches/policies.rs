//! The cost of one policy change in cluster mode, with 10,000 policies in the cluster.
//!
//! [`ClusterPolicies`] is what the reflector keeps between watch events: each event recompiles
//! only the policy it carries (and only on a new generation), then a new
//! [`PolicySet`](kanon_engine::PolicySet) is indexed from the shared compiled policies. The set
//! here holds 10,000 policies of the four kinds (2,500 each), spread over 544
//! `apiVersion`/`kind` pairs and 50 namespaces, with realistic specs: `labels` and
//! `annotations` templates and plaintext operations (override policies), `condition` templates
//! with messages (validate policies), label selectors. Every kind is marked synced (listed
//! once), as in a running kanon.
//!
//! Cases:
//! - `one_change/<kind>`: one policy of that kind updated (a new generation): `apply` (decode +
//!   compile + render its templates) + `take_changes` + `set()` (index the new set of 10,000),
//!   which is what the reflector does for one watch event before it publishes;
//! - `compile_only/<kind>`: the same `apply` + `take_changes` without the new set (the
//!   compilation of the one policy);
//! - `set_only`: `set()` alone (the index build);
//! - `drop_set`: dropping a set of 10,000 (what replacing the previous set frees; not part of
//!   the other cases, whose results are dropped outside the timed part);
//! - `status_only_event`: the same `apply` with an unchanged generation (a status write or a
//!   label change on the policy object comes back as a watch event): nothing is compiled;
//! - `initial_load`: a fresh [`ClusterPolicies`] fed all 10,000 (as the first listing does) and
//!   its first `set()`, for reference.
//!
//! Run: `cargo bench -p kanon-cluster --bench policies` (results in BENCHMARKS.md).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use kanon_api::PolicyKind;
use kanon_cluster::policies::{Applied, ClusterPolicies};
use serde_json::{Value, json};

/// Policies in the cluster.
const TOTAL: usize = 10_000;

/// Namespaces the namespaced policies live in.
const NAMESPACES: usize = 50;

/// Built-in types the policies select.
const BUILTIN_TYPES: [(&str, &str); 32] = [
    ("v1", "Pod"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Service"),
    ("v1", "ServiceAccount"),
    ("v1", "PersistentVolumeClaim"),
    ("v1", "PersistentVolume"),
    ("v1", "Namespace"),
    ("v1", "Endpoints"),
    ("v1", "LimitRange"),
    ("v1", "ResourceQuota"),
    ("v1", "ReplicationController"),
    ("v1", "PodTemplate"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "DaemonSet"),
    ("apps/v1", "ReplicaSet"),
    ("batch/v1", "Job"),
    ("batch/v1", "CronJob"),
    ("networking.k8s.io/v1", "Ingress"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("networking.k8s.io/v1", "IngressClass"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("policy/v1", "PodDisruptionBudget"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("storage.k8s.io/v1", "StorageClass"),
    ("coordination.k8s.io/v1", "Lease"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
    ("discovery.k8s.io/v1", "EndpointSlice"),
];

/// Custom resource groups, and kinds per group: 32 + 64 × 8 = 544 distinct types.
const CUSTOM_GROUPS: usize = 64;
const CUSTOM_KINDS: usize = 8;

/// The type the `i`-th policy selects.
fn selected_type(i: usize) -> (String, String) {
    let types = BUILTIN_TYPES.len() + CUSTOM_GROUPS * CUSTOM_KINDS;
    let t = (i / 4) % types;
    match BUILTIN_TYPES.get(t) {
        Some((api_version, kind)) => (api_version.to_string(), kind.to_string()),
        None => {
            let c = t - BUILTIN_TYPES.len();
            (
                format!("team{}.bench.kanon.dev/v1alpha1", c / CUSTOM_KINDS),
                format!("Widget{}", c % CUSTOM_KINDS),
            )
        }
    }
}

/// The kind of the `i`-th policy: the four kinds in turn.
fn kind_of(i: usize) -> PolicyKind {
    PolicyKind::ALL[i % 4]
}

/// The `i`-th policy object as the apiserver delivers it, at `generation`, with the spec
/// varied by `revision` (a new generation carries a new spec).
fn policy(i: usize, generation: i64, revision: u64) -> Value {
    let kind = kind_of(i);
    let (api_version, selected_kind) = selected_type(i);
    let name = format!("bench-{i:05}");
    let namespace = format!("team-{:02}", i % NAMESPACES);
    let mut metadata = json!({
        "name": name,
        "uid": format!("00000000-0000-0000-0000-{i:012}"),
        "generation": generation,
        "resourceVersion": format!("{}", 1000 + i),
        "labels": {"app.kubernetes.io/managed-by": "bench"},
    });
    let mut selector = json!({
        "apiVersion": api_version,
        "kind": selected_kind,
        "labelSelector": {"matchLabels": {"tier": format!("t{}", i % 7)}},
    });
    if kind.is_namespaced() {
        metadata["namespace"] = json!(namespace);
        selector["namespace"] = json!(namespace);
    }
    let spec = match kind {
        // A `labels` template and a plaintext operation.
        PolicyKind::ClusterOverridePolicy => json!({
            "resourceSelectors": [selector],
            "overrideRules": [
                {"targetOperations": ["CREATE", "UPDATE"],
                 "overriders": {"template": {"type": "labels", "operation": "add",
                     "path": format!("bench.kanon.dev/p{i}"),
                     "value": {"string": format!("r{revision}")}}}},
                {"targetOperations": ["CREATE"],
                 "overriders": {"plaintext": [{"op": "add",
                     "path": format!("/metadata/annotations/bench.kanon.dev~1p{i}"),
                     "value": format!("r{revision}")}]}},
            ],
        }),
        // Plaintext operations, and an `annotations` template.
        PolicyKind::OverridePolicy => json!({
            "resourceSelectors": [selector],
            "overrideRules": [
                {"targetOperations": ["CREATE", "UPDATE"],
                 "overriders": {"plaintext": [
                     {"op": "add", "path": format!("/metadata/labels/bench.kanon.dev~1o{i}"),
                      "value": format!("r{revision}")},
                     {"op": "add", "path": "/metadata/annotations/bench.kanon.dev~1team",
                      "value": namespace},
                 ]}},
                {"overriders": {"template": {"type": "annotations", "operation": "add",
                    "path": "bench.kanon.dev/revision",
                    "value": {"string": format!("r{revision}")}}}},
            ],
        }),
        // A `condition` template with a templated message, and a second condition.
        PolicyKind::ClusterValidatePolicy => json!({
            "resourceSelectors": [selector],
            "validateRules": [
                {"targetOperations": ["CREATE", "UPDATE"],
                 "template": {"type": "condition", "condition": {
                     "cond": "Equal",
                     "dataRef": {"from": "current", "path": format!("/metadata/labels/forbidden-{i}")},
                     "value": {"string": format!("r{revision}")},
                     "message": "{{ object.metadata.name }} is marked forbidden",
                 }}},
                {"template": {"type": "condition", "condition": {
                    "cond": "NotExist",
                    "dataRef": {"from": "current", "path": "/metadata/labels/owner"},
                    "message": "every object should name its owner",
                }}},
            ],
        }),
        // A `condition` template comparing quantities.
        PolicyKind::ValidatePolicy => json!({
            "resourceSelectors": [selector],
            "validationActions": ["Warn"],
            "validateRules": [
                {"template": {"type": "condition", "condition": {
                    "cond": "Gt",
                    "dataRef": {"from": "current", "path": "/spec/replicas"},
                    "value": {"integer": 10 + (revision % 5) as i64},
                    "message": "{{ object.metadata.name }}: too many replicas in {{ object.metadata.namespace }}",
                }}},
            ],
        }),
    };
    json!({
        "apiVersion": kanon_api::API_VERSION,
        "kind": kind.as_str(),
        "metadata": metadata,
        "spec": spec,
        "status": {"observedGeneration": generation, "conditions": [{
            "type": "Ready", "status": "True", "reason": "Compiled", "message": "",
            "observedGeneration": generation, "lastTransitionTime": "2026-11-22T10:00:00Z"}]},
    })
}

/// Every policy at generation 1.
fn documents() -> Vec<Value> {
    (0..TOTAL).map(|i| policy(i, 1, 0)).collect()
}

/// A fresh [`ClusterPolicies`] fed `documents` as the first listing of each kind.
fn load(documents: Vec<Value>) -> ClusterPolicies {
    let mut policies = ClusterPolicies::new();
    for kind in PolicyKind::ALL {
        policies.relist_started(kind);
    }
    for document in documents {
        let kind = PolicyKind::from_kind(document["kind"].as_str().unwrap_or_default())
            .expect("a policy kind");
        policies.apply(kind, document);
    }
    for kind in PolicyKind::ALL {
        policies.relist_done(kind);
    }
    policies
}

/// Checks, outside timing, that every policy compiled cleanly and the set holds them all.
fn check(policies: &mut ClusterPolicies) {
    assert!(policies.synced());
    assert_eq!(policies.len(), TOTAL);
    let invalid: Vec<String> = policies
        .entries()
        .filter(|(_, e)| !e.errors.is_empty())
        .take(3)
        .map(|(id, e)| format!("{id}: {:?}", e.errors))
        .collect();
    assert!(
        invalid.is_empty(),
        "invalid benchmark policies: {invalid:?}"
    );
    assert_eq!(policies.set().len(), TOTAL);
    assert_eq!(
        policies.take_changes().as_deref(),
        Some(format!("{TOTAL} policy changes").as_str())
    );
}

/// The policy updated in `one_change/<kind>`: one in the middle of the set.
fn changed_index(kind: PolicyKind) -> usize {
    let base = TOTAL / 2;
    base - base % 4 + PolicyKind::ALL.iter().position(|k| *k == kind).unwrap_or(0)
}

fn bench_policies(c: &mut Criterion) {
    let mut policies = load(documents());
    check(&mut policies);

    let mut group = c.benchmark_group("cluster_policies_10000");
    // One change: apply a new generation + take_changes + the new set.
    for kind in PolicyKind::ALL {
        let i = changed_index(kind);
        assert_eq!(kind_of(i), kind);
        let mut generation = 1;
        group.bench_function(BenchmarkId::new("one_change", kind.as_str()), |b| {
            b.iter_batched(
                || {
                    generation += 1;
                    policy(i, generation, generation as u64)
                },
                |document| {
                    let applied = policies.apply(kind, document);
                    debug_assert!(matches!(applied, Applied::Compiled(_)));
                    let change = policies.take_changes();
                    (policies.set(), change)
                },
                BatchSize::PerIteration,
            );
        });
        // The same change without the new set: what compiling the one policy costs.
        group.bench_function(BenchmarkId::new("compile_only", kind.as_str()), |b| {
            b.iter_batched(
                || {
                    generation += 1;
                    policy(i, generation, generation as u64)
                },
                |document| {
                    let applied = policies.apply(kind, document);
                    (applied, policies.take_changes())
                },
                BatchSize::PerIteration,
            );
        });
        let entry = policies
            .entries()
            .find(|(id, _)| id.name == format!("bench-{i:05}"))
            .map(|(_, e)| e.clone())
            .expect("the changed policy");
        assert!(entry.errors.is_empty(), "{:?}", entry.errors);
        assert_eq!(entry.generation, Some(generation));
    }
    assert_eq!(policies.len(), TOTAL);

    // The index build alone; the returned set is dropped outside the timed part, as in
    // `one_change`.
    group.bench_function("set_only", |b| {
        b.iter_batched(|| (), |()| policies.set(), BatchSize::PerIteration);
    });

    // Dropping a set of 10,000 (the previous set goes once the new one replaces it and the
    // last review holding it ends): the index's maps and one reference count per policy.
    group.bench_function("drop_set", |b| {
        b.iter_batched(|| policies.set(), drop, BatchSize::PerIteration);
    });

    // A watch event that carries no new generation: nothing compiled, no new set.
    let i = changed_index(PolicyKind::ClusterOverridePolicy);
    let generation = policies
        .entries()
        .find(|(id, _)| id.name == format!("bench-{i:05}"))
        .and_then(|(_, e)| e.generation)
        .expect("its generation");
    let same = policy(i, generation, generation as u64);
    assert!(matches!(
        policies.apply(PolicyKind::ClusterOverridePolicy, same.clone()),
        Applied::Unchanged(_)
    ));
    group.bench_function("status_only_event", |b| {
        b.iter_batched(
            || same.clone(),
            |document| {
                let applied = policies.apply(PolicyKind::ClusterOverridePolicy, document);
                (applied, policies.take_changes())
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();

    // The first listing: every policy compiled, then the first set.
    let mut group = c.benchmark_group("cluster_policies_10000_load");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    let docs = documents();
    group.bench_function("initial_load", |b| {
        b.iter_batched(
            || docs.clone(),
            |docs| {
                let policies = load(black_box(docs));
                let set = policies.set();
                (policies, set)
            },
            BatchSize::LargeInput,
        );
    });
    group.finish();
}

criterion_group!(benches, bench_policies);
criterion_main!(benches);
