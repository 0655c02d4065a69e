//! What every attack works with: the endpoints, the bodies, kanon's binary and evaluation slots,
//! the attack's time; and how the rows write a duration.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use crate::http::Endpoint;
use crate::reviews::Bodies;

/// What an attack works with.
pub(crate) struct Ctx {
    pub(crate) webhook: Endpoint,
    pub(crate) metrics: Endpoint,
    pub(crate) tls: TlsConnector,
    pub(crate) port: u16,
    pub(crate) stderr: PathBuf,
    pub(crate) bodies: Arc<Bodies>,
    /// The kanon under attack, for `kanon apply`.
    pub(crate) bin: PathBuf,
    /// `--max-concurrent-reviews`, as given or by default.
    pub(crate) evaluation_slots: usize,
    pub(crate) started: Instant,
    pub(crate) deadline: Instant,
}

/// A duration as the rows write it, `1.5 s`.
pub(crate) fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}
