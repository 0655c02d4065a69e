//! Background audit: the validate policies judge the objects that already exist, and what they
//! find goes into OpenReports reports, one per namespace.
//!
//! - [`scan`]: which kinds to read (from the policies' targets, through discovery), each read
//!   in pages at `--audit-qps`, each page's response within `--audit-page-mib` (fewer objects
//!   a page when they are large), each object judged by the engine as admission judges its
//!   CREATE ([`kanon_engine::PolicySet::audit_in`]).
//! - [`pace`]: LIST requests at `--audit-qps`, the audit's thread within `--audit-cpu`.
//! - [`book`]: the findings folded per namespace and kind, bounded; the reports made of them.
//! - [`reports`]: the reports written by server-side apply when they change.
//! - [`reach`]: only what admission reaches (the webhook configuration's selectors) is judged.
//! - [`lease`]: one replica audits at a time; the Lease carries the checkpoint another replica
//!   resumes from.
//! - [`admitted`]: what admission finds of objects admitted under policies that audit,
//!   recorded in the reports by any replica without waiting for the next audit.
//! - [`metrics`]: findings per policy, audit duration, objects read.
//!
//! An audit runs when this replica becomes the auditor (resuming an interrupted one), a few
//! seconds after the policies change, and every `interval`.

pub mod admitted;
pub mod book;
pub mod lease;
pub mod metrics;
pub mod pace;
pub mod prerequisites;
pub mod reach;
pub mod reports;
pub mod scan;

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kanon_api::{ResultStatus, Timestamp};
use kanon_engine::ProgramHost;
use kanon_engine::{Lookup, PolicySet};
use kube::Client;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use book::{Book, KindKey, ReportScope};
use lease::{AuditLease, Checkpoint, Held, Reading};
use metrics::{AuditMetrics, CycleOutcome};
use pace::CpuBudget;
use reach::Reach;
use reports::ReportWriter;
use scan::{AuditKind, Judge, Lister};

/// Why part of an audit failed; each names what it was doing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuditError {
    /// A kind the policies select could not be found through discovery.
    #[error("discovering {kind}: {message}")]
    Discovery {
        /// `apiVersion/kind`.
        kind: String,
        /// Why.
        message: String,
    },
    /// A page of a kind could not be read.
    #[error("listing {kind}: {message}")]
    List {
        /// `apiVersion/kind`.
        kind: String,
        /// Why.
        message: String,
    },
    /// The `continue` token of a kind expired (the apiserver compacted it away): the kind is
    /// read again from its start.
    #[error("listing {kind}: the continue token expired")]
    Expired {
        /// `apiVersion/kind`.
        kind: String,
    },
    /// A report could not be read, written or deleted.
    #[error("the report of {scope}: {message}")]
    Report {
        /// Which report.
        scope: String,
        /// Why.
        message: String,
    },
    /// The audit Lease could not be read or written.
    #[error("the audit Lease: {0}")]
    Lease(String),
    /// The webhook configuration whose selectors say what admission reaches could not be read.
    #[error("the ValidatingWebhookConfiguration {configuration}: {message}")]
    Reach {
        /// Its name.
        configuration: String,
        /// Why.
        message: String,
    },
}

/// How the audit runs.
#[derive(Debug, Clone)]
pub struct AuditConfig {
    /// Where the Lease is (kanon's namespace).
    pub namespace: String,
    /// The Lease's name.
    pub lease_name: String,
    /// Who this replica is (its Pod name).
    pub identity: String,
    /// How long the Lease holds past each renewal.
    pub lease_duration: Duration,
    /// How often an audit runs; `None`: only when the policies change.
    pub interval: Option<Duration>,
    /// The most LIST requests per second.
    pub qps: f64,
    /// The share of one CPU the audit's thread may use (1 or more: no limit).
    pub cpu: f64,
    /// Objects per LIST request, at most.
    pub page_size: u32,
    /// Bytes of response per LIST request, at most: fewer objects when they are large.
    pub page_bytes: usize,
    /// The most results a report holds.
    pub max_results: usize,
    /// Whether reports list the results of objects a controller made from a workload whose
    /// result stands for them (a Deployment's ReplicaSets and Pods) too; else the summary
    /// alone counts them.
    pub owned_results: bool,
    /// The cluster's name, the reports' `kanon.dev/cluster` label.
    pub cluster: Option<Arc<str>>,
    /// Whether reports list passes too (within `max_results`).
    pub passes: bool,
    /// How long after a policy change the audit starts (changes come in bursts).
    pub settle: Duration,
    /// How often an audit under way writes the reports of the namespaces it has read and
    /// saves its checkpoint: fewer writes of each report against less work read again after
    /// a restart.
    pub checkpoint_every: Duration,
    /// kanon's ValidatingWebhookConfiguration, whose selectors say which objects admission
    /// reaches (and so the audit judges); `None`: every object.
    pub webhook_configuration: Option<String>,
}

impl AuditConfig {
    /// What its reports list.
    pub fn listing(&self) -> book::Listing {
        book::Listing {
            max_results: self.max_results,
            owned: self.owned_results,
            passes: self.passes,
            cluster: self.cluster.clone(),
        }
    }
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            namespace: "kanon-system".to_string(),
            lease_name: "kanon-audit".to_string(),
            identity: "kanon".to_string(),
            lease_duration: Duration::from_secs(30),
            interval: Some(Duration::from_secs(3600)),
            qps: 10.0,
            cpu: 0.05,
            page_size: 500,
            page_bytes: 8 * 1024 * 1024,
            max_results: 1000,
            owned_results: false,
            cluster: None,
            passes: false,
            settle: Duration::from_secs(5),
            checkpoint_every: Duration::from_secs(30),
            webhook_configuration: None,
        }
    }
}

/// The background auditor of one replica.
pub struct Auditor {
    /// The apiserver.
    pub client: Client,
    /// How it runs.
    pub config: AuditConfig,
    /// The policy set in force (`None` until the first is published).
    pub policies: watch::Receiver<Option<Arc<PolicySet>>>,
    /// The lookups policies make (the same as admission's).
    pub lookup: Arc<dyn Lookup>,
    /// Where hand-written programs run (`None`: in the calling thread).
    pub programs: Option<Arc<dyn ProgramHost>>,
    /// Metrics.
    pub metrics: AuditMetrics,
    /// Where the objects found failing are told as Kubernetes Events, when they are.
    pub events: Option<crate::events::Events>,
}

/// The clock's time.
/// The trace span of one audit page of `kind`; its counts are recorded once judged.
fn page_span(kind: &str) -> tracing::Span {
    let span = tracing::info_span!(
        target: kanon_engine::TRACE_TARGET,
        "audit page",
        otel.name = tracing::field::Empty,
        kanon.audit.kind = kind,
        kanon.audit.objects = tracing::field::Empty,
        kanon.audit.judged = tracing::field::Empty,
        kanon.audit.failing = tracing::field::Empty,
        kanon.audit.error = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if !span.is_disabled() {
        span.record("otel.name", format!("audit page {kind}").as_str());
    }
    span
}

fn now() -> SystemTime {
    SystemTime::now()
}

fn lease_time() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::try_from(now())
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
}

fn unix_seconds() -> i64 {
    kanon_engine::unix_seconds(now())
}

/// Why a cycle stopped before its end.
enum Stop {
    /// Another replica holds the Lease now.
    Lost,
}

/// The auditor's state while it holds the Lease.
struct Leading {
    lease: AuditLease,
    book: Book,
    writer: ReportWriter,
    /// Where the audit under way stands.
    checkpoint: Checkpoint,
    /// Where it stood when the reports were last written: what the Lease says, since a
    /// replica resuming from it finds everything before in the reports.
    kept: Checkpoint,
    /// Reports the book has changed since they were last written.
    unwritten: BTreeSet<ReportScope>,
    /// When the reports were last written.
    kept_at: Instant,
    saved: Instant,
    /// What went wrong in the audit under way (kinds skipped, reports not written).
    errors: usize,
}

impl Auditor {
    /// Runs until the runtime stops.
    pub async fn run(mut self) {
        // Nothing to judge with until the first complete policy set.
        while self.policies.borrow_and_update().is_none() {
            if self.policies.changed().await.is_err() {
                return;
            }
        }
        self.wait_for_prerequisites().await;
        let lease = AuditLease::new(
            self.client.clone(),
            &self.config.namespace,
            &self.config.lease_name,
            &self.config.identity,
            self.config.lease_duration,
        );
        let retry = (self.config.lease_duration / 3).max(Duration::from_secs(1));
        loop {
            let checkpoint = match lease.hold(lease_time()).await {
                Ok(Held::Yes(checkpoint)) => checkpoint,
                Ok(Held::No { holder }) => {
                    tracing::debug!(%holder, "another replica audits");
                    tokio::time::sleep(retry).await;
                    continue;
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot take the audit Lease");
                    tokio::time::sleep(retry).await;
                    continue;
                }
            };
            tracing::info!(identity = %lease.identity(), "this replica audits");
            self.metrics.leading(true);
            let mut leading = self.lead(lease.clone(), checkpoint).await;
            self.lead_until_lost(&mut leading).await;
            self.metrics.leading(false);
            // The findings are the new auditor's to tell now.
            self.metrics.set_results(&Default::default());
            tracing::info!("another replica took the audit Lease");
        }
    }

    /// Waits until the cluster has what the audit needs ([`prerequisites`]): what is missing is
    /// said once (and again if it changes), and when it is there.
    async fn wait_for_prerequisites(&self) {
        let retry = (self.config.lease_duration / 3).max(Duration::from_secs(1));
        let mut said: Option<std::collections::BTreeSet<prerequisites::Missing>> = None;
        loop {
            match prerequisites::missing(&self.client, &self.config.namespace).await {
                Ok(missing) if missing.is_empty() => {
                    self.metrics.blocked(&[]);
                    if said.is_some_and(|said| !said.is_empty()) {
                        tracing::info!("the audit has what it needs and starts");
                    }
                    return;
                }
                Ok(missing) => {
                    let labels: Vec<&'static str> = missing.iter().map(|m| m.label()).collect();
                    self.metrics.blocked(&labels);
                    if said.as_ref() != Some(&missing) {
                        for each in &missing {
                            tracing::error!(missing = each.label(), "{}", each.explain());
                        }
                        said = Some(missing);
                    }
                }
                // Not known: the Lease and the writes say what fails.
                Err(error) => {
                    tracing::warn!(%error, "cannot check what the audit needs; it starts anyway");
                    return;
                }
            }
            tokio::time::sleep(retry).await;
        }
    }

    /// Becomes the auditor: what the reports written before say seeds the book.
    async fn lead(&self, lease: AuditLease, checkpoint: Checkpoint) -> Leading {
        let mut book = Book::listing(self.config.listing());
        let mut writer = ReportWriter::new(self.client.clone(), self.config.max_results);
        match writer.existing().await {
            Ok(existing) => {
                for report in &existing {
                    book.seed(&report.scope, &report.results, report.tally.as_deref());
                }
                writer.know(&book, &existing);
            }
            Err(error) => tracing::warn!(%error, "cannot read the reports written before"),
        }
        self.metrics.set_results(&book.tallies());
        Leading {
            lease,
            book,
            writer,
            kept: checkpoint.clone(),
            checkpoint,
            unwritten: BTreeSet::new(),
            kept_at: Instant::now(),
            saved: Instant::now(),
            errors: 0,
        }
    }

    async fn lead_until_lost(&mut self, leading: &mut Leading) {
        let renew_every = (self.config.lease_duration / 3).max(Duration::from_secs(1));
        let checkpoint = &leading.checkpoint;
        // An audit another replica began is resumed; one finished waits for its interval.
        let mut next = match (checkpoint.started, checkpoint.finished) {
            (0, _) | (_, None) => Some(Instant::now()),
            (_, Some(finished)) => self.config.interval.map(|interval| {
                let since =
                    Duration::from_secs(u64::try_from(unix_seconds() - finished).unwrap_or(0));
                Instant::now() + interval.saturating_sub(since)
            }),
        };
        let mut renew = tokio::time::interval(renew_every);
        loop {
            let wait_next = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = wait_next => {
                    let started = Instant::now();
                    match self.cycle(leading).await {
                        Ok(()) => {
                            let outcome = if leading.errors == 0 {
                                CycleOutcome::Finished
                            } else {
                                CycleOutcome::Failed
                            };
                            self.metrics.cycle(outcome, started.elapsed());
                            next = self.config.interval.map(|interval| Instant::now() + interval);
                        }
                        Err(Stop::Lost) => {
                            self.metrics.cycle(CycleOutcome::Handed, started.elapsed());
                            return;
                        }
                    }
                }
                changed = self.policies.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let settle = Instant::now() + self.config.settle;
                    next = Some(next.map_or(settle, |at| at.min(settle)));
                }
                _ = renew.tick() => {
                    if self.save(leading, true).await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    fn policy_set(&self) -> Option<Arc<PolicySet>> {
        self.policies.borrow().clone()
    }

    /// One audit: every kind the policies read, resumed from the checkpoint if one is under
    /// way.
    async fn cycle(&self, leading: &mut Leading) -> Result<(), Stop> {
        leading.errors = 0;
        let Some(set) = self.policy_set() else {
            return Ok(());
        };
        let reach = match &self.config.webhook_configuration {
            None => Reach::everything(),
            Some(name) => match Reach::of(&self.client, name).await {
                Ok(reach) => reach,
                Err(error) => {
                    // Judging what admission never sees would report what it lets in.
                    tracing::warn!(%error, "the audit waits: it cannot tell what admission reaches");
                    leading.errors += 1;
                    return Ok(());
                }
            },
        };
        let (kinds, problems) = scan::kinds(&self.client, &set).await;
        for problem in &problems {
            tracing::warn!(error = %problem, "the audit cannot read a kind");
        }
        leading.errors += problems.len();
        if leading.checkpoint.finished.is_some() || leading.checkpoint.started == 0 {
            leading.checkpoint = Checkpoint {
                started: unix_seconds(),
                ..Checkpoint::default()
            };
            self.keep(leading, true).await?;
            tracing::info!(kinds = kinds.len(), "audit started");
        } else {
            tracing::info!(
                kinds = kinds.len(),
                done = leading.checkpoint.done.len(),
                "audit resumed"
            );
        }
        // Reports changed since this replica wrote them (admission results, edits) are
        // written again from the book at the end.
        let stale = match leading.writer.refresh().await {
            Ok(stale) => stale,
            Err(error) => {
                tracing::warn!(%error, "cannot read the reports back");
                BTreeSet::new()
            }
        };
        let mut lister = Lister::new(
            self.client.clone(),
            self.config.page_size,
            self.config.page_bytes,
            self.config.qps,
            CpuBudget::new(self.config.cpu),
        );
        for kind in &kinds {
            let label = format!("{} {}", kind.key.api_version, kind.key.kind);
            if leading.checkpoint.done.contains(&label) {
                continue;
            }
            self.read_kind(leading, &mut lister, kind, &label, &reach)
                .await?;
            leading.checkpoint.done.push(label);
            leading.checkpoint.reading = None;
            self.keep(leading, false).await?;
        }
        // What no policy reads any more, and what deleted policies found, goes.
        let read: HashSet<&KindKey> = kinds.iter().map(|k| &k.key).collect();
        let latest = self.policy_set().unwrap_or(set);
        let policies: HashSet<&str> = latest.policies().iter().map(|p| &*p.label).collect();
        let mut changed = if problems.is_empty() {
            leading.book.retain_kinds(|kind| read.contains(kind))
        } else {
            BTreeSet::new()
        };
        changed.extend(leading.book.retain_policies(|p| policies.contains(p)));
        changed.extend(stale);
        // Reports the book has nothing for any more (a namespace emptied) go too.
        changed.extend(
            leading
                .writer
                .scopes()
                .into_iter()
                .filter(|scope| leading.book.report(scope).is_none()),
        );
        leading.unwritten.extend(changed);
        leading.checkpoint.finished = Some(unix_seconds());
        self.keep(leading, true).await?;
        tracing::info!(
            took_seconds = unix_seconds() - leading.checkpoint.started,
            "audit finished"
        );
        Ok(())
    }

    /// Reads one kind, page by page. The apiserver lists objects namespace by namespace, so
    /// each namespace the listing has passed is committed to the book and its report written;
    /// the checkpoint names the namespace being read and the page where it began, which is
    /// where a resumed audit reads again. A kind that cannot be read keeps what the book knew
    /// of it.
    async fn read_kind(
        &self,
        leading: &mut Leading,
        lister: &mut Lister,
        kind: &AuditKind,
        label: &str,
        reach: &Reach,
    ) -> Result<(), Stop> {
        let resumed = match leading.checkpoint.reading.take() {
            Some(Reading {
                kind: reading,
                token,
                namespace: Some(namespace),
            }) if reading == label && kind.namespaced => Some((token, namespace)),
            _ => None,
        };
        // The namespace being read, and the token of the page where it began.
        let (mut scan, mut token, mut current, mut skip_before) = match resumed {
            Some((token, namespace)) => (
                leading.book.resume(kind.key.clone(), &namespace),
                token,
                Some(namespace.clone()),
                Some(namespace),
            ),
            None => (leading.book.scan(kind.key.clone()), None, None, None),
        };
        let mut began_at = token.clone();
        let lookup = self.lookup.as_ref();
        let programs = self.programs.as_deref();
        loop {
            // A root span per page (the audit answers no one's request): its read and its
            // judging, counted. The policies' runs are not traced beneath it: a page of
            // hundreds of objects would be thousands of spans every pass.
            let page_span = page_span(&kind.key.to_string());
            let page = match lister
                .page(kind, token.as_deref())
                .instrument(page_span.clone())
                .await
            {
                Ok(page) => page,
                Err(AuditError::Expired { .. }) => {
                    tracing::info!(kind = %kind.key, "the continue token expired; reading the kind again");
                    scan = leading.book.scan(kind.key.clone());
                    (token, current, skip_before, began_at) = (None, None, None, None);
                    continue;
                }
                Err(error) => {
                    if !page_span.is_disabled() {
                        page_span.record("otel.status_code", "ERROR");
                        page_span.record("kanon.audit.error", error.to_string().as_str());
                    }
                    tracing::warn!(%error, "the audit skips a kind it cannot read");
                    leading.errors += 1;
                    return Ok(());
                }
            };
            let Some(set) = self.policy_set() else {
                return Ok(());
            };
            let page_token = token.take();
            let last = page
                .objects
                .last()
                .and_then(|o| o.pointer("/metadata/namespace"))
                .and_then(|n| n.as_str())
                .map(str::to_string);
            // A resumed listing reads again the end of the namespaces before the one it
            // resumes at: those are committed already. What admission does not reach is not
            // judged.
            let objects: Vec<_> = page
                .objects
                .into_iter()
                .filter(|o| {
                    skip_before.as_ref().is_none_or(|first| {
                        o.pointer("/metadata/namespace")
                            .and_then(|n| n.as_str())
                            .is_none_or(|n| n >= first.as_str())
                    })
                })
                .filter(|o| reach.reaches(o))
                .collect();
            let judge = Judge {
                lookup,
                programs,
                now: unix_seconds(),
                timeout: scan::OBJECT_TIMEOUT,
            };
            let found = Timestamp::from(now());
            let (mut read, mut failing) = (0u64, 0u64);
            let listed = objects.len();
            let book = &leading.book;
            let events = self.events.as_ref();
            judge
                .page_judged(&set, objects, |subject, lineage, findings| {
                    read += 1;
                    failing += findings
                        .iter()
                        .filter(|f| {
                            matches!(
                                f.result,
                                ResultStatus::Fail | ResultStatus::Warn | ResultStatus::Error
                            )
                        })
                        .count() as u64;
                    if let Some(events) = events {
                        events.audited(subject, lineage, &findings);
                    }
                    scan.add_judged(book, subject, lineage, &findings, found);
                })
                .await;
            if !page_span.is_disabled() {
                page_span.record("kanon.audit.objects", listed as u64);
                page_span.record("kanon.audit.judged", read);
                page_span.record("kanon.audit.failing", failing);
            }
            drop(page_span);
            self.metrics.scanned(read);
            if kind.namespaced && last.is_some() && last != current {
                began_at = page_token;
                current = last;
                skip_before = None;
                let before: ReportScope = current.clone();
                let changed = leading.book.commit(&mut scan, Some(&before));
                leading.unwritten.extend(changed);
            }
            let Some(next) = page.next else {
                break;
            };
            leading.checkpoint.reading = Some(Reading {
                kind: label.to_string(),
                token: began_at.clone(),
                namespace: current.clone(),
            });
            token = Some(next);
            self.keep(leading, false).await?;
        }
        let changed = leading.book.finish(scan);
        leading.unwritten.extend(changed);
        Ok(())
    }

    /// Keeps the audit's progress: when `now` or every `checkpoint_every`, writes the reports
    /// changed since the last time, then saves the checkpoint that names what they hold; in
    /// between, only renews the Lease (at most every two seconds).
    async fn keep(&self, leading: &mut Leading, now: bool) -> Result<(), Stop> {
        if now || leading.kept_at.elapsed() >= self.config.checkpoint_every {
            let scopes = std::mem::take(&mut leading.unwritten);
            self.write(leading, &scopes).await;
            leading.kept = leading.checkpoint.clone();
            leading.kept_at = Instant::now();
            return self.save(leading, true).await;
        }
        self.save(leading, false).await
    }

    async fn write(&self, leading: &mut Leading, scopes: &BTreeSet<ReportScope>) {
        if scopes.is_empty() {
            return;
        }
        let writes = leading.writer.write(&leading.book, scopes).await;
        for error in &writes.errors {
            tracing::warn!(%error, "cannot write an audit report");
        }
        leading.errors += writes.errors.len();
        self.metrics.writes(writes.written, writes.errors.len());
        self.metrics.cuts(writes.cut, writes.replaced);
        self.metrics.set_results(&leading.book.tallies());
    }

    /// Saves the kept checkpoint (and so renews the Lease): always when `now`, else at most
    /// every two seconds. [`Stop::Lost`] when another replica holds the Lease, or this one could
    /// not renew it for as long as it lasts.
    async fn save(&self, leading: &mut Leading, now: bool) -> Result<(), Stop> {
        let every = Duration::from_secs(2).min(self.config.lease_duration / 3);
        if !now && leading.saved.elapsed() < every {
            return Ok(());
        }
        match leading.lease.save(lease_time(), &leading.kept).await {
            Ok(true) => {
                leading.saved = Instant::now();
                Ok(())
            }
            Ok(false) => Err(Stop::Lost),
            // Unrenewed past its duration, the Lease may be another replica's already: this
            // one stops auditing rather than write beside it.
            Err(error) if leading.saved.elapsed() >= self.config.lease_duration => {
                tracing::warn!(%error, "the audit Lease lapsed: this replica stops auditing");
                Err(Stop::Lost)
            }
            Err(error) => {
                tracing::warn!(%error, "cannot renew the audit Lease");
                Ok(())
            }
        }
    }
}
