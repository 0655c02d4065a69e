//! The scheduling of the threads that evaluate reviews (Linux): their priority and the CPU time
//! they spend. Where the kernel refuses a change, the thread keeps its priority and says so in
//! a debug log: a priority is a preference, never a reason to fail a review.

use std::io;
use std::time::Duration;

/// How much nicer an evaluation thread is than the workers: an evaluation gets about a third
/// of the CPU a busy worker gets (the kernel's weights for nice 5 and 0: 335 and 1024), so I/O
/// goes first yet evaluations keep going under any I/O load.
pub(super) const EVALUATION_NICE: i32 = 5;

/// Lowers the calling thread's priority by [`EVALUATION_NICE`] (Linux applies it to the one
/// thread whose id it is given).
pub(super) fn lower() {
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

/// Puts the calling thread in the idle class (`SCHED_IDLE`): it runs only on CPU time no other
/// thread of its group wants, and any thread of the normal class that wakes preempts it at once,
/// whatever the kernel's time slices. Where that is refused, the thread is made as nice as it
/// can be (19). A thread cannot leave the idle class without `CAP_SYS_NICE`, so only threads
/// kept for such work are put there.
pub(super) fn idle() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler reads `param`, a live value; 0 names the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0 {
        return;
    }
    let error = io::Error::last_os_error();
    // SAFETY: as in `lower`.
    let result = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19) };
    tracing::debug!(
        %error,
        niced = result == 0,
        "a thread for costly evaluations is not in the idle class"
    );
}

/// The CPU time the calling thread has spent (zero where the clock cannot be read).
pub(super) fn cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `now`, a live value.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> libc::c_int {
        // SAFETY: 0 names the calling thread.
        unsafe { libc::sched_getscheduler(0) }
    }

    #[test]
    fn a_thread_goes_to_the_idle_class() {
        let class = std::thread::spawn(|| {
            idle();
            policy()
        })
        .join()
        .expect("joined");
        assert_eq!(class, libc::SCHED_IDLE);
        assert_ne!(policy(), libc::SCHED_IDLE, "only the thread that asked");
    }

    #[test]
    fn cpu_time_counts_what_the_thread_computed_not_what_it_slept() {
        let start = cpu_time();
        std::thread::sleep(Duration::from_millis(30));
        let slept = cpu_time() - start;
        let start = cpu_time();
        let mut x = 0u64;
        while cpu_time() - start < Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(slept < Duration::from_millis(10), "sleeping cost {slept:?}");
        assert!(cpu_time() - start >= Duration::from_millis(20));
    }
}
