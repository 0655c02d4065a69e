//! The policy self-check: a policy object written through the validating webhook is compiled
//! as kanon will compile it, and a bad one is denied with every error by field path, so that
//! what the apiserver stores is what kanon runs (a PolicyException written where kanon does not
//! look is warned about).

use kanon_api::{API_VERSION, Operation, PolicyKind};
use serde_json::Value;

use crate::lookup::Lookup;
use crate::request::Request;
use crate::set::PolicySet;
use crate::{compile_document_reporting, compile_document_reporting_with, policy_kind_of};

/// What checking a policy object being written found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyCheck {
    /// The message listing every error (`Kind/name is invalid: field: message; ...`), when
    /// the policy does not compile.
    pub invalid: Option<String>,
    /// Its warnings (`Kind/name: field: message`), shown by kubectl.
    pub warnings: Vec<String>,
}

impl PolicySet {
    /// When `request` creates or updates one of kanon's policy objects: whether it compiles, and
    /// its warnings (with the custom kinds `lookup` knows, in a cluster).
    ///
    /// Not checked: writes to a subresource (`status`: kanon's own report on a bad policy that got
    /// in must get through) and updates of an object being deleted (removing the last finalizer
    /// of a bad policy must not leave it stuck).
    pub fn check_policy_object(
        &self,
        request: &Request,
        lookup: &dyn Lookup,
    ) -> Option<PolicyCheck> {
        // Only kanon's own kinds go further: every other request leaves here, having read
        // nothing of its object.
        if !matches!(request.operation, Operation::Create | Operation::Update)
            || request.api_version != API_VERSION
        {
            return None;
        }
        let sub_resource = request.info.get("subResource").and_then(Value::as_str);
        if sub_resource.is_some_and(|s| !s.is_empty()) {
            return None;
        }
        let object = request.object.as_ref()?;
        if object
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null())
        {
            return None;
        }
        if request.api_version == API_VERSION && request.kind == kanon_api::EXCEPTION_KIND {
            let document = request.with_identity(object, true);
            let compiled = crate::exception::compile_exception(&document);
            let mut warnings = Vec::new();
            // Written where kanon does not look, it would do nothing, silently: said now.
            if let (Ok(exception), Some(namespaces)) = (&compiled, self.exception_namespaces())
                && !namespaces.contains(&exception.namespace)
            {
                let honoured = if namespaces.is_empty() {
                    "kanon honours exceptions in no namespace (--exception-namespace)".to_string()
                } else {
                    format!("kanon honours exceptions only in {}", namespaces.join(", "))
                };
                warnings.push(format!(
                    "{}: not honoured: {honoured}; it exempts nothing here",
                    exception.label
                ));
            }
            // What its status would say: a policy or rule that does not exist, selectors that
            // meet nothing the policy judges.
            if let Ok(exception) = &compiled {
                for (_, message) in self.exception_problems(exception) {
                    warnings.push(format!("{}: {message}", exception.label));
                }
            }
            return Some(PolicyCheck {
                invalid: compiled.err().map(|invalid| invalid_message(&invalid)),
                warnings,
            });
        }
        // The type as the request resolves it (the object's, else the review's): only kanon's
        // own kinds go further, without a copy of anything else.
        let kind =
            PolicyKind::from_kind(&request.kind).filter(|_| request.api_version == API_VERSION)?;
        let document = request.with_identity(object, kind.is_namespaced());
        policy_kind_of(&document)?;
        let compiled = match lookup.kinds() {
            Some(kinds) => compile_document_reporting_with(&document, &kinds),
            None => compile_document_reporting(&document),
        };
        let compiled = match compiled {
            Ok(compiled) => compiled,
            Err(invalid) => {
                return Some(PolicyCheck {
                    invalid: Some(invalid_message(&invalid)),
                    warnings: Vec::new(),
                });
            }
        };
        let policy = &compiled.policy;
        Some(PolicyCheck {
            invalid: policy.defect.as_deref().map(invalid_message),
            warnings: policy
                .warnings
                .iter()
                .map(|w| format!("{}: {w}", policy.id))
                .collect(),
        })
    }
}

/// `Kind/name is invalid: field: message; ...`.
fn invalid_message(invalid: &crate::InvalidPolicy) -> String {
    let errors: Vec<String> = invalid.errors.iter().map(ToString::to_string).collect();
    format!("{} is invalid: {}", invalid.policy, errors.join("; "))
}
