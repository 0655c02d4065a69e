//! The world: the kit's cluster, the bench's policies and Pods, kanon's webhooks; stopped in
//! order when dropped.

use std::collections::BTreeMap;
use std::process::Output;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kanon_control_plane::kanon::{self as kit, Cluster, Kanon, bench_policy, policy_resource};
use kanon_control_plane::{ControlPlane, Options};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::{MATCHING, PODS_NS, WEBHOOKS};

/// The `i`-th ClusterOverridePolicy: the first [`MATCHING`] select the bench Pods and add
/// label `bench-p<i>: <value>`; the others select other types.
pub(crate) fn cop(i: usize, value: &str) -> Value {
    const OTHER_TYPES: [(&str, &str); 12] = [
        ("v1", "ConfigMap"),
        ("v1", "Secret"),
        ("v1", "Service"),
        ("v1", "ServiceAccount"),
        ("apps/v1", "Deployment"),
        ("apps/v1", "StatefulSet"),
        ("apps/v1", "DaemonSet"),
        ("batch/v1", "Job"),
        ("batch/v1", "CronJob"),
        ("networking.k8s.io/v1", "Ingress"),
        ("policy/v1", "PodDisruptionBudget"),
        ("example.bench.kanon.dev/v1", "Widget"),
    ];
    let selector = if i < MATCHING {
        json!({"apiVersion": "v1", "kind": "Pod", "namespace": PODS_NS})
    } else {
        let (api_version, kind) = OTHER_TYPES[i % OTHER_TYPES.len()];
        json!({"apiVersion": api_version, "kind": kind,
               "labelSelector": {"matchLabels": {"team": format!("t{}", i % 9)}}})
    };
    bench_policy(
        "ClusterOverridePolicy",
        &format!("bench-cop-{i:03}"),
        json!({
            "resourceSelectors": [selector],
            "overrideRules": [{
                "targetOperations": ["CREATE", "UPDATE"],
                "overriders": {"template": {"type": "labels", "operation": "add",
                    "path": format!("bench-p{i}"), "value": {"string": value}}},
            }],
        }),
    )
}

/// The label value policy `i` adds at first.
pub(crate) fn first_value(i: usize) -> String {
    format!("v{i}")
}

/// The two ClusterValidatePolicies on the bench Pods (neither condition holds for them).
pub(crate) fn cvps() -> Vec<Value> {
    let pods = json!([{"apiVersion": "v1", "kind": "Pod", "namespace": PODS_NS}]);
    vec![
        bench_policy(
            "ClusterValidatePolicy",
            "bench-cvp-forbidden",
            json!({"resourceSelectors": pods, "validateRules": [{"template": {"type": "condition",
                "condition": {"cond": "Equal",
                    "dataRef": {"from": "current", "path": "/metadata/labels/forbidden"},
                    "value": {"string": "yes"},
                    "message": "{{ object.metadata.name }} is marked forbidden"}}}]}),
        ),
        bench_policy(
            "ClusterValidatePolicy",
            "bench-cvp-cpu",
            json!({"resourceSelectors": pods, "validateRules": [{"template": {"type": "condition",
                "condition": {"cond": "Gt",
                    "dataRef": {"from": "current", "path": "/spec/containers/0/resources/limits/cpu"},
                    "value": {"string": "2"},
                    "message": "{{ object.metadata.name }} asks for more than 2 CPUs"}}}]}),
        ),
    ]
}

/// A bench Pod.
pub(crate) fn bench_pod(namespace: &str, name: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.0",
                                 "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}}}]},
    }))?)
}

/// Whether `labels` carry every label of the [`MATCHING`] policies, with `expected(i)` values.
pub(crate) fn has_labels(
    labels: &BTreeMap<String, String>,
    expected: impl Fn(usize) -> String,
) -> bool {
    (0..MATCHING).all(|i| labels.get(&format!("bench-p{i}")) == Some(&expected(i)))
}

/// Everything started, stopped in the right order when dropped: webhooks deleted, then kanon
/// stopped (SIGTERM), then the control plane.
pub(crate) struct World {
    pub(crate) runtime: tokio::runtime::Runtime,
    pub(crate) client: kube::Client,
    pub(crate) kanon: Option<Kanon>,
    pub(crate) kanon_miss: Option<Kanon>,
    pub(crate) webhooks: bool,
    /// Whether part 4's validating webhook configuration may be registered.
    pub(crate) cel_webhook: bool,
    /// Last: stopped after kanon.
    pub(crate) cluster: Cluster,
}

impl World {
    pub(crate) fn start() -> Result<World> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let cluster = Cluster::start("bench", Options::default())?;
        let runtime = kit::runtime()?;
        let client = runtime.block_on(cluster.client())?;
        Ok(World {
            runtime,
            client,
            kanon: None,
            kanon_miss: None,
            webhooks: false,
            cel_webhook: false,
            cluster,
        })
    }

    pub(crate) fn control_plane(&self) -> &ControlPlane {
        self.cluster.control_plane()
    }

    pub(crate) fn kanon(&self) -> &Kanon {
        self.kanon.as_ref().expect("kanon runs")
    }

    /// Starts `kanon serve` (named `name`, with `extra` arguments) and waits for `/readyz`.
    pub(crate) fn start_kanon(&self, name: &str, extra: &[&str]) -> Result<Kanon> {
        let mut kanon = self
            .cluster
            .kanon(env!("CARGO_BIN_EXE_kanon"), name)?
            .with_settings(&["--http-allow-cidr", "127.0.0.1/32"]);
        kanon.args = extra.iter().map(|a| a.to_string()).collect();
        kanon.start()?;
        Ok(kanon)
    }

    /// kubectl with `args`; an error when it fails.
    pub(crate) fn kubectl(&self, args: &[&str]) -> Result<Output> {
        self.cluster.kubectl(args)
    }

    /// `kubectl apply -f -` of `document`.
    pub(crate) fn apply(&self, document: &Value) -> Result<()> {
        self.cluster.apply(document)
    }

    pub(crate) fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Server-side applies a policy document.
    pub(crate) fn apply_policy(&self, document: &Value) -> Result<()> {
        let kind = document["kind"].as_str().unwrap_or_default();
        let name = document["metadata"]["name"].as_str().unwrap_or_default();
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &policy_resource(kind)?);
        let params = PatchParams::apply("kanon-bench").force();
        self.runtime
            .block_on(api.patch(name, &params, &Patch::Apply(document)))
            .with_context(|| format!("applying {kind} {name}"))?;
        Ok(())
    }

    /// Waits until every policy of `kind` labelled as the bench's has its status for its
    /// current generation with `Ready=True` (kanon writes status once the set is in force).
    pub(crate) fn wait_policies_ready(&self, kind: &str, count: usize) -> Result<()> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &policy_resource(kind)?);
        let params = ListParams::default().labels(&format!("{}=true", kit::BENCH_POLICY_LABEL));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let list = self.runtime.block_on(api.list(&params))?;
            let mut ready = 0;
            for item in &list.items {
                if kit::policy_in_force(&serde_json::to_value(item)?)? {
                    ready += 1;
                }
            }
            if ready == count && list.items.len() == count {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "{kind}: {ready} of {count} ready after 60 s; kanon's log:\n{}",
                self.kanon().log_tail(30)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The labels a server-side dry-run create of a bench Pod comes back with.
    pub(crate) fn dry_run_labels(&self) -> Result<BTreeMap<String, String>> {
        let params = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let pod = bench_pod(PODS_NS, "probe")?;
        let created = self
            .runtime
            .block_on(self.pods(PODS_NS).create(&params, &pod))?;
        Ok(created.metadata.labels.unwrap_or_default())
    }

    /// The webhook configurations: Pods in the bench namespace only, `Fail`, 5 s.
    pub(crate) fn webhook_configurations(&self) -> Result<(Value, Value)> {
        self.kanon()
            .pod_webhook_configurations(WEBHOOKS, "bench.kanon.dev", PODS_NS)
    }

    /// Registers kanon's webhooks and waits until the apiserver calls them.
    pub(crate) fn register_webhooks(&mut self) -> Result<()> {
        let (mutating, validating) = self.webhook_configurations()?;
        self.webhooks = true;
        self.apply(&mutating)?;
        self.apply(&validating)?;
        self.wait_dry_run("the webhooks in force", |labels| {
            labels.contains_key("bench-p0")
        })
    }

    /// Deletes kanon's webhooks and waits until the apiserver no longer calls them.
    pub(crate) fn unregister_webhooks(&mut self) -> Result<()> {
        self.delete_webhooks()?;
        self.wait_dry_run("the webhooks gone", |labels| {
            !labels.contains_key("bench-p0")
        })
    }

    pub(crate) fn delete_webhooks(&mut self) -> Result<()> {
        if self.webhooks {
            self.cluster.delete_webhook_configurations(WEBHOOKS)?;
            self.webhooks = false;
        }
        Ok(())
    }

    pub(crate) fn wait_dry_run(
        &self,
        what: &str,
        check: impl Fn(&BTreeMap<String, String>) -> bool,
    ) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if check(&self.dry_run_labels()?) {
                return Ok(());
            }
            ensure!(Instant::now() < deadline, "{what}: not within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Deletes every Pod of `namespace` and waits until none is left.
    pub(crate) fn delete_pods(&self, namespace: &str) -> Result<()> {
        let api = self.pods(namespace);
        self.runtime
            .block_on(api.delete_collection(&DeleteParams::default(), &ListParams::default()))?;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let left = self
                .runtime
                .block_on(api.list_metadata(&ListParams::default().limit(1)))?;
            if left.items.is_empty() {
                return Ok(());
            }
            ensure!(Instant::now() < deadline, "Pods of {namespace} not deleted");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Err(error) = self.delete_webhooks() {
            eprintln!("bench: deleting the webhooks: {error:#}");
        }
        if let Err(error) = self.delete_cel_webhook() {
            eprintln!("bench: deleting the CEL webhook: {error:#}");
        }
        if let Some(mut kanon) = self.kanon_miss.take() {
            kanon.stop_reporting("bench");
        }
        if let Some(mut kanon) = self.kanon.take() {
            kanon.stop_reporting("bench");
        }
    }
}
