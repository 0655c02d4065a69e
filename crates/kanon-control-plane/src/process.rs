//! Starting and stopping the control-plane processes.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How long a process gets between SIGTERM and SIGKILL.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(10);

/// How to tie a child's life to this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lifetime {
    /// Killed (SIGKILL, by the kernel) when this process dies, even by SIGKILL: a crashed or
    /// killed test run leaves nothing behind. Own process group.
    DiesWithParent,
    /// Outlives this process (`cargo xtask cluster up`): own session, so neither the parent's
    /// death nor the terminal's signals (Ctrl-C, hang-up) reach it.
    Detached,
}

/// Starts `cmd` with standard input closed and both output streams appended to `log`.
pub(crate) fn spawn(mut cmd: Command, log: &Path, lifetime: Lifetime) -> Result<Child> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening the log {}", log.display()))?;
    let err = out
        .try_clone()
        .with_context(|| format!("opening the log {}", log.display()))?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let spawned = match lifetime {
        Lifetime::DiesWithParent => {
            // Own process group: a Ctrl-C in the terminal of `cargo test` reaches the test
            // process, whose exit then takes the children along (below), instead of hitting
            // the children first in an arbitrary order.
            cmd.process_group(0);
            die_with_parent(&mut cmd);
            spawn_from_long_lived_thread(cmd)
        }
        Lifetime::Detached => {
            // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::setsid() == -1 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            cmd.spawn()
        }
    };
    spawned.with_context(|| format!("starting {program}"))
}

/// Asks the kernel to SIGKILL the child when its parent goes away.
#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and only makes two async-signal-safe
    // system calls; it allocates nothing (the error is a raw OS error).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl; then no signal would ever come.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Elsewhere only `Drop` stops the children.
#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Command) {}

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `cmd` from one thread that lives as long as the process.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process. Test
/// harnesses run each test on its own thread, and a control plane shared between tests (in a
/// `static`) would be killed the moment the test that happened to start it finished. Forking
/// from a thread that never ends makes "parent died" mean "the process died".
fn spawn_from_long_lived_thread(cmd: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<Option<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (requests, incoming) = mpsc::channel::<SpawnRequest>();
        thread::Builder::new()
            .name("kanon-control-plane-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in incoming {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .ok()
            .map(|_| requests)
    });
    let Some(spawner) = spawner else {
        // No thread could be started: fall back to this thread (the signal then follows this
        // thread's lifetime, still better than leaking processes).
        let mut cmd = cmd;
        return cmd.spawn();
    };
    let (reply, answer) = mpsc::channel();
    spawner
        .send((cmd, reply))
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    answer
        .recv()
        .map_err(|_| io::Error::other("the spawner thread did not answer"))?
}

/// Sends `signal` to the process group led by `pid` (each child leads its own), falling back to
/// the process alone. "No such process" is not an error: it is already gone.
fn signal_group(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: kill(2) has no memory-safety preconditions.
    if unsafe { libc::kill(-pid, signal) } == 0 {
        return Ok(());
    }
    // SAFETY: as above.
    if unsafe { libc::kill(pid, signal) } == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(err)
    }
}

/// Stops a child of this process: SIGTERM, up to `grace` to exit, then SIGKILL. Always reaps
/// it, so no zombie stays behind.
pub(crate) fn stop_child(name: &str, child: &mut Child, grace: Duration) -> Result<()> {
    if child
        .try_wait()
        .with_context(|| format!("checking on {name}"))?
        .is_some()
    {
        return Ok(());
    }
    signal_group(child.id(), libc::SIGTERM)
        .with_context(|| format!("sending SIGTERM to {name} (pid {})", child.id()))?;
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if child
            .try_wait()
            .with_context(|| format!("waiting for {name}"))?
            .is_some()
        {
            return Ok(());
        }
        thread::sleep(Duration::from_millis(20));
    }
    signal_group(child.id(), libc::SIGKILL)
        .with_context(|| format!("sending SIGKILL to {name} (pid {})", child.id()))?;
    child
        .wait()
        .with_context(|| format!("waiting for {name} after SIGKILL"))?;
    Ok(())
}

/// Whether `pid` is a live (not zombie) process whose program file is called `name`.
///
/// Checking the name keeps `cluster down` from signalling an unrelated process that got the
/// PID of a control-plane process that died long ago.
pub(crate) fn is_running(pid: u32, name: &str) -> bool {
    if !is_alive(pid) {
        return false;
    }
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    let argv0 = String::from_utf8_lossy(argv0);
    Path::new(argv0.as_ref())
        .file_name()
        .is_some_and(|f| f == name)
}

/// Whether `pid` exists and is not a zombie (a zombie has exited; it only waits for its parent,
/// and the parent of a detached process may be an init that reaps late).
///
/// Used to wait for a signalled process to end: its name cannot be checked then, as a
/// process's command line reads empty while it exits.
fn is_alive(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the parenthesised command name, which may itself contain spaces.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    !matches!(state, Some("Z" | "X" | "x"))
}

/// Stops a process that is not (or no longer) a child of this one, e.g. one that
/// `cargo xtask cluster up` left running. Returns whether it was running.
pub(crate) fn stop_pid(name: &str, pid: u32, grace: Duration) -> Result<bool> {
    if !is_running(pid, name) {
        return Ok(false);
    }
    signal_group(pid, libc::SIGTERM)
        .with_context(|| format!("sending SIGTERM to {name} (pid {pid})"))?;
    if wait_gone(pid, grace) {
        return Ok(true);
    }
    signal_group(pid, libc::SIGKILL)
        .with_context(|| format!("sending SIGKILL to {name} (pid {pid})"))?;
    if wait_gone(pid, Duration::from_secs(5)) {
        return Ok(true);
    }
    bail!("{name} (pid {pid}) is still running after SIGKILL")
}

fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if !is_alive(pid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}
