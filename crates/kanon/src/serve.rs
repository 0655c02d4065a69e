//! `kanon serve`: the admission webhook. In a cluster (the default) its policies come from the
//! policy custom resources ([`crate::cluster`]); standalone (`--policies DIR`) they come from
//! files, reloaded on change, with no cluster, and the objects policies look up from
//! `--objects` files ([`crate::objects`]), reloaded the same way.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use kanon_cluster::ClusterMetrics;
use kanon_cluster::certificates::CertificateMetrics;
use kanon_engine::{Lookup, NoObjects, ObjectStore};
use kanon_webhook::metrics::Metrics;
use kanon_webhook::server::{self, ServerConfig};
use kanon_webhook::{PolicyState, Publisher};

use crate::auditor::{AuditFeed, AuditPrograms, AuditStart};
use crate::exceptions::HonouringPublisher;
use crate::objects::{self, LiveObjects};
use kanon_cluster::audit::metrics::AuditMetrics;

/// Log formats.
#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub enum LogFormat {
    /// Readable lines, for a terminal.
    #[default]
    Text,
    /// One JSON object per line, for a cluster's log collector.
    Json,
}

/// Arguments of `kanon serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Standalone mode: serve the policies in this directory (YAML or JSON files, read
    /// recursively), reloaded when they change, with no cluster. Without it the policies come
    /// from the cluster.
    #[arg(long, value_name = "DIR")]
    policies: Option<PathBuf>,
    /// Standalone mode: objects that stand for the cluster (files or directories, read
    /// recursively; repeat for several): Namespaces for namespaceSelector, owners and the
    /// objects `k8s` references read. Reloaded when they change, like the policies. The same
    /// flag as `kanon apply --objects` (`--context` there).
    #[arg(long = "objects", value_name = "PATH", requires = "policies")]
    objects: Vec<PathBuf>,
    #[command(flatten)]
    cluster: crate::cluster::ClusterArgs,
    /// A namespace whose PolicyExceptions are honoured (repeatable; none by default, so that
    /// nobody can exempt themselves until an operator decides who may write exceptions).
    #[arg(long = "exception-namespace", value_name = "NAMESPACE")]
    exception_namespaces: Vec<String>,
    /// A user whose writes of an object owned by a workload count as the workload's, so that a
    /// PolicyException selecting the workload reaches them (repeatable; replaces the default:
    /// kube-controller-manager's workload controllers, `system:serviceaccount:kube-system:
    /// replicaset-controller` and the others, and `system:kube-controller-manager`).
    #[arg(long = "exception-controller-user", value_name = "USER")]
    exception_controller_users: Vec<String>,
    /// Where the serving certificate is: `tls.crt` and `tls.key` are used (and reloaded when
    /// they change); when absent, a CA (`ca.crt`) and a certificate for localhost and
    /// 127.0.0.1 are created there.
    #[arg(long, value_name = "DIR", default_value_os_t = std::env::temp_dir().join("kanon-certs"))]
    cert_dir: PathBuf,
    /// HTTPS address of the webhooks (`/mutate`, `/validate`, `/healthz`, `/readyz`).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8443")]
    listen: SocketAddr,
    /// Plain-HTTP address of `/metrics`.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8080")]
    metrics_listen: SocketAddr,
    /// How often the policy directory is checked for changes, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    reload_interval_ms: u64,
    /// Benchmark ceiling: answer every review `allowed` without evaluating anything (same
    /// server, no engine). Never for real use.
    #[arg(long, hide = true)]
    allow_all: bool,
    /// Log format; the level comes from `RUST_LOG` (default `info`).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(flatten)]
    programs: crate::programs::ProgramArgs,
    #[command(flatten)]
    traces: crate::traces::TraceArgs,
    /// The cluster's name, so that a fleet's data can be merged: on every span
    /// (`k8s.cluster.name`), as the label `kanon.dev/cluster` on the audit's reports, and with
    /// `--metrics-cluster-label` on every metric.
    #[arg(long, value_name = "NAME", value_parser = cluster_name)]
    cluster_name: Option<String>,
    /// Put `cluster="<--cluster-name>"` on every metric (for a Prometheus that gathers several
    /// clusters without adding a label of its own).
    #[arg(long, requires = "cluster_name")]
    metrics_cluster_label: bool,
    /// Log each denial, warning and audit-mode finding as a JSON line (the policy, the request's
    /// uid, operation, kind, namespace and name, the user, the message, the trace id when
    /// traced) to `stdout` or appended to this file, for a SIEM. Off by default.
    #[arg(long, value_name = "stdout|PATH")]
    decision_log: Option<String>,
    /// Require a client certificate on the webhook port, signed by a CA in this PEM file
    /// (kube-apiserver presents one when its admission configuration names a kubeconfig with a
    /// client certificate for kanon). Health probes then go to the metrics port.
    #[arg(long, value_name = "PATH")]
    client_ca_file: Option<PathBuf>,
    /// How many connections the webhook port keeps open at once; at the limit a new one takes
    /// the place of one that has not sent a request yet, or has been idle longest.
    #[arg(long, value_name = "N", default_value_t = server::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// How many reviews are read and evaluated at once, one namespace's at most half of them.
    /// Default: twice the number of CPUs.
    #[arg(long, value_name = "N")]
    max_concurrent_reviews: Option<usize>,
    /// The most memory one review's JSON may take once read, in MiB (about 10 times its size
    /// for an ordinary object, far more for arrays of small values); a larger review is
    /// answered 413, which kube-apiserver treats under the webhook's failurePolicy.
    #[arg(long, value_name = "MIB", default_value_t = kanon_webhook::budget::DEFAULT_REVIEW_MEMORY_BYTES / MIB)]
    max_review_memory_mib: usize,
    /// The most bytes of review bodies buffered at once, across all connections, in MiB (at
    /// least 8, the largest body).
    #[arg(long, value_name = "MIB", default_value_t = server::DEFAULT_BODY_BUFFER_BYTES / MIB)]
    body_buffer_mib: usize,
    /// How long a review's body may take to arrive once its head has, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    body_timeout_ms: u64,
    /// How long an answer may wait for the client to read it, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    write_timeout_ms: u64,
    /// A namespace whose recent reviews each took more CPU than this (a Go duration: `10ms`)
    /// has its next reviews evaluated in the idle scheduling class, so that a tenant's costly
    /// policies compute on what the other namespaces' reviews leave of the CPU. `0` (the
    /// default) turns it off: idle-class threads wait for every busy thread of kanon's CPU
    /// group, which is kanon alone only in a container of its own (the chart sets `10ms`).
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = crate::auditor::go_duration)]
    costly_review_cpu: Duration,
}

const MIB: usize = 1024 * 1024;

/// Runs a program worker (`kanon program-worker`, started by `kanon serve`, `kanon apply` and
/// `kanon test`: [`crate::programs`]) until its standard input closes.
pub fn run_worker() -> ExitCode {
    match kanon_webhook::sandbox::serve_worker() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: kanon program-worker: {e}");
            ExitCode::from(2)
        }
    }
}

/// Logs on stderr (`RUST_LOG`, default `info`), and review spans to the trace exporter when
/// there is one: each layer with its own filter, so that the log level neither hides spans
/// from the exporter nor writes them as log lines.
fn init_logging(format: LogFormat, tracer: Option<opentelemetry_sdk::trace::Tracer>) {
    let _ = tracing::subscriber::set_global_default(subscriber(format, tracer));
}

/// [`init_logging`]'s subscriber. Without a tracer it has no span layer at all: an absent
/// layer (`Option::None`) would want every span, so each review and policy would make a span
/// in the registry that nothing reads (about 7% of a review's CPU).
fn subscriber(
    format: LogFormat,
    tracer: Option<opentelemetry_sdk::trace::Tracer>,
) -> Box<dyn tracing::Subscriber + Send + Sync> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::{Layer, filter};
    let trace_target = kanon_webhook::trace::TARGET;
    let mut logged = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if let Ok(off) = format!("{trace_target}=off").parse() {
        logged = logged.add_directive(off);
    }
    use std::io::IsTerminal;
    // Colours only for a person at a terminal, never in a log file or collector.
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let lines = match format {
        LogFormat::Text => lines.with_filter(logged).boxed(),
        LogFormat::Json => lines.json().with_filter(logged).boxed(),
    };
    let registry = tracing_subscriber::registry().with(lines);
    let Some(tracer) = tracer else {
        return Box::new(registry);
    };
    // Without the source location and busy/idle times of every span: attributes no one
    // reading a review's trace needs, each costing bytes per span.
    let spans = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_tracked_inactivity(false)
        .with_threads(false)
        .with_filter(filter::Targets::new().with_target(trace_target, tracing::Level::TRACE));
    Box::new(registry.with(spans))
}

/// `--cluster-name`: a label value, since reports carry it as one.
fn cluster_name(text: &str) -> Result<String, String> {
    if !text.is_empty() && kanon_engine::is_label_value(text) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "`{text}` is not a label value (1 to 63 letters, digits, `-`, `_` or `.`, beginning and ending with a letter or digit)"
        ))
    }
}

/// The decision log `--decision-log` names: standard output, or a file appended to.
fn open_decision_log(
    target: Option<&str>,
    metrics: &kanon_webhook::decisions::DecisionLogMetrics,
) -> Result<Option<Arc<kanon_webhook::decisions::DecisionLog>>, String> {
    let Some(target) = target else {
        return Ok(None);
    };
    let writer: Box<dyn std::io::Write + Send> = if target == "stdout" {
        Box::new(std::io::stdout())
    } else {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(target)
            .map_err(|e| format!("--decision-log {target}: {e}"))?;
        Box::new(file)
    };
    kanon_webhook::decisions::DecisionLog::to_writer(writer, metrics.clone())
        .map(|log| Some(Arc::new(log)))
        .map_err(|e| format!("--decision-log: cannot start its writer: {e}"))
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("shutting down: draining in-flight reviews");
}

/// The objects of `--objects`, loaded once before the server starts (an error there is a
/// startup error), with the fingerprint their reloads start from; `None` without the flag.
fn load_standalone_objects(
    paths: &[PathBuf],
) -> Result<Option<(ObjectStore, crate::poll::Fingerprint)>, String> {
    if paths.is_empty() {
        return Ok(None);
    }
    if paths.iter().any(|p| p == Path::new("-")) {
        return Err(
            "--objects -: standard input cannot be watched for changes; give files or directories"
                .into(),
        );
    }
    // Taken before loading, so that a change made while loading is seen by the first check.
    let print = objects::fingerprint(paths);
    let store = objects::load_objects(paths).map_err(|e| format!("--objects: {e}"))?;
    Ok(Some((store, print)))
}

/// Runs `kanon serve` until SIGTERM; exit status 2 on bad arguments or a server that cannot
/// start.
pub fn run(args: &ServeArgs) -> ExitCode {
    if let Some(dir) = &args.policies
        && !dir.is_dir()
    {
        eprintln!("error: --policies {}: not a directory", dir.display());
        return ExitCode::from(2);
    }
    // One crypto provider for the whole process, chosen before any TLS configuration exists.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let standalone_objects = match load_standalone_objects(&args.objects) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    // Trace export runs on this runtime; its metrics are served whether it is on or not.
    let trace_metrics = kanon_webhook::trace::TraceMetrics::default();
    let tracing_export = {
        let _entered = runtime.enter();
        match args
            .traces
            .start(args.cluster_name.as_deref(), trace_metrics.clone())
        {
            Ok(tracing) => tracing,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    };
    init_logging(args.log_format, tracing_export.as_ref().map(|t| t.tracer()));
    let decision_metrics = kanon_webhook::decisions::DecisionLogMetrics::default();
    let decision_log = match open_decision_log(args.decision_log.as_deref(), &decision_metrics) {
        Ok(log) => log,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(tracing) = &tracing_export {
        tracing::info!(
            endpoint = %tracing.endpoint,
            protocol = ?tracing.protocol,
            "exporting traces of reviews over OTLP"
        );
    }
    let sandbox = match args.programs.sandbox_config() {
        Ok(sandbox) => sandbox,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let sandbox_for_audit = sandbox.clone();
    let defaults = ServerConfig::default();
    let config = ServerConfig {
        listen: args.listen,
        metrics_listen: args.metrics_listen,
        client_ca: args.client_ca_file.clone(),
        review_budget: kanon_webhook::JsonBudget {
            memory_bytes: args.max_review_memory_mib.saturating_mul(MIB),
            ..defaults.review_budget
        },
        body_buffer_bytes: args.body_buffer_mib.saturating_mul(MIB),
        max_concurrent_reviews: args
            .max_concurrent_reviews
            .unwrap_or(defaults.max_concurrent_reviews),
        max_connections: args.max_connections,
        body_timeout: Duration::from_millis(args.body_timeout_ms.max(1)),
        write_timeout: Duration::from_millis(args.write_timeout_ms.max(1)),
        allow_all: args.allow_all,
        sandbox,
        costly_review_cpu: (!args.costly_review_cpu.is_zero()).then_some(args.costly_review_cpu),
        owner_trust: if args.exception_controller_users.is_empty() {
            kanon_engine::OwnerTrust::default()
        } else {
            kanon_engine::OwnerTrust::WrittenBy(args.exception_controller_users.clone().into())
        },
        decision_log,
        review_sampling: tracing_export.as_ref().map(|tracing| tracing.sampling),
        ..defaults
    };
    if let Err(error) = crate::allocator::return_freed_memory() {
        tracing::warn!(%error, "cannot start the thread that returns freed memory to the OS");
    }
    // Connections are bounded by the cap above, not by a soft limit of 1024 descriptors.
    match server::raise_open_file_limit() {
        Ok(limit) if limit.now > limit.was => {
            tracing::info!(
                was = limit.was,
                now = limit.now,
                "raised the open-file limit"
            );
        }
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, "cannot raise the open-file limit"),
    }
    let metric_labels: Vec<(String, String)> =
        match (&args.cluster_name, args.metrics_cluster_label) {
            (Some(name), true) => vec![("cluster".to_owned(), name.clone())],
            _ => Vec::new(),
        };
    let metric_options = kanon_webhook::metrics::MetricsOptions {
        labels: metric_labels,
        // Review durations link a traced review's trace (exemplars) when traces are exported.
        trace_exemplars: tracing_export.is_some(),
    };
    let interval = Duration::from_millis(args.reload_interval_ms.max(50));
    let result = runtime.block_on(async move {
        let mut config = config;
        let state = PolicyState::new();
        let lookup: Arc<dyn Lookup>;
        let metrics;
        let mut recorder = None;
        match &args.policies {
            Some(dir) => {
                kanon_certificates::directory::ensure(&args.cert_dir).map_err(|e| e.to_string())?;
                metrics = Metrics::configured(metric_options.clone(), |registry| {
                    trace_metrics.register(registry);
                    decision_metrics.register(registry);
                });
                let publisher = HonouringPublisher {
                    inner: Arc::new(Publisher::new(state.clone(), metrics.clone(), "directory")),
                    namespaces: args.exception_namespaces.clone(),
                };
                tokio::spawn(crate::policy_dir::watch_directory(
                    dir.clone(),
                    Arc::new(publisher),
                    interval,
                ));
                lookup = match standalone_objects {
                    Some((store, print)) => {
                        tracing::info!(objects = store.len(), "objects loaded");
                        let live = Arc::new(LiveObjects::new(store));
                        tokio::spawn(objects::watch_objects(
                            args.objects.clone(),
                            live.clone(),
                            interval,
                            print,
                        ));
                        live
                    }
                    None => Arc::new(NoObjects),
                };
            }
            None => {
                let cluster_metrics = ClusterMetrics::new();
                let certificate_metrics = CertificateMetrics::new();
                let audit_metrics = AuditMetrics::new();
                let event_metrics = kanon_cluster::events::EventMetrics::new();
                metrics = Metrics::configured(metric_options.clone(), |registry| {
                    cluster_metrics.register(registry);
                    certificate_metrics.register(registry);
                    audit_metrics.register(registry);
                    trace_metrics.register(registry);
                    decision_metrics.register(registry);
                    event_metrics.register(registry);
                });
                // The certificate the server starts with: kept in the Secret, or the files.
                let ca_bundle = crate::cluster::prepare_certificates(
                    &args.cluster,
                    &args.cert_dir,
                    certificate_metrics,
                )
                .await
                .map_err(|e| e.to_string())?;
                let (audit_sender, audit_policies) = tokio::sync::watch::channel(None);
                let publisher = Arc::new(HonouringPublisher {
                    inner: Arc::new(AuditFeed {
                        inner: Arc::new(Publisher::new(state.clone(), metrics.clone(), "cluster")),
                        state: state.clone(),
                        sender: audit_sender,
                    }),
                    namespaces: args.exception_namespaces.clone(),
                });
                let audit = AuditStart {
                    policies: audit_policies,
                    programs: sandbox_for_audit.map(|config| {
                        Arc::new(AuditPrograms::new(config, Duration::from_secs(10)))
                            as Arc<dyn kanon_engine::ProgramHost>
                    }),
                    metrics: audit_metrics,
                    cluster: args.cluster_name.as_deref().map(Arc::from),
                };
                let started = crate::cluster::start(
                    &args.cluster,
                    &args.exception_namespaces,
                    publisher,
                    ca_bundle,
                    cluster_metrics,
                    audit,
                    event_metrics,
                )
                .await
                .map_err(|e| e.to_string())?;
                lookup = started.lookup;
                recorder = started.recorder;
                if let Some(events) = started.events {
                    let kinds = events.kinds();
                    if kinds.deny || kinds.warn {
                        config
                            .decision_observers
                            .push(Arc::new(crate::events::AdmissionEvents(events)));
                    }
                }
            }
        }
        // Written above, by kanon or by whoever keeps them (cert-manager).
        let resolver =
            crate::certificate_files::serve_from(&args.cert_dir).map_err(|e| e.to_string())?;
        let server = server::Server::bind(config, resolver, state, lookup, metrics)
            .await
            .map_err(|e| e.to_string())?;
        if let Some(recorder) = recorder {
            server.record_admissions(recorder);
        }
        server
            .run(shutdown_signal())
            .await
            .map_err(|e| e.to_string())
    });
    if let Some(tracing) = tracing_export {
        runtime.block_on(tracing.shutdown(Duration::from_secs(2)));
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_tracer_no_span_is_made_for_reviews_or_policies() {
        tracing::subscriber::with_default(subscriber(LogFormat::Text, None), || {
            let review = tracing::info_span!(target: kanon_webhook::trace::TARGET, "review");
            assert!(review.is_disabled(), "a review span with no exporter");
            let policy = tracing::info_span!(target: kanon_engine::TRACE_TARGET, "policy");
            assert!(policy.is_disabled(), "a policy span with no exporter");
            assert!(tracing::Span::current().is_none());
        });
    }
}
