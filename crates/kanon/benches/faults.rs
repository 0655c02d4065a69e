//! Faults survived, measured through the real apiserver (issue 10 §3).
//!
//! Starts etcd, kube-apiserver and kube-controller-manager 1.35 on 127.0.0.1
//! (`kanon-control-plane`), installs `crds/`, runs `kanon serve --kubeconfig ...` (this
//! package's release binary, `--http-allow-cidr 127.0.0.1/32`), installs three
//! ClusterOverridePolicies that label the bench namespace's Pods with `labels` templates (one
//! copies the Pod's name through a `current` reference, two add constants) and one
//! ClusterValidatePolicy (`failurePolicy: Fail`) that denies Pods labelled `forbidden: "yes"`,
//! and registers kanon's mutating and validating webhooks by URL with its CA (Pods in the bench
//! namespace only, `failurePolicy: Fail`, `timeoutSeconds: 5`).
//!
//! A kube-rs client then creates Pods through the apiserver at a fixed rate (open loop: each
//! create starts on its schedule whether or not the ones before have finished, each bounded by
//! a 15 s timeout, each latency measured from its scheduled start); one create in ten carries
//! `forbidden: "yes"` and must be denied. Under that load, in order:
//!
//! 1. **baseline**: everything healthy;
//! 2. **kanon killed** (SIGKILL) and restarted a few seconds later on the same port and
//!    certificates: time to `/readyz` and to the first admitted create; no forbidden Pod may
//!    get in meanwhile;
//! 3. **kube-apiserver restarted**: kanon keeps serving (reviews POSTed to it directly during
//!    the outage), and a policy change written after the restart takes effect (its watches
//!    resumed);
//! 4. **etcd restarted** (`ControlPlane::stop_etcd`/`start_etcd`), the same checks;
//! 5. **a lookup target that hangs**: a policy (`failurePolicy: Ignore`) whose label comes from
//!    an `http` reference to a local TCP server that accepts and never answers; half the Pods
//!    select it. Twice: (a) the reference sets `timeoutSeconds: 1`; (b) it sets none, so kanon's
//!    bound is the review's deadline (the webhook's 5 s less kanon's margin);
//! 6. **a burst of policy changes**: 50 server-side applies to the label policies in 2 s;
//!    no create may fail and the last values must be in force;
//!
//! then a **soak** at the same rate for `SOAK_SECONDS` (default 600), deleting the Pods in
//! batches some seconds after their creation, sampling kanon's RSS and open file descriptors
//! every 10 s. Each phase prints a Markdown table; the run ends with a verdict line (and exit
//! status 1 when a check failed). Everything started is stopped at the end, on failure too.
//!
//! Run: `cargo bench -p kanon --bench faults` (about 15 minutes), or
//! `cargo bench -p kanon --bench faults -- --quick` (or `FAULTS_QUICK=1`: short phases and a
//! 60 s soak) to check the bench itself. Environment: `FAULTS_RATE` (creates per second,
//! default 20), `FAULTS_PHASE_SECONDS` (load per phase, default 20; 6 quick),
//! `FAULTS_DOWN_SECONDS` (how long kanon, the apiserver and etcd stay down, default 5; 3
//! quick), `SOAK_SECONDS` (default 600; 60 quick), `FAULTS_KEEP_LOGS=DIR` (copy kanon's logs
//! there).

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use base64::Engine as _;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kanon_control_plane::kanon::{self as kit, Cluster, Kanon, repo};
use kanon_control_plane::{ControlPlane, Options};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// The namespace of the Pods created through the apiserver.
const NS: &str = "bench-faults";
/// The bound on one create, client side.
const CREATE_TIMEOUT: Duration = Duration::from_secs(15);
/// The webhooks' `timeoutSeconds`.
const WEBHOOK_TIMEOUT_SECS: u64 = 5;
/// The name of kanon's webhook configurations.
const WEBHOOKS: &str = "kanon-faults";
/// How often kanon's `/readyz` is asked while it starts (the restart's time to ready is
/// measured to this resolution).
const READY_POLL: Duration = Duration::from_millis(20);
/// The constant labels of the label policies, and their first values.
const LABEL_A: &str = "faults-a";
const LABEL_B: &str = "faults-b";
const FIRST_A: &str = "a0";
const FIRST_B: &str = "b0";
/// The label copied from the Pod's name.
const LABEL_NAME: &str = "faults-name";
/// The label the hanging lookup would give.
const LABEL_HANG: &str = "faults-hang";

struct Settings {
    quick: bool,
    rate: u32,
    phase_secs: u64,
    down_secs: u64,
    soak_secs: u64,
    sample_secs: u64,
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

impl Settings {
    fn from_env() -> Settings {
        let quick = std::env::args().any(|a| a == "--quick")
            || std::env::var("FAULTS_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        Settings {
            quick,
            rate: env_number("FAULTS_RATE").unwrap_or(20).clamp(1, 500) as u32,
            phase_secs: env_number("FAULTS_PHASE_SECONDS")
                .unwrap_or(if quick { 6 } else { 20 })
                .max(2),
            down_secs: env_number("FAULTS_DOWN_SECONDS")
                .unwrap_or(if quick { 3 } else { 5 })
                .max(1),
            soak_secs: env_number("SOAK_SECONDS")
                .unwrap_or(if quick { 60 } else { 600 })
                .max(10),
            sample_secs: 10,
        }
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Offset of `at` from `origin`, in seconds with a sign.
fn offset(origin: Instant, at: Instant) -> String {
    if at >= origin {
        format!("+{:.2} s", (at - origin).as_secs_f64())
    } else {
        format!("-{:.2} s", (origin - at).as_secs_f64())
    }
}

/// Nearest-rank percentile.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

// ---------------------------------------------------------------------------------------------
// Processes: kanon and the hanging server

/// What `/proc` says about a process.
#[derive(Debug, Clone, Copy)]
struct ProcSample {
    rss_kb: u64,
    fds: usize,
    threads: u64,
}

fn proc_sample(pid: u32) -> Option<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    Some(ProcSample {
        rss_kb: field("VmRSS:")?,
        fds,
        threads: field("Threads:").unwrap_or(0),
    })
}

/// A TCP server on 127.0.0.1 that accepts connections and never answers (nor closes them).
struct HangServer {
    port: u16,
    accepted: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HangServer {
    fn start() -> Result<HangServer> {
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

// ---------------------------------------------------------------------------------------------
// Policies and Pods

fn policy_resource(kind: &str) -> Result<ApiResource> {
    let plural = kanon_api::PolicyKind::from_kind(kind)
        .with_context(|| format!("{kind} is not a policy kind"))?
        .plural();
    Ok(ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(kanon_api::GROUP, kanon_api::VERSION, kind),
        plural,
    ))
}

fn policy(kind: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": kanon_api::API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "labels": {"bench.kanon.dev/owned": "true"}},
        "spec": spec,
    })
}

fn pods_selector() -> Value {
    json!([{"apiVersion": "v1", "kind": "Pod", "namespace": NS}])
}

/// A ClusterOverridePolicy adding `label` with `source` (`value` or `valueRef`).
fn label_policy(name: &str, label: &str, source: Value, selectors: Value, fail: &str) -> Value {
    let mut template = json!({"type": "labels", "operation": "add", "path": label});
    for (key, value) in source.as_object().into_iter().flatten() {
        template[key] = value.clone();
    }
    policy(
        "ClusterOverridePolicy",
        name,
        json!({
            "failurePolicy": fail,
            "resourceSelectors": selectors,
            "overrideRules": [{"targetOperations": ["CREATE"],
                               "overriders": {"template": template}}],
        }),
    )
}

fn policy_a(value: &str) -> Value {
    label_policy(
        "faults-a",
        LABEL_A,
        json!({"value": {"string": value}}),
        pods_selector(),
        "Fail",
    )
}

fn policy_b(value: &str) -> Value {
    label_policy(
        "faults-b",
        LABEL_B,
        json!({"value": {"string": value}}),
        pods_selector(),
        "Fail",
    )
}

fn policy_name() -> Value {
    label_policy(
        "faults-name",
        LABEL_NAME,
        json!({"valueRef": {"from": "current", "path": "/metadata/name"}}),
        pods_selector(),
        "Fail",
    )
}

fn policy_forbidden() -> Value {
    policy(
        "ClusterValidatePolicy",
        "faults-forbidden",
        json!({
            "failurePolicy": "Fail",
            "resourceSelectors": pods_selector(),
            "validateRules": [{"template": {"type": "condition", "condition": {
                "cond": "Equal",
                "dataRef": {"from": "current", "path": "/metadata/labels/forbidden"},
                "value": {"string": "yes"},
                "message": "{{ object.metadata.name }} is marked forbidden"}}}],
        }),
    )
}

/// The policy whose label comes from the server that never answers; it selects the Pods
/// labelled `lookup: hang`. `timeout`: the reference's `timeoutSeconds`.
fn policy_hang(port: u16, timeout: Option<u32>) -> Value {
    let mut http = json!({"url": format!("http://127.0.0.1:{port}/tier")});
    if let Some(seconds) = timeout {
        http["timeoutSeconds"] = json!(seconds);
    }
    label_policy(
        "faults-hang",
        LABEL_HANG,
        json!({"valueRef": {"from": "http", "path": "/body/tier", "http": http}}),
        json!([{"apiVersion": "v1", "kind": "Pod", "namespace": NS,
                "labelSelector": {"matchLabels": {"lookup": "hang"}}}]),
        "Ignore",
    )
}

fn pod(name: &str, labels: &BTreeMap<String, String>) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.0",
                                 "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}}}]},
    })
}

/// An AdmissionReview of a Pod CREATE in the bench namespace, as kube-apiserver sends it.
fn review(uid: &str, forbidden: bool) -> Value {
    let mut labels = BTreeMap::from([("app".to_string(), "bench".to_string())]);
    if forbidden {
        labels.insert("forbidden".into(), "yes".into());
    }
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "direct",
            "namespace": NS,
            "operation": "CREATE",
            "userInfo": {"username": "bench"},
            "object": pod("direct", &labels),
            "dryRun": false,
        },
    })
}

/// The labels a `/mutate` answer's patch sets (an error when it is not allowed).
fn patched_labels(body: &[u8]) -> Result<BTreeMap<String, String>> {
    let answer: Value = serde_json::from_slice(body)?;
    let response = &answer["response"];
    ensure!(response["allowed"] == true, "not allowed: {answer}");
    let mut labels = BTreeMap::new();
    let Some(patch) = response["patch"].as_str() else {
        return Ok(labels);
    };
    let patch: Value =
        serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(patch)?)?;
    for op in patch.as_array().into_iter().flatten() {
        let path = op["path"].as_str().unwrap_or_default();
        if let Some(key) = path.strip_prefix("/metadata/labels/") {
            if let Some(v) = op["value"].as_str() {
                labels.insert(key.replace("~1", "/").replace("~0", "~"), v.to_string());
            }
        } else if path == "/metadata/labels" {
            for (k, v) in op["value"].as_object().into_iter().flatten() {
                if let Some(v) = v.as_str() {
                    labels.insert(k.clone(), v.to_string());
                }
            }
        }
    }
    Ok(labels)
}

// ---------------------------------------------------------------------------------------------
// The load

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Sort {
    /// An ordinary bench Pod: admitted and labelled.
    Normal,
    /// `forbidden: "yes"`: denied.
    Forbidden,
    /// `lookup: hang` (phase 5): admitted, labelled by all but the hanging policy.
    Hang,
}

impl Sort {
    fn label(self) -> &'static str {
        match self {
            Sort::Normal => "normal",
            Sort::Forbidden => "forbidden",
            Sort::Hang => "lookup: hang",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Category {
    Admitted,
    Denied,
    WebhookFailed,
    Unavailable,
    ServerError,
    TimedOut,
    Other,
}

impl Category {
    fn label(self) -> &'static str {
        match self {
            Category::Admitted => "admitted",
            Category::Denied => "denied by a policy",
            Category::WebhookFailed => "webhook call failed (failurePolicy Fail)",
            Category::Unavailable => "apiserver unavailable (refused, 429, 503)",
            Category::ServerError => "apiserver error (other 5xx)",
            Category::TimedOut => "timed out (client, 15 s)",
            Category::Other => "other error",
        }
    }
}

struct Create {
    name: String,
    sort: Sort,
    /// When it was due to start.
    scheduled: Instant,
    /// From `scheduled` to the answer.
    latency: Duration,
    category: Category,
    /// The labels it came back with (admitted), else the error.
    labels: BTreeMap<String, String>,
    message: String,
}

impl Create {
    fn done(&self) -> Instant {
        self.scheduled + self.latency
    }
}

fn error_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn classify(error: &kube::Error) -> (Category, String) {
    match error {
        kube::Error::Api(status) => {
            let message = format!("{} {}: {}", status.code, status.reason, status.message);
            let category = if status.message.contains("failed calling webhook") {
                Category::WebhookFailed
            } else if status.code == 403 && status.message.contains("denied the request") {
                Category::Denied
            } else if matches!(status.code, 429 | 503) {
                Category::Unavailable
            } else if status.code >= 500 {
                Category::ServerError
            } else {
                Category::Other
            };
            (category, message)
        }
        other => {
            let message = error_text(other);
            let category = if message.contains("Connection refused")
                || message.contains("onnection reset")
                || message.contains("client error (Connect)")
                || message.contains("connection closed before message completed")
            {
                Category::Unavailable
            } else {
                Category::Other
            };
            (category, message)
        }
    }
}

/// Pod creates at a fixed rate until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    handle: tokio::task::JoinHandle<Vec<Create>>,
    began: Instant,
}

type LabelsOf = Arc<dyn Fn(usize) -> BTreeMap<String, String> + Send + Sync>;

/// Labels of the `i`-th Pod of `phase`: one in ten forbidden; `hang_every`: every that many
/// (of the others) selects the hanging policy.
fn phase_labels(phase: &str, hang: bool) -> LabelsOf {
    let phase = phase.to_string();
    Arc::new(move |i| {
        let mut labels = BTreeMap::from([
            ("app".to_string(), "bench".to_string()),
            ("phase".to_string(), phase.clone()),
        ]);
        if i % 10 == 9 {
            labels.insert("forbidden".into(), "yes".into());
        } else if hang && i.is_multiple_of(2) {
            labels.insert("lookup".into(), "hang".into());
        }
        labels
    })
}

impl Load {
    fn start(world: &World, prefix: &str, rate: u32, labels: LabelsOf) -> Load {
        let api: Api<Pod> = Api::namespaced(world.client.clone(), NS);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let prefix = prefix.to_string();
        let interval = Duration::from_secs(1) / rate;
        let start = tokio::time::Instant::now() + Duration::from_millis(20);
        let began = start.into_std();
        let handle = world.runtime.spawn(async move {
            let mut tasks = Vec::new();
            let mut i = 0usize;
            loop {
                let scheduled = start + interval * i as u32;
                tokio::time::sleep_until(scheduled).await;
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
                let labels = labels(i);
                let sort = if labels.contains_key("forbidden") {
                    Sort::Forbidden
                } else if labels.contains_key("lookup") {
                    Sort::Hang
                } else {
                    Sort::Normal
                };
                let name = format!("{prefix}-{i:06}");
                let body = pod(&name, &labels);
                let api = api.clone();
                tasks.push(tokio::spawn(async move {
                    let result = match serde_json::from_value::<Pod>(body) {
                        Ok(pod) => {
                            tokio::time::timeout(
                                CREATE_TIMEOUT,
                                api.create(&PostParams::default(), &pod),
                            )
                            .await
                        }
                        Err(e) => Ok(Err(kube::Error::SerdeError(e))),
                    };
                    let latency = scheduled.elapsed();
                    let (category, labels, message) = match result {
                        Ok(Ok(created)) => (
                            Category::Admitted,
                            created.metadata.labels.unwrap_or_default(),
                            String::new(),
                        ),
                        Ok(Err(error)) => {
                            let (category, message) = classify(&error);
                            (category, BTreeMap::new(), message)
                        }
                        Err(_) => (
                            Category::TimedOut,
                            BTreeMap::new(),
                            format!("no answer within {CREATE_TIMEOUT:?}"),
                        ),
                    };
                    Create {
                        name,
                        sort,
                        scheduled: scheduled.into_std(),
                        latency,
                        category,
                        labels,
                        message,
                    }
                }));
                i += 1;
            }
            let mut creates = Vec::with_capacity(tasks.len());
            for task in tasks {
                if let Ok(create) = task.await {
                    creates.push(create);
                }
            }
            creates
        });
        Load {
            stop,
            handle,
            began,
        }
    }

    /// Stops sending and waits for the creates in flight (15 s at most each).
    fn finish(self, world: &World) -> Result<Vec<Create>> {
        self.stop.store(true, Ordering::Relaxed);
        Ok(world.runtime.block_on(self.handle)?)
    }
}

/// Whether an admitted Pod carries what the policies add: its name copied, `faults-a` and
/// `faults-b` with one of the allowed values, and (a `lookup: hang` Pod) no label from the
/// hanging reference.
struct Expect {
    a: Vec<String>,
    b: Vec<String>,
}

impl Expect {
    fn exactly(a: &str, b: &str) -> Expect {
        Expect {
            a: vec![a.into()],
            b: vec![b.into()],
        }
    }

    fn holds(&self, create: &Create) -> bool {
        let labels = &create.labels;
        labels.get(LABEL_NAME) == Some(&create.name)
            && labels.get(LABEL_A).is_some_and(|v| self.a.contains(v))
            && labels.get(LABEL_B).is_some_and(|v| self.b.contains(v))
            && !labels.contains_key(LABEL_HANG)
    }
}

// ---------------------------------------------------------------------------------------------
// Reports

struct Check {
    what: String,
    ok: bool,
}

struct Report {
    title: String,
    /// When the phase's load began (offsets are printed from it).
    began: Instant,
    creates: Vec<Create>,
    expect: Expect,
    notes: Vec<String>,
    checks: Vec<Check>,
}

impl Report {
    fn new(title: &str, began: Instant, creates: Vec<Create>, expect: Expect) -> Report {
        Report {
            title: title.into(),
            began,
            creates,
            expect,
            notes: Vec::new(),
            checks: Vec::new(),
        }
    }

    fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    fn check(&mut self, what: impl Into<String>, ok: bool) {
        self.checks.push(Check {
            what: what.into(),
            ok,
        });
    }

    fn admitted_as_expected(&self, create: &Create) -> bool {
        create.category == Category::Admitted && self.expect.holds(create)
    }

    /// Forbidden Pods admitted (must be none, whatever the fault).
    fn forbidden_admitted(&self) -> usize {
        self.creates
            .iter()
            .filter(|c| c.sort == Sort::Forbidden && c.category == Category::Admitted)
            .count()
    }

    /// Admitted without kanon's labels at all: the webhook was bypassed.
    fn admitted_unmutated(&self) -> usize {
        self.creates
            .iter()
            .filter(|c| c.category == Category::Admitted && !c.labels.contains_key(LABEL_NAME))
            .count()
    }

    /// Creates that did not end as they should.
    fn wrong(&self) -> Vec<&Create> {
        self.creates
            .iter()
            .filter(|c| !self.as_it_should(c))
            .collect()
    }

    /// Creates scheduled from `from` on that did not end as they should (normal and hang
    /// Pods admitted as expected, forbidden ones denied by the policy).
    fn wrong_from(&self, from: Instant) -> Vec<&Create> {
        self.creates
            .iter()
            .filter(|c| c.scheduled >= from)
            .filter(|c| !self.as_it_should(c))
            .collect()
    }

    fn as_it_should(&self, create: &Create) -> bool {
        match create.sort {
            Sort::Forbidden => {
                create.category == Category::Denied
                    && create.message.contains("is marked forbidden")
            }
            _ => self.admitted_as_expected(create),
        }
    }

    /// The checks every phase makes.
    fn common_checks(&mut self) {
        let forbidden = self.forbidden_admitted();
        self.check(
            format!("no forbidden Pod admitted ({forbidden})"),
            forbidden == 0,
        );
        let unmutated = self.admitted_unmutated();
        self.check(
            format!("no Pod admitted without kanon's labels ({unmutated})"),
            unmutated == 0,
        );
    }

    fn print(&self) {
        println!("## {}", self.title);
        println!();
        for note in &self.notes {
            println!("- {note}");
        }
        if !self.notes.is_empty() {
            println!();
        }
        let sent = self.creates.len();
        let mut all: Vec<Duration> = self.creates.iter().map(|c| c.latency).collect();
        all.sort();
        let admitted = self
            .creates
            .iter()
            .filter(|c| c.category == Category::Admitted)
            .count();
        let expected = self
            .creates
            .iter()
            .filter(|c| self.admitted_as_expected(c))
            .count();
        let rejected = sent - admitted;
        println!(
            "Sent {sent}; admitted {admitted} (mutated as expected: {expected}); rejected or failed {rejected}; all creates p50 {}, p99 {}, max {}.",
            ms(percentile(&all, 0.5)),
            ms(percentile(&all, 0.99)),
            ms(percentile(&all, 1.0))
        );
        println!();
        println!("| Pods | outcome | count | p50 | p99 | max | first message |");
        println!("|---|---|---|---|---|---|---|");
        let mut groups: BTreeMap<(Sort, Category, bool), Vec<&Create>> = BTreeMap::new();
        for create in &self.creates {
            let as_expected = create.category != Category::Admitted || self.expect.holds(create);
            groups
                .entry((create.sort, create.category, as_expected))
                .or_default()
                .push(create);
        }
        for ((sort, category, as_expected), creates) in &groups {
            let mut latencies: Vec<Duration> = creates.iter().map(|c| c.latency).collect();
            latencies.sort();
            let outcome = match (category, as_expected) {
                (Category::Admitted, true) => "admitted, mutated as expected".to_string(),
                (Category::Admitted, false) => "admitted, NOT as expected".to_string(),
                (other, _) => other.label().to_string(),
            };
            let first = creates
                .iter()
                .min_by_key(|c| c.scheduled)
                .map(|c| {
                    if c.category == Category::Admitted {
                        if *as_expected {
                            String::new()
                        } else {
                            format!("labels {:?}", c.labels)
                        }
                    } else {
                        c.message.clone()
                    }
                })
                .unwrap_or_default();
            println!(
                "| {} | {outcome} | {} | {} | {} | {} | {} |",
                sort.label(),
                creates.len(),
                ms(percentile(&latencies, 0.5)),
                ms(percentile(&latencies, 0.99)),
                ms(percentile(&latencies, 1.0)),
                shorten(&first, 160)
            );
        }
        println!();
        let odd: Vec<&Create> = self
            .creates
            .iter()
            .filter(|c| c.category == Category::Admitted && !self.expect.holds(c))
            .collect();
        for c in odd.iter().take(5) {
            println!(
                "Admitted but not as expected: `{}` ({}), scheduled at {}, answered at {}, labels {:?}",
                c.name,
                c.sort.label(),
                offset(self.began, c.scheduled),
                offset(self.began, c.done()),
                c.labels
            );
        }
        if !odd.is_empty() {
            println!();
        }
        for check in &self.checks {
            println!(
                "- {} {}",
                if check.ok { "PASS" } else { "**FAIL**" },
                check.what
            );
        }
        println!();
    }
}

fn shorten(text: &str, max: usize) -> String {
    let text = text.replace('|', "\\|").replace('\n', " ");
    if text.chars().count() <= max {
        text
    } else {
        format!("{}…", text.chars().take(max).collect::<String>())
    }
}

/// The first admitted create (by when its answer came) among those scheduled from `from` on.
fn first_admitted_after(creates: &[Create], from: Instant) -> Option<&Create> {
    creates
        .iter()
        .filter(|c| c.scheduled >= from && c.category == Category::Admitted)
        .min_by_key(|c| c.done())
}

/// The span of the creates of a category: first scheduled, last answered.
fn span(creates: &[Create], category: Category) -> Option<(Instant, Instant, usize)> {
    let of: Vec<&Create> = creates.iter().filter(|c| c.category == category).collect();
    let first = of.iter().map(|c| c.scheduled).min()?;
    let last = of.iter().map(|c| c.done()).max()?;
    Some((first, last, of.len()))
}

// ---------------------------------------------------------------------------------------------
// The world

/// Everything started, stopped in the right order when dropped (on failure too): the load's
/// tasks, the webhooks, kanon, the hanging server, the control plane.
struct World {
    runtime: tokio::runtime::Runtime,
    client: kube::Client,
    kanon: Option<Kanon>,
    hang: Option<HangServer>,
    webhooks: bool,
    /// The values the label policies `faults-a` and `faults-b` give now.
    current_values: (String, String),
    /// Last: stopped after kanon.
    cluster: Cluster,
}

impl World {
    fn start() -> Result<World> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        // kubectl must not hang on a stopped apiserver.
        let cluster = Cluster::start("faults", Options::default())?
            .with_request_timeout(Duration::from_secs(20));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let client = runtime.block_on(async {
            let kubeconfig =
                kube::config::Kubeconfig::read_from(cluster.control_plane().kubeconfig())?;
            let config =
                kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
            anyhow::Ok(kube::Client::try_from(config)?)
        })?;
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

    fn control_plane(&self) -> &ControlPlane {
        self.cluster.control_plane()
    }

    fn control_plane_mut(&mut self) -> &mut ControlPlane {
        self.cluster.control_plane_mut()
    }

    fn kanon(&self) -> &Kanon {
        self.kanon.as_ref().expect("kanon")
    }

    fn kanon_mut(&mut self) -> &mut Kanon {
        self.kanon.as_mut().expect("kanon")
    }

    /// `kanon serve` on fixed ports and a fixed certificate directory, so that it can be
    /// killed and started again behind the same webhook configurations; one log per life.
    fn new_kanon(&self) -> Result<Kanon> {
        Ok(self
            .cluster
            .kanon(env!("CARGO_BIN_EXE_kanon"), "kanon")?
            .with_settings(&["--http-allow-cidr", "127.0.0.1/32"])
            .with_log_per_start()
            .with_probe_timeout(Duration::from_secs(2)))
    }

    /// kanon's metrics text (empty when it does not answer).
    fn kanon_metrics(&self) -> String {
        self.kanon().metrics().unwrap_or_default()
    }

    fn apply(&self, document: &Value) -> Result<()> {
        self.cluster.apply(document)
    }

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

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn policy_api(&self, kind: &str) -> Result<Api<DynamicObject>> {
        Ok(Api::all_with(self.client.clone(), &policy_resource(kind)?))
    }

    /// Server-side applies a policy document, retrying for up to `within` (the apiserver may
    /// just be coming back); when the successful write started.
    fn apply_policy(&self, document: &Value, within: Duration) -> Result<Instant> {
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

    fn delete_policy(&self, kind: &str, name: &str) -> Result<()> {
        let api = self.policy_api(kind)?;
        self.runtime
            .block_on(api.delete(name, &DeleteParams::default()))?;
        Ok(())
    }

    /// Waits until the policy's status shows `Ready=True` for its current generation.
    fn wait_policy_ready(&self, kind: &str, name: &str) -> Result<()> {
        let api = self.policy_api(kind)?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(object) = self.runtime.block_on(api.get(name)) {
                let value = serde_json::to_value(&object)?;
                let generation = value.pointer("/metadata/generation");
                let observed = value.pointer("/status/observedGeneration");
                if generation.is_some() && generation == observed {
                    ensure!(
                        value.pointer("/status/conditions/0/status") == Some(&json!("True")),
                        "{kind} {name} is not ready: {value}"
                    );
                    return Ok(());
                }
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
    fn dry_run_labels(&self) -> Result<BTreeMap<String, String>> {
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
    fn wait_label(&self, label: &str, value: &str, within: Duration) -> Result<Instant> {
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

    fn webhook_configurations(&self) -> Result<(Value, Value)> {
        let kanon = self.kanon();
        let webhook = |name: &str, path: &str| {
            let rules = kit::pod_rules(&["CREATE", "UPDATE"]);
            let mut webhook = kanon.webhook(name, path, rules, kit::namespaces_named(&[NS]))?;
            webhook["timeoutSeconds"] = json!(WEBHOOK_TIMEOUT_SECS);
            anyhow::Ok(webhook)
        };
        Ok((
            kit::mutating_configuration(
                WEBHOOKS,
                vec![webhook("mutate.faults.kanon.dev", "/mutate")?],
            ),
            kit::validating_configuration(
                WEBHOOKS,
                vec![webhook("validate.faults.kanon.dev", "/validate")?],
            ),
        ))
    }

    fn register_webhooks(&mut self) -> Result<()> {
        let (mutating, validating) = self.webhook_configurations()?;
        self.webhooks = true;
        self.apply(&mutating)?;
        self.apply(&validating)?;
        self.wait_label(LABEL_A, FIRST_A, Duration::from_secs(30))?;
        Ok(())
    }

    fn delete_webhooks(&mut self) -> Result<()> {
        if self.webhooks {
            self.cluster.delete_webhook_configurations(WEBHOOKS)?;
            self.webhooks = false;
        }
        Ok(())
    }

    /// Deletes the Pods matching `selector` (never the forbidden ones: an admitted forbidden
    /// Pod stays for the final count), without waiting.
    fn delete_pods(&self, selector: &str) -> Result<()> {
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
    fn forbidden_stored(&self) -> Result<Vec<String>> {
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
    fn kanon_client(&self) -> Result<reqwest::Client> {
        Ok(reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(&self.kanon().ca_pem()?)?])
            .http1_only()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()?)
    }

    /// `count` reviews POSTed straight to kanon's `/mutate`, 50 ms apart: how many were
    /// allowed with the labels `faults-a` and `faults-b`, and the latencies.
    fn direct_reviews(&self, count: usize) -> Result<(usize, Vec<Duration>, String)> {
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

    fn kanon_sample(&self) -> Option<ProcSample> {
        self.kanon().pid().and_then(proc_sample)
    }

    /// Whether kube-apiserver answers `/readyz`.
    fn apiserver_ready(&self) -> bool {
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

// ---------------------------------------------------------------------------------------------
// The phases

fn sleep(d: Duration) {
    std::thread::sleep(d);
}

fn baseline(world: &World, settings: &Settings) -> Result<Report> {
    let load = Load::start(world, "p1", settings.rate, phase_labels("p1", false));
    let began = load.began;
    sleep(Duration::from_secs(settings.phase_secs));
    let creates = load.finish(world)?;
    let mut report = Report::new(
        "1. Baseline: kanon healthy",
        began,
        creates,
        Expect::exactly(FIRST_A, FIRST_B),
    );
    report.common_checks();
    let wrong = report.wrong().len();
    report.check(
        format!("every create ended as it should: normal Pods admitted and labelled, forbidden ones denied with the policy's message ({wrong} did not)"),
        wrong == 0,
    );
    Ok(report)
}

/// What a starting kanon answered to reviews sent straight to it.
#[derive(Default)]
struct Probed {
    refused: usize,
    first_answer: Option<Instant>,
    forbidden_allowed_before_ready: usize,
    forbidden_denied_before_ready: usize,
    unlabelled_before_ready: usize,
    labelled_before_ready: usize,
    /// 503 "not ready": kube-apiserver applies the webhook's failurePolicy.
    not_ready_before_ready: usize,
    other: usize,
}

/// Reviews POSTed straight to kanon's port, back to back (alternately a forbidden Pod to
/// `/validate` and a Pod to `/mutate`), each classified by whether `/readyz` already answered
/// 200 when it was sent (a second task polls it every 5 ms).
struct StartProbe {
    stop: Arc<AtomicBool>,
    handle: tokio::task::JoinHandle<Probed>,
}

impl StartProbe {
    fn start(world: &World) -> Result<StartProbe> {
        let client = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(&world.kanon().ca_pem()?)?])
            .http1_only()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()?;
        let validate = world.kanon().url("/validate?timeout=5s");
        let mutate = world.kanon().url("/mutate?timeout=5s");
        let readyz = world.kanon().url("/readyz");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let handle = world.runtime.spawn(async move {
            let ready = Arc::new(AtomicBool::new(false));
            let watcher = {
                let (client, ready, stopped) = (client.clone(), ready.clone(), stopped.clone());
                tokio::spawn(async move {
                    while !stopped.load(Ordering::Relaxed) {
                        if let Ok(r) = client.get(&readyz).send().await
                            && r.status().is_success()
                        {
                            ready.store(true, Ordering::SeqCst);
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                })
            };
            let mut probed = Probed::default();
            let mut n = 0usize;
            while !stopped.load(Ordering::Relaxed) {
                n += 1;
                let forbidden = n.is_multiple_of(2);
                let url = if forbidden { &validate } else { &mutate };
                let body = review(&format!("probe-{n}"), forbidden).to_string();
                let was_ready = ready.load(Ordering::SeqCst);
                let answer = async {
                    let response = client
                        .post(url)
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await?;
                    let status = response.status();
                    let bytes = response.bytes().await?;
                    anyhow::Ok((status, bytes))
                }
                .await;
                match answer {
                    Err(_) => {
                        probed.refused += 1;
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    Ok((status, bytes)) => {
                        probed.first_answer.get_or_insert_with(Instant::now);
                        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                        let allowed = value["response"]["allowed"].as_bool();
                        if was_ready {
                            continue;
                        }
                        match (forbidden, status.is_success(), allowed) {
                            (true, true, Some(true)) => probed.forbidden_allowed_before_ready += 1,
                            (true, true, Some(false)) => probed.forbidden_denied_before_ready += 1,
                            (false, true, Some(true)) => match patched_labels(&bytes) {
                                Ok(labels) if labels.contains_key(LABEL_A) => {
                                    probed.labelled_before_ready += 1
                                }
                                _ => probed.unlabelled_before_ready += 1,
                            },
                            (_, false, _) if status.as_u16() == 503 => {
                                probed.not_ready_before_ready += 1
                            }
                            _ => probed.other += 1,
                        }
                    }
                }
            }
            let _ = watcher.await;
            probed
        });
        Ok(StartProbe { stop, handle })
    }

    fn finish(self, world: &World) -> Result<Probed> {
        self.stop.store(true, Ordering::Relaxed);
        Ok(world.runtime.block_on(self.handle)?)
    }
}

fn kanon_killed(world: &mut World, settings: &Settings) -> Result<Report> {
    let load = Load::start(world, "p2", settings.rate, phase_labels("p2", false));
    let began = load.began;
    sleep(Duration::from_secs(settings.phase_secs / 4).max(Duration::from_secs(2)));
    let old_pid = world.kanon().pid();
    let killed = Instant::now();
    world.kanon_mut().kill()?;
    eprintln!("faults: kanon killed");
    sleep(Duration::from_secs(settings.down_secs));
    // While kanon starts, reviews POSTed straight to it, back to back: what does it answer
    // before it is ready?
    let probe = StartProbe::start(world)?;
    let restarted = Instant::now();
    world.kanon_mut().spawn()?;
    let ready = world
        .kanon_mut()
        .wait_ready(Duration::from_secs(60), READY_POLL);
    sleep(Duration::from_millis(200));
    let probed = probe.finish(world)?;
    let ready = ready?;
    eprintln!(
        "faults: kanon ready {:.2} s after its restart",
        (ready - restarted).as_secs_f64()
    );
    sleep(Duration::from_secs(settings.phase_secs / 2).max(Duration::from_secs(3)));
    let creates = load.finish(world)?;
    let mut report = Report::new(
        "2. kanon killed (SIGKILL) and restarted",
        began,
        creates,
        Expect::exactly(FIRST_A, FIRST_B),
    );
    report.note(format!(
        "kanon (pid {old_pid:?}) SIGKILLed at {}, started again at {} (pid {:?}), `/readyz` 200 at {}: **restart → ready {}**, kill → ready {}",
        offset(began, killed),
        offset(began, restarted),
        world.kanon().pid(),
        offset(began, ready),
        secs(ready - restarted),
        secs(ready - killed)
    ));
    let first = first_admitted_after(&report.creates, killed);
    match first {
        Some(c) => report.note(format!(
            "first admitted create scheduled after the kill answered at {}: **kill → first admitted {}**, restart → first admitted {}, ready → first admitted {}",
            offset(began, c.done()),
            secs(c.done() - killed),
            secs(c.done().saturating_duration_since(restarted)),
            secs(c.done().saturating_duration_since(ready)),
        )),
        None => report.note("no create was admitted after the kill"),
    }
    if let Some((from, to, n)) = span(&report.creates, Category::WebhookFailed) {
        report.note(format!(
            "{n} creates refused with \"failed calling webhook\", scheduled from {} to answers by {}",
            offset(began, from),
            offset(began, to)
        ));
    }
    let ready_at =
        |at: Option<Instant>| at.map(|at| offset(began, at)).unwrap_or_else(|| "-".into());
    report.note(format!(
        "reviews POSTed straight to the restarting kanon, back to back, from its start to 0.2 s after ready: {} refused connections; **before `/readyz` was 200**: /validate of a `forbidden` Pod allowed {} times (first answer at {}), denied {}; /mutate of a Pod allowed without kanon's labels {} times, with them {}; answered 503 (not ready: the webhook's failurePolicy applies) {}; other answers {}",
        probed.refused,
        probed.forbidden_allowed_before_ready,
        ready_at(probed.first_answer),
        probed.forbidden_denied_before_ready,
        probed.unlabelled_before_ready,
        probed.labelled_before_ready,
        probed.not_ready_before_ready,
        probed.other,
    ));
    report.common_checks();
    report.check(
        format!(
            "the restarting kanon allowed no review of a forbidden Pod, nor a Pod without its labels, before it was ready ({} and {})",
            probed.forbidden_allowed_before_ready, probed.unlabelled_before_ready
        ),
        probed.forbidden_allowed_before_ready == 0 && probed.unlabelled_before_ready == 0,
    );
    let settle = ready + Duration::from_secs(1);
    let wrong = report.wrong_from(settle);
    report.check(
        format!(
            "every create scheduled from 1 s after ready on ended as it should ({} did not)",
            wrong.len()
        ),
        wrong.is_empty(),
    );
    let before: Vec<&Create> = report
        .creates
        .iter()
        .filter(|c| c.done() < killed)
        .filter(|c| !report.as_it_should(c))
        .collect();
    report.check(
        format!(
            "every create answered before the kill ended as it should ({} did not)",
            before.len()
        ),
        before.is_empty(),
    );
    let refused_other: usize = report
        .creates
        .iter()
        .filter(|c| c.scheduled >= killed && c.scheduled < ready)
        .filter(|c| {
            !matches!(
                c.category,
                Category::Admitted | Category::Denied | Category::WebhookFailed
            )
        })
        .count();
    report.check(
        format!(
            "creates during the outage were refused with \"failed calling webhook\" (other failures: {refused_other})"
        ),
        refused_other == 0,
    );
    report.check(
        format!(
            "kanon ready again within 30 s ({})",
            secs(ready - restarted)
        ),
        ready - restarted < Duration::from_secs(30),
    );
    Ok(report)
}

/// Phases 3 and 4: a control-plane process stopped for `down_secs` and started again.
#[derive(Clone, Copy, PartialEq)]
enum Outage {
    Apiserver,
    Etcd,
}

fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
}

fn outage(world: &mut World, settings: &Settings, which: Outage) -> Result<Report> {
    let (prefix, title, label, new_value) = match which {
        Outage::Apiserver => (
            "p3",
            "3. kube-apiserver restarted",
            LABEL_A,
            "a-after-apiserver",
        ),
        Outage::Etcd => ("p4", "4. etcd restarted", LABEL_B, "b-after-etcd"),
    };
    let (old_a, old_b) = world.current_values.clone();
    let watch_errors_before = metric_sum(&world.kanon_metrics(), "kanon_policy_watch_errors_total");
    let load = Load::start(world, prefix, settings.rate, phase_labels(prefix, false));
    let began = load.began;
    sleep(Duration::from_secs(settings.phase_secs / 4).max(Duration::from_secs(2)));
    let stopping = Instant::now();
    match which {
        Outage::Apiserver => world.control_plane_mut().stop_apiserver()?,
        Outage::Etcd => world.control_plane_mut().stop_etcd()?,
    }
    let stopped = Instant::now();
    eprintln!("faults: {title}: stopped");
    // kanon keeps serving its last policies meanwhile.
    let ready_during = world.kanon().readyz();
    let reviews = ((settings.down_secs * 1000 / 50) as usize / 2).clamp(5, 40);
    let (good, direct_latencies, last_error) = world.direct_reviews(reviews)?;
    let left = Duration::from_secs(settings.down_secs).saturating_sub(stopped.elapsed());
    sleep(left);
    let starting = Instant::now();
    match which {
        Outage::Apiserver => world.control_plane_mut().start_apiserver()?,
        Outage::Etcd => world.control_plane_mut().start_etcd()?,
    }
    let started = Instant::now();
    // etcd back does not mean the apiserver is: wait for its /readyz too.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !world.apiserver_ready() {
        ensure!(
            Instant::now() < deadline,
            "kube-apiserver not ready 60 s after the restart"
        );
        sleep(Duration::from_millis(50));
    }
    let api_ready = Instant::now();
    eprintln!("faults: {title}: back");
    // A policy change after the restart: kanon's watches must deliver it.
    let document = match which {
        Outage::Apiserver => policy_a(new_value),
        Outage::Etcd => policy_b(new_value),
    };
    let written = world.apply_policy(&document, Duration::from_secs(30))?;
    let write_done = Instant::now();
    let effect = world.wait_label(label, new_value, Duration::from_secs(30));
    match which {
        Outage::Apiserver => world.current_values.0 = new_value.to_string(),
        Outage::Etcd => world.current_values.1 = new_value.to_string(),
    }
    sleep(Duration::from_secs(settings.phase_secs / 2).max(Duration::from_secs(3)));
    let creates = load.finish(world)?;
    let (new_a, new_b) = world.current_values.clone();
    let mut report = Report::new(
        title,
        began,
        creates,
        Expect {
            a: vec![old_a, new_a],
            b: vec![old_b, new_b],
        },
    );
    let what = match which {
        Outage::Apiserver => "kube-apiserver",
        Outage::Etcd => "etcd",
    };
    report.note(format!(
        "{what} stopping at {} (stopped {} later), starting at {} (back {} later), kube-apiserver `/readyz` OK at {}: **down {}**",
        offset(began, stopping),
        secs(stopped - stopping),
        offset(began, starting),
        secs(started - starting),
        offset(began, api_ready),
        secs(api_ready - stopping)
    ));
    let mut direct = direct_latencies.clone();
    direct.sort();
    report.note(format!(
        "during the outage: kanon's `/readyz` answered {ready_during}; {good} of {reviews} reviews POSTed straight to kanon's `/mutate` were allowed with both labels (p50 {}, max {}){}",
        ms(percentile(&direct, 0.5)),
        ms(percentile(&direct, 1.0)),
        if last_error.is_empty() { String::new() } else { format!("; last problem: {}", shorten(&last_error, 200)) }
    ));
    let effect_at = match &effect {
        Ok(at) => {
            report.note(format!(
                "policy change after the restart ({label}={new_value}), written at {} (the write took {}): **in force {} after the write started**, {} after the apiserver was ready again",
                offset(began, written),
                secs(write_done - written),
                secs(*at - written),
                secs(*at - api_ready)
            ));
            Some(*at)
        }
        Err(error) => {
            report.note(format!("policy change after the restart: {error:#}"));
            None
        }
    };
    let watch_errors_after = metric_sum(&world.kanon_metrics(), "kanon_policy_watch_errors_total");
    report.note(format!(
        "kanon_policy_watch_errors_total: {watch_errors_before:.0} before, {watch_errors_after:.0} after"
    ));
    for category in [
        Category::Unavailable,
        Category::ServerError,
        Category::TimedOut,
        Category::WebhookFailed,
        Category::Other,
    ] {
        if let Some((from, to, n)) = span(&report.creates, category) {
            report.note(format!(
                "{n} creates \"{}\", scheduled from {} to answers by {}",
                category.label(),
                offset(began, from),
                offset(began, to)
            ));
        }
    }
    report.common_checks();
    report.check(
        format!("kanon stayed ready during the outage (/readyz {ready_during})"),
        ready_during == "200",
    );
    report.check(
        format!("kanon answered reviews with its policies during the outage ({good}/{reviews})"),
        good == reviews,
    );
    report.check(
        "a policy change after the restart took effect within 30 s",
        effect_at.is_some(),
    );
    // README: the watches come back by themselves, retrying at least once a second (a restarted
    // apiserver may fail the first retry with "too old resource version").
    if let Some(at) = effect_at {
        report.check(
            format!(
                "and within 5 s of kube-apiserver being ready again (the README's \"retrying at least once a second\", twice, plus 3 s): {}",
                secs(at - api_ready)
            ),
            at - api_ready <= Duration::from_secs(5),
        );
    }
    if let Some(at) = effect_at {
        let wrong = report.wrong_from(at + Duration::from_millis(500));
        report.check(
            format!(
                "every create scheduled from 0.5 s after the change was in force on ended as it should ({} did not)",
                wrong.len()
            ),
            wrong.is_empty(),
        );
        let stale: usize = report
            .creates
            .iter()
            .filter(|c| c.scheduled >= at + Duration::from_millis(500))
            .filter(|c| c.category == Category::Admitted)
            .filter(|c| c.labels.get(label).map(String::as_str) != Some(new_value))
            .count();
        report.check(
            format!("and carried the new value ({stale} did not)"),
            stale == 0,
        );
    }
    let before: usize = report
        .creates
        .iter()
        .filter(|c| c.done() < stopping)
        .filter(|c| !report.as_it_should(c))
        .count();
    report.check(
        format!("every create answered before the outage ended as it should ({before} did not)"),
        before == 0,
    );
    Ok(report)
}

fn hanging_lookup(world: &mut World, settings: &Settings, timeout: Option<u32>) -> Result<Report> {
    if world.hang.is_none() {
        world.hang = Some(HangServer::start()?);
    }
    let (port, accepted_before) = {
        let hang = world.hang.as_ref().context("the hanging server")?;
        (hang.port, hang.accepted.load(Ordering::Relaxed))
    };
    world.apply_policy(&policy_hang(port, timeout), Duration::from_secs(10))?;
    world.wait_policy_ready("ClusterOverridePolicy", "faults-hang")?;
    let metrics_before = world.kanon_metrics();
    let (prefix, title) = match timeout {
        Some(_) => (
            "p5a",
            "5a. A lookup target that never answers: reference `timeoutSeconds: 1`",
        ),
        None => (
            "p5b",
            "5b. A lookup target that never answers: no `timeoutSeconds` (the review's deadline bounds it)",
        ),
    };
    let load = Load::start(world, prefix, settings.rate, phase_labels(prefix, true));
    let began = load.began;
    sleep(Duration::from_secs(settings.phase_secs));
    let stopped_sending = Instant::now();
    let peak = world.kanon_sample();
    let creates = load.finish(world)?;
    world.delete_policy("ClusterOverridePolicy", "faults-hang")?;
    let metrics_after = world.kanon_metrics();
    let accepted = world
        .hang
        .as_ref()
        .map(|h| h.accepted.load(Ordering::Relaxed))
        .unwrap_or(0)
        - accepted_before;
    let (a, b) = world.current_values.clone();
    let mut report = Report::new(title, began, creates, Expect::exactly(&a, &b));
    report.note(format!(
        "half the normal Pods carry `lookup: hang` and are selected by `faults-hang` (`failurePolicy: Ignore`, label from `http://127.0.0.1:{port}/tier`, a server that accepts and never answers); the others are bystanders; sending stopped at {}",
        offset(began, stopped_sending)
    ));
    let errors = |text: &str| {
        text.lines()
            .filter(|l| {
                l.starts_with("kanon_lookup_errors_total{") && l.contains("source=\"http\"")
            })
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
    };
    report.note(format!(
        "the hanging server accepted {accepted} connections; kanon's http lookup errors after the phase: {}; kanon_policy_errors_total {:.0} → {:.0}",
        errors(&metrics_after).join(", "),
        metric_sum(&metrics_before, "kanon_policy_errors_total"),
        metric_sum(&metrics_after, "kanon_policy_errors_total"),
    ));
    // kanon's own view: reviews and their mean duration over the phase, per webhook (the
    // validating webhook runs no lookup: its time is waiting for an evaluation slot).
    for webhook in ["mutate", "validate"] {
        let filter = format!("webhook=\"{webhook}\"");
        let delta = |name: &str| {
            metric_sum_filtered(&metrics_after, name, &filter)
                - metric_sum_filtered(&metrics_before, name, &filter)
        };
        let count = delta("kanon_admission_duration_seconds_count");
        let sum = delta("kanon_admission_duration_seconds_sum");
        let results: Vec<String> = metrics_after
            .lines()
            .filter(|l| l.starts_with("kanon_admission_requests_total{") && l.contains(&filter))
            .filter_map(|l| {
                let after: f64 = l.rsplit(' ').next()?.parse().ok()?;
                let series = l.rsplit_once(' ')?.0;
                let before: f64 = metrics_before
                    .lines()
                    .find(|b| b.rsplit_once(' ').is_some_and(|(s, _)| s == series))
                    .and_then(|b| b.rsplit(' ').next()?.parse().ok())
                    .unwrap_or(0.0);
                let result = series.split("result=\"").nth(1)?.split('"').next()?;
                (after > before).then(|| format!("{result} {:.0}", after - before))
            })
            .collect();
        report.note(format!(
            "kanon's /{webhook} over the phase: {count:.0} reviews ({}), mean duration {} (kanon_admission_duration_seconds)",
            results.join(", "),
            if count > 0.0 { ms(Duration::from_secs_f64(sum / count)) } else { "-".into() }
        ));
    }
    if let Some(sample) = peak {
        report.note(format!(
            "kanon at the end of sending: RSS {:.1} MB, {} fds, {} threads",
            sample.rss_kb as f64 / 1024.0,
            sample.fds,
            sample.threads
        ));
    }
    report.common_checks();
    // What bounds a hanging lookup: the reference's timeout, else the review's deadline (the
    // webhook's timeout); the rest of the create (the validating call, storage) gets 1 s.
    let bound = Duration::from_secs(timeout.map_or(WEBHOOK_TIMEOUT_SECS, u64::from) + 1);
    for sort in [Sort::Hang, Sort::Normal, Sort::Forbidden] {
        let of: Vec<&Create> = report.creates.iter().filter(|c| c.sort == sort).collect();
        let wrong = of.iter().filter(|c| !report.as_it_should(c)).count();
        let mut latencies: Vec<Duration> = of.iter().map(|c| c.latency).collect();
        latencies.sort();
        let what = match sort {
            Sort::Hang => {
                "Pods selecting the hanging lookup admitted and labelled (but for the hanging label)"
            }
            Sort::Normal => "bystander Pods (no lookup) admitted and labelled",
            Sort::Forbidden => "forbidden Pods (no lookup) denied by the policy",
        };
        report.check(
            format!("{what}: {} of {} ({wrong} not)", of.len() - wrong, of.len()),
            wrong == 0,
        );
        if sort == Sort::Hang {
            let max = percentile(&latencies, 1.0);
            report.check(
                format!(
                    "their creates bounded by the lookup's bound + 1 s ({}): max {}",
                    secs(bound),
                    ms(max)
                ),
                max <= bound,
            );
        } else {
            let p99 = percentile(&latencies, 0.99);
            report.check(
                format!(
                    "{} Pods not held up by the hanging lookup of others: p99 {} ≤ 1 s",
                    sort.label(),
                    ms(p99)
                ),
                p99 <= Duration::from_secs(1),
            );
        }
    }
    // Let kanon drain whatever is still waiting before the next phase: a dry-run create must
    // come back labelled again.
    let drained = Instant::now();
    let recovered = world.wait_label(LABEL_A, &a, Duration::from_secs(60));
    report.note(format!(
        "after the load stopped (all creates answered), a dry-run create came back labelled {} later",
        secs(drained.elapsed())
    ));
    report.check(
        format!(
            "kanon serves normally again within 60 s of the end of the phase{}",
            match &recovered {
                Ok(_) => String::new(),
                Err(e) => format!(" ({})", shorten(&format!("{e:#}"), 200)),
            }
        ),
        recovered.is_ok(),
    );
    Ok(report)
}

fn metric_sum_filtered(text: &str, name: &str, contains: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(contains))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
}

fn burst(world: &mut World, settings: &Settings) -> Result<Report> {
    const UPDATES: usize = 50;
    const OVER: Duration = Duration::from_secs(2);
    let (old_a, old_b) = world.current_values.clone();
    let load = Load::start(world, "p6", settings.rate, phase_labels("p6", false));
    let began = load.began;
    sleep(Duration::from_secs(2));
    let api = world.policy_api("ClusterOverridePolicy")?;
    let burst_began = Instant::now();
    let (write_latencies, write_errors) = world.runtime.block_on(async {
        let params = PatchParams::apply("kanon-faults").force();
        let mut latencies = Vec::new();
        let mut errors = Vec::new();
        let start = tokio::time::Instant::now();
        for n in 0..UPDATES {
            tokio::time::sleep_until(start + OVER * n as u32 / UPDATES as u32).await;
            let (name, document) = if n % 2 == 0 {
                ("faults-a", policy_a(&format!("a-burst-{n}")))
            } else {
                ("faults-b", policy_b(&format!("b-burst-{n}")))
            };
            let started = Instant::now();
            match api.patch(name, &params, &Patch::Apply(&document)).await {
                Ok(_) => latencies.push(started.elapsed()),
                Err(error) => errors.push(error.to_string()),
            }
        }
        (latencies, errors)
    });
    let burst_ended = Instant::now();
    let final_a = format!("a-burst-{}", UPDATES - 2);
    let final_b = format!("b-burst-{}", UPDATES - 1);
    let in_force = world
        .wait_label(LABEL_A, &final_a, Duration::from_secs(30))
        .and_then(|_| world.wait_label(LABEL_B, &final_b, Duration::from_secs(30)));
    world.current_values = (final_a.clone(), final_b.clone());
    sleep(Duration::from_secs(settings.phase_secs / 2).max(Duration::from_secs(3)));
    let creates = load.finish(world)?;
    let status_ready = world
        .wait_policy_ready("ClusterOverridePolicy", "faults-a")
        .and_then(|_| world.wait_policy_ready("ClusterOverridePolicy", "faults-b"));
    let mut a_values = vec![old_a];
    let mut b_values = vec![old_b];
    for n in 0..UPDATES {
        if n % 2 == 0 {
            a_values.push(format!("a-burst-{n}"));
        } else {
            b_values.push(format!("b-burst-{n}"));
        }
    }
    let mut report = Report::new(
        "6. A burst of policy changes under load",
        began,
        creates,
        Expect {
            a: a_values,
            b: b_values,
        },
    );
    let mut writes = write_latencies.clone();
    writes.sort();
    report.note(format!(
        "{UPDATES} server-side applies alternating `faults-a` and `faults-b` from {} to {} ({} writes succeeded, p50 {}, max {}; {} failed)",
        offset(began, burst_began),
        offset(began, burst_ended),
        write_latencies.len(),
        ms(percentile(&writes, 0.5)),
        ms(percentile(&writes, 1.0)),
        write_errors.len()
    ));
    let effect_at = match &in_force {
        Ok(at) => {
            report.note(format!(
                "the final values ({LABEL_A}={final_a}, {LABEL_B}={final_b}) were in force {} after the last write",
                secs(at.saturating_duration_since(burst_ended))
            ));
            Some(*at)
        }
        Err(error) => {
            report.note(format!("final values: {error:#}"));
            None
        }
    };
    report.common_checks();
    let failed: usize = report
        .creates
        .iter()
        .filter(|c| !report.as_it_should(c))
        .count();
    report.check(
        format!("no create failed or came back wrong during the burst ({failed})"),
        failed == 0,
    );
    report.check(
        format!(
            "every write of the burst succeeded ({} failed)",
            write_errors.len()
        ),
        write_errors.is_empty(),
    );
    report.check(
        "the final values were in force within 30 s of the last write",
        effect_at.is_some(),
    );
    report.check(
        format!(
            "the policies' status shows Ready for their last generation{}",
            match &status_ready {
                Ok(()) => String::new(),
                Err(e) => format!(" ({})", shorten(&format!("{e:#}"), 200)),
            }
        ),
        status_ready.is_ok(),
    );
    if let Some(at) = effect_at {
        let stale: usize = report
            .creates
            .iter()
            .filter(|c| c.scheduled >= at + Duration::from_millis(500))
            .filter(|c| c.category == Category::Admitted)
            .filter(|c| {
                c.labels.get(LABEL_A) != Some(&final_a) || c.labels.get(LABEL_B) != Some(&final_b)
            })
            .count();
        report.check(
            format!("every Pod admitted from 0.5 s after that on carries the final values ({stale} did not)"),
            stale == 0,
        );
    }
    Ok(report)
}

struct Soak {
    report: Report,
    samples: Vec<(Duration, ProcSample)>,
    deleted_batches: usize,
}

/// Least-squares slope of `y` over `x`.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    if sxx == 0.0 { 0.0 } else { sxy / sxx }
}

fn soak(world: &World, settings: &Settings) -> Result<Soak> {
    let rate = settings.rate as usize;
    let per_batch = rate * settings.sample_secs as usize;
    let base = phase_labels("soak", false);
    let labels: LabelsOf = Arc::new(move |i| {
        let mut labels = base(i);
        labels.insert("soak-batch".into(), format!("b{}", i / per_batch));
        labels
    });
    let load = Load::start(world, "soak", settings.rate, labels);
    let began = load.began;
    let mut samples = Vec::new();
    if let Some(sample) = world.kanon_sample() {
        samples.push((Duration::ZERO, sample));
    }
    let mut tick = 1u64;
    let mut deleted_batches = 0;
    let mut delete_errors = Vec::new();
    loop {
        let at = began + Duration::from_secs(settings.sample_secs * tick);
        let now = Instant::now();
        if at > now {
            sleep(at - now);
        }
        if let Some(sample) = world.kanon_sample() {
            samples.push((began.elapsed(), sample));
            eprintln!(
                "faults: soak {:>4} s: kanon RSS {:.1} MB, {} fds, {} threads; load {}",
                began.elapsed().as_secs(),
                sample.rss_kb as f64 / 1024.0,
                sample.fds,
                sample.threads,
                load_average()
            );
        }
        // The batch created two ticks ago (10–20 s old).
        if tick >= 2 {
            match world.delete_pods(&format!("phase=soak,soak-batch=b{}", tick - 2)) {
                Ok(()) => deleted_batches += 1,
                Err(error) => delete_errors.push(format!("{error:#}")),
            }
        }
        if settings.sample_secs * tick >= settings.soak_secs {
            break;
        }
        tick += 1;
    }
    let creates = load.finish(world)?;
    let (a, b) = world.current_values.clone();
    let mut report = Report::new(
        &format!(
            "Soak: {} s at {}/s, Pods deleted in batches 10–20 s after their creation",
            settings.soak_secs, settings.rate
        ),
        began,
        creates,
        Expect::exactly(&a, &b),
    );
    report.common_checks();
    let wrong = report.wrong().len();
    report.check(
        format!("every create ended as it should ({wrong} did not)"),
        wrong == 0,
    );
    report.check(
        format!(
            "every batch deletion succeeded ({} failed{})",
            delete_errors.len(),
            delete_errors
                .first()
                .map(|e| format!(": {}", shorten(e, 160)))
                .unwrap_or_default()
        ),
        delete_errors.is_empty(),
    );
    Ok(Soak {
        report,
        samples,
        deleted_batches,
    })
}

// ---------------------------------------------------------------------------------------------

/// Runs one phase, then deletes its Pods (but forbidden ones).
fn run_phase(
    world: &mut World,
    reports: &mut Vec<Report>,
    prefix: &str,
    run: impl FnOnce(&mut World) -> Result<Report>,
) -> Result<()> {
    eprintln!("faults: phase {prefix}");
    let report = run(world)?;
    let failed = report.checks.iter().filter(|c| !c.ok).count();
    eprintln!(
        "faults: phase {prefix} done: {} creates, {failed} failed checks; load {}",
        report.creates.len(),
        load_average()
    );
    reports.push(report);
    world.delete_pods(&format!("phase={prefix}"))?;
    sleep(Duration::from_secs(1));
    Ok(())
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(error) => {
            eprintln!("faults: the bench failed: {error:#}");
            println!();
            println!("**Verdict: FAIL** — the bench itself failed: {error:#}");
            std::process::ExitCode::from(1)
        }
    }
}

fn run() -> Result<bool> {
    let settings = Settings::from_env();
    let began = Instant::now();
    let load_before = load_average();
    let commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(repo())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .current_dir(repo())
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.get(3..))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let date = Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M:%S UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let mut world = World::start()?;
    world.namespace(NS)?;
    let mut kanon = world.new_kanon()?;
    kanon.spawn()?;
    kanon.wait_ready(Duration::from_secs(60), READY_POLL)?;
    world.kanon = Some(kanon);
    eprintln!("faults: kanon ready");
    for document in [
        policy_name(),
        policy_a(FIRST_A),
        policy_b(FIRST_B),
        policy_forbidden(),
    ] {
        world.apply_policy(&document, Duration::from_secs(10))?;
    }
    for (kind, name) in [
        ("ClusterOverridePolicy", "faults-name"),
        ("ClusterOverridePolicy", "faults-a"),
        ("ClusterOverridePolicy", "faults-b"),
        ("ClusterValidatePolicy", "faults-forbidden"),
    ] {
        world.wait_policy_ready(kind, name)?;
    }
    world.register_webhooks()?;
    eprintln!("faults: policies and webhooks in force");
    let kanon_start = world.kanon_sample();

    let mut reports = Vec::new();
    run_phase(&mut world, &mut reports, "p1", |w| baseline(w, &settings))?;
    run_phase(&mut world, &mut reports, "p2", |w| {
        kanon_killed(w, &settings)
    })?;
    run_phase(&mut world, &mut reports, "p3", |w| {
        outage(w, &settings, Outage::Apiserver)
    })?;
    run_phase(&mut world, &mut reports, "p4", |w| {
        outage(w, &settings, Outage::Etcd)
    })?;
    run_phase(&mut world, &mut reports, "p5a", |w| {
        hanging_lookup(w, &settings, Some(1))
    })?;
    run_phase(&mut world, &mut reports, "p5b", |w| {
        hanging_lookup(w, &settings, None)
    })?;
    run_phase(&mut world, &mut reports, "p6", |w| burst(w, &settings))?;
    world.hang = None;
    eprintln!("faults: soak for {} s", settings.soak_secs);
    let soak = soak(&world, &settings)?;
    world.delete_pods("phase=soak")?;

    // Final state.
    let forbidden = world.forbidden_stored()?;
    let kanon_alive = world.kanon_mut().running();
    let logs: Vec<PathBuf> = world.kanon().logs().to_vec();
    let mut log_lines = Vec::new();
    for log in &logs {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        for line in text.lines() {
            if line.contains("WARN") || line.contains("ERROR") || line.contains("panicked") {
                log_lines.push(format!(
                    "{}: {line}",
                    log.file_name().unwrap_or_default().to_string_lossy()
                ));
            }
        }
    }
    let load_after = load_average();
    drop(world);

    // ---- Report ----
    println!("# Faults survived, through the real apiserver (crates/kanon/benches/faults.rs)");
    println!();
    println!(
        "commit {commit}, {date}; load average before {load_before}, after {load_after}; {:.0} s in all{}. Load: {} Pod creates/s (one in ten `forbidden: \"yes\"`), open loop, each bounded by {} s; webhooks `failurePolicy: Fail`, `timeoutSeconds: {WEBHOOK_TIMEOUT_SECS}`; latencies from each create's scheduled start. Phases {} s of load (kill/outage {} s).",
        began.elapsed().as_secs_f64(),
        if settings.quick { " (quick mode)" } else { "" },
        settings.rate,
        CREATE_TIMEOUT.as_secs(),
        settings.phase_secs,
        settings.down_secs,
    );
    if !dirty.is_empty() {
        println!();
        println!(
            "Uncommitted changes in the working tree at the start: {}.",
            dirty.join(", ")
        );
    }
    if let Some(sample) = kanon_start {
        println!();
        println!(
            "kanon after start-up and policies: RSS {:.1} MB, {} fds, {} threads.",
            sample.rss_kb as f64 / 1024.0,
            sample.fds,
            sample.threads
        );
    }
    println!();
    let mut checks = Vec::new();
    for report in &reports {
        report.print();
        for check in &report.checks {
            checks.push((report.title.clone(), check.what.clone(), check.ok));
        }
    }

    // Soak.
    soak.report.print();
    for check in &soak.report.checks {
        checks.push((soak.report.title.clone(), check.what.clone(), check.ok));
    }
    let samples = &soak.samples;
    println!(
        "kanon sampled every {} s ({} samples; {} batches deleted):",
        settings.sample_secs,
        samples.len(),
        soak.deleted_batches
    );
    println!();
    println!("| kanon | first | after 1 min | last | max | slope (least squares) |");
    println!("|---|---|---|---|---|---|");
    let minute = samples
        .iter()
        .find(|(t, _)| *t >= Duration::from_secs(60))
        .or_else(|| samples.get(samples.len() / 2))
        .map(|(_, s)| *s);
    let (first, last) = (samples.first().map(|s| s.1), samples.last().map(|s| s.1));
    let mut soak_checks = Vec::new();
    if let (Some(first), Some(last), Some(minute)) = (first, last, minute) {
        let mb = |kb: u64| kb as f64 / 1024.0;
        let rss_points: Vec<(f64, f64)> = samples
            .iter()
            .map(|(t, s)| (t.as_secs_f64() / 60.0, mb(s.rss_kb)))
            .collect();
        let fd_points: Vec<(f64, f64)> = samples
            .iter()
            .map(|(t, s)| (t.as_secs_f64() / 60.0, s.fds as f64))
            .collect();
        let thread_points: Vec<(f64, f64)> = samples
            .iter()
            .map(|(t, s)| (t.as_secs_f64() / 60.0, s.threads as f64))
            .collect();
        let max_rss = samples.iter().map(|s| s.1.rss_kb).max().unwrap_or(0);
        let max_fds = samples.iter().map(|s| s.1.fds).max().unwrap_or(0);
        let max_threads = samples.iter().map(|s| s.1.threads).max().unwrap_or(0);
        println!(
            "| RSS | {:.1} MB | {:.1} MB | {:.1} MB | {:.1} MB | {:+.3} MB/min |",
            mb(first.rss_kb),
            mb(minute.rss_kb),
            mb(last.rss_kb),
            mb(max_rss),
            slope(&rss_points)
        );
        println!(
            "| open fds | {} | {} | {} | {} | {:+.3} fds/min |",
            first.fds,
            minute.fds,
            last.fds,
            max_fds,
            slope(&fd_points)
        );
        println!(
            "| threads | {} | {} | {} | {} | {:+.3} /min |",
            first.threads,
            minute.threads,
            last.threads,
            max_threads,
            slope(&thread_points)
        );
        println!();
        println!(
            "RSS (MB) every {} s: {}",
            settings.sample_secs,
            samples
                .iter()
                .map(|(_, s)| format!("{:.1}", mb(s.rss_kb)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        println!(
            "fds every {} s: {}",
            settings.sample_secs,
            samples
                .iter()
                .map(|(_, s)| s.fds.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        println!();
        // Bounded: after the first minute (caches, pools and allocator arenas warm) RSS may
        // wobble but not keep growing; every fd is a socket or a file that must be closed.
        soak_checks.push((
            format!(
                "RSS last ≤ 1.5 × RSS after the first minute ({:.1} MB vs {:.1} MB)",
                mb(last.rss_kb),
                1.5 * mb(minute.rss_kb)
            ),
            last.rss_kb as f64 <= 1.5 * minute.rss_kb as f64,
        ));
        soak_checks.push((
            format!(
                "open fds last ≤ first + 10 ({} vs {})",
                last.fds,
                first.fds + 10
            ),
            last.fds <= first.fds + 10,
        ));
    } else {
        soak_checks.push(("kanon was sampled".to_string(), false));
    }
    for (what, ok) in &soak_checks {
        println!("- {} {what}", if *ok { "PASS" } else { "**FAIL**" });
        checks.push((soak.report.title.clone(), what.clone(), *ok));
    }
    println!();

    println!("## End of the run");
    println!();
    let mut end_checks = vec![
        (
            format!(
                "stored Pods labelled forbidden=yes at the end: {} (must be 0){}",
                forbidden.len(),
                if forbidden.is_empty() {
                    String::new()
                } else {
                    format!(": {}", forbidden.join(", "))
                }
            ),
            forbidden.is_empty(),
        ),
        (
            format!("kanon still running at the end: {kanon_alive}"),
            kanon_alive,
        ),
    ];
    let panics = log_lines.iter().filter(|l| l.contains("panicked")).count();
    end_checks.push((format!("no panic in kanon's logs ({panics})"), panics == 0));
    for (what, ok) in &end_checks {
        println!("- {} {what}", if *ok { "PASS" } else { "**FAIL**" });
        checks.push(("end".into(), what.clone(), *ok));
    }
    println!();
    println!(
        "Warnings and errors in kanon's logs ({} lives): {}",
        logs.len(),
        log_lines.len()
    );
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for line in &log_lines {
        // Group by the message, without the timestamp.
        let key = line
            .split_once(": ")
            .map(|(_, rest)| rest)
            .unwrap_or(line)
            .split_whitespace()
            .skip(1)
            .collect::<Vec<_>>()
            .join(" ");
        let key = shorten(&key, 200);
        *kinds.entry(key).or_default() += 1;
    }
    let mut kinds: Vec<(String, usize)> = kinds.into_iter().collect();
    kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
    for (line, count) in kinds.iter().take(15) {
        println!("- {count}× `{}`", line.replace('`', "'"));
    }
    println!();
    let failed: Vec<&(String, String, bool)> = checks.iter().filter(|c| !c.2).collect();
    if failed.is_empty() {
        println!("**Verdict: PASS** — all {} checks held.", checks.len());
    } else {
        println!(
            "**Verdict: FAIL** — {} of {} checks failed:",
            failed.len(),
            checks.len()
        );
        for (title, what, _) in &failed {
            println!("- {title}: {what}");
        }
    }
    Ok(failed.is_empty())
}
