//! `kanon test`: policy test suites, a policy author's CI.
//!
//! A suite is a `kanon-test.yaml` file:
//!
//! ```yaml
//! name: labels                     # optional; defaults to the folder
//! policies: [policies/]            # paths relative to the suite file
//! resources: [resources/]
//! context: [context/]              # optional (alias `objects`): Namespaces and objects
//!                                  # references read
//! operation: CREATE                # optional, default CREATE; per case too
//! oldResources: [old/]             # optional: previous versions, paired by identity
//! exceptionNamespaces: [policy-exceptions]  # optional: where PolicyExceptions among the
//!                                  # policies are honoured (none by default, as in a cluster)
//! now: 2026-11-26T12:00:00Z        # optional: the time exceptions' expiresAt is judged at
//! defaults: false                  # optional: judge resources as written, without the
//!                                  # apiserver's defaults (default true)
//! cases:
//!   - resource: {kind: Pod, namespace: shop, name: web-0}   # apiVersion optional; or by
//!                                  # file: {source: resources/web-0.yaml}, with kind, name,
//!                                  # … to pick among its documents
//!     operation: UPDATE            # optional
//!     oldResource: old/web-0.yaml  # optional: this case's old object (a path or an object)
//!     allowed: true
//!     messages: [...]              # every message, in order; optional
//!     messagesInclude: [...]       # some of the messages, in any order; optional
//!     warnings: [...]              # every warning, in order; optional
//!     warningsInclude: [...]       # some of the warnings; optional
//!     appliedPolicies: [...]       # exact, optional
//!     exceptions: [...]            # the exceptions that applied (`ns/name: Kind/policy`), exact
//!     auditAnnotations: {...}      # exact, optional
//!     patch: [...]                 # exact, optional
//!     patched: {...}               # a subset of the patched object, optional
//! ```
//!
//! An entry of the message and warning lists is a string (the whole text), `{contains: TEXT}`
//! (a part of it) or `{matches: REGEX}` (a regular expression found in it).
//!
//! Each case evaluates only the resource it selects, so only the resources of UPDATE cases
//! need an old version.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use kanon_api::Operation;
use kanon_engine::{PolicySet, Request};
use regex::Regex;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use crate::apply::{
    BadInput, ResourceId, Verdict, admitted_request, evaluate_request, is_review, load_context,
    load_policies_for, paired_old,
};
use crate::inputs::{Document, read_documents};
use crate::programs::{DeadlineArgs, OfflineEvaluation, ProgramArgs};

/// Arguments of `kanon test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// Folders searched (recursively) for `kanon-test.yaml` files, or suite files; default `.`.
    #[arg(value_name = "DIR")]
    paths: Vec<PathBuf>,
    /// Judge every suite's plain resources as written, without the defaults kube-apiserver
    /// fills in before any webhook sees an object (as a suite's `defaults: false` does).
    #[arg(long)]
    no_defaults: bool,
    #[command(flatten)]
    programs: ProgramArgs,
    #[command(flatten)]
    deadline: DeadlineArgs,
}

const SUITE_FILE: &str = "kanon-test.yaml";

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Suite {
    name: Option<String>,
    policies: Vec<PathBuf>,
    resources: Vec<PathBuf>,
    /// `objects` reads as `kanon serve --objects` and `kanon apply --objects` do.
    #[serde(default, alias = "objects")]
    context: Vec<PathBuf>,
    #[serde(default)]
    old_resources: Vec<PathBuf>,
    #[serde(default = "default_operation")]
    operation: String,
    #[serde(default)]
    exception_namespaces: Vec<String>,
    now: Option<String>,
    /// `false`: plain resources are judged as written, without the apiserver's defaults.
    #[serde(default = "defaults_on")]
    defaults: bool,
    cases: Vec<Case>,
}

fn defaults_on() -> bool {
    true
}

fn default_operation() -> String {
    "CREATE".into()
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Case {
    resource: CaseResource,
    operation: Option<String>,
    /// A path relative to the suite (one document), or the object itself.
    old_resource: Option<Value>,
    allowed: Option<bool>,
    messages: Option<Vec<Expect>>,
    messages_include: Option<Vec<Expect>>,
    warnings: Option<Vec<Expect>>,
    warnings_include: Option<Vec<Expect>>,
    applied_policies: Option<Vec<String>>,
    exceptions: Option<Vec<String>>,
    audit_annotations: Option<serde_json::Map<String, Value>>,
    patch: Option<Value>,
    patched: Option<Value>,
}

/// An expected message or warning, as written in a suite.
#[derive(Debug, Clone)]
enum Expect {
    /// A string: the whole text.
    Exact(String),
    /// `{contains: TEXT}`: a part of the text.
    Contains(String),
    /// `{matches: REGEX}`: a regular expression found in the text.
    Matches(String),
}

impl<'de> Deserialize<'de> for Expect {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ExpectVisitor;

        impl<'de> Visitor<'de> for ExpectVisitor {
            type Value = Expect;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string (the whole text), {contains: TEXT} or {matches: REGEX}")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Expect, E> {
                Ok(Expect::Exact(text.to_string()))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Expect, A::Error> {
                const KEYS: &[&str] = &["contains", "matches"];
                let Some(key) = map.next_key::<String>()? else {
                    return Err(de::Error::custom(
                        "an empty map: give {contains: TEXT} or {matches: REGEX}",
                    ));
                };
                let expect = match key.as_str() {
                    "contains" => Expect::Contains(map.next_value()?),
                    "matches" => Expect::Matches(map.next_value()?),
                    other => return Err(de::Error::unknown_field(other, KEYS)),
                };
                if let Some(extra) = map.next_key::<String>()? {
                    return Err(de::Error::custom(format!(
                        "give one of `contains` and `matches` per entry, not `{key}` and `{extra}` (write two entries)"
                    )));
                }
                Ok(expect)
            }
        }

        deserializer.deserialize_any(ExpectVisitor)
    }
}

/// An [`Expect`] ready to test texts with (its regular expression compiled).
#[derive(Debug)]
enum Matcher {
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
struct TextChecks {
    messages: Option<Vec<Matcher>>,
    messages_include: Option<Vec<Matcher>>,
    warnings: Option<Vec<Matcher>>,
    warnings_include: Option<Vec<Matcher>>,
}

impl TextChecks {
    /// Compiles the lists of `case`; every invalid entry is a problem naming its field.
    fn compile(case: &Case, problems: &mut Vec<String>) -> TextChecks {
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

/// The resource a case judges: by identity (kind and name, with namespace and apiVersion), by
/// the file it is in (`source`, relative to the suite file), or both.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CaseResource {
    api_version: Option<String>,
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    source: Option<String>,
}

impl CaseResource {
    fn label(&self) -> String {
        let identity = match (&self.kind, &self.name, &self.namespace) {
            (Some(kind), Some(name), Some(ns)) => Some(format!("{kind}/{ns}/{name}")),
            (Some(kind), Some(name), None) => Some(format!("{kind}/{name}")),
            _ => None,
        };
        match (identity, &self.source) {
            (Some(identity), Some(source)) => format!("{identity} ({source})"),
            (Some(identity), None) => identity,
            (None, Some(source)) => source.clone(),
            (None, None) => "(no resource named)".to_owned(),
        }
    }

    /// `[apiVersion ]Kind [namespace/]name`, as [`describe`] names the suite's resources.
    fn describe(&self) -> String {
        let mut text = String::new();
        if let Some(api_version) = &self.api_version {
            text.push_str(api_version);
            text.push(' ');
        }
        text.push_str(self.kind.as_deref().unwrap_or("resource"));
        if let Some(name) = &self.name {
            text.push(' ');
            if let Some(ns) = &self.namespace {
                text.push_str(ns);
                text.push('/');
            }
            text.push_str(name);
        }
        if let Some(source) = &self.source {
            text.push_str(&format!(" in {source}"));
        }
        text
    }

    /// Whether the case names its resource: a kind and a name, or a file.
    fn is_named(&self) -> bool {
        self.source.is_some() || (self.kind.is_some() && self.name.is_some())
    }

    /// The file `source` names ([`file_of`]), relative to the suite's folder `dir`.
    fn source_file(&self, dir: &Path) -> Option<PathBuf> {
        self.source
            .as_ref()
            .map(|source| file_of(&dir.join(source)))
    }

    /// Whether the candidate is the case's resource, `source` being in `file` ([`Self::source_file`]).
    /// Without `source`, a missing namespace is a cluster-scoped resource's; with it, what is
    /// left out does not narrow the choice.
    fn selects(&self, candidate: &Candidate, file: Option<&Path>) -> bool {
        let id = &candidate.id;
        let field =
            |wanted: &Option<String>, found: &str| wanted.as_ref().is_none_or(|w| w == found);
        let namespace = match (&self.source, &self.namespace) {
            (Some(_), None) => true,
            (_, wanted) => *wanted == id.namespace,
        };
        let source = file.is_none_or(|file| file == candidate.file);
        field(&self.kind, &id.kind)
            && field(&self.name, &id.name)
            && field(&self.api_version, &id.api_version)
            && namespace
            && source
    }
}

/// A file as cases compare it: resolved when it can be, else as written.
fn file_of(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// `[apiVersion ]Kind [namespace/]name` of a resource.
fn describe(id: &ResourceId, with_api_version: bool) -> String {
    let mut text = String::new();
    if with_api_version {
        text.push_str(&id.api_version);
        text.push(' ');
    }
    text.push_str(&id.kind);
    text.push(' ');
    if let Some(ns) = &id.namespace {
        text.push_str(ns);
        text.push('/');
    }
    text.push_str(&id.name);
    text
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
fn judge(case: &Case, texts: &TextChecks, verdict: &Verdict) -> Vec<String> {
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

/// Result counts of one run.
#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
}

/// A resource of the suite and who it is (for an AdmissionReview, the object it reviews).
struct Candidate<'d> {
    doc: &'d Document,
    id: ResourceId,
    /// The file it was read from ([`file_of`]), resolved once.
    file: PathBuf,
}

/// The identity of every resource document; a document that cannot be evaluated is a problem.
fn candidates(docs: &[Document]) -> Result<Vec<Candidate<'_>>, Vec<String>> {
    let mut found = Vec::with_capacity(docs.len());
    let mut problems = Vec::new();
    for doc in docs {
        // The request's own constructors, so that identity and validity are the webhook's.
        let request = if is_review(doc) {
            Request::from_admission_review(&doc.value)
        } else {
            Request::from_objects(Operation::Create, Some(doc.value.clone()), None)
        };
        match request {
            Ok(r) => found.push(Candidate {
                doc,
                id: ResourceId::of(&r),
                file: file_of(Path::new(&doc.source)),
            }),
            Err(e) => problems.push(format!("{}: {e}", doc.origin())),
        }
    }
    if problems.is_empty() {
        Ok(found)
    } else {
        Err(problems)
    }
}

/// The most resources a "not found" failure lists.
const LISTED: usize = 10;

/// Why no resource of the suite is `wanted`: what there is, nearest first, with a "did you
/// mean" when one is a likely misspelling.
fn not_found(wanted: &CaseResource, candidates: &[Candidate], file: Option<&Path>) -> String {
    let target = wanted.describe();
    if let (Some(source), Some(file)) = (&wanted.source, file) {
        let in_file: Vec<String> = candidates
            .iter()
            .filter(|c| c.file == file)
            .map(|c| describe(&c.id, wanted.api_version.is_some()))
            .collect();
        if in_file.is_empty() {
            let files: std::collections::BTreeSet<&str> =
                candidates.iter().map(|c| c.doc.source.as_str()).collect();
            let files: Vec<&str> = files.into_iter().take(LISTED).collect();
            return format!(
                "no {target}: {source} is not among the suite's resources (they are read from: {})",
                files.join(", ")
            );
        }
        return format!("no {target}; {source} holds: {}", in_file.join(", "));
    }
    let with_api_version = wanted.api_version.is_some();
    let mut known: Vec<(usize, String)> = candidates
        .iter()
        .map(|c| {
            let text = describe(&c.id, with_api_version);
            (kanon_schema::edit_distance(&target, &text), text)
        })
        .collect();
    known.sort();
    known.dedup();
    let Some((distance, nearest)) = known.first() else {
        return format!("no {target} in the suite's resources: they hold no resource");
    };
    let mut text = format!("no {target} in the suite's resources; ");
    // A misspelling changes a few characters of the name (or the kind, or the namespace):
    // a third of the name's length at most.
    let name_length = wanted
        .name
        .as_deref()
        .map_or(0, |name| name.chars().count());
    if *distance <= (name_length / 3).max(1) {
        text.push_str(&format!("did you mean {nearest}? There are: "));
    } else {
        text.push_str("there are: ");
    }
    let listed: Vec<&str> = known.iter().take(LISTED).map(|(_, t)| t.as_str()).collect();
    text.push_str(&listed.join(", "));
    if known.len() > LISTED {
        text.push_str(&format!(" and {} more", known.len() - LISTED));
    }
    text
}

/// What a case runs: its request, or a failure to report without evaluating anything.
enum Planned {
    Run {
        request: Box<Request>,
        source: String,
    },
    Fail(String),
}

/// What every case of a suite shares.
struct SuiteInputs<'d> {
    dir: &'d Path,
    candidates: Vec<Candidate<'d>>,
    old: &'d [Document],
    default_op: Operation,
    /// Whether plain resources get the apiserver's defaults (and its admission plugins'
    /// changes).
    defaults: bool,
    /// The suite's context objects (ServiceAccounts, PriorityClasses the plugins read).
    context: &'d kanon_engine::ObjectStore,
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
fn plan(
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
        Request::from_admission_review(&doc.value).map_err(|e| e.to_string())
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

/// Runs the planned cases: evaluates each one's resource, prints PASS or FAIL.
fn run_cases(
    evaluation: &OfflineEvaluation,
    name: &str,
    policies: &PolicySet,
    context: &kanon_engine::ObjectStore,
    planned: Vec<(&Case, Operation, TextChecks, Planned)>,
    tally: &mut Tally,
) {
    let namespaces = crate::namespaces::Namespaces::new(
        context,
        planned.iter().filter_map(|(_, _, _, plan)| match plan {
            Planned::Run { request, .. } => request.namespace.as_deref(),
            Planned::Fail(_) => None,
        }),
    );
    let context = &namespaces;
    let failed_before = tally.failed;
    for (case, op, texts, plan) in planned {
        let label = format!("{name}: {op} {}", case.resource.label());
        let failures = match plan {
            Planned::Run { request, source } => {
                let verdict = evaluate_request(evaluation, policies, context, &request, source);
                let mut failures = judge(case, &texts, &verdict);
                failures.extend(audit_disagreement(
                    evaluation, policies, context, &request, &verdict,
                ));
                failures
            }
            Planned::Fail(why) => vec![why],
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
    // Where a case failed, the Namespaces that were assumed may be why; a passing suite's
    // are not worth a line each run.
    if tally.failed > failed_before {
        for note in namespaces.notes("the suite's context") {
            eprintln!("note: {name}: {note}");
        }
    }
}

/// Whether the background audit would find of the object a CREATE case stores what admission
/// found of it, policy by policy: a policy that passed the object passes it, one that rejected
/// it fails (or warns about) it, one an exception exempted skips it, one that could not judge
/// it errs. Checked on every CREATE case of an object file (an AdmissionReview may carry a
/// user, which no existing object has) whose object admission did not change, or admitted
/// changed: the object as it would be stored.
fn audit_disagreement(
    evaluation: &OfflineEvaluation,
    policies: &PolicySet,
    context: &dyn kanon_engine::Lookup,
    request: &Request,
    verdict: &Verdict,
) -> Option<String> {
    use kanon_api::ResultStatus;
    use kanon_engine::PolicyOutcome;
    let decision = &verdict.decision;
    if request.operation != Operation::Create || !request.info["userInfo"].as_object()?.is_empty() {
        return None;
    }
    let is_validate = |label: &str| {
        policies.policies().iter().any(|p| {
            &*p.label == label && matches!(p.rules, kanon_engine::PolicyRules::Validate { .. })
        })
    };
    // A mutation that denied ends the review before any validation.
    if decision.policy_results.iter().any(|r| {
        matches!(r.outcome, PolicyOutcome::Failed { ignored: false, .. }) && !is_validate(&r.policy)
    }) {
        return None;
    }
    let mutated = decision
        .policy_results
        .iter()
        .any(|r| matches!(r.outcome, PolicyOutcome::Mutated { patched: true }));
    let stored = match (&decision.patched, decision.allowed, mutated) {
        (Some(patched), true, _) => patched.clone(),
        (_, false, false) => request.object.clone()?,
        _ => return None,
    };
    let findings = match evaluation.audit(policies, stored, context) {
        Ok(findings) => findings,
        Err(e) => return Some(format!("the audit cannot judge the object: {e}")),
    };
    let mut problems = Vec::new();
    let judged: Vec<_> = decision
        .policy_results
        .iter()
        .filter(|r| !matches!(r.outcome, PolicyOutcome::Mutated { .. }))
        .filter(|r| is_validate(&r.policy))
        .collect();
    for result in &judged {
        let found: Vec<ResultStatus> = findings
            .iter()
            .filter(|f| f.policy == result.policy)
            .map(|f| f.result)
            .collect();
        let failing = found.iter().any(|r| {
            matches!(
                r,
                ResultStatus::Fail | ResultStatus::Warn | ResultStatus::Error
            )
        });
        // Rules an exception exempts are skipped beside the policy's pass or failure.
        let agrees = match result.outcome {
            PolicyOutcome::Passed => found.contains(&ResultStatus::Pass) && !failing,
            PolicyOutcome::Rejected => {
                found
                    .iter()
                    .any(|r| matches!(r, ResultStatus::Fail | ResultStatus::Warn))
                    && !found.contains(&ResultStatus::Pass)
            }
            PolicyOutcome::Exempted => {
                found.iter().all(|r| *r == ResultStatus::Skip) && !found.is_empty()
            }
            PolicyOutcome::Failed { .. } => found.contains(&ResultStatus::Error),
            PolicyOutcome::Mutated { .. } => true,
        };
        if !agrees {
            problems.push(format!(
                "{}: admission {:?}, audit {found:?}",
                result.policy, result.outcome
            ));
        }
    }
    for finding in &findings {
        if !judged.iter().any(|r| r.policy == finding.policy) {
            problems.push(format!(
                "{}: audit {}, but admission did not judge the object with it",
                finding.policy, finding.result
            ));
        }
    }
    (!problems.is_empty()).then(|| {
        format!(
            "the audit disagrees with admission: {}",
            problems.join("; ")
        )
    })
}

fn run_suite(
    evaluation: &OfflineEvaluation,
    file: &Path,
    no_defaults: bool,
    tally: &mut Tally,
) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let suite: Suite = serde_saphyr::from_str(&text)
        .map_err(|e| format!("{}: {}", file.display(), e.without_snippet()))?;
    let dir = file.parent().unwrap_or(Path::new("."));
    let rel = |paths: &[PathBuf]| paths.iter().map(|p| dir.join(p)).collect::<Vec<_>>();
    let name = suite
        .name
        .clone()
        .unwrap_or_else(|| dir.display().to_string());
    let bad = |problems: Vec<String>| format!("{}: {}", file.display(), problems.join("\n  "));
    let context = load_context(&rel(&suite.context)).map_err(|BadInput(p)| bad(p))?;
    let policies =
        load_policies_for(&rel(&suite.policies), &context).map_err(|BadInput(p)| bad(p))?;
    let policies = crate::exceptions::honoured(policies, &suite.exception_namespaces);
    let now = match &suite.now {
        Some(text) => {
            kanon_engine::parse_exception_time(text).map_err(|e| bad(vec![format!("now: {e}")]))?
        }
        None => crate::exceptions::clock(),
    };
    evaluation.set_now(now);
    let resources = read_documents(&rel(&suite.resources)).map_err(|e| e.to_string())?;
    let old = read_documents(&rel(&suite.old_resources)).map_err(|e| e.to_string())?;
    let default_op = kanon_engine::parse_operation(&suite.operation)
        .map_err(|e| bad(vec![format!("operation: {e}")]))?;
    let inputs = SuiteInputs {
        dir,
        candidates: candidates(&resources).map_err(bad)?,
        old: &old,
        default_op,
        defaults: suite.defaults && !no_defaults,
        context: &context,
    };
    // Every case is checked before any runs, so a bad suite reports every problem and no
    // verdict.
    let mut problems = Vec::new();
    let mut planned = Vec::with_capacity(suite.cases.len());
    for (i, case) in suite.cases.iter().enumerate() {
        match plan(case, &inputs) {
            Ok((op, texts, run)) => planned.push((case, op, texts, run)),
            Err(found) => {
                let op = case.operation.as_deref().unwrap_or(&suite.operation);
                let at = format!("cases[{i}] ({op} {})", case.resource.label());
                problems.extend(found.into_iter().map(|p| format!("{at}: {p}")));
            }
        }
    }
    if !problems.is_empty() {
        return Err(bad(problems));
    }
    run_cases(evaluation, &name, &policies, &context, planned, tally);
    Ok(())
}

/// Runs `kanon test`: exit 0 when every case passes, 1 when any fails, 2 on bad input.
pub fn run(args: &TestArgs) -> ExitCode {
    let evaluation = match OfflineEvaluation::new(&args.programs, &args.deadline) {
        Ok(evaluation) => evaluation,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
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
        if let Err(e) = run_suite(&evaluation, file, args.no_defaults, &mut tally) {
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
