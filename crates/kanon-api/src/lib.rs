//! The policy custom resources of kanon, group `policy.kanon.dev`, version `v1alpha1`.
//!
//! Four kinds: [`ClusterOverridePolicy`] and [`OverridePolicy`] mutate objects,
//! [`ClusterValidatePolicy`] and [`ValidatePolicy`] judge them. Field names follow kinitiras
//! wherever it has the field, so its policies port by changing `apiVersion` (and `cue` to
//! `program`). These types are the single source of the CRD manifests ([`crds`]).
//!
//! The types only describe shape; everything a schema cannot say (one value source set, a JSON
//! pointer that parses, a factor in (0,1)) is checked by the engine when it compiles a policy.
//!
//! [`report`] holds the OpenReports kinds (`openreports.io/v1alpha1` [`Report`] and
//! [`ClusterReport`]) kanon writes audit results into; their CRDs are [`report_crds`], apart
//! from kanon's own.

mod cel;
mod common;
mod crd;
mod exception;
mod overrides;
pub mod report;
mod validate;

pub use cel::*;
pub use common::*;
pub use crd::{crd_file_name, crds, crds_yaml, report_crds};
pub use exception::*;
pub use overrides::*;
pub use report::{
    CLUSTER_REPORT_KIND, ClusterReport, ParseReportEnumError, REPORT_API_VERSION, REPORT_GROUP,
    REPORT_KIND, REPORT_VERSION, Report, ReportConfiguration, ReportLimits, ReportResult,
    ReportSummary, ResultStatus, Severity, Timestamp,
};
pub use validate::*;

/// API group of every kanon policy kind.
pub const GROUP: &str = "policy.kanon.dev";
/// The served (and stored) version.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every kanon policy object.
pub const API_VERSION: &str = "policy.kanon.dev/v1alpha1";

/// The four policy kinds, in the order their policies are evaluated within one webhook
/// (cluster-wide before namespaced).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PolicyKind {
    /// Cluster-scoped mutation policy.
    ClusterOverridePolicy,
    /// Namespaced mutation policy; applies only in its own namespace.
    OverridePolicy,
    /// Cluster-scoped validation policy.
    ClusterValidatePolicy,
    /// Namespaced validation policy; applies only in its own namespace.
    ValidatePolicy,
}

impl PolicyKind {
    /// Every kind.
    pub const ALL: [PolicyKind; 4] = [
        PolicyKind::ClusterOverridePolicy,
        PolicyKind::OverridePolicy,
        PolicyKind::ClusterValidatePolicy,
        PolicyKind::ValidatePolicy,
    ];

    /// The `kind` string.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::ClusterOverridePolicy => "ClusterOverridePolicy",
            PolicyKind::OverridePolicy => "OverridePolicy",
            PolicyKind::ClusterValidatePolicy => "ClusterValidatePolicy",
            PolicyKind::ValidatePolicy => "ValidatePolicy",
        }
    }

    /// The resource name (plural) the apiserver serves the kind under, e.g.
    /// `clusteroverridepolicies`.
    pub fn plural(self) -> &'static str {
        match self {
            PolicyKind::ClusterOverridePolicy => "clusteroverridepolicies",
            PolicyKind::OverridePolicy => "overridepolicies",
            PolicyKind::ClusterValidatePolicy => "clustervalidatepolicies",
            PolicyKind::ValidatePolicy => "validatepolicies",
        }
    }

    /// Parses a `kind` string; `None` for anything that is not a kanon policy kind.
    pub fn from_kind(kind: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == kind)
    }

    /// Whether objects of this kind live in a namespace.
    pub fn is_namespaced(self) -> bool {
        matches!(
            self,
            PolicyKind::OverridePolicy | PolicyKind::ValidatePolicy
        )
    }

    /// Whether this kind mutates (override) rather than validates.
    pub fn is_override(self) -> bool {
        matches!(
            self,
            PolicyKind::ClusterOverridePolicy | PolicyKind::OverridePolicy
        )
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
