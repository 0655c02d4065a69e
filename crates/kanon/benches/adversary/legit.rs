//! Legitimate traffic while an attack runs: reviews as kube-apiserver sends them and probes as
//! kubelet does, on a thread and runtime of their own, each one timed.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Result;
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior, timeout};
use tokio_rustls::TlsConnector;

use crate::http::{Endpoint, exchange, get};
use crate::{PROBE_EVERY, PROBE_TIMEOUT, REVIEW_EVERY, REVIEW_TIMEOUT};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Got {
    Ok,
    Status(u16),
    /// HTTP 200 without `allowed: true`.
    NotAllowed,
    /// No answer: connection, TLS or read error, or the client's timeout.
    Error,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    pub(crate) at: Instant,
    pub(crate) latency: Duration,
    pub(crate) got: Got,
}

#[derive(Default)]
pub(crate) struct Records {
    pub(crate) reviews: Vec<Sample>,
    pub(crate) probes: Vec<Sample>,
}

pub(crate) struct Clients {
    records: Arc<Mutex<Records>>,
    stop: watch::Sender<bool>,
    thread: std::thread::JoinHandle<()>,
}

pub(crate) struct Legit {
    pub(crate) webhook: Endpoint,
    pub(crate) probe: Endpoint,
    pub(crate) tls: TlsConnector,
    pub(crate) review: Arc<[u8]>,
    /// A new connection per review instead of one kept alive.
    pub(crate) fresh_connections: bool,
}

impl Clients {
    pub(crate) fn start(legit: Legit) -> Result<Clients> {
        let records = Arc::new(Mutex::new(Records::default()));
        let (stop, mut stopped) = watch::channel(false);
        let shared = records.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let legit = Arc::new(legit);
                tokio::spawn(reviews(legit.clone(), shared.clone()));
                for path in ["/healthz", "/readyz"] {
                    tokio::spawn(probes(legit.clone(), path, shared.clone()));
                }
                let _ = stopped.wait_for(|s| *s).await;
            });
        });
        Ok(Clients {
            records,
            stop,
            thread,
        })
    }

    pub(crate) fn finish(self) -> Records {
        let _ = self.stop.send(true);
        let _ = self.thread.join();
        std::mem::take(&mut *self.records.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

async fn reviews(legit: Arc<Legit>, records: Arc<Mutex<Records>>) {
    let request = legit
        .webhook
        .request("POST", "/validate?timeout=10s", Some(&legit.review));
    let mut conn = None;
    let mut tick = tokio::time::interval(REVIEW_EVERY);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let at = Instant::now();
        let result = timeout(
            REVIEW_TIMEOUT,
            exchange(&mut conn, &legit.webhook, &legit.tls, &request),
        )
        .await;
        let got = match result {
            Ok(Ok(r)) if r.status == 200 && allowed(&r.body) => Got::Ok,
            Ok(Ok(r)) if r.status == 200 => Got::NotAllowed,
            Ok(Ok(r)) => Got::Status(r.status),
            Ok(Err(_)) | Err(_) => Got::Error,
        };
        if got != Got::Ok || legit.fresh_connections {
            conn = None;
        }
        let sample = Sample {
            at,
            latency: at.elapsed(),
            got,
        };
        records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .reviews
            .push(sample);
    }
}

async fn probes(legit: Arc<Legit>, path: &'static str, records: Arc<Mutex<Records>>) {
    let mut tick = tokio::time::interval(PROBE_EVERY);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let at = Instant::now();
        let got = match timeout(PROBE_TIMEOUT, get(&legit.probe, &legit.tls, path)).await {
            Ok(Ok(r)) if r.status == 200 => Got::Ok,
            Ok(Ok(r)) => Got::Status(r.status),
            Ok(Err(_)) | Err(_) => Got::Error,
        };
        let sample = Sample {
            at,
            latency: at.elapsed(),
            got,
        };
        records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .probes
            .push(sample);
    }
}

/// Whether a 200 answer is a review that allowed the request.
fn allowed(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body)
        .is_ok_and(|v| v.pointer("/response/allowed") == Some(&Value::Bool(true)))
}
