//! `kanon serve` as a child process.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use base64::Engine as _;
use serde_json::{Value, json};

use super::{
    free_port, mutating_configuration, namespaces_named, pod_rules, validating_configuration,
};
use crate::cgroup::MemoryCgroup;
use crate::process::{Lifetime, spawn};

/// How long [`Kanon::start`] waits for `/readyz`, and how often it asks.
const READY_WITHIN: Duration = Duration::from_secs(60);
const READY_EVERY: Duration = Duration::from_millis(100);

/// The `timeoutSeconds` of the webhooks [`Kanon::webhook`] makes.
pub const WEBHOOK_TIMEOUT_SECS: u64 = 5;

/// How long [`Kanon::stop`] waits after SIGTERM before SIGKILL (kanon drains its connections
/// first).
const STOP_GRACE: Duration = Duration::from_secs(30);

/// `kanon serve` in cluster mode against a control plane, on two free ports of 127.0.0.1 (the
/// webhook's HTTPS and the metrics' HTTP), with its certificates in a directory of its own.
///
/// Ports and certificate directory stay the same across [`stop`](Self::stop)/[`kill`](Self::kill)
/// and [`start`](Self::start), so a restarted kanon serves behind the same webhook
/// configurations. Dropping it stops it.
#[derive(Debug)]
pub struct Kanon {
    name: String,
    binary: PathBuf,
    dir: PathBuf,
    /// The kubeconfig it runs with.
    pub kubeconfig: PathBuf,
    /// The webhook's HTTPS port.
    pub port: u16,
    /// The metrics' HTTP port.
    pub metrics_port: u16,
    /// Where it keeps its CA and serving certificate (`--cert-dir`).
    pub cert_dir: PathBuf,
    /// The settings every start passes (see [`with_settings`](Self::with_settings)).
    settings: Vec<String>,
    /// Arguments after the settings: what a test changes between starts.
    pub args: Vec<String>,
    env: Vec<(String, String)>,
    /// The client certificate and key [`status`](Self::status) presents (for a kanon that
    /// requires one).
    pub client_identity: Option<(PathBuf, PathBuf)>,
    /// A new log file for each start instead of one appended to.
    log_per_start: bool,
    logs: Vec<PathBuf>,
    /// The bound on one `/readyz` probe.
    probe_timeout: Duration,
    /// The memory limit every start runs under, as the chart's container limit would hold.
    memory: Option<MemoryCgroup>,
    child: Option<Child>,
}

/// How [`Kanon::stop`] ended the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// It was not running.
    NotRunning,
    /// It exited after SIGTERM, with this status.
    Exited(ExitStatus),
    /// It ignored SIGTERM for 30 s and was killed.
    Killed,
}

impl Kanon {
    /// A kanon (not started) running `binary` with `kubeconfig`; its certificates in
    /// `<dir>/<name>-certs`, its log `<dir>/<name>.log`; on two free ports.
    pub fn new(binary: &Path, kubeconfig: &Path, dir: &Path, name: &str) -> Result<Kanon> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Kanon {
            name: name.to_string(),
            binary: binary.to_path_buf(),
            dir: dir.to_path_buf(),
            kubeconfig: kubeconfig.to_path_buf(),
            port: free_port()?,
            metrics_port: free_port()?,
            cert_dir: dir.join(format!("{name}-certs")),
            settings: Vec::new(),
            args: Vec::new(),
            env: Vec::new(),
            client_identity: None,
            log_per_start: false,
            logs: Vec::new(),
            probe_timeout: Duration::from_secs(5),
            memory: None,
            child: None,
        })
    }

    /// Arguments every start passes after `serve --kubeconfig --cert-dir --listen
    /// --metrics-listen` and before [`args`](Self::args): the settings of a suite or bench,
    /// which a test replacing `args` keeps.
    pub fn with_settings<S: AsRef<str>>(mut self, settings: &[S]) -> Kanon {
        self.settings = settings.iter().map(|s| s.as_ref().to_string()).collect();
        self
    }

    /// An environment variable for the process (`RUST_LOG`, say).
    pub fn with_env(mut self, name: &str, value: &str) -> Kanon {
        self.env.push((name.to_string(), value.to_string()));
        self
    }

    /// One log per start, `<name>-1.log`, `<name>-2.log`, ... (a bench that kills and restarts
    /// kanon keeps each life's log apart); by default every start appends to `<name>.log`.
    pub fn with_log_per_start(mut self) -> Kanon {
        self.log_per_start = true;
        self
    }

    /// The bound on one `/readyz` probe (default 5 s).
    pub fn with_probe_timeout(mut self, timeout: Duration) -> Kanon {
        self.probe_timeout = timeout;
        self
    }

    /// Runs every start (and the program workers it starts) in a memory cgroup limited to
    /// `bytes`, as a Pod's container would be: crossing it gets the process killed by the
    /// kernel, which [`memory`](Self::memory) then counts. Needs root (see [`MemoryCgroup`]).
    pub fn with_memory_limit(mut self, bytes: u64) -> Result<Kanon> {
        self.memory = Some(MemoryCgroup::create(&self.name, bytes)?);
        Ok(self)
    }

    /// The memory cgroup it runs in, if [`with_memory_limit`](Self::with_memory_limit) gave one:
    /// its peak and the kernel's kills.
    pub fn memory(&self) -> Option<&MemoryCgroup> {
        self.memory.as_ref()
    }

    /// Its name, as in its file names.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Starts the process without waiting for it to be ready (nothing when it runs).
    pub fn spawn(&mut self) -> Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        let log = if self.log_per_start {
            self.dir
                .join(format!("{}-{}.log", self.name, self.logs.len() + 1))
        } else {
            self.dir.join(format!("{}.log", self.name))
        };
        let mut command = Command::new(&self.binary);
        command
            .arg("serve")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cert-dir")
            .arg(&self.cert_dir)
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .args([
                "--metrics-listen",
                &format!("127.0.0.1:{}", self.metrics_port),
            ])
            .args(&self.settings)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(memory) = &self.memory {
            memory.join_on_exec(&mut command)?;
        }
        let child = spawn(command, &log, Lifetime::DiesWithParent)
            .with_context(|| format!("kanon ({}) starts", self.name))?;
        self.child = Some(child);
        if self.logs.last() != Some(&log) {
            self.logs.push(log);
        }
        Ok(())
    }

    /// Starts kanon (unless it runs) and waits until `/readyz` answers 200, for 60 s at most.
    pub fn start(&mut self) -> Result<()> {
        self.spawn()?;
        self.wait_ready(READY_WITHIN, READY_EVERY)?;
        Ok(())
    }

    /// Waits until `/readyz` answers 200, asking `every` so often, for `within` at most; when
    /// it answered. Fails at once if the process exits, with its log's tail.
    pub fn wait_ready(&mut self, within: Duration, every: Duration) -> Result<Instant> {
        let deadline = Instant::now() + within;
        loop {
            if self.readyz() == "200" {
                return Ok(Instant::now());
            }
            if !self.running() {
                bail!(
                    "kanon ({}) exited; its log:\n{}",
                    self.name,
                    self.log_tail(40)
                );
            }
            ensure!(
                Instant::now() < deadline,
                "kanon ({}) did not become ready within {within:?}; its log:\n{}",
                self.name,
                self.log_tail(40)
            );
            std::thread::sleep(every);
        }
    }

    /// `/readyz`'s HTTP status, bounded by the probe timeout; `000` when nothing answers.
    pub fn readyz(&self) -> String {
        self.status_within("/readyz", self.probe_timeout)
    }

    /// The HTTP status of `GET path` over HTTPS (kanon's CA, and [`client_identity`] if set),
    /// `000` when nothing answers within 5 s.
    ///
    /// [`client_identity`]: Self::client_identity
    pub fn status(&self, path: &str) -> String {
        self.status_within(path, Duration::from_secs(5))
    }

    fn status_within(&self, path: &str, timeout: Duration) -> String {
        let mut curl = Command::new("curl");
        curl.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time"])
            .arg(format!("{}", timeout.as_secs_f64()))
            .arg("--cacert")
            .arg(self.cert_dir.join("ca.crt"));
        if let Some((cert, key)) = &self.client_identity {
            curl.arg("--cert").arg(cert).arg("--key").arg(key);
        }
        curl.arg(self.url(path))
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
            .unwrap_or_else(|_| "000".to_string())
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// Its CA certificate (PEM), as it wrote it into its certificate directory.
    pub fn ca_pem(&self) -> Result<Vec<u8>> {
        let path = self.cert_dir.join("ca.crt");
        std::fs::read(&path).with_context(|| format!("kanon's CA {}", path.display()))
    }

    /// One webhook of a configuration that calls this kanon at `path` (by URL, with its CA as
    /// the bundle) for `rules` in the namespaces `namespace_selector` matches: `failurePolicy:
    /// Fail`, `timeoutSeconds: 5`, `matchPolicy: Equivalent`, `sideEffects: None`; a caller
    /// changes any field of the value it gets.
    pub fn webhook(
        &self,
        name: &str,
        path: &str,
        rules: Value,
        namespace_selector: Value,
    ) -> Result<Value> {
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca_pem()?);
        Ok(json!({
            "name": name,
            "clientConfig": {"url": self.url(path), "caBundle": ca},
            "rules": rules,
            "namespaceSelector": namespace_selector,
            "failurePolicy": "Fail",
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": WEBHOOK_TIMEOUT_SECS,
        }))
    }

    /// Its mutating and validating webhook configurations, both named `configuration`, with
    /// one webhook each (`mutate.<domain>` at `/mutate`, `validate.<domain>` at `/validate`) for
    /// Pod CREATE and UPDATE in namespace `namespace` only: what a bench sends Pods through.
    pub fn pod_webhook_configurations(
        &self,
        configuration: &str,
        domain: &str,
        namespace: &str,
    ) -> Result<(Value, Value)> {
        let webhook = |kind: &str| {
            let rules = pod_rules(&["CREATE", "UPDATE"]);
            let name = format!("{kind}.{domain}");
            self.webhook(
                &name,
                &format!("/{kind}"),
                rules,
                namespaces_named(&[namespace]),
            )
        };
        Ok((
            mutating_configuration(configuration, vec![webhook("mutate")?]),
            validating_configuration(configuration, vec![webhook("validate")?]),
        ))
    }

    /// Its metrics text.
    pub fn metrics(&self) -> Result<String> {
        metrics_at(self.metrics_port)
    }

    /// The running process's id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether it runs (started and not exited).
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The log of its latest start.
    pub fn log(&self) -> PathBuf {
        self.logs
            .last()
            .cloned()
            .unwrap_or_else(|| self.dir.join(format!("{}.log", self.name)))
    }

    /// Every log it wrote, one per start with [`with_log_per_start`](Self::with_log_per_start).
    pub fn logs(&self) -> &[PathBuf] {
        &self.logs
    }

    /// The last `lines` lines of its latest log (empty when there is none). Reads the whole
    /// file: a bench searches thousands of lines of it.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.log()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGKILL (a crash, or a node gone), then reap the process.
    pub fn kill(&mut self) -> Result<()> {
        let mut child = self.child.take().context("kanon is not running")?;
        child.kill()?;
        child.wait()?;
        Ok(())
    }

    /// SIGTERM, then wait for the exit (30 s at most, then SIGKILL).
    pub fn stop(&mut self) -> Ending {
        let Some(mut child) = self.child.take() else {
            return Ending::NotRunning;
        };
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Ending::Exited(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        Ending::Killed
    }

    /// [`stop`](Self::stop), saying on stderr (after `label: `) when kanon did not exit
    /// cleanly: a bench's record of a shutdown gone wrong.
    pub fn stop_reporting(&mut self, label: &str) {
        match self.stop() {
            Ending::Exited(status) if !status.success() => {
                eprintln!("{label}: kanon ({}) exited with {status}", self.name);
            }
            Ending::Killed => {
                eprintln!(
                    "{label}: kanon ({}) ignored SIGTERM for 30 s; killed",
                    self.name
                );
            }
            _ => {}
        }
    }
}

impl Drop for Kanon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What Linux says of a process at one moment (`/proc/<pid>/status` and `/proc/<pid>/fd`).
#[derive(Debug, Clone, Copy)]
pub struct ProcessSample {
    /// When it was taken.
    pub at: Instant,
    /// Resident memory, KiB.
    pub rss_kb: u64,
    /// The most resident memory so far (VmHWM), KiB; 0 where the kernel does not say.
    pub hwm_kb: u64,
    /// Threads; 0 where the kernel does not say.
    pub threads: u64,
    /// Open file descriptors.
    pub fds: usize,
}

/// A sample of process `pid`; `None` when it is gone (or this is not Linux).
pub fn process_sample(pid: u32) -> Option<ProcessSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some(ProcessSample {
        at: Instant::now(),
        rss_kb: field("VmRSS:")?,
        hwm_kb: field("VmHWM:").unwrap_or(0),
        threads: field("Threads:").unwrap_or(0),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count(),
    })
}

/// The CPU time (user and system) a process has used so far, from `/proc/<pid>/stat`; zero
/// when it is gone.
pub fn cpu_time(pid: u32) -> Duration {
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

/// The metrics text served on `127.0.0.1:<port>/metrics`, read over a plain socket (no
/// subprocess, so that a sampler may read it often).
pub fn metrics_at(port: u16) -> Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .with_context(|| format!("connecting to the metrics port {port}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut body = String::new();
    stream.read_to_string(&mut body)?;
    Ok(body
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default())
}
