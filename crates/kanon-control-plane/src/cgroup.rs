//! A memory limit for a process tree, as a Pod's container has: a cgroup of the memory
//! controller with `memory.limit_in_bytes` set, so that a bench or test proves "stays within the
//! chart's limit" by running under that limit (the kernel kills the process when it is crossed)
//! rather than by reading RSS after the fact.
//!
//! Needs root and the memory controller (cgroup v1 at `/sys/fs/cgroup/memory`, or the unified
//! hierarchy at `/sys/fs/cgroup` with `memory` enabled); [`MemoryCgroup::create`] says which is
//! missing. A process joins with [`MemoryCgroup::add`]; its children (kanon's program workers)
//! inherit the group, as they would share the container's.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Which cgroup interface a group was made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Interface {
    /// cgroup v1: `memory.limit_in_bytes`, `memory.max_usage_in_bytes`, `memory.oom_control`.
    V1,
    /// cgroup v2: `memory.max`, `memory.peak`, `memory.events`.
    V2,
}

/// A memory cgroup with a limit; removed when dropped (its processes are moved back to the
/// root group first).
#[derive(Debug)]
pub struct MemoryCgroup {
    dir: PathBuf,
    root: PathBuf,
    interface: Interface,
    limit: u64,
}

const V1_ROOT: &str = "/sys/fs/cgroup/memory";
const V2_ROOT: &str = "/sys/fs/cgroup";

impl MemoryCgroup {
    /// A new group named `kanon-<name>-<pid>` limited to `limit` bytes (swap is not counted:
    /// these machines have none, as kubelets run without it).
    pub fn create(name: &str, limit: u64) -> Result<MemoryCgroup> {
        let (root, interface) = if Path::new(V1_ROOT).join("memory.usage_in_bytes").exists() {
            (PathBuf::from(V1_ROOT), Interface::V1)
        } else if std::fs::read_to_string(Path::new(V2_ROOT).join("cgroup.subtree_control"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
        {
            (PathBuf::from(V2_ROOT), Interface::V2)
        } else {
            bail!(
                "no memory cgroup controller: neither {V1_ROOT} (cgroup v1) nor `memory` in \
                 {V2_ROOT}/cgroup.subtree_control (cgroup v2)"
            );
        };
        let dir = root.join(format!("kanon-{name}-{}", std::process::id()));
        if dir.exists() {
            // Left by an earlier run of this process id: empty, or its processes are gone.
            let _ = std::fs::remove_dir(&dir);
        }
        std::fs::create_dir(&dir).with_context(|| {
            format!(
                "creating the memory cgroup {} (needs root and a writable cgroup file system)",
                dir.display()
            )
        })?;
        let group = MemoryCgroup {
            dir,
            root,
            interface,
            limit,
        };
        let file = match interface {
            Interface::V1 => "memory.limit_in_bytes",
            Interface::V2 => "memory.max",
        };
        group.write(file, &limit.to_string())?;
        Ok(group)
    }

    /// The limit, in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Moves process `pid` (and so the children it starts from now on) into the group.
    pub fn add(&self, pid: u32) -> Result<()> {
        self.write("cgroup.procs", &pid.to_string())
    }

    /// Makes `command`'s process join the group before it executes, so that nothing it
    /// allocates escapes the limit (with [`add`](Self::add) after spawning, a fast process may
    /// allocate first).
    pub fn join_on_exec(&self, command: &mut Command) -> Result<()> {
        use std::os::unix::ffi::OsStrExt as _;
        use std::os::unix::process::CommandExt as _;
        let procs = std::ffi::CString::new(self.dir.join("cgroup.procs").as_os_str().as_bytes())
            .context("a cgroup path without NUL bytes")?;
        // SAFETY: between fork and exec only async-signal-safe calls are made (open, write,
        // close, getpid) on memory prepared before the fork; no allocation.
        unsafe {
            command.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The process id in decimal, written into a stack buffer.
                let mut digits = [0u8; 20];
                let mut at = digits.len();
                let mut pid = libc::getpid() as u64;
                loop {
                    at -= 1;
                    digits[at] = b'0' + (pid % 10) as u8;
                    pid /= 10;
                    if pid == 0 {
                        break;
                    }
                }
                let text = &digits[at..];
                let written = libc::write(fd, text.as_ptr().cast(), text.len());
                let error = std::io::Error::last_os_error();
                libc::close(fd);
                if written < 0 {
                    return Err(error);
                }
                Ok(())
            });
        }
        Ok(())
    }

    /// The most the group's processes have held at once (page cache included, as the kernel
    /// counts it against the limit), in bytes.
    pub fn peak(&self) -> Result<u64> {
        let file = match self.interface {
            Interface::V1 => "memory.max_usage_in_bytes",
            Interface::V2 => "memory.peak",
        };
        self.read_number(file)
    }

    /// What the group's processes hold now, in bytes.
    pub fn current(&self) -> Result<u64> {
        let file = match self.interface {
            Interface::V1 => "memory.usage_in_bytes",
            Interface::V2 => "memory.current",
        };
        self.read_number(file)
    }

    /// How many processes of the group the kernel killed for crossing the limit.
    pub fn oom_kills(&self) -> Result<u64> {
        let (file, key) = match self.interface {
            Interface::V1 => ("memory.oom_control", "oom_kill"),
            Interface::V2 => ("memory.events", "oom_kill"),
        };
        let text = self.read(file)?;
        Ok(text
            .lines()
            .filter_map(|l| l.split_once(' '))
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0))
    }

    fn read(&self, file: &str) -> Result<String> {
        let path = self.dir.join(file);
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    }

    fn read_number(&self, file: &str) -> Result<u64> {
        let text = self.read(file)?;
        text.trim()
            .parse()
            .with_context(|| format!("{}/{file} holds `{}`", self.dir.display(), text.trim()))
    }

    fn write(&self, file: &str, value: &str) -> Result<()> {
        let path = self.dir.join(file);
        std::fs::write(&path, value)
            .with_context(|| format!("writing `{value}` to {}", path.display()))
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // A group with processes cannot be removed: hand any left back to the root group.
        if let Ok(procs) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in procs.split_whitespace() {
                let _ = std::fs::write(self.root.join("cgroup.procs"), pid);
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process that touches more than the limit is killed by the kernel, and the group says
    /// so; one that stays under it finishes.
    #[test]
    fn a_process_over_the_limit_is_killed_and_counted() -> Result<()> {
        let group = MemoryCgroup::create("cgroup-test", 32 * 1024 * 1024)?;
        let run = |mib: u32| -> Result<std::process::ExitStatus> {
            // dd's block is its buffer: one block of `mib` MiB held at once.
            let mut dd = Command::new("dd");
            dd.args([
                "if=/dev/zero",
                "of=/dev/null",
                &format!("bs={mib}M"),
                "count=1",
            ])
            .stderr(std::process::Stdio::null());
            group.join_on_exec(&mut dd)?;
            Ok(dd.status()?)
        };
        assert!(run(4)?.success(), "4 MiB fits 32 MiB");
        assert_eq!(group.oom_kills()?, 0);
        assert!(!run(128)?.success(), "128 MiB does not fit 32 MiB");
        assert!(group.oom_kills()? >= 1, "the kill is counted");
        assert!(group.peak()? <= group.limit());
        Ok(())
    }
}
