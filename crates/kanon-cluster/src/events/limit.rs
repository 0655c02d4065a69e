//! Token buckets: how many Event writes may be made at once (`burst`) and how fast the
//! allowance comes back (`per_second`). Time is given, never read, so the tests need no
//! sleeping.

use std::time::{Duration, SystemTime};

/// A bucket's size and refill rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Tokens a full bucket holds: the writes made at once after a quiet time (at least 1).
    pub burst: u32,
    /// Tokens added per second.
    pub per_second: f64,
}

/// A token bucket, full when made.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: Rate,
    tokens: f64,
    at: SystemTime,
}

/// The longest a caller is told to wait for a token (a bucket that never refills).
const LONGEST_WAIT: Duration = Duration::from_secs(3600);

impl TokenBucket {
    /// A full bucket at `now`.
    pub fn new(rate: Rate, now: SystemTime) -> Self {
        let rate = Rate {
            burst: rate.burst.max(1),
            per_second: if rate.per_second.is_finite() {
                rate.per_second.max(0.0)
            } else {
                0.0
            },
        };
        TokenBucket {
            rate,
            tokens: f64::from(rate.burst),
            at: now,
        }
    }

    fn refill(&mut self, now: SystemTime) {
        // A clock that went back refills nothing, and is not taken as the new start.
        if let Ok(elapsed) = now.duration_since(self.at) {
            self.tokens = (self.tokens + elapsed.as_secs_f64() * self.rate.per_second)
                .min(f64::from(self.rate.burst));
            self.at = now;
        }
    }

    /// Takes a token if there is one at `now`.
    pub fn take(&mut self, now: SystemTime) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// How long after `now` the next token comes (zero when there is one).
    pub fn wait(&self, now: SystemTime) -> Duration {
        let mut bucket = self.clone();
        bucket.refill(now);
        if bucket.tokens >= 1.0 {
            return Duration::ZERO;
        }
        if bucket.rate.per_second <= 0.0 {
            return LONGEST_WAIT;
        }
        Duration::try_from_secs_f64((1.0 - bucket.tokens) / bucket.rate.per_second)
            .unwrap_or(LONGEST_WAIT)
            .min(LONGEST_WAIT)
    }

    /// Whether the bucket is full at `now` (it can be forgotten: a new one is the same).
    pub fn is_full(&self, now: SystemTime) -> bool {
        let mut bucket = self.clone();
        bucket.refill(now);
        bucket.tokens >= f64::from(bucket.rate.burst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(millis: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(millis)
    }

    #[test]
    fn a_burst_then_the_rate() {
        let mut bucket = TokenBucket::new(
            Rate {
                burst: 3,
                per_second: 2.0,
            },
            at(0),
        );
        assert!((0..3).all(|_| bucket.take(at(0))));
        assert!(!bucket.take(at(0)));
        assert_eq!(bucket.wait(at(0)), Duration::from_millis(500));
        assert_eq!(bucket.wait(at(200)), Duration::from_millis(300));
        assert!(!bucket.take(at(499)));
        assert!(bucket.take(at(500)));
        assert!(!bucket.take(at(500)));
        // Ten seconds of quiet refill the burst, no more.
        assert!(bucket.is_full(at(10_500)));
        assert!((0..3).all(|_| bucket.take(at(10_500))));
        assert!(!bucket.take(at(10_500)));
    }

    #[test]
    fn a_clock_that_goes_back_gives_nothing() {
        let mut bucket = TokenBucket::new(
            Rate {
                burst: 1,
                per_second: 1.0,
            },
            at(10_000),
        );
        assert!(bucket.take(at(10_000)));
        assert!(!bucket.take(at(0)));
        assert!(!bucket.take(at(10_500)));
        assert!(bucket.take(at(11_000)));
    }

    #[test]
    fn a_bucket_that_never_refills_says_so() {
        let mut bucket = TokenBucket::new(
            Rate {
                burst: 0,
                per_second: 0.0,
            },
            at(0),
        );
        assert!(bucket.take(at(0)), "a burst of at least one");
        assert_eq!(bucket.wait(at(0)), LONGEST_WAIT);
        assert!(!bucket.take(at(1_000_000)));
    }
}
