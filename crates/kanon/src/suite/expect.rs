//! What a case expects (`allowed`, messages, warnings, patches, ...) and how a verdict is
//! held to it.

use std::fmt;

use regex::Regex;
use serde_json::Value;

use super::file::{Case, Expect};
use crate::apply::Verdict;

/// An [`Expect`] ready to test texts with (its regular expression compiled).
#[derive(Debug)]
pub(super) enum Matcher {
    Exact(String),
    Contains(String),
    Matches(Regex),
}

impl Matcher {
    /// Compiles `expect`; an invalid regular expression is an error saying why.
    fn compile(expect: &Expect) -> Result<Matcher, String> {
        Ok(match expect {
            Expect::Exact(text) => Matcher::Exact(text.clone()),
            Expect::Contains(text) => Matcher::Contains(text.clone()),
            Expect::Matches(pattern) => Matcher::Matches(Regex::new(pattern).map_err(|e| {
                // regex's message draws the pattern over several lines; its last says why.
                let text = e.to_string();
                let why = text.lines().last().unwrap_or_default();
                format!(
                    "`{pattern}` is not a valid regular expression: {}",
                    why.trim().trim_start_matches("error: ")
                )
            })?),
        })
    }

    fn accepts(&self, text: &str) -> bool {
        match self {
            Matcher::Exact(expected) => expected == text,
            Matcher::Contains(part) => text.contains(part.as_str()),
            Matcher::Matches(regex) => regex.is_match(text),
        }
    }
}

impl fmt::Display for Matcher {
    // As a suite writes it (exact texts as a list of strings prints them).
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Matcher::Exact(text) => write!(f, "{text:?}"),
            Matcher::Contains(text) => write!(f, "{{contains: {text:?}}}"),
            Matcher::Matches(regex) => write!(f, "{{matches: {:?}}}", regex.as_str()),
        }
    }
}

/// `[a, b]` of matchers.
fn show(matchers: &[Matcher]) -> String {
    let shown: Vec<String> = matchers.iter().map(Matcher::to_string).collect();
    format!("[{}]", shown.join(", "))
}

/// The compiled message and warning expectations of a case.
#[derive(Debug, Default)]
pub(super) struct TextChecks {
    messages: Option<Vec<Matcher>>,
    messages_include: Option<Vec<Matcher>>,
    warnings: Option<Vec<Matcher>>,
    warnings_include: Option<Vec<Matcher>>,
}

impl TextChecks {
    /// Compiles the lists of `case`; every invalid entry is a problem naming its field.
    pub(super) fn compile(case: &Case, problems: &mut Vec<String>) -> TextChecks {
        let mut list = |field: &str, entries: &Option<Vec<Expect>>| {
            let entries = entries.as_ref()?;
            let mut compiled = Vec::with_capacity(entries.len());
            for (i, entry) in entries.iter().enumerate() {
                match Matcher::compile(entry) {
                    Ok(m) => compiled.push(m),
                    Err(e) => problems.push(format!("{field}[{i}].matches: {e}")),
                }
            }
            Some(compiled)
        };
        TextChecks {
            messages: list("messages", &case.messages),
            messages_include: list("messagesInclude", &case.messages_include),
            warnings: list("warnings", &case.warnings),
            warnings_include: list("warningsInclude", &case.warnings_include),
        }
    }
}

/// Whether `expected` is a subset of `actual`: every key of an expected map is in the actual
/// map with a matching value; lists match element by element and have the same length.
/// Returns the JSON pointer of the first difference.
pub(super) fn subset(expected: &Value, actual: &Value, at: &str) -> Result<(), String> {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, v) in e {
                let here = format!("{at}/{}", kanon_engine::escape_pointer_token(k));
                match a.get(k) {
                    Some(av) => subset(v, av, &here)?,
                    None => return Err(format!("{here}: expected {v}, found nothing")),
                }
            }
            Ok(())
        }
        (Value::Array(e), Value::Array(a)) if e.len() == a.len() => {
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                subset(ev, av, &format!("{at}/{i}"))?;
            }
            Ok(())
        }
        _ if expected == actual => Ok(()),
        _ => Err(format!(
            "{}: expected {expected}, found {actual}",
            if at.is_empty() { "/" } else { at }
        )),
    }
}

fn check_list(
    what: &str,
    expected: &Option<Vec<String>>,
    actual: &[String],
    failures: &mut Vec<String>,
) {
    if let Some(e) = expected
        && e.as_slice() != actual
    {
        failures.push(format!("{what}: expected {e:?}, got {actual:?}"));
    }
}

/// Every text of `actual`, in order, each matching the entry at its place in `expected`.
fn check_texts(
    what: &str,
    expected: &Option<Vec<Matcher>>,
    actual: &[String],
    failures: &mut Vec<String>,
) {
    if let Some(e) = expected
        && (e.len() != actual.len() || e.iter().zip(actual).any(|(m, a)| !m.accepts(a)))
    {
        failures.push(format!("{what}: expected {}, got {actual:?}", show(e)));
    }
}

/// Each entry of `expected` matching at least one text of `actual`.
fn check_included(
    what: &str,
    expected: &Option<Vec<Matcher>>,
    actual: &[String],
    failures: &mut Vec<String>,
) {
    let Some(e) = expected else { return };
    let missing: Vec<&Matcher> = e
        .iter()
        .filter(|m| !actual.iter().any(|a| m.accepts(a)))
        .collect();
    if !missing.is_empty() {
        let shown: Vec<String> = missing.iter().map(|m| m.to_string()).collect();
        failures.push(format!(
            "{what}: nothing matches {}, got {actual:?}",
            shown.join(", ")
        ));
    }
}

/// The differences between a case's expectations and a verdict.
pub(super) fn judge(case: &Case, texts: &TextChecks, verdict: &Verdict) -> Vec<String> {
    let d = &verdict.decision;
    let mut failures = Vec::new();
    if let Some(allowed) = case.allowed
        && allowed != d.allowed
    {
        failures.push(format!(
            "allowed: expected {allowed}, got {} (messages: {:?})",
            d.allowed, d.messages
        ));
    }
    check_texts("messages", &texts.messages, &d.messages, &mut failures);
    check_included(
        "messagesInclude",
        &texts.messages_include,
        &d.messages,
        &mut failures,
    );
    check_texts("warnings", &texts.warnings, &d.warnings, &mut failures);
    check_included(
        "warningsInclude",
        &texts.warnings_include,
        &d.warnings,
        &mut failures,
    );
    check_list(
        "appliedPolicies",
        &case.applied_policies,
        &d.applied_policies,
        &mut failures,
    );
    let applied: Vec<String> = d
        .exceptions
        .iter()
        .map(|a| {
            let exception = a.exception.trim_start_matches("PolicyException/");
            match a.rules.as_slice() {
                [] => format!("{exception}: {}", a.policy),
                rules => format!("{exception}: {} ({})", a.policy, rules.join(", ")),
            }
        })
        .collect();
    check_list("exceptions", &case.exceptions, &applied, &mut failures);
    if let Some(expected) = &case.audit_annotations {
        let actual: serde_json::Map<String, Value> = d
            .audit_annotations
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        if *expected != actual {
            failures.push(format!(
                "auditAnnotations: expected {expected:?}, got {actual:?}"
            ));
        }
    }
    if let Some(expected) = &case.patch {
        let actual = serde_json::to_value(&d.patch).unwrap_or(Value::Null);
        if *expected != actual {
            failures.push(format!("patch: expected {expected}, got {actual}"));
        }
    }
    if let Some(expected) = &case.patched {
        let actual = d.patched.clone().unwrap_or(Value::Null);
        if let Err(e) = subset(expected, &actual, "") {
            failures.push(format!("patched: {e}"));
        }
    }
    failures
}
