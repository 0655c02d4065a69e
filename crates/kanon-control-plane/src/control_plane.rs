//! A running etcd + kube-apiserver (+ kube-controller-manager) on 127.0.0.1.

use std::fs;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use base64::Engine as _;

use crate::logs::tail_lines;
use crate::pki::{self, ADMIN_USER, Pki};
use crate::ports::free_port;
use crate::process::{self, Lifetime, STOP_GRACE};
use crate::toolchain::Toolchain;

const ETCD: &str = "etcd";
const APISERVER: &str = "kube-apiserver";
const CONTROLLER_MANAGER: &str = "kube-controller-manager";

/// How long etcd may take to answer its health check (it usually takes under a second).
const ETCD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long kube-apiserver may take to become ready (2–3 s is usual; a loaded machine running
/// several control planes and a compiler needs more).
const APISERVER_TIMEOUT: Duration = Duration::from_secs(60);
/// How long kube-controller-manager may take to create the `default` ServiceAccount.
const CONTROLLER_MANAGER_TIMEOUT: Duration = Duration::from_secs(60);
/// Log lines quoted in an error about a process that failed to come up.
const LOG_TAIL: usize = 40;

/// The Service range kube-apiserver allocates ClusterIPs from. Nothing routes it: Services only
/// need an address to be stored.
const SERVICE_CLUSTER_IP_RANGE: &str = "10.0.0.0/24";
/// The issuer of service-account tokens, the conventional in-cluster one.
const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Environment variable that keeps a temporary state directory after the control plane stops
/// (for reading its logs after a failed test).
pub const KEEP_STATE_ENV: &str = "KANON_KEEP_STATE";

/// How to start a [`ControlPlane`].
#[derive(Debug, Clone)]
pub struct Options {
    /// Directory for certificates, the kubeconfig, etcd's data, logs and the `pids` file.
    /// `None` (the default): a fresh temporary directory, deleted when the control plane is
    /// dropped or stopped, unless `KANON_KEEP_STATE` is set to a non-empty value.
    ///
    /// A given directory is kept, but each start begins with an empty etcd (its old data is
    /// deleted) and fresh certificates.
    pub state_dir: Option<PathBuf>,
    /// Whether to run kube-controller-manager (default: yes). It creates every namespace's
    /// `default` ServiceAccount, the ReplicaSets and Pods of Deployments, and empties deleted
    /// namespaces (without it they stay `Terminating`). Without it the `ServiceAccount`
    /// admission plugin is turned off, since no Pod could be created otherwise.
    pub controller_manager: bool,
    /// Whether the processes must outlive this process (`cargo xtask cluster up`). Default
    /// `false`: they are killed by the kernel when this process dies, however it dies. When
    /// `true`, they run in their own session; end them with [`ControlPlane::stop_in`], after
    /// handing them off with [`ControlPlane::detach`].
    pub detached: bool,
    /// An OTLP/gRPC collector (`host:port`, plain text) that kube-apiserver sends its traces
    /// to, every request sampled (`--tracing-config-file`). Default `None`: no tracing.
    pub tracing_endpoint: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            state_dir: None,
            controller_manager: true,
            detached: false,
            tracing_endpoint: None,
        }
    }
}

/// The three loopback ports of one control plane.
#[derive(Debug, Clone, Copy)]
struct Ports {
    etcd_client: u16,
    etcd_peer: u16,
    apiserver: u16,
}

impl Ports {
    /// Three free ports, from the one record of ports handed out in this process
    /// ([`free_port`]): two control planes of one test run never share a port, even one whose
    /// apiserver is stopped for a moment.
    fn pick() -> Result<Ports> {
        let ports = [free_port()?, free_port()?, free_port()?];
        Ok(Ports {
            etcd_client: ports[0],
            etcd_peer: ports[1],
            apiserver: ports[2],
        })
    }
}

/// A running control plane: etcd, kube-apiserver and (by default) kube-controller-manager,
/// children of this process, listening on 127.0.0.1 only.
///
/// Starting takes 4–6 s on two cores (etcd under 1 s, kube-apiserver ready after 2–3 s,
/// kube-controller-manager's first ServiceAccount about 1 s later; measured 3.9–6.5 s with up
/// to four starting at once). Dropping it stops the processes (SIGTERM, then SIGKILL after
/// 10 s) in the order kube-controller-manager, kube-apiserver, etcd, which takes 1–1.5 s (the
/// apiserver exits at once when no client holds a watch open), and deletes a temporary state
/// directory.
///
/// Authentication is the admin client certificate (user `kanon-admin`, group
/// `system:masters`) in [`kubeconfig`](Self::kubeconfig); authorization is RBAC, so other
/// identities (service-account tokens, impersonation) are checked as in a real cluster. Both
/// admission-webhook plugins are on: a webhook registered with a `clientConfig.url` on
/// 127.0.0.1 is called. Nothing runs Pods (there is no kubelet or scheduler).
///
/// kube-apiserver calls every admission webhook with a client certificate
/// (`CN=`[`WEBHOOK_CLIENT_NAME`](crate::WEBHOOK_CLIENT_NAME), `clientAuth`, signed by the
/// control plane's CA, [`ca_cert_file`](Self::ca_cert_file)), which it presents when the
/// webhook's TLS server asks for one; a webhook that asks for none is unaffected. A webhook that
/// trusts that CA for client certificates admits kube-apiserver, and also any other holder of a
/// certificate of that CA (the admin's, or one kube-controller-manager signs for an approved
/// CSR), but no client without one. The same identity is in
/// [`webhook_client_cert_file`](Self::webhook_client_cert_file) and
/// [`webhook_client_key_file`](Self::webhook_client_key_file), for a test that calls a webhook
/// as kube-apiserver would.
#[derive(Debug)]
pub struct ControlPlane {
    toolchain: Toolchain,
    state_dir: PathBuf,
    controller_manager_enabled: bool,
    /// Where kube-apiserver sends its traces, if anywhere.
    tracing_endpoint: Option<String>,
    lifetime: Lifetime,
    ports: Ports,
    ca_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
    etcd: Option<Child>,
    apiserver: Option<Child>,
    controller_manager: Option<Child>,
    /// Set by [`detach`](Self::detach): `Drop` leaves the processes alone.
    detached_off: bool,
    /// Last field, so the directory is deleted only after `Drop` has stopped the processes
    /// that write into it.
    temp_dir: Option<tempfile::TempDir>,
}

impl ControlPlane {
    /// Starts etcd, kube-apiserver and (unless turned off in `options`) kube-controller-manager,
    /// and returns once the apiserver answers `/readyz` and, with the controller manager, once
    /// the `default` ServiceAccount of namespace `default` exists (which proves the controller
    /// manager works). Takes 4–6 s.
    ///
    /// On failure everything already started is stopped again, and the error quotes the last
    /// lines of the failing process's log.
    ///
    /// Blocking (as are [`stop`](Self::stop) and `Drop`, 1–3 s): from async code, call it
    /// through `spawn_blocking` or before the runtime starts.
    pub fn start(toolchain: &Toolchain, options: Options) -> Result<ControlPlane> {
        let (state_dir, temp_dir) = match &options.state_dir {
            Some(dir) => {
                fs::create_dir_all(dir)
                    .with_context(|| format!("creating the state directory {}", dir.display()))?;
                let dir = std::path::absolute(dir)
                    .with_context(|| format!("resolving {}", dir.display()))?;
                (dir, None)
            }
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("kanon-control-plane-")
                    .tempdir()
                    .context("creating a temporary state directory")?;
                let keep = std::env::var_os(KEEP_STATE_ENV).is_some_and(|v| !v.is_empty());
                if keep {
                    (temp.keep(), None)
                } else {
                    (temp.path().to_path_buf(), Some(temp))
                }
            }
        };
        let running = Self::running_in(&state_dir)?;
        if !running.is_empty() {
            bail!(
                "a control plane is still running in {} ({}); stop it first (`cargo xtask cluster down --dir {}`)",
                state_dir.display(),
                describe(&running),
                state_dir.display()
            );
        }

        // A fresh cluster every time: etcd's old data would carry objects signed with the old
        // service-account key and peer addresses of old ports.
        remove_if_exists(&state_dir.join("etcd-data"))?;
        remove_if_exists(&state_dir.join("pids"))?;
        remove_if_exists(&state_dir.join("kubectl-cache"))?;
        let logs = state_dir.join("logs");
        fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
        for name in [ETCD, APISERVER, CONTROLLER_MANAGER] {
            let log = logs.join(format!("{name}.log"));
            fs::write(&log, "").with_context(|| format!("creating {}", log.display()))?;
        }
        let flex = state_dir.join("flexvolume");
        fs::create_dir_all(&flex).with_context(|| format!("creating {}", flex.display()))?;

        let ports = Ports::pick()?;
        let pki = Pki::generate()?;
        pki.write(&state_dir.join("pki"))?;
        // From the moment it exists, an early return drops `control_plane`, which stops
        // whatever was started.
        let mut control_plane = ControlPlane {
            toolchain: toolchain.clone(),
            state_dir,
            controller_manager_enabled: options.controller_manager,
            tracing_endpoint: options.tracing_endpoint.clone(),
            lifetime: if options.detached {
                Lifetime::Detached
            } else {
                Lifetime::DiesWithParent
            },
            ports,
            ca_pem: pki.ca_cert,
            client_cert_pem: pki.admin_cert,
            client_key_pem: pki.admin_key,
            etcd: None,
            apiserver: None,
            controller_manager: None,
            detached_off: false,
            temp_dir,
        };
        control_plane.write_kubeconfig()?;
        control_plane.write_admission_config()?;
        control_plane.write_tracing_config()?;
        control_plane.start_etcd()?;
        control_plane.start_apiserver()?;
        if control_plane.controller_manager_enabled {
            control_plane.start_controller_manager()?;
        }
        Ok(control_plane)
    }

    /// The admin kubeconfig (certificates embedded, so the file can be copied anywhere).
    pub fn kubeconfig(&self) -> PathBuf {
        self.state_dir.join("kubeconfig")
    }

    /// The apiserver's URL, `https://127.0.0.1:<port>`.
    pub fn server(&self) -> String {
        format!("https://127.0.0.1:{}", self.ports.apiserver)
    }

    /// PEM of the CA that signed the apiserver's serving certificate, the admin client
    /// certificate and the webhook client certificate (and that kube-controller-manager signs
    /// CSRs with).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The file of [`ca_pem`](Self::ca_pem): the CA that signed the serving, admin and webhook
    /// client certificates. A webhook that trusts it for client certificates (kanon's
    /// `--client-ca-file`) accepts kube-apiserver's calls.
    pub fn ca_cert_file(&self) -> PathBuf {
        self.pki_file("ca.crt")
    }

    /// PEM file of the client certificate kube-apiserver presents to admission webhooks
    /// (`CN=`[`WEBHOOK_CLIENT_NAME`](crate::WEBHOOK_CLIENT_NAME), signed by
    /// [`ca_cert_file`](Self::ca_cert_file)).
    pub fn webhook_client_cert_file(&self) -> PathBuf {
        self.pki_file("webhook-client.crt")
    }

    /// PEM file (PKCS#8, ECDSA P-256, readable by the owner only) of the key of
    /// [`webhook_client_cert_file`](Self::webhook_client_cert_file).
    pub fn webhook_client_key_file(&self) -> PathBuf {
        self.pki_file("webhook-client.key")
    }

    /// PEM of the admin client certificate (`CN=kanon-admin, O=system:masters`).
    pub fn client_cert_pem(&self) -> &str {
        &self.client_cert_pem
    }

    /// PEM (PKCS#8, ECDSA P-256) of the admin client certificate's key.
    pub fn client_key_pem(&self) -> &str {
        &self.client_key_pem
    }

    /// The state directory: `kubeconfig`, `pki/`, `admission/` (kube-apiserver's admission
    /// configuration and the kubeconfig it calls webhooks with), `logs/`, `etcd-data/`, `pids`.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The binaries this control plane runs.
    pub fn toolchain(&self) -> &Toolchain {
        &self.toolchain
    }

    /// kube-apiserver's log (standard output and error, appended across restarts).
    pub fn apiserver_log(&self) -> PathBuf {
        self.log(APISERVER)
    }

    /// etcd's log.
    pub fn etcd_log(&self) -> PathBuf {
        self.log(ETCD)
    }

    /// kube-controller-manager's log (empty when it does not run).
    pub fn controller_manager_log(&self) -> PathBuf {
        self.log(CONTROLLER_MANAGER)
    }

    /// Names and PIDs of the processes this control plane currently runs.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        [
            (ETCD, &self.etcd),
            (APISERVER, &self.apiserver),
            (CONTROLLER_MANAGER, &self.controller_manager),
        ]
        .into_iter()
        .filter_map(|(name, child)| child.as_ref().map(|c| (name, c.id())))
        .collect()
    }

    /// A `kubectl` command (the toolchain's, by full path) preset with this control plane's
    /// kubeconfig and a discovery cache in the state directory (so no stale discovery of an
    /// earlier cluster on the same port is used, and nothing is written to `~/.kube`). Add the
    /// subcommand and arguments.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(&self.toolchain.kubectl);
        cmd.arg(format!("--kubeconfig={}", self.kubeconfig().display()))
            .arg(format!(
                "--cache-dir={}",
                self.state_dir.join("kubectl-cache").display()
            ))
            .env("KUBECONFIG", self.kubeconfig());
        cmd
    }

    /// A `helm` command (the toolchain's) with `KUBECONFIG` set to this control plane's and
    /// helm's cache, configuration and data directories inside the state directory, so helm
    /// neither reads nor writes the user's own.
    pub fn helm(&self) -> Command {
        let helm = self.state_dir.join("helm");
        let mut cmd = Command::new(&self.toolchain.helm);
        cmd.env("KUBECONFIG", self.kubeconfig())
            .env("HELM_CACHE_HOME", helm.join("cache"))
            .env("HELM_CONFIG_HOME", helm.join("config"))
            .env("HELM_DATA_HOME", helm.join("data"));
        cmd
    }

    /// Stops kube-apiserver only (SIGTERM, SIGKILL after 10 s); etcd and the controller manager
    /// keep running. For tests of clients that must survive an apiserver restart. Takes about
    /// 2 s: clients' open watches keep the HTTP server busy until its 2 s shutdown timeout.
    pub fn stop_apiserver(&mut self) -> Result<()> {
        if let Some(mut child) = self.apiserver.take() {
            process::stop_child(APISERVER, &mut child, STOP_GRACE)?;
        }
        self.write_pids()
    }

    /// Starts kube-apiserver again, on the same port, with the same etcd and certificates, and
    /// waits until it is ready (60 s at most). Everything stored before is still there.
    pub fn start_apiserver(&mut self) -> Result<()> {
        if let Some(child) = &mut self.apiserver {
            if child.try_wait().ok().flatten().is_none() {
                bail!("kube-apiserver is already running (pid {})", child.id());
            }
            self.apiserver = None;
        }
        let started = Instant::now();
        let child = process::spawn(
            self.apiserver_command(),
            &self.apiserver_log(),
            self.lifetime,
        )?;
        self.apiserver = Some(child);
        self.write_pids()?;
        self.wait_apiserver_ready(started)
    }

    /// [`stop_apiserver`](Self::stop_apiserver), then [`start_apiserver`](Self::start_apiserver).
    pub fn restart_apiserver(&mut self) -> Result<()> {
        self.stop_apiserver()?;
        self.start_apiserver()
    }

    /// Stops etcd only (SIGTERM, SIGKILL after 10 s); kube-apiserver and the controller manager
    /// keep running (and fail their storage calls until etcd is back). For tests of clients
    /// that must survive a storage outage. Its data directory is kept.
    pub fn stop_etcd(&mut self) -> Result<()> {
        if let Some(mut child) = self.etcd.take() {
            process::stop_child(ETCD, &mut child, STOP_GRACE)?;
        }
        self.write_pids()
    }

    /// Starts etcd again, on the same ports and with the same data directory, and waits until
    /// it is healthy (30 s at most). Everything stored before is still there; kube-apiserver
    /// reconnects by itself.
    pub fn start_etcd(&mut self) -> Result<()> {
        if let Some(child) = &mut self.etcd {
            if child.try_wait().ok().flatten().is_none() {
                bail!("etcd is already running (pid {})", child.id());
            }
            self.etcd = None;
        }
        self.spawn_etcd()
    }

    /// [`stop_etcd`](Self::stop_etcd), then [`start_etcd`](Self::start_etcd).
    pub fn restart_etcd(&mut self) -> Result<()> {
        self.stop_etcd()?;
        self.start_etcd()
    }

    /// Stops everything (what `Drop` does), reporting the first failure instead of printing it.
    pub fn stop(mut self) -> Result<()> {
        self.stop_all()
    }

    /// Hands the processes off: this value no longer stops them when dropped (and a temporary
    /// state directory is kept). Returns the state directory, for [`ControlPlane::stop_in`].
    ///
    /// Meant for [`Options::detached`] control planes; without it the processes still die with
    /// this process.
    pub fn detach(mut self) -> PathBuf {
        self.detached_off = true;
        if let Some(temp) = self.temp_dir.take() {
            let _ = temp.keep();
        }
        self.state_dir.clone()
    }

    /// The control-plane processes recorded in `state_dir`'s `pids` file that are still
    /// running (name and PID). Empty when there is no `pids` file.
    pub fn running_in(state_dir: &Path) -> Result<Vec<(String, u32)>> {
        let path = state_dir.join("pids");
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let mut running = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let mut fields = line.split_whitespace();
            let (Some(name), Some(pid), None) = (fields.next(), fields.next(), fields.next())
            else {
                bail!("{}: malformed line `{line}`", path.display());
            };
            let pid: u32 = pid
                .parse()
                .with_context(|| format!("{}: malformed PID in `{line}`", path.display()))?;
            if process::is_running(pid, name) {
                running.push((name.to_owned(), pid));
            }
        }
        Ok(running)
    }

    /// Stops the control plane whose `pids` file is in `state_dir` (one started detached, e.g.
    /// by `cargo xtask cluster up`), in the same order and with the same grace period as
    /// `Drop`, then deletes the `pids` file. A PID is signalled only if it still belongs to a
    /// process of the recorded name. Returns what was stopped, as `name (pid N)`.
    pub fn stop_in(state_dir: &Path) -> Result<Vec<String>> {
        let running = Self::running_in(state_dir)?;
        let mut stopped = Vec::new();
        for name in [CONTROLLER_MANAGER, APISERVER, ETCD] {
            for (_, pid) in running.iter().filter(|(n, _)| n == name) {
                if process::stop_pid(name, *pid, STOP_GRACE)? {
                    stopped.push(format!("{name} (pid {pid})"));
                }
            }
        }
        // Anything else a future version might record.
        for (name, pid) in &running {
            if ![CONTROLLER_MANAGER, APISERVER, ETCD].contains(&name.as_str())
                && process::stop_pid(name, *pid, STOP_GRACE)?
            {
                stopped.push(format!("{name} (pid {pid})"));
            }
        }
        remove_if_exists(&state_dir.join("pids"))?;
        Ok(stopped)
    }

    fn log(&self, name: &str) -> PathBuf {
        self.state_dir.join("logs").join(format!("{name}.log"))
    }

    fn pki(&self, file: &str) -> String {
        self.pki_file(file).display().to_string()
    }

    fn pki_file(&self, file: &str) -> PathBuf {
        self.state_dir.join("pki").join(file)
    }

    fn admission_config_file(&self) -> PathBuf {
        self.state_dir
            .join("admission")
            .join("admission-control.json")
    }

    /// Stops the processes in dependency order: the controller manager (a client of the
    /// apiserver), the apiserver (a client of etcd), etcd. Continues past a failure and
    /// reports the first one.
    fn stop_all(&mut self) -> Result<()> {
        let mut first_error = None;
        for (name, slot) in [
            (CONTROLLER_MANAGER, &mut self.controller_manager),
            (APISERVER, &mut self.apiserver),
            (ETCD, &mut self.etcd),
        ] {
            if let Some(mut child) = slot.take()
                && let Err(e) = process::stop_child(name, &mut child, STOP_GRACE)
            {
                first_error.get_or_insert(e);
            }
        }
        if let Err(e) = remove_if_exists(&self.state_dir.join("pids")) {
            first_error.get_or_insert(e);
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Records the running processes for [`ControlPlane::stop_in`]; written to a temporary
    /// name and renamed, so a reader never sees half a file.
    fn write_pids(&self) -> Result<()> {
        let mut text = String::new();
        for (name, pid) in self.pids() {
            text.push_str(&format!("{name} {pid}\n"));
        }
        let path = self.state_dir.join("pids");
        let tmp = self.state_dir.join(".pids.tmp");
        fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
        fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))
    }

    fn write_kubeconfig(&self) -> Result<()> {
        let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
        let text = format!(
            "apiVersion: v1\n\
             kind: Config\n\
             clusters:\n\
             - name: kanon\n  \
               cluster:\n    \
                 server: {server}\n    \
                 certificate-authority-data: {ca}\n\
             users:\n\
             - name: {ADMIN_USER}\n  \
               user:\n    \
                 client-certificate-data: {cert}\n    \
                 client-key-data: {key}\n\
             contexts:\n\
             - name: kanon\n  \
               context:\n    \
                 cluster: kanon\n    \
                 user: {ADMIN_USER}\n\
             current-context: kanon\n",
            server = self.server(),
            ca = b64(&self.ca_pem),
            cert = b64(&self.client_cert_pem),
            key = b64(&self.client_key_pem),
        );
        pki::write_file(&self.kubeconfig(), &text, true)
    }

    /// Writes kube-apiserver's admission configuration: both webhook plugins read their
    /// credentials from a kubeconfig whose one user, `*`, matches every webhook and holds the
    /// webhook client certificate. JSON (which kube-apiserver reads as YAML), so paths need no
    /// quoting rules of their own.
    fn write_admission_config(&self) -> Result<()> {
        let dir = self.state_dir.join("admission");
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let utf8 = |path: PathBuf| {
            path.to_str()
                .map(str::to_owned)
                .with_context(|| format!("{} is not UTF-8", path.display()))
        };
        let webhook_kubeconfig = dir.join("webhook-kubeconfig.json");
        // kube-apiserver looks a webhook's credentials up by its host (and port); `*` is the
        // entry used when nothing more specific matches, i.e. for every webhook here.
        let kubeconfig = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "users": [{
                "name": "*",
                "user": {
                    "client-certificate": utf8(self.webhook_client_cert_file())?,
                    "client-key": utf8(self.webhook_client_key_file())?,
                },
            }],
        });
        let plugin = |name: &str| -> Result<serde_json::Value> {
            Ok(serde_json::json!({
                "name": name,
                "configuration": {
                    "apiVersion": "apiserver.config.k8s.io/v1",
                    "kind": "WebhookAdmissionConfiguration",
                    "kubeConfigFile": utf8(webhook_kubeconfig.clone())?,
                },
            }))
        };
        let admission = serde_json::json!({
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AdmissionConfiguration",
            "plugins": [plugin("ValidatingAdmissionWebhook")?, plugin("MutatingAdmissionWebhook")?],
        });
        pki::write_file(&webhook_kubeconfig, &format!("{kubeconfig:#}\n"), false)?;
        pki::write_file(
            &self.admission_config_file(),
            &format!("{admission:#}\n"),
            false,
        )
    }

    fn tracing_config_file(&self) -> PathBuf {
        self.state_dir.join("tracing.json")
    }

    /// kube-apiserver's `TracingConfiguration` (GA in 1.35): every request sampled, exported
    /// over OTLP/gRPC without TLS to the one endpoint. Nothing without an endpoint.
    fn write_tracing_config(&self) -> Result<()> {
        let Some(endpoint) = &self.tracing_endpoint else {
            return Ok(());
        };
        let config = serde_json::json!({
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "TracingConfiguration",
            "endpoint": endpoint,
            "samplingRatePerMillion": 1_000_000,
        });
        pki::write_file(&self.tracing_config_file(), &format!("{config:#}\n"), false)
    }

    fn etcd_command(&self) -> Command {
        let client = format!("http://127.0.0.1:{}", self.ports.etcd_client);
        let peer = format!("http://127.0.0.1:{}", self.ports.etcd_peer);
        let mut cmd = Command::new(&self.toolchain.etcd);
        cmd.args([
            "--name=kanon".to_owned(),
            format!("--data-dir={}", self.state_dir.join("etcd-data").display()),
            format!("--listen-client-urls={client}"),
            format!("--advertise-client-urls={client}"),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
            format!("--initial-cluster=kanon={peer}"),
            "--initial-cluster-state=new".to_owned(),
            // A test cluster's data is thrown away: fsync would only make every write wait
            // for the disk.
            "--unsafe-no-fsync".to_owned(),
        ]);
        cmd
    }

    fn apiserver_command(&self) -> Command {
        let mut cmd = Command::new(&self.toolchain.kube_apiserver);
        cmd.args([
            "--bind-address=127.0.0.1".to_owned(),
            // Otherwise it picks the address of a host interface (and fails on a machine
            // without a default route).
            "--advertise-address=127.0.0.1".to_owned(),
            format!("--secure-port={}", self.ports.apiserver),
            format!("--etcd-servers=http://127.0.0.1:{}", self.ports.etcd_client),
            format!("--tls-cert-file={}", self.pki("apiserver.crt")),
            format!("--tls-private-key-file={}", self.pki("apiserver.key")),
            format!("--client-ca-file={}", self.pki("ca.crt")),
            format!(
                "--admission-control-config-file={}",
                self.admission_config_file().display()
            ),
            format!(
                "--service-account-key-file={}",
                self.pki("service-account.pub")
            ),
            format!(
                "--service-account-signing-key-file={}",
                self.pki("service-account.key")
            ),
            format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
            format!("--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"),
            "--authorization-mode=RBAC".to_owned(),
            // The default reconciler publishes the apiserver's address in the `kubernetes`
            // Service's endpoints and rejects a loopback address with an error every 10 s.
            "--endpoint-reconciler-type=none".to_owned(),
            // On SIGTERM, drain ordinary requests (answering new ones with 429 and Retry-After,
            // which clients retry), then give the HTTP server 2 s to close. Without it the
            // server waits up to --request-timeout (60 s) for open watches, e.g.
            // kube-controller-manager's, and `stop_apiserver` would always end in SIGKILL.
            "--shutdown-send-retry-after=true".to_owned(),
            // So tests can create privileged Pods for policies to judge.
            "--allow-privileged=true".to_owned(),
            // MutatingAdmissionPolicy (beta in 1.35, off by default), so that kanon's evaluation
            // of MAPs can be compared with the apiserver's own.
            "--feature-gates=MutatingAdmissionPolicy=true".to_owned(),
            "--runtime-config=admissionregistration.k8s.io/v1beta1=true".to_owned(),
        ]);
        if self.tracing_endpoint.is_some() {
            cmd.arg(format!(
                "--tracing-config-file={}",
                self.tracing_config_file().display()
            ));
        }
        if !self.controller_manager_enabled {
            // The plugin rejects Pods in namespaces whose `default` ServiceAccount does not
            // exist yet, and only the controller manager creates those.
            cmd.arg("--disable-admission-plugins=ServiceAccount");
        }
        cmd
    }

    fn controller_manager_command(&self) -> Command {
        let mut cmd = Command::new(&self.toolchain.kube_controller_manager);
        cmd.args([
            format!("--kubeconfig={}", self.kubeconfig().display()),
            format!("--root-ca-file={}", self.pki("ca.crt")),
            format!(
                "--service-account-private-key-file={}",
                self.pki("service-account.key")
            ),
            format!("--cluster-signing-cert-file={}", self.pki("ca.crt")),
            format!("--cluster-signing-key-file={}", self.pki("ca.key")),
            // One instance: no need to wait for (or hold) a lease.
            "--leader-elect=false".to_owned(),
            "--bind-address=127.0.0.1".to_owned(),
            // No HTTPS endpoint: nothing scrapes it, and it would need one more port.
            "--secure-port=0".to_owned(),
            "--controllers=*".to_owned(),
            // Otherwise it creates /usr/libexec/kubernetes/kubelet-plugins/... on the host.
            format!(
                "--flex-volume-plugin-dir={}",
                self.state_dir.join("flexvolume").display()
            ),
        ]);
        cmd
    }

    fn spawn_etcd(&mut self) -> Result<()> {
        let started = Instant::now();
        let child = process::spawn(self.etcd_command(), &self.etcd_log(), self.lifetime)?;
        self.etcd = Some(child);
        self.write_pids()?;
        let log = self.etcd_log();
        let mut last;
        loop {
            exited_early(ETCD, &mut self.etcd, &log)?;
            match http_get_loopback(self.ports.etcd_client, "/health") {
                Ok(body) if body.contains(r#""health":"true""#) => return Ok(()),
                Ok(body) => last = body,
                Err(e) => last = e.to_string(),
            }
            if started.elapsed() > ETCD_TIMEOUT {
                bail!(
                    "etcd did not become healthy within {} s (last answer of /health: {last})\n{}",
                    ETCD_TIMEOUT.as_secs(),
                    quote_log(&log)
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for `/readyz`, asked with kubectl and the admin certificate (the endpoint needs
    /// an authenticated client). kubectl costs about 50 ms a call, so a plain TCP connect
    /// checks first that the port is open at all.
    fn wait_apiserver_ready(&mut self, started: Instant) -> Result<()> {
        let log = self.apiserver_log();
        let mut last = String::from("the port is not open yet");
        loop {
            exited_early(APISERVER, &mut self.apiserver, &log)?;
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.ports.apiserver));
            if TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok() {
                match self.kubectl_quiet(&["get", "--raw", "/readyz", "--request-timeout=5s"]) {
                    Ok(out) if out.status.success() => return Ok(()),
                    Ok(out) => last = output_text(&out),
                    Err(e) => last = format!("{e:#}"),
                }
            }
            if started.elapsed() > APISERVER_TIMEOUT {
                bail!(
                    "kube-apiserver did not become ready within {} s (last answer of /readyz: {last})\n{}",
                    APISERVER_TIMEOUT.as_secs(),
                    quote_log(&log)
                );
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    fn start_controller_manager(&mut self) -> Result<()> {
        let started = Instant::now();
        let child = process::spawn(
            self.controller_manager_command(),
            &self.controller_manager_log(),
            self.lifetime,
        )?;
        self.controller_manager = Some(child);
        self.write_pids()?;
        let log = self.controller_manager_log();
        let mut last;
        loop {
            exited_early(CONTROLLER_MANAGER, &mut self.controller_manager, &log)?;
            match self.kubectl_quiet(&[
                "get",
                "serviceaccount",
                "default",
                "--namespace=default",
                "--output=name",
            ]) {
                Ok(out) if out.status.success() => return Ok(()),
                Ok(out) => last = output_text(&out),
                Err(e) => last = format!("{e:#}"),
            }
            if started.elapsed() > CONTROLLER_MANAGER_TIMEOUT {
                bail!(
                    "kube-controller-manager did not create the `default` ServiceAccount within {} s (kubectl: {last})\n{}",
                    CONTROLLER_MANAGER_TIMEOUT.as_secs(),
                    quote_log(&log)
                );
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    fn kubectl_quiet(&self, args: &[&str]) -> Result<Output> {
        let mut cmd = self.kubectl();
        cmd.args(args).stdin(std::process::Stdio::null());
        cmd.output()
            .with_context(|| format!("running {}", self.toolchain.kubectl.display()))
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if self.detached_off {
            return;
        }
        if let Err(e) = self.stop_all() {
            // Drop cannot return the error; `stop` can.
            eprintln!(
                "kanon-control-plane: stopping the control plane in {}: {e:#}",
                self.state_dir.display()
            );
        }
    }
}

/// Fails if the process in `slot` has exited, quoting its log.
fn exited_early(name: &str, slot: &mut Option<Child>, log: &Path) -> Result<()> {
    let Some(child) = slot else {
        bail!("{name} is not running");
    };
    match child.try_wait() {
        Ok(None) => Ok(()),
        Ok(Some(status)) => {
            *slot = None;
            bail!(
                "{name} exited during start-up ({status})\n{}",
                quote_log(log)
            )
        }
        Err(e) => Err(e).with_context(|| format!("checking on {name}")),
    }
}

fn quote_log(log: &Path) -> String {
    format!(
        "--- last {LOG_TAIL} lines of {} ---\n{}",
        log.display(),
        tail_lines(log, 0, LOG_TAIL)
    )
}

fn output_text(out: &Output) -> String {
    let mut text = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    if text.is_empty() {
        text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    }
    if text.is_empty() {
        text = out.status.to_string();
    }
    text
}

/// A minimal HTTP/1.0 GET to 127.0.0.1 (etcd's plain-HTTP health endpoint; not worth an HTTP
/// client dependency). Returns the whole response, headers included.
fn http_get_loopback(port: u16, path: &str) -> io::Result<String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}

fn remove_if_exists(path: &Path) -> Result<()> {
    let result = match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => Err(e),
    };
    result.with_context(|| format!("removing {}", path.display()))
}

fn describe(running: &[(String, u32)]) -> String {
    running
        .iter()
        .map(|(name, pid)| format!("{name} pid {pid}"))
        .collect::<Vec<_>>()
        .join(", ")
}
