//! Arbitrary bytes as the body of a review sent to `/mutate` and to `/validate`, answered
//! in-process over the example policies and their context objects: the whole of what the
//! server does with a body, without the sockets. Must never panic; any answer is fine, as
//! long as it is an AdmissionReview (or, for a review over a limit, a v1 Status). The
//! budgeted JSON reader gives serde_json's value or refuses by a bound; the projected reader
//! gives it without what it skips, or refuses it too. Triage's glance identifies a review as
//! its whole reading does. Reading a review's object only as far as the policies read it
//! answers it as reading it whole does.

#![no_main]

use std::sync::LazyLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use kanon_engine::{Deadline, ObjectStore, PolicySet, Request, WebhookKind, block_on};
use kanon_webhook::admission::{self, Limits};
use kanon_webhook::budget::{self, JsonBudget, ParseError};
use libfuzzer_sys::fuzz_target;

static POLICIES: LazyLock<PolicySet> = LazyLock::new(kanon_fuzz::example_policy_set);
static LOOKUP: LazyLock<ObjectStore> = LazyLock::new(kanon_fuzz::context_lookup);

/// A deadline that passes after `checks` questions, so that some policies run and the rest
/// fail under their failure policy.
fn deadline_after(checks: usize) -> Deadline {
    let asked = AtomicUsize::new(0);
    Deadline::new(move || asked.fetch_add(1, Ordering::Relaxed) >= checks)
}

fn check_reply(reply: &admission::Reply) {
    let parsed: serde_json::Value =
        serde_json::from_slice(&reply.body).expect("every reply body is JSON");
    match reply.status {
        200 | 400 => assert_eq!(parsed["kind"], "AdmissionReview"),
        // Over a limit: a v1 Status, whose message kube-apiserver quotes.
        413 => {
            assert_eq!(parsed["kind"], "Status");
            assert_eq!(parsed["code"], 413);
        }
        other => panic!("unexpected status {other}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let policies = &*POLICIES;
    let lookup = &*LOOKUP;
    // The server's own path for both webhooks (the object read only as far as the policies
    // read it) answers as a reading of the whole review does.
    for webhook in [WebhookKind::Mutating, WebhookKind::Validating] {
        let limits = Limits::default();
        let reply = block_on(kanon_webhook::review::review(
            data, webhook, policies, lookup, &limits,
        ));
        check_reply(&reply);
        let whole = match admission::read(data, &limits) {
            Ok(request) => block_on(admission::answer(
                request,
                None,
                webhook,
                policies,
                &kanon_engine::Evaluation::new(lookup),
            )),
            Err(reply) => *reply,
        };
        assert_eq!(
            (reply.status, String::from_utf8_lossy(&reply.body)),
            (whole.status, String::from_utf8_lossy(&whole.body)),
            "{webhook:?}"
        );
    }
    // With a deadline that passes part way, and a small body limit.
    let checks = data.len() % 7;
    let reply = block_on(kanon_webhook::review::review_until(
        data,
        WebhookKind::Mutating,
        policies,
        lookup,
        &Limits::default(),
        Some(deadline_after(checks)),
    ));
    check_reply(&reply);
    let reply = block_on(kanon_webhook::review::review_until(
        data,
        WebhookKind::Validating,
        policies,
        lookup,
        &Limits::with_max_body(data.len().saturating_sub(1)),
        Some(deadline_after(checks)),
    ));
    check_reply(&reply);
    check_reply(&admission::allow_all(data));
    // The budgeted reader gives serde_json's value, or refuses by a bound, never differs.
    let tight = JsonBudget {
        memory_bytes: data.len() * 8,
        max_depth: 8,
    };
    for budget in [JsonBudget::default(), tight] {
        let ours = budget::parse(data, &budget);
        let theirs = serde_json::from_slice::<serde_json::Value>(data);
        match (ours, theirs) {
            (Ok(ours), Ok(theirs)) => assert_eq!(ours, theirs),
            (Err(ParseError::OverBudget(_)), _) => {}
            (Ok(_), Err(e)) => assert!(e.to_string().contains("recursion limit"), "{e}"),
            (Err(ParseError::Syntax(_)), Err(_)) => {}
            (Err(ParseError::Syntax(e)), Ok(_)) => panic!("only ours failed: {e}"),
        }
    }
    // The projected reader refuses what serde_json refuses, and otherwise gives its value
    // without what the projection leaves out: with kanon's own reads alone, and with what the
    // example policies read of the review's type.
    let mut projections = vec![kanon_engine::Projection::base()];
    if let Some(identity) = kanon_webhook::triage::glance(data) {
        for webhook in [WebhookKind::Mutating, WebhookKind::Validating] {
            if let Some(read) = policies.object_read(
                webhook,
                &identity.api_version,
                &identity.kind,
                identity.namespace.as_deref(),
            ) {
                projections.push((*read).clone());
            }
        }
    }
    for projection in &projections {
        let projected = kanon_webhook::projected::parse(data, projection);
        match (projected, serde_json::from_slice::<serde_json::Value>(data)) {
            (Ok(projected), Ok(whole)) => {
                assert_eq!(projected, kanon_webhook::projected::pruned(whole, projection));
            }
            (Err(_), Err(_)) => {}
            (projected, whole) => panic!("projected {projected:?}, whole {whole:?}"),
        }
    }
    // Triage: a glance at a body identifies it as reading it whole does, where both can.
    if let (Some(glanced), Some(whole)) = (
        kanon_webhook::triage::glance(data),
        kanon_webhook::triage::identify(data),
    ) {
        assert_eq!(glanced, whole);
    }
    // `decide` on a request read from a copy (the borrowed reader, besides the owning one).
    if let Ok(document) = serde_json::from_slice::<serde_json::Value>(data)
        && let Ok(request) = Request::from_admission_review(&document)
    {
        for webhook in [WebhookKind::Mutating, WebhookKind::Validating] {
            let mut request = request.clone();
            let decision = block_on(admission::decide(&mut request, webhook, policies, lookup));
            let reply = admission::Reply::decided(&request, webhook, decision);
            check_reply(&reply);
        }
    }
});
