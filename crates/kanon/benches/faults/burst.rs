//! Phase 6: a burst of policy changes under load.

use std::time::{Duration, Instant};

use anyhow::Result;
use kube::api::{Patch, PatchParams};

use crate::load::{Category, Expect, Load, phase_labels};
use crate::policies::{policy_a, policy_b};
use crate::report::{Report, shorten};
use crate::world::World;
use crate::{LABEL_A, LABEL_B, Settings, ms, offset, percentile, secs, sleep};

pub(crate) fn burst(world: &mut World, settings: &Settings) -> Result<Report> {
    const UPDATES: usize = 50;
    const OVER: Duration = Duration::from_secs(2);
    let (old_a, old_b) = world.current_values.clone();
    let load = Load::start(world, "p6", settings.rate, phase_labels("p6", false));
    let began = load.began;
    sleep(Duration::from_secs(2));
    let api = world.policy_api("ClusterOverridePolicy")?;
    let burst_began = Instant::now();
    let (write_latencies, write_errors) = world.runtime.block_on(async {
        let params = PatchParams::apply("kanon-faults").force();
        let mut latencies = Vec::new();
        let mut errors = Vec::new();
        let start = tokio::time::Instant::now();
        for n in 0..UPDATES {
            tokio::time::sleep_until(start + OVER * n as u32 / UPDATES as u32).await;
            let (name, document) = if n % 2 == 0 {
                ("faults-a", policy_a(&format!("a-burst-{n}")))
            } else {
                ("faults-b", policy_b(&format!("b-burst-{n}")))
            };
            let started = Instant::now();
            match api.patch(name, &params, &Patch::Apply(&document)).await {
                Ok(_) => latencies.push(started.elapsed()),
                Err(error) => errors.push(error.to_string()),
            }
        }
        (latencies, errors)
    });
    let burst_ended = Instant::now();
    let final_a = format!("a-burst-{}", UPDATES - 2);
    let final_b = format!("b-burst-{}", UPDATES - 1);
    let in_force = world
        .wait_label(LABEL_A, &final_a, Duration::from_secs(30))
        .and_then(|_| world.wait_label(LABEL_B, &final_b, Duration::from_secs(30)));
    world.current_values = (final_a.clone(), final_b.clone());
    sleep(Duration::from_secs(settings.phase_secs / 2).max(Duration::from_secs(3)));
    let creates = load.finish(world)?;
    let status_ready = world
        .wait_policy_ready("ClusterOverridePolicy", "faults-a")
        .and_then(|_| world.wait_policy_ready("ClusterOverridePolicy", "faults-b"));
    let mut a_values = vec![old_a];
    let mut b_values = vec![old_b];
    for n in 0..UPDATES {
        if n % 2 == 0 {
            a_values.push(format!("a-burst-{n}"));
        } else {
            b_values.push(format!("b-burst-{n}"));
        }
    }
    let mut report = Report::new(
        "6. A burst of policy changes under load",
        began,
        creates,
        Expect {
            a: a_values,
            b: b_values,
        },
    );
    let mut writes = write_latencies.clone();
    writes.sort();
    report.note(format!(
        "{UPDATES} server-side applies alternating `faults-a` and `faults-b` from {} to {} ({} writes succeeded, p50 {}, max {}; {} failed)",
        offset(began, burst_began),
        offset(began, burst_ended),
        write_latencies.len(),
        ms(percentile(&writes, 0.5)),
        ms(percentile(&writes, 1.0)),
        write_errors.len()
    ));
    let effect_at = match &in_force {
        Ok(at) => {
            report.note(format!(
                "the final values ({LABEL_A}={final_a}, {LABEL_B}={final_b}) were in force {} after the last write",
                secs(at.saturating_duration_since(burst_ended))
            ));
            Some(*at)
        }
        Err(error) => {
            report.note(format!("final values: {error:#}"));
            None
        }
    };
    report.common_checks();
    let failed: usize = report
        .creates
        .iter()
        .filter(|c| !report.as_it_should(c))
        .count();
    report.check(
        format!("no create failed or came back wrong during the burst ({failed})"),
        failed == 0,
    );
    report.check(
        format!(
            "every write of the burst succeeded ({} failed)",
            write_errors.len()
        ),
        write_errors.is_empty(),
    );
    report.check(
        "the final values were in force within 30 s of the last write",
        effect_at.is_some(),
    );
    report.check(
        format!(
            "the policies' status shows Ready for their last generation{}",
            match &status_ready {
                Ok(()) => String::new(),
                Err(e) => format!(" ({})", shorten(&format!("{e:#}"), 200)),
            }
        ),
        status_ready.is_ok(),
    );
    if let Some(at) = effect_at {
        let stale: usize = report
            .creates
            .iter()
            .filter(|c| c.scheduled >= at + Duration::from_millis(500))
            .filter(|c| c.category == Category::Admitted)
            .filter(|c| {
                c.labels.get(LABEL_A) != Some(&final_a) || c.labels.get(LABEL_B) != Some(&final_b)
            })
            .count();
        report.check(
            format!("every Pod admitted from 0.5 s after that on carries the final values ({stale} did not)"),
            stale == 0,
        );
    }
    Ok(report)
}
