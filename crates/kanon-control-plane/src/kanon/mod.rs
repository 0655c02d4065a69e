//! kanon in a cluster: the kit that the end-to-end suite (`crates/kanon/tests/e2e/`), the
//! cluster benches (`crates/kanon/benches/{cluster,faults,audit}/`) and kanon-cluster's
//! apiserver tests (`crates/kanon-cluster/tests/{webhooks,certificates}.rs`) share.
//!
//! # One style for apiserver-backed tests and benches
//!
//! 1. [`Cluster::start`] builds or reuses the toolchain, starts a [`ControlPlane`] on
//!    127.0.0.1 (with [`Options`] as the caller needs: the audit bench runs without
//!    kube-controller-manager) and installs `crds/` (kanon's CRDs and the OpenReports ones),
//!    waiting until they are established. One cluster serves a whole test binary or bench run;
//!    each scenario or phase works in namespaces of its own ([`Cluster::pod_namespace`] makes
//!    one that Pods can be created in).
//! 2. [`Cluster::kanon`] describes a `kanon serve --kubeconfig ...` against it, on free ports,
//!    with its certificates and log in the cluster's temporary directory; [`Kanon::start`]
//!    runs it and waits for `/readyz`. The binary is the caller's
//!    (`env!("CARGO_BIN_EXE_kanon")`), so tests and benches run the build they were compiled
//!    with (debug for tests, release for benches).
//! 3. Webhook configurations are built from [`Kanon::webhook`] (kanon's URL and CA filled in)
//!    and [`mutating_configuration`]/[`validating_configuration`], applied with
//!    [`Cluster::apply`] and deleted with [`Cluster::delete_webhook_configurations`] before kanon
//!    stops (a `Fail` webhook whose kanon is gone blocks the controllers' writes).
//! 4. Reads and writes through the API go through a kube client from `Cluster::client` on
//!    `runtime()` (feature `client`; `policy_resource` names kanon's policy kinds), kubectl
//!    through [`Cluster::kubectl`] and [`Cluster::apply`].
//!
//! Everything returns [`anyhow::Result`] with what went wrong, kanon's log tail included when
//! it does not become ready; the benches pass the errors up, the e2e suite unwraps them at its
//! edge (`env.rs`) so that a scenario fails with the message. Everything started stops when
//! dropped: kanon by SIGTERM (SIGKILL after 30 s), the control plane as
//! [`ControlPlane`] does; both die with the process that started them (Linux).

mod cluster;
mod process;

use std::path::{Path, PathBuf};
use std::process::Output;

#[cfg(feature = "client")]
use anyhow::Context;
use anyhow::Result;
use serde_json::{Value, json};

pub use cluster::Cluster;
pub use process::{
    Ending, Kanon, ProcessSample, WEBHOOK_TIMEOUT_SECS, cpu_time, metrics_at, process_sample,
};

#[cfg(doc)]
use crate::{ControlPlane, Options};

/// The repository's root (where `crds/`, `fixtures/` and `examples/` are).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub use crate::ports::free_port;

/// stdout and stderr of a finished command, for messages.
pub fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The runtime the suite and the benches drive the API from (two worker threads: the machine
/// also runs the control plane and kanon).
#[cfg(feature = "client")]
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("a runtime")
}

/// The API resource of a kanon policy kind (`ClusterValidatePolicy`, ...).
#[cfg(feature = "client")]
pub fn policy_resource(kind: &str) -> Result<kube::core::ApiResource> {
    let plural = kanon_api::PolicyKind::from_kind(kind)
        .with_context(|| format!("{kind} is not a policy kind"))?
        .plural();
    Ok(kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk(kanon_api::GROUP, kanon_api::VERSION, kind),
        plural,
    ))
}

/// The label of the benches' policies (`"true"`), which they list theirs by.
pub const BENCH_POLICY_LABEL: &str = "bench.kanon.dev/owned";

/// A kanon policy document `kind`/`name` with `spec`, labelled as a bench's
/// ([`BENCH_POLICY_LABEL`]).
#[cfg(feature = "client")]
pub fn bench_policy(kind: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": kanon_api::API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "labels": {BENCH_POLICY_LABEL: "true"}},
        "spec": spec,
    })
}

/// Whether kanon has written the status of `policy` (as read from the apiserver) for its
/// current generation, which it does once a set with that generation is in force; an error
/// when that status is not `Ready=True`.
pub fn policy_in_force(policy: &Value) -> Result<bool> {
    let generation = policy.pointer("/metadata/generation");
    let observed = policy.pointer("/status/observedGeneration");
    if generation.is_none() || generation != observed {
        return Ok(false);
    }
    anyhow::ensure!(
        policy.pointer("/status/conditions/0/status") == Some(&json!("True")),
        "{} {} is not ready: {policy}",
        policy["kind"].as_str().unwrap_or_default(),
        policy["metadata"]["name"].as_str().unwrap_or_default()
    );
    Ok(true)
}

/// A `MutatingWebhookConfiguration` named `name` with `webhooks` (from [`Kanon::webhook`]).
pub fn mutating_configuration(name: &str, webhooks: Vec<Value>) -> Value {
    webhook_configuration("MutatingWebhookConfiguration", name, webhooks)
}

/// A `ValidatingWebhookConfiguration` named `name` with `webhooks` (from [`Kanon::webhook`]).
pub fn validating_configuration(name: &str, webhooks: Vec<Value>) -> Value {
    webhook_configuration("ValidatingWebhookConfiguration", name, webhooks)
}

fn webhook_configuration(kind: &str, name: &str, webhooks: Vec<Value>) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": webhooks,
    })
}

/// The rules of a webhook for Pods on `operations`.
pub fn pod_rules(operations: &[&str]) -> Value {
    json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": operations,
            "resources": ["pods"], "scope": "Namespaced"}])
}

/// A namespace selector that matches the namespaces named `names` only.
pub fn namespaces_named(names: &[&str]) -> Value {
    json!({"matchExpressions": [{
        "key": "kubernetes.io/metadata.name", "operator": "In", "values": names}]})
}
