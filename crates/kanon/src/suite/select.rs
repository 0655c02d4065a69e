//! Which suites and cases a run takes (`--suite`, `--case`): shell-style globs.

use super::report::Run;

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

/// Whether `text` matches `glob` as a whole: `*` stands for any text (`/` included), `?` for
/// one character, everything else for itself.
pub(super) fn matches(glob: &str, text: &str) -> bool {
    let glob: Vec<char> = glob.chars().collect();
    let text: Vec<char> = text.chars().collect();
    // The classic two-pointer match with one backtrack point: linear in practice, never
    // exponential.
    let (mut g, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match glob.get(g) {
            Some('*') => {
                star = Some((g, t));
                g += 1;
            }
            Some(&c) if c == '?' || c == text[t] => {
                g += 1;
                t += 1;
            }
            _ => match star {
                Some((star_g, star_t)) => {
                    g = star_g + 1;
                    t = star_t + 1;
                    star = Some((star_g, star_t + 1));
                }
                None => return false,
            },
        }
    }
    glob[g..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn globs_match_whole_texts() {
        assert!(matches("pod-security-*", "pod-security-baseline"));
        assert!(matches("*", ""));
        assert!(matches("CREATE Pod/*/web-?", "CREATE Pod/shop/web-0"));
        assert!(matches("*web*", "CREATE Pod/shop/web-0"));
        assert!(matches("a*b*c", "aXbYbZc"));
        assert!(!matches("pod-security", "pod-security-baseline"));
        assert!(!matches("web-?", "web-10"));
        assert!(!matches("a*b", "aXbYc"));
        assert!(!matches("", "x"));
    }
}
