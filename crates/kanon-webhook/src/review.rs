//! One review answered in process, as the server answers it but for the sockets: read as the
//! server reads it (only what the evaluation may read of the object, see [`crate::triage`] and
//! [`crate::projected`]), evaluated and encoded. For tests, fuzzing and callers without a
//! server.

use kanon_engine::{Deadline, Evaluation, Lookup, PolicySet, WebhookKind};

use crate::admission::{Limits, Reply, Reread, answer, read_projected};
use crate::triage::Identity;

/// Answers one AdmissionReview body sent to `webhook`: reads it within `limits` as the server
/// reads it ([`read_projected`]), evaluates the request against `policies` ([`answer`]) and
/// encodes the response. Never fails: a bad body gets a 400 (413 over a limit) reply saying
/// what is wrong.
pub async fn review(
    body: &[u8],
    webhook: WebhookKind,
    policies: &PolicySet,
    lookup: &dyn Lookup,
    limits: &Limits,
) -> Reply {
    review_until(body, webhook, policies, lookup, limits, None).await
}

/// [`review`] bounded by `deadline` (the request's `?timeout=`): policies that have not run
/// when it passes fail under their own failure policy.
pub async fn review_until(
    body: &[u8],
    webhook: WebhookKind,
    policies: &PolicySet,
    lookup: &dyn Lookup,
    limits: &Limits,
    deadline: Option<Deadline>,
) -> Reply {
    // Read as the server reads it: only what the evaluation may read of the object.
    let identity = crate::triage::glance(body);
    let projection = identity
        .as_ref()
        .and_then(|identity| identity.object_read(webhook, policies));
    let projected = projection
        .as_ref()
        .zip(identity.as_ref().map(Identity::subject));
    match read_projected(body, limits, projected) {
        Ok(request) => {
            let evaluation = Evaluation::new(lookup).with_deadline(deadline);
            answer(
                request,
                Some(Reread::new(body, limits)),
                webhook,
                policies,
                &evaluation,
            )
            .await
        }
        Err(reply) => *reply,
    }
}
