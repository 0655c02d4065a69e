//! The soak: the load for `SOAK_SECONDS`, kanon's RSS, descriptors and threads sampled.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::load::{Expect, LabelsOf, Load, phase_labels};
use crate::report::{Report, shorten};
use crate::world::{ProcSample, World};
use crate::{Settings, load_average, sleep};

pub(crate) struct Soak {
    pub(crate) report: Report,
    pub(crate) samples: Vec<(Duration, ProcSample)>,
    pub(crate) deleted_batches: usize,
}

/// Least-squares slope of `y` over `x`.
pub(crate) fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    if sxx == 0.0 { 0.0 } else { sxy / sxx }
}

pub(crate) fn soak(world: &World, settings: &Settings) -> Result<Soak> {
    let rate = settings.rate as usize;
    let per_batch = rate * settings.sample_secs as usize;
    let base = phase_labels("soak", false);
    let labels: LabelsOf = Arc::new(move |i| {
        let mut labels = base(i);
        labels.insert("soak-batch".into(), format!("b{}", i / per_batch));
        labels
    });
    let load = Load::start(world, "soak", settings.rate, labels);
    let began = load.began;
    let mut samples = Vec::new();
    if let Some(sample) = world.kanon_sample() {
        samples.push((Duration::ZERO, sample));
    }
    let mut tick = 1u64;
    let mut deleted_batches = 0;
    let mut delete_errors = Vec::new();
    loop {
        let at = began + Duration::from_secs(settings.sample_secs * tick);
        let now = Instant::now();
        if at > now {
            sleep(at - now);
        }
        if let Some(sample) = world.kanon_sample() {
            samples.push((began.elapsed(), sample));
            eprintln!(
                "faults: soak {:>4} s: kanon RSS {:.1} MB, {} fds, {} threads; load {}",
                began.elapsed().as_secs(),
                sample.rss_kb as f64 / 1024.0,
                sample.fds,
                sample.threads,
                load_average()
            );
        }
        // The batch created two ticks ago (10–20 s old).
        if tick >= 2 {
            match world.delete_pods(&format!("phase=soak,soak-batch=b{}", tick - 2)) {
                Ok(()) => deleted_batches += 1,
                Err(error) => delete_errors.push(format!("{error:#}")),
            }
        }
        if settings.sample_secs * tick >= settings.soak_secs {
            break;
        }
        tick += 1;
    }
    let creates = load.finish(world)?;
    let (a, b) = world.current_values.clone();
    let mut report = Report::new(
        &format!(
            "Soak: {} s at {}/s, Pods deleted in batches 10–20 s after their creation",
            settings.soak_secs, settings.rate
        ),
        began,
        creates,
        Expect::exactly(&a, &b),
    );
    report.common_checks();
    let wrong = report.wrong().len();
    report.check(
        format!("every create ended as it should ({wrong} did not)"),
        wrong == 0,
    );
    report.check(
        format!(
            "every batch deletion succeeded ({} failed{})",
            delete_errors.len(),
            delete_errors
                .first()
                .map(|e| format!(": {}", shorten(e, 160)))
                .unwrap_or_default()
        ),
        delete_errors.is_empty(),
    );
    Ok(Soak {
        report,
        samples,
        deleted_batches,
    })
}
