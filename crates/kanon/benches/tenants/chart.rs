//! kanon as the chart deploys it, read from `helm template` with the chart's default values: the
//! container's memory limit (which the phases run kanon under, in a memory cgroup) and the
//! `kanon serve` flags that bound its work (lookups, programs, reviews, the audit).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, ensure};

/// The flags of the rendered Deployment that the bench passes on: those that bound kanon's
/// work. The rest name things of the Pod (its namespace, certificate Secret, webhook
/// configurations, addresses), which the kit sets for its own cluster.
const BOUNDS: &[&str] = &[
    "--object-",
    "--http-",
    "--program-",
    "--max-",
    "--body-",
    "--costly-",
    "--audit-",
    "--report-",
];

/// What the chart renders for kanon's container.
#[derive(Debug, Clone)]
pub(crate) struct Chart {
    /// `resources.limits.memory`, in bytes.
    pub(crate) memory_limit: u64,
    /// The container's `kanon serve` flags that bound its work (see [`BOUNDS`]).
    pub(crate) flags: Vec<String>,
}

impl Chart {
    /// Renders the Deployment of the chart at `chart` with `helm`.
    pub(crate) fn render(helm: &Path, chart: &Path) -> Result<Chart> {
        let out = Command::new(helm)
            .args(["template", "kanon"])
            .arg(chart)
            .args([
                "--namespace",
                "kanon-system",
                "--show-only",
                "templates/deployment.yaml",
            ])
            .output()
            .context("helm template runs")?;
        ensure!(
            out.status.success(),
            "helm template: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rendered = String::from_utf8_lossy(&out.stdout);
        // The container's limits come first in its resources; the first `memory:` after
        // `limits:`.
        let limits = rendered
            .split("limits:")
            .nth(1)
            .context("no limits in the rendered Deployment")?;
        let memory = limits
            .lines()
            .find_map(|l| l.trim().strip_prefix("memory:"))
            .context("no memory limit in the rendered Deployment")?
            .trim()
            .trim_matches('"');
        let mib: u64 = memory
            .strip_suffix("Mi")
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("the memory limit {memory} is not in Mi"))?;
        let flags: Vec<String> = rendered
            .lines()
            .filter_map(|l| l.trim().strip_prefix("- "))
            .map(|arg| arg.trim_matches('"').to_string())
            .filter(|arg| BOUNDS.iter().any(|prefix| arg.starts_with(prefix)))
            .collect();
        ensure!(
            flags
                .iter()
                .any(|f| f.starts_with("--max-concurrent-reviews")),
            "the rendered Deployment has none of kanon's bounds: {flags:?}"
        );
        Ok(Chart {
            memory_limit: mib * 1024 * 1024,
            flags,
        })
    }

    /// The flags without those of the audit (for phases that measure admission).
    pub(crate) fn admission_flags(&self) -> Vec<String> {
        self.flags
            .iter()
            .filter(|f| !f.starts_with("--audit-") && !f.starts_with("--report-"))
            .cloned()
            .collect()
    }
}
