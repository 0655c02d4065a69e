//! A control plane with kanon's CRDs installed, kubectl against it, and a directory for the
//! kanon processes that run against it.

use std::io::Write;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};

use super::{Kanon, output_text, repo};
use crate::{ControlPlane, Options, Toolchain};

/// A running control plane with `crds/` installed.
///
/// Dropping it stops the control plane and then deletes the directory of its kanon processes;
/// stop those (and delete their webhook configurations) first, which a caller's `Drop` does by
/// holding the `Cluster` as its last field.
#[derive(Debug)]
pub struct Cluster {
    control_plane: ControlPlane,
    /// `--request-timeout` of every kubectl call, when set.
    request_timeout: Option<Duration>,
    /// kanon's certificates and logs. After `control_plane`: deleted once it has stopped.
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Builds or reuses the toolchain (see [`Toolchain::ensure`]), starts a control plane with
    /// `options`, installs `crds/` (server-side, recursively: with the OpenReports CRDs of
    /// `crds/openreports/`) and waits until they are established. Says on stderr, after
    /// `label: `, how long the control plane took.
    pub fn start(label: &str, options: Options) -> Result<Cluster> {
        let toolchain =
            Toolchain::ensure(&mut std::io::stderr()).context("the control plane's binaries")?;
        let started = Instant::now();
        let controller_manager = options.controller_manager;
        let control_plane = ControlPlane::start(&toolchain, options)?;
        eprintln!(
            "{label}: control plane ({}) up in {:.1} s at {}",
            if controller_manager {
                "etcd, kube-apiserver, kube-controller-manager"
            } else {
                "etcd, kube-apiserver"
            },
            started.elapsed().as_secs_f64(),
            control_plane.server()
        );
        let cluster = Cluster {
            control_plane,
            request_timeout: None,
            dir: tempfile::tempdir().context("a temporary directory")?,
        };
        let crds = repo().join("crds").display().to_string();
        cluster.kubectl(&["apply", "--server-side", "--recursive", "-f", &crds])?;
        cluster.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "--all",
        ])?;
        Ok(cluster)
    }

    /// Every later kubectl call gives up after `timeout` (`--request-timeout`): a bench that
    /// stops the apiserver must not hang on it.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Cluster {
        self.request_timeout = Some(timeout);
        self
    }

    /// The control plane.
    pub fn control_plane(&self) -> &ControlPlane {
        &self.control_plane
    }

    /// The control plane, to stop and start its processes.
    pub fn control_plane_mut(&mut self) -> &mut ControlPlane {
        &mut self.control_plane
    }

    /// The directory of kanon's files (deleted with the cluster).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A kanon (not started) against this cluster, running `binary`, with its files under
    /// the cluster's directory, named `name`.
    pub fn kanon(&self, binary: &str, name: &str) -> Result<Kanon> {
        Kanon::new(
            Path::new(binary),
            &self.control_plane.kubeconfig(),
            self.dir(),
            name,
        )
    }

    /// kubectl with `args` (and `input` on its standard input), whatever its exit status.
    pub fn kubectl_output(&self, args: &[&str], input: Option<&str>) -> Result<Output> {
        let mut kubectl = self.control_plane.kubectl();
        if let Some(timeout) = self.request_timeout {
            kubectl.arg(format!("--request-timeout={}s", timeout.as_secs()));
        }
        kubectl.args(args);
        let Some(input) = input else {
            return kubectl.output().context("kubectl runs");
        };
        let mut child = kubectl
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("kubectl runs")?;
        child
            .stdin
            .take()
            .context("kubectl's stdin")?
            .write_all(input.as_bytes())
            .context("writing to kubectl")?;
        child.wait_with_output().context("kubectl ends")
    }

    /// kubectl with `args`; an error, with its output, when it fails.
    pub fn kubectl(&self, args: &[&str]) -> Result<Output> {
        let out = self.kubectl_output(args, None)?;
        ensure!(
            out.status.success(),
            "kubectl {args:?}: {}",
            output_text(&out)
        );
        Ok(out)
    }

    /// `kubectl apply -f -` of `document` (JSON or YAML; a `List` applies its items).
    pub fn apply(&self, document: &Value) -> Result<()> {
        let out = self.kubectl_output(&["apply", "-f", "-"], Some(&document.to_string()))?;
        ensure!(
            out.status.success(),
            "apply {document}: {}",
            output_text(&out)
        );
        Ok(())
    }

    /// The admin's client configuration of the cluster (to change before building a client:
    /// a timeout, an impersonated user).
    #[cfg(feature = "client")]
    pub async fn kube_config(&self) -> Result<kube::Config> {
        let kubeconfig = kube::config::Kubeconfig::read_from(self.control_plane.kubeconfig())
            .context("the control plane's kubeconfig")?;
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .context("a client configuration")
    }

    /// A client of the cluster as its admin. Needs a rustls crypto provider installed
    /// (`rustls::crypto::ring::default_provider().install_default()`).
    #[cfg(feature = "client")]
    pub async fn client(&self) -> Result<kube::Client> {
        kube::Client::try_from(self.kube_config().await?).context("a client")
    }

    /// Creates namespace `name` and waits, 60 s at most, for its `default` ServiceAccount,
    /// without which no Pod is admitted (kube-controller-manager creates it).
    pub fn pod_namespace(&self, name: &str) -> Result<()> {
        self.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out =
                self.kubectl_output(&["get", "serviceaccount", "default", "-n", name], None)?;
            if out.status.success() {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "no default ServiceAccount in {name}: {}",
                output_text(&out)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Deletes the mutating and the validating webhook configuration named `name`, if they
    /// exist.
    pub fn delete_webhook_configurations(&self, name: &str) -> Result<()> {
        self.kubectl(&[
            "delete",
            "--ignore-not-found",
            &format!("mutatingwebhookconfiguration/{name}"),
            &format!("validatingwebhookconfiguration/{name}"),
        ])?;
        Ok(())
    }
}
