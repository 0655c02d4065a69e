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
