//! kanon as the bench runs it, and the sampler of its memory and audit metrics.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use kanon_control_plane::kanon::{Kanon, metrics_at};

use crate::memory_kib;
use crate::world::{World, metric};

/// Starts `kanon serve` named `name` with `args` and waits (2 minutes at most: it starts while
/// the apiserver serves 100,000 objects) for `/readyz`.
pub(crate) fn start_kanon(world: &World, name: &str, args: &[&str]) -> Result<Kanon> {
    let mut kanon = world.cluster.kanon(env!("CARGO_BIN_EXE_kanon"), name)?;
    kanon.args = args.iter().map(|a| a.to_string()).collect();
    kanon.spawn()?;
    kanon.wait_ready(Duration::from_secs(120), Duration::from_millis(100))?;
    Ok(kanon)
}

pub(crate) const FINISHED: &str = "kanon_audits_total{outcome=\"finished\"}";
pub(crate) const SCANNED: &str = "kanon_audit_objects_scanned_total";

/// One sample of kanon: when (since the bench began), RSS and HWM (KiB), objects scanned,
/// audits finished.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    pub(crate) at: Duration,
    pub(crate) rss: u64,
    pub(crate) hwm: u64,
    pub(crate) scanned: f64,
    pub(crate) finished: f64,
}

/// Samples kanon every 100 ms in a thread.
pub(crate) struct Sampler {
    pub(crate) samples: Arc<Mutex<Vec<Sample>>>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    pub(crate) fn start(pid: u32, metrics_port: u16, began: Instant) -> Sampler {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (into, until) = (samples.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !until.load(Ordering::Relaxed) {
                let (rss, hwm) = memory_kib(pid);
                let metrics = metrics_at(metrics_port).unwrap_or_default();
                let sample = Sample {
                    at: began.elapsed(),
                    rss,
                    hwm,
                    scanned: metric(&metrics, SCANNED),
                    finished: metric(&metrics, FINISHED),
                };
                into.lock().unwrap().push(sample);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Sampler {
            samples,
            stop,
            thread: Some(thread),
        }
    }

    pub(crate) fn last(&self) -> Option<Sample> {
        self.samples.lock().unwrap().last().copied()
    }

    pub(crate) fn between(&self, from: Duration, to: Duration) -> Vec<Sample> {
        self.samples
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.at >= from && s.at <= to)
            .copied()
            .collect()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
