//! Kubernetes Events under a flood of denials (issue 38 §2): how many Events, and how many
//! bytes of them, 10,000 denials leave in the apiserver, and what writing them costs a review.
//!
//! Starts etcd, kube-apiserver and kube-controller-manager 1.35 on 127.0.0.1
//! (`kanon-control-plane`), installs `crds/`, runs `kanon serve --kubeconfig ... --no-audit
//! --events=deny` (this package's release binary, every Events setting at its default: a series
//! update at most every 30 s, 5 writes per second in bursts of 25, each policy 10 new Events at
//! once then one every 10 s), two ClusterValidatePolicies that deny every Pod without a `team`
//! label, one per bench namespace, and kanon's validating webhook for Pod CREATEs in those two
//! namespaces (`failurePolicy: Fail`). Then, with `CLIENTS` clients creating Pods in a closed
//! loop through the apiserver, three phases of `DENIALS` denied creates each:
//!
//! 1. **same Pod**: the same Pod (`web`) again and again, as a controller retrying;
//! 2. **distinct Pods**: `web-0`, `web-1`, ... (the worst case for aggregation: every denial is
//!    of another object);
//! 3. **no Events**: phase 2 again with kanon restarted without `--events`, for the review
//!    latency it is compared with.
//!
//! After phases 1 and 2 the bench waits until the counts of the Events on the phase's policy
//! (`series.count`, else 1) add up to its denials (the last series update comes within 30 s),
//! then reads them back: how many, their bytes (JSON as the apiserver serves them, managed
//! fields included), and kanon's `kanon_events_*` counters. Prints a Markdown table.
//!
//! Run: `cargo bench -p kanon --bench events` (about 3 minutes). Environment:
//! `KANON_EVENTS_DENIALS` (default 10000), `KANON_EVENTS_CLIENTS` (default 8).

#[path = "../common/percentile.rs"]
mod percentile;

use percentile::percentile;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kanon_control_plane::Options;
use kanon_control_plane::kanon::{
    self as kit, Cluster, Kanon, bench_policy, namespaces_named, pod_rules, policy_resource,
    validating_configuration,
};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const SAME_NS: &str = "bench-events-same";
const DISTINCT_NS: &str = "bench-events-distinct";
const WEBHOOKS: &str = "kanon-bench-events";

fn policy_name(namespace: &str) -> String {
    format!("{namespace}-team")
}

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

fn pod(namespace: &str, name: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.0"}]},
    }))?)
}

/// What one phase of creates came to.
struct Creates {
    denied: usize,
    other: Vec<String>,
    took: Duration,
    latencies: Vec<Duration>,
}

/// `total` creates in `namespace` by `clients` clients in a closed loop, the `i`-th named
/// `name(i)`; each must be denied by the policy.
fn creates(
    runtime: &tokio::runtime::Runtime,
    client: &kube::Client,
    namespace: &str,
    total: usize,
    clients: usize,
    name: impl Fn(usize) -> String + Send + Sync + 'static,
) -> Creates {
    let next = Arc::new(AtomicUsize::new(0));
    let name = Arc::new(name);
    let started = Instant::now();
    let results = runtime.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..clients {
            let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
            let (next, name, namespace) = (next.clone(), name.clone(), namespace.to_string());
            tasks.push(tokio::spawn(async move {
                let mut seen = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        return seen;
                    }
                    let Ok(pod) = pod(&namespace, &name(i)) else {
                        seen.push((Duration::ZERO, Err("no Pod".to_string())));
                        continue;
                    };
                    let sent = Instant::now();
                    let result = api.create(&PostParams::default(), &pod).await;
                    let outcome = match result {
                        Ok(_) => Err("admitted".to_string()),
                        Err(kube::Error::Api(status))
                            if status.message.contains("a team label is needed") =>
                        {
                            Ok(())
                        }
                        Err(error) => Err(error.to_string()),
                    };
                    seen.push((sent.elapsed(), outcome));
                }
            }));
        }
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await.unwrap_or_default());
        }
        all
    });
    let took = started.elapsed();
    let mut out = Creates {
        denied: 0,
        other: Vec::new(),
        took,
        latencies: Vec::new(),
    };
    for (latency, outcome) in results {
        out.latencies.push(latency);
        match outcome {
            Ok(()) => out.denied += 1,
            Err(error) => out.other.push(error),
        }
    }
    out.latencies.sort();
    out
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// kanon's Events on `policy` (all of them in `default`: the policies are cluster-scoped).
fn policy_events(
    runtime: &tokio::runtime::Runtime,
    client: &kube::Client,
    policy: &str,
) -> Result<Vec<Event>> {
    let api: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = runtime.block_on(api.list(&ListParams::default()))?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("kanon.dev/kanon"))
        .filter(|e| {
            e.regarding
                .as_ref()
                .and_then(|r| r.name.as_deref())
                .is_some_and(|name| name == policy)
        })
        .collect())
}

fn counted(events: &[Event]) -> u64 {
    events
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count.max(1) as u64))
        .sum()
}

/// The Events on `policy` once their counts add up to `denials` (or have not moved for 45 s,
/// 120 s at most), and how long after the last denial that was.
fn settled(
    runtime: &tokio::runtime::Runtime,
    client: &kube::Client,
    policy: &str,
    denials: u64,
) -> Result<(Vec<Event>, Duration)> {
    let started = Instant::now();
    let mut last = (u64::MAX, Instant::now());
    loop {
        let events = policy_events(runtime, client, policy)?;
        let count = counted(&events);
        if count >= denials
            || last.1.elapsed() > Duration::from_secs(45)
            || started.elapsed() > Duration::from_secs(120)
        {
            return Ok((events, started.elapsed()));
        }
        if count != last.0 {
            last = (count, Instant::now());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// kanon's `kanon_events_*` samples, by series.
fn event_counters(kanon: &Kanon) -> BTreeMap<String, f64> {
    kanon
        .metrics()
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("kanon_events_"))
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(series, value)| Some((series.to_string(), value.parse().ok()?)))
        .collect()
}

/// What the counters gained from `before` to `after`, in words.
fn gained(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> String {
    after
        .iter()
        .filter_map(|(series, value)| {
            let gain = value - before.get(series).copied().unwrap_or(0.0);
            let name = series
                .trim_start_matches("kanon_events_")
                .replace("_total", "");
            (gain > 0.0).then(|| format!("{name} +{gain}"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

struct Row {
    phase: &'static str,
    creates: Creates,
    events: Option<(Vec<Event>, Duration)>,
    metrics: String,
}

fn main() -> Result<()> {
    let denials = setting("KANON_EVENTS_DENIALS", 10_000);
    let clients = setting("KANON_EVENTS_CLIENTS", 8);
    let began = Instant::now();
    let load_before = load_average();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cluster = Cluster::start("bench", Options::default())?;
    let runtime = kit::runtime()?;
    let client = runtime.block_on(cluster.client())?;
    for namespace in [SAME_NS, DISTINCT_NS] {
        cluster.pod_namespace(namespace)?;
    }
    let mut kanon = cluster.kanon(env!("CARGO_BIN_EXE_kanon"), "kanon")?;
    kanon.args = ["--no-audit", "--events=deny"]
        .iter()
        .map(|a| a.to_string())
        .collect();
    kanon.start()?;
    let result = run(&cluster, &runtime, &client, &mut kanon, denials, clients);
    let _ = cluster.delete_webhook_configurations(WEBHOOKS);
    kanon.stop_reporting("bench");
    let rows = result?;

    println!();
    println!(
        "commit {}, {} denials per phase, {clients} clients, {:.0} s in all, load average {load_before} before, {} after",
        git_head(),
        denials,
        began.elapsed().as_secs_f64(),
        load_average()
    );
    println!();
    println!(
        "| phase | denied | creates/s | create p50 / p99 | Events | bytes of Events | their counts add up to | settled after the last denial | kanon's `kanon_events_*` counters |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for row in &rows {
        let c = &row.creates;
        let (events, bytes, count, after) = match &row.events {
            Some((events, after)) => {
                let bytes: usize = events
                    .iter()
                    .map(|e| serde_json::to_vec(e).map_or(0, |v| v.len()))
                    .sum();
                (
                    events.len().to_string(),
                    format!("{bytes} ({:.1} KiB)", bytes as f64 / 1024.0),
                    counted(events).to_string(),
                    format!("{:.0} s", after.as_secs_f64()),
                )
            }
            None => ("—".into(), "—".into(), "—".into(), "—".into()),
        };
        println!(
            "| {} | {} of {} | {:.0} | {} / {} | {events} | {bytes} | {count} | {after} | {} |",
            row.phase,
            c.denied,
            c.denied + c.other.len(),
            (c.denied + c.other.len()) as f64 / c.took.as_secs_f64(),
            ms(percentile(&c.latencies, 0.5)),
            ms(percentile(&c.latencies, 0.99)),
            row.metrics,
        );
    }
    for row in &rows {
        if !row.creates.other.is_empty() {
            println!(
                "\n{}: {} creates not denied by the policy, e.g. {:?}",
                row.phase,
                row.creates.other.len(),
                &row.creates.other[..row.creates.other.len().min(3)]
            );
        }
        if let Some((events, _)) = &row.events {
            let mut notes: Vec<String> = events
                .iter()
                .map(|e| {
                    format!(
                        "{} × {}",
                        e.series.as_ref().map_or(1, |s| s.count),
                        e.note.as_deref().unwrap_or_default()
                    )
                })
                .collect();
            notes.sort();
            println!("\n{} Events:", row.phase);
            for note in notes {
                println!("  {note}");
            }
        }
    }
    Ok(())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn git_head() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(kit::repo())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn run(
    cluster: &Cluster,
    runtime: &tokio::runtime::Runtime,
    client: &kube::Client,
    kanon: &mut Kanon,
    denials: usize,
    clients: usize,
) -> Result<Vec<Row>> {
    let resource = policy_resource("ClusterValidatePolicy")?;
    let policies: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    for namespace in [SAME_NS, DISTINCT_NS] {
        let name = policy_name(namespace);
        let document = bench_policy(
            "ClusterValidatePolicy",
            &name,
            json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": namespace}],
                "validateRules": [{"cel": {"validations": [{
                    "expression": "has(object.metadata.labels) && 'team' in object.metadata.labels",
                    "message": "a team label is needed",
                }]}}],
            }),
        );
        runtime.block_on(policies.patch(
            &name,
            &PatchParams::apply("kanon-bench").force(),
            &Patch::Apply(&document),
        ))?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut ready = 0;
        for namespace in [SAME_NS, DISTINCT_NS] {
            let policy = runtime.block_on(policies.get(&policy_name(namespace)))?;
            if kit::policy_in_force(&serde_json::to_value(policy)?)? {
                ready += 1;
            }
        }
        if ready == 2 {
            break;
        }
        ensure!(Instant::now() < deadline, "the policies are not in force");
        std::thread::sleep(Duration::from_millis(100));
    }
    let webhook = kanon.webhook(
        "validate.events.bench.kanon.dev",
        "/validate",
        pod_rules(&["CREATE"]),
        namespaces_named(&[SAME_NS, DISTINCT_NS]),
    )?;
    cluster.apply(&validating_configuration(WEBHOOKS, vec![webhook]))?;
    // In force once a dry run is refused (a dry run writes no Event).
    let deadline = Instant::now() + Duration::from_secs(30);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    loop {
        let api: Api<Pod> = Api::namespaced(client.clone(), DISTINCT_NS);
        if runtime
            .block_on(api.create(&dry_run, &pod(DISTINCT_NS, "probe")?))
            .is_err_and(|e| e.to_string().contains("a team label is needed"))
        {
            break;
        }
        ensure!(Instant::now() < deadline, "the webhook is not called");
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("bench: policies and webhook in force");

    let mut rows = Vec::new();
    let before = event_counters(kanon);
    let same = creates(runtime, client, SAME_NS, denials, clients, |_| {
        "web".to_string()
    });
    eprintln!("bench: same Pod, {} denied", same.denied);
    let events = settled(runtime, client, &policy_name(SAME_NS), same.denied as u64)?;
    rows.push(Row {
        phase: "1. same Pod",
        creates: same,
        events: Some(events),
        metrics: gained(&before, &event_counters(kanon)),
    });

    let before = event_counters(kanon);
    let distinct = creates(runtime, client, DISTINCT_NS, denials, clients, |i| {
        format!("web-{i}")
    });
    eprintln!("bench: distinct Pods, {} denied", distinct.denied);
    let events = settled(
        runtime,
        client,
        &policy_name(DISTINCT_NS),
        distinct.denied as u64,
    )?;
    rows.push(Row {
        phase: "2. distinct Pods",
        creates: distinct,
        events: Some(events),
        metrics: gained(&before, &event_counters(kanon)),
    });

    kanon.stop();
    kanon.args.retain(|a| a != "--events=deny");
    kanon.start().context("kanon without --events")?;
    let baseline = creates(runtime, client, DISTINCT_NS, denials, clients, |i| {
        format!("web-{i}")
    });
    eprintln!("bench: no Events, {} denied", baseline.denied);
    rows.push(Row {
        phase: "3. distinct Pods, no `--events`",
        creates: baseline,
        events: None,
        metrics: String::new(),
    });
    Ok(rows)
}
