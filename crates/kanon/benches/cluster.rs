//! kanon in a real cluster: what it costs a Pod create, how fast a policy change takes effect,
//! what a lookup costs a review, cache hit and miss, and kanon's CEL rules against the same rules
//! as ValidatingAdmissionPolicies.
//!
//! Starts etcd, kube-apiserver and kube-controller-manager 1.35 on 127.0.0.1
//! (`kanon-control-plane`), installs `crds/`, runs `kanon serve --kubeconfig ...` (this
//! package's release binary) and then measures:
//!
//! 1. **Pod creates through the apiserver at a fixed rate**, with no webhook registered and with
//!    kanon's mutating and validating webhooks registered (Pods only, in the bench namespace,
//!    `failurePolicy: Fail`, `timeoutSeconds: 5`) while 100 ClusterOverridePolicies (10 of them
//!    select the Pods, each adds a label with a `labels` template) and 2 ClusterValidatePolicies
//!    (a `condition` each) are in force. Creates are started on a fixed schedule (they do not
//!    wait for each other) and each latency is measured from its scheduled start; the two
//!    configurations alternate (without, with, without, with, ...) so that noise hits both. Every
//!    Pod created with kanon must come back with the 10 labels.
//! 2. **Policy change → effect**: one of the 10 policies gets a new label value (server-side
//!    apply), then server-side dry-run creates are repeated until a Pod comes back with it; and
//!    the same again, polling kanon's `/mutate` directly every millisecond (finer resolution).
//! 3. **Review latency with lookups**: AdmissionReviews POSTed straight to kanon's `/mutate`
//!    over HTTPS (HTTP/1.1 keep-alive, one request at a time) for Pods whose policy takes a
//!    label from a `k8s` reference (a ConfigMap by name), from an `http` reference (a small
//!    HTTP service in this process), or from a constant (no lookup). Each is sent to a kanon
//!    with the default caches (`--object-cache-ttl-ms 5000`, `--http-cache-ttl-ms 10000`: hits
//!    after the first) and to a second kanon with both at 0 (every lookup a miss).
//! 4. **CEL through the apiserver** (issue 19 §5): 10 CEL rules that all hold for the bench Pod
//!    (memory and CPU limits, memory at most 1Gi, image registry and tag, a `team` label, no
//!    host namespaces, runAsNonRoot, no privilege escalation, no hostPath), each written once as
//!    a ValidatingAdmissionPolicy with its binding (the apiserver's own CEL) and once as a kanon
//!    ClusterValidatePolicy with `cel.validations` behind kanon's validating webhook; Pod CREATEs
//!    in a namespace of their own. Three configurations alternate (no policy, the 10 VAPs,
//!    kanon's webhook with its 10 policies; the order rotated every round): in each, N clients
//!    (`KANON_BENCH_CEL_CLIENTS`, default 8) create Pods in a closed loop, each the next as soon
//!    as the previous is answered, which gives the throughput at saturation (creates/s) and the
//!    latency at that load. Before and after each round a Pod violating each rule alone is
//!    refused by that rule (or, without policies, admitted); every create must be admitted and
//!    stored, and kanon must have evaluated each of its policies once per Pod.
//!
//! Run: `cargo bench -p kanon --bench cluster` (about 7.5 minutes; results in BENCHMARKS.md), or
//! `cargo bench -p kanon --bench cluster -- --quick` (or `KANON_BENCH_QUICK=1`) for a short run.
//! `KANON_BENCH_DUMP=FILE` also writes every sample (milliseconds) to FILE as JSON;
//! `KANON_BENCH_CEL_CLIENTS=N` sets part 4's concurrent clients (default 8);
//! `KANON_BENCH_APISERVER_PROFILE=DIR` writes kube-apiserver's CPU profile of each part-4 round
//! to DIR.
//! The first run of the control plane's toolchain builds it (see the README).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use base64::Engine as _;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kanon_control_plane::kanon::{
    self as kit, Cluster, Kanon, output_text as text, policy_resource, repo,
};
use kanon_control_plane::{ControlPlane, Options};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The namespace of the Pods created through the apiserver.
const PODS_NS: &str = "bench-pods";

/// The name of kanon's webhook configurations for the bench Pods.
const WEBHOOKS: &str = "kanon-bench";

/// Policies that select the bench Pods (each adds one label), out of [`COPS`].
const MATCHING: usize = 10;

/// ClusterOverridePolicies installed.
const COPS: usize = 100;

/// Part 4's concurrent clients, unless `KANON_BENCH_CEL_CLIENTS` says otherwise.
const CEL_CLIENTS: usize = 8;

/// How long and how hard each part runs.
struct Settings {
    /// Pod creates per second.
    rate: u32,
    /// Seconds of creates before each measured round (not counted).
    warmup_secs: u32,
    /// Seconds of measured creates per round.
    round_secs: u32,
    /// Pairs of rounds (without kanon, with kanon).
    pairs: usize,
    /// Policy changes measured.
    change_samples: usize,
    /// Rounds over the review cases, and reviews per case and round.
    review_rounds: usize,
    reviews_per_round: usize,
    /// Part 4: concurrent clients (closed loop), seconds of warm-up and measured seconds per
    /// round, rounds (each over the three configurations).
    cel_clients: usize,
    cel_warmup_secs: u32,
    cel_round_secs: u32,
    cel_rounds: usize,
}

impl Settings {
    fn from_args() -> Settings {
        let quick = std::env::args().any(|a| a == "--quick")
            || std::env::var("KANON_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let cel_clients = std::env::var("KANON_BENCH_CEL_CLIENTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(CEL_CLIENTS);
        if quick {
            Settings {
                rate: 50,
                warmup_secs: 1,
                round_secs: 5,
                pairs: 1,
                change_samples: 5,
                review_rounds: 2,
                reviews_per_round: 100,
                cel_clients,
                cel_warmup_secs: 1,
                cel_round_secs: 3,
                cel_rounds: 1,
            }
        } else {
            Settings {
                rate: 50,
                warmup_secs: 2,
                round_secs: 20,
                pairs: 2,
                change_samples: 20,
                review_rounds: 4,
                reviews_per_round: 500,
                cel_clients,
                cel_warmup_secs: 2,
                cel_round_secs: 10,
                cel_rounds: 3,
            }
        }
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

// ---------------------------------------------------------------------------------------------
// An HTTP service for `http` references

/// A keep-alive HTTP/1.1 service on 127.0.0.1 that answers every request with
/// `{"tier": "silver"}` and counts the requests.
struct TierService {
    port: u16,
    requests: Arc<AtomicU64>,
}

impl TierService {
    fn start() -> Result<TierService> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let requests = Arc::new(AtomicU64::new(0));
        let counter = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let counter = counter.clone();
                std::thread::spawn(move || answer_connection(stream, &counter));
            }
        });
        Ok(TierService { port, requests })
    }
}

fn answer_connection(stream: TcpStream, counter: &AtomicU64) {
    let _ = stream.set_nodelay(true);
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut stream = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        counter.fetch_add(1, Ordering::Relaxed);
        let answer = r#"{"tier":"silver"}"#;
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if stream.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics

#[derive(Debug, Clone, Copy)]
struct Stats {
    n: usize,
    p50: Duration,
    p90: Duration,
    p99: Duration,
    max: Duration,
}

/// Nearest-rank percentiles of `samples`.
fn stats(samples: &[Duration]) -> Stats {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let n = sorted.len();
    let at = |p: f64| {
        if n == 0 {
            return Duration::ZERO;
        }
        let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
        sorted[rank - 1]
    };
    Stats {
        n,
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        max: at(1.0),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// The median of `values` (the mean of the middle two when there is an even number).
fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut sorted: Vec<f64> = values.collect();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

fn signed_ms(a: Duration, b: Duration) -> String {
    let diff = a.as_secs_f64() - b.as_secs_f64();
    format!("{:+.2} ms", diff * 1e3)
}

// ---------------------------------------------------------------------------------------------
// The cluster

/// A policy document.
fn policy(kind: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": kanon_api::API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "labels": {"bench.kanon.dev/owned": "true"}},
        "spec": spec,
    })
}

/// The `i`-th ClusterOverridePolicy: the first [`MATCHING`] select the bench Pods and add
/// label `bench-p<i>: <value>`; the others select other types.
fn cop(i: usize, value: &str) -> Value {
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
    policy(
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
fn first_value(i: usize) -> String {
    format!("v{i}")
}

/// The two ClusterValidatePolicies on the bench Pods (neither condition holds for them).
fn cvps() -> Vec<Value> {
    let pods = json!([{"apiVersion": "v1", "kind": "Pod", "namespace": PODS_NS}]);
    vec![
        policy(
            "ClusterValidatePolicy",
            "bench-cvp-forbidden",
            json!({"resourceSelectors": pods, "validateRules": [{"template": {"type": "condition",
                "condition": {"cond": "Equal",
                    "dataRef": {"from": "current", "path": "/metadata/labels/forbidden"},
                    "value": {"string": "yes"},
                    "message": "{{ object.metadata.name }} is marked forbidden"}}}]}),
        ),
        policy(
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
fn bench_pod(namespace: &str, name: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.0",
                                 "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}}}]},
    }))?)
}

/// Whether `labels` carry every label of the [`MATCHING`] policies, with `expected(i)` values.
fn has_labels(labels: &BTreeMap<String, String>, expected: impl Fn(usize) -> String) -> bool {
    (0..MATCHING).all(|i| labels.get(&format!("bench-p{i}")) == Some(&expected(i)))
}

/// Everything started, stopped in the right order when dropped: webhooks deleted, then kanon
/// stopped (SIGTERM), then the control plane.
struct World {
    runtime: tokio::runtime::Runtime,
    client: kube::Client,
    kanon: Option<Kanon>,
    kanon_miss: Option<Kanon>,
    webhooks: bool,
    /// Whether part 4's validating webhook configuration may be registered.
    cel_webhook: bool,
    /// Last: stopped after kanon.
    cluster: Cluster,
}

impl World {
    fn start() -> Result<World> {
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

    fn control_plane(&self) -> &ControlPlane {
        self.cluster.control_plane()
    }

    fn kanon(&self) -> &Kanon {
        self.kanon.as_ref().expect("kanon runs")
    }

    /// Starts `kanon serve` (named `name`, with `extra` arguments) and waits for `/readyz`.
    fn start_kanon(&self, name: &str, extra: &[&str]) -> Result<Kanon> {
        let mut kanon = self
            .cluster
            .kanon(env!("CARGO_BIN_EXE_kanon"), name)?
            .with_settings(&["--http-allow-cidr", "127.0.0.1/32"]);
        kanon.args = extra.iter().map(|a| a.to_string()).collect();
        kanon.start()?;
        Ok(kanon)
    }

    /// kubectl with `args`; an error when it fails.
    fn kubectl(&self, args: &[&str]) -> Result<Output> {
        self.cluster.kubectl(args)
    }

    /// `kubectl apply -f -` of `document`.
    fn apply(&self, document: &Value) -> Result<()> {
        self.cluster.apply(document)
    }

    /// Creates a namespace and waits for its `default` ServiceAccount (Pods need it).
    fn namespace(&self, name: &str) -> Result<()> {
        self.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))?;
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), name);
        let deadline = Instant::now() + Duration::from_secs(60);
        while self
            .runtime
            .block_on(accounts.get_opt("default"))?
            .is_none()
        {
            ensure!(
                Instant::now() < deadline,
                "no default ServiceAccount in {name}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Server-side applies a policy document.
    fn apply_policy(&self, document: &Value) -> Result<()> {
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
    fn wait_policies_ready(&self, kind: &str, count: usize) -> Result<()> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &policy_resource(kind)?);
        let params = ListParams::default().labels("bench.kanon.dev/owned=true");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let list = self.runtime.block_on(api.list(&params))?;
            let mut ready = 0;
            for item in &list.items {
                let value = serde_json::to_value(item)?;
                let generation = value.pointer("/metadata/generation");
                let observed = value.pointer("/status/observedGeneration");
                let condition = value.pointer("/status/conditions/0/status");
                if generation.is_some() && generation == observed {
                    ensure!(
                        condition == Some(&json!("True")),
                        "{kind} is not ready: {value}"
                    );
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
    fn dry_run_labels(&self) -> Result<BTreeMap<String, String>> {
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
    fn webhook_configurations(&self) -> Result<(Value, Value)> {
        let kanon = self.kanon();
        let webhook = |name: &str, path: &str| {
            let rules = kit::pod_rules(&["CREATE", "UPDATE"]);
            kanon.webhook(name, path, rules, kit::namespaces_named(&[PODS_NS]))
        };
        Ok((
            kit::mutating_configuration(
                WEBHOOKS,
                vec![webhook("mutate.bench.kanon.dev", "/mutate")?],
            ),
            kit::validating_configuration(
                WEBHOOKS,
                vec![webhook("validate.bench.kanon.dev", "/validate")?],
            ),
        ))
    }

    /// Registers kanon's webhooks and waits until the apiserver calls them.
    fn register_webhooks(&mut self) -> Result<()> {
        let (mutating, validating) = self.webhook_configurations()?;
        self.webhooks = true;
        self.apply(&mutating)?;
        self.apply(&validating)?;
        self.wait_dry_run("the webhooks in force", |labels| {
            labels.contains_key("bench-p0")
        })
    }

    /// Deletes kanon's webhooks and waits until the apiserver no longer calls them.
    fn unregister_webhooks(&mut self) -> Result<()> {
        self.delete_webhooks()?;
        self.wait_dry_run("the webhooks gone", |labels| {
            !labels.contains_key("bench-p0")
        })
    }

    fn delete_webhooks(&mut self) -> Result<()> {
        if self.webhooks {
            self.cluster.delete_webhook_configurations(WEBHOOKS)?;
            self.webhooks = false;
        }
        Ok(())
    }

    fn wait_dry_run(
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
    fn delete_pods(&self, namespace: &str) -> Result<()> {
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

// ---------------------------------------------------------------------------------------------
// 1. Pod creates at a fixed rate

/// One create: its latency from its scheduled start, and the labels it came back with (or
/// the apiserver's refusal).
struct Create {
    latency: Duration,
    result: Result<BTreeMap<String, String>, String>,
}

/// Creates `count` Pods named `<prefix>-<i>` at `rate` per second, each started on schedule
/// whether or not the ones before have finished.
async fn creates_at_fixed_rate(
    api: Api<Pod>,
    prefix: &str,
    rate: u32,
    count: usize,
) -> Vec<Create> {
    let interval = Duration::from_secs(1) / rate;
    let start = tokio::time::Instant::now() + Duration::from_millis(100);
    let mut tasks = Vec::with_capacity(count);
    for i in 0..count {
        let scheduled = start + interval * i as u32;
        tokio::time::sleep_until(scheduled).await;
        let api = api.clone();
        let pod = bench_pod(PODS_NS, &format!("{prefix}-{i:05}"));
        tasks.push(tokio::spawn(async move {
            let result = match pod {
                Ok(pod) => api
                    .create(&PostParams::default(), &pod)
                    .await
                    .map(|p| p.metadata.labels.unwrap_or_default())
                    .map_err(|e| match e {
                        kube::Error::Api(status) => status.message.clone(),
                        other => other.to_string(),
                    }),
                Err(e) => Err(e.to_string()),
            };
            Create {
                latency: scheduled.elapsed(),
                result,
            }
        }));
    }
    let mut creates = Vec::with_capacity(count);
    for task in tasks {
        creates.push(task.await.unwrap_or_else(|e| Create {
            latency: Duration::MAX,
            result: Err(format!("the task failed: {e}")),
        }));
    }
    creates
}

struct Round {
    with_kanon: bool,
    stats: Stats,
    latencies: Vec<Duration>,
    errors: Vec<String>,
    labelled: usize,
    listed_labelled: usize,
    created: usize,
    load: String,
}

fn pod_round(world: &World, settings: &Settings, number: usize, with_kanon: bool) -> Result<Round> {
    let rate = settings.rate;
    let warmup = (rate * settings.warmup_secs) as usize;
    let measured = (rate * settings.round_secs) as usize;
    let prefix = format!("r{number}");
    let creates = world.runtime.block_on(creates_at_fixed_rate(
        world.pods(PODS_NS),
        &prefix,
        rate,
        warmup + measured,
    ));
    let load = load_average();
    let mut latencies = Vec::with_capacity(measured);
    let mut errors = Vec::new();
    let mut labelled = 0;
    let mut created = 0;
    for (i, create) in creates.iter().enumerate() {
        match &create.result {
            Ok(labels) => {
                created += 1;
                if has_labels(labels, first_value) {
                    labelled += 1;
                }
            }
            Err(message) => errors.push(message.clone()),
        }
        if i >= warmup {
            latencies.push(create.latency);
        }
    }
    // What is stored: listed back from the apiserver.
    let listed = world.runtime.block_on(
        world
            .pods(PODS_NS)
            .list(&ListParams::default().labels("app=bench")),
    )?;
    let listed_labelled = listed
        .items
        .iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .unwrap_or_default()
                .starts_with(&prefix)
                && has_labels(
                    p.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()),
                    first_value,
                )
        })
        .count();
    let stats = stats(&latencies);
    eprintln!(
        "bench: round {number} ({}): {} creates, {} errors, p50 {}, p99 {}, max {}; load {load}",
        if with_kanon { "with kanon" } else { "without" },
        creates.len(),
        errors.len(),
        ms(stats.p50),
        ms(stats.p99),
        ms(stats.max)
    );
    Ok(Round {
        with_kanon,
        stats,
        latencies,
        errors,
        labelled,
        listed_labelled,
        created,
        load,
    })
}

fn pod_creates(world: &mut World, settings: &Settings) -> Result<Vec<Round>> {
    let mut rounds = Vec::new();
    let mut number = 0;
    for _ in 0..settings.pairs {
        for with_kanon in [false, true] {
            number += 1;
            if with_kanon {
                world.register_webhooks()?;
            } else if world.webhooks {
                world.unregister_webhooks()?;
            }
            std::thread::sleep(Duration::from_secs(2));
            rounds.push(pod_round(world, settings, number, with_kanon)?);
            world.delete_pods(PODS_NS)?;
        }
    }
    Ok(rounds)
}

// ---------------------------------------------------------------------------------------------
// 2. Policy change -> effect

struct Changes {
    /// Through the apiserver: from the start of the write to the first dry-run create that
    /// shows the new value.
    through_apiserver: Vec<Duration>,
    /// The write (server-side apply) alone, in that series.
    apply_calls: Vec<Duration>,
    /// Dry-run creates per change (1: the first one after the write already showed it).
    probes: Vec<usize>,
    /// Straight to kanon: from the start of the write to the first `/mutate` answer with the
    /// new value (polled every millisecond).
    direct: Vec<Duration>,
}

fn policy_changes(world: &World, settings: &Settings) -> Result<Changes> {
    let mut changes = Changes {
        through_apiserver: Vec::new(),
        apply_calls: Vec::new(),
        probes: Vec::new(),
        direct: Vec::new(),
    };
    for n in 1..=settings.change_samples {
        let value = format!("change-{n}");
        let written = Instant::now();
        world.apply_policy(&cop(0, &value))?;
        changes.apply_calls.push(written.elapsed());
        let mut count = 0;
        loop {
            count += 1;
            let labels = world.dry_run_labels()?;
            if labels.get("bench-p0") == Some(&value) {
                break;
            }
            ensure!(
                written.elapsed() < Duration::from_secs(10),
                "the change never took effect: {labels:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        changes.through_apiserver.push(written.elapsed());
        changes.probes.push(count);
        std::thread::sleep(Duration::from_millis(300));
    }
    // The same, asking kanon directly: what kanon itself takes, at a finer resolution.
    let kanon = world.kanon();
    let client = review_client(kanon)?;
    let url = kanon.url("/mutate?timeout=10s");
    let body = review(PODS_NS)?;
    world.runtime.block_on(async {
        for n in 1..=settings.change_samples {
            let value = format!("direct-{n}");
            let written = Instant::now();
            let api: Api<DynamicObject> = Api::all_with(
                world.client.clone(),
                &policy_resource("ClusterOverridePolicy")?,
            );
            let document = cop(0, &value);
            api.patch(
                "bench-cop-000",
                &PatchParams::apply("kanon-bench").force(),
                &Patch::Apply(&document),
            )
            .await?;
            loop {
                let answer = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await?
                    .bytes()
                    .await?;
                if patched_label(&answer, "bench-p0")?.as_deref() == Some(value.as_str()) {
                    break;
                }
                ensure!(
                    written.elapsed() < Duration::from_secs(10),
                    "the change never reached kanon"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            changes.direct.push(written.elapsed());
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        anyhow::Ok(())
    })?;
    // Back to the first value.
    world.apply_policy(&cop(0, &first_value(0)))?;
    Ok(changes)
}

// ---------------------------------------------------------------------------------------------
// 3. Review latency with lookups

const LOOKUP_CASES: [(&str, &str); 3] = [
    ("none", "bench-lookup-none"),
    ("k8s", "bench-lookup-k8s"),
    ("http", "bench-lookup-http"),
];

/// The policies of the lookup cases: each gives the Pods of its namespace a `tier` label.
fn lookup_policies(service_port: u16) -> Vec<Value> {
    let pods = |ns: &str| json!([{"apiVersion": "v1", "kind": "Pod", "namespace": ns}]);
    // A `labels` template adding `tier`, with `value` or `valueRef` from `source`.
    let label = |source: Value| {
        let mut template = json!({"type": "labels", "operation": "add", "path": "tier"});
        for (key, value) in source.as_object().into_iter().flatten() {
            template[key] = value.clone();
        }
        json!([{"overriders": {"template": template}}])
    };
    vec![
        policy(
            "ClusterOverridePolicy",
            "bench-lookup-none",
            json!({"resourceSelectors": pods("bench-lookup-none"),
                   "overrideRules": label(json!({"value": {"string": "bronze"}}))}),
        ),
        policy(
            "ClusterOverridePolicy",
            "bench-lookup-k8s",
            json!({"resourceSelectors": pods("bench-lookup-k8s"),
                   "overrideRules": label(json!({"valueRef": {"from": "k8s", "path": "/data/tier",
                       "k8s": {"apiVersion": "v1", "kind": "ConfigMap",
                               "namespace": "{{ object.metadata.namespace }}", "name": "bench-tier"}}}))}),
        ),
        policy(
            "ClusterOverridePolicy",
            "bench-lookup-http",
            json!({"resourceSelectors": pods("bench-lookup-http"),
                   "overrideRules": label(json!({"valueRef": {"from": "http", "path": "/body/tier",
                       "http": {"url": format!("http://127.0.0.1:{service_port}/tier")}}}))}),
        ),
    ]
}

/// The tier each lookup case's Pods get.
fn expected_tier(case: &str) -> &'static str {
    match case {
        "k8s" => "gold",
        "http" => "silver",
        _ => "bronze",
    }
}

/// An AdmissionReview for a Pod CREATE in `namespace` (the fixture kube-apiserver sent).
fn review(namespace: &str) -> Result<Vec<u8>> {
    let path = repo().join("fixtures/admission-reviews/pod-create.json");
    let mut review: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    review["request"]["namespace"] = json!(namespace);
    review["request"]["object"]["metadata"]["namespace"] = json!(namespace);
    Ok(serde_json::to_vec(&review)?)
}

/// The value a `/mutate` answer's patch gives label `key`, if any (an error when the review is
/// not allowed).
fn patched_label(body: &[u8], key: &str) -> Result<Option<String>> {
    let answer: Value = serde_json::from_slice(body)?;
    let response = &answer["response"];
    ensure!(response["allowed"] == true, "not allowed: {answer}");
    let Some(patch) = response["patch"].as_str() else {
        return Ok(None);
    };
    let patch: Value =
        serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(patch)?)?;
    let path = format!("/metadata/labels/{key}");
    Ok(patch
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|op| {
            if op["path"] == path.as_str() {
                op["value"].as_str()
            } else if op["path"] == "/metadata/labels" {
                op["value"][key].as_str()
            } else {
                None
            }
        })
        .map(str::to_string))
}

/// Whether a `/mutate` answer allows the Pod and patches the `tier` label to `tier`.
fn check_answer(body: &[u8], tier: &str) -> Result<()> {
    let labelled = patched_label(body, "tier")?;
    ensure!(
        labelled.as_deref() == Some(tier),
        "tier={tier} expected in the patch, got {labelled:?}"
    );
    Ok(())
}

/// A client for `kanon`'s HTTPS port: its CA only, HTTP/1.1, keep-alive.
fn review_client(kanon: &Kanon) -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&kanon.ca_pem()?)?])
        .http1_only()
        .no_proxy()
        .build()?)
}

/// `count` reviews, one at a time; the latency of each (request sent → answer read).
async fn reviews(
    client: &reqwest::Client,
    url: &str,
    body: &[u8],
    tier: &str,
    count: usize,
) -> Result<Vec<Duration>> {
    let mut latencies = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        let response = client
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_vec())
            .send()
            .await?;
        let status = response.status();
        let answer = response.bytes().await?;
        latencies.push(started.elapsed());
        ensure!(status.is_success(), "HTTP {status}: {answer:?}");
        check_answer(&answer, tier)?;
    }
    Ok(latencies)
}

/// One value of a Prometheus text exposition: the line `name{...}` with every label of
/// `labels`.
fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

struct LookupResults {
    /// (case, cache) → latencies.
    latencies: BTreeMap<(String, &'static str), Vec<Duration>>,
    /// Metrics of the kanon with caches, and of the one without.
    metrics_hit: String,
    metrics_miss: String,
    service_requests: u64,
}

fn lookups(world: &mut World, settings: &Settings) -> Result<LookupResults> {
    let service = TierService::start()?;
    for (_, ns) in LOOKUP_CASES {
        world.namespace(ns)?;
    }
    world.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "bench-tier", "namespace": "bench-lookup-k8s"},
        "data": {"tier": "gold"}}))?;
    for document in lookup_policies(service.port) {
        world.apply_policy(&document)?;
    }
    world.wait_policies_ready("ClusterOverridePolicy", COPS + LOOKUP_CASES.len())?;
    // The second kanon: no caches, no status writes (the first one writes them).
    let miss = world.start_kanon(
        "kanon-no-cache",
        &[
            "--object-cache-ttl-ms",
            "0",
            "--http-cache-ttl-ms",
            "0",
            "--no-status",
        ],
    )?;
    world.kanon_miss = Some(miss);
    let hit_kanon = world.kanon();
    let miss_kanon = world.kanon_miss.as_ref().context("the second kanon")?;
    let servers: [(&'static str, &Kanon, reqwest::Client); 2] = [
        ("hit", hit_kanon, review_client(hit_kanon)?),
        ("miss", miss_kanon, review_client(miss_kanon)?),
    ];
    let bodies: Vec<Vec<u8>> = LOOKUP_CASES
        .iter()
        .map(|(_, ns)| review(ns))
        .collect::<Result<_>>()?;
    let mut latencies: BTreeMap<(String, &'static str), Vec<Duration>> = BTreeMap::new();
    world.runtime.block_on(async {
        // Warm-up: connections, caches (for "hit"), the apiserver's and the service's side.
        for ((case, _), body) in LOOKUP_CASES.iter().zip(&bodies) {
            for (_, kanon, client) in &servers {
                let url = kanon.url("/mutate?timeout=10s");
                reviews(client, &url, body, expected_tier(case), 50).await?;
            }
        }
        for round in 0..settings.review_rounds {
            for ((case, _), body) in LOOKUP_CASES.iter().zip(&bodies) {
                for (cache, kanon, client) in &servers {
                    let url = kanon.url("/mutate?timeout=10s");
                    let mut taken = reviews(
                        client,
                        &url,
                        body,
                        expected_tier(case),
                        settings.reviews_per_round,
                    )
                    .await?;
                    let s = stats(&taken);
                    eprintln!(
                        "bench: reviews round {}, lookup {case}, cache {cache}: p50 {}, p99 {}",
                        round + 1,
                        ms(s.p50),
                        ms(s.p99)
                    );
                    latencies
                        .entry((case.to_string(), cache))
                        .or_default()
                        .append(&mut taken);
                }
            }
        }
        anyhow::Ok(())
    })?;
    Ok(LookupResults {
        latencies,
        metrics_hit: world.kanon().metrics()?,
        metrics_miss: miss_kanon.metrics()?,
        service_requests: service.requests.load(Ordering::Relaxed),
    })
}

// ---------------------------------------------------------------------------------------------
// 4. CEL through the apiserver: ValidatingAdmissionPolicies against kanon's CEL rules

/// The namespace of the Pods created in part 4.
const CEL_NS: &str = "bench-cel";

/// kanon's validating webhook configuration in part 4, and its webhook.
const CEL_WEBHOOK: &str = "kanon-bench-cel";
const CEL_WEBHOOK_NAME: &str = "validate-cel.bench.kanon.dev";

/// One of the 10 rules: a CEL validation that holds for [`cel_pod`], and how to change that Pod
/// so that this rule alone fails.
struct CelRule {
    name: &'static str,
    expression: &'static str,
    violate: fn(&mut Value),
}

/// The 10 rules, each installed once as a ValidatingAdmissionPolicy with its binding and once as
/// a kanon ClusterValidatePolicy.
const CEL_RULES: [CelRule; 10] = [
    CelRule {
        name: "memory-limit",
        expression: "object.spec.containers.all(c, has(c.resources) && has(c.resources.limits) \
                     && 'memory' in c.resources.limits)",
        violate: |pod| {
            pod["spec"]["containers"][0]["resources"]["limits"]
                .as_object_mut()
                .map(|limits| limits.remove("memory"));
        },
    },
    CelRule {
        name: "cpu-limit",
        expression: "object.spec.containers.all(c, has(c.resources) && has(c.resources.limits) \
                     && 'cpu' in c.resources.limits)",
        violate: |pod| {
            pod["spec"]["containers"][0]["resources"]["limits"]
                .as_object_mut()
                .map(|limits| limits.remove("cpu"));
        },
    },
    CelRule {
        name: "memory-at-most-1gi",
        expression: "object.spec.containers.all(c, !has(c.resources) || !has(c.resources.limits) \
                     || !('memory' in c.resources.limits) \
                     || quantity(c.resources.limits.memory).compareTo(quantity('1Gi')) <= 0)",
        violate: |pod| pod["spec"]["containers"][0]["resources"]["limits"]["memory"] = json!("2Gi"),
    },
    CelRule {
        name: "image-registry",
        expression: "object.spec.containers.all(c, c.image.startsWith('registry.example/'))",
        violate: |pod| pod["spec"]["containers"][0]["image"] = json!("docker.io/library/app:1.0"),
    },
    CelRule {
        name: "image-tag",
        expression: "object.spec.containers.all(c, c.image.contains(':') \
                     && !c.image.endsWith(':latest'))",
        violate: |pod| pod["spec"]["containers"][0]["image"] = json!("registry.example/app:latest"),
    },
    CelRule {
        name: "team-label",
        expression: "has(object.metadata.labels) && 'team' in object.metadata.labels \
                     && object.metadata.labels.team.matches('^[a-z][a-z0-9-]*$')",
        violate: |pod| pod["metadata"]["labels"]["team"] = json!("Platform"),
    },
    CelRule {
        name: "no-host-namespaces",
        expression: "!object.spec.?hostNetwork.orValue(false) && !object.spec.?hostPID.orValue(false) \
                     && !object.spec.?hostIPC.orValue(false)",
        violate: |pod| pod["spec"]["hostNetwork"] = json!(true),
    },
    CelRule {
        name: "run-as-non-root",
        expression: "object.spec.?securityContext.?runAsNonRoot.orValue(false) \
                     || object.spec.containers.all(c, c.?securityContext.?runAsNonRoot.orValue(false))",
        violate: |pod| pod["spec"]["securityContext"]["runAsNonRoot"] = json!(false),
    },
    CelRule {
        name: "no-privilege-escalation",
        expression: "object.spec.containers.all(c, \
                     !c.?securityContext.?allowPrivilegeEscalation.orValue(true) \
                     && !c.?securityContext.?privileged.orValue(false))",
        violate: |pod| {
            pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] =
                json!(true)
        },
    },
    CelRule {
        name: "no-host-path",
        expression: "!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.hostPath))",
        violate: |pod| {
            pod["spec"]["volumes"] = json!([{"name": "host", "hostPath": {"path": "/tmp"}}]);
        },
    },
];

/// The message of a rule's validation (the same in the VAP and in kanon's policy).
fn cel_message(rule: &CelRule) -> String {
    format!("bench rule {} does not hold", rule.name)
}

/// The object name of a rule's VAP, binding and kanon policy.
fn cel_name(rule: &CelRule) -> String {
    format!("bench-cel-{}", rule.name)
}

/// The Pod of part 4: every one of the 10 rules holds for it.
fn cel_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": CEL_NS,
                     "labels": {"app": "bench", "team": "platform"}},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000},
            "containers": [{
                "name": "app",
                "image": "registry.example/app:1.0",
                "securityContext": {"allowPrivilegeEscalation": false},
                "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}},
            }],
        },
    })
}

/// The namespace selector of part 4's VAPs and webhook: [`CEL_NS`] only.
fn cel_namespace_selector() -> Value {
    kit::namespaces_named(&[CEL_NS])
}

/// A rule as a ValidatingAdmissionPolicy (Pods, CREATE, in [`CEL_NS`]) and its binding (Deny).
fn cel_vap(rule: &CelRule) -> [Value; 2] {
    let name = cel_name(rule);
    let labels = json!({"bench.kanon.dev/cel": "true"});
    [
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "namespaceSelector": cel_namespace_selector(),
                    "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                       "operations": ["CREATE"], "resources": ["pods"]}],
                },
                "validations": [{"expression": rule.expression, "message": cel_message(rule)}],
            },
        }),
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": labels},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        }),
    ]
}

/// A rule as a kanon ClusterValidatePolicy (Pods in [`CEL_NS`], CREATE, `cel.validations`).
fn cel_cvp(rule: &CelRule) -> Value {
    let mut document = policy(
        "ClusterValidatePolicy",
        &cel_name(rule),
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": CEL_NS}],
            "failurePolicy": "Fail",
            "validationActions": ["Deny"],
            "validateRules": [{"targetOperations": ["CREATE"], "cel": {"validations": [
                {"expression": rule.expression, "message": cel_message(rule)}]}}],
        }),
    );
    document["metadata"]["labels"]["bench.kanon.dev/cel"] = json!("true");
    document
}

/// What is in force during a round of part 4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CelConfig {
    /// No policy, no webhook.
    NoPolicy,
    /// The 10 rules as ValidatingAdmissionPolicies with their bindings.
    Vaps,
    /// The 10 rules as kanon ClusterValidatePolicies, behind kanon's validating webhook.
    KanonCel,
}

impl CelConfig {
    const ALL: [CelConfig; 3] = [CelConfig::NoPolicy, CelConfig::Vaps, CelConfig::KanonCel];

    fn name(self) -> &'static str {
        match self {
            CelConfig::NoPolicy => "no policy",
            CelConfig::Vaps => "10 VAPs",
            CelConfig::KanonCel => "kanon webhook, 10 CEL rules",
        }
    }

    /// What the apiserver's refusal of a Pod violating `rule` says, when this configuration
    /// refuses it (`None`: admitted).
    fn denial(self, rule: &CelRule) -> Option<String> {
        match self {
            CelConfig::NoPolicy => None,
            CelConfig::Vaps => Some(format!(
                "ValidatingAdmissionPolicy '{0}' with binding '{0}' denied request",
                cel_name(rule)
            )),
            CelConfig::KanonCel => Some(format!(
                "admission webhook \"{CEL_WEBHOOK_NAME}\" denied the request"
            )),
        }
    }
}

impl World {
    /// A server-side dry-run create of `pod`: `Ok(Ok(()))` when admitted, `Ok(Err(message))`
    /// when the apiserver refuses it.
    fn dry_run_create(&self, pod: &Value) -> Result<Result<(), String>> {
        let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
        let pod: Pod = serde_json::from_value(pod.clone())?;
        let params = PostParams {
            dry_run: true,
            ..Default::default()
        };
        match self
            .runtime
            .block_on(self.pods(namespace).create(&params, &pod))
        {
            Ok(_) => Ok(Ok(())),
            Err(kube::Error::Api(status)) => Ok(Err(status.message.clone())),
            Err(other) => Err(other.into()),
        }
    }

    /// kanon's validating webhook of part 4: Pods, CREATE, in [`CEL_NS`] only, `Fail`, 5 s.
    fn cel_webhook_configuration(&self) -> Result<Value> {
        let webhook = self.kanon().webhook(
            CEL_WEBHOOK_NAME,
            "/validate",
            kit::pod_rules(&["CREATE"]),
            cel_namespace_selector(),
        )?;
        Ok(kit::validating_configuration(CEL_WEBHOOK, vec![webhook]))
    }

    /// Waits until `config` is what the apiserver enforces: for each rule, a dry-run create of
    /// a Pod violating that rule alone is refused by that rule's VAP or by kanon's webhook with
    /// the rule's message, or (no policy) admitted; and the bench Pod itself is admitted.
    fn wait_cel_config(&self, config: CelConfig) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut wrong = Vec::new();
            if let Err(message) = self.dry_run_create(&cel_pod("probe"))? {
                wrong.push(format!("the bench Pod: refused: {message}"));
            }
            for rule in &CEL_RULES {
                let mut pod = cel_pod(&format!("probe-{}", rule.name));
                (rule.violate)(&mut pod);
                match (config.denial(rule), self.dry_run_create(&pod)?) {
                    (None, Ok(())) => {}
                    (Some(denial), Err(message))
                        if message.contains(&denial) && message.contains(&cel_message(rule)) => {}
                    (_, outcome) => wrong.push(format!("{}: {outcome:?}", rule.name)),
                }
            }
            if wrong.is_empty() {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "{} not in force after 60 s: {wrong:#?}",
                config.name()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Puts `config` in force and waits until the apiserver enforces it.
    fn enter_cel_config(&mut self, config: CelConfig) -> Result<()> {
        match config {
            CelConfig::NoPolicy => {}
            CelConfig::Vaps => {
                let items: Vec<Value> = CEL_RULES.iter().flat_map(cel_vap).collect();
                self.apply(&json!({"apiVersion": "v1", "kind": "List", "items": items}))?;
            }
            CelConfig::KanonCel => {
                let webhook = self.cel_webhook_configuration()?;
                self.cel_webhook = true;
                self.apply(&webhook)?;
            }
        }
        self.wait_cel_config(config)
    }

    /// Takes `config` out and waits until nothing refuses the rules' violating Pods.
    fn leave_cel_config(&mut self, config: CelConfig) -> Result<()> {
        match config {
            CelConfig::NoPolicy => {}
            CelConfig::Vaps => {
                self.kubectl(&[
                    "delete",
                    "validatingadmissionpolicybindings,validatingadmissionpolicies",
                    "-l",
                    "bench.kanon.dev/cel=true",
                ])?;
            }
            CelConfig::KanonCel => self.delete_cel_webhook()?,
        }
        self.wait_cel_config(CelConfig::NoPolicy)
    }

    fn delete_cel_webhook(&mut self) -> Result<()> {
        if self.cel_webhook {
            self.kubectl(&[
                "delete",
                "--ignore-not-found",
                &format!("validatingwebhookconfiguration/{CEL_WEBHOOK}"),
            ])?;
            self.cel_webhook = false;
        }
        Ok(())
    }

    /// How many times each of kanon's 10 CEL policies has been evaluated so far
    /// (`kanon_policy_evaluations_total`).
    fn kanon_cel_evaluations(&self) -> Result<Vec<f64>> {
        let text = self.kanon().metrics()?;
        Ok(CEL_RULES
            .iter()
            .map(|rule| {
                metric_sum(
                    &text,
                    "kanon_policy_evaluations_total",
                    &[(
                        "policy",
                        &format!("ClusterValidatePolicy/{}", cel_name(rule)),
                    )],
                )
            })
            .collect())
    }

    /// The apiserver's time in its validating admission plugins so far, for admitted CREATEs:
    /// (calls, seconds) of `ValidatingAdmissionPolicy` and of `ValidatingAdmissionWebhook`
    /// (`apiserver_admission_controller_admission_duration_seconds`; the apiserver counts no
    /// admission per VAP, only denials and errors).
    fn validating_plugins(&self) -> Result<[(f64, f64); 2]> {
        let out = self.kubectl(&["get", "--raw", "/metrics"])?;
        let text = String::from_utf8_lossy(&out.stdout);
        let plugin = |name: &str| {
            let labels = [
                ("name", name),
                ("operation", "CREATE"),
                ("rejected", "false"),
                ("type", "validate"),
            ];
            (
                metric_sum(
                    &text,
                    "apiserver_admission_controller_admission_duration_seconds_count",
                    &labels,
                ),
                metric_sum(
                    &text,
                    "apiserver_admission_controller_admission_duration_seconds_sum",
                    &labels,
                ),
            )
        };
        Ok([
            plugin("ValidatingAdmissionPolicy"),
            plugin("ValidatingAdmissionWebhook"),
        ])
    }

    /// Deletes every Pod of `namespace` (many thousands: the collection delete may time out
    /// on the client's side while the apiserver goes on) and waits until none is left.
    fn delete_many_pods(&self, namespace: &str) -> Result<()> {
        let api = self.pods(namespace);
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let left = self
                .runtime
                .block_on(api.list_metadata(&ListParams::default().limit(1)))?;
            if left.items.is_empty() {
                return Ok(());
            }
            ensure!(Instant::now() < deadline, "Pods of {namespace} not deleted");
            if let Err(error) = self
                .runtime
                .block_on(api.delete_collection(&DeleteParams::default(), &ListParams::default()))
            {
                eprintln!("bench: deleting the Pods of {namespace}: {error} (retried)");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The sum of every sample of metric `name` (any other labels) that has all of `labels`.
fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The processes whose CPU time part 4 reports, in its tables' order.
const CPU_PROCESSES: [&str; 5] = [
    "kube-apiserver",
    "etcd",
    "kube-controller-manager",
    "kanon",
    "bench client",
];

/// CPU time (user + system) of a process so far, from `/proc/<pid>/stat` (zero if gone).
fn process_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command's closing parenthesis: field 3 (state) first; utime and stime are
    // fields 14 and 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    // SAFETY: sysconf(3) has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Duration::from_secs_f64(ticks as f64 / hz)
}

/// The CPU time so far of each of [`CPU_PROCESSES`] (the bench client is this process).
fn cpu_times(world: &World) -> [Duration; 5] {
    let mut pids = world.control_plane().pids();
    if let Some(child) = world.kanon.as_ref().and_then(Kanon::pid) {
        pids.push(("kanon", child));
    }
    pids.push(("bench client", std::process::id()));
    CPU_PROCESSES.map(|name| {
        pids.iter()
            .find(|(n, _)| *n == name)
            .map_or(Duration::ZERO, |&(_, pid)| process_cpu(pid))
    })
}

/// One create of the closed loop: when it started (from the loop's start), how long it took,
/// and the apiserver's refusal if it was not admitted.
struct Timed {
    started: Duration,
    latency: Duration,
    error: Option<String>,
}

/// `clients` concurrent clients, each creating Pods (`pod`, renamed `<prefix>-<client>-<n>`)
/// one after the other, the next as soon as the previous one is answered, for `total`.
async fn creates_closed_loop(
    api: Api<Pod>,
    pod: Pod,
    prefix: &str,
    clients: usize,
    total: Duration,
) -> Vec<Timed> {
    let origin = tokio::time::Instant::now();
    let end = origin + total;
    let mut tasks = Vec::with_capacity(clients);
    for client in 0..clients {
        let api = api.clone();
        let mut pod = pod.clone();
        let prefix = prefix.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut done = Vec::new();
            for n in 0.. {
                let started = tokio::time::Instant::now();
                if started >= end {
                    break;
                }
                pod.metadata.name = Some(format!("{prefix}-{client:02}-{n:06}"));
                let error = api
                    .create(&PostParams::default(), &pod)
                    .await
                    .err()
                    .map(|e| match e {
                        kube::Error::Api(status) => status.message.clone(),
                        other => other.to_string(),
                    });
                done.push(Timed {
                    started: started - origin,
                    latency: started.elapsed(),
                    error,
                });
            }
            done
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        match task.await {
            Ok(mut done) => all.append(&mut done),
            Err(e) => all.push(Timed {
                started: Duration::ZERO,
                latency: Duration::MAX,
                error: Some(format!("the task failed: {e}")),
            }),
        }
    }
    all
}

struct CelRound {
    config: CelConfig,
    /// Creates answered within the measured window.
    stats: Stats,
    latencies: Vec<Duration>,
    /// Creates answered per second of the measured window.
    throughput: f64,
    /// Pods admitted in the round, warm-up and the last answers after the window included.
    admitted: usize,
    /// kanon: evaluations of each of its 10 policies during the round (the least and the most).
    evaluations: Option<(f64, f64)>,
    /// The apiserver's mean time per admitted CREATE in its `ValidatingAdmissionPolicy` and
    /// `ValidatingAdmissionWebhook` plugins during the round.
    plugin_means: [Duration; 2],
    /// CPU time per admitted Pod of each of [`CPU_PROCESSES`] over the round (warm-up
    /// included), and the share of the machine's CPUs all of them used.
    cpu_per_create: [Duration; 5],
    cpu_share: f64,
    load: String,
}

fn cel_round(
    world: &World,
    settings: &Settings,
    number: usize,
    config: CelConfig,
) -> Result<CelRound> {
    let pod: Pod = serde_json::from_value(cel_pod("template"))?;
    let warmup = Duration::from_secs(settings.cel_warmup_secs.into());
    let window = Duration::from_secs(settings.cel_round_secs.into());
    let before = world.kanon_cel_evaluations()?;
    let plugins_before = world.validating_plugins()?;
    // `KANON_BENCH_APISERVER_PROFILE=DIR`: kube-apiserver's CPU profile over the measured
    // window, to DIR/cel-round-<n>-<configuration>.pprof (`go tool pprof -top FILE`).
    let profile = std::env::var_os("KANON_BENCH_APISERVER_PROFILE").map(|dir| {
        let mut kubectl = world.control_plane().kubectl();
        kubectl.args([
            "get",
            "--raw",
            &format!("/debug/pprof/profile?seconds={}", settings.cel_round_secs),
        ]);
        let slug = config.name().replace([' ', ','], "-").replace("--", "-");
        let path = Path::new(&dir).join(format!("cel-round-{number}-{slug}.pprof"));
        std::thread::spawn(move || -> Result<PathBuf> {
            std::thread::sleep(warmup);
            let out = kubectl.output()?;
            ensure!(out.status.success(), "the profile: {}", text(&out));
            std::fs::write(&path, &out.stdout)?;
            Ok(path)
        })
    });
    let cpu_before = cpu_times(world);
    let began = Instant::now();
    let creates = world.runtime.block_on(creates_closed_loop(
        world.pods(CEL_NS),
        pod,
        &format!("c{number}"),
        settings.cel_clients,
        warmup + window,
    ));
    let wall = began.elapsed();
    let cpu_after = cpu_times(world);
    let load = load_average();
    if let Some(profile) = profile {
        match profile.join() {
            Ok(Ok(path)) => eprintln!("bench: kube-apiserver's profile in {}", path.display()),
            Ok(Err(error)) => eprintln!("bench: kube-apiserver's profile: {error:#}"),
            Err(_) => eprintln!("bench: kube-apiserver's profile: the thread panicked"),
        }
    }
    let after = world.kanon_cel_evaluations()?;
    let plugins_after = world.validating_plugins()?;
    let errors: Vec<&String> = creates.iter().filter_map(|c| c.error.as_ref()).collect();
    ensure!(
        errors.is_empty(),
        "{}: {} of {} creates refused; the first: {:?}",
        config.name(),
        errors.len(),
        creates.len(),
        &errors[..errors.len().min(3)]
    );
    let admitted = creates.len();
    let latencies: Vec<Duration> = creates
        .iter()
        .filter(|c| {
            let answered = c.started + c.latency;
            answered >= warmup && answered < warmup + window
        })
        .map(|c| c.latency)
        .collect();
    let throughput = latencies.len() as f64 / window.as_secs_f64();
    // Every admitted Pod is stored.
    let stored = world
        .runtime
        .block_on(world.pods(CEL_NS).list_metadata(&ListParams::default()))?
        .items
        .len();
    ensure!(
        stored == admitted,
        "{}: {admitted} creates admitted, {stored} Pods stored",
        config.name()
    );
    // With kanon, every admitted Pod went through each of its 10 policies once; otherwise
    // none of them ran.
    let deltas: Vec<f64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let expected = if config == CelConfig::KanonCel {
        admitted as f64
    } else {
        0.0
    };
    ensure!(
        deltas.iter().all(|&d| d == expected),
        "{}: {admitted} Pods admitted, but kanon's CEL policies were evaluated {deltas:?} times",
        config.name()
    );
    let evaluations = (config == CelConfig::KanonCel).then(|| {
        let least = deltas.iter().copied().fold(f64::INFINITY, f64::min);
        let most = deltas.iter().copied().fold(0.0, f64::max);
        (least, most)
    });
    let cpu_used: [Duration; 5] =
        std::array::from_fn(|i| cpu_after[i].saturating_sub(cpu_before[i]));
    let cpu_per_create = cpu_used.map(|d| d / admitted.max(1) as u32);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let cpu_share = cpu_used.iter().sum::<Duration>().as_secs_f64() / wall.as_secs_f64() / cpus;
    let plugin_means = [0, 1].map(|i| {
        let (calls, seconds) = (
            plugins_after[i].0 - plugins_before[i].0,
            plugins_after[i].1 - plugins_before[i].1,
        );
        if calls > 0.0 {
            Duration::from_secs_f64(seconds / calls)
        } else {
            Duration::ZERO
        }
    });
    let stats = stats(&latencies);
    eprintln!(
        "bench: CEL round {number} ({}): {admitted} Pods admitted, {:.0} creates/s, p50 {}, p99 {}; load {load}",
        config.name(),
        throughput,
        ms(stats.p50),
        ms(stats.p99)
    );
    Ok(CelRound {
        config,
        stats,
        latencies,
        throughput,
        admitted,
        evaluations,
        plugin_means,
        cpu_per_create,
        cpu_share,
        load,
    })
}

/// Part 4: the rounds, the configurations alternating (their order rotated every round).
fn cel_through_apiserver(world: &mut World, settings: &Settings) -> Result<Vec<CelRound>> {
    world.namespace(CEL_NS)?;
    for rule in &CEL_RULES {
        world.apply_policy(&cel_cvp(rule))?;
    }
    let cvps = cvps().len();
    world.wait_policies_ready("ClusterValidatePolicy", cvps + CEL_RULES.len())?;
    world.wait_cel_config(CelConfig::NoPolicy)?;
    eprintln!(
        "bench: {} kanon CEL policies ready; {} concurrent clients",
        CEL_RULES.len(),
        settings.cel_clients
    );
    let mut rounds = Vec::new();
    for round in 0..settings.cel_rounds {
        for k in 0..CelConfig::ALL.len() {
            let config = CelConfig::ALL[(round + k) % CelConfig::ALL.len()];
            world.enter_cel_config(config)?;
            std::thread::sleep(Duration::from_secs(2));
            rounds.push(cel_round(world, settings, rounds.len() + 1, config)?);
            // Still in force at the end of the round.
            world.wait_cel_config(config)?;
            world.leave_cel_config(config)?;
            world.delete_many_pods(CEL_NS)?;
        }
    }
    world.kubectl(&[
        "delete",
        "clustervalidatepolicies",
        "-l",
        "bench.kanon.dev/cel=true",
    ])?;
    world.wait_policies_ready("ClusterValidatePolicy", cvps)?;
    Ok(rounds)
}

// ---------------------------------------------------------------------------------------------

fn main() -> Result<()> {
    let settings = Settings::from_args();
    let began = Instant::now();
    let load_before = load_average();
    let mut world = World::start()?;

    world.namespace(PODS_NS)?;
    let kanon = world.start_kanon("kanon", &[])?;
    world.kanon = Some(kanon);
    eprintln!("bench: kanon ready");
    for i in 0..COPS {
        world.apply_policy(&cop(i, &first_value(i)))?;
    }
    let cvps = cvps();
    for document in &cvps {
        world.apply_policy(document)?;
    }
    world.wait_policies_ready("ClusterOverridePolicy", COPS)?;
    world.wait_policies_ready("ClusterValidatePolicy", cvps.len())?;
    eprintln!(
        "bench: {COPS} ClusterOverridePolicies and {} ClusterValidatePolicies ready",
        cvps.len()
    );

    let rounds = pod_creates(&mut world, &settings)?;
    world.register_webhooks()?;
    let changes = policy_changes(&world, &settings)?;
    let dry_run_latency = {
        let mut taken = Vec::new();
        for _ in 0..20 {
            let started = Instant::now();
            world.dry_run_labels()?;
            taken.push(started.elapsed());
        }
        stats(&taken)
    };
    world.unregister_webhooks()?;
    let cel_rounds = cel_through_apiserver(&mut world, &settings)?;
    let lookup = lookups(&mut world, &settings)?;
    let kanon_alive = world.kanon.as_mut().is_some_and(Kanon::running)
        && world.kanon_miss.as_mut().is_some_and(Kanon::running);
    let kanon_log = world.kanon().log_tail(2000);
    let miss_log = world
        .kanon_miss
        .as_ref()
        .map(|k| k.log_tail(2000))
        .unwrap_or_default();
    let load_after = load_average();
    drop(world);

    if let Some(path) = std::env::var_os("KANON_BENCH_DUMP") {
        let millis = |samples: &[Duration]| -> Vec<f64> {
            samples.iter().map(|d| d.as_secs_f64() * 1e3).collect()
        };
        let dump = json!({
            "pod_rounds": rounds.iter().map(|r| json!({
                "with_kanon": r.with_kanon, "latencies_ms": millis(&r.latencies)})).collect::<Vec<_>>(),
            "changes_through_apiserver_ms": millis(&changes.through_apiserver),
            "changes_direct_ms": millis(&changes.direct),
            "reviews_ms": lookup.latencies.iter().map(|((case, cache), l)| json!({
                "lookup": case, "cache": cache, "latencies_ms": millis(l)})).collect::<Vec<_>>(),
            "cel_rounds": cel_rounds.iter().map(|r| json!({
                "configuration": r.config.name(), "creates_per_s": r.throughput,
                "latencies_ms": millis(&r.latencies)})).collect::<Vec<_>>(),
        });
        std::fs::write(&path, serde_json::to_vec(&dump)?)?;
        eprintln!(
            "bench: raw samples written to {}",
            Path::new(&path).display()
        );
    }

    // ---- Report ----
    println!("# kanon in a cluster (crates/kanon/benches/cluster.rs)");
    println!();
    println!(
        "load average before {load_before}, after {load_after}; {:.0} s in all{}",
        began.elapsed().as_secs_f64(),
        if settings.pairs == 1 {
            " (--quick)"
        } else {
            ""
        }
    );
    println!();
    println!(
        "## Pod creates through the apiserver: {}/s, {} s per round after {} s of warm-up",
        settings.rate, settings.round_secs, settings.warmup_secs
    );
    println!();
    println!("| round | kanon | measured | errors (all) | p50 | p90 | p99 | max | load after |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (i, r) in rounds.iter().enumerate() {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            i + 1,
            if r.with_kanon { "with" } else { "without" },
            r.stats.n,
            r.errors.len(),
            ms(r.stats.p50),
            ms(r.stats.p90),
            ms(r.stats.p99),
            ms(r.stats.max),
            r.load
        );
    }
    let all = |with: bool| {
        let latencies: Vec<Duration> = rounds
            .iter()
            .filter(|r| r.with_kanon == with)
            .flat_map(|r| r.latencies.iter().copied())
            .collect();
        stats(&latencies)
    };
    let (without, with) = (all(false), all(true));
    for (name, s) in [("without", without), ("with", with)] {
        println!(
            "| all | {name} | {} | | {} | {} | {} | {} | |",
            s.n,
            ms(s.p50),
            ms(s.p90),
            ms(s.p99),
            ms(s.max)
        );
    }
    println!();
    println!(
        "kanon adds {} at the median and {} at p99.",
        signed_ms(with.p50, without.p50),
        signed_ms(with.p99, without.p99)
    );
    let with_rounds: Vec<&Round> = rounds.iter().filter(|r| r.with_kanon).collect();
    let created: usize = with_rounds.iter().map(|r| r.created).sum();
    let labelled: usize = with_rounds.iter().map(|r| r.labelled).sum();
    let listed: usize = with_rounds.iter().map(|r| r.listed_labelled).sum();
    println!(
        "Pods created with kanon: {created}; answered with the {MATCHING} labels: {labelled}; listed back with them: {listed}."
    );
    let unlabelled_without: usize = rounds
        .iter()
        .filter(|r| !r.with_kanon)
        .map(|r| r.labelled)
        .sum();
    println!(
        "Pods created without kanon that carry the labels (should be 0): {unlabelled_without}."
    );
    let errors: Vec<&String> = rounds.iter().flat_map(|r| r.errors.iter()).collect();
    if !errors.is_empty() {
        println!("ERRORS: {} creates failed; the first ones:", errors.len());
        for e in errors.iter().take(5) {
            println!("  - {e}");
        }
    }
    println!();

    let first_probe = changes.probes.iter().filter(|&&p| p == 1).count();
    println!(
        "## Policy change -> effect ({} changes of one label value each way)",
        changes.through_apiserver.len()
    );
    println!();
    println!("| measured | median | p90 | max |");
    println!("|---|---|---|---|");
    for (name, samples) in [
        (
            "write -> dry-run create through the apiserver shows it",
            &changes.through_apiserver,
        ),
        (
            "  of which the write (server-side apply)",
            &changes.apply_calls,
        ),
        (
            "write -> kanon's /mutate shows it (1 ms polls)",
            &changes.direct,
        ),
    ] {
        let s = stats(samples);
        println!("| {name} | {} | {} | {} |", ms(s.p50), ms(s.p90), ms(s.max));
    }
    println!();
    println!(
        "One dry-run create through the apiserver and kanon (the resolution of the first row): median {}, p90 {}; the first dry run after the write already showed the change in {first_probe} of {} changes.",
        ms(dry_run_latency.p50),
        ms(dry_run_latency.p90),
        changes.probes.len()
    );
    for (name, samples) in [
        ("through the apiserver", &changes.through_apiserver),
        ("straight to kanon", &changes.direct),
    ] {
        println!(
            "All samples {name} (ms): {}",
            samples
                .iter()
                .map(|d| format!("{:.1}", d.as_secs_f64() * 1e3))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    println!();

    println!(
        "## Review latency, POST /mutate straight to kanon ({} reviews per case in {} rounds, HTTPS, HTTP/1.1 keep-alive, one at a time)",
        settings.review_rounds * settings.reviews_per_round,
        settings.review_rounds
    );
    println!();
    println!("| lookup | cache | p50 | p90 | p99 | max |");
    println!("|---|---|---|---|---|---|");
    for (case, _) in LOOKUP_CASES {
        for cache in ["hit", "miss"] {
            let s = stats(
                lookup
                    .latencies
                    .get(&(case.to_string(), cache))
                    .map(Vec::as_slice)
                    .unwrap_or_default(),
            );
            let cache_shown = match (case, cache) {
                ("none", "hit") => "(kanon with caches)",
                ("none", _) => "(kanon without caches)",
                (_, "hit") => "hit (default TTL)",
                _ => "miss (TTL 0)",
            };
            println!(
                "| {case} | {cache_shown} | {} | {} | {} | {} |",
                ms(s.p50),
                ms(s.p90),
                ms(s.p99),
                ms(s.max)
            );
        }
    }
    println!();
    for (name, text) in [
        ("with caches", &lookup.metrics_hit),
        ("without caches", &lookup.metrics_miss),
    ] {
        for source in ["k8s", "http"] {
            let hits = metric(
                text,
                "kanon_lookups_total",
                &[("source", source), ("cache", "hit")],
            )
            .unwrap_or(0.0);
            let misses = metric(
                text,
                "kanon_lookups_total",
                &[("source", source), ("cache", "miss")],
            )
            .unwrap_or(0.0);
            let sum = metric(
                text,
                "kanon_lookup_duration_seconds_sum",
                &[("source", source)],
            );
            let count = metric(
                text,
                "kanon_lookup_duration_seconds_count",
                &[("source", source)],
            );
            let mean = match (sum, count) {
                (Some(s), Some(c)) if c > 0.0 => format!("{:.3} ms", s / c * 1e3),
                _ => "-".into(),
            };
            let errors: u64 = text
                .lines()
                .filter(|l| {
                    l.starts_with("kanon_lookup_errors_total{")
                        && l.contains(&format!("source=\"{source}\""))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .map(|v| v as u64)
                .sum();
            println!(
                "kanon {name}, {source}: {hits:.0} hits, {misses:.0} misses, {errors} errors; kanon_lookup_duration_seconds mean over misses {mean}"
            );
        }
    }
    println!(
        "The HTTP service answered {} requests.",
        lookup.service_requests
    );
    println!();
    println!(
        "## CEL through the apiserver: 10 rules as ValidatingAdmissionPolicies and as kanon CEL policies ({} concurrent clients, closed loop; {} s measured per round after {} s of warm-up)",
        settings.cel_clients, settings.cel_round_secs, settings.cel_warmup_secs
    );
    println!();
    println!(
        "| round | configuration | measured | creates/s | p50 | p90 | p99 | max | admitted (all) | kanon: each policy evaluated | apiserver per create: VAP plugin / webhook plugin | load after |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (i, r) in cel_rounds.iter().enumerate() {
        let evaluated = match r.evaluations {
            Some((least, most)) if least == most => format!("{least:.0}"),
            Some((least, most)) => format!("{least:.0} to {most:.0}"),
            None => "-".into(),
        };
        println!(
            "| {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {evaluated} | {} / {} | {} |",
            i + 1,
            r.config.name(),
            r.stats.n,
            r.throughput,
            ms(r.stats.p50),
            ms(r.stats.p90),
            ms(r.stats.p99),
            ms(r.stats.max),
            r.admitted,
            ms(r.plugin_means[0]),
            ms(r.plugin_means[1]),
            r.load
        );
    }
    println!();
    println!(
        "| configuration | creates/s: median (rounds) | p50 (all rounds) | p99 (all rounds) |"
    );
    println!("|---|---|---|---|");
    let of = |config: CelConfig| -> Vec<&CelRound> {
        cel_rounds.iter().filter(|r| r.config == config).collect()
    };
    let median_throughput = |config: CelConfig| median(of(config).iter().map(|r| r.throughput));
    for config in CelConfig::ALL {
        let rounds = of(config);
        let latencies: Vec<Duration> = rounds
            .iter()
            .flat_map(|r| r.latencies.iter().copied())
            .collect();
        let s = stats(&latencies);
        println!(
            "| {} | **{:.0}** ({}) | {} | {} |",
            config.name(),
            median_throughput(config),
            rounds
                .iter()
                .map(|r| format!("{:.0}", r.throughput))
                .collect::<Vec<_>>()
                .join(", "),
            ms(s.p50),
            ms(s.p99)
        );
    }
    println!();
    println!(
        "CPU time per admitted Pod (median over the rounds), from /proc/<pid>/stat over each round:"
    );
    println!();
    println!(
        "| configuration | {} | all | share of the {} CPUs used |",
        CPU_PROCESSES.join(" | "),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!("|---|{}---|---|", "---|".repeat(CPU_PROCESSES.len()));
    for config in CelConfig::ALL {
        let rounds = of(config);
        let column = |i: usize| median(rounds.iter().map(|r| r.cpu_per_create[i].as_secs_f64()));
        let all = median(
            rounds
                .iter()
                .map(|r| r.cpu_per_create.iter().sum::<Duration>().as_secs_f64()),
        );
        println!(
            "| {} | {} | {:.3} ms | {:.0}% |",
            config.name(),
            (0..CPU_PROCESSES.len())
                .map(|i| format!("{:.3} ms", column(i) * 1e3))
                .collect::<Vec<_>>()
                .join(" | "),
            all * 1e3,
            median(rounds.iter().map(|r| r.cpu_share)) * 100.0
        );
    }
    println!();
    let per_round = |a: CelConfig, b: CelConfig| -> String {
        of(a)
            .iter()
            .zip(of(b))
            .map(|(x, y)| format!("{:.2}", x.throughput / y.throughput))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (a, b) in [
        (CelConfig::KanonCel, CelConfig::Vaps),
        (CelConfig::KanonCel, CelConfig::NoPolicy),
        (CelConfig::Vaps, CelConfig::NoPolicy),
    ] {
        println!(
            "{} / {}, creates/s: **{:.2}** (medians; round by round {}).",
            a.name(),
            b.name(),
            median_throughput(a) / median_throughput(b),
            per_round(a, b)
        );
    }
    println!(
        "Target (issue 19 §5): kanon with CEL at least 2× the VAPs' creates/s. Every create was admitted and stored; before and after each round, a Pod violating each rule alone was refused by that rule (VAPs, kanon) or admitted (no policy); kanon evaluated each of its policies once per admitted Pod."
    );
    println!();
    let problems: Vec<&str> = kanon_log
        .lines()
        .chain(miss_log.lines())
        .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"))
        .collect();
    println!(
        "kanon processes alive until the end: {kanon_alive}; warnings or errors in their logs: {}",
        problems.len()
    );
    for line in problems.iter().take(10) {
        println!("  {line}");
    }
    Ok(())
}
