//! Part 1: Pod creates through the apiserver at a fixed rate, without and with kanon.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};

use crate::stats::{Stats, ms, stats};
use crate::world::{World, bench_pod, first_value, has_labels};
use crate::{PODS_NS, Settings, load_average};

/// One create: its latency from its scheduled start, and the labels it came back with (or
/// the apiserver's refusal).
pub(crate) struct Create {
    pub(crate) latency: Duration,
    pub(crate) result: Result<BTreeMap<String, String>, String>,
}

/// Creates `count` Pods named `<prefix>-<i>` at `rate` per second, each started on schedule
/// whether or not the ones before have finished.
pub(crate) async fn creates_at_fixed_rate(
    api: Api<Pod>,
    prefix: &str,
    rate: u32,
    count: usize,
) -> Vec<Create> {
    let interval = Duration::from_secs(1) / rate;
    let start = tokio::time::Instant::now() + Duration::from_millis(100);
    let mut tasks = Vec::with_capacity(count);
    for i in 0..count {
        let scheduled = start + interval * i as u32;
        tokio::time::sleep_until(scheduled).await;
        let api = api.clone();
        let pod = bench_pod(PODS_NS, &format!("{prefix}-{i:05}"));
        tasks.push(tokio::spawn(async move {
            let result = match pod {
                Ok(pod) => api
                    .create(&PostParams::default(), &pod)
                    .await
                    .map(|p| p.metadata.labels.unwrap_or_default())
                    .map_err(|e| match e {
                        kube::Error::Api(status) => status.message.clone(),
                        other => other.to_string(),
                    }),
                Err(e) => Err(e.to_string()),
            };
            Create {
                latency: scheduled.elapsed(),
                result,
            }
        }));
    }
    let mut creates = Vec::with_capacity(count);
    for task in tasks {
        creates.push(task.await.unwrap_or_else(|e| Create {
            latency: Duration::MAX,
            result: Err(format!("the task failed: {e}")),
        }));
    }
    creates
}

pub(crate) struct Round {
    pub(crate) with_kanon: bool,
    pub(crate) stats: Stats,
    pub(crate) latencies: Vec<Duration>,
    pub(crate) errors: Vec<String>,
    pub(crate) labelled: usize,
    pub(crate) listed_labelled: usize,
    pub(crate) created: usize,
    pub(crate) load: String,
}

pub(crate) fn pod_round(
    world: &World,
    settings: &Settings,
    number: usize,
    with_kanon: bool,
) -> Result<Round> {
    let rate = settings.rate;
    let warmup = (rate * settings.warmup_secs) as usize;
    let measured = (rate * settings.round_secs) as usize;
    let prefix = format!("r{number}");
    let creates = world.runtime.block_on(creates_at_fixed_rate(
        world.pods(PODS_NS),
        &prefix,
        rate,
        warmup + measured,
    ));
    let load = load_average();
    let mut latencies = Vec::with_capacity(measured);
    let mut errors = Vec::new();
    let mut labelled = 0;
    let mut created = 0;
    for (i, create) in creates.iter().enumerate() {
        match &create.result {
            Ok(labels) => {
                created += 1;
                if has_labels(labels, first_value) {
                    labelled += 1;
                }
            }
            Err(message) => errors.push(message.clone()),
        }
        if i >= warmup {
            latencies.push(create.latency);
        }
    }
    // What is stored: listed back from the apiserver.
    let listed = world.runtime.block_on(
        world
            .pods(PODS_NS)
            .list(&ListParams::default().labels("app=bench")),
    )?;
    let listed_labelled = listed
        .items
        .iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .unwrap_or_default()
                .starts_with(&prefix)
                && has_labels(
                    p.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()),
                    first_value,
                )
        })
        .count();
    let stats = stats(&latencies);
    eprintln!(
        "bench: round {number} ({}): {} creates, {} errors, p50 {}, p99 {}, max {}; load {load}",
        if with_kanon { "with kanon" } else { "without" },
        creates.len(),
        errors.len(),
        ms(stats.p50),
        ms(stats.p99),
        ms(stats.max)
    );
    Ok(Round {
        with_kanon,
        stats,
        latencies,
        errors,
        labelled,
        listed_labelled,
        created,
        load,
    })
}

pub(crate) fn pod_creates(world: &mut World, settings: &Settings) -> Result<Vec<Round>> {
    let mut rounds = Vec::new();
    let mut number = 0;
    for _ in 0..settings.pairs {
        for with_kanon in [false, true] {
            number += 1;
            if with_kanon {
                world.register_webhooks()?;
            } else if world.webhooks {
                world.unregister_webhooks()?;
            }
            std::thread::sleep(Duration::from_secs(2));
            rounds.push(pod_round(world, settings, number, with_kanon)?);
            world.delete_pods(PODS_NS)?;
        }
    }
    Ok(rounds)
}
