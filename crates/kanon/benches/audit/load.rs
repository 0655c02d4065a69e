//! The admission load: oha at a fixed rate against kanon's `/validate`.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use kanon_control_plane::kanon::{output_text as text, repo};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Idle,
    Audit,
}

#[derive(Debug, Clone)]
pub(crate) struct Window {
    pub(crate) phase: Phase,
    pub(crate) round: usize,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
    pub(crate) rps: f64,
    /// Share of the window during which an audit was reading (by the sampled counters).
    pub(crate) audit_coverage: f64,
    /// Objects the audit judged during the window.
    pub(crate) scanned: f64,
    /// CPU seconds per second of the window: kanon, the auditing kanon, kube-apiserver, etcd.
    /// (`kanon`: the one answering the reviews; the auditor is the same unless split.)
    pub(crate) cpu: [f64; 4],
}

pub(crate) fn oha_path() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("OHA") {
        return Ok(PathBuf::from(path));
    }
    if let Ok(out) = Command::new("sh").args(["-c", "command -v oha"]).output()
        && out.status.success()
    {
        return Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    }
    for root in [repo(), std::env::current_dir()?] {
        let path = root.join("target/bench-tools/bin/oha");
        if path.is_file() {
            return Ok(path);
        }
    }
    bail!("oha not found: install it (cargo install oha --root target/bench-tools) or set OHA")
}

/// oha at 1,000 req/s for `seconds` against `url`, on `cpus` only when given: p50, p99, max
/// (ms), req/s.
pub(crate) fn oha(
    oha: &Path,
    url: &str,
    body: &Path,
    seconds: f64,
    cpus: Option<&[usize]>,
) -> Result<(f64, f64, f64, f64)> {
    let mut command = Command::new(oha);
    if let Some(cpus) = cpus {
        // SAFETY: the set is built before the fork; the child only passes it to
        // sched_setaffinity(2), which is async-signal-safe.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &cpu in cpus {
                libc::CPU_SET(cpu, &mut set);
            }
            command.pre_exec(move || {
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let out = command
        .args([
            "--no-tui",
            "--insecure",
            "--http-version",
            "1.1",
            "-m",
            "POST",
        ])
        .args(["-H", "Content-Type: application/json", "-D"])
        .arg(body)
        .args(["--output-format", "json", "-c", "32", "-q", "1000"])
        .args([
            "--latency-correction",
            "--wait-ongoing-requests-after-deadline",
        ])
        .args(["-z", &format!("{seconds}s"), url])
        .output()
        .context("oha runs")?;
    ensure!(out.status.success(), "oha: {}", text(&out));
    let answer: Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("oha's output: {}", text(&out)))?;
    let codes = answer["statusCodeDistribution"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    ensure!(
        codes.keys().all(|c| c == "200")
            && answer["errorDistribution"]
                .as_object()
                .is_none_or(|e| e.is_empty()),
        "oha: answers other than 200, or errors: {codes:?} {}",
        answer["errorDistribution"]
    );
    let p = &answer["latencyPercentiles"];
    let ms = |v: &Value| v.as_f64().unwrap_or(f64::NAN) * 1000.0;
    Ok((
        ms(&p["p50"]),
        ms(&p["p99"]),
        ms(&answer["summary"]["slowest"]),
        answer["summary"]["requestsPerSec"].as_f64().unwrap_or(0.0),
    ))
}
