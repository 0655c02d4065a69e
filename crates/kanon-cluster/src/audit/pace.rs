//! How fast an audit goes: LIST requests spaced at `--audit-qps`, and the audit's thread kept
//! to a share of one CPU (`--audit-cpu`), so that a whole cluster's judging never crowds the
//! reviews answered beside it.

use std::time::Duration;

use tokio::time::Instant;

/// Spaces requests at most `qps` per second (none when 0).
#[derive(Debug)]
pub struct Pacer {
    interval: Option<Duration>,
    next: Option<Instant>,
}

impl Pacer {
    /// A pacer of `qps` requests per second; 0: unpaced.
    pub fn new(qps: f64) -> Self {
        let interval = (qps > 0.0 && qps.is_finite()).then(|| Duration::from_secs_f64(1.0 / qps));
        Pacer {
            interval,
            next: None,
        }
    }

    /// Waits until the next request may go.
    pub async fn wait(&mut self) {
        let Some(interval) = self.interval else {
            return;
        };
        let now = Instant::now();
        if let Some(next) = self.next
            && next > now
        {
            tokio::time::sleep_until(next).await;
        }
        self.next = Some(Instant::now() + interval);
    }
}

/// Keeps the calling thread to a share of one CPU: after a stretch of work that used `cpu`
/// of the thread's CPU time in `wall` of wall time, it rests until `cpu` is at most `share`
/// of the whole stretch. Each stretch is judged alone (no credit carried from idle ones), so
/// a burst never runs unchecked after a long wait for the apiserver.
///
/// It measures the thread it runs on (`CLOCK_THREAD_CPUTIME_ID`): the audit's runtime is a
/// thread of its own, where its pages are received, decoded and judged.
#[derive(Debug)]
pub struct CpuBudget {
    share: Option<f64>,
    since: Option<(Duration, Instant)>,
}

impl CpuBudget {
    /// A budget of `share` of one CPU (0 < share < 1); anything else, or a platform that
    /// cannot tell a thread's CPU time: no limit.
    pub fn new(share: f64) -> Self {
        let limited = share > 0.0 && share < 1.0 && thread_cpu_time().is_some();
        CpuBudget {
            share: limited.then_some(share),
            since: None,
        }
    }

    /// No limit.
    pub fn unlimited() -> Self {
        CpuBudget {
            share: None,
            since: None,
        }
    }

    /// Rests as long as the work since the last call asks, then starts measuring the next.
    pub async fn rest(&mut self) {
        let Some(share) = self.share else {
            return;
        };
        if let (Some((cpu_then, wall_then)), Some(cpu_now)) = (self.since, thread_cpu_time()) {
            let rest = rest_for(cpu_now.saturating_sub(cpu_then), wall_then.elapsed(), share);
            if !rest.is_zero() {
                tokio::time::sleep(rest).await;
            }
        }
        self.since = thread_cpu_time().map(|cpu| (cpu, Instant::now()));
    }
}

/// How long to rest after work that used `cpu` in `wall`, so that `cpu` is `share` of the
/// stretch (at most a minute: a stuck clock never parks the audit for good).
fn rest_for(cpu: Duration, wall: Duration, share: f64) -> Duration {
    let stretch = cpu.as_secs_f64() / share;
    let rest = (stretch - wall.as_secs_f64()).clamp(0.0, 60.0);
    Duration::from_secs_f64(rest)
}

/// The CPU time the calling thread has used.
fn thread_cpu_time() -> Option<Duration> {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through the pointer, which points at a live,
    // properly aligned local.
    let result = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    (result == 0).then(|| {
        Duration::new(
            u64::try_from(time.tv_sec).unwrap_or(0),
            u32::try_from(time.tv_nsec).unwrap_or(0),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rest_makes_the_work_its_share_of_the_stretch() {
        let ms = Duration::from_millis;
        // 10 ms of CPU at a quarter: a 40 ms stretch, of which 12 ms have passed.
        assert_eq!(rest_for(ms(10), ms(12), 0.25), ms(28));
        // Waiting on the apiserver already made the stretch long enough.
        assert_eq!(rest_for(ms(10), ms(50), 0.25), Duration::ZERO);
        assert_eq!(rest_for(Duration::ZERO, ms(5), 0.1), Duration::ZERO);
        assert_eq!(
            rest_for(Duration::from_secs(30), Duration::ZERO, 0.01),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn the_thread_clock_counts_this_threads_work_only() {
        let before = thread_cpu_time().expect("Linux tells a thread's CPU time");
        let mut sum = 0u64;
        let started = std::time::Instant::now();
        // Busy until the clock shows 15 ms of work, within 5 s of wall time however loaded
        // the machine is: a clock that does not count the work never gets there.
        let mut busy = Duration::ZERO;
        while busy < Duration::from_millis(15) && started.elapsed() < Duration::from_secs(5) {
            for _ in 0..1000 {
                sum = sum.wrapping_add(std::hint::black_box(sum) ^ 7);
            }
            busy = thread_cpu_time().expect("again") - before;
        }
        std::hint::black_box(sum);
        assert!(busy >= Duration::from_millis(15), "{busy:?}");
        // Sleeping costs no CPU.
        let before = thread_cpu_time().expect("again");
        std::thread::sleep(Duration::from_millis(30));
        let asleep = thread_cpu_time().expect("again") - before;
        assert!(asleep < Duration::from_millis(10), "{asleep:?}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_budgeted_thread_rests_after_its_work() {
        let mut budget = CpuBudget::new(0.1);
        budget.rest().await;
        let started = std::time::Instant::now();
        // Busy for 10 ms of this thread's CPU (not of the wall clock: on a loaded machine the
        // loop is descheduled, which only stretches the wall time).
        let cpu = thread_cpu_time().expect("Linux tells a thread's CPU time");
        while thread_cpu_time().expect("again") - cpu < Duration::from_millis(10) {
            std::hint::black_box(started.elapsed());
        }
        budget.rest().await;
        // 10 ms of CPU at a tenth: the work and the rest together last at least 100 ms.
        assert!(
            started.elapsed() >= Duration::from_millis(95),
            "{:?}",
            started.elapsed()
        );
        let mut free = CpuBudget::unlimited();
        free.rest().await;
        let before = std::time::Instant::now();
        free.rest().await;
        assert!(before.elapsed() < Duration::from_millis(5));
    }
}
