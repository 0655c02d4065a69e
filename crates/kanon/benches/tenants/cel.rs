//! `tenant-cel` (issue 34, finding 2): a tenant's costly CEL rules flooded, and another
//! namespace's reviews measured meanwhile.
//!
//! kanon runs as `kanon serve --policies DIR` (the release binary) with one ValidatePolicy in
//! the tenant's namespace [`TENANT`]: [`RULES`] CEL rules of [`VALIDATIONS`] validations of
//! about 600,000 cost units each, every one under kube-apiserver's per-call limit (the finding:
//! 336,000,000 units, some 5 s of CPU, per review when the budget was per rule). Two phases of
//! [`Settings::phase`] each:
//!
//! - idle: the measuring client alone;
//! - flood: [`FLOOD`] clients keep the tenant's labelled Pods in flight (a keep-alive
//!   connection each, back to back, `?timeout=10s`), as the finding's eight Pods.
//!
//! Throughout, the measuring client POSTs a ConfigMap of namespace [`OTHER`], which no policy
//! selects, to `/validate?timeout=10s` about every 20 ms, **on a new connection each time** (a
//! TLS handshake each: the finding's reviews got no answer because the handshake timed out).
//! Its latency (connect to answer) gives p50 and p99 per phase; a review with no `allowed`
//! answer within 10 s is lost. The target: the flood's p99 within twice the idle p99, none lost.
//!
//! [`tenant_cel`] is the whole measurement, for a tenant bench's main to call and print
//! ([`CelFigures::row`]).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kanon_control_plane::kanon::free_port;
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout};
use tokio_rustls::TlsConnector;

use crate::tls::tls_connector;

/// The tenant's namespace.
pub(crate) const TENANT: &str = "tenant-a";
/// The other namespace, whose reviews are measured.
pub(crate) const OTHER: &str = "team-b";
/// The tenant policy's rules.
pub(crate) const RULES: usize = 40;
/// Validations per rule.
pub(crate) const VALIDATIONS: usize = 14;
/// One validation: about 600,000 cost units.
pub(crate) const COSTLY: &str = "lists.range(600000).size() > 0";
/// The tenant's Pods in flight at once during the flood.
pub(crate) const FLOOD: usize = 8;
/// How long a review may take: the webhook's timeout.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between two measured reviews.
const PACE: Duration = Duration::from_millis(20);

/// What to run.
pub(crate) struct Settings {
    /// The kanon binary.
    pub(crate) bin: PathBuf,
    /// More `kanon serve` arguments.
    pub(crate) extra_args: Vec<String>,
    /// Each phase's length.
    pub(crate) phase: Duration,
}

/// Latencies of the measured reviews in one phase.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Latency {
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
    pub(crate) answered: usize,
    pub(crate) lost: usize,
}

impl Latency {
    /// The percentiles of `times` (the answered reviews), and `lost`.
    pub(crate) fn of(mut times: Vec<Duration>, lost: usize) -> Latency {
        times.sort();
        let at = |q: f64| {
            times
                .get(((times.len() as f64 * q) as usize).min(times.len().saturating_sub(1)))
                .copied()
                .unwrap_or_default()
        };
        Latency {
            p50: at(0.50),
            p99: at(0.99),
            answered: times.len(),
            lost,
        }
    }
}

/// The measurement.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CelFigures {
    pub(crate) idle: Latency,
    pub(crate) flood: Latency,
    /// The tenant's reviews answered during the flood, and how many of them denied.
    pub(crate) tenant_answered: usize,
    pub(crate) tenant_denied: usize,
}

impl CelFigures {
    /// Whether the target holds: the flood's p99 within twice the idle p99, none lost.
    pub(crate) fn within_target(&self) -> bool {
        self.flood.lost == 0 && self.idle.lost == 0 && self.flood.p99 <= self.idle.p99 * 2
    }

    /// A Markdown table row: idle p50/p99, flood p50/p99, lost, the tenant's reviews.
    pub(crate) fn row(&self) -> String {
        format!(
            "another namespace's ConfigMaps, p50 / p99: idle {:.1} / {:.1} ms, under the flood {:.1} / {:.1} ms, {} of {} lost; the tenant's reviews: {} ({} denied)",
            ms(self.idle.p50),
            ms(self.idle.p99),
            ms(self.flood.p50),
            ms(self.flood.p99),
            self.flood.lost,
            self.flood.answered + self.flood.lost,
            self.tenant_answered,
            self.tenant_denied,
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The tenant's ValidatePolicy (see the module's doc), as YAML kanon reads (JSON is YAML).
pub(crate) fn tenant_policy() -> Value {
    let validations: Vec<Value> = (0..VALIDATIONS)
        .map(|_| json!({"expression": COSTLY}))
        .collect();
    let rules: Vec<Value> = (0..RULES)
        .map(|i| {
            json!({"name": format!("costly-{i}"), "targetOperations": ["CREATE"],
                   "cel": {"validations": validations}})
        })
        .collect();
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ValidatePolicy",
        "metadata": {"name": "costly", "namespace": TENANT},
        "spec": {
            "failurePolicy": "Fail",
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "validateRules": rules,
        },
    })
}

/// A review of a CREATE of `object` (its namespace, kind and name from it).
fn review(uid: &str, object: &Value) -> Vec<u8> {
    let kind = object["kind"].as_str().unwrap_or_default();
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid, "operation": "CREATE",
            "namespace": object["metadata"]["namespace"], "name": object["metadata"]["name"],
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": format!("{}s", kind.to_lowercase())},
            "userInfo": {"username": "bench"},
            "object": object,
        },
    });
    serde_json::to_vec(&review).unwrap_or_default()
}

fn tenant_pod(uid: &str) -> Vec<u8> {
    review(
        uid,
        &json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": uid, "namespace": TENANT},
                "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}}),
    )
}

fn other_configmap(uid: &str) -> Vec<u8> {
    review(
        uid,
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": uid, "namespace": OTHER}, "data": {"key": "value"}}),
    )
}

/// Runs the measurement (see the module's doc).
pub(crate) async fn tenant_cel(settings: &Settings) -> Result<CelFigures> {
    let kanon = Kanon::spawn(settings)?;
    kanon.ready().await?;
    let tls = tls_connector();
    let idle = measure_apart(kanon.port, settings.phase).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let (answered, denied) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut flood = Vec::new();
    for client in 0..FLOOD {
        let (stop, answered, denied, tls) =
            (stop.clone(), answered.clone(), denied.clone(), tls.clone());
        let port = kanon.port;
        flood.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut stream) = connect(port, &tls).await else {
                    sleep(PACE).await;
                    continue;
                };
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let body = tenant_pod(&format!("tenant-{client}-{n}"));
                    match timeout(REVIEW_TIMEOUT * 2, exchange(&mut stream, &body)).await {
                        Ok(Ok(answer)) => {
                            answered.fetch_add(1, Ordering::Relaxed);
                            if answer.contains("\"allowed\":false") {
                                denied.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        _ => break,
                    }
                }
            }
        }));
    }
    // The flood has the evaluation busy before the measurement starts.
    sleep(Duration::from_secs(1)).await;
    let under_flood = measure_apart(kanon.port, settings.phase).await?;
    stop.store(true, Ordering::Relaxed);
    for task in flood {
        task.abort();
    }
    Ok(CelFigures {
        idle,
        flood: under_flood,
        tenant_answered: answered.load(Ordering::Relaxed),
        tenant_denied: denied.load(Ordering::Relaxed),
    })
}

/// [`measure`] on a thread and runtime of its own, so that the flood's tasks (on the caller's
/// runtime) cannot delay the measuring client: what is measured is kanon.
async fn measure_apart(port: u16, phase: Duration) -> Result<Latency> {
    let (sent, received) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("tenant-cel-measure".to_string())
        .spawn(move || {
            raise_priority();
            let latency = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|runtime| runtime.block_on(measure(port, &tls_connector(), phase)));
            let _ = sent.send(latency);
        })
        .context("the measuring thread")?;
    Ok(received.await.context("the measuring thread ended")??)
}

/// Raises the calling thread's priority (nice -10, as root), so that the load generator's own
/// share of the two cores does not show in what it measures of kanon; unchanged where refused.
pub(crate) fn raise_priority() {
    // SAFETY: gettid and setpriority take plain integers and touch no memory of ours.
    unsafe {
        let thread = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, thread, -10);
    }
}

/// The measuring client for `phase`: a ConfigMap of [`OTHER`] on a new connection each time.
async fn measure(port: u16, tls: &TlsConnector, phase: Duration) -> Latency {
    let end = Instant::now() + phase;
    let (mut times, mut lost, mut n) = (Vec::new(), 0, 0);
    while Instant::now() < end {
        n += 1;
        let uid = format!("other-{n}");
        let body = other_configmap(&uid);
        let started = Instant::now();
        let answer = timeout(REVIEW_TIMEOUT, async {
            let mut stream = connect(port, tls).await?;
            exchange(&mut stream, &body).await
        })
        .await;
        match answer {
            Ok(Ok(text)) if text.contains("\"allowed\":true") && text.contains(&uid) => {
                times.push(started.elapsed());
            }
            _ => lost += 1,
        }
        sleep(PACE).await;
    }
    Latency::of(times, lost)
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

async fn connect(port: u16, tls: &TlsConnector) -> Result<Box<dyn Io>> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from("localhost")?;
    Ok(Box::new(tls.connect(name, tcp).await?))
}

/// POSTs `body` to `/validate?timeout=10s` and reads the answer's body (Content-Length).
async fn exchange(stream: &mut Box<dyn Io>, body: &[u8]) -> Result<String> {
    let head = format!(
        "POST /validate?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.flush().await?;
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if stream.read_buf(&mut buf).await? == 0 {
            bail!("closed before the answer");
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .context("no content-length")?;
    while buf.len() < head_end + length {
        if stream.read_buf(&mut buf).await? == 0 {
            bail!("closed before the answer's end");
        }
    }
    Ok(String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned())
}

/// `kanon serve --policies DIR` with the tenant's policy, killed when dropped.
struct Kanon {
    child: Child,
    port: u16,
    metrics_port: u16,
    _dir: tempfile::TempDir,
}

impl Kanon {
    fn spawn(settings: &Settings) -> Result<Kanon> {
        let dir = tempfile::tempdir()?;
        let policies = dir.path().join("policies");
        std::fs::create_dir(&policies)?;
        std::fs::write(
            policies.join("tenant.yaml"),
            serde_json::to_vec_pretty(&tenant_policy())?,
        )?;
        let (port, metrics_port) = (free_port()?, free_port()?);
        let mut command = Command::new(&settings.bin);
        command
            .arg("serve")
            .arg("--policies")
            .arg(&policies)
            .arg("--cert-dir")
            .arg(dir.path().join("certs"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--metrics-listen", &format!("127.0.0.1:{metrics_port}")])
            .args(&settings.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("kanon.stderr"))?);
        // SAFETY: prctl is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command
            .spawn()
            .with_context(|| format!("starting {}", settings.bin.display()))?;
        Ok(Kanon {
            child,
            port,
            metrics_port,
            _dir: dir,
        })
    }

    /// Waits until `/readyz` on the metrics port answers 200.
    async fn ready(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(mut tcp) = TcpStream::connect(("127.0.0.1", self.metrics_port)).await {
                let _ = tcp
                    .write_all(
                        b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
                    )
                    .await;
                let mut answer = Vec::new();
                let _ = timeout(Duration::from_secs(1), tcp.read_to_end(&mut answer)).await;
                if answer.starts_with(b"HTTP/1.1 200") {
                    return Ok(());
                }
            }
            sleep(Duration::from_millis(100)).await;
        }
        bail!("kanon was not ready within 30 s")
    }
}

impl Drop for Kanon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The release binary `cargo bench` builds beside the bench, unless `KANON_BIN` says otherwise.
pub(crate) fn default_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("KANON_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    exe.parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("kanon"))
        .unwrap_or_else(|| PathBuf::from("kanon"))
}
