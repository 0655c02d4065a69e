//! Part 2: how fast a policy change takes effect.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use kanon_control_plane::kanon::policy_resource;
use kube::api::{Api, DynamicObject, Patch, PatchParams};

use crate::lookups::{patched_label, review, review_client};
use crate::world::{World, cop, first_value};
use crate::{PODS_NS, Settings};

pub(crate) struct Changes {
    /// Through the apiserver: from the start of the write to the first dry-run create that
    /// shows the new value.
    pub(crate) through_apiserver: Vec<Duration>,
    /// The write (server-side apply) alone, in that series.
    pub(crate) apply_calls: Vec<Duration>,
    /// Dry-run creates per change (1: the first one after the write already showed it).
    pub(crate) probes: Vec<usize>,
    /// Straight to kanon: from the start of the write to the first `/mutate` answer with the
    /// new value (polled every millisecond).
    pub(crate) direct: Vec<Duration>,
}

pub(crate) fn policy_changes(world: &World, settings: &Settings) -> Result<Changes> {
    let mut changes = Changes {
        through_apiserver: Vec::new(),
        apply_calls: Vec::new(),
        probes: Vec::new(),
        direct: Vec::new(),
    };
    for n in 1..=settings.change_samples {
        let value = format!("change-{n}");
        let written = Instant::now();
        world.apply_policy(&cop(0, &value))?;
        changes.apply_calls.push(written.elapsed());
        let mut count = 0;
        loop {
            count += 1;
            let labels = world.dry_run_labels()?;
            if labels.get("bench-p0") == Some(&value) {
                break;
            }
            ensure!(
                written.elapsed() < Duration::from_secs(10),
                "the change never took effect: {labels:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        changes.through_apiserver.push(written.elapsed());
        changes.probes.push(count);
        std::thread::sleep(Duration::from_millis(300));
    }
    // The same, asking kanon directly: what kanon itself takes, at a finer resolution.
    let kanon = world.kanon();
    let client = review_client(kanon)?;
    let url = kanon.url("/mutate?timeout=10s");
    let body = review(PODS_NS)?;
    world.runtime.block_on(async {
        for n in 1..=settings.change_samples {
            let value = format!("direct-{n}");
            let written = Instant::now();
            let api: Api<DynamicObject> = Api::all_with(
                world.client.clone(),
                &policy_resource("ClusterOverridePolicy")?,
            );
            let document = cop(0, &value);
            api.patch(
                "bench-cop-000",
                &PatchParams::apply("kanon-bench").force(),
                &Patch::Apply(&document),
            )
            .await?;
            loop {
                let answer = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await?
                    .bytes()
                    .await?;
                if patched_label(&answer, "bench-p0")?.as_deref() == Some(value.as_str()) {
                    break;
                }
                ensure!(
                    written.elapsed() < Duration::from_secs(10),
                    "the change never reached kanon"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            changes.direct.push(written.elapsed());
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        anyhow::Ok(())
    })?;
    // Back to the first value.
    world.apply_policy(&cop(0, &first_value(0)))?;
    Ok(changes)
}
