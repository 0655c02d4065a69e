//! The HTTPS server around the [`admission`](crate::admission) codec, and the plain-HTTP
//! listener of `/metrics` and the health probes.
//!
//! - HTTPS (rustls, the certificate swapped when its resolver reloads it; optionally a client
//!   certificate required) over HTTP/1.1 keep-alive: `POST /mutate`, `POST /validate`,
//!   `GET /healthz`, `GET /readyz` ([`routes`]).
//! - Plain HTTP on its own port, served by a thread of its own so that no load on the webhook
//!   port delays it: `GET /metrics` (OpenMetrics text), `GET /healthz`, `GET /readyz`
//!   ([`probes`]).
//!
//! Everything a client controls is bounded by the server, not by the client:
//! - connections: at most `max_connections`; at the limit a new connection takes the place of
//!   one that has not sent a request yet (oldest first) or has been idle longest, and is
//!   refused only when every connection has a request in progress ([`connection`]);
//! - time: a TLS handshake and a request head within `header_read_timeout`, a body within
//!   `body_timeout`, an answer written within `write_timeout`, a review within its
//!   `?timeout=` clamped to kube-apiserver's own maximum of 30 s ([`timeout`]);
//! - memory: a body up to `max_body_bytes`, all bodies being read together up to
//!   `body_buffer_bytes` (taken before a body is read; a body that arrives slowly gives its
//!   share up to one that is waiting, [`body`]), what a body's JSON takes once read up to
//!   `review_budget` ([`crate::budget`]), and `max_concurrent_reviews` reviews read and
//!   evaluated at once;
//! - CPU: a review is evaluated on the worker that read it for at most a millisecond, the rest
//!   (and all of a large review, or of a namespace whose reviews took longer) on threads of
//!   their own at a lower priority ([`pool`]), so the runtime's workers go on accepting
//!   connections, completing handshakes and reading bodies; with `costly_review_cpu`, the
//!   reviews of a namespace whose recent reviews were costly run in the idle class
//!   ([`cost`]); a
//!   review no policy may select is answered without evaluation ([`crate::triage`]); the
//!   evaluation slots are shared between namespaces in turn, one taking at most half
//!   ([`crate::slot`]), so one tenant's costly policies slow only the reviews they select.
//!
//! On shutdown the listeners close, idle connections are closed, requests in progress finish
//! (their connections then close), bounded by `drain_timeout`.

mod body;
mod connection;
mod cost;
mod eviction;
mod limits;
mod pool;
mod priority;
mod probes;
mod routes;
mod timeout;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use kanon_engine::Lookup;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::admission::{self, Limits};
use crate::budget::JsonBudget;
use crate::metrics::Metrics;
use crate::sandbox::{ProgramSandbox, SandboxConfig};
use crate::slot::Slots;
use crate::state::PolicyState;
use crate::tls::{self, CertResolver, TlsError};

pub use limits::{OpenFileLimit, raise_open_file_limit};
pub use timeout::{MAX_REVIEW_TIMEOUT, parse_go_duration};

use body::BodyBudget;
use connection::{Connections, Timeouts};
use pool::EvaluationPool;
use probes::{Heartbeat, Probes};
use routes::Routes;

/// How the server listens and what it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// The HTTPS address of the webhooks and the health checks.
    pub listen: SocketAddr,
    /// The plain-HTTP address of `/metrics` and the health probes.
    pub metrics_listen: SocketAddr,
    /// When set, a client must present a certificate signed by a CA in this PEM file to
    /// connect to the webhook port (kube-apiserver does when its admission configuration gives
    /// it one for kanon); others fail the TLS handshake.
    pub client_ca: Option<PathBuf>,
    /// The largest review body read; a larger one gets 413.
    pub max_body_bytes: usize,
    /// What a review's JSON may take once read; past it, 413.
    pub review_budget: JsonBudget,
    /// How many bytes of review bodies may be buffered at once, across all connections.
    /// At least `max_body_bytes`.
    pub body_buffer_bytes: usize,
    /// How many reviews are read and evaluated at once; the rest wait (within their timeout).
    /// One namespace's reviews take at most half of them ([`crate::slot`]).
    pub max_concurrent_reviews: usize,
    /// How many connections (both ports each) may be open at once.
    pub max_connections: usize,
    /// How long a TLS handshake, or a request head from its first byte, may take.
    pub header_read_timeout: Duration,
    /// How long a review's body may take to arrive once its head has.
    pub body_timeout: Duration,
    /// How long an answer may wait for the client to read it.
    pub write_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request. Longer than
    /// kube-apiserver's client keeps idle connections (90 s) by default, so the client closes
    /// them first.
    pub idle_timeout: Duration,
    /// The bound on a review when the request carries no `?timeout=`.
    pub default_review_timeout: Duration,
    /// How long shutdown waits for requests in progress.
    pub drain_timeout: Duration,
    /// Answer every review `allowed` without evaluating it: the ceiling the load benchmark
    /// compares kanon with, on the same stack. Never for real use.
    pub allow_all: bool,
    /// Where hand-written programs run: worker processes (see [`crate::sandbox`]), or, when
    /// `None`, the evaluating thread.
    pub sandbox: Option<SandboxConfig>,
    /// When set, the reviews of a namespace whose recent reviews each took more CPU than this
    /// are evaluated in the idle scheduling class ([`pool`]). Off by default: idle-class
    /// threads wait for every other thread of their CPU group, which is kanon's own only in a
    /// container of its own (the chart turns it on).
    pub costly_review_cpu: Option<Duration>,
    /// Whose objects a PolicyException selecting their owner reaches (by default, those
    /// kube-controller-manager's workload controllers write).
    pub owner_trust: kanon_engine::OwnerTrust,
    /// Where each denial, warning and audit-mode finding is logged, when set.
    pub decision_log: Option<Arc<crate::decisions::DecisionLog>>,
    /// Who else hears of each decision (Kubernetes Events in a cluster), after the decision
    /// log.
    pub decision_observers: crate::observer::DecisionObservers,
    /// Which reviews are traced, when trace export is on ([`crate::trace::Tracing::sampling`]).
    pub review_sampling: Option<crate::trace::ReviewSampling>,
}

/// The default of [`ServerConfig::body_buffer_bytes`]: four bodies of the largest size.
pub const DEFAULT_BODY_BUFFER_BYTES: usize = 4 * admission::DEFAULT_MAX_BODY_BYTES;

/// The default of [`ServerConfig::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

impl Default for ServerConfig {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(2, usize::from);
        ServerConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 8443)),
            metrics_listen: SocketAddr::from(([0, 0, 0, 0], 8080)),
            client_ca: None,
            max_body_bytes: admission::DEFAULT_MAX_BODY_BYTES,
            review_budget: JsonBudget::default(),
            body_buffer_bytes: DEFAULT_BODY_BUFFER_BYTES,
            max_concurrent_reviews: (cpus * 2).max(2),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_read_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            default_review_timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(25),
            allow_all: false,
            sandbox: None,
            costly_review_cpu: None,
            owner_trust: kanon_engine::OwnerTrust::default(),
            decision_log: None,
            decision_observers: crate::observer::DecisionObservers::new(),
            review_sampling: None,
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The serving certificate, the client CA, or the TLS configuration.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// An address could not be bound.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        /// Which listener (`webhook`, `metrics`).
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// Loading the client CA stopped abnormally (the task panicked).
    #[error("loading the client CA {} failed: {message}", path.display())]
    ClientCaTask {
        /// The client CA file.
        path: PathBuf,
        /// What the task reported.
        message: String,
    },
    /// The configuration contradicts itself.
    #[error("invalid server configuration: {0}")]
    Config(String),
    /// The thread of the metrics and probe listener could not be started.
    #[error("cannot start the metrics and probe listener's thread: {0}")]
    ProbeThread(io::Error),
    /// The evaluation pool could not be started.
    #[error("cannot start the evaluation pool: {0}")]
    Pool(io::Error),
}

/// A bound server, not yet serving: [`Server::local_addr`] and [`Server::metrics_addr`] tell
/// the ports picked for port 0; [`Server::run`] serves until shutdown.
pub struct Server {
    config: ServerConfig,
    listener: TcpListener,
    metrics_listener: std::net::TcpListener,
    local_addr: SocketAddr,
    metrics_addr: SocketAddr,
    acceptor: TlsAcceptor,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.local_addr)
            .field("metrics_addr", &self.metrics_addr)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Hands every object admitted under a validate policy with the `Audit` action to
    /// `recorder` (the audit reports), from the next review on. Set once; a second call is
    /// ignored.
    pub fn record_admissions(&self, recorder: Arc<dyn kanon_engine::AdmissionRecorder>) {
        if self.shared.recorder.set(recorder).is_err() {
            tracing::warn!("admissions are already recorded; the second recorder is ignored");
        }
    }
}

/// What every webhook request shares.
struct Shared {
    state: Arc<PolicyState>,
    lookup: Arc<dyn Lookup>,
    metrics: Arc<Metrics>,
    reviews: Arc<Slots>,
    /// Where reviews are evaluated: threads apart from the runtime's workers.
    pool: EvaluationPool,
    bodies: Arc<BodyBudget>,
    limits: Limits,
    body_timeout: Duration,
    default_review_timeout: Duration,
    allow_all: bool,
    sandbox: Option<ProgramSandbox>,
    owner_trust: kanon_engine::OwnerTrust,
    /// Who hears of each decision: the decision log, then the configuration's observers.
    observers: crate::observer::DecisionObservers,
    /// Which reviews are traced.
    pub(crate) review_sampling: Option<crate::trace::ReviewSampling>,
    /// Where objects admitted under policies that audit go, when set.
    recorder: std::sync::OnceLock<Arc<dyn kanon_engine::AdmissionRecorder>>,
    /// Whether a review was answered 503 (not ready) yet: the first is logged as a warning,
    /// the rest (kube-apiserver may send hundreds while kanon starts) at debug level.
    warned_not_ready: AtomicBool,
}

impl Server {
    /// Checks the configuration, loads the client CA (when configured) and binds both
    /// listeners. `resolver` serves the certificate; whoever made it reloads it when its files
    /// change ([`CertResolver::reload`]).
    pub async fn bind(
        config: ServerConfig,
        resolver: Arc<CertResolver>,
        state: Arc<PolicyState>,
        lookup: Arc<dyn Lookup>,
        metrics: Arc<Metrics>,
    ) -> Result<Server, ServerError> {
        check(&config)?;
        let client_roots = match config.client_ca.clone() {
            None => None,
            Some(path) => Some(
                tokio::task::spawn_blocking({
                    let path = path.clone();
                    move || tls::load_client_roots(&path)
                })
                .await
                .map_err(|e| ServerError::ClientCaTask {
                    path,
                    message: e.to_string(),
                })??,
            ),
        };
        let acceptor = TlsAcceptor::from(tls::server_config(resolver.clone(), client_roots)?);
        let bind_error = |what, addr| move |source| ServerError::Bind { what, addr, source };
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(bind_error("webhook", config.listen))?;
        let local_addr = listener
            .local_addr()
            .map_err(bind_error("webhook", config.listen))?;
        // Served by a runtime of its own (see `probes`), so a std listener.
        let metrics_listener = std::net::TcpListener::bind(config.metrics_listen)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(bind_error("metrics", config.metrics_listen))?;
        let metrics_addr = metrics_listener
            .local_addr()
            .map_err(bind_error("metrics", config.metrics_listen))?;
        let shared = Arc::new(Shared {
            state,
            lookup,
            bodies: BodyBudget::new(config.body_buffer_bytes, metrics.clone()),
            metrics,
            reviews: Slots::new(config.max_concurrent_reviews),
            pool: EvaluationPool::start(config.max_connections, config.costly_review_cpu)
                .map_err(ServerError::Pool)?,
            limits: Limits {
                max_body_bytes: config.max_body_bytes,
                json: config.review_budget,
            },
            body_timeout: config.body_timeout,
            default_review_timeout: config.default_review_timeout,
            allow_all: config.allow_all,
            review_sampling: config.review_sampling,
            owner_trust: config.owner_trust.clone(),
            observers: {
                let mut observers = crate::observer::DecisionObservers::new();
                if let Some(log) = &config.decision_log {
                    observers.push(log.clone());
                }
                for observer in config.decision_observers.iter() {
                    observers.push(observer.clone());
                }
                observers
            },
            sandbox: config.sandbox.clone().map(ProgramSandbox::new),
            recorder: std::sync::OnceLock::new(),
            warned_not_ready: AtomicBool::new(false),
        });
        Ok(Server {
            config,
            listener,
            metrics_listener,
            local_addr,
            metrics_addr,
            acceptor,
            shared,
        })
    }

    /// The HTTPS address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The metrics address actually bound.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
    }

    /// Serves until `shutdown` resolves; then stops accepting, closes idle connections, lets
    /// requests in progress finish (at most `drain_timeout`) and returns.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
        let Server {
            config,
            listener,
            metrics_listener,
            local_addr,
            metrics_addr,
            acceptor,
            shared,
            ..
        } = self;
        let timeouts = Timeouts {
            header_read: config.header_read_timeout,
            write: config.write_timeout,
            idle: config.idle_timeout,
            drain: config.drain_timeout,
        };
        let (stop, stopped) = watch::channel(false);
        let heartbeat = Heartbeat::start();
        let probes = connection::accept_on_own_thread(
            "kanon-probes",
            metrics_listener,
            Routes::Probes(Arc::new(Probes {
                state: shared.state.clone(),
                metrics: shared.metrics.clone(),
                heartbeat: heartbeat.clone(),
            })),
            Connections::new(probes::MAX_CONNECTIONS, shared.metrics.clone(), "metrics"),
            timeouts,
            stopped.clone(),
        )
        .map_err(ServerError::ProbeThread)?;
        let max_connections =
            limits::connections_within_open_files(config.max_connections, probes::MAX_CONNECTIONS);
        if max_connections < config.max_connections {
            tracing::warn!(
                wanted = config.max_connections,
                max_connections,
                "the open-file limit holds fewer connections than asked for; raise it (ulimit -n) to serve more"
            );
        }
        tracing::info!(
            %local_addr,
            %metrics_addr,
            max_connections,
            client_certificates = config.client_ca.is_some(),
            "serving"
        );
        let connections = Connections::new(max_connections, shared.metrics.clone(), "webhook");
        let webhook = tokio::spawn(connection::accept_loop(
            listener,
            Some(acceptor),
            Routes::Webhook(shared.clone()),
            connections,
            timeouts,
            stopped,
        ));
        shutdown.await;
        tracing::info!("shutting down: draining requests in progress");
        let _ = stop.send(true);
        if let Err(error) = webhook.await {
            tracing::warn!(%error, "the webhook listener's task failed");
        }
        heartbeat.stop();
        if tokio::task::spawn_blocking(move || probes.join())
            .await
            .is_err()
        {
            tracing::warn!("the metrics and probe listener's thread failed");
        }
        tracing::info!("shut down");
        Ok(())
    }
}

/// The bounds that must agree with one another.
fn check(config: &ServerConfig) -> Result<(), ServerError> {
    if config.body_buffer_bytes < config.max_body_bytes {
        return Err(ServerError::Config(format!(
            "the body buffer ({} bytes) must hold at least one body of the largest size ({} bytes)",
            config.body_buffer_bytes, config.max_body_bytes
        )));
    }
    if config.max_connections == 0 {
        return Err(ServerError::Config(
            "at least one connection must be allowed".to_string(),
        ));
    }
    Ok(())
}
