//! What an unauthenticated client on the network can do to kanon's webhook port, reproduced on
//! loopback and bounded in time.
//!
//! Every attack runs against a fresh `kanon serve --policies DIR` (the release binary), so that
//! figures do not bleed into one another: one ClusterValidatePolicy that selects every kind and
//! never denies, a temporary `--cert-dir` (kanon creates its CA there; the clients here accept
//! any certificate), the webhook and metrics ports on 127.0.0.1. While an attack runs:
//!
//! - a sampler reads kanon's VmRSS, VmHWM and open descriptors (`/proc/PID/fd`) every 20 ms;
//! - a legitimate client POSTs `fixtures/admission-reviews/pod-create.json` to
//!   `/validate?timeout=10s` about every 20 ms over one keep-alive HTTPS connection (a new
//!   connection per review in `fd-exhaustion`, where new connections are the question);
//! - probes GET `/healthz` and `/readyz` about every 100 ms each, a new connection per probe
//!   (as kubelet does).
//!
//! The two clients run on their own thread and runtime, so that the attack's tasks cannot delay
//! them. Each attack has a fixed duration, after which its connections are dropped; kanon's RSS
//! is read again 2 s and 5 s later (does memory go back?). One Markdown table row per attack.
//!
//! | attack | what it does |
//! |---|---|
//! | `big-array` | one review of ~8 MiB whose object carries `spec.junk: [0,0,0,...]` |
//! | `dribble-long-timeout` | `?timeout=1000h`, Content-Length 8 MiB, one body byte per 100 ms |
//! | `stalled-bodies` | 50 connections declare 8 MiB, send 7.9 MiB at once, stall (`?timeout=1000h`) |
//! | `stalled-bodies-default` | the same without `?timeout=` |
//! | `fd-exhaustion` | kanon with a soft RLIMIT_NOFILE of 1024; 1,100 idle TCP connections |
//! | `huge-timeout` | `?timeout=15000000000000000000s` with a normal body, kanon logging JSON |
//! | `unread-responses` | 30 reviews whose `request.uid` is ~8 MiB (echoed back), never read |
//! | `junk-kinds` | 400 reviews of kinds `Junk0`..`Junk399`, then Deployments; `/metrics` |
//! | `big-bodies-probes` | 32 clients sending 8 MiB reviews back to back for 10 s |
//! | `idle-flood` | 2,000 idle TCP connections |
//! | `half-handshake` | 500 connections that send part of a ClientHello and stop |
//! | `slowloris` | 200 TLS connections sending a request head one byte per second |
//!
//! Run: `cargo bench -p kanon --bench adversary` (about 3½ minutes), or
//! `scripts/adversary-bench.sh`. Environment:
//!
//! - `KANON_BIN`: the kanon to attack (default: the release build that `cargo bench` made
//!   beside this bench);
//! - `KANON_ADVERSARY_ARGS`: more `kanon serve` arguments, whitespace separated;
//! - `KANON_ADVERSARY_ATTACKS`: comma-separated attack names (default: all);
//! - `KANON_PROBE_URL`: where the probes go (default `https://127.0.0.1:{port}`, the webhook
//!   port; `{port}` and `{metrics_port}` are replaced by kanon's ports, `metrics` is short for
//!   `http://127.0.0.1:{metrics_port}`); loopback only;
//! - `KANON_ADVERSARY_SECONDS`: one duration for every attack (to check the bench itself);
//! - `KANON_ADVERSARY_KEEP_LOGS=DIR`: copy kanon's standard error there, one file per attack.

use std::collections::{BTreeMap, HashSet};
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior, sleep, sleep_until, timeout, timeout_at};
use tokio_rustls::TlsConnector;

/// kanon's default body limit. A body "of 8 MiB" is at the limit, not over it: a larger
/// declared length is refused before any byte is read, which is no attack.
const MAX_BODY: usize = 8 * 1024 * 1024;
/// The size of the reviews that carry a big array or a big uid: just under the limit.
const BIG_BODY: usize = MAX_BODY - 4096;
/// What a stalled body sends before it stalls.
const STALLED_SENT: usize = MAX_BODY - 100 * 1024;
/// kanon's soft descriptor limit in `fd-exhaustion`.
const FD_LIMIT: u64 = 1024;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The bound on a legitimate review, above the review's own `?timeout=10s`.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(12);
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// kubelet's default probe `timeoutSeconds`: slower probes are counted apart.
const KUBELET_PROBE_TIMEOUT: Duration = Duration::from_secs(1);
const SAMPLE_EVERY: Duration = Duration::from_millis(20);
const REVIEW_EVERY: Duration = Duration::from_millis(20);
const PROBE_EVERY: Duration = Duration::from_millis(100);
/// Legitimate traffic before the attack, so that "idle" is kanon serving it.
const WARM_UP: Duration = Duration::from_secs(1);
/// The bound on an attack past its duration (its connections closing).
const CLEANUP: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------------------------------------
// Attacks and settings

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attack {
    BigArray,
    DribbleLongTimeout,
    StalledBodies,
    StalledBodiesDefault,
    FdExhaustion,
    HugeTimeout,
    UnreadResponses,
    JunkKinds,
    BigBodiesProbes,
    IdleFlood,
    HalfHandshake,
    Slowloris,
}

const ATTACKS: [Attack; 12] = [
    Attack::BigArray,
    Attack::DribbleLongTimeout,
    Attack::StalledBodies,
    Attack::StalledBodiesDefault,
    Attack::FdExhaustion,
    Attack::HugeTimeout,
    Attack::UnreadResponses,
    Attack::JunkKinds,
    Attack::BigBodiesProbes,
    Attack::IdleFlood,
    Attack::HalfHandshake,
    Attack::Slowloris,
];

impl Attack {
    fn name(self) -> &'static str {
        match self {
            Attack::BigArray => "big-array",
            Attack::DribbleLongTimeout => "dribble-long-timeout",
            Attack::StalledBodies => "stalled-bodies",
            Attack::StalledBodiesDefault => "stalled-bodies-default",
            Attack::FdExhaustion => "fd-exhaustion",
            Attack::HugeTimeout => "huge-timeout",
            Attack::UnreadResponses => "unread-responses",
            Attack::JunkKinds => "junk-kinds",
            Attack::BigBodiesProbes => "big-bodies-probes",
            Attack::IdleFlood => "idle-flood",
            Attack::HalfHandshake => "half-handshake",
            Attack::Slowloris => "slowloris",
        }
    }

    /// The attack's fixed duration: long enough to pass kanon's 10 s header and default review
    /// timeouts where those are the question.
    fn seconds(self) -> u64 {
        match self {
            Attack::BigArray | Attack::BigBodiesProbes => 10,
            Attack::DribbleLongTimeout => 20,
            Attack::HugeTimeout => 6,
            Attack::HalfHandshake => 12,
            // Opening 2,000 takes some seconds (kanon's accept queue overflows and SYNs are
            // retried): the last ones must still reach the 10 s header timeout.
            Attack::IdleFlood => 18,
            Attack::StalledBodies
            | Attack::StalledBodiesDefault
            | Attack::FdExhaustion
            | Attack::UnreadResponses
            | Attack::JunkKinds
            | Attack::Slowloris => 15,
        }
    }
}

struct Settings {
    bin: PathBuf,
    extra_args: Vec<String>,
    probe_url: String,
    attacks: Vec<Attack>,
    seconds: Option<u64>,
    keep_logs: Option<PathBuf>,
}

fn attack_named(name: &str) -> Result<Attack> {
    let names: Vec<&str> = ATTACKS.iter().map(|a| a.name()).collect();
    ATTACKS
        .into_iter()
        .find(|a| a.name() == name)
        .with_context(|| {
            format!(
                "KANON_ADVERSARY_ATTACKS: no attack {name:?} (there are {})",
                names.join(", ")
            )
        })
}

fn env_text(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

impl Settings {
    fn from_env() -> Result<Settings> {
        let attacks = match env_text("KANON_ADVERSARY_ATTACKS") {
            None => ATTACKS.to_vec(),
            Some(list) => list
                .split(',')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(attack_named)
                .collect::<Result<_>>()?,
        };
        let seconds = match env_text("KANON_ADVERSARY_SECONDS") {
            None => None,
            Some(text) => Some(
                text.parse::<u64>()
                    .ok()
                    .filter(|s| (2..=120).contains(s))
                    .with_context(|| {
                        format!(
                            "KANON_ADVERSARY_SECONDS={text:?}: not a number of seconds in 2..=120"
                        )
                    })?,
            ),
        };
        Ok(Settings {
            bin: kanon_binary()?,
            extra_args: env_text("KANON_ADVERSARY_ARGS")
                .map(|a| a.split_whitespace().map(String::from).collect())
                .unwrap_or_default(),
            probe_url: env_text("KANON_PROBE_URL")
                .unwrap_or_else(|| "https://127.0.0.1:{port}".to_string()),
            attacks,
            seconds,
            keep_logs: env_text("KANON_ADVERSARY_KEEP_LOGS").map(PathBuf::from),
        })
    }

    fn duration(&self, attack: Attack) -> Duration {
        Duration::from_secs(self.seconds.unwrap_or(attack.seconds()))
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `KANON_BIN`; else the release build: under `cargo bench`, the kanon that cargo built beside
/// this bench (the bench profile is the release profile). A nested `cargo build --release`
/// there would build kanon's dependencies again without the dev-dependencies' features, and
/// the next `cargo bench` would build them back; it is only for a bench built unoptimized.
fn kanon_binary() -> Result<PathBuf> {
    if let Some(bin) = env_text("KANON_BIN") {
        let bin = PathBuf::from(bin);
        ensure!(bin.is_file(), "KANON_BIN={}: no such file", bin.display());
        return Ok(bin);
    }
    if !cfg!(debug_assertions) {
        return Ok(PathBuf::from(env!("CARGO_BIN_EXE_kanon")));
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("adversary: cargo build --release -p kanon");
    let out = Command::new(cargo)
        .current_dir(repo())
        .args(["build", "--release", "-p", "kanon", "--bin", "kanon"])
        .arg("--message-format=json-render-diagnostics")
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo build --release -p kanon")?;
    ensure!(
        out.status.success(),
        "cargo build --release -p kanon failed ({})",
        out.status
    );
    // The artifact message names the executable wherever the target directory is.
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if message["reason"] == "compiler-artifact"
            && message["target"]["name"] == "kanon"
            && let Some(exe) = message["executable"].as_str()
        {
            return Ok(PathBuf::from(exe));
        }
    }
    bail!("cargo build --release -p kanon named no kanon executable")
}

/// The connection floods need more descriptors than a shell's usual soft limit of 1024.
fn raise_descriptor_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max.min(65536);
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reviews

struct Bodies {
    /// fixtures/admission-reviews/pod-create.json as it is.
    pod: Arc<[u8]>,
    /// The same review with `request.object.spec.junk: [0,0,...]`, [`BIG_BODY`] bytes.
    big_array: Arc<[u8]>,
    /// The same review with a `request.uid` that makes it [`BIG_BODY`] bytes.
    big_uid: Arc<[u8]>,
    /// fixtures/admission-reviews/deployment-update.json.
    deployment: Arc<[u8]>,
    /// The pod review, parsed, for the made-up kinds.
    pod_value: Value,
}

fn fixture(name: &str) -> Result<Vec<u8>> {
    let path = repo().join("fixtures/admission-reviews").join(name);
    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))
}

/// `review` serialized with the string `"@@FILL@@"` at `pointer` replaced by `fill(n)` for the
/// `n` that makes the whole `size` bytes.
fn grown(
    review: &Value,
    pointer: &str,
    size: usize,
    fill: fn(usize) -> Vec<u8>,
) -> Result<Vec<u8>> {
    let mut review = review.clone();
    *review
        .pointer_mut(pointer)
        .with_context(|| format!("the fixture has no {pointer}"))? = Value::from("@@FILL@@");
    let text = serde_json::to_vec(&review)?;
    let marker = b"\"@@FILL@@\"";
    let at = text
        .windows(marker.len())
        .position(|w| w == marker)
        .context("the marker is in the serialized review")?;
    let room = size
        .checked_sub(text.len() - marker.len())
        .context("the fixture is larger than the body")?;
    let mut out = text[..at].to_vec();
    out.extend(fill(room));
    out.extend(&text[at + marker.len()..]);
    Ok(out)
}

/// `[0,0,...,0]` of at most `room` bytes.
fn zeros(room: usize) -> Vec<u8> {
    let n = (room.saturating_sub(1) / 2).max(1);
    let mut out = Vec::with_capacity(2 * n + 1);
    out.push(b'[');
    for i in 0..n {
        out.extend_from_slice(if i + 1 == n { b"0]" } else { b"0," });
    }
    out
}

/// A JSON string of `room` bytes.
fn long_string(room: usize) -> Vec<u8> {
    let mut out = vec![b'u'; room.max(2)];
    out[0] = b'"';
    let last = out.len() - 1;
    out[last] = b'"';
    out
}

impl Bodies {
    fn load() -> Result<Bodies> {
        let pod = fixture("pod-create.json")?;
        let pod_value: Value = serde_json::from_slice(&pod).context("pod-create.json is JSON")?;
        let mut with_spec = pod_value.clone();
        with_spec
            .pointer_mut("/request/object/spec")
            .and_then(Value::as_object_mut)
            .context("pod-create.json has request.object.spec")?
            .insert("junk".into(), Value::Null);
        Ok(Bodies {
            big_array: grown(&with_spec, "/request/object/spec/junk", BIG_BODY, zeros)?.into(),
            big_uid: grown(&pod_value, "/request/uid", BIG_BODY, long_string)?.into(),
            deployment: fixture("deployment-update.json")?.into(),
            pod: pod.into(),
            pod_value,
        })
    }

    /// The pod review as a review of the made-up kind `kind`.
    fn of_kind(&self, kind: &str) -> Vec<u8> {
        let mut review = self.pod_value.clone();
        for pointer in [
            "/request/kind/kind",
            "/request/requestKind/kind",
            "/request/object/kind",
        ] {
            if let Some(value) = review.pointer_mut(pointer) {
                *value = Value::from(kind);
            }
        }
        let resource = format!("{}s", kind.to_lowercase());
        for pointer in [
            "/request/resource/resource",
            "/request/requestResource/resource",
        ] {
            if let Some(value) = review.pointer_mut(pointer) {
                *value = Value::from(resource.as_str());
            }
        }
        serde_json::to_vec(&review).unwrap_or_default()
    }
}

/// Selects every kind and never denies (the label is never set), so every legitimate review
/// is evaluated and allowed.
const POLICY: &str = "apiVersion: policy.kanon.dev/v1alpha1
kind: ClusterValidatePolicy
metadata: {name: adversary-never-denies}
spec:
  resourceSelectors: []
  validateRules:
  - template:
      type: condition
      condition:
        cond: Exist
        dataRef: {from: current, path: /metadata/labels/kanon-adversary-never-set}
        message: never denied
";

// ---------------------------------------------------------------------------------------------
// kanon

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

struct Kanon {
    child: Child,
    pid: u32,
    port: u16,
    metrics_port: u16,
    stderr: PathBuf,
    dir: tempfile::TempDir,
}

impl Kanon {
    /// Spawns `kanon serve` (from the main thread: the child's death signal follows the
    /// spawning thread).
    fn spawn(settings: &Settings, attack: Attack) -> Result<Kanon> {
        let dir = tempfile::tempdir()?;
        let policies = dir.path().join("policies");
        std::fs::create_dir(&policies)?;
        std::fs::write(policies.join("never-denies.yaml"), POLICY)?;
        let (port, metrics_port) = (free_port()?, free_port()?);
        let stderr = dir.path().join("kanon.stderr");
        let mut command = Command::new(&settings.bin);
        command
            .arg("serve")
            .arg("--policies")
            .arg(&policies)
            .arg("--cert-dir")
            .arg(dir.path().join("certs"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--metrics-listen", &format!("127.0.0.1:{metrics_port}")]);
        let json_set = settings
            .extra_args
            .iter()
            .any(|a| a.starts_with("--log-format"));
        if attack == Attack::HugeTimeout && !json_set {
            command.args(["--log-format", "json"]);
        }
        // A backtrace per panic would make the counts of non-JSON lines depend on the caller.
        command
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE")
            .args(&settings.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr)?);
        let nofile = (attack == Attack::FdExhaustion).then_some(FD_LIMIT);
        // SAFETY: prctl, getrlimit and setrlimit are async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if let Some(soft) = nofile {
                    let mut limit = libc::rlimit {
                        rlim_cur: 0,
                        rlim_max: 0,
                    };
                    if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    limit.rlim_cur = soft.min(limit.rlim_max);
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .with_context(|| format!("starting {}", settings.bin.display()))?;
        Ok(Kanon {
            pid: child.id(),
            child,
            port,
            metrics_port,
            stderr,
            dir,
        })
    }

    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(None) => None,
            Ok(Some(status)) => Some(status.to_string()),
            Err(e) => Some(format!("unknown ({e})")),
        }
    }

    async fn wait_ready(&mut self, probe: &Endpoint, tls: &TlsConnector) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = String::from("not asked");
        while Instant::now() < deadline {
            if let Some(status) = self.exited() {
                bail!(
                    "kanon exited before it was ready ({status}):\n{}",
                    tail(&self.stderr, 20)
                );
            }
            let ready = timeout(PROBE_TIMEOUT, get(probe, tls, "/readyz")).await;
            if matches!(ready, Ok(Ok(ref r)) if r.status == 200) {
                return Ok(());
            }
            last = answer_text(ready);
            sleep(Duration::from_millis(100)).await;
        }
        bail!(
            "kanon was not ready after 30 s ({}/readyz: {last}):\n{}",
            probe.base(),
            tail(&self.stderr, 20)
        )
    }

    /// SIGTERM, then SIGKILL when it has not ended within 5 s (its drain would wait for
    /// connections it may still hold).
    fn stop(mut self, keep_logs: Option<&Path>, attack: Attack) {
        if self.exited().is_none() {
            // SAFETY: a signal to our own child.
            unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGTERM) };
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while self.exited().is_none() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(dir) = keep_logs {
            let to = dir.join(format!("{}.stderr", attack.name()));
            if let Err(e) = std::fs::create_dir_all(dir)
                .and_then(|()| std::fs::copy(&self.stderr, &to).map(drop))
            {
                eprintln!("adversary: could not keep {}: {e}", to.display());
            }
        }
        drop(self.dir);
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

// ---------------------------------------------------------------------------------------------
// /proc

#[derive(Clone, Copy, Debug)]
struct Proc {
    at: Instant,
    rss_kb: u64,
    hwm_kb: u64,
    fds: usize,
}

fn read_proc(pid: u32) -> Option<Proc> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some(Proc {
        at: Instant::now(),
        rss_kb: field("VmRSS:")?,
        hwm_kb: field("VmHWM:").unwrap_or(0),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count(),
    })
}

/// Samples `/proc/PID` every [`SAMPLE_EVERY`] on its own thread, so that a busy runtime does
/// not skip samples.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Proc>>,
}

impl Sampler {
    fn start(pid: u32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                if let Some(sample) = read_proc(pid) {
                    samples.push(sample);
                }
                std::thread::sleep(SAMPLE_EVERY);
            }
            samples
        });
        Sampler { stop, thread }
    }

    fn finish(self) -> Vec<Proc> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// kanon's ends of the connections from `peers` (local ports) that it has not closed
/// (ESTABLISHED or CLOSE_WAIT in `/proc/net/tcp`, whether accepted yet or not), and how many
/// of those still have bytes of an answer waiting in kanon's send queue (written, not yet
/// taken by the client).
fn kanon_side_open(port: u16, peers: &HashSet<u16>) -> (usize, usize) {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let port_of = |field: &str| {
        field
            .rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
    };
    let mut open = 0;
    let mut pending = 0;
    for line in text.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() > 4
            && port_of(fields[1]) == Some(port)
            && port_of(fields[2]).is_some_and(|p| peers.contains(&p))
            && (fields[3] == "01" || fields[3] == "08")
        {
            open += 1;
            // `tx_queue:rx_queue`, hexadecimal.
            let queued = fields[4]
                .split(':')
                .next()
                .and_then(|q| u64::from_str_radix(q, 16).ok())
                .unwrap_or(0);
            if queued > 0 {
                pending += 1;
            }
        }
    }
    (open, pending)
}

fn stderr_lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Connections and HTTP/1.1, by hand for byte-level control

/// Accepts any server certificate: kanon's CA is made on the spot, and the question here is
/// load, not trust.
#[derive(Debug)]
struct AnyCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

fn tls_connector() -> TlsConnector {
    let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms;
    let mut config = rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(algorithms)))
        .with_no_client_auth();
    // Every connection pays a full handshake, as kubelet's probes and a flood do.
    config.resumption = rustls::client::Resumption::disabled();
    TlsConnector::from(Arc::new(config))
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type Stream = Box<dyn Io>;

/// Where requests go: an address on loopback, with or without TLS, and a path prefix.
#[derive(Clone, Debug)]
struct Endpoint {
    addr: SocketAddr,
    tls: bool,
    authority: String,
    prefix: String,
}

impl Endpoint {
    fn https(port: u16) -> Endpoint {
        Endpoint {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            tls: true,
            authority: format!("127.0.0.1:{port}"),
            prefix: String::new(),
        }
    }

    fn http(port: u16) -> Endpoint {
        Endpoint {
            tls: false,
            ..Endpoint::https(port)
        }
    }

    /// `http(s)://HOST:PORT[/prefix]`, `{port}` and `{metrics_port}` replaced; loopback only.
    fn parse(template: &str, port: u16, metrics_port: u16) -> Result<Endpoint> {
        let url = match template {
            "webhook" => "https://127.0.0.1:{port}",
            "metrics" => "http://127.0.0.1:{metrics_port}",
            other => other,
        }
        .replace("{port}", &port.to_string())
        .replace("{metrics_port}", &metrics_port.to_string());
        let (tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            bail!("KANON_PROBE_URL={url:?}: not an http:// or https:// URL");
        };
        let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let addr = authority
            .to_socket_addrs()
            .with_context(|| format!("KANON_PROBE_URL={url:?}: no address with a port"))?
            .next()
            .with_context(|| format!("KANON_PROBE_URL={url:?}: no address"))?;
        ensure!(
            addr.ip().is_loopback(),
            "KANON_PROBE_URL={url:?}: this bench only sends to loopback"
        );
        Ok(Endpoint {
            addr,
            tls,
            authority: authority.to_string(),
            prefix: prefix.trim_end_matches('/').to_string(),
        })
    }

    fn base(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}{}", self.authority, self.prefix)
    }

    /// A request head (and body): keep-alive with a body, `Connection: close` without.
    fn request(&self, method: &str, path: &str, body: Option<&[u8]>) -> Vec<u8> {
        let mut out = self.head(method, path, body.map(<[u8]>::len));
        out.extend_from_slice(body.unwrap_or_default());
        out
    }

    fn head(&self, method: &str, path: &str, length: Option<usize>) -> Vec<u8> {
        let fields = match length {
            Some(n) => format!("Content-Type: application/json\r\nContent-Length: {n}\r\n"),
            None => "Connection: close\r\n".to_string(),
        };
        format!(
            "{method} {}{path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: kanon-adversary\r\n{fields}\r\n",
            self.prefix, self.authority
        )
        .into_bytes()
    }
}

async fn tcp_connect(addr: SocketAddr, receive_buffer: Option<u32>) -> Result<TcpStream> {
    let socket = TcpSocket::new_v4().context("a socket")?;
    if let Some(size) = receive_buffer {
        // Before connect, so that the window kanon sees is small from the start.
        socket
            .set_recv_buffer_size(size)
            .context("setting SO_RCVBUF")?;
    }
    timeout(CONNECT_TIMEOUT, socket.connect(addr))
        .await
        .context("TCP connect timed out")?
        .context("TCP connect")
}

async fn tls_handshake(tcp: TcpStream, addr: SocketAddr, tls: &TlsConnector) -> Result<Stream> {
    let name = ServerName::from(addr.ip());
    let stream = timeout(CONNECT_TIMEOUT, tls.connect(name, tcp))
        .await
        .context("TLS handshake timed out")?
        .context("TLS handshake")?;
    Ok(Box::new(stream))
}

async fn connect(endpoint: &Endpoint, tls: &TlsConnector) -> Result<Stream> {
    let tcp = tcp_connect(endpoint.addr, None).await?;
    if endpoint.tls {
        tls_handshake(tcp, endpoint.addr, tls).await
    } else {
        Ok(Box::new(tcp))
    }
}

struct Response {
    status: u16,
    body: Vec<u8>,
    /// The server closes the connection after this response.
    close: bool,
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

async fn read_more<S: AsyncRead + Unpin + ?Sized>(stream: &mut S, buf: &mut Vec<u8>) -> Result<()> {
    buf.reserve(64 * 1024);
    let n = stream.read_buf(buf).await.context("reading the response")?;
    ensure!(n > 0, "the connection closed before the response ended");
    Ok(())
}

/// One HTTP/1.1 response (Content-Length, chunked, or to the end of the connection); `buf`
/// holds what was read past it.
async fn read_response<S: AsyncRead + Unpin + ?Sized>(
    stream: &mut S,
    buf: &mut Vec<u8>,
) -> Result<Response> {
    let head_end = loop {
        if let Some(at) = find(buf, b"\r\n\r\n", 0) {
            break at + 4;
        }
        ensure!(buf.len() < 64 * 1024, "a response head over 64 KiB");
        read_more(stream, buf).await?;
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("not an HTTP status line: {status_line:?}"))?;
    let (mut length, mut chunked, mut close) = (None, false, false);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim().to_ascii_lowercase();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.parse::<usize>().ok(),
            "transfer-encoding" => chunked = value.contains("chunked"),
            "connection" => close = value.contains("close"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    let end = if chunked {
        let mut at = head_end;
        loop {
            let line_end = loop {
                if let Some(i) = find(buf, b"\r\n", at) {
                    break i;
                }
                read_more(stream, buf).await?;
            };
            let size_text = String::from_utf8_lossy(&buf[at..line_end]);
            let size_text = size_text.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size_text, 16)
                .with_context(|| format!("a chunk size {size_text:?}"))?;
            at = line_end + 2;
            if size == 0 {
                // Trailer fields, up to the empty line.
                loop {
                    let i = loop {
                        if let Some(i) = find(buf, b"\r\n", at) {
                            break i;
                        }
                        read_more(stream, buf).await?;
                    };
                    let empty = i == at;
                    at = i + 2;
                    if empty {
                        break;
                    }
                }
                break at;
            }
            while buf.len() < at + size + 2 {
                read_more(stream, buf).await?;
            }
            body.extend_from_slice(&buf[at..at + size]);
            at += size + 2;
        }
    } else if let Some(n) = length {
        while buf.len() < head_end + n {
            read_more(stream, buf).await?;
        }
        body.extend_from_slice(&buf[head_end..head_end + n]);
        head_end + n
    } else {
        close = true;
        loop {
            buf.reserve(64 * 1024);
            if stream.read_buf(buf).await.context("reading the response")? == 0 {
                break;
            }
        }
        body.extend_from_slice(&buf[head_end..]);
        buf.len()
    };
    buf.drain(..end);
    Ok(Response {
        status,
        body,
        close,
    })
}

/// A keep-alive connection and what was read past the last response.
type Conn = (Stream, Vec<u8>);

/// Sends `request` on `conn` (connecting first when there is none) and reads the response;
/// the connection is dropped after an error or a `Connection: close`.
async fn exchange(
    conn: &mut Option<Conn>,
    endpoint: &Endpoint,
    tls: &TlsConnector,
    request: &[u8],
) -> Result<Response> {
    let result = async {
        if conn.is_none() {
            *conn = Some((connect(endpoint, tls).await?, Vec::new()));
        }
        let (stream, buf) = conn.as_mut().context("a connection")?;
        stream
            .write_all(request)
            .await
            .context("sending the request")?;
        stream.flush().await.context("sending the request")?;
        read_response(stream, buf).await
    }
    .await;
    if !matches!(result, Ok(ref r) if !r.close) {
        *conn = None;
    }
    result
}

/// A GET on a new connection.
async fn get(endpoint: &Endpoint, tls: &TlsConnector, path: &str) -> Result<Response> {
    let mut conn = None;
    exchange(
        &mut conn,
        endpoint,
        tls,
        &endpoint.request("GET", path, None),
    )
    .await
}

/// Whether a 200 answer is a review that allowed the request.
fn allowed(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body)
        .is_ok_and(|v| v.pointer("/response/allowed") == Some(&Value::Bool(true)))
}

// ---------------------------------------------------------------------------------------------
// Legitimate traffic: reviews and probes, measured on their own thread

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Got {
    Ok,
    Status(u16),
    /// HTTP 200 without `allowed: true`.
    NotAllowed,
    /// No answer: connection, TLS or read error, or the client's timeout.
    Error,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    at: Instant,
    latency: Duration,
    got: Got,
}

#[derive(Default)]
struct Records {
    reviews: Vec<Sample>,
    probes: Vec<Sample>,
}

struct Clients {
    records: Arc<Mutex<Records>>,
    stop: watch::Sender<bool>,
    thread: std::thread::JoinHandle<()>,
}

struct Legit {
    webhook: Endpoint,
    probe: Endpoint,
    tls: TlsConnector,
    review: Arc<[u8]>,
    /// A new connection per review instead of one kept alive.
    fresh_connections: bool,
}

impl Clients {
    fn start(legit: Legit) -> Result<Clients> {
        let records = Arc::new(Mutex::new(Records::default()));
        let (stop, mut stopped) = watch::channel(false);
        let shared = records.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let legit = Arc::new(legit);
                tokio::spawn(reviews(legit.clone(), shared.clone()));
                for path in ["/healthz", "/readyz"] {
                    tokio::spawn(probes(legit.clone(), path, shared.clone()));
                }
                let _ = stopped.wait_for(|s| *s).await;
            });
        });
        Ok(Clients {
            records,
            stop,
            thread,
        })
    }

    fn finish(self) -> Records {
        let _ = self.stop.send(true);
        let _ = self.thread.join();
        std::mem::take(&mut *self.records.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

async fn reviews(legit: Arc<Legit>, records: Arc<Mutex<Records>>) {
    let request = legit
        .webhook
        .request("POST", "/validate?timeout=10s", Some(&legit.review));
    let mut conn = None;
    let mut tick = tokio::time::interval(REVIEW_EVERY);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let at = Instant::now();
        let result = timeout(
            REVIEW_TIMEOUT,
            exchange(&mut conn, &legit.webhook, &legit.tls, &request),
        )
        .await;
        let got = match result {
            Ok(Ok(r)) if r.status == 200 && allowed(&r.body) => Got::Ok,
            Ok(Ok(r)) if r.status == 200 => Got::NotAllowed,
            Ok(Ok(r)) => Got::Status(r.status),
            Ok(Err(_)) | Err(_) => Got::Error,
        };
        if got != Got::Ok || legit.fresh_connections {
            conn = None;
        }
        let sample = Sample {
            at,
            latency: at.elapsed(),
            got,
        };
        records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .reviews
            .push(sample);
    }
}

async fn probes(legit: Arc<Legit>, path: &'static str, records: Arc<Mutex<Records>>) {
    let mut tick = tokio::time::interval(PROBE_EVERY);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let at = Instant::now();
        let got = match timeout(PROBE_TIMEOUT, get(&legit.probe, &legit.tls, path)).await {
            Ok(Ok(r)) if r.status == 200 => Got::Ok,
            Ok(Ok(r)) => Got::Status(r.status),
            Ok(Err(_)) | Err(_) => Got::Error,
        };
        let sample = Sample {
            at,
            latency: at.elapsed(),
            got,
        };
        records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .probes
            .push(sample);
    }
}

// ---------------------------------------------------------------------------------------------
// Attacks

/// What an attack works with.
struct Ctx {
    webhook: Endpoint,
    metrics: Endpoint,
    tls: TlsConnector,
    port: u16,
    stderr: PathBuf,
    bodies: Arc<Bodies>,
    started: Instant,
    deadline: Instant,
}

/// A connection held open by an attack.
struct HoldSpec {
    tls: bool,
    receive_buffer: Option<u32>,
    /// Written at once after the handshake.
    first: Arc<[u8]>,
    /// Then written a byte at a time, one per interval.
    drip: Option<(Arc<[u8]>, Duration)>,
    /// Watch for kanon's answer or close; without it nothing is ever read.
    read: bool,
    /// The local ports of the connections, for [`kanon_side_open`].
    ports: Mutex<HashSet<u16>>,
}

#[derive(Debug)]
enum End {
    /// Could not connect, or the handshake failed.
    Failed(String),
    /// Still open at the deadline (as far as this side can tell).
    Open,
    /// kanon answered or closed it, this long after the connection was made.
    Closed {
        after: Duration,
        status: Option<u16>,
    },
}

struct Held {
    end: End,
    /// When the TCP connection was made.
    established: Option<Instant>,
    sent_first: bool,
}

/// The status of an HTTP response that starts `bytes`, if they are one.
fn status_of(bytes: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(bytes.get(..12)?).ok()?;
    text.strip_prefix("HTTP/1.")?.get(2..5)?.parse().ok()
}

async fn hold(ctx: Arc<Ctx>, spec: Arc<HoldSpec>, setup: Arc<Semaphore>) -> Held {
    let failed = |e: String| Held {
        end: End::Failed(e),
        established: None,
        sent_first: false,
    };
    // The setup (connect and handshake) is limited in concurrency; what follows is not.
    let Ok(Ok(permit)) = timeout_at(ctx.deadline, setup.acquire()).await else {
        return failed("no turn to connect before the deadline".into());
    };
    let tcp = match tcp_connect(ctx.webhook.addr, spec.receive_buffer).await {
        Ok(tcp) => tcp,
        Err(e) => return failed(format!("{e:#}")),
    };
    if let Ok(local) = tcp.local_addr() {
        spec.ports
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(local.port());
    }
    let established = Instant::now();
    let stream: Stream = if spec.tls {
        match tls_handshake(tcp, ctx.webhook.addr, &ctx.tls).await {
            Ok(stream) => stream,
            Err(e) => return failed(format!("{e:#}")),
        }
    } else {
        Box::new(tcp)
    };
    drop(permit);
    let (mut reader, mut writer) = tokio::io::split(stream);
    let sent_first = AtomicBool::new(false);
    let write = async {
        writer.write_all(&spec.first).await?;
        writer.flush().await?;
        sent_first.store(true, Ordering::Relaxed);
        if let Some((bytes, every)) = &spec.drip {
            for byte in bytes.iter() {
                sleep(*every).await;
                writer.write_all(&[*byte]).await?;
                writer.flush().await?;
            }
        }
        std::future::pending::<std::io::Result<()>>().await
    };
    let read = async {
        if !spec.read {
            return std::future::pending().await;
        }
        let mut buf = [0u8; 512];
        match reader.read(&mut buf).await {
            Ok(n) => status_of(&buf[..n]),
            Err(_) => None,
        }
    };
    let end = tokio::select! {
        status = read => End::Closed { after: established.elapsed(), status },
        // The write side fails only when kanon has closed (or reset) the connection.
        _ = write => End::Closed { after: established.elapsed(), status: None },
        () = sleep_until(ctx.deadline) => End::Open,
    };
    Held {
        end,
        established: Some(established),
        sent_first: sent_first.load(Ordering::Relaxed),
    }
}

/// `n` connections of `spec`, at most `concurrency` connecting at once, each held until the
/// deadline or until kanon closes it; all dropped on return.
async fn hold_many(
    ctx: &Arc<Ctx>,
    n: usize,
    concurrency: usize,
    spec: &Arc<HoldSpec>,
) -> Vec<Held> {
    let setup = Arc::new(Semaphore::new(concurrency));
    let mut set = JoinSet::new();
    for _ in 0..n {
        set.spawn(hold(ctx.clone(), spec.clone(), setup.clone()));
    }
    let mut held = Vec::with_capacity(n);
    while let Some(result) = set.join_next().await {
        if let Ok(h) = result {
            held.push(h);
        }
    }
    held
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// "opened n/N in t s; closed by kanon: k (after a–b s, median m; HTTP 408 ×k); open at the
/// end: o".
fn summarize(held: &[Held], n: usize, started: Instant) -> String {
    let failures: Vec<&str> = held
        .iter()
        .filter_map(|h| match &h.end {
            End::Failed(e) => Some(e.as_str()),
            _ => None,
        })
        .collect();
    let mut closed: Vec<Duration> = Vec::new();
    let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
    for h in held {
        if let End::Closed { after, status } = h.end {
            closed.push(after);
            let key = status.map_or("no answer".to_string(), |s| format!("HTTP {s}"));
            *statuses.entry(key).or_default() += 1;
        }
    }
    closed.sort();
    let open = held.iter().filter(|h| matches!(h.end, End::Open)).count();
    let mut out = format!("opened {}/{n}", n - failures.len());
    if let Some(last) = held.iter().filter_map(|h| h.established).max() {
        out += &format!(" in {}", secs(last - started));
    }
    if let Some(first) = failures.first() {
        out += &format!(" (failed: {}, e.g. {first})", failures.len());
    }
    out += &format!("; closed by kanon: {}", closed.len());
    if !closed.is_empty() {
        let statuses: Vec<String> = statuses.iter().map(|(s, k)| format!("{s} ×{k}")).collect();
        out += &format!(
            " (after {}–{}, median {}; {})",
            secs(closed[0]),
            secs(closed[closed.len() - 1]),
            secs(percentile(&closed, 0.5)),
            statuses.join(", ")
        );
    }
    out + &format!("; open at the end: {open}")
}

/// One review on a new connection.
async fn one_review(ctx: &Ctx, path: &str, body: &[u8]) -> Result<Response> {
    let mut conn = None;
    let request = ctx.webhook.request("POST", path, Some(body));
    exchange(&mut conn, &ctx.webhook, &ctx.tls, &request).await
}

/// The cause of a failed exchange, in a few words for a table cell.
fn short_error(e: &anyhow::Error) -> String {
    let text = format!("{e:#}");
    let lower = text.to_lowercase();
    if lower.contains("close_notify")
        || lower.contains("closed before")
        || lower.contains("unexpected eof")
    {
        "connection closed".to_string()
    } else if lower.contains("reset by peer") {
        "connection reset".to_string()
    } else if lower.contains("refused") {
        "connection refused".to_string()
    } else {
        text.chars().take(80).collect()
    }
}

fn answer_text(result: Result<Result<Response>, tokio::time::error::Elapsed>) -> String {
    match result {
        Ok(Ok(r)) => format!("HTTP {}", r.status),
        Ok(Err(e)) => format!("no answer ({})", short_error(&e)),
        Err(_) => "no answer in time".to_string(),
    }
}

async fn big_array(ctx: Arc<Ctx>) -> Result<String> {
    let body = &ctx.bodies.big_array;
    let start = Instant::now();
    let answer = timeout_at(
        ctx.deadline,
        one_review(&ctx, "/validate?timeout=10s", body),
    )
    .await;
    let took = start.elapsed();
    // Then watch memory until the end.
    sleep_until(ctx.deadline).await;
    Ok(format!(
        "one review of {} (`spec.junk`: ~{}M zeros): {} after {}",
        mib(body.len()),
        body.len() / 2 / 1_000_000,
        answer_text(answer),
        secs(took)
    ))
}

async fn dribble(ctx: Arc<Ctx>) -> Result<String> {
    let every = Duration::from_millis(100);
    let bytes = (ctx.deadline - ctx.started).as_millis() as usize / 100 + 10;
    let mut drip = vec![b' '; bytes];
    drip[0] = b'{';
    let spec = Arc::new(HoldSpec {
        tls: true,
        receive_buffer: None,
        first: ctx
            .webhook
            .head("POST", "/validate?timeout=1000h", Some(MAX_BODY))
            .into(),
        drip: Some((drip.into(), every)),
        read: true,
        ports: Mutex::default(),
    });
    let held = hold_many(&ctx, 1, 1, &spec).await;
    let observed = secs(ctx.deadline - ctx.started);
    Ok(match held.first().map(|h| &h.end) {
        Some(End::Closed { after, status }) => format!(
            "declared {}, 1 byte / 100 ms: kanon closed it after {}{}",
            mib(MAX_BODY),
            secs(*after),
            status.map_or(String::new(), |s| format!(" (HTTP {s})"))
        ),
        Some(End::Open) => format!(
            "declared {}, 1 byte / 100 ms: still open after {observed}",
            mib(MAX_BODY)
        ),
        Some(End::Failed(e)) => format!("could not connect: {e}"),
        None => "the connection task failed".to_string(),
    })
}

async fn stalled(ctx: Arc<Ctx>, path: &str) -> Result<String> {
    let n = 50;
    let mut first = ctx.webhook.head("POST", path, Some(MAX_BODY));
    first.extend_from_slice(&ctx.bodies.big_array[..STALLED_SENT]);
    let spec = Arc::new(HoldSpec {
        tls: true,
        receive_buffer: None,
        first: first.into(),
        drip: None,
        read: true,
        ports: Mutex::default(),
    });
    let held = hold_many(&ctx, n, 16, &spec).await;
    let sent = held.iter().filter(|h| h.sent_first).count();
    Ok(format!(
        "`{path}`, {} of {} each: sent by {sent}/{n}; {}",
        mib(STALLED_SENT),
        mib(MAX_BODY),
        summarize(&held, n, ctx.started)
    ))
}

async fn flood(ctx: Arc<Ctx>, n: usize, spec: HoldSpec, what: &str) -> Result<String> {
    let lines = stderr_lines(&ctx.stderr);
    let concurrency = if spec.tls { 16 } else { 64 };
    let held = hold_many(&ctx, n, concurrency, &Arc::new(spec)).await;
    Ok(format!(
        "{n} {what}: {}; kanon's stderr +{} lines",
        summarize(&held, n, ctx.started),
        stderr_lines(&ctx.stderr).saturating_sub(lines)
    ))
}

fn idle_spec(first: &[u8]) -> HoldSpec {
    HoldSpec {
        tls: false,
        receive_buffer: None,
        first: first.into(),
        drip: None,
        read: true,
        ports: Mutex::default(),
    }
}

/// The first 43 bytes of a ClientHello: record header (claiming 512 bytes), handshake header,
/// version and random; the rest never comes.
fn partial_client_hello() -> Vec<u8> {
    let mut hello = vec![
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ];
    hello.extend_from_slice(&[0x5a; 32]);
    hello
}

async fn slowloris(ctx: Arc<Ctx>) -> Result<String> {
    let mut head = ctx.webhook.head("GET", "/healthz", None);
    // Never completes: the padding field outlasts the attack.
    head.truncate(head.len() - 2);
    head.extend_from_slice(b"X-Padding: ");
    head.extend(std::iter::repeat_n(b'a', 200));
    let spec = HoldSpec {
        tls: true,
        receive_buffer: None,
        first: Arc::from(Vec::new()),
        drip: Some((head.into(), Duration::from_secs(1))),
        read: true,
        ports: Mutex::default(),
    };
    flood(ctx, 200, spec, "TLS connections, head at 1 byte/s").await
}

async fn huge_timeout(ctx: Arc<Ctx>) -> Result<String> {
    let mut answers: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..3 {
        let answer = timeout(
            Duration::from_secs(5),
            one_review(
                &ctx,
                "/validate?timeout=15000000000000000000s",
                &ctx.bodies.pod,
            ),
        )
        .await;
        *answers.entry(answer_text(answer)).or_default() += 1;
        sleep(Duration::from_secs(1)).await;
    }
    sleep_until(ctx.deadline).await;
    let text = std::fs::read_to_string(&ctx.stderr).unwrap_or_default();
    let not_json: Vec<&str> = text
        .lines()
        .filter(|l| !matches!(serde_json::from_str::<Value>(l), Ok(Value::Object(_))))
        .collect();
    // The first two lines with text: a panic's location, then its message.
    let first: Vec<String> = not_json
        .iter()
        .filter(|l| !l.trim().is_empty())
        .take(2)
        .map(|l| l.chars().take(70).collect::<String>())
        .collect();
    let answers: Vec<String> = answers.iter().map(|(a, k)| format!("{a} ×{k}")).collect();
    let mut out = format!(
        "3 reviews with `?timeout=15000000000000000000s`: {}; stderr (`--log-format json`): {} of {} lines not JSON",
        answers.join(", "),
        not_json.len(),
        text.lines().count()
    );
    if !first.is_empty() {
        let first = first.join(" ⏎ ").replace('`', "'").replace('|', "\\|");
        out += &format!(", the first: `{first}`");
    }
    Ok(out)
}

async fn unread_responses(ctx: Arc<Ctx>) -> Result<String> {
    let n = 30;
    let spec = Arc::new(HoldSpec {
        tls: true,
        // Small, so that kanon's answer of ~8 MiB cannot drain into this side's buffers.
        receive_buffer: Some(4096),
        first: ctx
            .webhook
            .request("POST", "/validate?timeout=10s", Some(&ctx.bodies.big_uid))
            .into(),
        drip: None,
        read: false,
        ports: Mutex::default(),
    });
    // kanon's ends of these connections, polled while they are held: open, and with an
    // answer still waiting in kanon's send queue.
    let watch = async {
        let mut series: Vec<(Instant, (usize, usize))> = Vec::new();
        while Instant::now() < ctx.deadline {
            let peers = spec
                .ports
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            series.push((Instant::now(), kanon_side_open(ctx.port, &peers)));
            sleep(Duration::from_millis(100)).await;
        }
        series
    };
    let (held, series) = tokio::join!(hold_many(&ctx, n, 8, &spec), watch);
    let sent = held.iter().filter(|h| h.sent_first).count();
    let peak = series.iter().map(|&(_, (k, _))| k).max().unwrap_or(0);
    let pending_peak = series.iter().map(|&(_, (_, p))| p).max().unwrap_or(0);
    let (at_end, pending_at_end) = series.last().map_or((0, 0), |&(_, k)| k);
    let peak_at = series
        .iter()
        .position(|&(_, (k, _))| k == peak)
        .unwrap_or(0);
    let released = series[peak_at..]
        .iter()
        .find(|&&(_, (k, _))| k == 0)
        .map(|&(at, _)| at - ctx.started);
    let held_text = match (peak, released) {
        (0, _) => "kanon held none".to_string(),
        (_, Some(at)) => format!("kanon held up to {peak}, all closed by +{}", secs(at)),
        (_, None) => format!(
            "kanon held up to {peak}, still {at_end} at the end (+{})",
            secs(ctx.deadline - ctx.started)
        ),
    };
    let held_text = format!(
        "{held_text}; with an answer unread in kanon's send queue: up to {pending_peak}, {pending_at_end} at the end"
    );
    Ok(format!(
        "{n} reviews of {} (uid of ~8 MiB, echoed), answers never read (SO_RCVBUF 4 KiB): sent by {sent}/{n}; {held_text}",
        mib(ctx.bodies.big_uid.len())
    ))
}

async fn junk_kinds(ctx: Arc<Ctx>) -> Result<String> {
    let mut conn = None;
    let mut answers: BTreeMap<String, usize> = BTreeMap::new();
    let mut send = async |body: &[u8]| {
        let request = ctx
            .webhook
            .request("POST", "/validate?timeout=10s", Some(body));
        let answer = timeout_at(
            ctx.deadline,
            exchange(&mut conn, &ctx.webhook, &ctx.tls, &request),
        )
        .await;
        *answers.entry(answer_text(answer)).or_default() += 1;
    };
    for i in 0..400 {
        send(&ctx.bodies.of_kind(&format!("Junk{i}"))).await;
    }
    for _ in 0..20 {
        send(&ctx.bodies.deployment).await;
    }
    let metrics = timeout(
        Duration::from_secs(5),
        get(&ctx.metrics, &ctx.tls, "/metrics"),
    )
    .await
    .context("/metrics did not answer in 5 s")?
    .context("/metrics")?;
    let text = String::from_utf8_lossy(&metrics.body);
    let kinds: HashSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("kanon_admission_requests_total{"))
        .filter_map(|l| l.split("kind=\"").nth(1)?.split('"').next())
        .collect();
    let verdict = if kinds.contains("Deployment") {
        "`kind=\"Deployment\"` has its own series"
    } else if kinds.contains("other") {
        "Deployment was counted as `kind=\"other\"`"
    } else {
        "no Deployment series and no `other`"
    };
    let answers: Vec<String> = answers.iter().map(|(a, k)| format!("{a} ×{k}")).collect();
    Ok(format!(
        "400 made-up kinds then 20 Deployments ({}): {verdict}; {} distinct `kind` labels",
        answers.join(", "),
        kinds.len()
    ))
}

async fn big_bodies(ctx: Arc<Ctx>) -> Result<String> {
    let clients = 32;
    let request: Arc<[u8]> = ctx
        .webhook
        .request("POST", "/validate?timeout=10s", Some(&ctx.bodies.big_array))
        .into();
    let answers = Arc::new(Mutex::new(BTreeMap::<String, usize>::new()));
    let mut set = JoinSet::new();
    for _ in 0..clients {
        let (ctx, request, answers) = (ctx.clone(), request.clone(), answers.clone());
        set.spawn(async move {
            let mut conn = None;
            while Instant::now() < ctx.deadline {
                let answer = timeout_at(
                    ctx.deadline,
                    exchange(&mut conn, &ctx.webhook, &ctx.tls, &request),
                )
                .await;
                let key = match answer {
                    Ok(Ok(r)) => format!("HTTP {}", r.status),
                    Ok(Err(_)) => "errors".to_string(),
                    Err(_) => "cut at the end".to_string(),
                };
                *answers
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(key)
                    .or_default() += 1;
            }
        });
    }
    while set.join_next().await.is_some() {}
    let answers: Vec<String> = answers
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|(a, k)| format!("{a} ×{k}"))
        .collect();
    Ok(format!(
        "{clients} clients sending reviews of {} back to back: {}",
        mib(ctx.bodies.big_array.len()),
        answers.join(", ")
    ))
}

async fn attack(attack: Attack, ctx: Arc<Ctx>) -> Result<String> {
    match attack {
        Attack::BigArray => big_array(ctx).await,
        Attack::DribbleLongTimeout => dribble(ctx).await,
        Attack::StalledBodies => stalled(ctx, "/validate?timeout=1000h").await,
        Attack::StalledBodiesDefault => stalled(ctx, "/validate").await,
        Attack::FdExhaustion => {
            let spec = idle_spec(&[]);
            let text = flood(ctx, 1100, spec, "idle TCP connections").await?;
            Ok(format!(
                "soft RLIMIT_NOFILE {FD_LIMIT}, reviews on new connections; {text}"
            ))
        }
        Attack::HugeTimeout => huge_timeout(ctx).await,
        Attack::UnreadResponses => unread_responses(ctx).await,
        Attack::JunkKinds => junk_kinds(ctx).await,
        Attack::BigBodiesProbes => big_bodies(ctx).await,
        Attack::IdleFlood => flood(ctx, 2000, idle_spec(&[]), "idle TCP connections").await,
        Attack::HalfHandshake => {
            let spec = idle_spec(&partial_client_hello());
            flood(ctx, 500, spec, "partial ClientHellos").await
        }
        Attack::Slowloris => slowloris(ctx).await,
    }
}

// ---------------------------------------------------------------------------------------------
// One attack on a fresh kanon, and its table row

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms >= 100.0 {
        format!("{ms:.0}")
    } else {
        format!("{ms:.1}")
    }
}

/// "p50 / p99 / max ms; failed k/n (…)" of the samples that started in `[from, to]`.
fn latency(samples: &[Sample], from: Instant, to: Instant, slow: Option<Duration>) -> String {
    let window: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.at >= from && s.at <= to)
        .collect();
    if window.is_empty() {
        return format!("none in the attack's {}", secs(to - from));
    }
    let mut sorted: Vec<Duration> = window.iter().map(|s| s.latency).collect();
    sorted.sort();
    let failed = window.iter().filter(|s| s.got != Got::Ok).count();
    let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
    for s in &window {
        let key = match s.got {
            Got::Ok => continue,
            Got::Status(code) => format!("HTTP {code}"),
            Got::NotAllowed => "not allowed".to_string(),
            Got::Error => "no answer".to_string(),
        };
        *statuses.entry(key).or_default() += 1;
    }
    let mut out = format!(
        "{} / {} / {} ms; failed {failed}/{}",
        ms(percentile(&sorted, 0.5)),
        ms(percentile(&sorted, 0.99)),
        ms(sorted[sorted.len() - 1]),
        window.len()
    );
    if !statuses.is_empty() {
        let parts: Vec<String> = statuses.iter().map(|(s, k)| format!("{s} ×{k}")).collect();
        out += &format!(" ({})", parts.join(", "));
    }
    if let Some(limit) = slow {
        let over = sorted.iter().filter(|&&d| d > limit).count();
        if over > 0 {
            out += &format!("; {over} over {}", secs(limit));
        }
    }
    out
}

fn rss(kb: u64) -> String {
    format!("{:.1}", kb as f64 / 1024.0)
}

const HEADER: &str = "| attack | outcome | kanon after | RSS MiB: idle → peak (VmHWM) | RSS MiB: end / +2 s / +5 s | fds: idle → peak | reviews p50 / p99 / max | probes p50 / p99 / max |\n|---|---|---|---|---|---|---|---|";

async fn run_attack(
    settings: &Settings,
    which: Attack,
    bodies: &Arc<Bodies>,
    tls: &TlsConnector,
) -> Result<String> {
    let mut kanon = Kanon::spawn(settings, which)?;
    let result = measure(settings, which, bodies, tls, &mut kanon).await;
    kanon.stop(settings.keep_logs.as_deref(), which);
    result
}

async fn measure(
    settings: &Settings,
    which: Attack,
    bodies: &Arc<Bodies>,
    tls: &TlsConnector,
    kanon: &mut Kanon,
) -> Result<String> {
    let probe = Endpoint::parse(&settings.probe_url, kanon.port, kanon.metrics_port)?;
    kanon.wait_ready(&probe, tls).await?;
    let pid = kanon.pid;
    let sampler = Sampler::start(pid);
    let clients = Clients::start(Legit {
        webhook: Endpoint::https(kanon.port),
        probe,
        tls: tls.clone(),
        review: bodies.pod.clone(),
        fresh_connections: which == Attack::FdExhaustion,
    })?;
    sleep(WARM_UP).await;
    let idle = read_proc(pid).context("kanon's /proc entry before the attack")?;
    let started = Instant::now();
    let deadline = started + settings.duration(which);
    let ctx = Arc::new(Ctx {
        webhook: Endpoint::https(kanon.port),
        metrics: Endpoint::http(kanon.metrics_port),
        tls: tls.clone(),
        port: kanon.port,
        stderr: kanon.stderr.clone(),
        bodies: bodies.clone(),
        started,
        deadline,
    });
    let outcome = match timeout_at(deadline + CLEANUP, attack(which, ctx)).await {
        Ok(Ok(text)) => text,
        Ok(Err(e)) => format!("bench error: {e:#}"),
        Err(_) => format!(
            "the attack did not end within {} of its duration",
            secs(CLEANUP)
        ),
    };
    let ended = Instant::now();
    let end = read_proc(pid);
    sleep_until(ended + Duration::from_secs(2)).await;
    let after2 = read_proc(pid);
    sleep_until(ended + Duration::from_secs(5)).await;
    let after5 = read_proc(pid);
    let records = clients.finish();
    let samples = sampler.finish();
    let during: Vec<&Proc> = samples
        .iter()
        .filter(|s| s.at >= started && s.at <= ended)
        .collect();
    let peak_rss = during.iter().map(|s| s.rss_kb).max().unwrap_or(idle.rss_kb);
    let peak_fds = during.iter().map(|s| s.fds).max().unwrap_or(idle.fds);
    let alive = match kanon.exited() {
        None => "alive".to_string(),
        Some(status) => format!("**exited** ({status})"),
    };
    let show = |p: Option<Proc>| p.map_or("–".to_string(), |p| rss(p.rss_kb));
    let hwm = end.map_or("–".to_string(), |p| rss(p.hwm_kb));
    Ok(format!(
        "| {} | {} | {alive} | {} → {} (+{}; HWM {hwm}) | {} / {} / {} | {} → {peak_fds} | {} | {} |",
        which.name(),
        outcome.replace('\n', " "),
        rss(idle.rss_kb),
        rss(peak_rss),
        rss(peak_rss.saturating_sub(idle.rss_kb)),
        show(end),
        show(after2),
        show(after5),
        idle.fds,
        latency(&records.reviews, started, ended, None),
        latency(&records.probes, started, ended, Some(KUBELET_PROBE_TIMEOUT)),
    ))
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn run() -> Result<()> {
    // Installed before any TLS configuration is built (the workspace builds rustls with ring).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let settings = Settings::from_env()?;
    raise_descriptor_limit();
    let bodies = Arc::new(Bodies::load()?);
    let tls = tls_connector();
    // A hang anywhere ends the run rather than the machine's patience; kanon dies with us.
    let budget: u64 = settings
        .attacks
        .iter()
        .map(|&a| settings.duration(a).as_secs() + 60)
        .sum();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(budget));
        eprintln!("adversary: still running after {budget} s; giving up");
        std::process::exit(3);
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    eprintln!(
        "adversary: {} {}; probes at {}; load average {}",
        settings.bin.display(),
        settings.extra_args.join(" "),
        settings.probe_url,
        load_average()
    );
    println!("{HEADER}");
    let mut failed = false;
    for &which in &settings.attacks {
        eprintln!(
            "adversary: {} ({} s)",
            which.name(),
            settings.duration(which).as_secs()
        );
        let row = runtime.block_on(run_attack(&settings, which, &bodies, &tls));
        match row {
            Ok(row) => println!("{row}"),
            Err(e) => {
                failed = true;
                println!(
                    "| {} | bench error: {} | | | | | | |",
                    which.name(),
                    format!("{e:#}").replace('\n', " ")
                );
            }
        }
        std::io::stdout().flush()?;
    }
    eprintln!("adversary: load average after {}", load_average());
    ensure!(!failed, "some attacks could not be measured");
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("adversary: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
