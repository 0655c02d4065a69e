//! Percentiles, medians and how the tables print durations.

use std::time::Duration;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Stats {
    pub(crate) n: usize,
    pub(crate) p50: Duration,
    pub(crate) p90: Duration,
    pub(crate) p99: Duration,
    pub(crate) max: Duration,
}

/// Nearest-rank percentiles of `samples`.
pub(crate) fn stats(samples: &[Duration]) -> Stats {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let n = sorted.len();
    let at = |p: f64| {
        if n == 0 {
            return Duration::ZERO;
        }
        let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
        sorted[rank - 1]
    };
    Stats {
        n,
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        max: at(1.0),
    }
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// The median of `values` (the mean of the middle two when there is an even number).
pub(crate) fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut sorted: Vec<f64> = values.collect();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

pub(crate) fn signed_ms(a: Duration, b: Duration) -> String {
    let diff = a.as_secs_f64() - b.as_secs_f64();
    format!("{:+.2} ms", diff * 1e3)
}
