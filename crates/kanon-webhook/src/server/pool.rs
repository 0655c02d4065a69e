//! The evaluation pool: the threads reviews are evaluated on, apart from the runtime's workers.
//!
//! The runtime's workers accept connections, complete TLS handshakes, read bodies, answer
//! reviews that need no evaluation ([`crate::triage`]) and write answers; a review's evaluation
//! (its JSON read, its policies run: CEL, templates, the engine's own work) runs on a thread of
//! this pool, one review per thread, driven by the runtime for its lookups and timers. However
//! long a tenant's policies compute, the workers go on doing I/O: the kernel shares the cores
//! between the pool's threads and the workers, and the pool's threads run at a lower priority
//! ([`EVALUATION_NICE`]), so a worker that wakes to accept a connection or answer a review
//! preempts an evaluation rather than waiting for its time slice. How many reviews compute at
//! once is bounded by the evaluation slots ([`crate::slot`]); a review waiting on a lookup
//! keeps its thread but gives its slot back.

use std::future::Future;
use std::io;
use std::time::Duration;

use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinError;

/// How much nicer the pool's threads are than the workers: an evaluation gets about a third of
/// the CPU a busy worker gets (the kernel's weights for nice 5 and 0: 335 and 1024), so I/O
/// goes first yet evaluations keep going under any I/O load.
pub(super) const EVALUATION_NICE: i32 = 5;

/// How long an idle thread of the pool is kept for the next review.
const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// Threads of their own for evaluations (see the module's doc).
pub(super) struct EvaluationPool {
    /// A runtime used only for its pool of blocking threads; `None` once shut down.
    threads: Option<Runtime>,
}

impl EvaluationPool {
    /// At most `max_threads` threads at once (reviews past it wait for one; each review in
    /// progress holds a connection, so the connection cap is the natural bound).
    pub(super) fn start(max_threads: usize) -> io::Result<Self> {
        let threads = tokio::runtime::Builder::new_current_thread()
            .thread_name("kanon-evaluation")
            .max_blocking_threads(max_threads.max(1))
            .thread_keep_alive(KEEP_ALIVE)
            .on_thread_start(lower_priority)
            .build()?;
        Ok(EvaluationPool {
            threads: Some(threads),
        })
    }

    /// Runs `future` to its end on a thread of the pool, its I/O and timers driven by `io`
    /// (the runtime of the workers).
    pub(super) async fn run<F>(&self, io: Handle, future: F) -> Result<F::Output, JoinError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let threads = match &self.threads {
            Some(threads) => threads.handle().clone(),
            // Only after shutdown: on the caller's own thread pool, not lost.
            None => io.clone(),
        };
        threads.spawn_blocking(move || io.block_on(future)).await
    }
}

impl Drop for EvaluationPool {
    fn drop(&mut self) {
        // Dropping a runtime waits for its threads, which an async context may not do.
        if let Some(threads) = self.threads.take() {
            threads.shutdown_background();
        }
    }
}

/// Lowers the calling thread's priority by [`EVALUATION_NICE`] (Linux applies it to the one
/// thread whose id it is given); where that is refused, the thread keeps its priority.
fn lower_priority() {
    // SAFETY: gettid, getpriority and setpriority take plain integers and touch no memory of
    // ours.
    let result = unsafe {
        let tid = libc::gettid() as libc::id_t;
        let current = libc::getpriority(libc::PRIO_PROCESS, tid);
        libc::setpriority(libc::PRIO_PROCESS, tid, (current + EVALUATION_NICE).min(19))
    };
    if result != 0 {
        tracing::debug!(
            error = %io::Error::last_os_error(),
            "an evaluation thread runs at normal priority: its priority cannot be lowered"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_future_runs_on_a_thread_of_its_own_at_a_lower_priority() {
        let pool = EvaluationPool::start(2).expect("a pool");
        let worker = std::thread::current().id();
        // SAFETY: as in `lower_priority`.
        let before = unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
        let (thread, nice, slept) = pool
            .run(Handle::current(), async move {
                // The runtime's timers work there.
                tokio::time::sleep(Duration::from_millis(5)).await;
                // SAFETY: as in `lower_priority`.
                let nice =
                    unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
                (std::thread::current().id(), nice, true)
            })
            .await
            .expect("joined");
        assert_ne!(thread, worker);
        assert!(slept);
        assert_eq!(nice, (before + EVALUATION_NICE).min(19));
    }
}
