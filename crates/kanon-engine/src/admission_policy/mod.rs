//! Kubernetes' own admission policies, evaluated as kube-apiserver 1.35 evaluates them:
//! ValidatingAdmissionPolicy and MutatingAdmissionPolicy with their bindings, read from files
//! beside kanon's kinds (`kanon apply`, `kanon test`, `kanon serve --policies`).
//!
//! Each binding becomes one [`CompiledPolicy`](crate::CompiledPolicy) whose
//! [`PolicyId::binding`](crate::PolicyId::binding) is set: it runs in kanon's validating or
//! mutating pass, before kanon's own policies of that pass (as the apiserver runs its policy
//! plugins before its webhooks), sharing the policy's compiled expressions with its other
//! bindings. What differs from kanon's rules lives here: matching by resource rules
//! ([`matching`]), params ([`params`]), the apiserver's decisions and words ([`evaluate`]), and
//! the warnings kube-controller-manager writes in a policy's status ([`type_checking`], against
//! the kinds' types of [`decl_type`]).

mod compile;
mod decl_type;
mod evaluate;
pub mod manifest;
mod matching;
mod params;
pub(crate) mod patch;
mod type_checking;

pub use compile::{AdmissionBinding, AdmissionPolicies};
pub use evaluate::VALIDATION_FAILURE_KEY;
pub use manifest::{AdmissionKind, admission_kind_of};

pub(crate) use evaluate::{Mutated, Validated, mutate, validate};
