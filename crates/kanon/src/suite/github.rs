//! GitHub Actions workflow commands: an `::error` at each failing case (in the suite file, at
//! the case's line) and at each suite that could not run, a `::warning` at each policy warning
//! (in the policy's file, at its document), which GitHub shows as annotations on the change.

use std::fmt::Write;

use super::report::Run;
use crate::inputs::Place;

/// The workflow commands of `run`, one per line.
pub(super) fn render(run: &Run) -> String {
    let mut out = String::new();
    for suite in &run.suites {
        if !suite.errors.is_empty() {
            let place = Place {
                file: suite.file.clone(),
                line: None,
            };
            command(
                &mut out,
                "error",
                &place,
                &format!("kanon test: {} could not run", suite.name),
                &suite.errors.join("\n"),
            );
        }
        for case in suite.cases.iter().filter(|c| !c.passed()) {
            command(
                &mut out,
                "error",
                &case.place,
                &format!("kanon test: {}: {}", suite.name, case.name),
                &case.failures.join("\n"),
            );
        }
        // Under strict each warning is already an error at the same place.
        if suite.strict {
            continue;
        }
        for warning in &suite.warnings {
            let place = warning.place.clone().unwrap_or_else(|| Place {
                file: suite.file.clone(),
                line: None,
            });
            command(
                &mut out,
                "warning",
                &place,
                &format!("kanon test: {}: {}", suite.name, warning.policy),
                &warning.message,
            );
        }
    }
    out
}

fn command(out: &mut String, level: &str, place: &Place, title: &str, message: &str) {
    let _ = write!(out, "::{level} file={}", property(&place.file));
    if let Some(line) = place.line {
        let _ = write!(out, ",line={line}");
    }
    let _ = writeln!(out, ",title={}::{}", property(title), data(message));
}

/// A command's message: `%`, CR and LF escaped, as the runner reads it.
fn data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A command's property value: as [`data`], and `:` and `,` too.
fn property(text: &str) -> String {
    data(text).replace(':', "%3A").replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::report::{CaseRun, PolicyWarning, SuiteRun};

    #[test]
    fn failures_and_warnings_become_escaped_commands_at_their_places() {
        let run = Run {
            suites: vec![SuiteRun {
                name: "labels".into(),
                file: "tests/kanon-test.yaml".into(),
                cases: vec![CaseRun {
                    name: "CREATE Pod/a, b".into(),
                    place: Place {
                        file: "tests/kanon-test.yaml".into(),
                        line: Some(12),
                    },
                    failures: vec!["allowed: expected true, got false".into(), "100%".into()],
                    policies: Vec::new(),
                    seconds: 0.0,
                }],
                errors: Vec::new(),
                warnings: vec![PolicyWarning {
                    policy: "ClusterValidatePolicy/x".into(),
                    place: Some(Place {
                        file: "policies/x.yaml".into(),
                        line: Some(3),
                    }),
                    message: "spec.x: no such field".into(),
                }],
                notes: Vec::new(),
                strict: false,
                seconds: 0.0,
            }],
        };
        assert_eq!(
            render(&run),
            "::error file=tests/kanon-test.yaml,line=12,title=kanon test%3A labels%3A CREATE Pod/a%2C b::allowed: expected true, got false%0A100%25\n\
             ::warning file=policies/x.yaml,line=3,title=kanon test%3A labels%3A ClusterValidatePolicy/x::spec.x: no such field\n"
        );
    }
}
