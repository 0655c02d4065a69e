//! Policies and objects from files: the documents `kanon apply`, `kanon test`, `kanon render`
//! and `kanon convert` read, and the policy directory `kanon serve --policies DIR` serves
//! ([`crate::policy_dir`]).
//!
//! Paths are files, directories (recursively, `*.yaml`, `*.yml`, `*.json`, in name order) or
//! `-` for standard input. [`load_policies_with`] compiles every policy document found and reports
//! every problem; [`load_directory`] reads a whole directory whatever is wrong in it.

use std::io::Read;
use std::path::{Path, PathBuf};

use kanon_engine::{AdmissionPolicies, PolicySet, compile_document, policy_kind_of};
use serde_json::Value;

/// A document and where it came from.
#[derive(Debug, Clone)]
pub struct Document {
    /// The file (or `-`) it was read from.
    pub source: String,
    /// 1-based position in that file.
    pub index: usize,
    /// The 1-based line the document starts at, when known (YAML).
    pub line: Option<usize>,
    /// The document.
    pub value: Value,
}

impl Document {
    /// `file`, or `file (document N)` past the first document of a file.
    pub fn origin(&self) -> String {
        if self.index > 1 {
            format!("{} (document {})", self.source, self.index)
        } else {
            self.source.clone()
        }
    }

    /// Where the document is, as editors and CI annotations read it: `file:line` when the
    /// line is known, else [`Self::origin`].
    pub fn place(&self) -> Place {
        Place {
            file: self.source.clone(),
            line: self.line,
        }
    }
}

/// A place in a file: what a warning or a failure points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The file (as given on the command line or in a suite, or `-`).
    pub file: String,
    /// The 1-based line, when known.
    pub line: Option<usize>,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}", self.file),
            None => f.write_str(&self.file),
        }
    }
}

/// A path that could not be read or parsed.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file or directory could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not valid YAML/JSON.
    #[error(transparent)]
    Parse(#[from] kanon_engine::DocumentError),
    /// The file (or standard input) is larger than kanon reads.
    #[error("{path}: larger than {} MiB, the most kanon reads from one file (split it into several files)", MAX_FILE_BYTES >> 20)]
    TooLarge {
        /// The path.
        path: String,
    },
    /// A directory held no YAML or JSON file.
    #[error("{0}: no .yaml, .yml or .json file found")]
    Empty(String),
}

fn is_document_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

fn is_hidden(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.'))
}

/// The document files under `dir`, recursively, in name order. With `skip_hidden`, entries
/// whose name starts with `.` are left out (a mounted ConfigMap holds every file twice more,
/// under `..data/` and `..<timestamp>/`).
pub(crate) fn collect_files(
    dir: &Path,
    skip_hidden: bool,
    out: &mut Vec<PathBuf>,
) -> Result<(), InputError> {
    let read_err = |source| InputError::Read {
        path: dir.display().to_string(),
        source,
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(read_err)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(read_err)?;
    entries.sort();
    for path in entries {
        if skip_hidden && is_hidden(&path) {
            continue;
        }
        if path.is_dir() {
            collect_files(&path, skip_hidden, out)?;
        } else if is_document_file(&path) {
            out.push(path);
        }
    }
    Ok(())
}

fn parse(text: &str, source: &str, json: bool) -> Result<Vec<Document>, InputError> {
    Ok(kanon_engine::parse_located_documents(text, source, json)?
        .into_iter()
        .enumerate()
        .map(|(i, located)| Document {
            source: source.to_string(),
            index: i + 1,
            line: located.line,
            value: located.value,
        })
        .collect())
}

/// Most bytes read from one policy file or from standard input: far more than any real set
/// of policies in one file, and a bound on what a wrong path (a log, a disk image) costs.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Reads at most [`MAX_FILE_BYTES`] of `reader` as text named `name`.
fn read_bounded(reader: impl Read, name: &str) -> Result<String, InputError> {
    let mut text = String::new();
    reader
        .take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|source| InputError::Read {
            path: name.to_string(),
            source,
        })?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(InputError::TooLarge {
            path: name.to_string(),
        });
    }
    Ok(text)
}

fn read_file(file: &Path) -> Result<Vec<Document>, InputError> {
    let name = file.display().to_string();
    let opened = std::fs::File::open(file).map_err(|source| InputError::Read {
        path: name.clone(),
        source,
    })?;
    // Refused before reading when its size is known to be too large.
    if opened.metadata().is_ok_and(|m| m.len() > MAX_FILE_BYTES) {
        return Err(InputError::TooLarge { path: name });
    }
    let text = read_bounded(opened, &name)?;
    let json = file.extension().and_then(|e| e.to_str()) == Some("json");
    parse(&text, &name, json)
}

/// Reads every document under `paths`, in the order given (directories in name order; `-`
/// is standard input). Stops at the first path that cannot be read or parsed; a directory
/// without any document file is an error.
pub fn read_documents(paths: &[PathBuf]) -> Result<Vec<Document>, InputError> {
    let mut docs = Vec::new();
    for path in paths {
        if path.as_os_str() == "-" {
            let text = read_bounded(std::io::stdin(), "-")?;
            let json = text.trim_start().starts_with(['{', '[']);
            docs.extend(parse(&text, "-", json)?);
            continue;
        }
        let files = if path.is_dir() {
            let mut files = Vec::new();
            collect_files(path, false, &mut files)?;
            if files.is_empty() {
                return Err(InputError::Empty(path.display().to_string()));
            }
            files
        } else {
            vec![path.clone()]
        };
        for file in files {
            docs.extend(read_file(&file)?);
        }
    }
    Ok(docs)
}

/// Compiles every document as a policy: kanon's kinds, and Kubernetes' admission policies with
/// their bindings (each binding one policy); PolicyExceptions come with the set, every one of
/// them (which namespaces may hold them is the caller's to decide). On failure: every problem, each naming the
/// document's origin (and, for a policy that does not compile, every error by field path).
pub fn compile_documents(docs: &[Document]) -> Result<PolicySet, Vec<String>> {
    compile_located(docs, None, Others::Refuse).map(|loaded| loaded.set)
}

/// What to do with a document that is not a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Others {
    /// It is a problem: the files are meant to hold policies only (`kanon serve --policies`).
    Refuse,
    /// Skip it, and count it in [`LoadedPolicies::skipped`]: a whole manifest (a `helm
    /// template` output) can be read for the policies in it. A document of a policy API group
    /// (`policy.kanon.dev`, `admissionregistration.k8s.io`) of a kind kanon does not read is
    /// still a problem: a misspelt kind is not skipped silently.
    Skip,
}

/// Policies read from files: the compiled set, where each policy was read from, and what was
/// skipped.
pub struct LoadedPolicies {
    /// The compiled policies and exceptions.
    pub set: PolicySet,
    /// Where each policy's document is.
    pub origins: Origins,
    /// The kinds of the documents skipped as not policies ([`Others::Skip`]), in the order
    /// met, one entry per document.
    pub skipped: Vec<String>,
}

impl LoadedPolicies {
    /// One line on what was skipped, naming how many documents and which kinds
    /// (`skipped 3 documents that are not policies: Deployment (2), Service`); `None` when
    /// nothing was.
    pub fn skipped_note(&self) -> Option<String> {
        if self.skipped.is_empty() {
            return None;
        }
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for kind in &self.skipped {
            match counts.iter_mut().find(|(k, _)| k == kind) {
                Some((_, n)) => *n += 1,
                None => counts.push((kind, 1)),
            }
        }
        let kinds: Vec<String> = counts
            .iter()
            .map(|(kind, n)| match n {
                1 => (*kind).to_owned(),
                n => format!("{kind} ({n})"),
            })
            .collect();
        let n = self.skipped.len();
        Some(format!(
            "skipped {n} document{} that {} not a policy: {}",
            if n == 1 { "" } else { "s" },
            if n == 1 { "is" } else { "are" },
            kinds.join(", ")
        ))
    }
}

/// Where each policy was read from, by kind as written, namespace and name.
#[derive(Debug, Default)]
pub struct Origins(Vec<(String, Option<String>, String, Place)>);

impl Origins {
    fn record(&mut self, doc: &Document) {
        let text = |pointer| doc.value.pointer(pointer).and_then(Value::as_str);
        if let (Some(kind), Some(name)) = (text("/kind"), text("/metadata/name")) {
            let namespace = text("/metadata/namespace").map(str::to_owned);
            self.0
                .push((kind.to_owned(), namespace, name.to_owned(), doc.place()));
        }
    }

    /// Where `policy` was read from: its document's place (for a binding of an admission
    /// policy, the policy's), when it came from a file.
    pub fn of(&self, policy: &kanon_engine::CompiledPolicy) -> Option<&Place> {
        let id = &policy.id;
        self.find(id.kind_name(), id.namespace.as_deref(), &id.name)
    }

    /// Where `exception` was read from.
    pub fn of_exception(&self, exception: &kanon_engine::CompiledException) -> Option<&Place> {
        self.find(
            "PolicyException",
            Some(&exception.namespace),
            &exception.name,
        )
    }

    /// The document of this kind and name, in this namespace when one of that name is (a
    /// cluster policy's document may carry a namespace it does not have).
    fn find(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<&Place> {
        let candidates = || {
            self.0
                .iter()
                .filter(move |(k, _, n, _)| k == kind && n == name)
        };
        candidates()
            .find(|(_, ns, _, _)| ns.as_deref() == namespace)
            .or_else(|| candidates().next())
            .map(|(_, _, _, place)| place)
    }
}

/// [`compile_documents`], checking kinds and paths (and VAPs' types) against `kinds`: the
/// built-in kinds and the custom ones of the CRDs among the context objects; `others` says
/// what a document that is not a policy is.
pub fn compile_located(
    docs: &[Document],
    kinds: Option<kanon_engine::Kinds>,
    others: Others,
) -> Result<LoadedPolicies, Vec<String>> {
    let mut compiled = Compiling {
        admission: kinds
            .clone()
            .map(AdmissionPolicies::with_kinds)
            .unwrap_or_default(),
        kinds,
        others,
        ..Compiling::default()
    };
    compiled.add(docs);
    compiled.finish()
}

/// Policies compiled so far, the admission policies waiting for their bindings, and every
/// problem met.
struct Compiling {
    policies: Vec<kanon_engine::CompiledPolicy>,
    exceptions: Vec<std::sync::Arc<kanon_engine::CompiledException>>,
    admission: AdmissionPolicies,
    problems: Vec<String>,
    /// The kinds policies are checked against; `None`: the built-in kinds.
    kinds: Option<kanon_engine::Kinds>,
    others: Others,
    origins: Origins,
    skipped: Vec<String>,
}

impl Default for Compiling {
    fn default() -> Self {
        Compiling {
            policies: Vec::new(),
            exceptions: Vec::new(),
            admission: AdmissionPolicies::default(),
            problems: Vec::new(),
            kinds: None,
            others: Others::Refuse,
            origins: Origins::default(),
            skipped: Vec::new(),
        }
    }
}

/// The API groups whose documents are policies kanon reads: a document of another kind in one
/// of them is a mistake, never skipped.
fn is_policy_group(api_version: &str) -> bool {
    let group_of = |api_version: &'static str| api_version.split_once('/').map(|(group, _)| group);
    let group = api_version.split_once('/').map(|(group, _)| group);
    group == group_of(kanon_api::API_VERSION) || group == Some("admissionregistration.k8s.io")
}

impl Compiling {
    fn add(&mut self, docs: &[Document]) {
        for doc in docs {
            if AdmissionPolicies::accepts(&doc.value) {
                self.origins.record(doc);
                self.admission.add_from(&doc.value, &doc.origin());
                continue;
            }
            if kanon_engine::is_exception(&doc.value) {
                self.origins.record(doc);
                match kanon_engine::compile_exception(&doc.value) {
                    Ok(exception) => self.exceptions.push(std::sync::Arc::new(exception)),
                    Err(invalid) => self.problems.push(format!("{}: {invalid}", doc.origin())),
                }
                continue;
            }
            if policy_kind_of(&doc.value).is_none() {
                let text = |key| {
                    doc.value
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                        .to_string()
                };
                if self.others == Others::Skip && !is_policy_group(&text("apiVersion")) {
                    self.skipped.push(text("kind"));
                    continue;
                }
                self.problems.push(format!(
                    "{}: {} {} is not a policy kanon reads (expected apiVersion {} and kind ClusterOverridePolicy, OverridePolicy, ClusterValidatePolicy or ValidatePolicy; or admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, and v1beta1 or v1 MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding; or a PolicyException)",
                    doc.origin(),
                    text("apiVersion"),
                    text("kind"),
                    kanon_api::API_VERSION
                ));
                continue;
            }
            let compiled = match &self.kinds {
                Some(kinds) => kanon_engine::compile_document_with(&doc.value, kinds),
                None => compile_document(&doc.value),
            };
            match compiled {
                Ok(policy) => {
                    self.origins.record(doc);
                    self.policies.push(policy);
                }
                Err(invalid) => self.problems.push(format!("{}: {invalid}", doc.origin())),
            }
        }
    }

    fn finish(mut self) -> Result<LoadedPolicies, Vec<String>> {
        match self.admission.compile() {
            Ok(bound) => self.policies.extend(bound),
            Err(problems) => self.problems.extend(problems),
        }
        if !self.problems.is_empty() {
            return Err(self.problems);
        }
        let set = PolicySet::build(self.policies).map_err(|e| vec![e.to_string()])?;
        Ok(LoadedPolicies {
            set: set.with_exceptions(self.exceptions),
            origins: self.origins,
            skipped: self.skipped,
        })
    }
}

/// Reads and compiles the policies under `paths` ([`read_documents`], then
/// [`compile_located`], checked against `kinds`): what `kanon apply`, `kanon test` and
/// `kanon render` evaluate. Documents that are not policies are skipped ([`Others::Skip`]).
pub fn load_policies_with(
    paths: &[PathBuf],
    kinds: Option<kanon_engine::Kinds>,
) -> Result<LoadedPolicies, Vec<String>> {
    let docs = read_documents(paths).map_err(|e| vec![e.to_string()])?;
    let loaded = compile_located(&docs, kinds, Others::Skip)?;
    // A resource file given where policies go must not pass as an empty set of policies.
    if loaded.set.is_empty()
        && loaded.set.exceptions().is_empty()
        && let Some(note) = loaded.skipped_note()
    {
        let paths: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(vec![format!(
            "{}: no policy found ({note})",
            paths.join(", ")
        )]);
    }
    Ok(loaded)
}

/// Reads and compiles every policy file under `dir` (recursively, `*.yaml`, `*.yml`,
/// `*.json` in name order, leaving out names that start with `.`). Unlike [`load_policies_with`]
/// it reads every file whatever is wrong with the others, to report every problem at once,
/// and an empty directory is a valid, empty set.
pub fn load_directory(dir: &Path) -> Result<PolicySet, Vec<String>> {
    let mut files = Vec::new();
    collect_files(dir, true, &mut files).map_err(|e| vec![e.to_string()])?;
    let mut compiled = Compiling::default();
    // File by file, so that only one file's documents are held beside the compiled policies
    // (10,000 policies as documents cost more than compiled).
    for file in files {
        match read_file(&file) {
            Ok(docs) => compiled.add(&docs),
            Err(e) => compiled.problems.push(e.to_string()),
        }
    }
    compiled.finish().map(|loaded| loaded.set)
}
