//! The run as a JUnit XML report, the test report format CI servers read (Jenkins, GitLab,
//! GitHub test-report actions, Azure DevOps): a `testsuite` per suite, a `testcase` per case
//! (`classname` the suite), a `failure` per failing case, an `error` for a suite that could not
//! run, policy warnings and notes in the suite's `system-err`. Only the elements and
//! attributes the common JUnit schema (Maven Surefire's, `junit-10.xsd`) allows are written,
//! so that strict readers take it.

use std::fmt::Write;

use super::report::{Run, SuiteRun};

/// The report, an XML document.
pub(super) fn render(run: &Run) -> String {
    let tally = run.tally();
    let seconds: f64 = run.suites.iter().map(|s| s.seconds).sum();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"kanon test\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"{}\">",
        tally.passed + tally.failed + tally.errors,
        tally.failed,
        tally.errors,
        time(seconds)
    );
    for suite in &run.suites {
        testsuite(&mut out, suite);
    }
    out.push_str("</testsuites>\n");
    out
}

fn testsuite(out: &mut String, suite: &SuiteRun) {
    let tally = suite.tally();
    let _ = writeln!(
        out,
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"0\" time=\"{}\" file=\"{}\">",
        attribute(&suite.name),
        suite.cases.len() + tally.errors,
        tally.failed,
        tally.errors,
        time(suite.seconds),
        attribute(&suite.file)
    );
    if !suite.errors.is_empty() {
        let _ = writeln!(
            out,
            "    <testcase name=\"load the suite\" classname=\"{}\" time=\"0\">",
            attribute(&suite.name)
        );
        let _ = writeln!(
            out,
            "      <error message=\"{}\" type=\"bad input\">{}</error>",
            attribute(first_line(&suite.errors[0])),
            text(&suite.errors.join("\n"))
        );
        out.push_str("    </testcase>\n");
    }
    for case in &suite.cases {
        let _ = write!(
            out,
            "    <testcase name=\"{}\" classname=\"{}\" time=\"{}\"",
            attribute(&case.name),
            attribute(&suite.name),
            time(case.seconds)
        );
        if case.passed() {
            out.push_str("/>\n");
            continue;
        }
        let body = format!("{}\nat {}", case.failures.join("\n"), case.place);
        let _ = writeln!(
            out,
            ">\n      <failure message=\"{}\" type=\"expectation\">{}</failure>\n    </testcase>",
            attribute(first_line(&case.failures[0])),
            text(&body)
        );
    }
    let mut said: Vec<String> = suite
        .warnings
        .iter()
        .map(|warning| format!("warning: {}", warning.line()))
        .collect();
    said.extend(suite.notes.iter().map(|note| format!("note: {note}")));
    if !said.is_empty() {
        let _ = writeln!(
            out,
            "    <system-err>{}</system-err>",
            text(&said.join("\n"))
        );
    }
    out.push_str("  </testsuite>\n");
}

/// A failure's headline, for the `message` attribute; the element's text has all of it.
fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// Seconds with at most three decimals, as the schema's time type allows.
fn time(seconds: f64) -> String {
    format!("{seconds:.3}")
}

/// Character data: markup escaped, characters XML 1.0 cannot carry replaced.
fn text(value: &str) -> String {
    escape(value, false)
}

/// An attribute value: as [`text`], quotes and line breaks escaped too (a reader would
/// otherwise fold them into spaces).
fn attribute(value: &str) -> String {
    escape(value, true)
}

fn escape(value: &str, in_attribute: bool) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if in_attribute => out.push_str("&quot;"),
            '\n' if in_attribute => out.push_str("&#10;"),
            '\r' if in_attribute => out.push_str("&#13;"),
            '\t' if in_attribute => out.push_str("&#9;"),
            '\n' | '\t' | '\r' => out.push(c),
            c if allowed(c) => out.push(c),
            _ => out.push('\u{FFFD}'),
        }
    }
    out
}

/// Whether XML 1.0 may carry `c` (control characters other than tab and line breaks, and
/// the two non-characters U+FFFE and U+FFFF, may not appear even escaped).
fn allowed(c: char) -> bool {
    !(c < ' ' || c == '\u{FFFE}' || c == '\u{FFFF}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_quotes_and_control_characters_are_escaped() {
        assert_eq!(text("a < b && c > d\n"), "a &lt; b &amp;&amp; c &gt; d\n");
        assert_eq!(attribute("say \"hi\"\nnow"), "say &quot;hi&quot;&#10;now");
        assert_eq!(text("bell\u{7}"), "bell\u{FFFD}");
        assert_eq!(time(0.00012), "0.000");
        assert_eq!(time(1234.5678), "1234.568");
    }
}
