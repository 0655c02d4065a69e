//! The process's open-file limit: raised to its hard limit at start, so the connection cap, not
//! the kernel, decides when connections are turned away.

/// The open-file limits after [`raise_open_file_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFileLimit {
    /// The soft limit before.
    pub was: u64,
    /// The soft limit now (the hard limit, when raising it worked).
    pub now: u64,
}

/// Descriptors kept for everything but connections: listeners, certificate and policy files,
/// program workers' pipes, the apiserver's connections, logs.
const RESERVED_FILES: u64 = 128;

/// Raises the soft limit on open files to the hard limit (many distributions start
/// processes at a soft limit of 1024, where a thousand idle connections would leave no
/// descriptor for kube-apiserver's). Not raised (the error) when the limits cannot be read or
/// set.
pub fn raise_open_file_limit() -> std::io::Result<OpenFileLimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own and reads nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let was = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads the struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(OpenFileLimit {
        was,
        now: current_soft_limit().unwrap_or(was),
    })
}

fn current_soft_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: as above.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0).then_some(limit.rlim_cur)
}

/// `wanted` connections per listener, lowered when the open-file limit cannot hold them for
/// both listeners besides the descriptors kept for the rest.
pub(super) fn connections_within_open_files(wanted: usize, probe_connections: usize) -> usize {
    let Some(soft) = current_soft_limit() else {
        return wanted;
    };
    let room = soft
        .saturating_sub(RESERVED_FILES)
        .saturating_sub(probe_connections as u64);
    wanted
        .min(usize::try_from(room).unwrap_or(usize::MAX))
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_limit() {
        let limit = raise_open_file_limit().unwrap();
        assert!(limit.now >= limit.was);
        let mut now = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut now) }, 0);
        assert_eq!(now.rlim_cur, now.rlim_max);
        assert_eq!(limit.now, now.rlim_cur);
        // The cap on connections fits under it.
        let fitted = connections_within_open_files(usize::MAX, 64);
        assert!(fitted as u64 <= now.rlim_cur, "{fitted}");
        assert_eq!(connections_within_open_files(10, 64), 10);
    }
}
