//! What a validate rule decides, whatever its language.

/// The verdict of a validate rule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the object passes.
    pub valid: bool,
    /// Why not, when it does not.
    pub reason: String,
    /// Further reasons, when several checks of the rule failed (a CEL rule's validations, each
    /// its own message as a ValidatingAdmissionPolicy gives them).
    pub more_reasons: Vec<String>,
    /// Warnings, whatever the verdict.
    pub warnings: Vec<String>,
    /// Audit annotations the rule writes (a CEL rule's `auditAnnotations`), key and value.
    pub audit_annotations: Vec<(String, String)>,
    /// The reason a denial carries (a CEL validation's `reason`); `None`: kanon's default,
    /// Forbidden.
    pub status: Option<kanon_api::ValidationReason>,
}

impl Verdict {
    /// The object passes, with nothing to say.
    pub fn pass() -> Self {
        Verdict {
            valid: true,
            ..Default::default()
        }
    }
}
