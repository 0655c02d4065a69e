//! kanon under attack: a fresh `kanon serve` per attack, waited for until ready, stopped after,
//! and its standard error.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kanon_control_plane::kanon::free_port;
use tokio::time::{Instant, sleep, timeout};
use tokio_rustls::TlsConnector;

use crate::http::{Endpoint, answer_text, get};
use crate::reviews::POLICY;
use crate::{Attack, FD_LIMIT, PROBE_TIMEOUT, Settings};

pub(crate) struct Kanon {
    child: Child,
    pub(crate) pid: u32,
    pub(crate) port: u16,
    pub(crate) metrics_port: u16,
    pub(crate) stderr: PathBuf,
    dir: tempfile::TempDir,
}

impl Kanon {
    /// Spawns `kanon serve` (from the main thread: the child's death signal follows the
    /// spawning thread).
    pub(crate) fn spawn(settings: &Settings, attack: Attack) -> Result<Kanon> {
        let dir = tempfile::tempdir()?;
        let policies = dir.path().join("policies");
        std::fs::create_dir(&policies)?;
        std::fs::write(policies.join("never-denies.yaml"), POLICY)?;
        crate::cel::add_policies(attack, &policies)?;
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

    pub(crate) fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(None) => None,
            Ok(Some(status)) => Some(status.to_string()),
            Err(e) => Some(format!("unknown ({e})")),
        }
    }

    pub(crate) async fn wait_ready(&mut self, probe: &Endpoint, tls: &TlsConnector) -> Result<()> {
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
    pub(crate) fn stop(mut self, keep_logs: Option<&Path>, attack: Attack) {
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

pub(crate) fn stderr_lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}
