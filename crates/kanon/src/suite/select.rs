//! Which suites and cases a run takes (`--suite`, `--case`): shell-style globs.

use super::report::Run;
use crate::glob::matches;

/// The `--suite` and `--case` globs; none given selects everything.
#[derive(Debug, Default)]
pub(super) struct Selection {
    suites: Vec<String>,
    cases: Vec<String>,
}

impl Selection {
    pub(super) fn new(suites: &[String], cases: &[String]) -> Self {
        Selection {
            suites: suites.to_vec(),
            cases: cases.to_vec(),
        }
    }

    /// Whether the suite of this name, read from `file`, runs: a glob matches its name or
    /// its file.
    pub(super) fn suite(&self, name: &str, file: &str) -> bool {
        self.suites.is_empty()
            || self
                .suites
                .iter()
                .any(|glob| matches(glob, name) || matches(glob, file))
    }

    /// Whether the case of this name runs.
    pub(super) fn case(&self, name: &str) -> bool {
        self.cases.is_empty() || self.cases.iter().any(|glob| matches(glob, name))
    }

    /// Why the run is empty when globs were given and nothing matched: a CI job whose filter
    /// has a typo must not pass by running nothing.
    pub(super) fn selected_nothing(&self, run: &Run) -> Option<String> {
        if self.suites.is_empty() && self.cases.is_empty() {
            return None;
        }
        if run.suites.iter().any(|s| !s.errors.is_empty()) {
            return None;
        }
        let ran = run
            .suites
            .iter()
            .flat_map(|s| &s.cases)
            .filter(|c| self.case(&c.name))
            .count();
        if ran > 0 {
            return None;
        }
        let mut what = Vec::new();
        if !self.suites.is_empty() {
            what.push(format!("--suite {}", self.suites.join(", ")));
        }
        if !self.cases.is_empty() {
            what.push(format!("--case {}", self.cases.join(", ")));
        }
        Some(format!(
            "no case selected by {} ({} suite{} matched)",
            what.join(" and "),
            run.suites.len(),
            if run.suites.len() == 1 { "" } else { "s" }
        ))
    }
}
