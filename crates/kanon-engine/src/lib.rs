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
//! Rules are written in several languages, a module each under `language` (templates,
//! programs, plaintext, CEL), which all read `references`, see the same `rule::Variables` and
//! fail with a [`RuleError`]; `decision` calls them through one seam, `language::apply` and
//! `language::verdict`.
//!
//! Every module is private; this page is the engine's whole face. Its hosts (the webhook, the
//! cluster crate, the CLI) use what is re-exported here and nothing else.

// Every module is private: what other crates use is re-exported below, by what it is for.
// The fuzz targets and the engine's own differential tests reach further, through the
// `internals` feature.
mod admission_plugins;
mod admission_policy;
mod decision;
mod diff;
mod document;
mod error;
mod evaluation;
mod exception;
mod finding;
mod helpers;
mod host;
mod index;
mod jsonpath;
mod kubernetes;
mod language;
mod lookup;
mod owners;
mod podspec;
mod pointer;
mod policy;
mod program;
mod projection;
mod publish;
mod quantity;
mod references;
mod request;
mod rule;
mod selector;
mod self_check;
mod set;
mod shape;
mod structured_merge;
mod targets;
mod trace;
mod typed;
mod workload;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals;

// Policies: documents, compiling, the set and its checks.
pub use document::{DocumentError, LocatedDocument, parse_documents, parse_located_documents};
pub use error::{FieldError, InvalidPolicy};
pub use kanon_schema::Kinds;
pub use policy::{
    Compiled, CompiledPolicy, PolicyId, PolicyObject, PolicyRules, compile, compile_with,
    kinds_warnings, policy_kind_of,
};
pub use projection::{Projection, Selected};
pub use self_check::PolicyCheck;
pub use set::{DuplicatePolicy, PolicySet};
pub use shape::{PathStep, ProblemKind, check as check_shape};
pub use trace::TARGET as TRACE_TARGET;

// ValidatingAdmissionPolicy and MutatingAdmissionPolicy: their manifests as kanon reads them.
pub use admission_policy::manifest::{
    BindingSpec, Manifest, MatchResources, MutatingPolicySpec, NamedRule, ValidatingPolicySpec,
};
pub use admission_policy::{
    AdmissionKind, AdmissionPolicies, VALIDATION_FAILURE_KEY, admission_kind_of,
};

// Exceptions.
pub use exception::{
    CompiledException, compile_exception, is_exception, parse_time as parse_exception_time,
    unix_seconds,
};

// One request: what it is, how it is evaluated, what comes of it.
pub use admission_plugins::{TOKEN_VOLUME, apply_admission_plugins};
pub use decision::{AppliedException, Decision, PolicyOutcome, PolicyResult, StatusReason};
pub use evaluation::{Evaluation, Pause};
pub use finding::Finding;
pub use owners::{DEFAULT_CONTROLLERS, OwnerTrust, made_from};
pub use request::{Deadline, Request, RequestError, parse_operation};
pub use rule::RuleError;
pub use targets::{Targets, WebhookKind};

// What the engine asks of its host: lookups, hand-written programs, where policies and
// admitted objects go.
pub use host::{ProgramCall, ProgramFuture, ProgramHost, ProgramInput, ProgramReply};
pub use lookup::{
    HttpAnswer, HttpCall, HttpMethod, HttpToken, Lookup, LookupError, LookupFuture,
    MissingIdentity, NoObjects, ObjectQuery, ObjectStore, block_on, ready as lookup_ready,
};
pub use program::{
    MAX_TEXT_ADDITIONS, Program, ProgramError, ProgramKind, ProgramLimits, TEXT_FILTERS,
    TEXT_FUNCTIONS, TEXT_READ_BYTES,
};
pub use publish::{AdmissionRecorder, PolicyPublisher};

// Kubernetes' own notions kanon's hosts share.
pub use pointer::{escape as escape_pointer_token, find as find_pointer};
pub use quantity::{Decimal, Quantity};
pub use references::{RefScope, parse_jsonpath};
pub use selector::{LabelMatcher, is_label_value, labels_of};
pub use workload::{WORKLOADS, Workload};

/// Defaults a built-in kind's object in place as kube-apiserver 1.35 defaults it when it
/// decodes it (and again after each MutatingAdmissionPolicy mutation): `imagePullPolicy`,
/// `restartPolicy`, a Deployment's `replicas` and strategy, a Service's ports, resource
/// quantities rounded up to a thousandth, ... `false`, leaving it alone, when the object's
/// `apiVersion`/`kind` is not a built-in kind kanon has Go facts for (custom kinds, whose
/// schema defaults kanon does not apply, and the apiextensions and apiregistration groups).
pub fn apply_builtin_defaults(object: &mut serde_json::Value) -> bool {
    let text = |key: &str| object.get(key).and_then(serde_json::Value::as_str);
    let (Some(api_version), Some(kind)) = (text("apiVersion"), text("kind")) else {
        return false;
    };
    let Some(typed) = typed::Typed::builtin(api_version, kind) else {
        return false;
    };
    typed.default_object(object, false);
    true
}

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
pub fn compile_document_reporting(document: &serde_json::Value) -> Result<Compiled, InvalidPolicy> {
    let (object, problems) = PolicyObject::decode_reporting(document)?;
    Ok(compile(&object).with_decode_problems(problems))
}

/// [`compile_document`], checking kinds and paths against `kinds` (built-in and custom; see
/// [`compile_with`]).
pub fn compile_document_with(
    document: &serde_json::Value,
    kinds: &Kinds,
) -> Result<CompiledPolicy, InvalidPolicy> {
    let compiled = compile_document_reporting_with(document, kinds)?;
    match compiled.policy.defect {
        Some(defect) => Err((*defect).clone()),
        None => Ok(compiled.policy),
    }
}

/// [`compile_document_reporting`], checking kinds and paths against `kinds` (built-in and
/// custom; see [`compile_with`]).
pub fn compile_document_reporting_with(
    document: &serde_json::Value,
    kinds: &Kinds,
) -> Result<Compiled, InvalidPolicy> {
    let (object, problems) = PolicyObject::decode_reporting(document)?;
    Ok(compile_with(&object, kinds).with_decode_problems(problems))
}
