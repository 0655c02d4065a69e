//! The background audit at scale (issue 21): 100,000 objects of 20 kinds in 50 namespaces, 10% of
//! them failing one of 20 ClusterValidatePolicies in `Audit` mode.
//!
//! Starts etcd and kube-apiserver 1.35 on 127.0.0.1 (`kanon-control-plane`, without
//! kube-controller-manager, so that nothing acts on the objects: Deployments get no ReplicaSets,
//! Pods stay Pending), installs `crds/`, creates the namespaces and the objects (kube-rs, many
//! creates in flight), then runs `kanon serve --kubeconfig ...` (this package's release binary)
//! with `--audit-interval 0 --audit-qps 50 --audit-page-size 500 --no-status` (and `--audit-cpu` when set below), and measures:
//!
//! 1. **Peak RSS of the audit.** kanon starts with no policy (its first audit reads nothing),
//!    then the 20 policies are applied and it audits every object once. Its `VmHWM` and `VmRSS`
//!    are sampled every 100 ms; the audit's duration and objects come from its metrics
//!    (`kanon_audit_duration_seconds`, `kanon_audit_objects_scanned_total`,
//!    `kanon_audits_total{outcome="finished"}`).
//! 2. **The reports' size.** Every `Report` and `ClusterReport` as the apiserver returns it
//!    (`kubectl get reports,clusterreports -A -o json --show-managed-fields`), each item's
//!    compact JSON with and without `metadata.managedFields`, and etcd's own view: the values under
//!    `/registry/openreports.io/` read through etcd's JSON gateway (`/v3/kv/range`), which is
//!    what etcd stores for them.
//! 3. **Admission latency while the audit runs.** AdmissionReviews
//!    (`fixtures/admission-reviews/pod-create.json`, a Pod that one of the 20 policies selects)
//!    POSTed straight to kanon's `/validate` over HTTPS by oha at a fixed 1,000 req/s
//!    (`--latency-correction`, 32 keep-alive connections), for a window with no audit running
//!    and a window while an audit runs (started by changing one policy's message, so that the
//!    audit begins `settle`, 5 s, later; the window starts when the audit's first objects are
//!    counted). Rounds alternate the order (idle first, then audit first). Such an audit is
//!    first timed once without load; the window is at most 70% of that, so that the audit
//!    covers it; each window's coverage (and kanon's, kube-apiserver's and etcd's CPU) is
//!    printed.
//!
//! Run: `cargo bench -p kanon --bench audit` (about 7 minutes, 1.5 of them creating the
//! objects; results in BENCHMARKS.md).
//! Environment: `KANON_AUDIT_BENCH_OBJECTS` (default 100000), `KANON_AUDIT_BENCH_NAMESPACES`
//! (50), `KANON_AUDIT_BENCH_ROUNDS` (10), `KANON_AUDIT_BENCH_WINDOW` (seconds per latency window,
//! at most; default 15), `KANON_AUDIT_BENCH_CONCURRENCY` (creates in flight, 32), `OHA` (the oha
//! binary; default `oha` on the PATH, then `target/bench-tools/bin/oha`, which
//! `scripts/load-bench.sh` installs), `KANON_BENCH_COMMIT` (the commit printed, for a tree that
//! is not a git checkout), `KANON_AUDIT_BENCH_SPLIT=1` (the reviews go to a second kanon, started
//! with `--no-audit`, while the first audits: the audit then shares the machine with the
//! reviews but not the process), `KANON_AUDIT_BENCH_DRY_RUN=1` (the reviews say `dryRun: true`,
//! so that kanon does not hand the admitted Pod to the audit's admission recorder),
//! `KANON_AUDIT_BENCH_NICE=1` (kube-apiserver, etcd and, when split, the auditing kanon at
//! nice 19 for the rounds; `=idle`: in the SCHED_IDLE class), `KANON_AUDIT_BENCH_PIN=1` (for
//! the rounds, kanon alone on the last CPU, as its Pod would have a CPU of its own, and
//! kube-apiserver, etcd and oha on the others: in a cluster the apiserver serves the audit's
//! LISTs on other machines; `=with-load`: oha on kanon's CPU too, so that the apiserver's LIST
//! work delays neither the load generator nor kanon), `KANON_AUDIT_BENCH_CPU` (kanon's `--audit-cpu`, default its own
//! default: kanon's own), `KANON_AUDIT_BENCH_PERF=DIR`
//! (`perf record -g` of kanon during round 1's two windows, into DIR; perf costs CPU, so not
//! for the measured figures). `--quick`: 4,000 objects, 2 rounds of 3 s. Needs `curl`.
//! The first run of the control plane's toolchain builds it (see the README). kanon and the
//! control plane die with the bench (`PR_SET_PDEATHSIG`).
//!
//! Layout: this file has the kinds, the settings, the run and its report; `world.rs` the
//! cluster (the kit of `kanon_control_plane::kanon`, without kube-controller-manager) with the
//! policies and objects; `sampler.rs` kanon and its sampler; `reports.rs` the reports' size;
//! `load.rs` the admission load (oha).

mod load;
mod reports;
mod sampler;
mod world;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use kanon_control_plane::kanon::{cpu_time, metrics_at, repo};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::load::{Phase, Window, oha, oha_path};
use crate::reports::report_sizes;
use crate::sampler::{FINISHED, SCANNED, Sampler, start_kanon};
use crate::world::metric;
use crate::world::{World, count, create_all, namespace_name, object, policy, policy_resource};

/// kanon's own namespace (its audit Lease).
const KANON_NS: &str = "kanon-system";
/// The label that the policies reject.
const BAD_LABEL: &str = "bench.kanon.dev/bad";

/// One kind of object the bench creates: group, version, kind, plural, name prefix, and whether
/// it is created after the others (ResourceQuotas and LimitRanges act on later creates).
struct KindSpec {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    short: &'static str,
    late: bool,
}

const fn k(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    short: &'static str,
) -> KindSpec {
    KindSpec {
        group,
        version,
        kind,
        plural,
        short,
        late: false,
    }
}

/// The 20 kinds: none needs a controller, none allocates an address.
const KINDS: [KindSpec; 20] = [
    k("", "v1", "ConfigMap", "configmaps", "cm"),
    k("", "v1", "Service", "services", "svc"),
    k("", "v1", "ServiceAccount", "serviceaccounts", "sa"),
    k("", "v1", "PodTemplate", "podtemplates", "pt"),
    k(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        "pvc",
    ),
    k("", "v1", "Pod", "pods", "pod"),
    KindSpec {
        late: true,
        ..k("", "v1", "LimitRange", "limitranges", "lr")
    },
    KindSpec {
        late: true,
        ..k("", "v1", "ResourceQuota", "resourcequotas", "rq")
    },
    k("rbac.authorization.k8s.io", "v1", "Role", "roles", "role"),
    k(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        "rb",
    ),
    k(
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        "eps",
    ),
    k("apps", "v1", "Deployment", "deployments", "deploy"),
    k("apps", "v1", "StatefulSet", "statefulsets", "sts"),
    k("apps", "v1", "DaemonSet", "daemonsets", "ds"),
    k("apps", "v1", "ReplicaSet", "replicasets", "rs"),
    k("batch", "v1", "Job", "jobs", "job"),
    k("batch", "v1", "CronJob", "cronjobs", "cj"),
    k("networking.k8s.io", "v1", "Ingress", "ingresses", "ing"),
    k(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        "netpol",
    ),
    k(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        "pdb",
    ),
];

impl KindSpec {
    fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    fn resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(self.group, self.version, self.kind),
            self.plural,
        )
    }

    fn policy_name(&self) -> String {
        format!("audit-bench-{}", self.kind.to_lowercase())
    }
}

struct Settings {
    objects: usize,
    namespaces: usize,
    rounds: usize,
    window: Duration,
    concurrency: usize,
    quick: bool,
    /// The reviews go to a second kanon with `--no-audit`.
    split: bool,
    /// The reviews are dry runs.
    dry_run: bool,
    /// The audit's processes at nice 19 (or SCHED_IDLE).
    nice: bool,
    sched_idle: bool,
    /// kanon on a CPU of its own, the control plane and oha on the others.
    pin: bool,
    /// With `pin`: oha on kanon's CPU, the control plane alone on the others.
    pin_load_with_kanon: bool,
    /// kanon's `--audit-cpu` (`None`: its default).
    audit_cpu: Option<String>,
}

impl Settings {
    fn from_env() -> Settings {
        let quick = std::env::args().any(|a| a == "--quick")
            || std::env::var("KANON_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let number = |name: &str, default: usize| -> usize {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|&n| n > 0)
                .unwrap_or(default)
        };
        let (objects, rounds, window) = if quick {
            (4_000, 2, 3)
        } else {
            (100_000, 10, 15)
        };
        Settings {
            objects: number("KANON_AUDIT_BENCH_OBJECTS", objects),
            namespaces: number("KANON_AUDIT_BENCH_NAMESPACES", 50),
            rounds: number("KANON_AUDIT_BENCH_ROUNDS", rounds),
            window: Duration::from_secs(number("KANON_AUDIT_BENCH_WINDOW", window) as u64),
            concurrency: number("KANON_AUDIT_BENCH_CONCURRENCY", 32),
            quick,
            nice: std::env::var("KANON_AUDIT_BENCH_NICE").is_ok_and(|v| !v.is_empty() && v != "0"),
            sched_idle: std::env::var("KANON_AUDIT_BENCH_NICE").is_ok_and(|v| v == "idle"),
            pin: std::env::var("KANON_AUDIT_BENCH_PIN").is_ok_and(|v| !v.is_empty() && v != "0"),
            pin_load_with_kanon: std::env::var("KANON_AUDIT_BENCH_PIN")
                .is_ok_and(|v| v == "with-load"),
            audit_cpu: std::env::var("KANON_AUDIT_BENCH_CPU")
                .ok()
                .filter(|v| !v.is_empty()),
            dry_run: std::env::var("KANON_AUDIT_BENCH_DRY_RUN")
                .is_ok_and(|v| !v.is_empty() && v != "0"),
            split: std::env::var("KANON_AUDIT_BENCH_SPLIT")
                .is_ok_and(|v| !v.is_empty() && v != "0"),
        }
    }

    fn per_kind(&self) -> usize {
        self.objects / KINDS.len()
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// `VmRSS` and `VmHWM` of a process, in KiB (0 when gone).
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The CPUs of this machine: kanon's (the last) and the others', for `KANON_AUDIT_BENCH_PIN`.
fn cpu_split() -> Result<(usize, Vec<usize>)> {
    let cpus = std::thread::available_parallelism()?.get();
    ensure!(
        cpus >= 2,
        "KANON_AUDIT_BENCH_PIN needs at least 2 CPUs, this machine has {cpus}"
    );
    Ok((cpus - 1, (0..cpus - 1).collect()))
}

/// Every thread of `pid` allowed on `cpus` only (threads made later inherit it).
fn pin(pid: u32, cpus: &[usize]) -> Result<()> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .with_context(|| format!("the threads of {pid}"))?;
    for task in tasks.flatten() {
        if let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<libc::pid_t>().ok())
        {
            // SAFETY: the set is a zeroed local filled by CPU_SET, read by the call only.
            let result = unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                for &cpu in cpus {
                    libc::CPU_SET(cpu, &mut set);
                }
                libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set)
            };
            // A thread that ended meanwhile is no matter.
            if result != 0 && task.path().exists() {
                bail!(
                    "pinning thread {tid} of {pid}: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    }
    Ok(())
}

/// Every thread of `pid` at `nice`, or (`idle`) in the SCHED_IDLE class.
fn renice(pid: u32, nice: i32, idle: bool) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return;
    };
    for task in tasks.flatten() {
        if let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<u32>().ok())
        {
            // SAFETY: setpriority(2) and sched_setscheduler(2) read only the parameter
            // passed by reference, which lives across the call.
            unsafe {
                if idle {
                    let param = libc::sched_param { sched_priority: 0 };
                    libc::sched_setscheduler(tid as libc::pid_t, libc::SCHED_IDLE, &param);
                } else {
                    libc::setpriority(libc::PRIO_PROCESS, tid, nice);
                }
            }
        }
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

// ---------------------------------------------------------------------------------------------
// The run: kanon's audit, the reports, the latency rounds, the report

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) -> Result<Duration> {
    let started = Instant::now();
    while !done() {
        ensure!(started.elapsed() < timeout, "{what}: not after {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(started.elapsed())
}

fn main() -> Result<()> {
    let settings = Settings::from_env();
    let began = Instant::now();
    let load_before = load_average();
    eprintln!(
        "bench: load average {load_before}; {} objects of {} kinds in {} namespaces",
        settings.objects,
        KINDS.len(),
        settings.namespaces
    );
    let oha_bin = oha_path()?;
    let world = World::start()?;

    // ---- Namespaces and objects ----
    let ns_resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("", "v1", "Namespace"),
        "namespaces",
    );
    for name in
        std::iter::once(KANON_NS.to_string()).chain((0..settings.namespaces).map(namespace_name))
    {
        world.apply(
            &ns_resource,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
        )?;
    }
    // Objects of these kinds the apiserver made itself (kube-system's ConfigMaps, RBAC roles,
    // the `kubernetes` Service): the audit reads them too.
    let mut existing = BTreeMap::new();
    for kind in &KINDS {
        existing.insert(kind.kind, count(&world, kind)?);
    }
    let create_started = Instant::now();
    let early: Vec<&KindSpec> = KINDS.iter().filter(|k| !k.late).collect();
    let late: Vec<&KindSpec> = KINDS.iter().filter(|k| k.late).collect();
    let mut created = create_all(&world, &early, &settings)?;
    created += create_all(&world, &late, &settings)?;
    let create_took = create_started.elapsed();
    eprintln!(
        "bench: {created} objects created in {:.1} s ({:.0}/s), load average {}",
        create_took.as_secs_f64(),
        created as f64 / create_took.as_secs_f64(),
        load_average()
    );
    let mut counts = BTreeMap::new();
    for kind in &KINDS {
        let n = count(&world, kind)? - existing[kind.kind];
        ensure!(
            n == settings.per_kind(),
            "{}: {n} objects created, not {}",
            kind.kind,
            settings.per_kind()
        );
        counts.insert(kind.kind, n);
    }
    let failing: usize = KINDS
        .iter()
        .map(|kind| {
            (0..settings.per_kind())
                .filter(|&i| object(kind, i, settings.namespaces).2)
                .count()
        })
        .sum();

    // ---- kanon, with no policy yet ----
    let mut flags = vec![
        "--namespace",
        KANON_NS,
        "--no-status",
        "--audit-interval",
        "0",
        "--audit-qps",
        "50",
        "--audit-page-size",
        "500",
        "--audit-identity",
        "audit-bench",
    ];
    if let Some(share) = &settings.audit_cpu {
        flags.extend(["--audit-cpu", share.as_str()]);
    }
    let mut kanon = start_kanon(&world, "kanon", &flags)?;
    let kanon_pid = kanon.pid().context("kanon runs")?;
    let sampler = Sampler::start(kanon_pid, kanon.metrics_port, began);
    // The first audit has no policy to read with; it ends at once.
    wait_for(
        "kanon's first (empty) audit",
        Duration::from_secs(120),
        || sampler.last().is_some_and(|s| s.finished >= 1.0),
    )?;
    std::thread::sleep(Duration::from_secs(2));
    let before = sampler.last().context("a sample")?;
    ensure!(
        before.scanned == 0.0,
        "the empty audit scanned {}",
        before.scanned
    );
    eprintln!(
        "bench: kanon ready, idle: RSS {:.1} MiB, HWM {:.1} MiB",
        mib(before.rss),
        mib(before.hwm)
    );

    // ---- Target 1: the audit of every object ----
    let audit_load_before = load_average();
    let etcd_db_before = world.etcd_db_size();
    let policies_at = began.elapsed();
    for kind in &KINDS {
        world.apply(&policy_resource(), &policy(kind, 0))?;
    }
    let audit_wait = Duration::from_secs(if settings.quick { 300 } else { 1800 });
    wait_for("the audit of every object", audit_wait, || {
        sampler.last().is_some_and(|s| s.finished >= 2.0)
    })?;
    let audited_at = began.elapsed();
    std::thread::sleep(Duration::from_millis(300));
    let audit_load_after = load_average();
    let etcd_db_after = world.etcd_db_size();
    let metrics = metrics_at(kanon.metrics_port)?;
    let scanned = metric(&metrics, SCANNED);
    let audit_seconds = metric(&metrics, "kanon_audit_duration_seconds_sum");
    let audit_count = metric(&metrics, "kanon_audit_duration_seconds_count");
    let writes_ok = metric(&metrics, "kanon_audit_report_writes_total{outcome=\"ok\"}");
    let writes_error = metric(
        &metrics,
        "kanon_audit_report_writes_total{outcome=\"error\"}",
    );
    let (rss_after_audit, hwm_after_audit) = memory_kib(kanon_pid);
    let during = sampler.between(policies_at, audited_at);
    let max_rss_during = during.iter().map(|s| s.rss).max().unwrap_or(0);
    let first_read = during
        .iter()
        .find(|s| s.scanned > 0.0)
        .map_or(policies_at, |s| s.at);
    eprintln!(
        "bench: audit of {scanned} objects in {audit_seconds:.1} s; VmHWM {:.1} MiB",
        mib(hwm_after_audit)
    );
    let reports_first = report_sizes(&world)?;

    // ---- Target 2: admission p99 with and without an audit running ----
    let mut fixture = repo().join("fixtures/admission-reviews/pod-create.json");
    if settings.dry_run {
        // A dry run is judged alike but not handed to the audit's admission recorder.
        let mut review: Value = serde_json::from_slice(&std::fs::read(&fixture)?)?;
        review["request"]["dryRun"] = json!(true);
        fixture = world.cluster.dir().join("pod-create-dry-run.json");
        std::fs::write(&fixture, serde_json::to_vec(&review)?)?;
    }
    // Split: the reviews go to a second kanon that does not audit, so that the audit's work
    // shares the machine with them but not the process.
    let server = if settings.split {
        Some(start_kanon(
            &world,
            "kanon-server",
            &["--namespace", KANON_NS, "--no-status", "--no-audit"],
        )?)
    } else {
        None
    };
    let serving = server.as_ref().unwrap_or(&kanon);
    let serving_pid = serving.pid().context("the serving kanon runs")?;
    let url = format!("https://127.0.0.1:{}/validate?timeout=10s", serving.port);
    // An audit after one policy change, without load: how long the audits of the rounds read
    // (the first audit wrote every report; the later ones write only what changed).
    let calibration_scanned = sampler.last().context("a sample")?.scanned;
    world.apply(&policy_resource(), &policy(&KINDS[0], 1))?;
    wait_for(
        "the audit after a policy change",
        Duration::from_secs(60),
        || {
            sampler
                .last()
                .is_some_and(|s| s.scanned > calibration_scanned)
        },
    )?;
    let calibration_from = began.elapsed();
    wait_for("the audit's end", audit_wait, || {
        sampler.last().is_some_and(|s| s.finished >= 3.0)
    })?;
    let calibration = (began.elapsed() - calibration_from).as_secs_f64();
    std::thread::sleep(Duration::from_secs(2));
    let window = settings
        .window
        .as_secs_f64()
        .min((calibration * 0.7).floor())
        .max(1.0);
    eprintln!(
        "bench: latency windows of {window} s (an audit after a policy change read for {calibration:.1} s)"
    );
    if settings.nice {
        // The audit's work at the lowest priority: the auditing kanon (split only) and the
        // control plane, whose LISTs a real cluster serves on other machines.
        let mut lowered = vec![world.pid("kube-apiserver"), world.pid("etcd")];
        if settings.split {
            lowered.push(Some(kanon_pid));
        }
        for pid in lowered.into_iter().flatten() {
            renice(pid, 19, settings.sched_idle);
        }
    }
    // kanon on a CPU of its own, as its Pod would have; kube-apiserver and etcd, whose LISTs a
    // real cluster serves on other machines, and the load generator on the others.
    let others = if settings.pin {
        let (own, others) = cpu_split()?;
        pin(serving_pid, &[own])?;
        pin(kanon_pid, &[own])?;
        for pid in [world.pid("kube-apiserver"), world.pid("etcd")]
            .into_iter()
            .flatten()
        {
            pin(pid, &others)?;
        }
        // `with-load`: the load generator beside kanon, so that the apiserver's LIST work
        // (which a real cluster does elsewhere) delays neither.
        Some(if settings.pin_load_with_kanon {
            vec![own]
        } else {
            others
        })
    } else {
        None
    };
    let others = others.as_deref();
    oha(&oha_bin, &url, &fixture, 3.0, others)?; // warm-up
    let pids = [
        Some(serving_pid),
        Some(kanon_pid),
        world.pid("kube-apiserver"),
        world.pid("etcd"),
    ];
    let cpu_now = || pids.map(|p| p.map_or(Duration::ZERO, cpu_time));
    let mut windows = Vec::new();
    let mut audits_done = 3.0;
    let mut changes = 1;
    let load_rounds_before = load_average();
    for round in 1..=settings.rounds {
        let order = if round % 2 == 1 {
            [Phase::Idle, Phase::Audit]
        } else {
            [Phase::Audit, Phase::Idle]
        };
        for phase in order {
            if phase == Phase::Audit {
                changes += 1;
                let kind = &KINDS[(changes - 1) % KINDS.len()];
                let scanned_before = sampler.last().context("a sample")?.scanned;
                world.apply(&policy_resource(), &policy(kind, changes))?;
                wait_for(
                    "the audit after a policy change",
                    Duration::from_secs(60),
                    || sampler.last().is_some_and(|s| s.scanned > scanned_before),
                )?;
            }
            let cpu_before = cpu_now();
            let from = began.elapsed();
            let perf = match std::env::var_os("KANON_AUDIT_BENCH_PERF") {
                Some(dir) if round == 1 => {
                    std::fs::create_dir_all(&dir)?;
                    let out = Path::new(&dir).join(format!("kanon-{phase:?}.perf.data"));
                    Some(
                        Command::new("perf")
                            .args(["record", "-F", "499", "-g", "-o"])
                            .arg(out)
                            .args(["-p", &kanon_pid.to_string(), "--"])
                            .args(["sleep", &window.to_string()])
                            .stdout(Stdio::null())
                            .stderr(Stdio::null())
                            .spawn()
                            .context("perf record")?,
                    )
                }
                _ => None,
            };
            let (p50, p99, max, rps) = oha(&oha_bin, &url, &fixture, window, others)?;
            if let Some(mut perf) = perf {
                perf.wait()?;
            }
            let to = began.elapsed();
            let cpu_after = cpu_now();
            let seconds = (to - from).as_secs_f64();
            let samples = sampler.between(from, to);
            let reading = samples
                .windows(2)
                .filter(|w| w[1].scanned > w[0].scanned)
                .map(|w| (w[1].at - w[0].at).as_secs_f64())
                .fold(0.0, |a, b| a + b);
            let scanned = match (samples.first(), samples.last()) {
                (Some(a), Some(b)) => b.scanned - a.scanned,
                _ => 0.0,
            };
            let covered = if phase == Phase::Audit {
                // Reading pauses between pages (the pace), so coverage is the span from the
                // window's start to the audit's end (or the window's end).
                let ended = samples
                    .iter()
                    .find(|s| s.finished > audits_done)
                    .map_or(to, |s| s.at);
                ((ended.saturating_sub(from)).as_secs_f64() / seconds).min(1.0)
            } else {
                reading / seconds
            };
            let cpu = [0, 1, 2, 3]
                .map(|i| (cpu_after[i].saturating_sub(cpu_before[i])).as_secs_f64() / seconds);
            eprintln!(
                "bench: round {round} {phase:?}: p50 {p50:.2} ms, p99 {p99:.2} ms, {rps:.0} req/s, \
                 audit coverage {:.0}%, {scanned} objects read, CPU kanon {:.2} (auditor {:.2}) apiserver {:.2} etcd {:.2}",
                covered * 100.0,
                cpu[0],
                cpu[1],
                cpu[2],
                cpu[3]
            );
            windows.push(Window {
                phase,
                round,
                p50_ms: p50,
                p99_ms: p99,
                max_ms: max,
                rps,
                audit_coverage: covered,
                scanned,
                cpu,
            });
            if phase == Phase::Audit {
                audits_done += 1.0;
                wait_for("the audit's end", audit_wait, || {
                    sampler.last().is_some_and(|s| s.finished >= audits_done)
                })?;
                // The reports' writes and the Lease's save follow the last page.
                std::thread::sleep(Duration::from_secs(2));
            }
        }
    }
    let load_rounds_after = load_average();
    let metrics_end = metrics_at(kanon.metrics_port)?;
    let (rss_end, hwm_end) = memory_kib(kanon_pid);
    let reports_end = report_sizes(&world)?;
    let lease = world
        .kubectl(&["get", "lease", "kanon-audit", "-n", KANON_NS, "-o", "json"])
        .ok()
        .and_then(|out| serde_json::from_slice::<Value>(&out.stdout).ok())
        .unwrap_or(Value::Null);
    let checkpoint: Value = lease["metadata"]["annotations"]["audit.kanon.dev/checkpoint"]
        .as_str()
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or(Value::Null);
    let alive = kanon.running();
    drop(sampler);
    kanon.stop();
    let log = std::fs::read_to_string(kanon.log()).unwrap_or_default();
    let notable: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panic"))
        .collect();
    let audit_lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("audit started") || l.contains("audit finished"))
        .collect();
    let load_after = load_average();

    // ---- Report ----
    let commit = std::env::var("KANON_BENCH_COMMIT")
        .ok()
        .filter(|c| !c.is_empty());
    let commit = commit
        .or_else(|| {
            Command::new("git")
                .args(["rev-parse", "--short", "HEAD"])
                .current_dir(repo())
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        })
        .unwrap_or_else(|| "(not a git checkout)".into());
    println!("# The background audit at scale (crates/kanon/benches/audit/)");
    println!();
    println!(
        "commit {commit}; load average before {load_before}, after {load_after}; {:.0} s in all{}",
        began.elapsed().as_secs_f64(),
        if settings.quick { " (--quick)" } else { "" }
    );
    println!();
    println!(
        "{created} objects ({} per kind, {} namespaces, {failing} = {:.1}% labelled `{BAD_LABEL}`) \
         created in {:.1} s ({:.0}/s, {} in flight)",
        settings.per_kind(),
        settings.namespaces,
        100.0 * failing as f64 / created as f64,
        create_took.as_secs_f64(),
        created as f64 / create_took.as_secs_f64(),
        settings.concurrency
    );
    println!();
    let in_cluster: usize = existing.values().sum::<usize>() + created;
    println!("| kind | objects created | made by the apiserver |");
    println!("|---|---|---|");
    for kind in &KINDS {
        println!(
            "| {} {} | {} | {} |",
            kind.api_version(),
            kind.kind,
            counts[kind.kind],
            existing[kind.kind]
        );
    }
    println!("| all | {created} | {} |", in_cluster - created);
    println!();
    println!("objects of the 20 kinds in the cluster: {in_cluster}");
    println!();
    println!("## Target 1: the audit's peak RSS");
    println!();
    println!("| | |");
    println!("|---|---|");
    println!(
        "| load average before / after the audit | {audit_load_before} / {audit_load_after} |"
    );
    println!("| objects scanned (`kanon_audit_objects_scanned_total`) | {scanned} |");
    println!(
        "| audit duration (`kanon_audit_duration_seconds`, {audit_count} audits so far) | {audit_seconds:.1} s |"
    );
    println!(
        "| policies applied → audit finished (sampled) | {:.1} s |",
        (audited_at - policies_at).as_secs_f64()
    );
    println!(
        "| first objects judged → audit finished (sampled) | {:.1} s |",
        (audited_at - first_read).as_secs_f64()
    );
    println!("| report writes ok / error | {writes_ok} / {writes_error} |");
    println!(
        "| etcd's database before / after the audit (`etcd_mvcc_db_total_size_in_bytes`) | {:.1} / {:.1} MiB |",
        etcd_db_before / 1048576.0,
        etcd_db_after / 1048576.0
    );
    println!(
        "| kanon before the audit: VmRSS / VmHWM | {:.1} / {:.1} MiB |",
        mib(before.rss),
        mib(before.hwm)
    );
    println!(
        "| **VmHWM after the audit (peak RSS)** | **{:.1} MiB** |",
        mib(hwm_after_audit)
    );
    println!(
        "| max VmRSS sampled during the audit (100 ms) | {:.1} MiB |",
        mib(max_rss_during)
    );
    println!(
        "| VmRSS after the audit | {:.1} MiB |",
        mib(rss_after_audit)
    );
    println!(
        "| target: peak RSS ≤ 128 MiB | {} |",
        if mib(hwm_after_audit) <= 128.0 {
            "met"
        } else {
            "**missed**"
        }
    );
    println!();
    println!("## Target 3: the reports' size");
    println!();
    for (title, sizes) in [
        ("after the first audit", &reports_first),
        ("at the end", &reports_end),
    ] {
        let total = sizes.compact.iter().sum::<usize>();
        let without = sizes.compact_without_managed.iter().sum::<usize>();
        let max = sizes.compact.iter().max().copied().unwrap_or(0);
        println!(
            "- {title}: {} Reports, {} ClusterReports, {} results listed ({} cut), summaries: \
             {} fail, {} pass; compact JSON {total} B ({:.2} MiB; largest {max} B, median {:.0} B), \
             without managedFields {without} B ({:.2} MiB); kubectl -o json {} B; etcd: {}",
            sizes.reports,
            sizes.cluster_reports,
            sizes.results,
            sizes.cut,
            sizes.summary_fail,
            sizes.summary_pass,
            total as f64 / 1048576.0,
            median(&sizes.compact.iter().map(|&b| b as f64).collect::<Vec<_>>()),
            without as f64 / 1048576.0,
            sizes.kubectl_bytes,
            match &sizes.etcd_error {
                None => format!(
                    "{} keys, {} B ({:.2} MiB)",
                    sizes.etcd_keys,
                    sizes.etcd_bytes,
                    sizes.etcd_bytes as f64 / 1048576.0
                ),
                Some(error) => format!("not read ({error})"),
            }
        );
    }
    println!();
    println!("## Target 2: admission p99 at 1,000 req/s, idle and while an audit runs");
    println!();
    println!(
        "oha -q 1000 --latency-correction -c 32 for {window} s per window, POST /validate (pod-create.json); \
         load average {load_rounds_before} before the rounds, {load_rounds_after} after; an audit after one \
         policy change, without load, read for {calibration:.1} s{}",
        if settings.split {
            "; **split**: the reviews went to a second kanon started with `--no-audit`"
        } else {
            ""
        }
    );
    if settings.nice {
        println!();
        println!(
            "**nice**: kube-apiserver, etcd{} {} during the rounds",
            if settings.split {
                " and the auditing kanon"
            } else {
                ""
            },
            if settings.sched_idle {
                "in the SCHED_IDLE class"
            } else {
                "at nice 19"
            }
        );
    }
    println!();
    println!(
        "kanon's `--audit-cpu`: {}",
        settings
            .audit_cpu
            .as_deref()
            .unwrap_or("its default (`kanon serve --help`)")
    );
    if settings.pin {
        println!();
        println!(
            "**pinned**: kanon on CPU {}{}, during the rounds",
            cpu_split().map_or(0, |(own, _)| own),
            if settings.pin_load_with_kanon {
                " with oha, kube-apiserver and etcd alone on the others"
            } else {
                " alone, kube-apiserver, etcd and oha on the others"
            }
        );
    }
    if settings.dry_run {
        println!();
        println!("**dry run**: every review said `dryRun: true` (not recorded in the reports)");
    }
    println!();
    println!(
        "| round | window | p50 | p99 | max | req/s | audit coverage | objects read | CPU/s kanon{} | apiserver | etcd |",
        if settings.split {
            " serving | kanon auditing"
        } else {
            ""
        }
    );
    println!(
        "|---|---|---|---|---|---|---|---|---|---|---|{}",
        if settings.split { "---|" } else { "" }
    );
    for w in &windows {
        println!(
            "| {} | {:?} | {:.2} ms | {:.2} ms | {:.1} ms | {:.0} | {:.0}% | {} | {:.2} |{} {:.2} | {:.2} |",
            w.round,
            w.phase,
            w.p50_ms,
            w.p99_ms,
            w.max_ms,
            w.rps,
            w.audit_coverage * 100.0,
            w.scanned,
            w.cpu[0],
            if settings.split {
                format!(" {:.2} |", w.cpu[1])
            } else {
                String::new()
            },
            w.cpu[2],
            w.cpu[3]
        );
    }
    let of = |phase: Phase, f: fn(&Window) -> f64| -> Vec<f64> {
        windows.iter().filter(|w| w.phase == phase).map(f).collect()
    };
    let idle_p99 = median(&of(Phase::Idle, |w| w.p99_ms));
    let audit_p99 = median(&of(Phase::Audit, |w| w.p99_ms));
    let ratios: Vec<f64> = (1..=settings.rounds)
        .filter_map(|r| {
            let idle = windows
                .iter()
                .find(|w| w.round == r && w.phase == Phase::Idle)?;
            let audit = windows
                .iter()
                .find(|w| w.round == r && w.phase == Phase::Audit)?;
            Some(audit.p99_ms / idle.p99_ms)
        })
        .collect();
    println!();
    println!(
        "medians: idle p50 {:.2} ms, p99 {idle_p99:.2} ms; during the audit p50 {:.2} ms, p99 {audit_p99:.2} ms; \
         **p99 ratio {:.2}** (round by round: {}); target ≤ 1.10: {}",
        median(&of(Phase::Idle, |w| w.p50_ms)),
        median(&of(Phase::Audit, |w| w.p50_ms)),
        audit_p99 / idle_p99,
        ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", "),
        if audit_p99 / idle_p99 <= 1.10 {
            "met"
        } else {
            "**missed**"
        }
    );
    println!();
    println!("## kanon at the end");
    println!();
    println!(
        "still running: {alive}; VmRSS {:.1} MiB, VmHWM {:.1} MiB (with the admission load); audits finished {}, \
         objects scanned {}, report writes ok {} / error {}",
        mib(rss_end),
        mib(hwm_end),
        metric(&metrics_end, FINISHED),
        metric(&metrics_end, SCANNED),
        metric(
            &metrics_end,
            "kanon_audit_report_writes_total{outcome=\"ok\"}"
        ),
        metric(
            &metrics_end,
            "kanon_audit_report_writes_total{outcome=\"error\"}"
        ),
    );
    println!(
        "audits: handed over {}, failed {}; the Lease: holder {}, checkpoint: started {}, finished {}, {} kinds done",
        metric(&metrics_end, "kanon_audits_total{outcome=\"handed_over\"}"),
        metric(&metrics_end, "kanon_audits_total{outcome=\"failed\"}"),
        lease["spec"]["holderIdentity"],
        checkpoint["started"],
        checkpoint["finished"],
        checkpoint["done"].as_array().map_or(0, Vec::len)
    );
    println!();
    println!("log lines of the audits:");
    for line in &audit_lines {
        println!("    {line}");
    }
    println!();
    println!("{} WARN/ERROR/panic lines in kanon's log", notable.len());
    for line in notable.iter().take(20) {
        println!("    {line}");
    }
    Ok(())
}
