//! Where reviews are evaluated: on the runtime's worker while they are cheap, on the threads of
//! the evaluation pool once they prove costly.
//!
//! The runtime's workers accept connections, complete TLS handshakes, read bodies, answer
//! reviews that need no evaluation ([`crate::triage`]) and write answers. Most reviews' whole
//! evaluation (their JSON read, their policies run) takes tens of microseconds, less than
//! handing them to another thread and back would (two wake-ups of a sleeping thread, each a
//! trip through the scheduler and, on a virtual machine, an interrupt between cores: measured at
//! ~100 µs of CPU per review, two thirds of the request path's cost). So a review's evaluation
//! is first polled on the worker that read it, for at most [`INLINE_SHARE`] of its time: the
//! engine asks, between policies and between a policy's steps, whether that share is used up
//! ([`pause`]), and if so yields, and the rest of the evaluation moves to a thread of the pool.
//! A review whose body is large ([`INLINE_BODY_MAX`]) — its JSON read alone would take the
//! share — and the reviews of a namespace whose recent reviews took longer than the share
//! ([`cost`]) start on the pool. So however long a tenant's policies compute, the workers go
//! on doing I/O: at most one share, plus what one policy step computes before its next pause,
//! of a first costly review is taken from them.
//!
//! On the pool, one review per thread, driven by the runtime for its lookups and timers, the
//! kernel shares the cores between the pool's threads and the workers, and the pool's threads
//! run at a lower priority ([`priority::EVALUATION_NICE`]). How many reviews compute at once is
//! bounded by the evaluation slots ([`crate::slot`]); a review waiting on a lookup keeps its
//! thread but gives its slot back.
//!
//! A nicer thread still gets its time slice once it runs, and on a busy machine those slices
//! showed in other namespaces' tails. So, when the server is given a threshold, the reviews of
//! a *costly* flow — a namespace whose recent reviews cost more CPU than that each ([`cost`]) —
//! run on threads of their own in the idle class ([`priority::idle`]): they compute only on
//! what the rest of kanon leaves of the cores, and yield at once to a worker or another flow's
//! evaluation. In a container that is kanon's own CPU share; where kanon shares its CPU group
//! with other programs (a laptop, a test beside kube-apiserver), a costly flow's reviews would
//! wait for those programs too, which is why it is off unless asked for.

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::task::Poll;
use std::time::{Duration, Instant};

use kanon_engine::Pause;
use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinError;

use super::cost::Costs;
use super::priority;

/// How long an idle thread of the pool is kept for the next review.
const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// How long a review's evaluation may run on the worker that read it before the rest moves to
/// the pool: several times what a review of ten matching policies costs, and short enough that
/// the connections it delays do not notice.
pub(super) const INLINE_SHARE: Duration = Duration::from_millis(1);

/// The largest body whose review starts on the worker: reading a larger one's JSON alone would
/// take more than [`INLINE_SHARE`], and the engine cannot pause within it.
pub(super) const INLINE_BODY_MAX: usize = 128 * 1024;

thread_local! {
    /// While a worker polls an evaluation: when the evaluation's share of the worker ends.
    static INLINE_UNTIL: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The engine's [`Pause`] for the reviews of this server: due once an evaluation polled on a
/// worker has used its [`INLINE_SHARE`]; never on a thread of the pool.
pub(super) fn pause() -> Pause {
    Pause::new(share_used)
}

/// Whether the evaluation being polled on this thread has used its share of a worker.
fn share_used() -> bool {
    INLINE_UNTIL
        .get()
        .is_some_and(|until| Instant::now() >= until)
}

/// Sets [`INLINE_UNTIL`] for one poll, and puts back what was there however the poll ends.
struct InlineShare(Option<Instant>);

impl InlineShare {
    fn begin(until: Instant) -> Self {
        InlineShare(INLINE_UNTIL.replace(Some(until)))
    }
}

impl Drop for InlineShare {
    fn drop(&mut self) {
        INLINE_UNTIL.set(self.0);
    }
}

/// Threads of their own for evaluations (see the module's doc).
pub(super) struct EvaluationPool {
    /// A runtime used only for its pool of blocking threads; `None` once shut down.
    threads: Option<Runtime>,
    /// The flows whose recent reviews took longer than [`INLINE_SHARE`]: they start on the pool.
    long: Costs,
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
            long: Costs::new(INLINE_SHARE),
            costly,
        })
    }

    /// Runs `future`, the evaluation of a review of `flow` whose body had `body_bytes`, to its
    /// end: on the calling worker for its first [`INLINE_SHARE`], the rest on a thread of the
    /// pool, its I/O and timers driven by `io` (the runtime of the workers); or all of it on
    /// the pool when its body is large or its flow's reviews are long (or costly: then in the
    /// idle class). What it took is recorded for its flow.
    pub(super) async fn run<F>(
        &self,
        io: Handle,
        flow: &str,
        body_bytes: usize,
        future: F,
    ) -> Result<Evaluated<F::Output>, JoinError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let Some(threads) = &self.threads else {
            // Only after shutdown: on the caller's worker, not lost.
            return Ok(Evaluated {
                output: future.await,
                demoted: false,
            });
        };
        if let Some(costly) = self.costly.as_ref().filter(|c| c.costs.costly(flow)) {
            let (output, cpu) = on_thread(costly.threads.handle(), io, future).await?;
            self.record(flow, cpu);
            return Ok(Evaluated {
                output,
                demoted: true,
            });
        }
        let mut future = Box::pin(future);
        let mut inline = Duration::ZERO;
        if body_bytes <= INLINE_BODY_MAX && !self.long.costly(flow) {
            let evaluated = std::future::poll_fn(|cx| {
                let start = Instant::now();
                let polled = {
                    let _share = InlineShare::begin(start + INLINE_SHARE.saturating_sub(inline));
                    future.as_mut().poll(cx)
                };
                inline += start.elapsed();
                match polled {
                    Poll::Ready(output) => Poll::Ready(Some(output)),
                    // Paused (or waiting) with its share used up: the rest goes to the pool.
                    Poll::Pending if inline >= INLINE_SHARE => Poll::Ready(None),
                    Poll::Pending => Poll::Pending,
                }
            })
            .await;
            if let Some(output) = evaluated {
                self.record(flow, inline);
                return Ok(Evaluated {
                    output,
                    demoted: false,
                });
            }
        }
        let (output, cpu) = on_thread(threads.handle(), io, future).await?;
        self.record(flow, inline + cpu);
        Ok(Evaluated {
            output,
            demoted: false,
        })
    }

    /// Records that a review of `flow` took `cpu`.
    fn record(&self, flow: &str, cpu: Duration) {
        self.long.record(flow, cpu);
        if let Some(costly) = &self.costly {
            costly.costs.record(flow, cpu);
        }
    }
}

/// Runs `future` to its end on a thread of `threads`, driven by `io`: its output and the CPU
/// time it took there.
async fn on_thread<F>(
    threads: &Handle,
    io: Handle,
    future: F,
) -> Result<(F::Output, Duration), JoinError>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    threads
        .spawn_blocking(move || {
            let start = priority::cpu_time();
            let output = io.block_on(future);
            (output, priority::cpu_time().saturating_sub(start))
        })
        .await
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

    /// Pends once when the share is used, as the engine's pause points do.
    async fn pause_point() {
        if share_used() {
            let mut yielded = false;
            std::future::poll_fn(|cx| {
                if yielded {
                    return Poll::Ready(());
                }
                yielded = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            })
            .await;
        }
    }

    /// Where it ran: its thread, nice value and class.
    fn here() -> (std::thread::ThreadId, i32, libc::c_int) {
        (std::thread::current().id(), nice(), class())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_cheap_evaluation_runs_on_its_worker_even_across_a_wait() {
        let pool = EvaluationPool::start(2, None).expect("a pool");
        let worker = here();
        let evaluated = pool
            .run(Handle::current(), "apps", 10_000, async move {
                pause_point().await;
                // The runtime's timers work there; waiting is not computing.
                tokio::time::sleep(Duration::from_millis(5)).await;
                pause_point().await;
                here()
            })
            .await
            .expect("joined");
        assert_eq!(evaluated.output, worker);
        assert!(!evaluated.demoted);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn an_evaluation_past_its_share_moves_to_a_thread_of_the_pool_at_a_lower_priority() {
        let pool = EvaluationPool::start(2, None).expect("a pool");
        let worker = here();
        let evaluated = pool
            .run(Handle::current(), "apps", 10_000, async move {
                let first = compute(INLINE_SHARE * 2).await;
                pause_point().await;
                tokio::time::sleep(Duration::from_millis(5)).await;
                (first, here())
            })
            .await
            .expect("joined");
        let (first, rest) = evaluated.output;
        assert_eq!(first, worker, "it starts on its worker");
        assert_ne!(rest.0, worker.0, "the rest moved at its pause");
        assert_eq!(rest.1, (worker.1 + priority::EVALUATION_NICE).min(19));
        assert_eq!(rest.2, libc::SCHED_OTHER);

        // Its namespace's next review starts on the pool; another namespace's does not.
        let next = pool
            .run(Handle::current(), "apps", 10_000, async { here() })
            .await
            .expect("joined");
        assert_ne!(next.output.0, worker.0);
        let other = pool
            .run(Handle::current(), "web", 10_000, async { here() })
            .await
            .expect("joined");
        assert_eq!(other.output, worker);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_large_review_starts_on_the_pool() {
        let pool = EvaluationPool::start(2, None).expect("a pool");
        let worker = here();
        let evaluated = pool
            .run(Handle::current(), "apps", INLINE_BODY_MAX + 1, async {
                here()
            })
            .await
            .expect("joined");
        assert_ne!(evaluated.output.0, worker.0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_costly_flows_reviews_run_in_the_idle_class_and_others_do_not() {
        let pool = EvaluationPool::start(2, Some(Duration::from_millis(5))).expect("a pool");
        let io = Handle::current();
        let first = pool
            .run(io.clone(), "tenant", 0, compute(Duration::from_millis(20)))
            .await
            .expect("joined");
        assert!(
            !first.demoted,
            "nothing is known of the flow before its first review"
        );
        assert_eq!(first.output.2, libc::SCHED_OTHER);

        let next = pool
            .run(io.clone(), "tenant", 0, compute(Duration::ZERO))
            .await
            .expect("joined");
        assert!(next.demoted);
        assert_eq!(next.output.2, libc::SCHED_IDLE);

        let other = pool
            .run(io.clone(), "apps", 0, compute(Duration::ZERO))
            .await
            .expect("joined");
        assert!(!other.demoted, "another namespace keeps its priority");
        assert_eq!(other.output.2, libc::SCHED_OTHER);

        // Cheap reviews bring the tenant back: (20 + 0) / 2 = 10, then 5, then 2.5.
        for _ in 0..3 {
            pool.run(io.clone(), "tenant", 0, compute(Duration::ZERO))
                .await
                .expect("joined");
        }
        let mended = pool
            .run(io, "tenant", 0, compute(Duration::ZERO))
            .await
            .expect("joined");
        assert!(!mended.demoted);
        assert_eq!(mended.output.2, libc::SCHED_OTHER);
    }
}
