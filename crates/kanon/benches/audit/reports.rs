//! The reports' size, as the apiserver returns them and as etcd stores them.

use std::process::Command;

use anyhow::{Context, Result, ensure};
use base64::Engine as _;
use kanon_control_plane::kanon::output_text as text;
use serde_json::{Value, json};

use crate::world::World;

#[derive(Debug, Default)]
pub(crate) struct ReportSizes {
    pub(crate) reports: usize,
    pub(crate) cluster_reports: usize,
    /// `kubectl get ... -o json` output, as printed (indented).
    pub(crate) kubectl_bytes: usize,
    /// Compact JSON of each item, with and without managedFields.
    pub(crate) compact: Vec<usize>,
    pub(crate) compact_without_managed: Vec<usize>,
    pub(crate) results: usize,
    pub(crate) summary_fail: i64,
    pub(crate) summary_pass: i64,
    pub(crate) cut: usize,
    /// What etcd holds under /registry/openreports.io/: keys and value bytes.
    pub(crate) etcd_keys: usize,
    pub(crate) etcd_bytes: usize,
    pub(crate) etcd_error: Option<String>,
}

pub(crate) fn report_sizes(world: &World) -> Result<ReportSizes> {
    let out = world.kubectl(&[
        "get",
        "reports,clusterreports",
        "-A",
        "-o",
        "json",
        "--show-managed-fields",
    ])?;
    let mut sizes = ReportSizes {
        kubectl_bytes: out.stdout.len(),
        ..ReportSizes::default()
    };
    let list: Value = serde_json::from_slice(&out.stdout)?;
    for item in list["items"].as_array().cloned().unwrap_or_default() {
        match item["kind"].as_str() {
            Some("ClusterReport") => sizes.cluster_reports += 1,
            _ => sizes.reports += 1,
        }
        sizes.compact.push(serde_json::to_vec(&item)?.len());
        let mut without = item.clone();
        if let Some(metadata) = without["metadata"].as_object_mut() {
            metadata.remove("managedFields");
        }
        sizes
            .compact_without_managed
            .push(serde_json::to_vec(&without)?.len());
        sizes.results += item["results"].as_array().map_or(0, Vec::len);
        sizes.summary_fail += item["summary"]["fail"].as_i64().unwrap_or(0);
        sizes.summary_pass += item["summary"]["pass"].as_i64().unwrap_or(0);
        if item["metadata"]["annotations"]
            .get("audit.kanon.dev/results-cut-from")
            .is_some()
        {
            sizes.cut += 1;
        }
    }
    match etcd_reports(world) {
        Ok((keys, bytes)) => {
            sizes.etcd_keys = keys;
            sizes.etcd_bytes = bytes;
        }
        Err(error) => sizes.etcd_error = Some(format!("{error:#}")),
    }
    Ok(sizes)
}

/// Keys and value bytes under `/registry/openreports.io/` in etcd, through its JSON gateway.
pub(crate) fn etcd_reports(world: &World) -> Result<(usize, usize)> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let url = format!("{}/v3/kv/range", world.etcd_url()?);
    let request = json!({
        "key": b64.encode("/registry/openreports.io/"),
        "range_end": b64.encode("/registry/openreports.io0"),
    });
    let out = Command::new("curl")
        .args(["-s", "--max-time", "30", "-X", "POST", &url, "-d"])
        .arg(request.to_string())
        .output()
        .context("curl runs")?;
    ensure!(out.status.success(), "etcd's gateway: {}", text(&out));
    let answer: Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("etcd's answer: {}", text(&out)))?;
    let kvs = answer["kvs"].as_array().cloned().unwrap_or_default();
    let mut bytes = 0;
    for kv in &kvs {
        let value = b64.decode(kv["value"].as_str().unwrap_or_default())?;
        bytes += value.len();
    }
    Ok((kvs.len(), bytes))
}
