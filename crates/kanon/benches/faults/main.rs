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
//!
//! Layout: this file has the settings, the order of the phases and the final report; `world.rs`
//! the cluster (the kit of `kanon_control_plane::kanon`) with kanon and the hanging lookup
//! target; `policies.rs` the policies, Pods and reviews; `load.rs` the creates; `report.rs` a
//! phase's table and checks; one file per phase: `baseline.rs`, `kanon_killed.rs`,
//! `outage.rs` (apiserver, etcd), `hanging_lookup.rs`, `burst.rs`, `soak.rs`.

mod baseline;
mod burst;
mod hanging_lookup;
mod kanon_killed;
mod load;
mod outage;
mod policies;
mod report;
mod soak;
mod world;

#[path = "../common/percentile.rs"]
mod percentile;

use percentile::percentile;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Result;
use kanon_control_plane::kanon::repo;

use crate::baseline::baseline;
use crate::burst::burst;
use crate::hanging_lookup::hanging_lookup;
use crate::kanon_killed::kanon_killed;
use crate::outage::{Outage, outage};
use crate::policies::{policy_a, policy_b, policy_forbidden, policy_name};
use crate::report::{Report, shorten};
use crate::soak::{slope, soak};
use crate::world::World;

/// The namespace of the Pods created through the apiserver.
const NS: &str = "bench-faults";
/// The bound on one create, client side.
const CREATE_TIMEOUT: Duration = Duration::from_secs(15);
/// The webhooks' `timeoutSeconds` (the kit's).
const WEBHOOK_TIMEOUT_SECS: u64 = kanon_control_plane::kanon::WEBHOOK_TIMEOUT_SECS;
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

fn sleep(d: Duration) {
    std::thread::sleep(d);
}

/// The sum of the samples of metric `name` in the metrics text `text`.
fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
}

/// The sum of the labelled samples of metric `name` whose line contains `contains`.
fn metric_sum_filtered(text: &str, name: &str, contains: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(contains))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
}

// ---------------------------------------------------------------------------------------------
// The run: the phases in order, the soak, the report

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
    world.cluster.pod_namespace(NS)?;
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
    println!("# Faults survived, through the real apiserver (crates/kanon/benches/faults/)");
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
