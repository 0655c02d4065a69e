//! Where hand-written programs run, in every command that evaluates them: `kanon serve`,
//! `kanon apply` and `kanon test` run the programs policy authors write in the same pool of
//! memory-limited worker processes (this executable, re-executed as `kanon program-worker`:
//! [`kanon_webhook::sandbox`]), started with the same flags ([`ProgramArgs`]), each program
//! stopped at the review's deadline. A program that exhausts its worker's memory or outlives
//! the deadline fails under its policy's `failurePolicy` with a message naming the bound, and
//! kanon's own memory is not touched.
//!
//! `kanon serve` hands its [`SandboxConfig`] to the server. The offline commands evaluate one
//! request at a time in the calling thread ([`OfflineEvaluation`]); their pool, and the small
//! runtime that speaks to its workers, start only when a hand-written program is first run, so
//! policies without one cost nothing more.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use kanon_engine::{
    Deadline, Decision, Evaluation, Finding, Lookup, PolicySet, Request, RequestError,
};
use kanon_engine::{Program, ProgramError};
use kanon_engine::{ProgramFuture, ProgramHost, ProgramInput};
use kanon_webhook::sandbox::{ProgramSandbox, SandboxConfig};
use serde_json::Value;

/// The flags of the program workers, the same for `kanon serve`, `kanon apply` and
/// `kanon test`.
#[derive(Debug, Clone, Args)]
pub struct ProgramArgs {
    /// How many worker processes run hand-written `program`s (each runs one at a time, so
    /// this many run at once; `kanon apply` and `kanon test` run one at a time); 0 runs them
    /// in kanon's own threads, where a program that exhausts memory takes kanon down.
    /// Default: the number of CPUs.
    #[arg(long, value_name = "N")]
    program_workers: Option<usize>,
    /// The address-space limit of each program worker process, in MiB: a program that needs
    /// more ends its worker and fails under its policy's failure policy.
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    program_memory_mib: u64,
}

impl ProgramArgs {
    /// Where hand-written programs run: workers started from this executable; `None` (with
    /// `--program-workers 0`) in kanon's own threads.
    pub fn sandbox_config(&self) -> Result<Option<SandboxConfig>, String> {
        match self.workers()? {
            Some(workers) => workers.config().map(Some),
            None => Ok(None),
        }
    }

    /// How many workers with how much memory, the flags checked; `None` with
    /// `--program-workers 0`. Finding the executable the workers run is left to
    /// [`Workers::config`], so that a kanon that never runs a program (in a root without
    /// `/proc`, say) never needs it.
    fn workers(&self) -> Result<Option<Workers>, String> {
        let cpus = std::thread::available_parallelism().map_or(2, usize::from);
        let workers = self.program_workers.unwrap_or(cpus);
        if workers == 0 {
            return Ok(None);
        }
        if self.program_memory_mib < 64 {
            return Err(format!(
                "--program-memory-mib {}: at least 64 MiB (a worker maps about 30 MiB to start)",
                self.program_memory_mib
            ));
        }
        Ok(Some(Workers {
            count: workers,
            memory_mib: self.program_memory_mib,
        }))
    }
}

/// The program workers the flags ask for.
#[derive(Debug, Clone, Copy)]
struct Workers {
    count: usize,
    memory_mib: u64,
}

impl Workers {
    /// The sandbox that starts them: this executable, re-run as `kanon program-worker`.
    fn config(self) -> Result<SandboxConfig, String> {
        let exe = std::env::current_exe().map_err(|e| {
            format!("cannot find kanon's own executable to start program workers: {e}")
        })?;
        Ok(SandboxConfig {
            command: vec![exe.display().to_string(), "program-worker".to_string()],
            workers: self.count,
            memory_mib: self.memory_mib,
        })
    }
}

/// The deadline of each review `kanon apply` and `kanon test` evaluate, as kube-apiserver
/// gives one to a webhook.
#[derive(Debug, Clone, Args)]
pub struct DeadlineArgs {
    /// Each resource's review must be decided within this many seconds, as a webhook's
    /// `timeoutSeconds` bounds it in a cluster (1 to 30; kube-apiserver's default is 10): a
    /// hand-written program still running then is stopped, and it and the policies left fail
    /// under their failure policy, as `kanon serve` decides.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 10,
        value_parser = clap::value_parser!(u64).range(1..=30)
    )]
    timeout_seconds: u64,
}

/// How `kanon apply` and `kanon test` evaluate requests: one at a time, in the calling thread,
/// with the review's deadline and, unless `--program-workers 0`, hand-written programs in
/// worker processes as `kanon serve` runs them.
pub struct OfflineEvaluation {
    workers: Option<Workers>,
    timeout: Duration,
    /// The time PolicyExceptions' `expiresAt` is judged at (Unix seconds): the clock's, or
    /// the one a command or suite gives.
    now: AtomicI64,
    /// Started on the first hand-written program.
    pool: OnceLock<Result<Pool, String>>,
}

/// The workers and the runtime that starts, speaks to and reaps them. Fields drop in order:
/// the workers (killed when dropped) before the runtime.
struct Pool {
    sandbox: ProgramSandbox,
    runtime: tokio::runtime::Runtime,
}

impl OfflineEvaluation {
    /// The evaluation the flags ask for; bad flags are bad input.
    pub fn new(programs: &ProgramArgs, deadline: &DeadlineArgs) -> Result<Self, String> {
        Ok(OfflineEvaluation {
            workers: programs.workers()?,
            timeout: Duration::from_secs(deadline.timeout_seconds),
            now: AtomicI64::new(crate::exceptions::clock()),
            pool: OnceLock::new(),
        })
    }

    /// Judges PolicyExceptions' `expiresAt` at `now` (Unix seconds) from here on.
    pub fn set_now(&self, now: i64) {
        self.now.store(now, Ordering::Relaxed);
    }

    /// What kube-apiserver would make of `request` with kanon installed
    /// ([`PolicySet::review`]), decided by the review's deadline, hand-written programs in
    /// the workers.
    pub fn review(&self, policies: &PolicySet, request: &Request, lookup: &dyn Lookup) -> Decision {
        let until = Instant::now() + self.timeout;
        let host = self.host(until);
        let evaluation = self.evaluation(lookup, host.as_ref(), until);
        kanon_engine::block_on(policies.review_in(request, &evaluation))
    }

    /// What the background audit would find of `object` ([`PolicySet::audit_in`]), under the
    /// same bounds as [`OfflineEvaluation::review`].
    pub fn audit(
        &self,
        policies: &PolicySet,
        object: Value,
        lookup: &dyn Lookup,
    ) -> Result<Vec<Finding>, RequestError> {
        let until = Instant::now() + self.timeout;
        let host = self.host(until);
        let evaluation = self.evaluation(lookup, host.as_ref(), until);
        kanon_engine::block_on(policies.audit_in(object, &evaluation))
    }

    fn host(&self, until: Instant) -> Option<BoundedHost<'_>> {
        self.workers.as_ref().map(|_| BoundedHost {
            evaluation: self,
            until,
        })
    }

    fn evaluation<'a>(
        &self,
        lookup: &'a dyn Lookup,
        host: Option<&'a BoundedHost<'_>>,
        until: Instant,
    ) -> Evaluation<'a> {
        Evaluation::new(lookup)
            .with_programs(host.map(|host| host as &dyn ProgramHost))
            .with_deadline(Some(Deadline::new(move || Instant::now() >= until)))
            .with_now(Some(self.now.load(Ordering::Relaxed)))
    }

    fn pool(&self) -> Result<&Pool, &str> {
        self.pool
            .get_or_init(|| {
                let config = self.workers.ok_or("no program workers")?.config()?;
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("cannot start the runtime of the program workers: {e}"))?;
                Ok(Pool {
                    sandbox: ProgramSandbox::new(config),
                    runtime,
                })
            })
            .as_ref()
            .map_err(String::as_str)
    }
}

/// The program host of one review: the pool's workers, by the review's deadline.
struct BoundedHost<'e> {
    evaluation: &'e OfflineEvaluation,
    until: Instant,
}

impl ProgramHost for BoundedHost<'_> {
    fn run<'a>(&'a self, program: &'a Program, input: ProgramInput) -> ProgramFuture<'a> {
        Box::pin(async move {
            // The evaluation runs outside any runtime (`block_on`, one request at a time), so
            // the call waits on the pool's own.
            let pool = self.evaluation.pool().map_err(ProgramError::new)?;
            let until = tokio::time::Instant::from_std(self.until);
            pool.runtime
                .block_on(pool.sandbox.run_until(program, input, until))
        })
    }
}
