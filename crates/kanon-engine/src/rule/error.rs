//! Why a policy could not be evaluated on a request, whatever its rules' language: each variant
//! keeps what failed and where, so that a lookup that found nothing stays apart from one that
//! timed out all the way to the denial message, and [`RuleError::reason`] names the cause for
//! metrics and logs without reading the text.

use std::sync::Arc;

use crate::error::InvalidPolicy;
use crate::lookup::LookupError;

/// An error evaluating a policy on a request. Its text is what the denial (or, under
/// `failurePolicy: Ignore`, the warning) says after the policy's name.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RuleError {
    /// The review's deadline passed before the policy ran.
    #[error("the review's deadline passed before this policy ran")]
    DeadlinePassed,
    /// The policy did not compile; a request it meets fails under its failure policy.
    #[error("the policy is invalid: {}", defects(.0))]
    InvalidPolicy(Arc<InvalidPolicy>),
    /// A lookup failed (not synced, timed out, forbidden, ...): `field` is the reference (or
    /// `namespaceSelector`) that made it.
    #[error("{field}: {error}")]
    Lookup {
        /// Field path of what made the lookup.
        field: String,
        /// How it failed.
        error: LookupError,
    },
    /// An object a reference names does not exist.
    #[error("{field}: {what} was not found{note}")]
    NotFound {
        /// Field path of the reference.
        field: String,
        /// The object, as the message names it (`v1 ConfigMap team-a/defaults`).
        what: String,
        /// Said after "was not found" (empty, or a parenthesis on how it was looked up).
        note: &'static str,
    },
    /// The object's namespace, whose labels a namespace selector reads, does not exist.
    #[error("namespaceSelector: namespace `{namespace}` was not found, so its labels are unknown")]
    NamespaceNotFound {
        /// The namespace.
        namespace: String,
    },
    /// A reference could not be resolved for another cause: a placeholder that failed, a path
    /// that selects in error, a namespace it may not read, an HTTP answer that is not 2xx or
    /// not JSON.
    #[error("{field}: {message}")]
    Reference {
        /// Field path of the part of the reference that failed.
        field: String,
        /// What went wrong.
        message: String,
    },
    /// A rule's program failed, or its output is not what its kind renders.
    #[error("{field}: {message}")]
    Program {
        /// Field path of the rule (its template's `condition`, for a validate template).
        field: String,
        /// What went wrong.
        message: String,
    },
    /// An operation of a rule could not be applied to the object.
    #[error("{field}: {message}")]
    Patch {
        /// Field path of the rule or plaintext overrider.
        field: String,
        /// Which operation, and why it could not be applied.
        message: String,
    },
    /// A CEL expression could not be evaluated (its own error, its cost limit, the deadline),
    /// or what it gave cannot be used; the message is worded as kube-apiserver words it.
    #[error("{field}: {message}")]
    Cel {
        /// Field path of the expression.
        field: String,
        /// `expression '…' resulted in error: …`, or why its value cannot be used.
        message: String,
    },
    /// A MutatingAdmissionPolicy's JSON patch left a built-in object with fields its kind does
    /// not declare: kube-apiserver's strict decoding refuses it and fails the whole request,
    /// whatever the failure policy (`unknown`: the fields' paths, `spec.containers[0].foo`).
    #[error("{field}: strict decoding error: {}", unknown_fields(.unknown))]
    StrictDecoding {
        /// Field path of the mutation.
        field: String,
        /// The undeclared fields, in the object's order.
        unknown: Vec<String>,
    },
    /// A mutation wrote a value of the wrong type into a built-in object (a number as a label,
    /// an object as an image, a quantity that does not parse): kube-apiserver's decoding into
    /// the kind's Go type refuses it and fails the whole request, whatever the failure policy
    /// (`message`: the decoder's, `json: cannot unmarshal number into Go struct field
    /// ObjectMeta.metadata.labels of type string`).
    #[error("{field}: the patched object does not decode into its kind's Go type: {message}")]
    TypedDecoding {
        /// Field path of the mutation.
        field: String,
        /// The decoder's words.
        message: String,
    },
    /// kube-apiserver would give no answer to the request (its handler panics on the mutation,
    /// and the client sees the connection's stream reset): the request fails whatever the
    /// failure policy (`message`: why).
    #[error("{field}: {message}")]
    Unanswered {
        /// Field path of the mutation.
        field: String,
        /// What the apiserver would do, and why.
        message: String,
    },
    /// An admission policy's rules select the request's resource only at another version
    /// (`matchPolicy: Equivalent`), which kube-apiserver would convert the object to; kanon
    /// converts no object between versions.
    #[error(
        "the policy's rules match {resource} at {to}, not at {from} as requested (matchPolicy: Equivalent), and kanon does not convert objects between versions; name {from} in the rules, or set matchPolicy: Exact"
    )]
    Conversion {
        /// The request's `group/version` (`autoscaling/v2`).
        from: String,
        /// The version the rules name (`autoscaling/v1`).
        to: String,
        /// The resource (`horizontalpodautoscalers`).
        resource: String,
    },
    /// A rule reached a state compilation rules out (a defect of kanon).
    #[error("{field}: {message}")]
    Defect {
        /// Field path of the rule.
        field: String,
        /// What happened.
        message: String,
    },
}

impl RuleError {
    /// A short, stable name of the cause, for metrics labels and logs: `deadline`,
    /// `invalid_policy`, `not_found`, `program`, `cel`, `patch`, `strict_decoding`, `typed_decoding`, `unanswered`, `conversion`,
    /// `reference`, `defect`, or the lookup's own ([`LookupError::reason`]: `not_synced`, `timed_out`,
    /// `forbidden`, ...).
    pub fn reason(&self) -> &'static str {
        match self {
            RuleError::DeadlinePassed => "deadline",
            RuleError::InvalidPolicy(_) => "invalid_policy",
            RuleError::Lookup { error, .. } => error.reason(),
            RuleError::NotFound { .. } | RuleError::NamespaceNotFound { .. } => "not_found",
            RuleError::Reference { .. } => "reference",
            RuleError::Program { .. } => "program",
            RuleError::Patch { .. } => "patch",
            RuleError::StrictDecoding { .. } => "strict_decoding",
            RuleError::TypedDecoding { .. } => "typed_decoding",
            RuleError::Unanswered { .. } => "unanswered",
            RuleError::Conversion { .. } => "conversion",
            RuleError::Cel { .. } => "cel",
            RuleError::Defect { .. } => "defect",
        }
    }
}

/// `unknown field "a", unknown field "b"`, as the Go decoder lists them.
pub(crate) fn unknown_fields(paths: &[String]) -> String {
    let listed: Vec<String> = paths
        .iter()
        .map(|path| format!("unknown field {}", kanon_cel::go_quote(path)))
        .collect();
    listed.join(", ")
}

/// The errors of an invalid policy, on one line.
fn defects(policy: &InvalidPolicy) -> String {
    let errors: Vec<String> = policy.errors.iter().map(ToString::to_string).collect();
    errors.join("; ")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn lookups_keep_their_cause() {
        let timed_out = RuleError::Lookup {
            field: "spec.validateRules[0].template.condition.dataRef".into(),
            error: LookupError::TimedOut {
                what: "v1/ConfigMap a/b".into(),
                after: Duration::from_millis(20),
            },
        };
        assert_eq!(timed_out.reason(), "timed_out");
        assert_eq!(
            timed_out.to_string(),
            "spec.validateRules[0].template.condition.dataRef: looking up v1/ConfigMap a/b: timed out after 20ms"
        );
        let missing = RuleError::NotFound {
            field: "x.k8s".into(),
            what: "v1 ConfigMap a/b".into(),
            note: "",
        };
        assert_eq!(missing.reason(), "not_found");
        assert_eq!(missing.to_string(), "x.k8s: v1 ConfigMap a/b was not found");
    }
}
