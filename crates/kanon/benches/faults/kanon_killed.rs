//! Phase 2: kanon killed (SIGKILL) under load and started again on the same port and
//! certificates.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::Value;

use crate::load::{Category, Create, Expect, Load, phase_labels};
use crate::policies::{patched_labels, review};
use crate::report::{Report, first_admitted_after, span};
use crate::world::World;
use crate::{FIRST_A, FIRST_B, LABEL_A, READY_POLL, Settings, offset, secs, sleep};

/// What a starting kanon answered to reviews sent straight to it.
#[derive(Default)]
pub(crate) struct Probed {
    pub(crate) refused: usize,
    pub(crate) first_answer: Option<Instant>,
    pub(crate) forbidden_allowed_before_ready: usize,
    pub(crate) forbidden_denied_before_ready: usize,
    pub(crate) unlabelled_before_ready: usize,
    pub(crate) labelled_before_ready: usize,
    /// 503 "not ready": kube-apiserver applies the webhook's failurePolicy.
    pub(crate) not_ready_before_ready: usize,
    pub(crate) other: usize,
}

/// Reviews POSTed straight to kanon's port, back to back (alternately a forbidden Pod to
/// `/validate` and a Pod to `/mutate`), each classified by whether `/readyz` already answered
/// 200 when it was sent (a second task polls it every 5 ms).
pub(crate) struct StartProbe {
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) handle: tokio::task::JoinHandle<Probed>,
}

impl StartProbe {
    pub(crate) fn start(world: &World) -> Result<StartProbe> {
        let client = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(&world.kanon().ca_pem()?)?])
            .http1_only()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()?;
        let validate = world.kanon().url("/validate?timeout=5s");
        let mutate = world.kanon().url("/mutate?timeout=5s");
        let readyz = world.kanon().url("/readyz");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let handle = world.runtime.spawn(async move {
            let ready = Arc::new(AtomicBool::new(false));
            let watcher = {
                let (client, ready, stopped) = (client.clone(), ready.clone(), stopped.clone());
                tokio::spawn(async move {
                    while !stopped.load(Ordering::Relaxed) {
                        if let Ok(r) = client.get(&readyz).send().await
                            && r.status().is_success()
                        {
                            ready.store(true, Ordering::SeqCst);
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                })
            };
            let mut probed = Probed::default();
            let mut n = 0usize;
            while !stopped.load(Ordering::Relaxed) {
                n += 1;
                let forbidden = n.is_multiple_of(2);
                let url = if forbidden { &validate } else { &mutate };
                let body = review(&format!("probe-{n}"), forbidden).to_string();
                let was_ready = ready.load(Ordering::SeqCst);
                let answer = async {
                    let response = client
                        .post(url)
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await?;
                    let status = response.status();
                    let bytes = response.bytes().await?;
                    anyhow::Ok((status, bytes))
                }
                .await;
                match answer {
                    Err(_) => {
                        probed.refused += 1;
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    Ok((status, bytes)) => {
                        probed.first_answer.get_or_insert_with(Instant::now);
                        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                        let allowed = value["response"]["allowed"].as_bool();
                        if was_ready {
                            continue;
                        }
                        match (forbidden, status.is_success(), allowed) {
                            (true, true, Some(true)) => probed.forbidden_allowed_before_ready += 1,
                            (true, true, Some(false)) => probed.forbidden_denied_before_ready += 1,
                            (false, true, Some(true)) => match patched_labels(&bytes) {
                                Ok(labels) if labels.contains_key(LABEL_A) => {
                                    probed.labelled_before_ready += 1
                                }
                                _ => probed.unlabelled_before_ready += 1,
                            },
                            (_, false, _) if status.as_u16() == 503 => {
                                probed.not_ready_before_ready += 1
                            }
                            _ => probed.other += 1,
                        }
                    }
                }
            }
            let _ = watcher.await;
            probed
        });
        Ok(StartProbe { stop, handle })
    }

    pub(crate) fn finish(self, world: &World) -> Result<Probed> {
        self.stop.store(true, Ordering::Relaxed);
        Ok(world.runtime.block_on(self.handle)?)
    }
}

pub(crate) fn kanon_killed(world: &mut World, settings: &Settings) -> Result<Report> {
    let load = Load::start(world, "p2", settings.rate, phase_labels("p2", false));
    let began = load.began;
    sleep(Duration::from_secs(settings.phase_secs / 4).max(Duration::from_secs(2)));
    let old_pid = world.kanon().pid();
    let killed = Instant::now();
    world.kanon_mut().kill()?;
    eprintln!("faults: kanon killed");
    sleep(Duration::from_secs(settings.down_secs));
    // While kanon starts, reviews POSTed straight to it, back to back: what does it answer
    // before it is ready?
    let probe = StartProbe::start(world)?;
    let restarted = Instant::now();
    world.kanon_mut().spawn()?;
    let ready = world
        .kanon_mut()
        .wait_ready(Duration::from_secs(60), READY_POLL);
    sleep(Duration::from_millis(200));
    let probed = probe.finish(world)?;
    let ready = ready?;
    eprintln!(
        "faults: kanon ready {:.2} s after its restart",
        (ready - restarted).as_secs_f64()
    );
    sleep(Duration::from_secs(settings.phase_secs / 2).max(Duration::from_secs(3)));
    let creates = load.finish(world)?;
    let mut report = Report::new(
        "2. kanon killed (SIGKILL) and restarted",
        began,
        creates,
        Expect::exactly(FIRST_A, FIRST_B),
    );
    report.note(format!(
        "kanon (pid {old_pid:?}) SIGKILLed at {}, started again at {} (pid {:?}), `/readyz` 200 at {}: **restart → ready {}**, kill → ready {}",
        offset(began, killed),
        offset(began, restarted),
        world.kanon().pid(),
        offset(began, ready),
        secs(ready - restarted),
        secs(ready - killed)
    ));
    let first = first_admitted_after(&report.creates, killed);
    match first {
        Some(c) => report.note(format!(
            "first admitted create scheduled after the kill answered at {}: **kill → first admitted {}**, restart → first admitted {}, ready → first admitted {}",
            offset(began, c.done()),
            secs(c.done() - killed),
            secs(c.done().saturating_duration_since(restarted)),
            secs(c.done().saturating_duration_since(ready)),
        )),
        None => report.note("no create was admitted after the kill"),
    }
    if let Some((from, to, n)) = span(&report.creates, Category::WebhookFailed) {
        report.note(format!(
            "{n} creates refused with \"failed calling webhook\", scheduled from {} to answers by {}",
            offset(began, from),
            offset(began, to)
        ));
    }
    let ready_at =
        |at: Option<Instant>| at.map(|at| offset(began, at)).unwrap_or_else(|| "-".into());
    report.note(format!(
        "reviews POSTed straight to the restarting kanon, back to back, from its start to 0.2 s after ready: {} refused connections; **before `/readyz` was 200**: /validate of a `forbidden` Pod allowed {} times (first answer at {}), denied {}; /mutate of a Pod allowed without kanon's labels {} times, with them {}; answered 503 (not ready: the webhook's failurePolicy applies) {}; other answers {}",
        probed.refused,
        probed.forbidden_allowed_before_ready,
        ready_at(probed.first_answer),
        probed.forbidden_denied_before_ready,
        probed.unlabelled_before_ready,
        probed.labelled_before_ready,
        probed.not_ready_before_ready,
        probed.other,
    ));
    report.common_checks();
    report.check(
        format!(
            "the restarting kanon allowed no review of a forbidden Pod, nor a Pod without its labels, before it was ready ({} and {})",
            probed.forbidden_allowed_before_ready, probed.unlabelled_before_ready
        ),
        probed.forbidden_allowed_before_ready == 0 && probed.unlabelled_before_ready == 0,
    );
    let settle = ready + Duration::from_secs(1);
    let wrong = report.wrong_from(settle);
    report.check(
        format!(
            "every create scheduled from 1 s after ready on ended as it should ({} did not)",
            wrong.len()
        ),
        wrong.is_empty(),
    );
    let before: Vec<&Create> = report
        .creates
        .iter()
        .filter(|c| c.done() < killed)
        .filter(|c| !report.as_it_should(c))
        .collect();
    report.check(
        format!(
            "every create answered before the kill ended as it should ({} did not)",
            before.len()
        ),
        before.is_empty(),
    );
    let refused_other: usize = report
        .creates
        .iter()
        .filter(|c| c.scheduled >= killed && c.scheduled < ready)
        .filter(|c| {
            !matches!(
                c.category,
                Category::Admitted | Category::Denied | Category::WebhookFailed
            )
        })
        .count();
    report.check(
        format!(
            "creates during the outage were refused with \"failed calling webhook\" (other failures: {refused_other})"
        ),
        refused_other == 0,
    );
    report.check(
        format!(
            "kanon ready again within 30 s ({})",
            secs(ready - restarted)
        ),
        ready - restarted < Duration::from_secs(30),
    );
    Ok(report)
}
