//! Issue 34, finding 4: the audit of a tenant's large objects under the chart's memory limit.
//!
//! A tenant fills its namespace with ConfigMaps near etcd's object limit (300 of 900 KiB); a
//! policy selects them, so the audit lists and judges them. kanon runs in a memory cgroup limited
//! as its Pod's container would be (the limit `helm template` renders with the chart's default
//! values, see `chart.rs`), with the chart's audit settings but `--audit-interval 0`
//! (one audit, when the policy arrives). The figures: the cgroup's peak, whether the kernel killed
//! kanon, whether the audit finished and what it judged.
//!
//! [`audit_of_large_objects`] is the scenario; a tenants bench runs it with its cluster and the
//! kanon binary it measures.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kanon_control_plane::kanon::{Cluster, Kanon};
use kube::api::{Api, PostParams};
use serde_json::json;

/// The tenant's objects: `count` ConfigMaps of `bytes` of data each, in `namespace`.
#[derive(Debug, Clone)]
pub struct LargeObjects {
    /// Their namespace (created if missing).
    pub namespace: String,
    /// How many.
    pub count: usize,
    /// The bytes of data each holds.
    pub bytes: usize,
}

impl Default for LargeObjects {
    /// The finding's: 300 ConfigMaps of 900 KiB.
    fn default() -> Self {
        LargeObjects {
            namespace: "tenant-large-objects".to_string(),
            count: 300,
            bytes: 900 * 1024,
        }
    }
}

/// What one audit of the large objects cost.
#[derive(Debug, Clone)]
pub struct AuditFigures {
    /// The memory limit kanon ran under, in bytes.
    pub limit: u64,
    /// The most its cgroup held, in bytes (page cache included, as the kernel counts it).
    pub peak: u64,
    /// How many of its processes the kernel killed for crossing the limit.
    pub oom_kills: u64,
    /// Whether the audit finished (`kanon_audits_total{outcome="finished"}`).
    pub finished: bool,
    /// Objects the audit judged (`kanon_audit_objects_scanned_total`), as last read.
    pub scanned: u64,
    /// From kanon's start to the audit's end (or kanon's death, or giving up).
    pub took: Duration,
}

impl std::fmt::Display for AuditFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const MIB: f64 = 1024.0 * 1024.0;
        write!(
            f,
            "peak {:.0} MiB of a {:.0} MiB limit, {} OOM kill(s), audit {} ({} objects judged) in {:.1} s",
            self.peak as f64 / MIB,
            self.limit as f64 / MIB,
            self.oom_kills,
            if self.finished {
                "finished"
            } else {
                "not finished"
            },
            self.scanned,
            self.took.as_secs_f64()
        )
    }
}

/// Where the scenario runs: the bench's cluster, a client of it and the runtime it is driven
/// from.
pub struct World<'a> {
    /// The cluster.
    pub cluster: &'a Cluster,
    /// Its admin's client.
    pub client: &'a kube::Client,
    /// The runtime the client runs on.
    pub runtime: &'a tokio::runtime::Runtime,
}

/// The kanon measured.
pub struct Auditor<'a> {
    /// Its binary (`kanon`, built as the bench measures it).
    pub binary: &'a str,
    /// The memory limit it runs under, in bytes (the chart's, see `chart.rs`).
    pub limit: u64,
    /// Where its audit Lease lives (created if missing).
    pub namespace: &'a str,
    /// Arguments after the chart's audit settings.
    pub args: &'a [&'a str],
    /// How long its audit may take before the scenario gives up waiting.
    pub within: Duration,
}

/// Creates `objects` (those missing) and a ClusterValidatePolicy selecting them in `world`,
/// and runs `auditor` as `kanon serve` under its memory limit with the chart's audit settings,
/// until its first audit finishes, the kernel kills it, or its time is up. Stops kanon and
/// deletes the policy before returning; the objects stay (a second run reuses them).
pub fn audit_of_large_objects(
    world: &World,
    auditor: &Auditor,
    objects: &LargeObjects,
) -> Result<AuditFigures> {
    let World {
        cluster,
        client,
        runtime,
    } = world;
    let kanon_namespace = auditor.namespace;
    for namespace in [&objects.namespace, &kanon_namespace.to_string()] {
        cluster.apply(&json!({"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": namespace}}))?;
    }
    runtime.block_on(create_objects(client, objects))?;
    let policy = "tenant-large-objects";
    cluster.apply(&json!({
        "apiVersion": "policy.kanon.dev/v1alpha1", "kind": "ClusterValidatePolicy",
        "metadata": {"name": policy},
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap",
                                   "namespace": objects.namespace}],
            "validationActions": ["Audit"],
            "validateRules": [{"cel": {"validations": [{
                "expression": "!has(object.data) || !('debug' in object.data)",
                "message": "debug must be off",
            }]}}],
        },
    }))?;
    let mut kanon = cluster
        .kanon(auditor.binary, "tenant-auditor")?
        .with_memory_limit(auditor.limit)?;
    kanon.args = [
        "--no-status",
        "--namespace",
        kanon_namespace,
        "--audit-identity",
        "tenant-auditor",
        // The chart's audit settings (values.yaml), but one audit only.
        "--audit-interval",
        "0",
        "--audit-qps",
        "10",
        "--audit-cpu",
        "0.05",
        "--audit-page-size",
        "500",
        "--report-max-results",
        "1000",
    ]
    .iter()
    .chain(auditor.args)
    .map(|a| a.to_string())
    .collect();
    // A Lease left by an earlier run says its audit finished: this kanon would wait for the
    // next policy change.
    cluster.kubectl(&[
        "delete",
        "lease",
        "kanon-audit",
        "-n",
        kanon_namespace,
        "--ignore-not-found",
    ])?;
    let started = Instant::now();
    let figures = watch_audit(&mut kanon, auditor.limit, started, auditor.within);
    kanon.stop();
    let _ = cluster.kubectl(&[
        "delete",
        "clustervalidatepolicy",
        policy,
        "--ignore-not-found",
    ]);
    figures
}

/// Waits for the first audit to finish or kanon to die; the figures.
fn watch_audit(
    kanon: &mut Kanon,
    limit: u64,
    started: Instant,
    within: Duration,
) -> Result<AuditFigures> {
    kanon.start()?;
    let (mut finished, mut scanned) = (false, 0);
    while started.elapsed() < within {
        if !kanon.running() {
            break;
        }
        if let Ok(metrics) = kanon.metrics() {
            scanned = metric(&metrics, "kanon_audit_objects_scanned_total ").unwrap_or(scanned);
            if metric(&metrics, "kanon_audits_total{outcome=\"finished\"}").unwrap_or(0) >= 1 {
                finished = true;
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let took = started.elapsed();
    let memory = kanon.memory().context("kanon runs under a memory limit")?;
    Ok(AuditFigures {
        limit,
        peak: memory.peak()?,
        oom_kills: memory.oom_kills()?,
        finished,
        scanned,
        took,
    })
}

/// The value of the sample line starting with `prefix`.
fn metric(metrics: &str, prefix: &str) -> Option<u64> {
    metrics
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<f64>().ok())
        .map(|n| n as u64)
}

/// Creates the ConfigMaps that do not exist yet, four at a time.
async fn create_objects(client: &kube::Client, objects: &LargeObjects) -> Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &objects.namespace);
    let blob = "x".repeat(objects.bytes);
    let mut pending = tokio::task::JoinSet::new();
    for i in 0..objects.count {
        let config_map: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": format!("large-{i:04}"), "namespace": objects.namespace},
            "data": {"blob": blob},
        }))?;
        let api = api.clone();
        pending.spawn(async move {
            match api.create(&PostParams::default(), &config_map).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
                Err(error) => Err(anyhow::anyhow!("{error:?}")),
            }
        });
        while pending.len() >= 4 {
            if let Some(done) = pending.join_next().await {
                done?.context("creating a large ConfigMap")?;
            }
        }
    }
    while let Some(done) = pending.join_next().await {
        done?.context("creating a large ConfigMap")?;
    }
    let listed = api.list_metadata(&Default::default()).await?.items.len();
    if listed < objects.count {
        bail!(
            "{listed} ConfigMaps in {}, not {}",
            objects.namespace,
            objects.count
        );
    }
    Ok(())
}
