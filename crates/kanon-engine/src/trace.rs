//! Trace spans of the engine's work (a policy's run), as `tracing` spans of the target
//! [`TARGET`]: the webhook's review span is their parent, and its exporter (kanon-webhook's
//! `trace`) sends them on. With no exporter no layer wants them, and each costs a check of a
//! cached flag; what a span records is computed only when it is wanted.

use tracing::Span;

use crate::policy::{CompiledPolicy, PolicyRules};

/// The `tracing` target of the spans exported as traces.
pub const TARGET: &str = "kanon::trace";

/// The span of one policy's run on a request: named after the policy, with the languages of
/// its rules; its outcome is recorded when known ([`record_outcome`]). Only within a span of
/// its caller's (a review's): a policy run with none (the audit's) starts no trace of its own.
pub(crate) fn policy_span(policy: &CompiledPolicy) -> Span {
    if Span::current().is_none() {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "policy",
        otel.name = &*policy.label,
        kanon.policy = &*policy.label,
        kanon.policy.languages = tracing::field::Empty,
        kanon.outcome = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if !span.is_disabled() {
        span.record("kanon.policy.languages", languages(policy).as_str());
    }
    span
}

/// Records what the policy did on its span (`passed`, `mutated`, ...); a failure to evaluate
/// (`failed: <reason>`) is the span's error.
pub(crate) fn record_outcome(span: &Span, outcome: &str, failed: bool) {
    if span.is_disabled() {
        return;
    }
    span.record("kanon.outcome", outcome);
    if failed {
        span.record("otel.status_code", "ERROR");
    }
}

/// The languages of a policy's rules, in a fixed order: `cel`, `template`, `program`,
/// `plaintext`; a Kubernetes admission policy's binding is `admission-policy`.
fn languages(policy: &CompiledPolicy) -> String {
    if policy.admission.is_some() {
        return "admission-policy".to_owned();
    }
    let (mut cel, mut template, mut program, mut plaintext) = (false, false, false, false);
    match &policy.rules {
        PolicyRules::Override(rules) => {
            for rule in rules {
                cel |= rule.cel.is_some();
                template |= rule.template.is_some();
                program |= rule.program.is_some();
                plaintext |= !rule.plaintext.is_empty();
            }
        }
        PolicyRules::Validate { rules, .. } => {
            for rule in rules {
                cel |= rule.cel.is_some();
                template |= rule.template.is_some();
                program |= rule.program.is_some();
            }
        }
    }
    let found: Vec<&str> = [
        (cel, "cel"),
        (template, "template"),
        (program, "program"),
        (plaintext, "plaintext"),
    ]
    .into_iter()
    .filter_map(|(has, name)| has.then_some(name))
    .collect();
    found.join(",")
}
