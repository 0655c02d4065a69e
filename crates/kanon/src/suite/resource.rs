//! The resource a case judges: how a case names it, and how it is found among the suite's
//! resources (with a "did you mean" when it is not).

use std::path::{Path, PathBuf};

use kanon_api::Operation;
use kanon_engine::Request;
use serde::Deserialize;

use crate::apply::{ResourceId, is_review};
use crate::inputs::Document;

/// The resource a case judges: by identity (kind and name, with namespace and apiVersion), by
/// the file it is in (`source`, relative to the suite file), or both.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct CaseResource {
    pub(super) api_version: Option<String>,
    pub(super) kind: Option<String>,
    pub(super) namespace: Option<String>,
    pub(super) name: Option<String>,
    pub(super) source: Option<String>,
}

impl CaseResource {
    pub(super) fn label(&self) -> String {
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
    pub(super) fn describe(&self) -> String {
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
    pub(super) fn is_named(&self) -> bool {
        self.source.is_some() || (self.kind.is_some() && self.name.is_some())
    }

    /// The file `source` names ([`file_of`]), relative to the suite's folder `dir`.
    pub(super) fn source_file(&self, dir: &Path) -> Option<PathBuf> {
        self.source
            .as_ref()
            .map(|source| file_of(&dir.join(source)))
    }

    /// Whether the candidate is the case's resource, `source` being in `file` ([`Self::source_file`]).
    /// Without `source`, a missing namespace is a cluster-scoped resource's; with it, what is
    /// left out does not narrow the choice.
    pub(super) fn selects(&self, candidate: &Candidate, file: Option<&Path>) -> bool {
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
pub(super) fn file_of(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// `[apiVersion ]Kind [namespace/]name` of a resource.
pub(super) fn describe(id: &ResourceId, with_api_version: bool) -> String {
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

/// A resource of the suite and who it is (for an AdmissionReview, the object it reviews).
pub(super) struct Candidate<'d> {
    pub(super) doc: &'d Document,
    pub(super) id: ResourceId,
    /// The file it was read from ([`file_of`]), resolved once.
    pub(super) file: PathBuf,
}

/// The identity of every resource document; a document that cannot be evaluated is a problem.
pub(super) fn candidates(docs: &[Document]) -> Result<Vec<Candidate<'_>>, Vec<String>> {
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
pub(super) fn not_found(
    wanted: &CaseResource,
    candidates: &[Candidate],
    file: Option<&Path>,
) -> String {
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
