//! The nearest-rank percentile the benches report latencies with. Shared by the adversary,
//! faults and events benches (`#[path]`).

use std::time::Duration;

/// Nearest-rank percentile `p` (0 to 1) of sorted values; zero for none.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}
