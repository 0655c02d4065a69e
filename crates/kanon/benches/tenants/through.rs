//! `cel-through` (issue 34, finding 2, through kube-apiserver): the `cel` phase's tenant policy
//! and flood, with kube-apiserver calling kanon as a cluster does.
//!
//! kanon runs as the chart runs it (`Run`: its flags, its memory limit) against the bench's
//! cluster, with the tenant's ValidatePolicy of [`cel`] in force and one validating webhook for
//! Pods and ConfigMaps created in the two namespaces. Two phases, as in [`cel`]: idle, then
//! [`cel::FLOOD`] clients keeping the tenant's Pod dry runs in flight through the apiserver.
//! Throughout, a client of its own (its thread, its runtime, nice -10) creates ConfigMaps of the
//! other namespace as dry runs one after another, about every 20 ms, on a keep-alive connection
//! to the apiserver, as another team's deploys would: their latency gives p50 and p99 per
//! phase; a dry run refused or slower than the webhook's timeout is lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kanon_control_plane::kanon::{
    self as kit, Cluster, namespaces_named, validating_configuration,
};
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio::time::{Instant, sleep};

use crate::cel::{self, CelFigures, Latency, OTHER, TENANT};
use crate::world::{Run, Tenant};

/// The webhook configuration's name.
const CONFIGURATION: &str = "tenants-cel-through";
/// The webhook's timeout: a dry run slower than this failed under `Fail`.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between two measured dry runs.
const PACE: Duration = Duration::from_millis(20);

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

/// Runs the measurement (see the module's doc).
pub(crate) fn tenant_cel_through(
    cluster: &Cluster,
    run: &Run,
    phase: Duration,
) -> Result<CelFigures> {
    cluster.pod_namespace(TENANT)?;
    cluster
        .apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OTHER}}))?;
    let tenant = Tenant::start(cluster, run, &cel::tenant_policy())?;
    let rules = json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                        "resources": ["pods", "configmaps"], "scope": "Namespaced"}]);
    let webhook = tenant.kanon.webhook(
        "validate.tenants.kanon.dev",
        "/validate",
        rules,
        namespaces_named(&[TENANT, OTHER]),
    )?;
    cluster.apply(&validating_configuration(CONFIGURATION, vec![webhook]))?;

    let measured = measure_phases(cluster, phase);
    cluster.delete_webhook_configurations(CONFIGURATION)?;
    tenant.stop(cluster)?;
    measured
}

fn measure_phases(cluster: &Cluster, phase: Duration) -> Result<CelFigures> {
    // The measuring client and the flood on runtimes (and clients) of their own.
    let measuring = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let flooding = kit::runtime()?;
    let measurer = measuring.block_on(cluster.client())?;
    let flooder = flooding.block_on(cluster.client())?;
    let pods: Api<Pod> = Api::namespaced(flooder, TENANT);

    // Until the apiserver calls kanon: a Pod of the tenant is denied by its policy.
    flooding.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let denied = pods.create(&dry_run(), &pod("probe")).await.err();
            if denied.is_some_and(|e| e.to_string().contains("cost budget")) {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "the apiserver does not call kanon for the tenant's Pods"
            );
            sleep(Duration::from_millis(200)).await;
        }
    })?;

    let configmaps: Api<ConfigMap> = Api::namespaced(measurer, OTHER);
    let measure = |label: &str| {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    cel::raise_priority();
                    measuring.block_on(other_namespace(&configmaps, label, phase))
                })
                .join()
        })
        .map_err(|_| anyhow::anyhow!("the measuring thread panicked"))
    };
    let idle = measure("idle")?;

    let stop = Arc::new(AtomicBool::new(false));
    let (answered, denied) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let flood: Vec<_> = (0..cel::FLOOD)
        .map(|client| {
            let (pods, stop) = (pods.clone(), stop.clone());
            let (answered, denied) = (answered.clone(), denied.clone());
            flooding.spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let result = pods
                        .create(&dry_run(), &pod(&format!("tenant-{client}-{n}")))
                        .await;
                    answered.fetch_add(1, Ordering::Relaxed);
                    if result.is_err_and(|e| e.to_string().contains("cost budget")) {
                        denied.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    // The flood has the evaluation busy before the measurement starts.
    std::thread::sleep(Duration::from_secs(1));
    let under_flood = measure("flood");
    stop.store(true, Ordering::Relaxed);
    for task in flood {
        task.abort();
    }
    Ok(CelFigures {
        idle,
        flood: under_flood?,
        tenant_answered: answered.load(Ordering::Relaxed),
        tenant_denied: denied.load(Ordering::Relaxed),
    })
}

/// The other namespace's ConfigMap dry runs for `phase`, one after another.
async fn other_namespace(configmaps: &Api<ConfigMap>, label: &str, phase: Duration) -> Latency {
    let end = Instant::now() + phase;
    let (mut times, mut lost, mut n) = (Vec::new(), 0, 0);
    while Instant::now() < end {
        n += 1;
        let configmap = configmap(&format!("{label}-{n}"));
        let started = Instant::now();
        let created =
            tokio::time::timeout(WEBHOOK_TIMEOUT, configmaps.create(&dry_run(), &configmap)).await;
        match created {
            Ok(Ok(_)) => times.push(started.elapsed()),
            _ => lost += 1,
        }
        sleep(PACE).await;
    }
    Latency::of(times, lost)
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": TENANT},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
    }))
    .unwrap_or_default()
}

fn configmap(name: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": OTHER}, "data": {"key": "value"},
    }))
    .unwrap_or_default()
}
