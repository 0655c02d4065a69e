//! What every phase shares: kanon as the chart runs it (its flags from the chart's values, in a
//! memory cgroup limited to the chart's derived limit, so that the kernel kills it where the
//! Pod's container would be killed), a tenant's policy put in force, reviews POSTed straight to
//! its webhook port all at once (curl, kanon's CA), and what kanon's memory did meanwhile.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use kanon_control_plane::kanon::{Cluster, Kanon, policy_in_force, process_sample, repo};
use serde_json::{Value, json};

const MIB: f64 = (1 << 20) as f64;

/// kanon as one phase runs it.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    /// kanon's binary (a release build).
    pub(crate) binary: String,
    /// A name for this run (kanon's log and cgroup are named after it).
    pub(crate) name: String,
    /// `kanon serve` flags after the kit's own: the chart's values.
    pub(crate) settings: Vec<String>,
    /// The memory cgroup's limit, in bytes: the chart's derived limit.
    pub(crate) memory_limit: u64,
}

/// Starts kanon as `run` says, puts `policy` (a namespaced policy of the tenant) in force, sends
/// `reviews` at once, and stops kanon; the policy is deleted again.
pub(crate) fn flood(
    cluster: &Cluster,
    run: &Run,
    policy: &Value,
    reviews: &[Value],
) -> Result<Figures> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut tenant = Tenant::start(cluster, run, policy)?;
    let kanon = &mut tenant.kanon;

    let pid = kanon.pid().context("kanon runs")?;
    let idle = process_sample(pid).context("kanon's memory")?;
    let sampler = Sampler::start(pid);
    let answers = send_at_once(kanon, cluster.dir(), reviews)?;
    // What reviews let go comes back within a second (mimalloc purges each second).
    std::thread::sleep(Duration::from_secs(2));
    let peak_sampled_kb = sampler.stop();
    let survived = kanon.running();
    let hwm_kb = process_sample(pid).map_or(0, |s| s.hwm_kb);
    let memory = kanon.memory().context("kanon's memory cgroup")?;
    let figures = Figures {
        idle_rss_mib: idle.rss_kb as f64 / 1024.0,
        peak_rss_mib: hwm_kb.max(peak_sampled_kb) as f64 / 1024.0,
        cgroup_peak_mib: memory.peak()? as f64 / MIB,
        limit_mib: memory.limit() as f64 / MIB,
        oom_kills: memory.oom_kills()?,
        survived,
        slowest: answers.iter().map(|a| a.took).max().unwrap_or_default(),
        denial: answers.iter().find_map(|a| a.denial.clone()),
        answers: answers.iter().fold(BTreeMap::new(), |mut m, a| {
            *m.entry(a.outcome.clone()).or_insert(0) += 1;
            m
        }),
    };
    tenant.stop(cluster)?;
    Ok(figures)
}

/// kanon as a phase runs it, with one policy of the tenant in force.
pub(crate) struct Tenant {
    pub(crate) kanon: Kanon,
    /// The policy's namespace and resource (`validatepolicies.policy.kanon.dev/NAME`).
    namespace: String,
    resource: String,
}

impl Tenant {
    /// Starts kanon as `run` says and puts `policy` (a namespaced policy of the tenant) in
    /// force, replacing any policy of that name left by an earlier run.
    pub(crate) fn start(cluster: &Cluster, run: &Run, policy: &Value) -> Result<Tenant> {
        let text = |p: &str| {
            policy
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let (namespace, name) = (text("/metadata/namespace"), text("/metadata/name"));
        let kind = kanon_api::PolicyKind::from_kind(text("/kind"))
            .with_context(|| format!("{} is not a policy kind", text("/kind")))?;
        let resource = format!("{}.{}/{name}", kind.plural(), kanon_api::GROUP);
        cluster.kubectl(&["delete", "--ignore-not-found", "-n", namespace, &resource])?;
        let mut kanon = cluster
            .kanon(&run.binary, &run.name)?
            .with_settings(&run.settings)
            .with_memory_limit(run.memory_limit)?;
        kanon.start()?;
        cluster.apply(policy)?;
        wait_in_force(cluster, namespace, &resource)?;
        Ok(Tenant {
            kanon,
            namespace: namespace.to_owned(),
            resource,
        })
    }

    /// Stops kanon and deletes the policy.
    pub(crate) fn stop(mut self, cluster: &Cluster) -> Result<()> {
        self.kanon.stop();
        cluster.kubectl(&[
            "delete",
            "--ignore-not-found",
            "-n",
            &self.namespace,
            &self.resource,
        ])?;
        Ok(())
    }
}

/// What it measured.
#[derive(Debug, Clone)]
pub(crate) struct Figures {
    /// kanon's RSS once ready with the policy in force, MiB.
    pub(crate) idle_rss_mib: f64,
    /// kanon's peak RSS (VmHWM; the sampled maximum if it was killed), MiB.
    pub(crate) peak_rss_mib: f64,
    /// The cgroup's peak (kanon and its program workers, as the kernel counts against the
    /// limit), MiB.
    pub(crate) cgroup_peak_mib: f64,
    /// The cgroup's limit, MiB.
    pub(crate) limit_mib: f64,
    /// Processes the kernel killed for crossing the limit.
    pub(crate) oom_kills: u64,
    /// Whether kanon still ran after the reviews.
    pub(crate) survived: bool,
    /// Answers by outcome: `allowed`, `denied`, or `HTTP <code>` (`000`: none).
    pub(crate) answers: BTreeMap<String, usize>,
    /// The slowest answer.
    pub(crate) slowest: Duration,
    /// The first denial's message.
    pub(crate) denial: Option<String>,
}

impl Figures {
    /// One line for a table.
    pub(crate) fn line(&self) -> String {
        let answers: Vec<String> = self
            .answers
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        format!(
            "RSS {:.0} → {:.0} MiB, cgroup peak {:.0} of {:.0} MiB, OOM kills {}, {}; answers: {} (slowest {:.2} s)",
            self.idle_rss_mib,
            self.peak_rss_mib,
            self.cgroup_peak_mib,
            self.limit_mib,
            self.oom_kills,
            if self.survived {
                "kanon up"
            } else {
                "kanon gone"
            },
            answers.join(", "),
            self.slowest.as_secs_f64(),
        )
    }
}

/// Waits until kanon has `resource` (`validatepolicies.policy.kanon.dev/NAME`) in force.
pub(crate) fn wait_in_force(cluster: &Cluster, namespace: &str, resource: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = cluster.kubectl(&["get", "-n", namespace, resource, "-o", "json"])?;
        let policy: Value = serde_json::from_slice(&out.stdout)?;
        if policy_in_force(&policy)? {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "the policy is not in force: {policy}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A Pod CREATE review in `namespace`.
pub(crate) fn review(namespace: &str) -> Result<Value> {
    let path = repo().join("fixtures/admission-reviews/pod-create.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut review: Value = serde_json::from_str(&text)?;
    review["request"]["namespace"] = json!(namespace);
    review["request"]["object"]["metadata"]["namespace"] = json!(namespace);
    Ok(review)
}

pub(crate) struct Answer {
    outcome: String,
    denial: Option<String>,
    took: Duration,
}

/// `n` copies of `review` (each its own uid) POSTed to kanon's `/validate` at once.
fn send_at_once(kanon: &Kanon, dir: &Path, reviews: &[Value]) -> Result<Vec<Answer>> {
    let ca = kanon.cert_dir.join("ca.crt");
    let mut running: Vec<(Child, std::path::PathBuf)> = Vec::new();
    for (i, review) in reviews.iter().enumerate() {
        let mut review = review.clone();
        review["request"]["uid"] = json!(format!("tenants-{i}"));
        let body = dir.join(format!("tenants-review-{i}.json"));
        let answer = dir.join(format!("tenants-answer-{i}.json"));
        std::fs::write(&body, serde_json::to_vec(&review)?)?;
        let child = Command::new("curl")
            .args(["-s", "--max-time", "15", "-o"])
            .arg(&answer)
            .args(["-w", "%{http_code} %{time_total}", "--cacert"])
            .arg(&ca)
            .args(["-H", "Content-Type: application/json", "--data-binary"])
            .arg(format!("@{}", body.display()))
            .arg(kanon.url("/validate?timeout=10s"))
            .stdout(Stdio::piped())
            .spawn()
            .context("curl")?;
        running.push((child, answer));
    }
    let mut answers = Vec::new();
    for (child, answer) in running {
        let out = child.wait_with_output()?;
        let written = String::from_utf8_lossy(&out.stdout).into_owned();
        let (code, took) = written.split_once(' ').unwrap_or(("000", "0"));
        let took = Duration::from_secs_f64(took.trim().parse().unwrap_or(0.0));
        let body: Value = std::fs::read(&answer)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(Value::Null);
        let (outcome, denial) = match (code, body["response"]["allowed"].as_bool()) {
            ("200", Some(true)) => ("allowed".to_string(), None),
            ("200", Some(false)) => (
                "denied".to_string(),
                body["response"]["status"]["message"]
                    .as_str()
                    .map(str::to_string),
            ),
            (code, _) => (format!("HTTP {code}"), None),
        };
        answers.push(Answer {
            outcome,
            denial,
            took,
        });
    }
    if answers.is_empty() {
        bail!("no review was sent");
    }
    Ok(answers)
}

/// kanon's RSS sampled every 10 ms, for the peak of a process the kernel may kill.
struct Sampler {
    stop: Arc<AtomicBool>,
    peak_kb: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl Sampler {
    fn start(pid: u32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak_kb = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, peak_kb) = (stop.clone(), peak_kb.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(sample) = process_sample(pid) {
                        peak_kb.fetch_max(sample.rss_kb.max(sample.hwm_kb), Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        Sampler {
            stop,
            peak_kb,
            thread,
        }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        self.peak_kb.load(Ordering::Relaxed)
    }
}
