//! The world: the kit's cluster (no kube-controller-manager), the 20 policies and the 100,000
//! objects.

use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use kanon_control_plane::Options;
use kanon_control_plane::kanon::{self as kit, Cluster};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

use crate::{BAD_LABEL, KindSpec, Settings};

pub(crate) struct World {
    pub(crate) runtime: tokio::runtime::Runtime,
    pub(crate) client: kube::Client,
    /// Last: stopped after the kanon processes (which `main` owns and stops first).
    pub(crate) cluster: Cluster,
}

impl World {
    pub(crate) fn start() -> Result<World> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let cluster = Cluster::start(
            "bench",
            Options {
                controller_manager: false,
                ..Options::default()
            },
        )?;
        let runtime = kit::runtime()?;
        let client = runtime.block_on(async {
            let mut config = cluster.kube_config().await?;
            // Lists of 100,000 objects take their time.
            config.read_timeout = Some(Duration::from_secs(120));
            anyhow::Ok(kube::Client::try_from(config)?)
        })?;
        Ok(World {
            runtime,
            client,
            cluster,
        })
    }

    pub(crate) fn kubectl(&self, args: &[&str]) -> Result<Output> {
        self.cluster.kubectl(args)
    }

    pub(crate) fn apply(&self, resource: &ApiResource, document: &Value) -> Result<()> {
        let name = document["metadata"]["name"].as_str().unwrap_or_default();
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), resource);
        let params = PatchParams::apply("kanon-audit-bench").force();
        self.runtime
            .block_on(api.patch(name, &params, &Patch::Apply(document)))
            .with_context(|| format!("applying {name}"))?;
        Ok(())
    }

    /// The PID of a control-plane process.
    pub(crate) fn pid(&self, name: &str) -> Option<u32> {
        self.cluster
            .control_plane()
            .pids()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, pid)| pid)
    }

    /// etcd's database size in bytes (`etcd_mvcc_db_total_size_in_bytes`; NaN when unread).
    pub(crate) fn etcd_db_size(&self) -> f64 {
        let Ok(url) = self.etcd_url() else {
            return f64::NAN;
        };
        Command::new("curl")
            .args(["-s", "--max-time", "10", &format!("{url}/metrics")])
            .output()
            .ok()
            .map(|out| {
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                metric(&text, "etcd_mvcc_db_total_size_in_bytes")
            })
            .unwrap_or(f64::NAN)
    }

    /// etcd's client URL, from kube-apiserver's command line.
    pub(crate) fn etcd_url(&self) -> Result<String> {
        let pid = self.pid("kube-apiserver").context("kube-apiserver runs")?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))?;
        cmdline
            .split(|&b| b == 0)
            .filter_map(|a| std::str::from_utf8(a).ok())
            .find_map(|a| a.strip_prefix("--etcd-servers="))
            .map(|s| s.split(',').next().unwrap_or(s).to_string())
            .context("--etcd-servers in kube-apiserver's command line")
    }
}

pub(crate) fn policy_resource() -> ApiResource {
    kit::policy_resource("ClusterValidatePolicy").expect("a policy kind")
}

/// The policy of one kind: its objects may not carry [`BAD_LABEL`]; `Audit` only.
pub(crate) fn policy(kind: &KindSpec, change: usize) -> Value {
    let suffix = if change == 0 {
        String::new()
    } else {
        format!(" (change {change})")
    };
    json!({
        "apiVersion": kanon_api::API_VERSION,
        "kind": "ClusterValidatePolicy",
        "metadata": {
            "name": kind.policy_name(),
            "labels": {"bench.kanon.dev/owned": "true"},
            "annotations": {
                "policy.kanon.dev/severity": "medium",
                "policy.kanon.dev/category": "Bench",
            },
        },
        "spec": {
            "resourceSelectors": [{"apiVersion": kind.api_version(), "kind": kind.kind}],
            "validationActions": ["Audit"],
            "validateRules": [{
                "name": "not-bad",
                "targetOperations": ["CREATE", "UPDATE"],
                "cel": {"validations": [{
                    "expression": format!(
                        "!has(object.metadata.labels) || !('{BAD_LABEL}' in object.metadata.labels)"
                    ),
                    "message": format!("a {} may not carry the {BAD_LABEL} label{suffix}", kind.kind),
                }]},
            }],
        },
    })
}

pub(crate) fn namespace_name(i: usize) -> String {
    format!("audit-bench-{i:02}")
}

pub(crate) fn pod_spec(restart: &str) -> Value {
    json!({
        "restartPolicy": restart,
        "containers": [{
            "name": "app",
            "image": "registry.example.com/bench/app:1.0",
            "ports": [{"containerPort": 8080, "name": "http"}],
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        }],
    })
}

/// Object `i` of `kind`: in namespace `i % namespaces`; the k-th object of each namespace
/// (k = i / namespaces) fails when k % 10 == 0, so each namespace has 10% failing of each kind.
pub(crate) fn object(kind: &KindSpec, i: usize, namespaces: usize) -> (String, Value, bool) {
    let namespace = namespace_name(i % namespaces);
    let bad = (i / namespaces).is_multiple_of(10);
    let name = format!("{}-{i:05}", kind.short);
    let mut labels = json!({"app.kubernetes.io/part-of": "audit-bench", "app": name});
    if bad {
        labels[BAD_LABEL] = json!("true");
    }
    let selector = json!({"matchLabels": {"app": name}});
    let template = json!({"metadata": {"labels": {"app": name}}, "spec": pod_spec("Always")});
    let job_template = json!({"metadata": {"labels": {"app": name}}, "spec": pod_spec("Never")});
    let body = match kind.kind {
        "ConfigMap" => json!({"data": {
            "mode": "production",
            "config.yaml": format!("server:\n  port: 8080\n  name: {name}\nlogging:\n  level: info\n"),
        }}),
        "Service" => json!({"spec": {
            "clusterIP": "None",
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
        }}),
        "ServiceAccount" => json!({}),
        "PodTemplate" => json!({"template": template}),
        "PersistentVolumeClaim" => json!({"spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        }}),
        "Pod" => json!({"spec": pod_spec("Always")}),
        "LimitRange" => json!({"spec": {"limits": [{
            "type": "Container", "max": {"cpu": "64", "memory": "64Gi"},
        }]}}),
        // Only a kind nobody creates here, so that no create waits for the quota's status
        // (nothing computes it without kube-controller-manager).
        "ResourceQuota" => json!({"spec": {"hard": {"count/replicationcontrollers": "100"}}}),
        "Role" => json!({"rules": [{
            "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"],
        }]}),
        "RoleBinding" => json!({
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": format!("role-{i:05}")},
            "subjects": [{"kind": "ServiceAccount", "name": format!("sa-{i:05}"), "namespace": namespace}],
        }),
        "EndpointSlice" => {
            labels["kubernetes.io/service-name"] = json!(format!("svc-{i:05}"));
            json!({
                "addressType": "IPv4",
                "endpoints": [{"addresses": [format!("10.1.{}.{}", (i / 250) % 250, i % 250 + 1)]}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            })
        }
        "Deployment" | "ReplicaSet" => json!({"spec": {
            "replicas": 0, "selector": selector, "template": template,
        }}),
        "StatefulSet" => json!({"spec": {
            "replicas": 0, "serviceName": format!("svc-{i:05}"), "selector": selector,
            "template": template,
        }}),
        "DaemonSet" => json!({"spec": {"selector": selector, "template": template}}),
        "Job" => json!({"spec": {"suspend": true, "template": job_template}}),
        "CronJob" => json!({"spec": {
            "schedule": "0 3 * * *", "suspend": true,
            "jobTemplate": {"spec": {"template": job_template}},
        }}),
        "Ingress" => json!({"spec": {"rules": [{
            "host": format!("app-{i:05}.bench.example.com"),
            "http": {"paths": [{
                "path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": format!("svc-{i:05}"), "port": {"number": 80}}},
            }]},
        }]}}),
        "NetworkPolicy" => json!({"spec": {
            "podSelector": {"matchLabels": {"app": name}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {}}], "ports": [{"port": 8080}]}],
        }}),
        "PodDisruptionBudget" => json!({"spec": {"minAvailable": 1, "selector": selector}}),
        other => unreachable!("no object for {other}"),
    };
    let mut document = json!({
        "apiVersion": kind.api_version(),
        "kind": kind.kind,
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
    });
    for (key, value) in body.as_object().expect("an object") {
        document[key] = value.clone();
    }
    (namespace, document, bad)
}

/// Creates every object of `kinds` with `concurrency` creates in flight; retries what the
/// apiserver refuses for a moment (429, 5xx, timeouts). The objects created.
pub(crate) fn create_all(world: &World, kinds: &[&KindSpec], settings: &Settings) -> Result<usize> {
    let jobs: Vec<(ApiResource, String, Value)> = kinds
        .iter()
        .flat_map(|kind| {
            let resource = kind.resource();
            (0..settings.per_kind()).map(move |i| {
                let (namespace, document, _) = object(kind, i, settings.namespaces);
                (resource.clone(), namespace, document)
            })
        })
        .collect();
    let total = jobs.len();
    let created = Arc::new(AtomicU64::new(0));
    let client = world.client.clone();
    let concurrency = settings.concurrency;
    let progress = created.clone();
    let started = Instant::now();
    world.runtime.block_on(async move {
        let semaphore = Arc::new(tokio::sync::Semaphore::new(concurrency));
        let mut tasks = tokio::task::JoinSet::new();
        for (resource, namespace, document) in jobs {
            let permit = semaphore.clone().acquire_owned().await?;
            let client = client.clone();
            let created = created.clone();
            tasks.spawn(async move {
                let _permit = permit;
                let api: Api<DynamicObject> = Api::namespaced_with(client, &namespace, &resource);
                let object: DynamicObject = serde_json::from_value(document)?;
                let mut attempt = 0;
                loop {
                    match api.create(&PostParams::default(), &object).await {
                        Ok(_) => break,
                        Err(kube::Error::Api(status)) if status.code == 409 => break,
                        Err(error) if attempt < 8 => {
                            let transient = match &error {
                                kube::Error::Api(status) => {
                                    status.code == 429 || status.code >= 500
                                }
                                _ => true,
                            };
                            if !transient {
                                return Err(anyhow::anyhow!(
                                    "creating {}/{}: {error}",
                                    resource.kind,
                                    object.metadata.name.as_deref().unwrap_or("")
                                ));
                            }
                            attempt += 1;
                            tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
                        }
                        Err(error) => {
                            return Err(anyhow::anyhow!(
                                "creating {}/{}: {error}",
                                resource.kind,
                                object.metadata.name.as_deref().unwrap_or("")
                            ));
                        }
                    }
                }
                let n = created.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_multiple_of(10_000) {
                    eprintln!(
                        "bench:   {n} created ({:.0} s)",
                        started.elapsed().as_secs_f64()
                    );
                }
                anyhow::Ok(())
            });
            while let Some(done) = tasks.try_join_next() {
                done??;
            }
        }
        while let Some(done) = tasks.join_next().await {
            done??;
        }
        anyhow::Ok(())
    })?;
    let created = progress.load(Ordering::Relaxed) as usize;
    ensure!(created == total, "{created} of {total} created");
    Ok(created)
}

/// How many objects of `kind` the apiserver has (a list of 1 and its remaining count).
pub(crate) fn count(world: &World, kind: &KindSpec) -> Result<usize> {
    let api: Api<DynamicObject> = Api::all_with(world.client.clone(), &kind.resource());
    let list = world
        .runtime
        .block_on(api.list(&ListParams::default().limit(1)))?;
    let remaining = list.metadata.remaining_item_count.unwrap_or(0);
    Ok(list.items.len() + usize::try_from(remaining).unwrap_or(0))
}

/// The value of the sample `series` (name with its labels, as printed) in `metrics`; 0 when
/// absent.
pub(crate) fn metric(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok())?
        })
        .unwrap_or(0.0)
}
