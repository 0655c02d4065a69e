//! The run as a person reads it: `PASS`/`FAIL` lines and the counts on standard output;
//! errors, policy warnings and notes on standard error, each naming its suite.

use std::fmt::Write;

use super::report::Run;

/// What the text leaves out.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Shown {
    /// Only failing cases are listed.
    pub(super) fail_only: bool,
}

/// `PASS <suite>: <case>` or `FAIL <suite>: <case>` with each failure indented below it (and,
/// `--detailed`, what each policy did), then `N passed, M failed`.
pub(super) fn render(run: &Run, shown: Shown) -> String {
    let mut out = String::new();
    for suite in &run.suites {
        for case in &suite.cases {
            if shown.fail_only && case.passed() {
                continue;
            }
            let verdict = if case.passed() { "PASS" } else { "FAIL" };
            let _ = writeln!(out, "{verdict} {}: {}", suite.name, case.name);
            for failure in &case.failures {
                let _ = writeln!(out, "     {failure}");
            }
            for policy in &case.policies {
                let _ = writeln!(out, "     {} {}", policy.policy, policy.outcome);
                for said in &policy.said {
                    let _ = writeln!(out, "       {said}");
                }
            }
        }
    }
    let tally = run.tally();
    let _ = write!(out, "{} passed, {} failed", tally.passed, tally.failed);
    if tally.errors > 0 {
        let _ = write!(
            out,
            ", {} suite{} could not run",
            tally.errors,
            if tally.errors == 1 { "" } else { "s" }
        );
    }
    out.push('\n');
    out
}

/// Errors, policy warnings and notes, each naming its suite, on standard error.
pub(super) fn print_diagnostics(run: &Run) {
    eprint!("{}", diagnostics(run));
}

/// `error: <problem>` (the problem names the suite file), `warning: <suite>: <policy>
/// (<file>:<line>): <warning>`, `note: <suite>: <note>`.
pub(super) fn diagnostics(run: &Run) -> String {
    let mut out = String::new();
    for suite in &run.suites {
        for error in &suite.errors {
            let _ = writeln!(out, "error: {error}");
        }
        for warning in &suite.warnings {
            let _ = writeln!(out, "warning: {}: {}", suite.name, warning.line());
        }
        for note in &suite.notes {
            let _ = writeln!(out, "note: {}: {note}", suite.name);
        }
    }
    out
}
