//! The background audit of `kanon serve` in a cluster: its flags ([`AuditArgs`]), what it needs
//! from the server ([`AuditStart`]: the policy sets it publishes, where programs run), the
//! recorder of admitted objects, and the thread they run on ([`in_background`]). The audit
//! itself is `kanon_cluster::audit`.

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use kanon_cluster::audit::admitted::AdmittedReports;
use kanon_cluster::audit::metrics::AuditMetrics;
use kanon_cluster::audit::{AuditConfig, Auditor};
use kanon_engine::Program;
use kanon_engine::{Lookup, PolicyPublisher, PolicySet};
use kanon_engine::{ProgramFuture, ProgramHost, ProgramInput};
use kanon_webhook::PolicyState;
use kanon_webhook::sandbox::{ProgramSandbox, SandboxConfig};
use tokio::sync::watch;

/// The audit flags of `kanon serve` in a cluster.
#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// Do not audit the objects that already exist (nor write reports).
    #[arg(long)]
    no_audit: bool,
    /// How often the existing objects are audited, as a duration (`1h`, `30m`); `0` audits
    /// only when policies change. One replica audits at a time (the Lease `kanon-audit` in
    /// `--namespace`).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = go_duration)]
    audit_interval: Duration,
    /// How often an audit under way writes the reports of what it has read and saves its
    /// checkpoint in the Lease, as a duration; an audit interrupted (a restart, a lost Lease)
    /// resumes from the last checkpoint. Shorter: less read again, more report writes.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = go_duration)]
    audit_checkpoint_interval: Duration,
    /// The share of one CPU the audit may use (`0.05`: a twentieth): after each page it rests
    /// in proportion to the CPU the page cost. `1`: no limit.
    #[arg(long, value_name = "SHARE", default_value_t = 0.05, value_parser = parse_share)]
    audit_cpu: f64,
    #[command(flatten)]
    reading: ReadingArgs,
    /// List in the reports the results of objects a controller made from a workload whose
    /// result stands for them too (a Deployment's ReplicaSets and Pods, found as its pod
    /// template was). Without it they are counted in the summary only, the workload's result
    /// listed once.
    #[arg(long)]
    report_owned_results: bool,
    /// List passes among the reports' results too (least urgent, within
    /// `--report-max-results`), for dashboards that count listed results. Without it passes
    /// are counted in the summary only.
    #[arg(long)]
    report_passes: bool,
    /// This replica's name in the audit Lease (the chart sets the Pod's name).
    #[arg(long, env = "POD_NAME", value_name = "NAME")]
    audit_identity: Option<String>,
}

/// How an audit reads the cluster and how large its reports grow: the same flags for
/// `kanon serve` and `kanon audit`.
#[derive(Debug, Clone, Args)]
pub struct ReadingArgs {
    /// The most LIST requests per second the audit sends the apiserver.
    #[arg(long, value_name = "QPS", default_value_t = 10.0)]
    pub audit_qps: f64,
    /// Objects per LIST request of the audit, at most.
    #[arg(long, value_name = "N", default_value_t = 500)]
    pub audit_page_size: u32,
    /// The most MiB of response one LIST request of the audit may take (a page is held while
    /// it is judged): pages of large objects hold fewer of them.
    #[arg(long, value_name = "MIB", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub audit_page_mib: u32,
    /// The most results an audit report holds (its summary counts all of them).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    report_max_results: usize,
}

impl ReadingArgs {
    /// The most bytes of response one LIST request of the audit may take.
    pub fn page_bytes(&self) -> usize {
        (self.audit_page_mib as usize).saturating_mul(1024 * 1024)
    }

    /// The most results a report holds (at least one).
    pub fn max_results(&self) -> usize {
        self.report_max_results.max(1)
    }
}

fn parse_share(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(share) if share > 0.0 && share <= 1.0 => Ok(share),
        _ => Err(format!(
            "`{text}` is not a share of one CPU (a number above 0, at most 1; e.g. 0.25)"
        )),
    }
}

/// A flag's Go duration (`10ms`, `90s`, `1h`, `0`), or what is wrong with it.
pub(crate) fn go_duration(text: &str) -> Result<Duration, String> {
    kanon_webhook::server::parse_go_duration(text)
        .ok_or_else(|| format!("`{text}` is not a duration (e.g. 10ms, 90s, 30m, 1h, 0)"))
}

/// What the background audit needs from the server: the policy sets it publishes, and where
/// programs run.
pub struct AuditStart {
    /// The policy set in force.
    pub policies: watch::Receiver<Option<Arc<PolicySet>>>,
    /// Where hand-written programs run.
    pub programs: Option<Arc<dyn ProgramHost>>,
    /// The audit's metrics.
    pub metrics: AuditMetrics,
    /// The cluster's name (`--cluster-name`), labelled on the reports.
    pub cluster: Option<Arc<str>>,
}

impl AuditArgs {
    /// What the reports list.
    fn listing(&self, cluster: Option<Arc<str>>) -> kanon_cluster::audit::book::Listing {
        kanon_cluster::audit::book::Listing {
            max_results: self.reading.max_results(),
            owned: self.report_owned_results,
            passes: self.report_passes,
            cluster,
        }
    }

    /// Whether the audit is off.
    pub fn disabled(&self) -> bool {
        self.no_audit
    }

    /// How often the existing objects are audited; `None`: only when policies change.
    pub fn interval(&self) -> Option<Duration> {
        (!self.audit_interval.is_zero()).then_some(self.audit_interval)
    }

    /// The auditor these flags describe, holding its Lease in `namespace`, judging what the
    /// ValidatingWebhookConfiguration `webhook_configuration` reaches (everything: `None`).
    pub fn auditor(
        &self,
        client: kube::Client,
        namespace: &str,
        webhook_configuration: Option<String>,
        lookup: Arc<dyn Lookup>,
        start: AuditStart,
    ) -> Auditor {
        let identity = self.audit_identity.clone().unwrap_or_else(|| {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "kanon".to_string());
            format!("{host}-{}", std::process::id())
        });
        Auditor {
            client,
            config: AuditConfig {
                namespace: namespace.to_string(),
                identity,
                interval: (!self.audit_interval.is_zero()).then_some(self.audit_interval),
                qps: self.reading.audit_qps,
                cpu: self.audit_cpu,
                page_size: self.reading.audit_page_size,
                page_bytes: self.reading.page_bytes(),
                max_results: self.reading.max_results(),
                owned_results: self.report_owned_results,
                passes: self.report_passes,
                cluster: start.cluster.clone(),
                checkpoint_every: self.audit_checkpoint_interval,
                webhook_configuration,
                ..AuditConfig::default()
            },
            policies: start.policies,
            lookup,
            programs: start.programs,
            metrics: start.metrics,
            events: None,
        }
    }
}

impl AuditArgs {
    /// The recorder of admitted objects in the reports: the queue the server records into,
    /// and the task that writes what it receives.
    pub fn admitted_reports(
        &self,
        client: kube::Client,
        lookup: Arc<dyn Lookup>,
        start: &AuditStart,
    ) -> AdmittedReports {
        AdmittedReports {
            client,
            policies: start.policies.clone(),
            lookup,
            programs: start.programs.clone(),
            listing: self.listing(start.cluster.clone()),
            batch: Duration::from_secs(1),
        }
    }
}

/// A publisher that, after each set is put in force, hands the set in force to the auditor.
pub struct AuditFeed {
    /// The server's publisher.
    pub inner: Arc<dyn PolicyPublisher>,
    /// The server's policy state, which holds the set once published.
    pub state: Arc<PolicyState>,
    /// Where the auditor reads it.
    pub sender: watch::Sender<Option<Arc<PolicySet>>>,
}

impl PolicyPublisher for AuditFeed {
    fn publish(&self, set: PolicySet, change: &str) {
        self.inner.publish(set, change);
        self.sender.send_replace(Some(self.state.current()));
    }

    fn reject(&self, problems: &[String]) {
        self.inner.reject(problems);
    }
}

/// Hand-written programs of the audit: its own small pool of workers, each program bounded
/// in time as a review's would be.
pub struct AuditPrograms {
    sandbox: ProgramSandbox,
    timeout: Duration,
}

impl AuditPrograms {
    /// A pool of one worker started as `config` says, each program given `timeout`.
    pub fn new(config: SandboxConfig, timeout: Duration) -> Self {
        AuditPrograms {
            sandbox: ProgramSandbox::new(SandboxConfig {
                workers: 1,
                ..config
            }),
            timeout,
        }
    }
}

impl ProgramHost for AuditPrograms {
    fn run<'a>(&'a self, program: &'a Program, input: ProgramInput) -> ProgramFuture<'a> {
        let until = tokio::time::Instant::now() + self.timeout;
        Box::pin(self.sandbox.run_until(program, input, until))
    }
}

/// Runs `work` (the auditor and the admission recorder) on a thread of its own, at the lowest
/// CPU priority, with a client of its own made from `config` on that thread: judging a whole
/// cluster is CPU work that must never hold a review waiting, so it gets only what admission
/// leaves, and the pages it reads are received, decrypted and decoded there too. Its lookups go
/// through the same caches as admission's.
pub fn in_background<F>(config: kube::Config, work: impl FnOnce(kube::Client) -> F + Send + 'static)
where
    F: std::future::Future<Output = ()>,
{
    let started = std::thread::Builder::new()
        .name("kanon-audit".to_string())
        .spawn(move || {
            lower_priority();
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(error) => {
                    tracing::error!(%error, "the audit cannot start its runtime; no audit runs");
                    return;
                }
            };
            runtime.block_on(async move {
                match kube::Client::try_from(config) {
                    Ok(client) => work(client).await,
                    Err(error) => {
                        tracing::error!(%error, "the audit cannot make its client; no audit runs")
                    }
                }
            });
        });
    if let Err(error) = started {
        tracing::error!(%error, "the audit cannot start its thread; no audit runs");
    }
}

/// Puts the calling thread in the `SCHED_IDLE` class: it runs on what the other threads leave,
/// and a thread that wakes to answer a review preempts it at once (at nice 19 alone, the
/// scheduler lets it finish its slice first, milliseconds a review would wait). Where that
/// class is refused, nice 19. Linux applies both to the one thread whose id it is given.
fn lower_priority() {
    // SAFETY: gettid, sched_setscheduler and setpriority have no memory-safety preconditions
    // beyond the parameter read through its reference, a local that outlives the call.
    let idle = unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(libc::gettid(), libc::SCHED_IDLE, &param)
    };
    if idle == 0 {
        return;
    }
    // SAFETY: as above.
    let result = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19)
    };
    if result != 0 {
        tracing::warn!(
            error = %std::io::Error::last_os_error(),
            "the audit runs at normal priority: its thread's priority cannot be lowered"
        );
    }
}
