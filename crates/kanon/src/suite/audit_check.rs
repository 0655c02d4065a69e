//! Each CREATE case held to what the background audit would find of the stored object.

use kanon_api::Operation;
use kanon_engine::{PolicySet, Request};

use crate::apply::Verdict;
use crate::programs::OfflineEvaluation;

/// Whether the background audit would find of the object a CREATE case stores what admission
/// found of it, policy by policy: a policy that passed the object passes it, one that rejected
/// it fails (or warns about) it, one an exception exempted skips it, one that could not judge
/// it errs. Checked on every CREATE case of an object file (an AdmissionReview may carry a
/// user, which no existing object has) whose object admission did not change, or admitted
/// changed: the object as it would be stored.
pub(super) fn audit_disagreement(
    evaluation: &OfflineEvaluation,
    policies: &PolicySet,
    context: &dyn kanon_engine::Lookup,
    request: &Request,
    verdict: &Verdict,
) -> Option<String> {
    use kanon_api::ResultStatus;
    use kanon_engine::PolicyOutcome;
    let decision = &verdict.decision;
    if request.operation != Operation::Create || !request.info["userInfo"].as_object()?.is_empty() {
        return None;
    }
    let is_validate = |label: &str| {
        policies.policies().iter().any(|p| {
            &*p.label == label && matches!(p.rules, kanon_engine::PolicyRules::Validate { .. })
        })
    };
    // A mutation that denied ends the review before any validation.
    if decision.policy_results.iter().any(|r| {
        matches!(r.outcome, PolicyOutcome::Failed { ignored: false, .. }) && !is_validate(&r.policy)
    }) {
        return None;
    }
    let mutated = decision
        .policy_results
        .iter()
        .any(|r| matches!(r.outcome, PolicyOutcome::Mutated { patched: true }));
    let stored = match (&decision.patched, decision.allowed, mutated) {
        (Some(patched), true, _) => patched.clone(),
        (_, false, false) => request.object.clone()?,
        _ => return None,
    };
    let findings = match evaluation.audit(policies, stored, context) {
        Ok(findings) => findings,
        Err(e) => return Some(format!("the audit cannot judge the object: {e}")),
    };
    let mut problems = Vec::new();
    let judged: Vec<_> = decision
        .policy_results
        .iter()
        .filter(|r| !matches!(r.outcome, PolicyOutcome::Mutated { .. }))
        .filter(|r| is_validate(&r.policy))
        .collect();
    for result in &judged {
        let found: Vec<ResultStatus> = findings
            .iter()
            .filter(|f| f.policy == result.policy)
            .map(|f| f.result)
            .collect();
        let failing = found.iter().any(|r| {
            matches!(
                r,
                ResultStatus::Fail | ResultStatus::Warn | ResultStatus::Error
            )
        });
        // Rules an exception exempts are skipped beside the policy's pass or failure.
        let agrees = match result.outcome {
            PolicyOutcome::Passed => found.contains(&ResultStatus::Pass) && !failing,
            PolicyOutcome::Rejected => {
                found
                    .iter()
                    .any(|r| matches!(r, ResultStatus::Fail | ResultStatus::Warn))
                    && !found.contains(&ResultStatus::Pass)
            }
            PolicyOutcome::Exempted => {
                found.iter().all(|r| *r == ResultStatus::Skip) && !found.is_empty()
            }
            PolicyOutcome::Failed { .. } => found.contains(&ResultStatus::Error),
            PolicyOutcome::Mutated { .. } => true,
        };
        if !agrees {
            problems.push(format!(
                "{}: admission {:?}, audit {found:?}",
                result.policy, result.outcome
            ));
        }
    }
    for finding in &findings {
        if !judged.iter().any(|r| r.policy == finding.policy) {
            problems.push(format!(
                "{}: audit {}, but admission did not judge the object with it",
                finding.policy, finding.result
            ));
        }
    }
    (!problems.is_empty()).then(|| {
        format!(
            "the audit disagrees with admission: {}",
            problems.join("; ")
        )
    })
}
