//! A real Kubernetes control plane on 127.0.0.1 for kanon's end-to-end tests.
//!
//! [`Toolchain::ensure`] provides kube-apiserver and kube-controller-manager v1.35.8 and etcd
//! v3.6.16 (compiled from their Go modules once per machine, then cached) and kubectl v1.35.2
//! and helm v4.1.4 (downloaded once). [`ControlPlane::start`] runs etcd, kube-apiserver and, by
//! default, kube-controller-manager as child processes on free loopback ports with freshly
//! generated certificates, in 4–6 s, and stops them again when dropped.
//!
//! kube-apiserver calls admission webhooks with a client certificate signed by the control
//! plane's CA ([`ControlPlane::ca_cert_file`]), for webhooks that require one.
//!
//! There is no kubelet and no scheduler: objects are stored and go through admission (which is
//! what a webhook needs), controllers create their dependents (Deployments get ReplicaSets and
//! Pods, namespaces get their `default` ServiceAccount, deleted namespaces are emptied), but no
//! Pod ever runs.
//!
//! ```no_run
//! use kanon_control_plane::{ControlPlane, Options, Toolchain};
//!
//! # fn main() -> anyhow::Result<()> {
//! // Builds on first use (5–15 min), then returns at once.
//! let toolchain = Toolchain::ensure(&mut std::io::stderr())?;
//! let control_plane = ControlPlane::start(&toolchain, Options::default())?;
//! let out = control_plane.kubectl().args(["get", "namespaces"]).output()?;
//! assert!(out.status.success());
//! // Any Kubernetes client can use `control_plane.kubeconfig()`.
//! control_plane.stop()?; // or just drop it
//! # Ok(())
//! # }
//! ```
//!
//! Children are tied to the process that starts them: on Linux the kernel kills them when it
//! dies, even by SIGKILL, so an aborted test run leaves nothing running. Unix only.
//!
//! Interactive use: `cargo xtask cluster build | up | down | env`. Environment: `KANON_CACHE_DIR`
//! (cache root), `KANON_KEEP_GO_CACHE` (keep Go's caches after a build), `KANON_KEEP_STATE`
//! (keep temporary state directories, with their logs).
//!
//! [`Jaeger`] runs Jaeger v2 (built once by [`ensure_jaeger`]) as the trace backend that a
//! control plane started with [`Options::tracing_endpoint`] and kanon export to.
//!
//! [`cgroup::MemoryCgroup`] runs a process under a memory limit, as a Pod's container would
//! (`Kanon::with_memory_limit`).
//!
//! [`kanon`] is the kit for kanon in such a cluster (the CRDs installed, `kanon serve` as a
//! process, its webhook configurations): the one way the end-to-end suite and the cluster
//! benches get a control plane and a kanon.

pub mod cgroup;
mod control_plane;
mod jaeger;
pub mod kanon;
mod logs;
mod pki;
mod ports;
mod process;
mod toolchain;

pub use control_plane::{ControlPlane, KEEP_STATE_ENV, Options};
pub use jaeger::Jaeger;
pub use pki::WEBHOOK_CLIENT_NAME;
pub use toolchain::{
    ETCD_VERSION, JAEGER_VERSION, KUBECTL_LAYER_PACKAGE, KUBECTL_LAYER_VERSION,
    KUBERNETES_STAGING_VERSION, KUBERNETES_VERSION, Toolchain, cache_dir, ensure_jaeger, go_module,
};
