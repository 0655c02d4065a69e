//! Admission results in the audit's reports: an object admitted under a validate policy whose
//! actions include `Audit` is judged again off the request path, as the audit judges it, and
//! its findings replace the ones its namespace's report had for it. Any replica records what
//! it admits; the auditor writes the reports whole again from its own reading at its next
//! audit.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kanon_api::{Operation, Timestamp};
use kanon_engine::ProgramHost;
use kanon_engine::{AdmissionRecorder, Finding, Lookup, ObjectQuery, PolicySet};
use kube::Client;
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use super::AuditError;
use super::book::{Book, Lineage, Listing, MadeBy, ReportScope, Subject};
use super::reports;
use super::scan::{self, Judge};

/// How many admitted objects may wait to be recorded; past it they are dropped (the next
/// audit finds them).
pub const QUEUE: usize = 1024;

/// The webhook's side: a bounded queue that never blocks a review.
pub struct AdmittedQueue {
    sender: mpsc::Sender<(Value, Operation)>,
}

impl AdmissionRecorder for AdmittedQueue {
    fn admitted(&self, object: Value, operation: Operation) {
        if self.sender.try_send((object, operation)).is_err() {
            tracing::debug!(
                "the admission recorder is behind; an admitted object waits for the next audit"
            );
        }
    }
}

/// Records admitted objects in the reports.
pub struct AdmittedReports {
    /// The apiserver.
    pub client: Client,
    /// The policy set in force.
    pub policies: watch::Receiver<Option<Arc<PolicySet>>>,
    /// The lookups policies make.
    pub lookup: Arc<dyn Lookup>,
    /// Where hand-written programs run.
    pub programs: Option<Arc<dyn ProgramHost>>,
    /// What reports list.
    pub listing: Listing,
    /// How long admitted objects are gathered before they are recorded together.
    pub batch: Duration,
}

impl AdmittedReports {
    /// The queue the webhook records into, and the receiver [`AdmittedReports::run`] reads.
    pub fn queue() -> (AdmittedQueue, mpsc::Receiver<(Value, Operation)>) {
        let (sender, receiver) = mpsc::channel(QUEUE);
        (AdmittedQueue { sender }, receiver)
    }

    /// Records what arrives on `receiver` until it closes.
    pub async fn run(self, mut receiver: mpsc::Receiver<(Value, Operation)>) {
        while let Some(first) = receiver.recv().await {
            // Objects admitted together are recorded together, the last version of each.
            let mut batch: BTreeMap<(ReportScope, String, String), (Value, bool)> = BTreeMap::new();
            let mut add = |(object, operation): (Value, Operation)| {
                let Some(subject) = Subject::of(&object) else {
                    return;
                };
                let key = (subject.namespace, subject.kind.to_string(), subject.name);
                // Whether the report may know it: the first write of the batch says.
                let existed = batch
                    .get(&key)
                    .map_or(operation == Operation::Update, |(_, existed)| *existed);
                batch.insert(key, (object, existed));
            };
            add(first);
            tokio::time::sleep(self.batch).await;
            while let Ok(next) = receiver.try_recv() {
                add(next);
            }
            let Some(set) = self.policies.borrow().clone() else {
                continue;
            };
            let judge = Judge {
                lookup: self.lookup.as_ref(),
                programs: self.programs.as_deref(),
                now: kanon_engine::unix_seconds(std::time::SystemTime::now()),
                timeout: super::scan::OBJECT_TIMEOUT,
            };
            let mut scopes: BTreeMap<ReportScope, Vec<Admitted>> = BTreeMap::new();
            for (_, (object, existed)) in batch {
                judge
                    .page_judged(&set, vec![object], |subject, lineage, findings| {
                        scopes
                            .entry(subject.namespace.clone())
                            .or_default()
                            .push(Admitted {
                                subject: subject.clone(),
                                lineage: lineage.clone(),
                                findings,
                                existed,
                            });
                    })
                    .await;
            }
            for (scope, mut admitted) in scopes {
                if let Err(error) = self.record(&set, &scope, &mut admitted).await {
                    tracing::warn!(%error, "cannot record admitted objects in their report");
                }
            }
        }
    }

    /// Reads the report of `scope`, replaces the findings of the admitted objects and writes
    /// it back if nobody wrote it meanwhile (else tries again, three times).
    async fn record(
        &self,
        set: &PolicySet,
        scope: &ReportScope,
        admitted: &mut [Admitted],
    ) -> Result<(), AuditError> {
        let now = Timestamp::from(std::time::SystemTime::now());
        let max_results = self.listing.max_results;
        for _ in 0..3 {
            let written = reports::read(&self.client, scope).await?;
            // A report that could not be written holds no findings to add to: the next audit
            // writes it whole.
            if written.as_ref().is_some_and(|w| w.replaced) {
                return Ok(());
            }
            let mut book = Book::listing(self.listing.clone());
            if let Some(written) = &written {
                book.seed(scope, &written.results, written.tally.as_deref());
            }
            for object in admitted.iter_mut() {
                self.trace_lineage(set, &book, scope, &mut object.lineage)
                    .await;
                book.admit_judged(
                    &object.subject,
                    &object.lineage,
                    &object.findings,
                    now,
                    object.existed,
                );
            }
            let Some(content) = book.report(scope) else {
                return Ok(());
            };
            let rendered = reports::render(scope, &content, max_results);
            match written.and_then(|w| w.resource_version) {
                None => {
                    reports::apply(&self.client, scope, &rendered).await?;
                    return Ok(());
                }
                Some(version) => {
                    if reports::replace(&self.client, scope, rendered, version).await? {
                        return Ok(());
                    }
                }
            }
        }
        Err(AuditError::Report {
            scope: reports::scope_name(scope),
            message: "written by someone else three times in a row; left to the next audit"
                .to_string(),
        })
    }

    /// When the report says nothing of the workload an admitted object was made from (its
    /// result is folded into its own workload's: a ReplicaSet's, whose Deployment's result
    /// stands), the object is compared with that workload's workload instead, as the lookups
    /// find it.
    async fn trace_lineage(
        &self,
        set: &PolicySet,
        book: &Book,
        scope: &ReportScope,
        lineage: &mut Lineage,
    ) {
        let Some(made) = &lineage.made_by else {
            return;
        };
        if self.listing.owned || book.knows(scope, made) {
            return;
        }
        let query = ObjectQuery {
            api_version: &made.kind.api_version,
            kind: &made.kind.kind,
            namespace: scope.as_deref(),
            policy: "",
            confined_to: None,
            label_selector: None,
        };
        let Ok(Some(owner)) = self.lookup.get(query, &made.name).await else {
            return;
        };
        if owner.pointer("/metadata/uid").and_then(Value::as_str) != Some(made.uid.as_str()) {
            return;
        }
        let Some(above) = scan::lineage(set, &owner).made_by else {
            return;
        };
        let policies: Arc<[Arc<str>]> = made
            .policies
            .iter()
            .filter(|p| above.policies.contains(p))
            .cloned()
            .collect();
        lineage.made_by = Some(MadeBy { policies, ..above });
    }
}

/// An admitted object, judged.
struct Admitted {
    subject: Subject,
    lineage: Lineage,
    findings: Vec<Finding>,
    existed: bool,
}
