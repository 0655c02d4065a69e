//! Repository tasks: `cargo xtask crds` regenerates the committed CRD manifests.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Folders that hold a copy of every CRD, relative to the repository root.
const CRD_DIRS: [&str; 2] = ["crds", "charts/kanon/crds"];

fn main() -> Result<()> {
    let task = std::env::args().nth(1);
    match task.as_deref() {
        Some("crds") => write_crds(),
        Some(other) => bail!("unknown task `{other}`; tasks: crds"),
        None => bail!("usage: cargo xtask <task>; tasks: crds"),
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Writes each CRD to every CRD folder and removes stale `*.yaml` files there.
fn write_crds() -> Result<()> {
    let root = repo_root();
    let crds = kanon_api::crds();
    for dir in CRD_DIRS {
        let dir = root.join(dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut wanted = Vec::new();
        for crd in &crds {
            let name = kanon_api::crd_file_name(crd);
            let yaml = kanon_api::crds_yaml(crd).context("serializing a CRD")?;
            let path = dir.join(&name);
            std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
            println!("wrote {}", path.display());
            wanted.push(name);
        }
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if name.ends_with(".yaml") && !wanted.iter().any(|w| w == name) {
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing stale {}", path.display()))?;
                println!("removed stale {}", path.display());
            }
        }
    }
    Ok(())
}
