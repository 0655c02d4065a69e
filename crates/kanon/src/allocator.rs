//! Giving freed memory back to the OS.
//!
//! mimalloc returns the pages a spike of reviews freed only after a delay (a second by
//! default), and only when some thread calls into it again: a server that goes quiet after a
//! burst of large reviews would keep its peak resident (and charged against its container's
//! memory limit) until the next burst, and a burst whose memory is not returned meanwhile peaks
//! higher. `kanon serve` shortens the delay to [`PURGE_DELAY_MS`] and a thread of its own asks
//! mimalloc once a [`PURGE_INTERVAL`] to return every page that is free by then, process-wide.
//! Both measured in BENCHMARKS.md (the adversary bench, and the load bench's throughput, which
//! the shorter delay does not change measurably).

use std::time::Duration;

/// How often freed pages are returned.
pub const PURGE_INTERVAL: Duration = Duration::from_secs(1);

/// How long mimalloc keeps a freed page before returning it, in milliseconds: long enough that
/// the pages one review frees are reused by the next rather than returned and faulted back in.
pub const PURGE_DELAY_MS: std::ffi::c_long = 10;

/// `mi_option_purge_delay` in mimalloc's `mi_option_t` (v2 and v3 alike); the Rust bindings
/// do not name it.
const PURGE_DELAY_OPTION: libmimalloc_sys::mi_option_t = 15;

/// Sets the purge delay and starts the thread that returns freed memory to the OS every
/// [`PURGE_INTERVAL`].
pub fn return_freed_memory() -> std::io::Result<()> {
    // SAFETY: mi_option_set takes no pointers; it is not synchronized with other option
    // writes, and this is the process's only one.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY_OPTION, PURGE_DELAY_MS) };
    std::thread::Builder::new()
        .name("kanon-purge".to_string())
        .spawn(|| {
            loop {
                std::thread::sleep(PURGE_INTERVAL);
                // SAFETY: mi_collect takes no pointers; with `force` it purges the pages every
                // thread has freed back to mimalloc's arenas, and this thread's own.
                unsafe { libmimalloc_sys::mi_collect(true) };
            }
        })
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_option_is_the_one_mimalloc_reads() {
        // mimalloc's own default for the purge delay (v3: 1000 ms), unless the environment
        // sets it: the index names that option.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            // SAFETY: mi_option_get takes no pointers.
            let default = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY_OPTION) };
            assert_eq!(default, 1000);
        }
        return_freed_memory().unwrap();
        // SAFETY: mi_option_get takes no pointers.
        let delay = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY_OPTION) };
        assert_eq!(delay, PURGE_DELAY_MS);
        // The neighbouring options keep their defaults: the index is not off by one.
        // SAFETY: as above.
        let numa = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY_OPTION + 1) };
        assert_eq!(numa, 0);
    }
}
