//! Hand-written programs in worker processes: the [`ProgramHost`] of `kanon serve` (and, one
//! program at a time, of `kanon apply` and `kanon test`).
//!
//! A program's fuel, recursion and output bounds hold inside the program runtime, but a few of
//! the runtime's operations are not charged (see SECURITY.md), and a thread that allocates
//! without end cannot be stopped from inside its process: it would take the whole server, and
//! every other policy, down with it. So `kanon serve` runs the programs policy authors write in
//! a small pool of worker processes (`kanon program-worker`), each with an address-space limit
//! (`RLIMIT_AS`). A worker that runs out of memory dies alone; a worker whose program is
//! still running at the review's deadline is killed. Either way the policy fails under its
//! own failure policy, with a message that says which bound it met, and the next program gets
//! a fresh worker.
//!
//! The protocol, over the worker's standard input and output: frames of a 4-byte big-endian
//! length and a JSON body, a [`ProgramCall`] in, a [`ProgramReply`] out, one at a time.
//! Workers keep compiled programs by source, so a program compiles once per worker.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use kanon_engine::{Program, ProgramError};
use kanon_engine::{ProgramCall, ProgramInput, ProgramReply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// The largest frame either side reads: a review body (at most a few MiB) and its context, or
/// a program's output (256 KiB by default) as JSON.
const MAX_FRAME_BYTES: usize = 64 << 20;

/// How many compiled programs a worker keeps; past that it starts over.
const WORKER_CACHE: usize = 512;

/// How the pool starts and bounds its workers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxConfig {
    /// The worker's executable and arguments (`kanon program-worker`).
    pub command: Vec<String>,
    /// At most this many workers (programs running at once); the rest wait.
    pub workers: usize,
    /// Each worker's address-space limit, in MiB, set when the pool starts it.
    pub memory_mib: u64,
}

/// Why a program could not be run in a worker. The message is what the policy fails with.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The review's deadline passed while the program waited for a worker or ran; its worker,
    /// if it had one, was killed.
    #[error(
        "the program did not finish before the review's deadline ({after:?}); its worker process was stopped"
    )]
    TimedOut {
        /// How long it was given.
        after: Duration,
    },
    /// The worker ended while running the program.
    #[error(
        "the program's worker process ended while running it ({status}); a program that needs more than the workers' {memory_mib} MiB of memory ends so"
    )]
    WorkerDied {
        /// How it ended.
        status: String,
        /// The limit.
        memory_mib: u64,
    },
    /// The worker could not be started or spoken to.
    #[error("the program's worker process: {0}")]
    Io(String),
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    /// Silent unless the worker fails (an allocation that fails prints why before aborting).
    stderr: ChildStderr,
}

/// A pool of worker processes that run hand-written programs.
pub struct ProgramSandbox {
    config: SandboxConfig,
    slots: Semaphore,
    idle: Mutex<Vec<Worker>>,
}

impl ProgramSandbox {
    /// A pool that starts workers with `config.command` as they are needed.
    pub fn new(config: SandboxConfig) -> Self {
        let workers = config.workers.max(1);
        ProgramSandbox {
            slots: Semaphore::new(workers),
            idle: Mutex::new(Vec::with_capacity(workers)),
            config,
        }
    }

    /// Runs `program` on `input` in a worker, by `deadline`.
    pub async fn run_until(
        &self,
        program: &Program,
        input: ProgramInput,
        deadline: Instant,
    ) -> Result<Option<serde_json::Value>, ProgramError> {
        let given = deadline.saturating_duration_since(Instant::now());
        let timed_out = || SandboxError::TimedOut {
            after: Duration::from_millis(given.as_millis().min(u64::MAX as u128) as u64),
        };
        let frame = serde_json::to_vec(&ProgramCall::new(program, input))
            .map_err(|e| ProgramError::new(format!("the program's input: {e}")))?;
        let _slot = match tokio::time::timeout_at(deadline, self.slots.acquire()).await {
            Ok(Ok(slot)) => slot,
            Ok(Err(_)) => return Err(error(SandboxError::Io("the pool is closed".into()))),
            Err(_) => return Err(error(timed_out())),
        };
        let mut worker = match self.take() {
            Some(worker) => worker,
            None => self.spawn().map_err(error)?,
        };
        match tokio::time::timeout_at(deadline, exchange(&mut worker, &frame)).await {
            Ok(Ok(reply)) => {
                self.give_back(worker);
                reply.into()
            }
            Ok(Err(e)) => {
                let status = stop(worker).await;
                Err(error(match e {
                    ExchangeError::Closed => SandboxError::WorkerDied {
                        status,
                        memory_mib: self.config.memory_mib,
                    },
                    ExchangeError::Other(message) => SandboxError::Io(message),
                }))
            }
            Err(_) => {
                stop(worker).await;
                Err(error(timed_out()))
            }
        }
    }

    fn take(&self) -> Option<Worker> {
        self.idle.lock().ok()?.pop()
    }

    fn give_back(&self, worker: Worker) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(worker);
        }
    }

    fn spawn(&self) -> Result<Worker, SandboxError> {
        let (program, args) = self
            .config
            .command
            .split_first()
            .ok_or_else(|| SandboxError::Io("no worker command configured".into()))?;
        let mut command = Command::new(program);
        #[cfg(unix)]
        {
            let bytes = self.config.memory_mib.saturating_mul(1 << 20);
            // SAFETY: between fork and exec the closure only calls setrlimit, which is
            // async-signal-safe, on values computed before the fork.
            unsafe {
                command.pre_exec(move || limit_address_space(bytes));
            }
        }
        let mut child = command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| SandboxError::Io(format!("cannot start `{program}`: {e}")))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(SandboxError::Io("the worker has no pipes".into()));
        };
        Ok(Worker {
            child,
            stdin,
            stdout,
            stderr,
        })
    }
}

fn error(e: SandboxError) -> ProgramError {
    ProgramError::new(e.to_string())
}

enum ExchangeError {
    /// The worker closed its pipes: it ended.
    Closed,
    Other(String),
}

/// Sends one call and reads its reply.
async fn exchange(worker: &mut Worker, frame: &[u8]) -> Result<ProgramReply, ExchangeError> {
    let closed = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::UnexpectedEof => ExchangeError::Closed,
        _ => ExchangeError::Other(e.to_string()),
    };
    let length = u32::try_from(frame.len())
        .map_err(|_| ExchangeError::Other("the program's input is too large".into()))?;
    worker
        .stdin
        .write_all(&length.to_be_bytes())
        .await
        .map_err(closed)?;
    worker.stdin.write_all(frame).await.map_err(closed)?;
    worker.stdin.flush().await.map_err(closed)?;
    let mut head = [0u8; 4];
    worker.stdout.read_exact(&mut head).await.map_err(closed)?;
    let length = u32::from_be_bytes(head) as usize;
    if length > MAX_FRAME_BYTES {
        return Err(ExchangeError::Other(format!(
            "the worker's answer is {length} bytes long; the limit is {MAX_FRAME_BYTES}"
        )));
    }
    let mut body = vec![0u8; length];
    worker.stdout.read_exact(&mut body).await.map_err(closed)?;
    serde_json::from_slice(&body)
        .map_err(|e| ExchangeError::Other(format!("the worker's answer cannot be read: {e}")))
}

/// Kills `worker` (when it has not ended) and says how it ended, with the first line it
/// printed (`memory allocation of N bytes failed`).
async fn stop(mut worker: Worker) -> String {
    drop(worker.stdin);
    // A worker that closed its pipes has ended or is ending: give it a moment to be reaped
    // with its real status before killing it.
    let status = match tokio::time::timeout(Duration::from_millis(200), worker.child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            let _ = worker.child.start_kill();
            worker.child.wait().await
        }
    };
    let mut said = Vec::new();
    let mut stderr = (&mut worker.stderr).take(4096);
    let _ = tokio::time::timeout(Duration::from_millis(100), stderr.read_to_end(&mut said)).await;
    let said = String::from_utf8_lossy(&said);
    let first = said.lines().map(str::trim).find(|l| !l.is_empty());
    let status = match status {
        Ok(status) => describe_status(status),
        Err(e) => format!("its status is unknown: {e}"),
    };
    match first {
        Some(line) => format!("{status}: {line}"),
        None => status,
    }
}

fn describe_status(status: std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            let name = match signal {
                libc::SIGABRT => " (SIGABRT: an allocation failed)",
                libc::SIGKILL => " (SIGKILL)",
                libc::SIGSEGV => " (SIGSEGV)",
                _ => "",
            };
            return format!("killed by signal {signal}{name}");
        }
    }
    status.to_string()
}

/// The worker's side: answers calls from standard input until it closes. What `kanon
/// program-worker` runs; the pool limits its memory when it starts it.
pub fn serve_worker() -> std::io::Result<()> {
    let mut input = std::io::stdin().lock();
    let mut output = std::io::stdout().lock();
    let mut compiled: HashMap<String, Program> = HashMap::new();
    loop {
        let mut head = [0u8; 4];
        match input.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let length = u32::from_be_bytes(head) as usize;
        if length > MAX_FRAME_BYTES {
            return Err(std::io::Error::other(format!(
                "a call of {length} bytes; the limit is {MAX_FRAME_BYTES}"
            )));
        }
        let mut body = vec![0u8; length];
        input.read_exact(&mut body)?;
        let reply = match serde_json::from_slice::<ProgramCall>(&body) {
            Err(e) => ProgramReply::Failed(format!("the call cannot be read: {e}")),
            Ok(call) => run_cached(&mut compiled, call),
        };
        drop(body);
        let frame = serde_json::to_vec(&reply).map_err(std::io::Error::other)?;
        let length = u32::try_from(frame.len()).map_err(std::io::Error::other)?;
        output.write_all(&length.to_be_bytes())?;
        output.write_all(&frame)?;
        output.flush()?;
    }
}

fn run_cached(compiled: &mut HashMap<String, Program>, call: ProgramCall) -> ProgramReply {
    if let Some(program) = compiled.get(&call.source)
        && program.kind() == call.kind
        && program.limits() == &call.limits
    {
        return ProgramCall::run_compiled(program, call.input);
    }
    match Program::compile(&call.source, call.kind, call.limits) {
        Ok(program) => {
            let reply = ProgramCall::run_compiled(&program, call.input);
            if compiled.len() >= WORKER_CACHE {
                compiled.clear();
            }
            compiled.insert(call.source, program);
            reply
        }
        Err(e) => ProgramReply::Failed(e.message),
    }
}

/// Limits the address space of the (forked, not yet exec'd) worker to `bytes`: past it an
/// allocation fails and the worker aborts, alone. Set before exec, so that it also bounds what
/// the allocator reserves when the worker starts (a limit set later would not).
#[cfg(unix)]
fn limit_address_space(bytes: u64) -> std::io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: bytes as libc::rlim_t,
        rlim_max: bytes as libc::rlim_t,
    };
    // SAFETY: setrlimit reads the struct it is given and changes only this process's limits.
    if unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
