//! The suite file (`kanon-test.yaml`) as written; its format is described in [`super`].

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

use super::expect::Expect;
use super::resource::CaseResource;

/// The file name `kanon test` looks for in folders.
pub(super) const SUITE_FILE: &str = "kanon-test.yaml";

/// A suite as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Suite {
    pub(super) name: Option<String>,
    pub(super) policies: Vec<PathBuf>,
    pub(super) resources: Vec<PathBuf>,
    /// `objects` reads as `kanon serve --objects` and `kanon apply --objects` do.
    #[serde(default, alias = "objects")]
    pub(super) context: Vec<PathBuf>,
    #[serde(default)]
    pub(super) old_resources: Vec<PathBuf>,
    #[serde(default = "default_operation")]
    pub(super) operation: String,
    #[serde(default)]
    pub(super) exception_namespaces: Vec<String>,
    pub(super) now: Option<String>,
    /// `false`: plain resources are judged as written, without the apiserver's defaults.
    #[serde(default = "defaults_on")]
    pub(super) defaults: bool,
    /// `true`: a warning on any of the suite's policies fails the run (as `--strict` does).
    #[serde(default)]
    pub(super) strict: bool,
    pub(super) cases: Vec<serde_saphyr::Spanned<Case>>,
}

fn defaults_on() -> bool {
    true
}

fn default_operation() -> String {
    "CREATE".into()
}

/// One case as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Case {
    /// What the case is called in reports and by `--case`; default: its operation and
    /// resource (`CREATE Pod/shop/web-0`).
    pub(super) name: Option<String>,
    pub(super) resource: CaseResource,
    pub(super) operation: Option<String>,
    /// A path relative to the suite (one document), or the object itself.
    pub(super) old_resource: Option<Value>,
    pub(super) allowed: Option<bool>,
    pub(super) messages: Option<Vec<Expect>>,
    pub(super) messages_include: Option<Vec<Expect>>,
    pub(super) warnings: Option<Vec<Expect>>,
    pub(super) warnings_include: Option<Vec<Expect>>,
    pub(super) applied_policies: Option<Vec<String>>,
    pub(super) exceptions: Option<Vec<String>>,
    pub(super) audit_annotations: Option<serde_json::Map<String, Value>>,
    pub(super) patch: Option<Value>,
    pub(super) patched: Option<Value>,
}
