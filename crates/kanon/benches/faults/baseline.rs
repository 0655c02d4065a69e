//! Phase 1, the baseline: everything healthy.

use std::time::Duration;

use anyhow::Result;

use crate::load::{Expect, Load, phase_labels};
use crate::report::Report;
use crate::world::World;
use crate::{FIRST_A, FIRST_B, Settings, sleep};

pub(crate) fn baseline(world: &World, settings: &Settings) -> Result<Report> {
    let load = Load::start(world, "p1", settings.rate, phase_labels("p1", false));
    let began = load.began;
    sleep(Duration::from_secs(settings.phase_secs));
    let creates = load.finish(world)?;
    let mut report = Report::new(
        "1. Baseline: kanon healthy",
        began,
        creates,
        Expect::exactly(FIRST_A, FIRST_B),
    );
    report.common_checks();
    let wrong = report.wrong().len();
    report.check(
        format!("every create ended as it should: normal Pods admitted and labelled, forbidden ones denied with the policy's message ({wrong} did not)"),
        wrong == 0,
    );
    Ok(report)
}
