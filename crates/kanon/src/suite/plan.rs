//! Each case made ready before any runs: its operation, its expectations compiled, its
//! resource found and its request built; every problem named by field.

use std::path::Path;

use kanon_api::Operation;
use kanon_engine::Request;
use serde_json::Value;

use super::expect::TextChecks;
use super::file::Case;
use super::resource::{Candidate, not_found};
use crate::apply::{admitted_request, is_review, paired_old};
use crate::inputs::{Document, read_documents};

/// What a case runs: its request, or a failure to report without evaluating anything.
pub(super) enum Planned {
    Run {
        request: Box<Request>,
        source: String,
    },
    Fail(String),
}

/// What every case of a suite shares.
pub(super) struct SuiteInputs<'d> {
    pub(super) dir: &'d Path,
    pub(super) candidates: Vec<Candidate<'d>>,
    pub(super) old: &'d [Document],
    pub(super) default_op: Operation,
    /// Whether plain resources get the apiserver's defaults (and its admission plugins'
    /// changes).
    pub(super) defaults: bool,
    /// The suite's context objects (ServiceAccounts, PriorityClasses the plugins read).
    pub(super) context: &'d kanon_engine::ObjectStore,
}

/// The old object a case gives itself: the one document of a file relative to the suite, or
/// an object written in place.
fn own_old_object(value: &Value, dir: &Path) -> Result<Value, String> {
    match value {
        Value::String(path) => {
            let docs = read_documents(&[dir.join(path)]).map_err(|e| e.to_string())?;
            match <[Document; 1]>::try_from(docs) {
                Ok([doc]) => Ok(doc.value),
                Err(docs) => Err(format!(
                    "{path} holds {} documents; give a file with exactly one",
                    docs.len()
                )),
            }
        }
        Value::Object(_) => Ok(value.clone()),
        _ => Err("give a file path (relative to the suite file) or the object itself".into()),
    }
}

/// Everything a case needs before it runs: its operation, its message and warning matchers,
/// its old object and its request. Every problem (bad input: exit status 2) is named by field.
pub(super) fn plan(
    case: &Case,
    inputs: &SuiteInputs,
) -> Result<(Operation, TextChecks, Planned), Vec<String>> {
    let mut problems = Vec::new();
    let op = match &case.operation {
        Some(text) => match kanon_engine::parse_operation(text) {
            Ok(op) => op,
            Err(e) => {
                problems.push(format!("operation: {e}"));
                inputs.default_op
            }
        },
        None => inputs.default_op,
    };
    let texts = TextChecks::compile(case, &mut problems);
    let own_old = match &case.old_resource {
        None => None,
        Some(_) if matches!(op, Operation::Create | Operation::Connect) => {
            problems.push(format!(
                "oldResource: a {op} has no old object (set `operation: UPDATE`, or DELETE, where it is the object being deleted)"
            ));
            None
        }
        Some(value) => match own_old_object(value, inputs.dir) {
            Ok(object) => Some(object),
            Err(e) => {
                problems.push(format!("oldResource: {e}"));
                None
            }
        },
    };
    if !case.resource.is_named() {
        problems.push(
            "resource: give its kind and name (with namespace for a namespaced kind), or the file it is in (`source`, relative to the suite file)".to_owned(),
        );
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let file = case.resource.source_file(inputs.dir);
    let matching: Vec<&Candidate> = inputs
        .candidates
        .iter()
        .filter(|c| case.resource.selects(c, file.as_deref()))
        .collect();
    let doc = match matching.as_slice() {
        [one] => one.doc,
        [] => {
            return Ok((
                op,
                texts,
                Planned::Fail(not_found(
                    &case.resource,
                    &inputs.candidates,
                    file.as_deref(),
                )),
            ));
        }
        several => {
            let sources: Vec<String> = several.iter().map(|c| c.doc.origin()).collect();
            let files: std::collections::BTreeSet<&str> =
                several.iter().map(|c| c.doc.source.as_str()).collect();
            let mut hints = Vec::new();
            if case.resource.api_version.is_none()
                && several
                    .iter()
                    .any(|c| c.id.api_version != several[0].id.api_version)
            {
                hints.push("give apiVersion too".to_owned());
            }
            if case.resource.source.is_none() && files.len() == several.len() {
                let relative = Path::new(&several[0].doc.source)
                    .strip_prefix(inputs.dir)
                    .map_or_else(
                        |_| several[0].doc.source.clone(),
                        |p| p.display().to_string(),
                    );
                hints.push(format!(
                    "pick one by its file (`source: {relative}`, relative to the suite file)"
                ));
            }
            if hints.is_empty() {
                hints.push(
                    "give the case's resource the fields that tell them apart (apiVersion, namespace, `source`), or keep one of them".to_owned(),
                );
            }
            let hint = format!("; {}", hints.join(", or "));
            return Ok((
                op,
                texts,
                Planned::Fail(format!(
                    "several resources match ({}){hint}",
                    sources.join(", ")
                )),
            ));
        }
    };
    let request = if is_review(doc) {
        if case.old_resource.is_some() {
            return Err(vec![format!(
                "oldResource: {} is an AdmissionReview, which brings its own old object",
                doc.origin()
            )]);
        }
        // As the apiserver sent it: defaulted, as `kanon serve` takes every review.
        Request::from_admission_review(&doc.value)
            .map(Request::defaulted_on_arrival)
            .map_err(|e| e.to_string())
    } else {
        let old = own_old.or_else(|| paired_old(doc, inputs.old));
        admitted_request(op, doc.value.clone(), old, (inputs.defaults, inputs.context)).map_err(|e| {
            let hint = if op == Operation::Update {
                " (give the case an `oldResource`, or the suite's `oldResources` a previous version of it)"
            } else {
                ""
            };
            format!("{e}{hint}")
        })
    };
    match request {
        Ok(request) => Ok((
            op,
            texts,
            Planned::Run {
                request: Box::new(request),
                source: doc.origin(),
            },
        )),
        Err(e) => Err(vec![format!("{}: {e}", doc.origin())]),
    }
}
