//! kanon in a real cluster: what it costs a Pod create, how fast a policy change takes effect,
//! what a lookup costs a review, cache hit and miss, and kanon's CEL rules against the same rules
//! as ValidatingAdmissionPolicies.
//!
//! Starts etcd, kube-apiserver and kube-controller-manager 1.35 on 127.0.0.1
//! (`kanon-control-plane`), installs `crds/`, runs `kanon serve --kubeconfig ...` (this
//! package's release binary) and then measures:
//!
//! 1. **Pod creates through the apiserver at a fixed rate**, with no webhook registered and with
//!    kanon's mutating and validating webhooks registered (Pods only, in the bench namespace,
//!    `failurePolicy: Fail`, `timeoutSeconds: 5`) while 100 ClusterOverridePolicies (10 of them
//!    select the Pods, each adds a label with a `labels` template) and 2 ClusterValidatePolicies
//!    (a `condition` each) are in force. Creates are started on a fixed schedule (they do not
//!    wait for each other) and each latency is measured from its scheduled start; the two
//!    configurations alternate (without, with, without, with, ...) so that noise hits both. Every
//!    Pod created with kanon must come back with the 10 labels.
//! 2. **Policy change → effect**: one of the 10 policies gets a new label value (server-side
//!    apply), then server-side dry-run creates are repeated until a Pod comes back with it; and
//!    the same again, polling kanon's `/mutate` directly every millisecond (finer resolution).
//! 3. **Review latency with lookups**: AdmissionReviews POSTed straight to kanon's `/mutate`
//!    over HTTPS (HTTP/1.1 keep-alive, one request at a time) for Pods whose policy takes a
//!    label from a `k8s` reference (a ConfigMap by name), from an `http` reference (a small
//!    HTTP service in this process), or from a constant (no lookup). Each is sent to a kanon
//!    with the default caches (`--object-cache-ttl-ms 5000`, `--http-cache-ttl-ms 10000`: hits
//!    after the first) and to a second kanon with both at 0 (every lookup a miss).
//! 4. **CEL through the apiserver** (issue 19 §5): 10 CEL rules that all hold for the bench Pod
//!    (memory and CPU limits, memory at most 1Gi, image registry and tag, a `team` label, no
//!    host namespaces, runAsNonRoot, no privilege escalation, no hostPath), each written once as
//!    a ValidatingAdmissionPolicy with its binding (the apiserver's own CEL) and once as a kanon
//!    ClusterValidatePolicy with `cel.validations` behind kanon's validating webhook; Pod CREATEs
//!    in a namespace of their own. Three configurations alternate (no policy, the 10 VAPs,
//!    kanon's webhook with its 10 policies; the order rotated every round): in each, N clients
//!    (`KANON_BENCH_CEL_CLIENTS`, default 8) create Pods in a closed loop, each the next as soon
//!    as the previous is answered, which gives the throughput at saturation (creates/s) and the
//!    latency at that load. Before and after each round a Pod violating each rule alone is
//!    refused by that rule (or, without policies, admitted); every create must be admitted and
//!    stored, and kanon must have evaluated each of its policies once per Pod.
//!
//! Run: `cargo bench -p kanon --bench cluster` (about 7.5 minutes; results in BENCHMARKS.md), or
//! `cargo bench -p kanon --bench cluster -- --quick` (or `KANON_BENCH_QUICK=1`) for a short run.
//! `KANON_BENCH_DUMP=FILE` also writes every sample (milliseconds) to FILE as JSON;
//! `KANON_BENCH_CEL_CLIENTS=N` sets part 4's concurrent clients (default 8);
//! `KANON_BENCH_APISERVER_PROFILE=DIR` writes kube-apiserver's CPU profile of each part-4 round
//! to DIR.
//! The first run of the control plane's toolchain builds it (see the README).
//!
//! Layout: this file has the settings, the order of the parts and the report; `world.rs` the
//! cluster (the kit of `kanon_control_plane::kanon`) with the bench's policies, Pods and
//! webhooks; `stats.rs` the statistics; one file per part: `pod_creates.rs`,
//! `policy_changes.rs`, `lookups.rs` (with `tier_service.rs`, the `http` references' service),
//! `cel.rs`.

mod cel;
mod lookups;
mod pod_creates;
mod policy_changes;
mod stats;
mod tier_service;
mod world;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use kanon_control_plane::kanon::Kanon;
use serde_json::json;

use crate::cel::{CPU_PROCESSES, CelConfig, CelRound, cel_through_apiserver};
use crate::lookups::{LOOKUP_CASES, lookups, metric};
use crate::pod_creates::{Round, pod_creates};
use crate::policy_changes::policy_changes;
use crate::stats::{median, ms, signed_ms, stats};
use crate::world::{World, cop, cvps, first_value};

/// The namespace of the Pods created through the apiserver.
const PODS_NS: &str = "bench-pods";

/// The name of kanon's webhook configurations for the bench Pods.
const WEBHOOKS: &str = "kanon-bench";

/// Policies that select the bench Pods (each adds one label), out of [`COPS`].
const MATCHING: usize = 10;

/// ClusterOverridePolicies installed.
const COPS: usize = 100;

/// Part 4's concurrent clients, unless `KANON_BENCH_CEL_CLIENTS` says otherwise.
const CEL_CLIENTS: usize = 8;

/// How long and how hard each part runs.
struct Settings {
    /// Pod creates per second.
    rate: u32,
    /// Seconds of creates before each measured round (not counted).
    warmup_secs: u32,
    /// Seconds of measured creates per round.
    round_secs: u32,
    /// Pairs of rounds (without kanon, with kanon).
    pairs: usize,
    /// Policy changes measured.
    change_samples: usize,
    /// Rounds over the review cases, and reviews per case and round.
    review_rounds: usize,
    reviews_per_round: usize,
    /// Part 4: concurrent clients (closed loop), seconds of warm-up and measured seconds per
    /// round, rounds (each over the three configurations).
    cel_clients: usize,
    cel_warmup_secs: u32,
    cel_round_secs: u32,
    cel_rounds: usize,
}

impl Settings {
    fn from_args() -> Settings {
        let quick = std::env::args().any(|a| a == "--quick")
            || std::env::var("KANON_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let cel_clients = std::env::var("KANON_BENCH_CEL_CLIENTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(CEL_CLIENTS);
        if quick {
            Settings {
                rate: 50,
                warmup_secs: 1,
                round_secs: 5,
                pairs: 1,
                change_samples: 5,
                review_rounds: 2,
                reviews_per_round: 100,
                cel_clients,
                cel_warmup_secs: 1,
                cel_round_secs: 3,
                cel_rounds: 1,
            }
        } else {
            Settings {
                rate: 50,
                warmup_secs: 2,
                round_secs: 20,
                pairs: 2,
                change_samples: 20,
                review_rounds: 4,
                reviews_per_round: 500,
                cel_clients,
                cel_warmup_secs: 2,
                cel_round_secs: 10,
                cel_rounds: 3,
            }
        }
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

// ---------------------------------------------------------------------------------------------
// The run: the parts in order, the report

fn main() -> Result<()> {
    let settings = Settings::from_args();
    let began = Instant::now();
    let load_before = load_average();
    let mut world = World::start()?;

    world.cluster.pod_namespace(PODS_NS)?;
    let kanon = world.start_kanon("kanon", &[])?;
    world.kanon = Some(kanon);
    eprintln!("bench: kanon ready");
    for i in 0..COPS {
        world.apply_policy(&cop(i, &first_value(i)))?;
    }
    let cvps = cvps();
    for document in &cvps {
        world.apply_policy(document)?;
    }
    world.wait_policies_ready("ClusterOverridePolicy", COPS)?;
    world.wait_policies_ready("ClusterValidatePolicy", cvps.len())?;
    eprintln!(
        "bench: {COPS} ClusterOverridePolicies and {} ClusterValidatePolicies ready",
        cvps.len()
    );

    let rounds = pod_creates(&mut world, &settings)?;
    world.register_webhooks()?;
    let changes = policy_changes(&world, &settings)?;
    let dry_run_latency = {
        let mut taken = Vec::new();
        for _ in 0..20 {
            let started = Instant::now();
            world.dry_run_labels()?;
            taken.push(started.elapsed());
        }
        stats(&taken)
    };
    world.unregister_webhooks()?;
    let cel_rounds = cel_through_apiserver(&mut world, &settings)?;
    let lookup = lookups(&mut world, &settings)?;
    let kanon_alive = world.kanon.as_mut().is_some_and(Kanon::running)
        && world.kanon_miss.as_mut().is_some_and(Kanon::running);
    let kanon_log = world.kanon().log_tail(2000);
    let miss_log = world
        .kanon_miss
        .as_ref()
        .map(|k| k.log_tail(2000))
        .unwrap_or_default();
    let load_after = load_average();
    drop(world);

    if let Some(path) = std::env::var_os("KANON_BENCH_DUMP") {
        let millis = |samples: &[Duration]| -> Vec<f64> {
            samples.iter().map(|d| d.as_secs_f64() * 1e3).collect()
        };
        let dump = json!({
            "pod_rounds": rounds.iter().map(|r| json!({
                "with_kanon": r.with_kanon, "latencies_ms": millis(&r.latencies)})).collect::<Vec<_>>(),
            "changes_through_apiserver_ms": millis(&changes.through_apiserver),
            "changes_direct_ms": millis(&changes.direct),
            "reviews_ms": lookup.latencies.iter().map(|((case, cache), l)| json!({
                "lookup": case, "cache": cache, "latencies_ms": millis(l)})).collect::<Vec<_>>(),
            "cel_rounds": cel_rounds.iter().map(|r| json!({
                "configuration": r.config.name(), "creates_per_s": r.throughput,
                "latencies_ms": millis(&r.latencies)})).collect::<Vec<_>>(),
        });
        std::fs::write(&path, serde_json::to_vec(&dump)?)?;
        eprintln!(
            "bench: raw samples written to {}",
            Path::new(&path).display()
        );
    }

    // ---- Report ----
    println!("# kanon in a cluster (crates/kanon/benches/cluster/)");
    println!();
    println!(
        "load average before {load_before}, after {load_after}; {:.0} s in all{}",
        began.elapsed().as_secs_f64(),
        if settings.pairs == 1 {
            " (--quick)"
        } else {
            ""
        }
    );
    println!();
    println!(
        "## Pod creates through the apiserver: {}/s, {} s per round after {} s of warm-up",
        settings.rate, settings.round_secs, settings.warmup_secs
    );
    println!();
    println!("| round | kanon | measured | errors (all) | p50 | p90 | p99 | max | load after |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (i, r) in rounds.iter().enumerate() {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            i + 1,
            if r.with_kanon { "with" } else { "without" },
            r.stats.n,
            r.errors.len(),
            ms(r.stats.p50),
            ms(r.stats.p90),
            ms(r.stats.p99),
            ms(r.stats.max),
            r.load
        );
    }
    let all = |with: bool| {
        let latencies: Vec<Duration> = rounds
            .iter()
            .filter(|r| r.with_kanon == with)
            .flat_map(|r| r.latencies.iter().copied())
            .collect();
        stats(&latencies)
    };
    let (without, with) = (all(false), all(true));
    for (name, s) in [("without", without), ("with", with)] {
        println!(
            "| all | {name} | {} | | {} | {} | {} | {} | |",
            s.n,
            ms(s.p50),
            ms(s.p90),
            ms(s.p99),
            ms(s.max)
        );
    }
    println!();
    println!(
        "kanon adds {} at the median and {} at p99.",
        signed_ms(with.p50, without.p50),
        signed_ms(with.p99, without.p99)
    );
    let with_rounds: Vec<&Round> = rounds.iter().filter(|r| r.with_kanon).collect();
    let created: usize = with_rounds.iter().map(|r| r.created).sum();
    let labelled: usize = with_rounds.iter().map(|r| r.labelled).sum();
    let listed: usize = with_rounds.iter().map(|r| r.listed_labelled).sum();
    println!(
        "Pods created with kanon: {created}; answered with the {MATCHING} labels: {labelled}; listed back with them: {listed}."
    );
    let unlabelled_without: usize = rounds
        .iter()
        .filter(|r| !r.with_kanon)
        .map(|r| r.labelled)
        .sum();
    println!(
        "Pods created without kanon that carry the labels (should be 0): {unlabelled_without}."
    );
    let errors: Vec<&String> = rounds.iter().flat_map(|r| r.errors.iter()).collect();
    if !errors.is_empty() {
        println!("ERRORS: {} creates failed; the first ones:", errors.len());
        for e in errors.iter().take(5) {
            println!("  - {e}");
        }
    }
    println!();

    let first_probe = changes.probes.iter().filter(|&&p| p == 1).count();
    println!(
        "## Policy change -> effect ({} changes of one label value each way)",
        changes.through_apiserver.len()
    );
    println!();
    println!("| measured | median | p90 | max |");
    println!("|---|---|---|---|");
    for (name, samples) in [
        (
            "write -> dry-run create through the apiserver shows it",
            &changes.through_apiserver,
        ),
        (
            "  of which the write (server-side apply)",
            &changes.apply_calls,
        ),
        (
            "write -> kanon's /mutate shows it (1 ms polls)",
            &changes.direct,
        ),
    ] {
        let s = stats(samples);
        println!("| {name} | {} | {} | {} |", ms(s.p50), ms(s.p90), ms(s.max));
    }
    println!();
    println!(
        "One dry-run create through the apiserver and kanon (the resolution of the first row): median {}, p90 {}; the first dry run after the write already showed the change in {first_probe} of {} changes.",
        ms(dry_run_latency.p50),
        ms(dry_run_latency.p90),
        changes.probes.len()
    );
    for (name, samples) in [
        ("through the apiserver", &changes.through_apiserver),
        ("straight to kanon", &changes.direct),
    ] {
        println!(
            "All samples {name} (ms): {}",
            samples
                .iter()
                .map(|d| format!("{:.1}", d.as_secs_f64() * 1e3))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    println!();

    println!(
        "## Review latency, POST /mutate straight to kanon ({} reviews per case in {} rounds, HTTPS, HTTP/1.1 keep-alive, one at a time)",
        settings.review_rounds * settings.reviews_per_round,
        settings.review_rounds
    );
    println!();
    println!("| lookup | cache | p50 | p90 | p99 | max |");
    println!("|---|---|---|---|---|---|");
    for (case, _) in LOOKUP_CASES {
        for cache in ["hit", "miss"] {
            let s = stats(
                lookup
                    .latencies
                    .get(&(case.to_string(), cache))
                    .map(Vec::as_slice)
                    .unwrap_or_default(),
            );
            let cache_shown = match (case, cache) {
                ("none", "hit") => "(kanon with caches)",
                ("none", _) => "(kanon without caches)",
                (_, "hit") => "hit (default TTL)",
                _ => "miss (TTL 0)",
            };
            println!(
                "| {case} | {cache_shown} | {} | {} | {} | {} |",
                ms(s.p50),
                ms(s.p90),
                ms(s.p99),
                ms(s.max)
            );
        }
    }
    println!();
    for (name, text) in [
        ("with caches", &lookup.metrics_hit),
        ("without caches", &lookup.metrics_miss),
    ] {
        for source in ["k8s", "http"] {
            let hits = metric(
                text,
                "kanon_lookups_total",
                &[("source", source), ("cache", "hit")],
            )
            .unwrap_or(0.0);
            let misses = metric(
                text,
                "kanon_lookups_total",
                &[("source", source), ("cache", "miss")],
            )
            .unwrap_or(0.0);
            let sum = metric(
                text,
                "kanon_lookup_duration_seconds_sum",
                &[("source", source)],
            );
            let count = metric(
                text,
                "kanon_lookup_duration_seconds_count",
                &[("source", source)],
            );
            let mean = match (sum, count) {
                (Some(s), Some(c)) if c > 0.0 => format!("{:.3} ms", s / c * 1e3),
                _ => "-".into(),
            };
            let errors: u64 = text
                .lines()
                .filter(|l| {
                    l.starts_with("kanon_lookup_errors_total{")
                        && l.contains(&format!("source=\"{source}\""))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .map(|v| v as u64)
                .sum();
            println!(
                "kanon {name}, {source}: {hits:.0} hits, {misses:.0} misses, {errors} errors; kanon_lookup_duration_seconds mean over misses {mean}"
            );
        }
    }
    println!(
        "The HTTP service answered {} requests.",
        lookup.service_requests
    );
    println!();
    println!(
        "## CEL through the apiserver: 10 rules as ValidatingAdmissionPolicies and as kanon CEL policies ({} concurrent clients, closed loop; {} s measured per round after {} s of warm-up)",
        settings.cel_clients, settings.cel_round_secs, settings.cel_warmup_secs
    );
    println!();
    println!(
        "| round | configuration | measured | creates/s | p50 | p90 | p99 | max | admitted (all) | kanon: each policy evaluated | apiserver per create: VAP plugin / webhook plugin | load after |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (i, r) in cel_rounds.iter().enumerate() {
        let evaluated = match r.evaluations {
            Some((least, most)) if least == most => format!("{least:.0}"),
            Some((least, most)) => format!("{least:.0} to {most:.0}"),
            None => "-".into(),
        };
        println!(
            "| {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {evaluated} | {} / {} | {} |",
            i + 1,
            r.config.name(),
            r.stats.n,
            r.throughput,
            ms(r.stats.p50),
            ms(r.stats.p90),
            ms(r.stats.p99),
            ms(r.stats.max),
            r.admitted,
            ms(r.plugin_means[0]),
            ms(r.plugin_means[1]),
            r.load
        );
    }
    println!();
    println!(
        "| configuration | creates/s: median (rounds) | p50 (all rounds) | p99 (all rounds) |"
    );
    println!("|---|---|---|---|");
    let of = |config: CelConfig| -> Vec<&CelRound> {
        cel_rounds.iter().filter(|r| r.config == config).collect()
    };
    let median_throughput = |config: CelConfig| median(of(config).iter().map(|r| r.throughput));
    for config in CelConfig::ALL {
        let rounds = of(config);
        let latencies: Vec<Duration> = rounds
            .iter()
            .flat_map(|r| r.latencies.iter().copied())
            .collect();
        let s = stats(&latencies);
        println!(
            "| {} | **{:.0}** ({}) | {} | {} |",
            config.name(),
            median_throughput(config),
            rounds
                .iter()
                .map(|r| format!("{:.0}", r.throughput))
                .collect::<Vec<_>>()
                .join(", "),
            ms(s.p50),
            ms(s.p99)
        );
    }
    println!();
    println!(
        "CPU time per admitted Pod (median over the rounds), from /proc/<pid>/stat over each round:"
    );
    println!();
    println!(
        "| configuration | {} | all | share of the {} CPUs used |",
        CPU_PROCESSES.join(" | "),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!("|---|{}---|---|", "---|".repeat(CPU_PROCESSES.len()));
    for config in CelConfig::ALL {
        let rounds = of(config);
        let column = |i: usize| median(rounds.iter().map(|r| r.cpu_per_create[i].as_secs_f64()));
        let all = median(
            rounds
                .iter()
                .map(|r| r.cpu_per_create.iter().sum::<Duration>().as_secs_f64()),
        );
        println!(
            "| {} | {} | {:.3} ms | {:.0}% |",
            config.name(),
            (0..CPU_PROCESSES.len())
                .map(|i| format!("{:.3} ms", column(i) * 1e3))
                .collect::<Vec<_>>()
                .join(" | "),
            all * 1e3,
            median(rounds.iter().map(|r| r.cpu_share)) * 100.0
        );
    }
    println!();
    let per_round = |a: CelConfig, b: CelConfig| -> String {
        of(a)
            .iter()
            .zip(of(b))
            .map(|(x, y)| format!("{:.2}", x.throughput / y.throughput))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (a, b) in [
        (CelConfig::KanonCel, CelConfig::Vaps),
        (CelConfig::KanonCel, CelConfig::NoPolicy),
        (CelConfig::Vaps, CelConfig::NoPolicy),
    ] {
        println!(
            "{} / {}, creates/s: **{:.2}** (medians; round by round {}).",
            a.name(),
            b.name(),
            median_throughput(a) / median_throughput(b),
            per_round(a, b)
        );
    }
    println!(
        "Target (issue 19 §5): kanon with CEL at least 2× the VAPs' creates/s. Every create was admitted and stored; before and after each round, a Pod violating each rule alone was refused by that rule (VAPs, kanon) or admitted (no policy); kanon evaluated each of its policies once per admitted Pod."
    );
    println!();
    let problems: Vec<&str> = kanon_log
        .lines()
        .chain(miss_log.lines())
        .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"))
        .collect();
    println!(
        "kanon processes alive until the end: {kanon_alive}; warnings or errors in their logs: {}",
        problems.len()
    );
    for line in problems.iter().take(10) {
        println!("  {line}");
    }
    Ok(())
}
