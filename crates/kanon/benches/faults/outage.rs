//! Phases 3 and 4: kube-apiserver, then etcd, stopped and started again under load.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};

use crate::load::{Category, Expect, Load, phase_labels};
use crate::policies::{policy_a, policy_b};
use crate::report::{Report, shorten, span};
use crate::world::World;
use crate::{LABEL_A, LABEL_B, Settings, metric_sum, ms, offset, percentile, secs, sleep};

/// Phases 3 and 4: a control-plane process stopped for `down_secs` and started again.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Outage {
    Apiserver,
    Etcd,
}

pub(crate) fn outage(world: &mut World, settings: &Settings, which: Outage) -> Result<Report> {
    let (prefix, title, label, new_value) = match which {
        Outage::Apiserver => (
            "p3",
            "3. kube-apiserver restarted",
            LABEL_A,
            "a-after-apiserver",
        ),
        Outage::Etcd => ("p4", "4. etcd restarted", LABEL_B, "b-after-etcd"),
    };
    let (old_a, old_b) = world.current_values.clone();
    let watch_errors_before = metric_sum(&world.kanon_metrics(), "kanon_policy_watch_errors_total");
    let load = Load::start(world, prefix, settings.rate, phase_labels(prefix, false));
    let began = load.began;
    sleep(Duration::from_secs(settings.phase_secs / 4).max(Duration::from_secs(2)));
    let stopping = Instant::now();
    match which {
        Outage::Apiserver => world.control_plane_mut().stop_apiserver()?,
        Outage::Etcd => world.control_plane_mut().stop_etcd()?,
    }
    let stopped = Instant::now();
    eprintln!("faults: {title}: stopped");
    // kanon keeps serving its last policies meanwhile.
    let ready_during = world.kanon().readyz();
    let reviews = ((settings.down_secs * 1000 / 50) as usize / 2).clamp(5, 40);
    let (good, direct_latencies, last_error) = world.direct_reviews(reviews)?;
    let left = Duration::from_secs(settings.down_secs).saturating_sub(stopped.elapsed());
    sleep(left);
    let starting = Instant::now();
    match which {
        Outage::Apiserver => world.control_plane_mut().start_apiserver()?,
        Outage::Etcd => world.control_plane_mut().start_etcd()?,
    }
    let started = Instant::now();
    // etcd back does not mean the apiserver is: wait for its /readyz too.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !world.apiserver_ready() {
        ensure!(
            Instant::now() < deadline,
            "kube-apiserver not ready 60 s after the restart"
        );
        sleep(Duration::from_millis(50));
    }
    let api_ready = Instant::now();
    eprintln!("faults: {title}: back");
    // A policy change after the restart: kanon's watches must deliver it.
    let document = match which {
        Outage::Apiserver => policy_a(new_value),
        Outage::Etcd => policy_b(new_value),
    };
    let written = world.apply_policy(&document, Duration::from_secs(30))?;
    let write_done = Instant::now();
    let effect = world.wait_label(label, new_value, Duration::from_secs(30));
    match which {
        Outage::Apiserver => world.current_values.0 = new_value.to_string(),
        Outage::Etcd => world.current_values.1 = new_value.to_string(),
    }
    sleep(Duration::from_secs(settings.phase_secs / 2).max(Duration::from_secs(3)));
    let creates = load.finish(world)?;
    let (new_a, new_b) = world.current_values.clone();
    let mut report = Report::new(
        title,
        began,
        creates,
        Expect {
            a: vec![old_a, new_a],
            b: vec![old_b, new_b],
        },
    );
    let what = match which {
        Outage::Apiserver => "kube-apiserver",
        Outage::Etcd => "etcd",
    };
    report.note(format!(
        "{what} stopping at {} (stopped {} later), starting at {} (back {} later), kube-apiserver `/readyz` OK at {}: **down {}**",
        offset(began, stopping),
        secs(stopped - stopping),
        offset(began, starting),
        secs(started - starting),
        offset(began, api_ready),
        secs(api_ready - stopping)
    ));
    let mut direct = direct_latencies.clone();
    direct.sort();
    report.note(format!(
        "during the outage: kanon's `/readyz` answered {ready_during}; {good} of {reviews} reviews POSTed straight to kanon's `/mutate` were allowed with both labels (p50 {}, max {}){}",
        ms(percentile(&direct, 0.5)),
        ms(percentile(&direct, 1.0)),
        if last_error.is_empty() { String::new() } else { format!("; last problem: {}", shorten(&last_error, 200)) }
    ));
    let effect_at = match &effect {
        Ok(at) => {
            report.note(format!(
                "policy change after the restart ({label}={new_value}), written at {} (the write took {}): **in force {} after the write started**, {} after the apiserver was ready again",
                offset(began, written),
                secs(write_done - written),
                secs(*at - written),
                secs(*at - api_ready)
            ));
            Some(*at)
        }
        Err(error) => {
            report.note(format!("policy change after the restart: {error:#}"));
            None
        }
    };
    let watch_errors_after = metric_sum(&world.kanon_metrics(), "kanon_policy_watch_errors_total");
    report.note(format!(
        "kanon_policy_watch_errors_total: {watch_errors_before:.0} before, {watch_errors_after:.0} after"
    ));
    for category in [
        Category::Unavailable,
        Category::ServerError,
        Category::TimedOut,
        Category::WebhookFailed,
        Category::Other,
    ] {
        if let Some((from, to, n)) = span(&report.creates, category) {
            report.note(format!(
                "{n} creates \"{}\", scheduled from {} to answers by {}",
                category.label(),
                offset(began, from),
                offset(began, to)
            ));
        }
    }
    report.common_checks();
    report.check(
        format!("kanon stayed ready during the outage (/readyz {ready_during})"),
        ready_during == "200",
    );
    report.check(
        format!("kanon answered reviews with its policies during the outage ({good}/{reviews})"),
        good == reviews,
    );
    report.check(
        "a policy change after the restart took effect within 30 s",
        effect_at.is_some(),
    );
    // README: the watches come back by themselves, retrying at least once a second (a restarted
    // apiserver may fail the first retry with "too old resource version").
    if let Some(at) = effect_at {
        report.check(
            format!(
                "and within 5 s of kube-apiserver being ready again (the README's \"retrying at least once a second\", twice, plus 3 s): {}",
                secs(at - api_ready)
            ),
            at - api_ready <= Duration::from_secs(5),
        );
    }
    if let Some(at) = effect_at {
        let wrong = report.wrong_from(at + Duration::from_millis(500));
        report.check(
            format!(
                "every create scheduled from 0.5 s after the change was in force on ended as it should ({} did not)",
                wrong.len()
            ),
            wrong.is_empty(),
        );
        let stale: usize = report
            .creates
            .iter()
            .filter(|c| c.scheduled >= at + Duration::from_millis(500))
            .filter(|c| c.category == Category::Admitted)
            .filter(|c| c.labels.get(label).map(String::as_str) != Some(new_value))
            .count();
        report.check(
            format!("and carried the new value ({stale} did not)"),
            stale == 0,
        );
    }
    let before: usize = report
        .creates
        .iter()
        .filter(|c| c.done() < stopping)
        .filter(|c| !report.as_it_should(c))
        .count();
    report.check(
        format!("every create answered before the outage ended as it should ({before} did not)"),
        before == 0,
    );
    Ok(report)
}
