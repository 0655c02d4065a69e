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
//! | `cel-harmless` | six small CEL rules on labelled Pods; 16 clients send such Pods back to back for 20 s |
//! | `cel-hostile` | the same rules made hostile (nested comprehensions, strings doubled in a loop, a regex over 1 MiB, a regex past RE2's size, a 240-deep literal, 12 variables of `lists.range(900000)`); see `cel.rs` |
//!
//! The last two are not attacks on the port but a policy author's worst: kanon's memory while
//! every review's CEL rules run to their bounds, next to the same load with harmless rules
//! (`KANON_ADVERSARY_ATTACKS=cel-harmless,cel-hostile` runs only them).
//!
//! Run: `cargo bench -p kanon --bench adversary` (about 4½ minutes), or
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
mod attacks;
mod cel;
mod ctx;
mod http;
mod kanon;
mod legit;
#[path = "../common/percentile.rs"]
mod percentile;
mod reviews;
mod sampler;
#[path = "../common/tls.rs"]
mod tls;

use percentile::percentile;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;
use tokio::time::{Instant, sleep, sleep_until, timeout_at};
use tokio_rustls::TlsConnector;

use crate::attacks::attack;
use crate::ctx::{Ctx, secs};
use crate::http::{Endpoint, tls_connector};
use crate::kanon::Kanon;
use crate::legit::{Clients, Got, Legit, Sample};
use crate::reviews::Bodies;
use crate::sampler::{Proc, Sampler, read_proc};

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
    CelHarmless,
    CelHostile,
}

const ATTACKS: [Attack; 14] = [
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
    Attack::CelHarmless,
    Attack::CelHostile,
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
            Attack::CelHarmless => "cel-harmless",
            Attack::CelHostile => "cel-hostile",
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
            Attack::CelHarmless | Attack::CelHostile => 20,
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

    /// kanon's evaluation slots: `--max-concurrent-reviews` when given, else its default
    /// (twice the CPUs, at least 2).
    fn evaluation_slots(&self) -> usize {
        let args = &self.extra_args;
        let given = args.iter().enumerate().find_map(|(i, a)| {
            match a.strip_prefix("--max-concurrent-reviews") {
                Some("") => args.get(i + 1)?.parse().ok(),
                Some(rest) => rest.strip_prefix('=')?.parse().ok(),
                None => None,
            }
        });
        given.unwrap_or_else(|| {
            let cpus = std::thread::available_parallelism().map_or(2, usize::from);
            (cpus * 2).max(2)
        })
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
        bin: settings.bin.clone(),
        evaluation_slots: settings.evaluation_slots(),
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
        .filter(|s| (started..=ended).contains(&Instant::from_std(s.at)))
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
