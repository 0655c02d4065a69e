//! The evaluation pool: the threads reviews are evaluated on, apart from the runtime's workers.
//!
//! The runtime's workers accept connections, complete TLS handshakes, read bodies, answer
//! reviews that need no evaluation ([`crate::triage`]) and write answers; a review's evaluation
//! (its JSON read, its policies run: CEL, templates, the engine's own work) runs on a thread of
//! this pool, one review per thread, driven by the runtime for its lookups and timers. However
//! long a tenant's policies compute, the workers go on doing I/O: the kernel shares the cores
//! between the pool's threads and the workers, and the pool's threads run at a lower priority
//! ([`priority::EVALUATION_NICE`]). How many reviews compute at once is bounded by the
//! evaluation slots ([`crate::slot`]); a review waiting on a lookup keeps its thread but gives
//! its slot back.
//!
//! A nicer thread still gets its time slice once it runs, and on a busy machine those slices
//! showed in other namespaces' tails. So, when the server is given a threshold, the reviews of
//! a *costly* flow — a namespace whose recent reviews cost more CPU than that each ([`cost`]) —
//! run on threads of their own in the idle class ([`priority::idle`]): they compute only on
//! what the rest of kanon leaves of the cores, and yield at once to a worker or another flow's
//! evaluation. In a container that is kanon's own CPU share; where kanon shares its CPU group
//! with other programs (a laptop, a test beside kube-apiserver), a costly flow's reviews would
//! wait for those programs too, which is why it is off unless asked for.

use std::future::Future;
use std::io;
use std::time::Duration;

use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinError;

use super::cost::Costs;
use super::priority;

/// How long an idle thread of the pool is kept for the next review.
const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// Threads of their own for evaluations (see the module's doc).
pub(super) struct EvaluationPool {
    /// A runtime used only for its pool of blocking threads; `None` once shut down.
    threads: Option<Runtime>,
    /// The threads of costly flows, and what flows cost, when asked for.
    costly: Option<Costly>,
}

/// The idle-class threads and the book that sends reviews to them.
struct Costly {
    threads: Runtime,
    costs: Costs,
}

/// A review evaluated by the pool.
pub(super) struct Evaluated<T> {
    pub(super) output: T,
    /// Whether it ran in the idle class, its flow being costly.
    pub(super) demoted: bool,
}

impl EvaluationPool {
    /// At most `max_threads` threads at once in each class (reviews past it wait for one; each
    /// review in progress holds a connection, so the connection cap is the natural bound).
    /// With `costly_above`, a namespace whose recent reviews each took more CPU than that has
    /// its next reviews evaluated in the idle class.
    pub(super) fn start(max_threads: usize, costly_above: Option<Duration>) -> io::Result<Self> {
        let threads = |name: &str, on_start: fn()| {
            tokio::runtime::Builder::new_current_thread()
                .thread_name(name)
                .max_blocking_threads(max_threads.max(1))
                .thread_keep_alive(KEEP_ALIVE)
                .on_thread_start(on_start)
                .build()
        };
        let costly = match costly_above {
            Some(above) => Some(Costly {
                threads: threads("kanon-costly", priority::idle)?,
                costs: Costs::new(above),
            }),
            None => None,
        };
        Ok(EvaluationPool {
            threads: Some(threads("kanon-evaluation", priority::lower)?),
            costly,
        })
    }

    /// Runs `future`, a review of `flow`, to its end on a thread of the pool, its I/O and
    /// timers driven by `io` (the runtime of the workers), and (when costly flows are told
    /// apart) records its CPU time for the flow.
    pub(super) async fn run<F>(
        &self,
        io: Handle,
        flow: &str,
        future: F,
    ) -> Result<Evaluated<F::Output>, JoinError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let normal = match &self.threads {
            Some(threads) => threads.handle().clone(),
            // Only after shutdown: on the caller's own thread pool, not lost.
            None => io.clone(),
        };
        // Nothing measured where costly flows are not told apart (or after shutdown).
        let Some(costly) = self.costly.as_ref().filter(|_| self.threads.is_some()) else {
            let output = normal.spawn_blocking(move || io.block_on(future)).await?;
            return Ok(Evaluated {
                output,
                demoted: false,
            });
        };
        let demoted = costly.costs.costly(flow);
        let threads = if demoted {
            costly.threads.handle().clone()
        } else {
            normal
        };
        let (output, cpu) = threads
            .spawn_blocking(move || {
                let start = priority::cpu_time();
                let output = io.block_on(future);
                (output, priority::cpu_time().saturating_sub(start))
            })
            .await?;
        costly.costs.record(flow, cpu);
        Ok(Evaluated { output, demoted })
    }
}

impl Drop for EvaluationPool {
    fn drop(&mut self) {
        // Dropping a runtime waits for its threads, which an async context may not do.
        if let Some(threads) = self.threads.take() {
            threads.shutdown_background();
        }
        if let Some(costly) = self.costly.take() {
            costly.threads.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nice() -> i32 {
        // SAFETY: getpriority takes plain integers.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
    }

    fn class() -> libc::c_int {
        // SAFETY: 0 names the calling thread.
        unsafe { libc::sched_getscheduler(0) }
    }

    /// Computes for `cpu` on the thread it runs on.
    async fn compute(cpu: Duration) -> (std::thread::ThreadId, i32, libc::c_int) {
        let start = priority::cpu_time();
        let mut x = 0u64;
        while priority::cpu_time().saturating_sub(start) < cpu {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        (std::thread::current().id(), nice(), class())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_future_runs_on_a_thread_of_its_own_at_a_lower_priority() {
        let pool = EvaluationPool::start(2, None).expect("a pool");
        let worker = std::thread::current().id();
        let before = nice();
        let evaluated = pool
            .run(Handle::current(), "apps", async move {
                // The runtime's timers work there.
                tokio::time::sleep(Duration::from_millis(5)).await;
                (std::thread::current().id(), nice(), class())
            })
            .await
            .expect("joined");
        let (thread, nice, class) = evaluated.output;
        assert_ne!(thread, worker);
        assert_eq!(nice, (before + priority::EVALUATION_NICE).min(19));
        assert_eq!(class, libc::SCHED_OTHER);
        assert!(!evaluated.demoted);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_costly_flows_reviews_run_in_the_idle_class_and_others_do_not() {
        let pool = EvaluationPool::start(2, Some(Duration::from_millis(5))).expect("a pool");
        let io = Handle::current();
        let first = pool
            .run(io.clone(), "tenant", compute(Duration::from_millis(20)))
            .await
            .expect("joined");
        assert!(
            !first.demoted,
            "nothing is known of the flow before its first review"
        );
        assert_eq!(first.output.2, libc::SCHED_OTHER);

        let next = pool
            .run(io.clone(), "tenant", compute(Duration::ZERO))
            .await
            .expect("joined");
        assert!(next.demoted);
        assert_eq!(next.output.2, libc::SCHED_IDLE);

        let other = pool
            .run(io.clone(), "apps", compute(Duration::ZERO))
            .await
            .expect("joined");
        assert!(!other.demoted, "another namespace keeps its priority");
        assert_eq!(other.output.2, libc::SCHED_OTHER);

        // Cheap reviews bring the tenant back: (20 + 0) / 2 = 10, then 5, then 2.5.
        for _ in 0..3 {
            pool.run(io.clone(), "tenant", compute(Duration::ZERO))
                .await
                .expect("joined");
        }
        let mended = pool
            .run(io, "tenant", compute(Duration::ZERO))
            .await
            .expect("joined");
        assert!(!mended.demoted);
        assert_eq!(mended.output.2, libc::SCHED_OTHER);
    }
}
