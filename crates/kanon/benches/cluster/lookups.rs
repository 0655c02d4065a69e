//! Part 3: review latency with `k8s` and `http` lookups, cache hits and misses.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use base64::Engine as _;
use kanon_control_plane::kanon::{Kanon, bench_policy, repo};
use serde_json::{Value, json};

use crate::stats::{ms, stats};
use crate::tier_service::TierService;
use crate::world::World;
use crate::{COPS, Settings};

pub(crate) const LOOKUP_CASES: [(&str, &str); 3] = [
    ("none", "bench-lookup-none"),
    ("k8s", "bench-lookup-k8s"),
    ("http", "bench-lookup-http"),
];

/// The policies of the lookup cases: each gives the Pods of its namespace a `tier` label.
pub(crate) fn lookup_policies(service_port: u16) -> Vec<Value> {
    let pods = |ns: &str| json!([{"apiVersion": "v1", "kind": "Pod", "namespace": ns}]);
    // A `labels` template adding `tier`, with `value` or `valueRef` from `source`.
    let label = |source: Value| {
        let mut template = json!({"type": "labels", "operation": "add", "path": "tier"});
        for (key, value) in source.as_object().into_iter().flatten() {
            template[key] = value.clone();
        }
        json!([{"overriders": {"template": template}}])
    };
    vec![
        bench_policy(
            "ClusterOverridePolicy",
            "bench-lookup-none",
            json!({"resourceSelectors": pods("bench-lookup-none"),
                   "overrideRules": label(json!({"value": {"string": "bronze"}}))}),
        ),
        bench_policy(
            "ClusterOverridePolicy",
            "bench-lookup-k8s",
            json!({"resourceSelectors": pods("bench-lookup-k8s"),
                   "overrideRules": label(json!({"valueRef": {"from": "k8s", "path": "/data/tier",
                       "k8s": {"apiVersion": "v1", "kind": "ConfigMap",
                               "namespace": "{{ object.metadata.namespace }}", "name": "bench-tier"}}}))}),
        ),
        bench_policy(
            "ClusterOverridePolicy",
            "bench-lookup-http",
            json!({"resourceSelectors": pods("bench-lookup-http"),
                   "overrideRules": label(json!({"valueRef": {"from": "http", "path": "/body/tier",
                       "http": {"url": format!("http://127.0.0.1:{service_port}/tier")}}}))}),
        ),
    ]
}

/// The tier each lookup case's Pods get.
pub(crate) fn expected_tier(case: &str) -> &'static str {
    match case {
        "k8s" => "gold",
        "http" => "silver",
        _ => "bronze",
    }
}

/// An AdmissionReview for a Pod CREATE in `namespace` (the fixture kube-apiserver sent).
pub(crate) fn review(namespace: &str) -> Result<Vec<u8>> {
    let path = repo().join("fixtures/admission-reviews/pod-create.json");
    let mut review: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    review["request"]["namespace"] = json!(namespace);
    review["request"]["object"]["metadata"]["namespace"] = json!(namespace);
    Ok(serde_json::to_vec(&review)?)
}

/// The value a `/mutate` answer's patch gives label `key`, if any (an error when the review is
/// not allowed).
pub(crate) fn patched_label(body: &[u8], key: &str) -> Result<Option<String>> {
    let answer: Value = serde_json::from_slice(body)?;
    let response = &answer["response"];
    ensure!(response["allowed"] == true, "not allowed: {answer}");
    let Some(patch) = response["patch"].as_str() else {
        return Ok(None);
    };
    let patch: Value =
        serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(patch)?)?;
    let path = format!("/metadata/labels/{key}");
    Ok(patch
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|op| {
            if op["path"] == path.as_str() {
                op["value"].as_str()
            } else if op["path"] == "/metadata/labels" {
                op["value"][key].as_str()
            } else {
                None
            }
        })
        .map(str::to_string))
}

/// Whether a `/mutate` answer allows the Pod and patches the `tier` label to `tier`.
pub(crate) fn check_answer(body: &[u8], tier: &str) -> Result<()> {
    let labelled = patched_label(body, "tier")?;
    ensure!(
        labelled.as_deref() == Some(tier),
        "tier={tier} expected in the patch, got {labelled:?}"
    );
    Ok(())
}

/// A client for `kanon`'s HTTPS port: its CA only, HTTP/1.1, keep-alive.
pub(crate) fn review_client(kanon: &Kanon) -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&kanon.ca_pem()?)?])
        .http1_only()
        .no_proxy()
        .build()?)
}

/// `count` reviews, one at a time; the latency of each (request sent → answer read).
pub(crate) async fn reviews(
    client: &reqwest::Client,
    url: &str,
    body: &[u8],
    tier: &str,
    count: usize,
) -> Result<Vec<Duration>> {
    let mut latencies = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        let response = client
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_vec())
            .send()
            .await?;
        let status = response.status();
        let answer = response.bytes().await?;
        latencies.push(started.elapsed());
        ensure!(status.is_success(), "HTTP {status}: {answer:?}");
        check_answer(&answer, tier)?;
    }
    Ok(latencies)
}

/// One value of a Prometheus text exposition: the line `name{...}` with every label of
/// `labels`.
pub(crate) fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

pub(crate) struct LookupResults {
    /// (case, cache) → latencies.
    pub(crate) latencies: BTreeMap<(String, &'static str), Vec<Duration>>,
    /// Metrics of the kanon with caches, and of the one without.
    pub(crate) metrics_hit: String,
    pub(crate) metrics_miss: String,
    pub(crate) service_requests: u64,
}

pub(crate) fn lookups(world: &mut World, settings: &Settings) -> Result<LookupResults> {
    let service = TierService::start()?;
    for (_, ns) in LOOKUP_CASES {
        world.cluster.pod_namespace(ns)?;
    }
    world.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "bench-tier", "namespace": "bench-lookup-k8s"},
        "data": {"tier": "gold"}}))?;
    for document in lookup_policies(service.port) {
        world.apply_policy(&document)?;
    }
    world.wait_policies_ready("ClusterOverridePolicy", COPS + LOOKUP_CASES.len())?;
    // The second kanon: no caches, no status writes (the first one writes them).
    let miss = world.start_kanon(
        "kanon-no-cache",
        &[
            "--object-cache-ttl-ms",
            "0",
            "--http-cache-ttl-ms",
            "0",
            "--no-status",
        ],
    )?;
    world.kanon_miss = Some(miss);
    let hit_kanon = world.kanon();
    let miss_kanon = world.kanon_miss.as_ref().context("the second kanon")?;
    let servers: [(&'static str, &Kanon, reqwest::Client); 2] = [
        ("hit", hit_kanon, review_client(hit_kanon)?),
        ("miss", miss_kanon, review_client(miss_kanon)?),
    ];
    let bodies: Vec<Vec<u8>> = LOOKUP_CASES
        .iter()
        .map(|(_, ns)| review(ns))
        .collect::<Result<_>>()?;
    let mut latencies: BTreeMap<(String, &'static str), Vec<Duration>> = BTreeMap::new();
    world.runtime.block_on(async {
        // Warm-up: connections, caches (for "hit"), the apiserver's and the service's side.
        for ((case, _), body) in LOOKUP_CASES.iter().zip(&bodies) {
            for (_, kanon, client) in &servers {
                let url = kanon.url("/mutate?timeout=10s");
                reviews(client, &url, body, expected_tier(case), 50).await?;
            }
        }
        for round in 0..settings.review_rounds {
            for ((case, _), body) in LOOKUP_CASES.iter().zip(&bodies) {
                for (cache, kanon, client) in &servers {
                    let url = kanon.url("/mutate?timeout=10s");
                    let mut taken = reviews(
                        client,
                        &url,
                        body,
                        expected_tier(case),
                        settings.reviews_per_round,
                    )
                    .await?;
                    let s = stats(&taken);
                    eprintln!(
                        "bench: reviews round {}, lookup {case}, cache {cache}: p50 {}, p99 {}",
                        round + 1,
                        ms(s.p50),
                        ms(s.p99)
                    );
                    latencies
                        .entry((case.to_string(), cache))
                        .or_default()
                        .append(&mut taken);
                }
            }
        }
        anyhow::Ok(())
    })?;
    Ok(LookupResults {
        latencies,
        metrics_hit: world.kanon().metrics()?,
        metrics_miss: miss_kanon.metrics()?,
        service_requests: service.requests.load(Ordering::Relaxed),
    })
}
