//! Connections: accepting them within a cap, the TLS handshake, HTTP/1.1 keep-alive, and the
//! timeouts that close a connection whatever its client does.
//!
//! The timeouts are kanon's own rather than hyper's `header_read_timeout`, whose timer also
//! runs while a keep-alive connection waits for its next request (so it would close idle
//! connections after the header timeout, earlier than kube-apiserver's client, which would
//! then see a POST fail on a connection the server just closed):
//! - a request head (or the TLS handshake) must arrive within `header_read` of its first
//!   byte (of the connection's start), else the connection is closed;
//! - an answer the client does not read for `write` is given up with its connection;
//! - a connection with no request in progress is closed after `idle`.
//!
//! At most `limit` connections are open at once ([`Connections`]). At the limit, a new
//! connection takes the place of another, so that a flood of connections that never send a
//! request cannot lock kube-apiserver out: first one that has not completed a request yet
//! (oldest first), else the one idle longest; one with a request in progress is never closed
//! for a newcomer, and the newcomer is refused only when every connection has one.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use super::eviction::Eviction;
use super::routes::{self, Body, Routes};
use crate::metrics::{Metrics, Shed};

/// Connection timeouts.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timeouts {
    pub header_read: Duration,
    pub write: Duration,
    pub idle: Duration,
    pub drain: Duration,
}

/// The largest buffer hyper keeps for one connection (its default is about 400 KiB): a
/// request head from kube-apiserver is well under 8 KiB, and bodies are read in chunks.
const MAX_CONNECTION_BUFFER: usize = 64 * 1024;

/// The open connections of one listener, within a cap.
pub(super) struct Connections {
    limit: usize,
    listener: &'static str,
    metrics: Arc<Metrics>,
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Activity>>>,
}

/// A connection's place among the open ones; dropping it frees the place.
pub(super) struct Admitted {
    id: u64,
    activity: Arc<Activity>,
    connections: Arc<Connections>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let count = {
            let mut open = self.connections.open();
            open.remove(&self.id);
            open.len()
        };
        self.connections
            .metrics
            .connections_open(self.connections.listener, count);
    }
}

impl Connections {
    /// At most `limit` connections of the listener named `listener` (a metrics label).
    pub(super) fn new(limit: usize, metrics: Arc<Metrics>, listener: &'static str) -> Arc<Self> {
        Arc::new(Connections {
            limit: limit.max(1),
            listener,
            metrics,
            next: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        })
    }

    fn open(&self) -> MutexGuard<'_, HashMap<u64, Arc<Activity>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a new connection: at the limit, another connection is told to close to
    /// make room (see the module's doc); `None` when none can be.
    pub(super) fn admit(self: &Arc<Self>) -> Option<Admitted> {
        let (activity, id, count) = {
            let mut open = self.open();
            if open.len() >= self.limit {
                let victim = open
                    .iter()
                    .filter_map(|(id, activity)| Some((activity.eviction_rank()?, *id)))
                    .min()
                    .map(|(_, id)| id);
                let Some(victim) = victim.and_then(|id| open.remove(&id)) else {
                    drop(open);
                    self.metrics.connection_shed(self.listener, Shed::Refused);
                    return None;
                };
                victim.eviction.tell();
                self.metrics.connection_shed(self.listener, Shed::Evicted);
            }
            let id = self.next.fetch_add(1, Ordering::Relaxed);
            let activity = Arc::new(Activity::new());
            open.insert(id, activity.clone());
            (activity, id, open.len())
        };
        self.metrics.connections_open(self.listener, count);
        Some(Admitted {
            id,
            activity,
            connections: self.clone(),
        })
    }

    /// How many connections are open.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.open().len()
    }
}

/// Accepts connections until `stopped`, then closes the listener and waits (at most
/// `timeouts.drain`) for the connections to finish.
pub(super) async fn accept_loop(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    routes: Routes,
    connections: Arc<Connections>,
    timeouts: Timeouts,
    stopped: watch::Receiver<bool>,
) {
    let mut tasks = JoinSet::new();
    let stop = stopping(stopped.clone());
    tokio::pin!(stop);
    loop {
        tokio::select! {
            biased;
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    // Refused: closed at once, before any byte is read or written.
                    let Some(admitted) = connections.admit() else {
                        tracing::debug!(%peer, "refusing a connection: every connection has a request in progress");
                        continue;
                    };
                    let _ = tcp.set_nodelay(true);
                    tasks.spawn(connection(
                        tcp,
                        peer,
                        tls.clone(),
                        routes.clone(),
                        admitted,
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
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(timeouts.drain, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            connections = tasks.len(),
            "connections still open after the drain timeout; closing them"
        );
        tasks.shutdown().await;
    }
}

/// Serves plain HTTP on `listener` from a new thread with a runtime of its own, until
/// `stopped`: whatever load the main runtime carries, these connections are answered at once.
pub(super) fn accept_on_own_thread(
    name: &str,
    listener: std::net::TcpListener,
    routes: Routes,
    connections: Arc<Connections>,
    timeouts: Timeouts,
    stopped: watch::Receiver<bool>,
) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(error) => {
                    tracing::error!(%error, "cannot start the runtime of a listener's own thread");
                    return;
                }
            };
            runtime.block_on(async move {
                let listener = match TcpListener::from_std(listener) {
                    Ok(listener) => listener,
                    Err(error) => {
                        tracing::error!(%error, "cannot serve a listener on its own thread");
                        return;
                    }
                };
                accept_loop(listener, None, routes, connections, timeouts, stopped).await;
            });
        })
}

/// One connection: the TLS handshake (bounded by the header timeout), then HTTP/1.1 until
/// the client closes, a timeout closes it, it is evicted, or shutdown drains it.
async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    tls: Option<TlsAcceptor>,
    routes: Routes,
    admitted: Admitted,
    timeouts: Timeouts,
    stopped: watch::Receiver<bool>,
) {
    let activity = admitted.activity.clone();
    let tcp = Tracked {
        inner: tcp,
        activity: activity.clone(),
    };
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
                        admitted.connections.metrics.connection_shed(admitted.connections.listener, Shed::HeaderTimeout);
                        return;
                    }
                },
                () = activity.eviction.told() => return,
                () = stopping(stopped.clone()) => return,
            };
            http(stream, peer, routes, &admitted, timeouts, stopped).await;
        }
        None => http(tcp, peer, routes, &admitted, timeouts, stopped).await,
    }
}

/// Resolves when shutdown is signalled (or the signal is gone).
pub(super) async fn stopping(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// Serves HTTP/1.1 on `io`, watching for the timeouts, eviction and shutdown.
async fn http<I>(
    io: I,
    peer: SocketAddr,
    routes: Routes,
    admitted: &Admitted,
    timeouts: Timeouts,
    stopped: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = admitted.activity.clone();
    let shed = |reason| {
        admitted
            .connections
            .metrics
            .connection_shed(admitted.connections.listener, reason);
    };
    let service = {
        let activity = activity.clone();
        service_fn(move |request: Request<Incoming>| {
            // When its head began (read before the request starts, which clears it).
            let arrived = activity.head_started().unwrap_or_else(Instant::now);
            let guard = activity.request_started();
            let routes = routes.clone();
            async move {
                let response: Response<Body> = routes::handle(&routes, request, arrived).await;
                drop(guard);
                Ok::<_, Infallible>(response)
            }
        })
    };
    let mut builder = http1::Builder::new();
    builder
        .keep_alive(true)
        .header_read_timeout(None)
        .max_buf_size(MAX_CONNECTION_BUFFER);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);

    let tick = (timeouts.header_read.min(timeouts.idle).min(timeouts.write) / 4)
        .clamp(Duration::from_millis(5), Duration::from_secs(1));
    let mut draining = false;
    // When the connection was asked to close (idle or shutdown).
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
            () = activity.eviction.told() => {
                tracing::debug!(%peer, "closing a connection to make room for a new one");
                return;
            }
            () = tokio::time::sleep(tick) => {
                if activity.write_blocked_for().is_some_and(|blocked| blocked > timeouts.write) {
                    tracing::debug!(%peer, "closing: the client does not read its answer");
                    shed(Shed::WriteTimeout);
                    return;
                }
                if activity.busy() {
                    continue;
                }
                if let Some(started) = activity.head_started() {
                    if started.elapsed() > timeouts.header_read {
                        tracing::debug!(%peer, "closing: the request head did not arrive in time");
                        shed(Shed::HeaderTimeout);
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

/// What a connection is doing, for its timeouts and for choosing which connection gives way
/// to a new one: requests in progress and served, when it went idle, when the first byte of
/// a request head arrived, since when a write has been waiting for the client.
pub(super) struct Activity {
    epoch: Instant,
    busy: AtomicUsize,
    served: AtomicU64,
    /// Microseconds after `epoch` the connection last went idle.
    idle_since: AtomicU64,
    /// Microseconds after `epoch` (plus one; zero: none) a request's first byte arrived.
    head_started: AtomicU64,
    /// Microseconds after `epoch` (plus one; zero: none) a write found the client's window
    /// full and nothing has been written since.
    write_blocked: AtomicU64,
    eviction: Eviction,
}

impl Activity {
    fn new() -> Self {
        Activity {
            epoch: Instant::now(),
            busy: AtomicUsize::new(0),
            served: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            // The connection's start counts as the start of its first request head.
            head_started: AtomicU64::new(1),
            write_blocked: AtomicU64::new(0),
            eviction: Eviction::default(),
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

    fn write_blocked_for(&self) -> Option<Duration> {
        match self.write_blocked.load(Ordering::SeqCst) {
            0 => None,
            n => Some(self.at(n - 1).elapsed()),
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

    fn write_blocked(&self) {
        let _ = self.write_blocked.compare_exchange(
            0,
            self.now() + 1,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }

    fn bytes_written(&self) {
        self.write_blocked.store(0, Ordering::SeqCst);
    }

    fn request_started(self: &Arc<Self>) -> RequestGuard {
        self.busy.fetch_add(1, Ordering::SeqCst);
        self.head_started.store(0, Ordering::SeqCst);
        RequestGuard(self.clone())
    }

    /// How readily this connection gives way to a new one (lower: first); `None` while a
    /// request is in progress. Connections that never completed a request come first, the
    /// oldest first; then idle ones, the longest idle first.
    fn eviction_rank(&self) -> Option<(u8, Instant)> {
        if self.busy() || self.eviction.is_told() {
            return None;
        }
        if self.served.load(Ordering::SeqCst) == 0 {
            return Some((0, self.epoch));
        }
        Some((1, self.idle_since()))
    }
}

/// A request in progress; dropping it marks the end.
struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let activity = &self.0;
        activity.idle_since.store(activity.now(), Ordering::SeqCst);
        activity.served.fetch_add(1, Ordering::SeqCst);
        activity.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An IO object that tells its connection's [`Activity`] when bytes arrive and when a write
/// waits for the client.
struct Tracked<I> {
    inner: I,
    activity: Arc<Activity>,
}

impl<I> Tracked<I> {
    fn wrote(&self, result: &Poll<io::Result<usize>>) {
        match result {
            Poll::Ready(Ok(n)) if *n > 0 => self.activity.bytes_written(),
            Poll::Pending => self.activity.write_blocked(),
            Poll::Ready(_) => {}
        }
    }
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
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.wrote(&result);
        result
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
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.wrote(&result);
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connections(limit: usize) -> Arc<Connections> {
        Connections::new(limit, Metrics::new(), "webhook")
    }

    #[test]
    fn at_the_limit_the_oldest_connection_without_a_request_gives_way() {
        let connections = connections(3);
        let first = connections.admit().unwrap();
        std::thread::sleep(Duration::from_millis(2));
        let second = connections.admit().unwrap();
        std::thread::sleep(Duration::from_millis(2));
        let third = connections.admit().unwrap();
        let fourth = connections.admit().unwrap();
        assert!(first.activity.eviction.is_told());
        assert!(!second.activity.eviction.is_told());
        assert_eq!(connections.len(), 3);
        // Dropping an evicted connection does not free a second place.
        drop(first);
        assert_eq!(connections.len(), 3);
        drop((second, third, fourth));
        assert_eq!(connections.len(), 0);
    }

    #[test]
    fn a_connection_that_served_requests_outlasts_those_that_never_sent_one() {
        let connections = connections(2);
        let served = connections.admit().unwrap();
        drop(served.activity.request_started());
        std::thread::sleep(Duration::from_millis(2));
        let silent = connections.admit().unwrap();
        let _new = connections.admit().unwrap();
        assert!(silent.activity.eviction.is_told());
        assert!(!served.activity.eviction.is_told());
    }

    #[test]
    fn among_served_connections_the_longest_idle_gives_way() {
        let connections = connections(2);
        let idle_long = connections.admit().unwrap();
        drop(idle_long.activity.request_started());
        std::thread::sleep(Duration::from_millis(3));
        let idle_short = connections.admit().unwrap();
        drop(idle_short.activity.request_started());
        let _new = connections.admit().unwrap();
        assert!(idle_long.activity.eviction.is_told());
        assert!(!idle_short.activity.eviction.is_told());
    }

    #[test]
    fn connections_with_requests_in_progress_are_never_closed_for_a_newcomer() {
        let connections = connections(2);
        let a = connections.admit().unwrap();
        let b = connections.admit().unwrap();
        let _busy_a = a.activity.request_started();
        let _busy_b = b.activity.request_started();
        assert!(connections.admit().is_none());
        assert!(!a.activity.eviction.is_told());
        assert!(!b.activity.eviction.is_told());
        assert_eq!(connections.len(), 2);
    }
}
