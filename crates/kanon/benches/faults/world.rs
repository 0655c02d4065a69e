//! The world: the kit's cluster with kanon, the hanging lookup target, and what `/proc` says
//! about kanon; all of it stopped in order when dropped.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use kanon_control_plane::kanon::{self as kit, Cluster, Kanon, policy_resource};
use kanon_control_plane::{ControlPlane, Options};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::Value;

use crate::policies::{patched_labels, pod, review};
use crate::{FIRST_A, FIRST_B, LABEL_A, LABEL_B, NS, WEBHOOKS};

pub(crate) use kanon_control_plane::kanon::{
    ProcessSample as ProcSample, process_sample as proc_sample,
};

/// A TCP server on 127.0.0.1 that accepts connections and never answers (nor closes them).
pub(crate) struct HangServer {
    pub(crate) port: u16,
    pub(crate) accepted: Arc<AtomicU64>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) thread: Option<std::thread::JoinHandle<()>>,
}

impl HangServer {
    pub(crate) fn start() -> Result<HangServer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let accepted = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (count, stopped) = (accepted.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        count.fetch_add(1, Ordering::Relaxed);
                        held.push(stream);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            // Dropping `held` closes every connection.
        });
        Ok(HangServer {
            port,
            accepted,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for HangServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Everything started, stopped in the right order when dropped (on failure too): the load's
/// tasks, the webhooks, kanon, the hanging server, the control plane.
pub(crate) struct World {
    pub(crate) runtime: tokio::runtime::Runtime,
    pub(crate) client: kube::Client,
    pub(crate) kanon: Option<Kanon>,
    pub(crate) hang: Option<HangServer>,
    pub(crate) webhooks: bool,
    /// The values the label policies `faults-a` and `faults-b` give now.
    pub(crate) current_values: (String, String),
    /// Last: stopped after kanon.
    pub(crate) cluster: Cluster,
}

impl World {
    pub(crate) fn start() -> Result<World> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        // kubectl must not hang on a stopped apiserver.
        let cluster = Cluster::start("faults", Options::default())?
            .with_request_timeout(Duration::from_secs(20));
        let runtime = kit::runtime()?;
        let client = runtime.block_on(cluster.client())?;
        Ok(World {
            runtime,
            client,
            kanon: None,
            hang: None,
            webhooks: false,
            current_values: (FIRST_A.to_string(), FIRST_B.to_string()),
            cluster,
        })
    }

    pub(crate) fn control_plane(&self) -> &ControlPlane {
        self.cluster.control_plane()
    }

    pub(crate) fn control_plane_mut(&mut self) -> &mut ControlPlane {
        self.cluster.control_plane_mut()
    }

    pub(crate) fn kanon(&self) -> &Kanon {
        self.kanon.as_ref().expect("kanon")
    }

    pub(crate) fn kanon_mut(&mut self) -> &mut Kanon {
        self.kanon.as_mut().expect("kanon")
    }

    /// `kanon serve` on fixed ports and a fixed certificate directory, so that it can be
    /// killed and started again behind the same webhook configurations; one log per life.
    pub(crate) fn new_kanon(&self) -> Result<Kanon> {
        Ok(self
            .cluster
            .kanon(env!("CARGO_BIN_EXE_kanon"), "kanon")?
            .with_settings(&["--http-allow-cidr", "127.0.0.1/32"])
            .with_log_per_start()
            .with_probe_timeout(Duration::from_secs(2)))
    }

    /// kanon's metrics text (empty when it does not answer).
    pub(crate) fn kanon_metrics(&self) -> String {
        self.kanon().metrics().unwrap_or_default()
    }

    pub(crate) fn apply(&self, document: &Value) -> Result<()> {
        self.cluster.apply(document)
    }

    pub(crate) fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }

    pub(crate) fn policy_api(&self, kind: &str) -> Result<Api<DynamicObject>> {
        Ok(Api::all_with(self.client.clone(), &policy_resource(kind)?))
    }

    /// Server-side applies a policy document, retrying for up to `within` (the apiserver may
    /// just be coming back); when the successful write started.
    pub(crate) fn apply_policy(&self, document: &Value, within: Duration) -> Result<Instant> {
        let kind = document["kind"].as_str().unwrap_or_default();
        let name = document["metadata"]["name"].as_str().unwrap_or_default();
        let api = self.policy_api(kind)?;
        let params = PatchParams::apply("kanon-faults").force();
        let deadline = Instant::now() + within;
        loop {
            let started = Instant::now();
            let result = self.runtime.block_on(async {
                tokio::time::timeout(
                    Duration::from_secs(10),
                    api.patch(name, &params, &Patch::Apply(document)),
                )
                .await
            });
            match result {
                Ok(Ok(_)) => return Ok(started),
                Ok(Err(error)) if Instant::now() < deadline => {
                    eprintln!("faults: applying {kind} {name}: {error}; retrying");
                }
                Err(_) if Instant::now() < deadline => {
                    eprintln!("faults: applying {kind} {name}: timed out; retrying");
                }
                Ok(Err(error)) => return Err(error).context(format!("applying {kind} {name}")),
                Err(_) => bail!("applying {kind} {name}: timed out"),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub(crate) fn delete_policy(&self, kind: &str, name: &str) -> Result<()> {
        let api = self.policy_api(kind)?;
        self.runtime
            .block_on(api.delete(name, &DeleteParams::default()))?;
        Ok(())
    }

    /// Waits until the policy's status shows `Ready=True` for its current generation.
    pub(crate) fn wait_policy_ready(&self, kind: &str, name: &str) -> Result<()> {
        let api = self.policy_api(kind)?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(object) = self.runtime.block_on(api.get(name))
                && kit::policy_in_force(&serde_json::to_value(&object)?)?
            {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "{kind} {name} not ready within 60 s; kanon's log:\n{}",
                self.kanon().log_tail(30)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The labels of a server-side dry-run create of a bench Pod (an error when refused).
    pub(crate) fn dry_run_labels(&self) -> Result<BTreeMap<String, String>> {
        let params = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let labels = BTreeMap::from([("app".to_string(), "bench".to_string())]);
        let probe: Pod = serde_json::from_value(pod("probe", &labels))?;
        let created = self.runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(10), self.pods().create(&params, &probe)).await
        })??;
        Ok(created.metadata.labels.unwrap_or_default())
    }

    /// Repeats dry-run creates (5 ms apart, errors retried) until one shows `label: value`;
    /// when that answer came.
    pub(crate) fn wait_label(&self, label: &str, value: &str, within: Duration) -> Result<Instant> {
        let deadline = Instant::now() + within;
        let mut last;
        loop {
            match self.dry_run_labels() {
                Ok(labels) if labels.get(label).map(String::as_str) == Some(value) => {
                    return Ok(Instant::now());
                }
                Ok(labels) => last = format!("{labels:?}"),
                Err(error) => last = format!("{error:#}"),
            }
            ensure!(
                Instant::now() < deadline,
                "{label}={value} not in force within {within:?} (last: {last})"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The webhook configurations: Pods in the bench namespace only, `Fail`,
    /// [`WEBHOOK_TIMEOUT_SECS`].
    pub(crate) fn webhook_configurations(&self) -> Result<(Value, Value)> {
        self.kanon()
            .pod_webhook_configurations(WEBHOOKS, "faults.kanon.dev", NS)
    }

    pub(crate) fn register_webhooks(&mut self) -> Result<()> {
        let (mutating, validating) = self.webhook_configurations()?;
        self.webhooks = true;
        self.apply(&mutating)?;
        self.apply(&validating)?;
        self.wait_label(LABEL_A, FIRST_A, Duration::from_secs(30))?;
        Ok(())
    }

    pub(crate) fn delete_webhooks(&mut self) -> Result<()> {
        if self.webhooks {
            self.cluster.delete_webhook_configurations(WEBHOOKS)?;
            self.webhooks = false;
        }
        Ok(())
    }

    /// Deletes the Pods matching `selector` (never the forbidden ones: an admitted forbidden
    /// Pod stays for the final count), without waiting.
    pub(crate) fn delete_pods(&self, selector: &str) -> Result<()> {
        let params = ListParams::default().labels(&format!("{selector},!forbidden"));
        self.runtime.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(30),
                self.pods()
                    .delete_collection(&DeleteParams::default(), &params),
            )
            .await
        })??;
        Ok(())
    }

    /// The stored Pods labelled `forbidden=yes`.
    pub(crate) fn forbidden_stored(&self) -> Result<Vec<String>> {
        let list = self.runtime.block_on(
            self.pods()
                .list_metadata(&ListParams::default().labels("forbidden=yes")),
        )?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect())
    }

    /// A client for kanon's HTTPS port (its CA only).
    pub(crate) fn kanon_client(&self) -> Result<reqwest::Client> {
        Ok(reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(&self.kanon().ca_pem()?)?])
            .http1_only()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()?)
    }

    /// `count` reviews POSTed straight to kanon's `/mutate`, 50 ms apart: how many were
    /// allowed with the labels `faults-a` and `faults-b`, and the latencies.
    pub(crate) fn direct_reviews(&self, count: usize) -> Result<(usize, Vec<Duration>, String)> {
        let client = self.kanon_client()?;
        let url = self.kanon().url("/mutate?timeout=5s");
        Ok(self.runtime.block_on(async {
            let mut good = 0;
            let mut latencies = Vec::new();
            let mut last_error = String::new();
            for n in 0..count {
                let body = review(&format!("direct-{n}"), false).to_string();
                let started = Instant::now();
                let answer = async {
                    let response = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await?;
                    anyhow::Ok(response.bytes().await?)
                }
                .await;
                latencies.push(started.elapsed());
                match answer.and_then(|bytes| patched_labels(&bytes)) {
                    Ok(labels) if labels.contains_key(LABEL_A) && labels.contains_key(LABEL_B) => {
                        good += 1
                    }
                    Ok(labels) => last_error = format!("labels {labels:?}"),
                    Err(error) => last_error = format!("{error:#}"),
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (good, latencies, last_error)
        }))
    }

    pub(crate) fn kanon_sample(&self) -> Option<ProcSample> {
        self.kanon().pid().and_then(proc_sample)
    }

    /// Whether kube-apiserver answers `/readyz`.
    pub(crate) fn apiserver_ready(&self) -> bool {
        self.control_plane()
            .kubectl()
            .args(["get", "--raw", "/readyz", "--request-timeout=2s"])
            .output()
            .is_ok_and(|o| o.status.success())
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Err(error) = self.delete_webhooks() {
            eprintln!("faults: deleting the webhooks: {error:#}");
        }
        if let Some(mut kanon) = self.kanon.take() {
            kanon.stop_reporting("faults");
            if let Some(dir) = std::env::var_os("FAULTS_KEEP_LOGS") {
                let _ = std::fs::create_dir_all(&dir);
                for log in kanon.logs() {
                    if let Some(name) = log.file_name() {
                        let _ = std::fs::copy(log, Path::new(&dir).join(name));
                    }
                }
            }
        }
        self.hang = None;
    }
}
