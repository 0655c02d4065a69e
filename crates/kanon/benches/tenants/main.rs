//! What a tenant who writes policies can do to kanon (issue 34), reproduced: each phase is one
//! finding of that issue, run against the release binary as the chart deploys it — the chart's
//! bounds (`chart.rs`: the flags of `helm template`'s Deployment) and its container's memory
//! limit, held by a memory cgroup (`kanon_control_plane::cgroup`), so that "stays within the
//! chart's limit" means the kernel did not kill it.
//!
//! | phase | finding | what it does |
//! |---|---|---|
//! | `messages` | 1 | a ValidatePolicy whose message doubles a list 40 times (refused when written?), then one whose message asks for 4,000 copies of a 200 KB Pod, with 16 such Pods reviewed at once (`messages.rs`) |
//! | `cel` | 2 | a tenant's 40 CEL rules × 14 validations of ~0.6M units flooded by 8 clients while another namespace's ConfigMaps are reviewed, each on a new connection: their p50/p99 idle and under the flood, reviews lost (`cel.rs`, standalone `kanon serve --policies`) |
//! | `cel-through` | 2 | the same policy and flood through kube-apiserver, kanon as the chart runs it; another namespace's ConfigMap dry runs measured (`through.rs`) |
//! | `lookups` | 3 | a `k8s` reference by label selector in a namespace of 100 ConfigMaps of 900 KiB, 16 reviews at once, the selector matching none and all of them (`lookups.rs`) |
//! | `audit` | 4 | the audit of 300 ConfigMaps of 900 KiB (`audit.rs`) |
//! | `jsonpath` | 6 | `$..*` over a 2.5 MB object nested 120 deep, 4 reviews at once (`jsonpath.rs`) |
//!
//! Findings 5 (reports too big to store) and 7 (exceptions' budgets, metric labels, empty
//! reports) are correctness, proven by tests: e2e `audit_reports::`, the engine's
//! `tests/exceptions.rs`, kanon-webhook's `metrics::tests`.
//!
//! Run: `cargo bench -p kanon --bench tenants` (about 7 minutes; root, for the cgroups).
//! Environment: `KANON_BIN` (the kanon measured; default the release build beside this bench),
//! `KANON_TENANTS_PHASES` (comma-separated phase names; default all), `KANON_TENANTS_SECONDS`
//! (each `cel` and `cel-through` phase's length; default 10).

mod audit;
mod cel;
mod chart;
mod jsonpath;
mod lookups;
mod messages;
mod through;
#[path = "../common/tls.rs"]
mod tls;
mod world;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use kanon_control_plane::kanon::{self as kit, Cluster, repo};
use kanon_control_plane::{Options, Toolchain};
use serde_json::json;

use crate::chart::Chart;
use crate::world::Run;

const PHASES: &[&str] = &[
    "messages",
    "cel",
    "cel-through",
    "lookups",
    "audit",
    "jsonpath",
];

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tenants bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    // `cargo bench` passes `--bench`; nothing else is taken from the command line.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let phases: Vec<String> = std::env::var("KANON_TENANTS_PHASES")
        .map(|p| p.split(',').map(|s| s.trim().to_string()).collect())
        .unwrap_or_else(|_| PHASES.iter().map(|s| s.to_string()).collect());
    let binary = cel::default_bin();
    let binary_text = binary.display().to_string();
    let toolchain = Toolchain::ensure(&mut std::io::stderr())?;
    let chart = Chart::render(&toolchain.helm, &repo().join("charts/kanon"))?;
    println!(
        "kanon {binary_text}; the chart's limit {} MiB; its bounds: {}\n",
        chart.memory_limit >> 20,
        chart.flags.join(" ")
    );
    println!("| phase | finding | result |\n|---|---|---|");
    let run_as = |name: &str| Run {
        binary: binary_text.clone(),
        name: name.to_string(),
        settings: chart.admission_flags(),
        memory_limit: chart.memory_limit,
    };
    let needs_cluster = phases.iter().any(|p| p != "cel");
    let cluster = if needs_cluster {
        Some(Cluster::start("tenants", Options::default())?)
    } else {
        None
    };
    let cluster = || cluster.as_ref().context("the phase needs the cluster");
    for phase in &phases {
        match phase.as_str() {
            "messages" => {
                let figures = messages::tenant_messages(cluster()?, &run_as("messages"), 16)?;
                println!(
                    "| messages | 1 | list-doubling message when written: {}; 16 Pods whose message asks for 800 MB: {}; first denial: {} |",
                    figures.refused_at_write,
                    figures.flood.line(),
                    excerpt(figures.flood.denial.as_deref())
                );
            }
            "cel" => {
                let settings = cel::Settings {
                    bin: binary.clone(),
                    extra_args: chart
                        .admission_flags()
                        .into_iter()
                        .filter(|f| !f.starts_with("--object-") && !f.starts_with("--http-"))
                        .collect(),
                    phase: cel_seconds(),
                };
                let figures = kit::runtime()?.block_on(cel::tenant_cel(&settings))?;
                println!(
                    "| cel | 2 | {} ({}) |",
                    figures.row(),
                    if figures.within_target() {
                        "within 2× idle p99, none lost"
                    } else {
                        "OVER the target: 2× idle p99, none lost"
                    }
                );
            }
            "cel-through" => {
                let figures =
                    through::tenant_cel_through(cluster()?, &run_as("cel-through"), cel_seconds())?;
                println!(
                    "| cel-through | 2 | {} ({}) |",
                    figures.row(),
                    if figures.within_target() {
                        "within 2× idle p99, none lost"
                    } else {
                        "OVER the target: 2× idle p99, none lost"
                    }
                );
            }
            "lookups" => {
                for (case, labels) in [
                    ("the selector matches none", json!({"app": "absent"})),
                    ("the selector matches all 100", json!({"fill": "yes"})),
                ] {
                    let scenario = lookups::LookupScenario {
                        namespace: "tenant-lookups".to_string(),
                        config_maps: 100,
                        config_map_bytes: 900 << 10,
                        match_labels: labels,
                        reviews: 16,
                    };
                    let figures =
                        lookups::label_selector_lookups(cluster()?, &run_as("lookups"), &scenario)?;
                    println!(
                        "| lookups | 3 | {case}: {}; first denial: {} |",
                        figures.line(),
                        excerpt(figures.denial.as_deref())
                    );
                }
            }
            "audit" => {
                let cluster = cluster()?;
                let runtime = kit::runtime()?;
                let client = runtime.block_on(cluster.client())?;
                let world = audit::World {
                    cluster,
                    client: &client,
                    runtime: &runtime,
                };
                let auditor = audit::Auditor {
                    binary: &binary_text,
                    limit: chart.memory_limit,
                    namespace: "kanon-system",
                    args: &[],
                    within: Duration::from_secs(600),
                };
                let figures = audit::audit_of_large_objects(
                    &world,
                    &auditor,
                    &audit::LargeObjects::default(),
                )?;
                println!("| audit | 4 | 300 ConfigMaps of 900 KiB: {figures} |");
            }
            "jsonpath" => {
                let figures = jsonpath::tenant_jsonpath(cluster()?, &run_as("jsonpath"), 4)?;
                println!(
                    "| jsonpath | 6 | 4 reviews of a 2.5 MB object nested 120 deep under `$..*`: {}; first denial: {} |",
                    figures.line(),
                    excerpt(figures.denial.as_deref())
                );
            }
            other => anyhow::bail!("no phase {other}; the phases are {}", PHASES.join(", ")),
        }
    }
    Ok(())
}

/// Each `cel` phase's length: `KANON_TENANTS_SECONDS`, else 10 s.
fn cel_seconds() -> Duration {
    Duration::from_secs(
        std::env::var("KANON_TENANTS_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(10),
    )
}

/// The start of a message, on one line, for a table cell.
fn excerpt(message: Option<&str>) -> String {
    let message = message.unwrap_or("none").replace(['\n', '|'], " ");
    let cut: String = message.chars().take(200).collect();
    if cut.len() < message.len() {
        format!("{cut}…")
    } else {
        cut
    }
}
