//! What /proc tells about kanon: its memory and open descriptors, sampled on a thread of their
//! own, and its ends of TCP connections.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::SAMPLE_EVERY;

pub(crate) use kanon_control_plane::kanon::{ProcessSample as Proc, process_sample as read_proc};

/// Samples `/proc/PID` every [`SAMPLE_EVERY`] on its own thread, so that a busy runtime does
/// not skip samples.
pub(crate) struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Proc>>,
}

impl Sampler {
    pub(crate) fn start(pid: u32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                if let Some(sample) = read_proc(pid) {
                    samples.push(sample);
                }
                std::thread::sleep(SAMPLE_EVERY);
            }
            samples
        });
        Sampler { stop, thread }
    }

    pub(crate) fn finish(self) -> Vec<Proc> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// kanon's ends of the connections from `peers` (local ports) that it has not closed
/// (ESTABLISHED or CLOSE_WAIT in `/proc/net/tcp`, whether accepted yet or not), and how many
/// of those still have bytes of an answer waiting in kanon's send queue (written, not yet
/// taken by the client).
pub(crate) fn kanon_side_open(port: u16, peers: &HashSet<u16>) -> (usize, usize) {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let port_of = |field: &str| {
        field
            .rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
    };
    let mut open = 0;
    let mut pending = 0;
    for line in text.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() > 4
            && port_of(fields[1]) == Some(port)
            && port_of(fields[2]).is_some_and(|p| peers.contains(&p))
            && (fields[3] == "01" || fields[3] == "08")
        {
            open += 1;
            // `tx_queue:rx_queue`, hexadecimal.
            let queued = fields[4]
                .split(':')
                .next()
                .and_then(|q| u64::from_str_radix(q, 16).ok())
                .unwrap_or(0);
            if queued > 0 {
                pending += 1;
            }
        }
    }
    (open, pending)
}
