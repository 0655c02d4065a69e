//! `kanon test`: policy test suites, a policy author's CI.
//!
//! A suite is a `kanon-test.yaml` file:
//!
//! ```yaml
//! name: labels                     # optional; defaults to the folder
//! policies: [policies/]            # paths relative to the suite file
//! resources: [resources/]
//! context: [context/]              # optional: Namespaces and objects references read
//! operation: CREATE                # optional, default CREATE; per case too
//! oldResources: [old/]             # optional, for UPDATE
//! cases:
//!   - resource: {kind: Pod, namespace: shop, name: web-0}   # apiVersion optional
//!     allowed: true
//!     messages: [...]              # exact, optional
//!     warnings: [...]              # exact, optional
//!     appliedPolicies: [...]       # exact, optional
//!     auditAnnotations: {...}      # exact, optional
//!     patch: [...]                 # exact, optional
//!     patched: {...}               # a subset of the patched object, optional
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use kanon_api::Operation;
use serde::Deserialize;
use serde_json::Value;

use crate::apply::{BadInput, Verdict, evaluate_documents, load_context, load_policies};
use crate::inputs::read_documents;

/// Arguments of `kanon test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// Folders searched (recursively) for `kanon-test.yaml` files, or suite files; default `.`.
    #[arg(value_name = "DIR")]
    paths: Vec<PathBuf>,
}

const SUITE_FILE: &str = "kanon-test.yaml";

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Suite {
    name: Option<String>,
    policies: Vec<PathBuf>,
    resources: Vec<PathBuf>,
    #[serde(default)]
    context: Vec<PathBuf>,
    #[serde(default)]
    old_resources: Vec<PathBuf>,
    #[serde(default = "default_operation")]
    operation: String,
    cases: Vec<Case>,
}

fn default_operation() -> String {
    "CREATE".into()
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Case {
    resource: CaseResource,
    operation: Option<String>,
    allowed: Option<bool>,
    messages: Option<Vec<String>>,
    warnings: Option<Vec<String>>,
    applied_policies: Option<Vec<String>>,
    audit_annotations: Option<serde_json::Map<String, Value>>,
    patch: Option<Value>,
    patched: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CaseResource {
    api_version: Option<String>,
    kind: String,
    namespace: Option<String>,
    name: String,
}

impl CaseResource {
    fn label(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{}/{}/{}", self.kind, ns, self.name),
            None => format!("{}/{}", self.kind, self.name),
        }
    }

    fn selects(&self, v: &Verdict) -> bool {
        self.kind == v.resource.kind
            && self.name == v.resource.name
            && self.namespace == v.resource.namespace
            && self
                .api_version
                .as_ref()
                .is_none_or(|a| *a == v.resource.api_version)
    }
}

/// Finds suite files under `path` (or `path` itself when it is one), in name order.
fn find_suites(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    if path.is_file() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for entry in entries {
        let name = entry
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if entry.is_dir() && name != "target" && !name.starts_with('.') {
            find_suites(&entry, out)?;
        } else if name == SUITE_FILE {
            out.push(entry);
        }
    }
    Ok(())
}

/// Whether `expected` is a subset of `actual`: every key of an expected map is in the actual
/// map with a matching value; lists match element by element and have the same length.
/// Returns the JSON pointer of the first difference.
fn subset(expected: &Value, actual: &Value, at: &str) -> Result<(), String> {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, v) in e {
                let here = format!("{at}/{}", kanon_engine::pointer::escape(k));
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

/// The differences between a case's expectations and a verdict.
fn judge(case: &Case, verdict: &Verdict) -> Vec<String> {
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
    check_list("messages", &case.messages, &d.messages, &mut failures);
    check_list("warnings", &case.warnings, &d.warnings, &mut failures);
    check_list(
        "appliedPolicies",
        &case.applied_policies,
        &d.applied_policies,
        &mut failures,
    );
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

/// Result counts of one run.
#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
}

fn run_suite(file: &Path, tally: &mut Tally) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let suite: Suite = serde_saphyr::from_str(&text)
        .map_err(|e| format!("{}: {}", file.display(), e.without_snippet()))?;
    let dir = file.parent().unwrap_or(Path::new("."));
    let rel = |paths: &[PathBuf]| paths.iter().map(|p| dir.join(p)).collect::<Vec<_>>();
    let name = suite
        .name
        .clone()
        .unwrap_or_else(|| dir.display().to_string());
    let bad =
        |BadInput(problems): BadInput| format!("{}: {}", file.display(), problems.join("\n  "));
    let policies = load_policies(&rel(&suite.policies)).map_err(bad)?;
    let context = load_context(&rel(&suite.context)).map_err(bad)?;
    let resources = read_documents(&rel(&suite.resources)).map_err(|e| e.to_string())?;
    let old = read_documents(&rel(&suite.old_resources)).map_err(|e| e.to_string())?;
    let parse_op = |text: &str| {
        kanon_engine::parse_operation(text).map_err(|e| format!("{}: {e}", file.display()))
    };
    let default_op = parse_op(&suite.operation)?;
    // Evaluate once per operation the cases use.
    let mut by_operation: Vec<(Operation, Vec<Verdict>)> = Vec::new();
    for case in &suite.cases {
        let op = match &case.operation {
            Some(o) => parse_op(o)?,
            None => default_op,
        };
        if !by_operation.iter().any(|(o, _)| *o == op) {
            let verdicts =
                evaluate_documents(&policies, &context, &resources, &old, op).map_err(bad)?;
            by_operation.push((op, verdicts));
        }
        let verdicts = &by_operation
            .iter()
            .find(|(o, _)| *o == op)
            .map(|(_, v)| v)
            .ok_or("unreachable")?;
        let label = format!("{name}: {} {}", op, case.resource.label());
        let matching: Vec<&Verdict> = verdicts
            .iter()
            .filter(|v| case.resource.selects(v))
            .collect();
        let failures = match matching.as_slice() {
            [verdict] => judge(case, verdict),
            [] => vec!["no such resource in the suite's resources".to_string()],
            _ => vec!["several resources match; give apiVersion too".to_string()],
        };
        if failures.is_empty() {
            tally.passed += 1;
            println!("PASS {label}");
        } else {
            tally.failed += 1;
            println!("FAIL {label}");
            for f in failures {
                println!("     {f}");
            }
        }
    }
    Ok(())
}

/// Runs `kanon test`: exit 0 when every case passes, 1 when any fails, 2 on bad input.
pub fn run(args: &TestArgs) -> ExitCode {
    let roots = if args.paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.paths.clone()
    };
    let mut files = Vec::new();
    for root in &roots {
        if let Err(e) = find_suites(root, &mut files) {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    if files.is_empty() {
        eprintln!(
            "error: no {SUITE_FILE} found under {}",
            roots
                .iter()
                .map(|r| r.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        return ExitCode::from(2);
    }
    let mut tally = Tally::default();
    let mut bad = false;
    for file in &files {
        if let Err(e) = run_suite(file, &mut tally) {
            eprintln!("error: {e}");
            bad = true;
        }
    }
    println!("{} passed, {} failed", tally.passed, tally.failed);
    if bad {
        ExitCode::from(2)
    } else if tally.failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::subset;
    use serde_json::json;

    #[test]
    fn subset_matching() {
        let actual = json!({"a": {"b": 1, "c": [1, {"d": 2, "e": 3}]}, "f": "x"});
        assert_eq!(
            subset(&json!({"a": {"c": [1, {"d": 2}]}}), &actual, ""),
            Ok(())
        );
        assert_eq!(subset(&json!({}), &actual, ""), Ok(()));
        assert_eq!(
            subset(&json!({"a": {"b": 2}}), &actual, ""),
            Err("/a/b: expected 2, found 1".into())
        );
        assert_eq!(
            subset(&json!({"g": 1}), &actual, ""),
            Err("/g: expected 1, found nothing".into())
        );
        assert!(subset(&json!({"a": {"c": [1]}}), &actual, "").is_err());
    }
}
