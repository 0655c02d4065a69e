//! The seam between the sources of policies (a policy directory, the cluster's reflectors) and
//! the server that answers with them: a source builds each new [`PolicySet`] and hands it to a
//! [`PolicyPublisher`], which puts it in force (and owns readiness, metrics and logs of sets).
//! Neither side knows the other.

use crate::set::PolicySet;

/// Puts policy sets in force.
pub trait PolicyPublisher: Send + Sync {
    /// Puts `set` in force, whole, in place of the current one; `change` says briefly what
    /// changed (for the log), e.g. `ClusterOverridePolicy/web-labels updated`.
    fn publish(&self, set: PolicySet, change: &str);

    /// A new set could not be built (`problems`, each naming its origin): the current set, if
    /// any, stays in force.
    fn reject(&self, problems: &[String]);
}

/// Where objects admitted under policies that audit go: the background audit's reports record
/// what the policies find of them without waiting for the next audit.
pub trait AdmissionRecorder: Send + Sync {
    /// `object` (the object stored) was admitted by a CREATE or UPDATE (`operation`) that a
    /// validate policy with the `Audit` action judged ([`PolicySet::audited`]). Must not
    /// block: a recorder that cannot keep up drops objects (the next audit finds them).
    fn admitted(&self, object: serde_json::Value, operation: kanon_api::Operation);
}
