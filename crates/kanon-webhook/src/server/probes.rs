//! What the plain-HTTP listener of `/metrics`, `/healthz` and `/readyz` answers from. That
//! listener runs on a thread and runtime of its own
//! ([`accept_on_own_thread`](super::connection::accept_on_own_thread)): whatever load the
//! webhook port carries (bodies being read, reviews being evaluated on every core), the
//! kubelet's probes and the metrics scraper are answered at once.
//!
//! Being apart, its `/healthz` cannot tell by answering that the webhook's runtime still
//! runs, so it asks: a task on that runtime beats a [`Heartbeat`] every
//! [`BEAT`], and `/healthz` fails when no beat came for [`STALLED_AFTER`], so that a wedged
//! server is restarted by its liveness probe.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::metrics::Metrics;
use crate::state::PolicyState;

/// At most this many connections to the metrics and probe port: a scraper and the kubelet
/// need a handful.
pub(super) const MAX_CONNECTIONS: usize = 64;

/// How often the webhook's runtime beats.
const BEAT: Duration = Duration::from_millis(250);

/// How long without a beat before `/healthz` fails.
pub(super) const STALLED_AFTER: Duration = Duration::from_secs(10);

/// What the probe routes read.
pub(super) struct Probes {
    pub state: Arc<PolicyState>,
    pub metrics: Arc<Metrics>,
    pub heartbeat: Arc<Heartbeat>,
}

impl Probes {
    /// `Ok` when the webhook's runtime beat recently, else how long it has been silent.
    pub(super) fn live(&self) -> Result<(), Duration> {
        let silent = self.heartbeat.silent_for();
        if silent > STALLED_AFTER {
            Err(silent)
        } else {
            Ok(())
        }
    }
}

/// Beats of the webhook's runtime, read by the probe thread.
pub(super) struct Heartbeat {
    epoch: Instant,
    /// Milliseconds after `epoch` of the last beat.
    last: AtomicU64,
    stopped: AtomicBool,
}

impl Heartbeat {
    /// Starts beating on the current runtime, until [`Heartbeat::stop`].
    pub(super) fn start() -> Arc<Self> {
        let heartbeat = Arc::new(Heartbeat {
            epoch: Instant::now(),
            last: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
        });
        let beating = heartbeat.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(BEAT);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !beating.stopped.load(Ordering::Relaxed) {
                tick.tick().await;
                let now = u64::try_from(beating.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
                beating.last.store(now, Ordering::Relaxed);
            }
        });
        heartbeat
    }

    pub(super) fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    fn silent_for(&self) -> Duration {
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn healthz_fails_when_the_webhooks_runtime_stops_beating() {
        let state = PolicyState::new();
        let probes = |heartbeat| Probes {
            state: state.clone(),
            metrics: Metrics::new(),
            heartbeat,
        };
        let beating = Heartbeat::start();
        tokio::time::sleep(BEAT * 2).await;
        assert_eq!(probes(beating.clone()).live(), Ok(()));
        beating.stop();
        // A heartbeat whose last beat was longer ago than the bound.
        let silent = Arc::new(Heartbeat {
            epoch: Instant::now() - STALLED_AFTER * 2,
            last: AtomicU64::new(0),
            stopped: AtomicBool::new(true),
        });
        let silence = probes(silent).live().unwrap_err();
        assert!(silence >= STALLED_AFTER * 2, "{silence:?}");
    }
}
