//! Phase 5: an `http` reference to a server that accepts and never answers.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::load::{Create, Expect, Load, Sort, phase_labels};
use crate::policies::policy_hang;
use crate::report::{Report, shorten};
use crate::world::{HangServer, World};
use crate::{
    LABEL_A, Settings, WEBHOOK_TIMEOUT_SECS, metric_sum, metric_sum_filtered, ms, offset,
    percentile, secs, sleep,
};

pub(crate) fn hanging_lookup(
    world: &mut World,
    settings: &Settings,
    timeout: Option<u32>,
) -> Result<Report> {
    if world.hang.is_none() {
        world.hang = Some(HangServer::start()?);
    }
    let (port, accepted_before) = {
        let hang = world.hang.as_ref().context("the hanging server")?;
        (hang.port, hang.accepted.load(Ordering::Relaxed))
    };
    world.apply_policy(&policy_hang(port, timeout), Duration::from_secs(10))?;
    world.wait_policy_ready("ClusterOverridePolicy", "faults-hang")?;
    let metrics_before = world.kanon_metrics();
    let (prefix, title) = match timeout {
        Some(_) => (
            "p5a",
            "5a. A lookup target that never answers: reference `timeoutSeconds: 1`",
        ),
        None => (
            "p5b",
            "5b. A lookup target that never answers: no `timeoutSeconds` (the review's deadline bounds it)",
        ),
    };
    let load = Load::start(world, prefix, settings.rate, phase_labels(prefix, true));
    let began = load.began;
    sleep(Duration::from_secs(settings.phase_secs));
    let stopped_sending = Instant::now();
    let peak = world.kanon_sample();
    let creates = load.finish(world)?;
    world.delete_policy("ClusterOverridePolicy", "faults-hang")?;
    let metrics_after = world.kanon_metrics();
    let accepted = world
        .hang
        .as_ref()
        .map(|h| h.accepted.load(Ordering::Relaxed))
        .unwrap_or(0)
        - accepted_before;
    let (a, b) = world.current_values.clone();
    let mut report = Report::new(title, began, creates, Expect::exactly(&a, &b));
    report.note(format!(
        "half the normal Pods carry `lookup: hang` and are selected by `faults-hang` (`failurePolicy: Ignore`, label from `http://127.0.0.1:{port}/tier`, a server that accepts and never answers); the others are bystanders; sending stopped at {}",
        offset(began, stopped_sending)
    ));
    let errors = |text: &str| {
        text.lines()
            .filter(|l| {
                l.starts_with("kanon_lookup_errors_total{") && l.contains("source=\"http\"")
            })
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
    };
    report.note(format!(
        "the hanging server accepted {accepted} connections; kanon's http lookup errors after the phase: {}; kanon_policy_errors_total {:.0} → {:.0}",
        errors(&metrics_after).join(", "),
        metric_sum(&metrics_before, "kanon_policy_errors_total"),
        metric_sum(&metrics_after, "kanon_policy_errors_total"),
    ));
    // kanon's own view: reviews and their mean duration over the phase, per webhook (the
    // validating webhook runs no lookup: its time is waiting for an evaluation slot).
    for webhook in ["mutate", "validate"] {
        let filter = format!("webhook=\"{webhook}\"");
        let delta = |name: &str| {
            metric_sum_filtered(&metrics_after, name, &filter)
                - metric_sum_filtered(&metrics_before, name, &filter)
        };
        let count = delta("kanon_admission_duration_seconds_count");
        let sum = delta("kanon_admission_duration_seconds_sum");
        let results: Vec<String> = metrics_after
            .lines()
            .filter(|l| l.starts_with("kanon_admission_requests_total{") && l.contains(&filter))
            .filter_map(|l| {
                let after: f64 = l.rsplit(' ').next()?.parse().ok()?;
                let series = l.rsplit_once(' ')?.0;
                let before: f64 = metrics_before
                    .lines()
                    .find(|b| b.rsplit_once(' ').is_some_and(|(s, _)| s == series))
                    .and_then(|b| b.rsplit(' ').next()?.parse().ok())
                    .unwrap_or(0.0);
                let result = series.split("result=\"").nth(1)?.split('"').next()?;
                (after > before).then(|| format!("{result} {:.0}", after - before))
            })
            .collect();
        report.note(format!(
            "kanon's /{webhook} over the phase: {count:.0} reviews ({}), mean duration {} (kanon_admission_duration_seconds)",
            results.join(", "),
            if count > 0.0 { ms(Duration::from_secs_f64(sum / count)) } else { "-".into() }
        ));
    }
    if let Some(sample) = peak {
        report.note(format!(
            "kanon at the end of sending: RSS {:.1} MB, {} fds, {} threads",
            sample.rss_kb as f64 / 1024.0,
            sample.fds,
            sample.threads
        ));
    }
    report.common_checks();
    // What bounds a hanging lookup: the reference's timeout, else the review's deadline (the
    // webhook's timeout); the rest of the create (the validating call, storage) gets 1 s.
    let bound = Duration::from_secs(timeout.map_or(WEBHOOK_TIMEOUT_SECS, u64::from) + 1);
    for sort in [Sort::Hang, Sort::Normal, Sort::Forbidden] {
        let of: Vec<&Create> = report.creates.iter().filter(|c| c.sort == sort).collect();
        let wrong = of.iter().filter(|c| !report.as_it_should(c)).count();
        let mut latencies: Vec<Duration> = of.iter().map(|c| c.latency).collect();
        latencies.sort();
        let what = match sort {
            Sort::Hang => {
                "Pods selecting the hanging lookup admitted and labelled (but for the hanging label)"
            }
            Sort::Normal => "bystander Pods (no lookup) admitted and labelled",
            Sort::Forbidden => "forbidden Pods (no lookup) denied by the policy",
        };
        report.check(
            format!("{what}: {} of {} ({wrong} not)", of.len() - wrong, of.len()),
            wrong == 0,
        );
        if sort == Sort::Hang {
            let max = percentile(&latencies, 1.0);
            report.check(
                format!(
                    "their creates bounded by the lookup's bound + 1 s ({}): max {}",
                    secs(bound),
                    ms(max)
                ),
                max <= bound,
            );
        } else {
            let p99 = percentile(&latencies, 0.99);
            report.check(
                format!(
                    "{} Pods not held up by the hanging lookup of others: p99 {} ≤ 1 s",
                    sort.label(),
                    ms(p99)
                ),
                p99 <= Duration::from_secs(1),
            );
        }
    }
    // Let kanon drain whatever is still waiting before the next phase: a dry-run create must
    // come back labelled again.
    let drained = Instant::now();
    let recovered = world.wait_label(LABEL_A, &a, Duration::from_secs(60));
    report.note(format!(
        "after the load stopped (all creates answered), a dry-run create came back labelled {} later",
        secs(drained.elapsed())
    ));
    report.check(
        format!(
            "kanon serves normally again within 60 s of the end of the phase{}",
            match &recovered {
                Ok(_) => String::new(),
                Err(e) => format!(" ({})", shorten(&format!("{e:#}"), 200)),
            }
        ),
        recovered.is_ok(),
    );
    Ok(report)
}
