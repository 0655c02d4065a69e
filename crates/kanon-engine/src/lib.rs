//! kanon's policy engine: pure functions from policies and an admission request to a
//! decision. No network, no clock, no global state: cluster objects come through the
//! [`Lookup`] trait, so every behaviour is testable with plain data.
//!
//! The path of one request: [`PolicyObject::decode`] and [`compile`] turn policy documents
//! into [`CompiledPolicy`]s once per change; [`PolicySet::build`] orders and indexes them;
//! [`Request`] describes the admission request; [`PolicySet::mutate`],
//! [`PolicySet::validate`] and [`PolicySet::review`] produce a [`Decision`] (their `_in`
//! forms do so in an [`Evaluation`]: lookups, the host of hand-written programs, the deadline).
//!
//! Rules are written in several languages, a module each under [`language`] (templates,
//! programs, plaintext), which all read [`references`], see the same [`rule::Variables`] and
//! fail with a [`RuleError`]; [`decision`] calls them through one seam, `language::apply` and
//! `language::verdict`.

pub mod admission_policy;
pub mod decision;
pub mod diff;
pub mod document;
pub mod error;
pub mod evaluation;
pub mod exception;
pub mod finding;
pub mod helpers;
pub mod host;
pub mod index;
pub mod jsonpath;
mod kubernetes;
pub mod language;
pub mod lookup;
pub mod podspec;
pub mod pointer;
pub mod policy;
pub mod program;
pub mod publish;
pub mod quantity;
pub mod references;
pub mod request;
pub mod rule;
pub mod selector;
mod self_check;
pub mod set;
pub mod shape;
pub mod structured_merge;
pub mod targets;
pub mod workload;

// Where these modules were before the rule languages had a module each; other crates and the
// fuzz targets name them so.
pub use language::plaintext;
pub use language::template::native;
pub use references as refs;

pub use admission_policy::{AdmissionPolicies, admission_kind_of};
pub use decision::{AppliedException, Decision, PolicyOutcome, PolicyResult, StatusReason};
pub use document::{DocumentError, parse_documents};
pub use error::{FieldError, InvalidPolicy};
pub use evaluation::Evaluation;
pub use finding::Finding;
pub use kanon_schema::Kinds;
pub use lookup::{
    HttpAnswer, HttpCall, HttpToken, Lookup, LookupError, LookupFuture, NoObjects, ObjectQuery,
    ObjectStore, block_on,
};
pub use policy::{
    CompiledPolicy, PolicyId, PolicyObject, compile, compile_with, kinds_warnings, policy_kind_of,
};
pub use publish::{AdmissionRecorder, PolicyPublisher};
pub use request::{Deadline, Request, RequestError, parse_operation};
pub use rule::RuleError;
pub use self_check::PolicyCheck;
pub use set::{DuplicatePolicy, PolicySet};
pub use targets::{Targets, WebhookKind};

/// Decodes and compiles one policy document; the error lists every problem by field path.
pub fn compile_document(document: &serde_json::Value) -> Result<CompiledPolicy, InvalidPolicy> {
    let compiled = compile_document_reporting(document)?;
    match compiled.policy.defect {
        Some(defect) => Err((*defect).clone()),
        None => Ok(compiled.policy),
    }
}

/// Decodes and compiles one policy document, keeping a policy that has errors (unknown
/// fields, bad programs, ...) usable for matching, with every error in its `defect`: what a
/// cluster does with a bad policy that got past admission. Only a document that cannot be
/// read at all is an error. Kinds and paths are checked against the built-in kinds.
pub fn compile_document_reporting(
    document: &serde_json::Value,
) -> Result<policy::Compiled, InvalidPolicy> {
    let (object, problems) = PolicyObject::decode_reporting(document)?;
    Ok(compile(&object).with_decode_problems(problems))
}

/// [`compile_document_reporting`], checking kinds and paths against `kinds` (built-in and
/// custom; see [`compile_with`]).
pub fn compile_document_reporting_with(
    document: &serde_json::Value,
    kinds: &Kinds,
) -> Result<policy::Compiled, InvalidPolicy> {
    let (object, problems) = PolicyObject::decode_reporting(document)?;
    Ok(compile_with(&object, kinds).with_decode_problems(problems))
}
