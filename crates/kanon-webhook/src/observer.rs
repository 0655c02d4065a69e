//! Who hears of each admission decision besides kube-apiserver: the decision log
//! ([`crate::decisions`]) and, in a cluster, the Kubernetes Events recorder (kanon-cluster's,
//! glued in by the binary). Each observer is told on the review's path, after the decision and
//! before the answer is sent, so it must only hand what it needs to a bounded queue of its own
//! (counting what it drops), never wait.

use std::sync::Arc;

use kanon_engine::{Decision, Request, WebhookKind};

/// What an observer is told of one review.
#[derive(Debug, Clone, Copy)]
pub struct Decided<'a> {
    /// The request as the policies saw it (on the mutating webhook its `object` is gone:
    /// the patch was made from it).
    pub request: &'a Request,
    /// Which webhook decided.
    pub webhook: WebhookKind,
    /// What the policies decided.
    pub decision: &'a Decision,
    /// The review's trace id, when it is traced.
    pub trace_id: Option<&'a str>,
}

/// Hears of admission decisions. Called on the review's path: an implementation returns at
/// once (a `try_send` into a bounded queue, what does not fit counted as dropped).
pub trait DecisionObserver: Send + Sync {
    /// One review's decision.
    fn decided(&self, decided: &Decided<'_>);
}

/// The observers of a server, told in order.
#[derive(Clone, Default)]
pub struct DecisionObservers(Vec<Arc<dyn DecisionObserver>>);

impl DecisionObservers {
    /// No observer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `observer`, told after those added before.
    pub fn push(&mut self, observer: Arc<dyn DecisionObserver>) {
        self.0.push(observer);
    }

    /// Whether there is none (then nothing is computed for them, the trace id included).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Each observer, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn DecisionObserver>> {
        self.0.iter()
    }

    /// Tells every observer what `decision` found of `request` in `webhook`, when it found
    /// something to say (a denial, a warning, an audit annotation): what allows without a word
    /// is of no observer's concern, and costs the review nothing here.
    pub fn notify(&self, request: &Request, webhook: WebhookKind, decision: &Decision) {
        if self.0.is_empty()
            || (decision.messages.is_empty()
                && decision.warnings.is_empty()
                && decision.audit_annotations.is_empty())
        {
            return;
        }
        let trace_id = crate::trace::current_trace_id();
        let decided = Decided {
            request,
            webhook,
            decision,
            trace_id: trace_id.as_deref(),
        };
        for observer in &self.0 {
            observer.decided(&decided);
        }
    }
}

impl std::fmt::Debug for DecisionObservers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DecisionObservers({})", self.0.len())
    }
}

/// Observers are equal when they are the same ones (a server configuration compares by
/// identity).
impl PartialEq for DecisionObservers {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(&other.0)
                .all(|(a, b)| std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b)))
    }
}

impl Eq for DecisionObservers {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Seen(Mutex<Vec<(bool, usize)>>);

    impl DecisionObserver for Seen {
        fn decided(&self, decided: &Decided<'_>) {
            self.0
                .lock()
                .unwrap()
                .push((decided.decision.allowed, decided.decision.messages.len()));
        }
    }

    #[test]
    fn every_observer_is_told_in_order_and_compares_by_identity() {
        let first = Arc::new(Seen(Mutex::new(Vec::new())));
        let second = Arc::new(Seen(Mutex::new(Vec::new())));
        let mut observers = DecisionObservers::new();
        assert!(observers.is_empty());
        observers.push(first.clone());
        observers.push(second.clone());
        assert_eq!(observers.len(), 2);
        let request = Request::from_admission_review(&serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": "CREATE",
                        "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                        "namespace": "a", "name": "b",
                        "object": {"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": "b", "namespace": "a"}}}
        }))
        .unwrap();
        let decision = Decision {
            allowed: false,
            messages: vec!["ClusterValidatePolicy/p: no".into()],
            warnings: vec![],
            audit_annotations: Default::default(),
            status_reason: None,
            applied_policies: vec![],
            patch: json_patch::Patch(Vec::new()),
            patched: None,
            policy_results: vec![],
            exceptions: vec![],
            findings: None,
            admission_denied: false,
            beyond_reading: false,
        };
        observers.notify(&request, WebhookKind::Validating, &decision);
        assert_eq!(*first.0.lock().unwrap(), vec![(false, 1)]);
        assert_eq!(*second.0.lock().unwrap(), vec![(false, 1)]);
        // An allowance without a word is no one's concern.
        let silent = Decision {
            allowed: true,
            messages: vec![],
            ..decision.clone()
        };
        observers.notify(&request, WebhookKind::Validating, &silent);
        assert_eq!(first.0.lock().unwrap().len(), 1);

        assert_eq!(observers, observers.clone());
        let mut other = DecisionObservers::new();
        other.push(first);
        other.push(Arc::new(Seen(Mutex::new(Vec::new()))));
        assert_ne!(observers, other);
    }
}
