//! `kanon serve --policies DIR`: the policies of a directory put in force, and kept in step
//! with it by polling ([`crate::poll`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kanon_engine::{PolicyPublisher, PolicySet};

use crate::inputs::load_directory;
use crate::poll::{Fingerprint, fingerprint, poll_files};

/// Puts a loaded set in force, or reports why it could not be loaded.
fn apply(dir: &Path, loaded: Result<PolicySet, Vec<String>>, publisher: &dyn PolicyPublisher) {
    match loaded {
        Ok(set) => {
            // Said on every load, so a fix is seen to take.
            for policy in set.policies() {
                for warning in &policy.warnings {
                    tracing::warn!(policy = %policy.id, "{}", warning.to_string().trim_end());
                }
            }
            publisher.publish(set, &format!("loaded from {}", dir.display()))
        }
        Err(problems) => publisher.reject(&problems),
    }
}

/// Serves the policies in `dir` through `publisher`: loads them once, then every `interval`
/// looks at the policy files (paths, sizes, modification times) and, when anything changed
/// and has stayed unchanged for one more interval (so that a file caught half-written is not
/// loaded), loads them again ([`poll_files`]). A good set is published; a bad one
/// is rejected with every problem, and the last good set (or none: not ready) stays. Runs
/// until the task is dropped.
pub async fn watch_directory(
    dir: PathBuf,
    publisher: Arc<dyn PolicyPublisher>,
    interval: Duration,
) {
    let paths = vec![dir.clone()];
    let first = {
        let paths = paths.clone();
        tokio::task::spawn_blocking(move || (fingerprint(&paths, true), load_directory(&paths[0])))
            .await
    };
    let shown = dir.display().to_string();
    let failed = |e: String| -> Result<PolicySet, Vec<String>> {
        Err(vec![format!("{shown}: loading the policies failed: {e}")])
    };
    let loaded_print = match first {
        Ok((print, loaded)) => {
            apply(&dir, loaded, publisher.as_ref());
            print
        }
        Err(e) => {
            apply(&dir, failed(e.to_string()), publisher.as_ref());
            Fingerprint::Unreadable(format!("load failed: {e}"))
        }
    };
    poll_files(
        paths,
        true,
        interval,
        loaded_print,
        |paths| load_directory(&paths[0]),
        |loaded| apply(&dir, loaded.unwrap_or_else(failed), publisher.as_ref()),
    )
    .await;
}

#[cfg(test)]
mod tests;
