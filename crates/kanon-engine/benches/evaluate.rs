//! The engine's hot path under a growing policy set.
//!
//! `mutate`: one Pod CREATE evaluated with [`PolicySet::mutate`] against 10, 1,000 and 10,000
//! ClusterOverridePolicies, of which exactly 10 select the Pod (each adds one annotation). The
//! other policies select other types, spread over many `apiVersion`/`kind` pairs (built-in kinds
//! and custom kinds), so the type index is what should keep the cost flat. The set is built
//! once, outside the timed loop; only `mutate` is timed.
//!
//! `build`: decoding + compiling the policy documents and indexing them ([`PolicySet::build`])
//! for 1,000 and 10,000 policies, which runs on every policy change; and the indexing alone.
//!
//! Run: `cargo bench -p kanon-engine --bench evaluate` (results in BENCHMARKS.md).

/// The allocator of the `kanon` binary, so that the request path is measured as it runs there
/// (glibc's allocator takes markedly longer to free a request's many small values).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use kanon_api::Operation;
use kanon_engine::{CompiledPolicy, NoObjects, PolicySet, Request, compile_document};
use serde_json::{Value, json};

/// The Pod under test: `request.object` of `fixtures/admission-reviews/pod-create.json`
/// (kubewarden/policy-server `tests/data/pod_without_privileged_containers.json`, Apache-2.0),
/// embedded unchanged so that the benchmark does not depend on a path outside the workspace.
/// It has `metadata.labels.env: test` and an existing `metadata.annotations` map.
const POD: &str = r#"{
  "kind": "Pod",
  "apiVersion": "v1",
  "metadata": {
    "name": "nginx",
    "namespace": "default",
    "uid": "04dc7a5e-e1f1-4e34-8d65-2c9337a43e64",
    "creationTimestamp": "2020-11-12T15:18:36Z",
    "labels": {
      "env": "test"
    },
    "annotations": {
      "kubectl.kubernetes.io/last-applied-configuration": "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"annotations\":{},\"labels\":{\"env\":\"test\"},\"name\":\"nginx\",\"namespace\":\"default\"},\"spec\":{\"containers\":[{\"image\":\"nginx\",\"imagePullPolicy\":\"IfNotPresent\",\"name\":\"nginx\"}],\"tolerations\":[{\"effect\":\"NoSchedule\",\"key\":\"example-key\",\"operator\":\"Exists\"}]}}\n"
    },
    "managedFields": [
      {
        "manager": "kubectl",
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2020-11-12T15:18:36Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {
          "f:metadata": {
            "f:annotations": {
              ".": {},
              "f:kubectl.kubernetes.io/last-applied-configuration": {}
            },
            "f:labels": {
              ".": {},
              "f:env": {}
            }
          },
          "f:spec": {
            "f:containers": {
              "k:{\"name\":\"nginx\"}": {
                ".": {},
                "f:image": {},
                "f:imagePullPolicy": {},
                "f:name": {},
                "f:resources": {},
                "f:terminationMessagePath": {},
                "f:terminationMessagePolicy": {}
              }
            },
            "f:dnsPolicy": {},
            "f:enableServiceLinks": {},
            "f:restartPolicy": {},
            "f:schedulerName": {},
            "f:securityContext": {},
            "f:terminationGracePeriodSeconds": {},
            "f:tolerations": {}
          }
        }
      }
    ]
  },
  "spec": {
    "volumes": [
      {
        "name": "default-token-pvpz7",
        "secret": {
          "secretName": "default-token-pvpz7"
        }
      }
    ],
    "containers": [
      {
        "name": "sleeping-sidecar",
        "image": "alpine",
        "command": [
          "sleep",
          "1h"
        ],
        "resources": {},
        "volumeMounts": [
          {
            "name": "default-token-pvpz7",
            "readOnly": true,
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"
          }
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent"
      },
      {
        "name": "nginx",
        "image": "nginx",
        "resources": {},
        "volumeMounts": [
          {
            "name": "default-token-pvpz7",
            "readOnly": true,
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"
          }
        ],
        "securityContext": {
          "privileged": false
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent"
      }
    ],
    "restartPolicy": "Always",
    "terminationGracePeriodSeconds": 30,
    "dnsPolicy": "ClusterFirst",
    "serviceAccountName": "default",
    "serviceAccount": "default",
    "securityContext": {},
    "schedulerName": "default-scheduler",
    "tolerations": [
      {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300
      },
      {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300
      },
      {
        "key": "dedicated",
        "operator": "Equal",
        "value": "tenantA",
        "effect": "NoSchedule"
      }
    ],
    "priority": 0,
    "enableServiceLinks": true,
    "preemptionPolicy": "PreemptLowerPriority"
  },
  "status": {
    "phase": "Pending",
    "qosClass": "BestEffort"
  }
}"#;

/// Policies that select the Pod, in every set.
const MATCHING: usize = 10;

/// Policy set sizes for `mutate` (matching policies included).
const MUTATE_SIZES: [usize; 3] = [10, 1_000, 10_000];

/// Policy set sizes for `build`.
const BUILD_SIZES: [usize; 2] = [1_000, 10_000];

/// Built-in types the non-matching policies select (never `v1` `Pod`).
const BUILTIN_TYPES: [(&str, &str); 32] = [
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Service"),
    ("v1", "ServiceAccount"),
    ("v1", "PersistentVolumeClaim"),
    ("v1", "PersistentVolume"),
    ("v1", "Namespace"),
    ("v1", "Node"),
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

/// Custom resource groups and kinds per group for the non-matching policies: with the
/// built-in types, 32 + 64 × 8 = 544 distinct types.
const CUSTOM_GROUPS: usize = 64;
const CUSTOM_KINDS: usize = 8;

/// The type the `j`-th non-matching policy selects.
fn other_type(j: usize) -> (String, String) {
    let types = BUILTIN_TYPES.len() + CUSTOM_GROUPS * CUSTOM_KINDS;
    let t = j % types;
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

/// The `i`-th policy that selects the Pod: adds annotation `bench.kanon.dev/p<i>`.
fn matching_policy(i: usize) -> Value {
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterOverridePolicy",
        "metadata": {"name": format!("bench-pod-{i:02}")},
        "spec": {
            "resourceSelectors": [{
                "apiVersion": "v1",
                "kind": "Pod",
                "labelSelector": {"matchLabels": {"env": "test"}}
            }],
            "overrideRules": [{
                "targetOperations": ["CREATE", "UPDATE"],
                "overriders": {"plaintext": [{
                    "op": "add",
                    "path": format!("/metadata/annotations/bench.kanon.dev~1p{i}"),
                    "value": format!("policy-{i}")
                }]}
            }]
        }
    })
}

/// The `j`-th policy that does not select the Pod: same shape, another type.
fn other_policy(j: usize) -> Value {
    let (api_version, kind) = other_type(j);
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterOverridePolicy",
        "metadata": {"name": format!("bench-other-{j:05}")},
        "spec": {
            "resourceSelectors": [{
                "apiVersion": api_version,
                "kind": kind,
                "labelSelector": {"matchLabels": {"env": "test"}}
            }],
            "overrideRules": [{
                "targetOperations": ["CREATE", "UPDATE"],
                "overriders": {"plaintext": [{
                    "op": "add",
                    "path": format!("/metadata/annotations/bench.kanon.dev~1o{j}"),
                    "value": format!("other-{j}")
                }]}
            }]
        }
    })
}

/// `total` policy documents, `MATCHING` of which select the Pod.
fn documents(total: usize) -> Vec<Value> {
    assert!(total >= MATCHING);
    (0..MATCHING)
        .map(matching_policy)
        .chain((0..total - MATCHING).map(other_policy))
        .collect()
}

fn compile_all(documents: &[Value]) -> Vec<CompiledPolicy> {
    documents
        .iter()
        .map(|d| compile_document(d).unwrap_or_else(|e| panic!("benchmark policy is invalid: {e}")))
        .collect()
}

fn policy_set(total: usize) -> PolicySet {
    PolicySet::build(compile_all(&documents(total))).expect("policy names are unique")
}

fn pod_request() -> Request {
    let pod: Value = serde_json::from_str(POD).expect("the embedded Pod is JSON");
    Request::from_objects(Operation::Create, Some(pod), None).expect("the Pod is a valid request")
}

/// Checks, once and outside timing, that the set and the decision are what the benchmark means
/// to measure: only the 10 matching policies are candidates, all apply, 10 `add`s result.
fn check(set: &PolicySet, request: &Request, total: usize) {
    assert_eq!(set.len(), total);
    let candidates = set
        .override_candidates(
            &request.api_version,
            &request.kind,
            request.namespace.as_deref(),
        )
        .count();
    assert_eq!(
        candidates, MATCHING,
        "the index should hand the Pod only the policies for v1/Pod"
    );
    let decision = kanon_engine::block_on(set.mutate(request, &NoObjects));
    assert!(decision.allowed, "{decision:?}");
    assert!(
        decision.messages.is_empty() && decision.warnings.is_empty(),
        "{decision:?}"
    );
    assert_eq!(
        decision.applied_policies.len(),
        MATCHING,
        "{:?}",
        decision.applied_policies
    );
    assert_eq!(decision.patch.0.len(), MATCHING, "{:?}", decision.patch);
    for (i, op) in decision.patch.0.iter().enumerate() {
        match op {
            json_patch::PatchOperation::Add(add) => {
                assert_eq!(
                    add.path.as_str(),
                    format!("/metadata/annotations/bench.kanon.dev~1p{i}")
                );
                assert_eq!(add.value, json!(format!("policy-{i}")));
            }
            other => panic!("expected an add, got {other:?}"),
        }
    }
    let annotations = decision
        .patched
        .as_ref()
        .and_then(|p| p.pointer("/metadata/annotations"));
    assert_eq!(
        annotations.and_then(Value::as_object).map(|a| a.len()),
        Some(MATCHING + 1)
    );
}

fn bench_mutate(c: &mut Criterion) {
    let request = pod_request();
    let mut group = c.benchmark_group("mutate_pod_10_matching");
    for total in MUTATE_SIZES {
        let set = policy_set(total);
        check(&set, &request, total);
        group.bench_with_input(BenchmarkId::from_parameter(total), &set, |b, set| {
            b.iter(|| kanon_engine::block_on(set.mutate(black_box(&request), &NoObjects)));
        });
    }
    group.finish();
    // The webhook's way: the request's object changed in place (its copy for each iteration is
    // made outside the timed part, just before: batches of 16, as in the `programs` bench).
    let set = policy_set(MUTATE_SIZES[0]);
    let mut owned = request.clone();
    let decision = kanon_engine::block_on(set.mutate_patch(&mut owned, &NoObjects));
    let copied = kanon_engine::block_on(set.mutate(&request, &NoObjects));
    assert_eq!(
        decision.patch, copied.patch,
        "in place and from a copy disagree"
    );
    c.bench_function("mutate_pod_10_matching_in_place/10", |b| {
        b.iter_batched(
            || request.clone(),
            |mut request| kanon_engine::block_on(set.mutate_patch(&mut request, &NoObjects)),
            BatchSize::NumIterations(16),
        );
    });
}

fn bench_build(c: &mut Criterion) {
    let mut group = c.benchmark_group("build");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(15));
    for total in BUILD_SIZES {
        let docs = documents(total);
        // Decode + compile every document, then sort, check and index: a policy change.
        group.bench_with_input(
            BenchmarkId::new("compile_and_index", total),
            &docs,
            |b, docs| {
                b.iter(|| PolicySet::build(compile_all(black_box(docs))).expect("unique"));
            },
        );
        // `PolicySet::build` alone, on already compiled policies (the clone is not timed).
        let compiled = compile_all(&docs);
        group.bench_with_input(
            BenchmarkId::new("index_only", total),
            &compiled,
            |b, compiled| {
                b.iter_batched(
                    || compiled.clone(),
                    |policies| PolicySet::build(policies).expect("unique"),
                    BatchSize::LargeInput,
                );
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench_mutate, bench_build);
criterion_main!(benches);
