//! The HTTPS server around the [`admission`](crate::admission) codec, and the plain-HTTP
//! metrics listener.
//!
//! - HTTPS (rustls, the certificate re-read when its files change) over HTTP/1.1 keep-alive:
//!   `POST /mutate`, `POST /validate`, `GET /healthz`, `GET /readyz`.
//! - Plain HTTP on its own port: `GET /metrics` (OpenMetrics text).
//!
//! A review's body is read up to `max_body_bytes` (past it: 413, without reading on); then it
//! waits for one of `max_concurrent_reviews` permits and is evaluated on the connection's own task.
//! The request's `?timeout=` (kube-apiserver sends it; else `default_review_timeout`) bounds
//! the whole: past it the answer is a 500 saying the review timed out.
//!
//! Connection timeouts are kanon's own rather than hyper's `header_read_timeout`, whose timer
//! also runs while a keep-alive connection waits for its next request (so it would close idle
//! connections after the header timeout, earlier than kube-apiserver's client, which would
//! then see a POST fail on a connection the server just closed):
//! - a request head (or the TLS handshake) must arrive within `header_read_timeout` of its
//!   first byte (of the connection's start), else the connection is closed;
//! - a connection with no request in progress is closed after `idle_timeout`.
//!
//! On shutdown the listeners close, idle connections are closed, requests in progress finish
//! (their connections then close), bounded by `drain_timeout`.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use kanon_engine::Lookup;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::admission::{self, Reply, Webhook};
use crate::lookup::BoundedLookup;
use crate::metrics::{self, Metrics};
use crate::sandbox::{ProgramSandbox, SandboxConfig};
use crate::slot::Slot;
use crate::state::PolicyState;
use crate::tls::{self, CertPaths, CertResolver, TlsError};

/// How the server listens and what it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// The HTTPS address of the webhooks and the health checks.
    pub listen: SocketAddr,
    /// The plain-HTTP address of `/metrics`.
    pub metrics_listen: SocketAddr,
    /// Where `tls.crt` and `tls.key` are (created, with a CA, when absent).
    pub cert_dir: PathBuf,
    /// The largest review body read; a larger one gets 413.
    pub max_body_bytes: usize,
    /// How many reviews are evaluated at once; the rest wait (within their timeout).
    pub max_concurrent_reviews: usize,
    /// How long a TLS handshake, or a request head from its first byte, may take.
    pub header_read_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request. Longer than
    /// kube-apiserver's client keeps idle connections (90 s) by default, so the client closes
    /// them first.
    pub idle_timeout: Duration,
    /// The bound on a review when the request carries no `?timeout=`.
    pub default_review_timeout: Duration,
    /// How often the certificate files are checked for a change.
    pub cert_reload_interval: Duration,
    /// How long shutdown waits for requests in progress.
    pub drain_timeout: Duration,
    /// Answer every review `allowed` without evaluating it: the ceiling the load benchmark
    /// compares kanon with, on the same stack. Never for real use.
    pub allow_all: bool,
    /// Where hand-written programs run: worker processes (see [`crate::sandbox`]), or, when
    /// `None`, the evaluating thread.
    pub sandbox: Option<SandboxConfig>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(2, usize::from);
        ServerConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 8443)),
            metrics_listen: SocketAddr::from(([0, 0, 0, 0], 8080)),
            cert_dir: PathBuf::from("/etc/kanon/certs"),
            max_body_bytes: admission::DEFAULT_MAX_BODY_BYTES,
            max_concurrent_reviews: (cpus * 2).max(2),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            default_review_timeout: Duration::from_secs(10),
            cert_reload_interval: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(25),
            allow_all: false,
            sandbox: None,
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The certificate directory or its files.
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
    /// Loading the certificates from `dir` stopped abnormally (the task panicked).
    #[error("loading the certificates in {dir} failed: {message}")]
    CertificateTask {
        /// The certificate directory.
        dir: PathBuf,
        /// What the task reported.
        message: String,
    },
}

/// A bound server, not yet serving: [`Server::local_addr`] and [`Server::metrics_addr`] tell
/// the ports picked for port 0; [`Server::run`] serves until shutdown.
pub struct Server {
    config: ServerConfig,
    listener: TcpListener,
    metrics_listener: TcpListener,
    local_addr: SocketAddr,
    metrics_addr: SocketAddr,
    cert_paths: CertPaths,
    resolver: Arc<CertResolver>,
    acceptor: TlsAcceptor,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.local_addr)
            .field("metrics_addr", &self.metrics_addr)
            .field("cert_paths", &self.cert_paths)
            .finish_non_exhaustive()
    }
}

/// Serves until `shutdown` resolves, then drains: [`Server::bind`] and [`Server::run`].
pub async fn serve(
    config: ServerConfig,
    state: Arc<PolicyState>,
    lookup: Arc<dyn Lookup>,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    Server::bind(config, state, lookup, metrics)
        .await?
        .run(shutdown)
        .await
}

/// What every request handler shares.
struct Shared {
    state: Arc<PolicyState>,
    lookup: Arc<dyn Lookup>,
    metrics: Arc<Metrics>,
    reviews: Arc<Semaphore>,
    max_body_bytes: usize,
    default_review_timeout: Duration,
    allow_all: bool,
    sandbox: Option<ProgramSandbox>,
    /// Whether a review was answered 503 (not ready) yet: the first is logged as a warning,
    /// the rest (kube-apiserver may send hundreds while kanon starts) at debug level.
    warned_not_ready: AtomicBool,
}

/// Connection timeouts.
#[derive(Clone, Copy)]
struct Timeouts {
    header_read: Duration,
    idle: Duration,
    drain: Duration,
}

impl Server {
    /// Ensures the certificates (creating them when absent), loads them and binds both
    /// listeners.
    pub async fn bind(
        config: ServerConfig,
        state: Arc<PolicyState>,
        lookup: Arc<dyn Lookup>,
        metrics: Arc<Metrics>,
    ) -> Result<Server, ServerError> {
        let cert_dir = config.cert_dir.clone();
        let (cert_paths, resolver) = tokio::task::spawn_blocking(move || {
            let paths = tls::ensure_certificates(&cert_dir)?;
            let resolver = CertResolver::load(&paths)?;
            Ok::<_, TlsError>((paths, resolver))
        })
        .await
        .map_err(|e| ServerError::CertificateTask {
            dir: config.cert_dir.clone(),
            message: e.to_string(),
        })??;
        let acceptor = TlsAcceptor::from(tls::server_config(resolver.clone())?);
        let bind = |what, addr| async move {
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|source| ServerError::Bind { what, addr, source })?;
            let local =
                listener
                    .local_addr()
                    .map_err(|source| ServerError::Bind { what, addr, source })?;
            Ok::<_, ServerError>((listener, local))
        };
        let (listener, local_addr) = bind("webhook", config.listen).await?;
        let (metrics_listener, metrics_addr) = bind("metrics", config.metrics_listen).await?;
        let shared = Arc::new(Shared {
            state,
            lookup,
            metrics,
            reviews: Arc::new(Semaphore::new(config.max_concurrent_reviews.max(1))),
            max_body_bytes: config.max_body_bytes,
            default_review_timeout: config.default_review_timeout,
            allow_all: config.allow_all,
            sandbox: config.sandbox.clone().map(ProgramSandbox::new),
            warned_not_ready: AtomicBool::new(false),
        });
        Ok(Server {
            config,
            listener,
            metrics_listener,
            local_addr,
            metrics_addr,
            cert_paths,
            resolver,
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

    /// The certificate files in use.
    pub fn cert_paths(&self) -> &CertPaths {
        &self.cert_paths
    }

    /// The certificate resolver (to force a reload).
    pub fn cert_resolver(&self) -> &Arc<CertResolver> {
        &self.resolver
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
            resolver,
            acceptor,
            shared,
            ..
        } = self;
        let timeouts = Timeouts {
            header_read: config.header_read_timeout,
            idle: config.idle_timeout,
            drain: config.drain_timeout,
        };
        let (stop, stopped) = watch::channel(false);
        let watcher = resolver.spawn_watcher(config.cert_reload_interval);
        tracing::info!(%local_addr, %metrics_addr, "serving");
        let webhook = tokio::spawn(accept_loop(
            listener,
            Some(acceptor),
            Handler::Webhook(shared.clone()),
            timeouts,
            stopped.clone(),
        ));
        let metrics = tokio::spawn(accept_loop(
            metrics_listener,
            None,
            Handler::Metrics(shared.metrics.clone()),
            timeouts,
            stopped,
        ));
        shutdown.await;
        tracing::info!("shutting down: draining requests in progress");
        let _ = stop.send(true);
        for task in [webhook, metrics] {
            if let Err(error) = task.await {
                tracing::warn!(%error, "a listener task failed");
            }
        }
        watcher.abort();
        tracing::info!("shut down");
        Ok(())
    }
}

/// Which routes a listener serves.
#[derive(Clone)]
enum Handler {
    Webhook(Arc<Shared>),
    Metrics(Arc<Metrics>),
}

/// Accepts connections until `stopped`, then closes the listener and waits (at most
/// `drain`) for the connections to finish.
async fn accept_loop(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    handler: Handler,
    timeouts: Timeouts,
    stopped: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    let stop = stopping(stopped.clone());
    tokio::pin!(stop);
    loop {
        tokio::select! {
            biased;
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    let _ = tcp.set_nodelay(true);
                    connections.spawn(connection(
                        tcp,
                        peer,
                        tls.clone(),
                        handler.clone(),
                        timeouts,
                        stopped.clone(),
                    ));
                }
                Err(error) => {
                    // Out of file descriptors and the like: back off rather than spin.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(timeouts.drain, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            connections = connections.len(),
            "connections still open after the drain timeout; closing them"
        );
        connections.shutdown().await;
    }
}

/// One connection: the TLS handshake (bounded by the header timeout), then HTTP/1.1 until
/// the client closes, a timeout closes it or shutdown drains it.
async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    tls: Option<TlsAcceptor>,
    handler: Handler,
    timeouts: Timeouts,
    stopped: watch::Receiver<bool>,
) {
    let activity = Arc::new(Activity::new());
    match tls {
        Some(acceptor) => {
            let handshake = tokio::time::timeout(timeouts.header_read, acceptor.accept(tcp));
            let stream = tokio::select! {
                handshake = handshake => match handshake {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(error)) => {
                        tracing::debug!(%peer, %error, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                },
                () = stopping(stopped.clone()) => return,
            };
            http(stream, peer, handler, activity, timeouts, stopped).await;
        }
        None => http(tcp, peer, handler, activity, timeouts, stopped).await,
    }
}

/// Resolves when shutdown is signalled (or the signal is gone).
async fn stopping(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// Serves HTTP/1.1 on `io`, watching for the header and idle timeouts and for shutdown.
async fn http<I>(
    io: I,
    peer: SocketAddr,
    handler: Handler,
    activity: Arc<Activity>,
    timeouts: Timeouts,
    stopped: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(Tracked {
        inner: io,
        activity: activity.clone(),
    });
    let service = {
        let activity = activity.clone();
        service_fn(move |request| {
            let guard = activity.request_started();
            let handler = handler.clone();
            async move {
                let response = handle(&handler, request).await;
                drop(guard);
                Ok::<_, Infallible>(response)
            }
        })
    };
    let mut builder = http1::Builder::new();
    builder.keep_alive(true).header_read_timeout(None);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);

    let tick = (timeouts.header_read.min(timeouts.idle) / 4)
        .clamp(Duration::from_millis(5), Duration::from_secs(1));
    let mut draining = false;
    // When the connection was asked to close (idle or shutdown), and whether by shutdown.
    let mut closing: Option<Instant> = None;
    let stop = stopping(stopped);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%peer, %error, "connection closed with an error");
                }
                return;
            }
            () = &mut stop, if !draining => {
                draining = true;
                closing.get_or_insert_with(Instant::now);
                conn.as_mut().graceful_shutdown();
            }
            () = tokio::time::sleep(tick) => {
                if activity.busy() {
                    continue;
                }
                if let Some(started) = activity.head_started() {
                    if started.elapsed() > timeouts.header_read {
                        tracing::debug!(%peer, "closing: the request head did not arrive in time");
                        return;
                    }
                } else if closing.is_none() && activity.idle_since().elapsed() > timeouts.idle {
                    tracing::debug!(%peer, "closing an idle connection");
                    closing = Some(Instant::now());
                    conn.as_mut().graceful_shutdown();
                }
                // A connection asked to close that does not (a client not reading its answer)
                // is dropped after a header timeout more; shutdown has its own drain bound.
                if !draining && closing.is_some_and(|since| since.elapsed() > timeouts.header_read) {
                    return;
                }
            }
        }
    }
}

/// What a connection is doing, for its timeouts: requests in progress, when it went idle, and
/// when the first byte of a request head arrived.
struct Activity {
    epoch: Instant,
    busy: AtomicUsize,
    /// Microseconds after `epoch` the connection last went idle.
    idle_since: AtomicU64,
    /// Microseconds after `epoch` (plus one; zero: none) a request's first byte arrived.
    head_started: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            epoch: Instant::now(),
            busy: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            // The connection's start counts as the start of its first request head.
            head_started: AtomicU64::new(1),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX - 1)
    }

    fn at(&self, micros: u64) -> Instant {
        self.epoch + Duration::from_micros(micros)
    }

    fn busy(&self) -> bool {
        self.busy.load(Ordering::SeqCst) > 0
    }

    fn idle_since(&self) -> Instant {
        self.at(self.idle_since.load(Ordering::SeqCst))
    }

    fn head_started(&self) -> Option<Instant> {
        match self.head_started.load(Ordering::SeqCst) {
            0 => None,
            n => Some(self.at(n - 1)),
        }
    }

    /// Bytes arrived: when no request is in progress, they start a request head.
    fn bytes_read(&self) {
        if !self.busy() {
            let _ = self.head_started.compare_exchange(
                0,
                self.now() + 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
        }
    }

    fn request_started(self: &Arc<Self>) -> RequestGuard {
        self.busy.fetch_add(1, Ordering::SeqCst);
        self.head_started.store(0, Ordering::SeqCst);
        RequestGuard(self.clone())
    }
}

/// A request in progress; dropping it marks the end.
struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let activity = &self.0;
        activity.idle_since.store(activity.now(), Ordering::SeqCst);
        activity.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An IO object that tells its connection's [`Activity`] when bytes arrive.
struct Tracked<I> {
    inner: I,
    activity: Arc<Activity>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Tracked<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.bytes_read();
        }
        result
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Tracked<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

type Body = Full<Bytes>;

/// Routes one request and logs it.
async fn handle(handler: &Handler, request: Request<Incoming>) -> Response<Body> {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let (response, uid) = match handler {
        Handler::Webhook(shared) => route_webhook(shared, request).await,
        Handler::Metrics(metrics) => (route_metrics(metrics, &request), None),
    };
    tracing::debug!(
        %method,
        path,
        status = response.status().as_u16(),
        uid = uid.as_deref().unwrap_or(""),
        duration_ms = started.elapsed().as_secs_f64() * 1000.0,
        "request"
    );
    response
}

async fn route_webhook(
    shared: &Arc<Shared>,
    request: Request<Incoming>,
) -> (Response<Body>, Option<String>) {
    let path = request.uri().path();
    if let Some(webhook) = Webhook::from_path(path) {
        if request.method() != Method::POST {
            return (method_not_allowed("POST"), None);
        }
        if !shared.allow_all && !shared.state.is_ready() {
            return not_ready(shared, webhook);
        }
        return review(shared, webhook, request).await;
    }
    let response = match path {
        "/healthz" => match *request.method() {
            Method::GET | Method::HEAD => text(StatusCode::OK, "ok"),
            _ => method_not_allowed("GET"),
        },
        "/readyz" => match *request.method() {
            Method::GET | Method::HEAD if shared.state.is_ready() => text(StatusCode::OK, "ready"),
            Method::GET | Method::HEAD => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: no policy set loaded yet",
            ),
            _ => method_not_allowed("GET"),
        },
        _ => not_found(path),
    };
    (response, None)
}

fn route_metrics(metrics: &Metrics, request: &Request<Incoming>) -> Response<Body> {
    match (request.uri().path(), request.method()) {
        ("/metrics", &Method::GET) => {
            let mut response = Response::new(Full::from(metrics.encode()));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(metrics::CONTENT_TYPE),
            );
            response
        }
        ("/metrics", _) => method_not_allowed("GET"),
        (path, _) => not_found(path),
    }
}

/// Why a body could not be read whole.
enum BodyError {
    TooLarge,
    Read(hyper::Error),
}

/// Reads the body, stopping as soon as it passes `limit` bytes.
async fn read_body(mut body: Incoming, limit: usize) -> Result<Bytes, BodyError> {
    let mut buffer = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(BodyError::Read)?;
        if let Ok(data) = frame.into_data() {
            if buffer.len() + data.len() > limit {
                return Err(BodyError::TooLarge);
            }
            buffer.extend_from_slice(&data);
        }
    }
    Ok(buffer.freeze())
}

/// How long past the review's deadline an evaluation may take to return its verdict (the
/// policies it had not run by then fail under their failure policy) before the server answers
/// 500 itself.
const EVALUATION_GRACE: Duration = Duration::from_millis(250);

/// How long before the review's deadline its lookups are cut short, so that the verdict (the
/// policy failing under its own failure policy) reaches kube-apiserver before it stops
/// waiting: a tenth of the timeout, at most 100 ms.
fn answer_margin(timeout: Duration) -> Duration {
    (timeout / 10).min(Duration::from_millis(100))
}

/// The 503 to a review that arrives before any policy set is in force (the connection closes:
/// its body is not read).
fn not_ready(shared: &Shared, webhook: Webhook) -> (Response<Body>, Option<String>) {
    let reply = Reply::not_ready();
    shared
        .metrics
        .observe_review(webhook, &reply, None, None, 0.0);
    if shared.warned_not_ready.swap(true, Ordering::Relaxed) {
        tracing::debug!(
            webhook = webhook.path(),
            "a review before any policy set is in force: answered 503"
        );
    } else {
        tracing::warn!(
            webhook = webhook.path(),
            "a review before any policy set is in force: answered 503, so the webhook's failurePolicy applies (further ones are logged at debug level and counted in kanon_admission_requests_total{{result=\"not_ready\"}})"
        );
    }
    let mut response = text(StatusCode::SERVICE_UNAVAILABLE, admission::NOT_READY);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    (closing(response), None)
}

/// One review: the body (bounded), an evaluation slot, the evaluation on this task, all within
/// the request's timeout.
async fn review(
    shared: &Arc<Shared>,
    webhook: Webhook,
    request: Request<Incoming>,
) -> (Response<Body>, Option<String>) {
    let started = Instant::now();
    let timeout = request
        .uri()
        .query()
        .and_then(query_timeout)
        .unwrap_or(shared.default_review_timeout);
    let deadline = tokio::time::Instant::now() + timeout;
    let limit = shared.max_body_bytes;
    let too_large = || {
        let reply = Reply::too_large(limit);
        shared
            .metrics
            .observe_review(webhook, &reply, None, None, started.elapsed().as_secs_f64());
        // Close rather than read the rest of a body that is not wanted.
        (closing(reply_response(reply.status, reply.body)), None)
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return too_large();
    }

    let body = match tokio::time::timeout_at(deadline, read_body(request.into_body(), limit)).await
    {
        Ok(Ok(body)) => body,
        Ok(Err(BodyError::TooLarge)) => return too_large(),
        Ok(Err(BodyError::Read(error))) => {
            tracing::warn!(webhook = webhook.path(), %error, "reading the review body failed");
            let response = text(
                StatusCode::BAD_REQUEST,
                &format!("cannot read the body: {error}"),
            );
            return (closing(response), None);
        }
        Err(_) => return timed_out(webhook, timeout, "reading the body"),
    };

    let slot = match tokio::time::timeout_at(deadline, Slot::acquire(shared.reviews.clone())).await
    {
        Ok(Ok(slot)) => slot,
        Ok(Err(_closed)) => {
            return (
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the server is shutting down",
                ),
                None,
            );
        }
        Err(_) => return timed_out(webhook, timeout, "waiting for an evaluation slot"),
    };
    // Evaluated on this task: no hand-off to another thread. A program is bounded by its fuel
    // and a lookup by the deadline, so neither holds a worker past them; the slot is given back
    // while a lookup or a worker process is awaited.
    let evaluation = async {
        let policies = shared.state.current();
        if shared.allow_all {
            return admission::allow_all(&body);
        }
        // The engine stops running policies at the deadline; those left fail under their own
        // failure policy, and the answer is still a verdict.
        let until = deadline.into_std();
        let lookup = BoundedLookup::new(shared.lookup.as_ref(), deadline - answer_margin(timeout))
            .with_programs(shared.sandbox.as_ref())
            .with_slot(&slot);
        admission::review_until(
            &body,
            webhook,
            &policies,
            &lookup,
            shared.max_body_bytes,
            Some(kanon_engine::Deadline::new(move || {
                std::time::Instant::now() >= until
            })),
        )
        .await
    };
    // The hard stop is for an evaluation that does not return: past the deadline its lookups
    // fail, so this fires only if something ignores them.
    match tokio::time::timeout_at(deadline + EVALUATION_GRACE, evaluation).await {
        Ok(reply) => {
            let (operation, kind) = match &reply.request {
                Some((operation, kind)) => (Some(operation.as_str()), Some(kind.as_str())),
                None => (None, None),
            };
            shared.metrics.observe_review(
                webhook,
                &reply,
                operation,
                kind,
                started.elapsed().as_secs_f64(),
            );
            if reply.status != 200 {
                tracing::debug!(
                    webhook = webhook.path(),
                    status = reply.status,
                    uid = reply.uid.as_deref().unwrap_or(""),
                    "a review that cannot be answered"
                );
            }
            (reply_response(reply.status, reply.body), reply.uid)
        }
        Err(_) => timed_out(webhook, timeout, "evaluating"),
    }
}

fn timed_out(
    webhook: Webhook,
    timeout: Duration,
    doing: &'static str,
) -> (Response<Body>, Option<String>) {
    tracing::warn!(
        webhook = webhook.path(),
        timeout_ms = timeout.as_millis(),
        doing,
        "a review timed out"
    );
    let message = format!("the review timed out after {timeout:?} ({doing})");
    (text(StatusCode::INTERNAL_SERVER_ERROR, &message), None)
}

/// `timeout` of a query string, as kube-apiserver writes it (a Go duration: `10s`, `1m30s`,
/// `500ms`). Absent, unreadable or zero: `None`.
fn query_timeout(query: &str) -> Option<Duration> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == "timeout")
        .and_then(|(_, value)| parse_go_duration(value))
        .filter(|timeout| !timeout.is_zero())
}

/// A Go `time.Duration` string: one or more decimal numbers each with a unit (`ns`, `us`,
/// `µs`, `ms`, `s`, `m`, `h`).
fn parse_go_duration(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text;
    let mut seconds = 0.0_f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        if number_end == 0 {
            return None;
        }
        let value: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        seconds += value * scale;
        rest = &rest[unit_end..];
    }
    Duration::try_from_secs_f64(seconds).ok()
}

fn reply_response(status: u16, body: Vec<u8>) -> Response<Body> {
    let mut response = Response::new(Full::from(body));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(admission::CONTENT_TYPE),
    );
    response
}

/// `response`, telling the client this connection closes (the rest of its body is not read).
fn closing(mut response: Response<Body>) -> Response<Body> {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

fn text(status: StatusCode, message: &str) -> Response<Body> {
    let mut response = Response::new(Full::from(format!("{message}\n")));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn not_found(path: &str) -> Response<Body> {
    text(StatusCode::NOT_FOUND, &format!("no such path: {path}"))
}

fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let mut response = text(
        StatusCode::METHOD_NOT_ALLOWED,
        &format!("method not allowed: use {allow}"),
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        for bad in ["", "10", "s", "10x", "-1s", "1s2"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn query_timeouts() {
        assert_eq!(query_timeout("timeout=10s"), Some(Duration::from_secs(10)));
        assert_eq!(
            query_timeout("a=b&timeout=2s&c"),
            Some(Duration::from_secs(2))
        );
        assert_eq!(query_timeout("timeout=0s"), None);
        assert_eq!(query_timeout("timeout=soon"), None);
        assert_eq!(query_timeout("other=1s"), None);
    }
}
