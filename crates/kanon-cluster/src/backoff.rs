//! How long a failed watch (of the policies, of the Namespaces) waits before it retries.

use std::time::Duration;

use kube::runtime::utils::Backoff;

/// How long a failed watch waits before it retries: 250 ms, doubling up to 1 s, back to the
/// start once a watch works again. kube-runtime's default goes up to 30 s, which after an
/// apiserver restart would leave policy changes unseen for that long; and a restarted apiserver
/// often answers the first watch with "too old resource version", one more failed retry before
/// the relist, so each retry's wait counts twice (with 4 s the faults bench saw policy changes
/// in force only 7.8 s after the apiserver was back).
#[derive(Debug, Clone)]
pub(crate) struct WatchBackoff {
    next: Duration,
}

impl WatchBackoff {
    const FIRST: Duration = Duration::from_millis(250);
    const MAX: Duration = Duration::from_secs(1);

    pub(crate) fn new() -> Self {
        WatchBackoff { next: Self::FIRST }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        Some(delay)
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}
