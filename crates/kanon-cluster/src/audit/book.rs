//! What the audit knows, namespace by namespace, and the reports it makes of it.
//!
//! The book keeps, per report scope (a namespace, or the cluster for cluster-scoped objects)
//! and per kind, how many findings each policy had of each result (the tally) and the findings
//! its report lists (everything but passes, unless [`Listing::passes`]), capped: memory grows
//! with the number of namespaces and kinds, never with the number of objects (but for a digest
//! per workload, at most [`MAX_MADE`]). A scan of one kind builds that
//! kind's ledgers afresh ([`KindScan`]) and replaces the old ones when it finishes, so objects
//! deleted since the last scan, and namespaces left empty, drop out. A report is rendered from
//! the ledgers: the summary counts every finding, the results are sorted (most urgent first,
//! then by policy, object and rule) and cut at the cap, and the report says when it was cut.
//!
//! What a controller made from a workload's pod template (a Deployment's ReplicaSets and their
//! Pods, a CronJob's Jobs) is judged by the policies that judge that template as the template
//! was. When such an object's findings under those policies are its controller's (the same
//! rules, results and messages), the controller's result stands for them: they are counted in
//! the summary, not listed again ([`Lineage`]; [`Listing::owned`] lists them). Each workload's
//! findings are remembered as a digest for the objects made from it, read after it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kanon_api::{ReportResult, ReportSummary, ResultStatus, Severity, Timestamp};
use kanon_engine::{Finding, Workload};
use serde::{Deserialize, Serialize};

mod tally;

/// The source kanon writes in its reports and results.
pub const SOURCE: &str = "kanon";
/// The annotation of a report that holds each kind's tally per policy, so that an audit
/// resumed by another replica keeps the counts of the kinds it does not scan again (in the
/// compact form [`Book::report`] writes: each policy named once, counts by index).
pub const TALLY_ANNOTATION: &str = "audit.kanon.dev/tally";
/// The annotation of a report some of whose findings are not listed because they are of
/// objects a controller made from a workload whose listed result stands for them: how many
/// (the summary counts them).
pub const OWNED_ANNOTATION: &str = "audit.kanon.dev/owned-results";
/// The most workloads whose findings the book remembers for the objects made from them: past
/// it, what is made from the others is listed (memory stays bounded; 16 bytes each).
pub const MAX_MADE: usize = 1 << 18;

/// What a report lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// The most results a report holds (its summary counts every finding).
    pub max_results: usize,
    /// Whether the findings of objects a controller made from a workload judged alike are
    /// listed too (`--report-owned-results`); else they are counted in the summary only.
    pub owned: bool,
    /// Whether passes are listed too (`--report-passes`), least urgent, within
    /// `max_results`; else they are counted in the summary only.
    pub passes: bool,
    /// The cluster's name (`--cluster-name`), the reports' `kanon.dev/cluster` label.
    pub cluster: Option<Arc<str>>,
}

impl Listing {
    /// Reports of at most `max_results` results, passes and owned results counted only.
    pub fn new(max_results: usize) -> Self {
        Listing {
            max_results,
            owned: false,
            passes: false,
            cluster: None,
        }
    }
}

/// Where an object stands among workloads and what their controllers make, as the policies
/// of a set judge it ([`crate::audit::scan::lineage`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lineage {
    /// When the object is a workload: the policies that judge its pod template. What its
    /// controller makes is compared with its findings under these.
    pub template: Arc<[Arc<str>]>,
    /// When its controller made it from the controller's pod template: that workload.
    pub made_by: Option<MadeBy>,
}

/// The workload an object's controller made it from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MadeBy {
    /// Its kind.
    pub kind: KindKey,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// The policies that judge the workload's pod template as they judge the object (as a Pod,
    /// or by its own pod template): its findings under these may be the workload's.
    pub policies: Arc<[Arc<str>]>,
}
/// The annotation of a report whose results were cut at `--report-max-results`: how many
/// results there were (the summary still counts all of them).
pub const CUT_ANNOTATION: &str = "audit.kanon.dev/results-cut-from";

/// The most bytes of a result's message a report holds: a message longer than this (one that
/// echoes an object's data, say) is cut, ending in [`cut_message`]'s marker, so that a few
/// objects cannot make a report too large to store nor the book large in memory.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// The scope of a report: a namespace's, or `None` for cluster-scoped objects.
pub type ReportScope = Option<String>;

/// A kind of object the audit reads.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KindKey {
    /// `apps/v1`.
    pub api_version: String,
    /// `Deployment`.
    pub kind: String,
}

impl KindKey {
    /// A kind.
    pub fn new(api_version: impl Into<String>, kind: impl Into<String>) -> Self {
        KindKey {
            api_version: api_version.into(),
            kind: kind.into(),
        }
    }

    fn label(&self) -> String {
        format!("{} {}", self.api_version, self.kind)
    }

    fn parse(label: &str) -> Option<Self> {
        let (api_version, kind) = label.split_once(' ')?;
        Some(KindKey::new(api_version, kind))
    }
}

impl std::fmt::Display for KindKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)
    }
}

/// An object the audit judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// Its kind.
    pub kind: KindKey,
    /// Its namespace (`None`: cluster-scoped).
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
}

impl Subject {
    /// The subject of an object as the apiserver returns it (`apiVersion` and `kind` set).
    pub fn of(object: &serde_json::Value) -> Option<Self> {
        let text = |pointer: &str| object.pointer(pointer).and_then(|v| v.as_str());
        Some(Subject {
            kind: KindKey::new(text("/apiVersion")?, text("/kind")?),
            namespace: text("/metadata/namespace")
                .filter(|n| !n.is_empty())
                .map(str::to_string),
            name: text("/metadata/name")?.to_string(),
            uid: text("/metadata/uid").unwrap_or_default().to_string(),
        })
    }
}

/// How many findings of each result, in [`ResultStatus::BY_URGENCY`] order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally(pub [u64; 5]);

impl Tally {
    fn add(&mut self, result: ResultStatus) {
        self.0[index(result)] += 1;
    }

    fn remove(&mut self, result: ResultStatus) {
        let count = &mut self.0[index(result)];
        *count = count.saturating_sub(1);
    }

    fn merge(&mut self, other: &Tally) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0) {
            *mine += theirs;
        }
    }

    /// The count of `result`.
    pub fn count(&self, result: ResultStatus) -> u64 {
        self.0[index(result)]
    }

    /// The findings a report lists: those that need attention, and passes when `passes`.
    fn listed(&self, passes: bool) -> u64 {
        let all: u64 = self.0.iter().sum();
        if passes {
            all
        } else {
            all - self.count(ResultStatus::Pass)
        }
    }
}

fn index(result: ResultStatus) -> usize {
    result.urgency()
}

/// One finding that needs attention, about one object. Ordered by what reports sort by; the
/// timestamp and the details that follow from the policy are not part of the order.
#[derive(Debug, Clone)]
struct Entry {
    result: ResultStatus,
    policy: Arc<str>,
    kind: KindKey,
    name: String,
    rule: String,
    message: String,
    uid: String,
    severity: Option<Arc<str>>,
    category: Option<Arc<str>>,
    found: Timestamp,
}

impl Entry {
    fn key(&self) -> (usize, &str, &KindKey, &str, &str, &str) {
        (
            self.result.urgency(),
            &self.policy,
            &self.kind,
            &self.name,
            &self.rule,
            &self.message,
        )
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// One kind's findings in one report scope.
#[derive(Debug, Clone, Default)]
struct Ledger {
    tallies: BTreeMap<Arc<str>, Tally>,
    /// Of those, the findings of objects made from a workload whose result stands for them:
    /// counted, not listed.
    folded: BTreeMap<Arc<str>, Tally>,
    /// The first `cap` findings listed (those that need attention, and passes when listed),
    /// in report order.
    entries: BTreeSet<Entry>,
    /// Of workloads: the digest of each one's findings under the policies that judge its pod
    /// template, by its uid's hash ([`digest`]). Not part of the report.
    made: HashMap<u64, u64>,
}

impl Ledger {
    /// Whether the report made of `self` is the one made of `other`.
    fn same_report(&self, other: &Ledger) -> bool {
        self.tallies == other.tallies
            && self.folded == other.folded
            && self.entries == other.entries
    }

    /// How many findings a report lists of this ledger, before the cap: what it counts, less
    /// what is folded into the results of workloads.
    fn listed(&self, passes: bool) -> u64 {
        let counted: u64 = self.tallies.values().map(|t| t.listed(passes)).sum();
        counted.saturating_sub(self.owned(passes))
    }

    /// How many findings it would list that are folded.
    fn owned(&self, passes: bool) -> u64 {
        self.folded.values().map(|t| t.listed(passes)).sum()
    }

    fn add(&mut self, entry: Entry, cap: usize) {
        self.entries.insert(entry);
        if self.entries.len() > cap {
            self.entries.pop_last();
        }
    }

    fn tally(&self) -> Tally {
        let mut total = Tally::default();
        for tally in self.tallies.values() {
            total.merge(tally);
        }
        total
    }
}

/// The findings of one scan of one kind, building up as its pages are read.
#[derive(Debug)]
pub struct KindScan {
    kind: KindKey,
    listing: Listing,
    ledgers: BTreeMap<ReportScope, Ledger>,
    objects: u64,
    /// The scopes before this one are committed (or were, before a resumed scan began);
    /// `None`: none yet.
    from: Option<ReportScope>,
    /// How many more workloads' digests the book has room for ([`MAX_MADE`]).
    made_room: usize,
}

impl KindScan {
    /// Adds what the policies found of `subject` at `now`, as if no controller had made it.
    pub fn add(&mut self, subject: &Subject, findings: &[Finding], now: Timestamp) {
        self.record(None, subject, &Lineage::default(), findings, now);
    }

    /// Adds what the policies found of `subject` at `now`, placed among workloads by
    /// `lineage`: when a controller made it from a workload `book` has read (its kind is read
    /// before), and its findings under the policies that judge the workload's template are the
    /// workload's, they are counted and not listed (unless the book lists owned results).
    ///
    /// Returns the policies whose findings were counted and not listed, if any.
    pub fn add_judged<'l>(
        &mut self,
        book: &Book,
        subject: &Subject,
        lineage: &'l Lineage,
        findings: &[Finding],
        now: Timestamp,
    ) -> Option<&'l [Arc<str>]> {
        self.record(Some(book), subject, lineage, findings, now)
    }

    fn record<'l>(
        &mut self,
        book: Option<&Book>,
        subject: &Subject,
        lineage: &'l Lineage,
        findings: &[Finding],
        now: Timestamp,
    ) -> Option<&'l [Arc<str>]> {
        self.objects += 1;
        // An object no policy selects counts for no report: a namespace where no policy
        // selects anything gets none (not one full of zeros).
        if findings.is_empty() {
            return None;
        }
        let folded = book.and_then(|book| book.folded(subject, lineage, findings));
        let (cap, passes) = (self.listing.max_results, self.listing.passes);
        let ledger = self.ledgers.entry(subject.namespace.clone()).or_default();
        for finding in findings {
            ledger
                .tallies
                .entry(finding.policy.clone())
                .or_default()
                .add(finding.result);
            if folded.is_some_and(|policies| policies.contains(&finding.policy)) {
                ledger
                    .folded
                    .entry(finding.policy.clone())
                    .or_default()
                    .add(finding.result);
                continue;
            }
            if finding.result == ResultStatus::Pass && !passes {
                continue;
            }
            ledger.add(entry_of_finding(subject, finding, now), cap);
        }
        if self.made_room > 0
            && let Some(digest) = findings_digest(&subject.kind, findings, &lineage.template)
            && ledger.made.insert(uid_hash(&subject.uid), digest).is_none()
        {
            self.made_room -= 1;
        }
        folded
    }

    /// The objects added so far.
    pub fn objects(&self) -> u64 {
        self.objects
    }

    /// The kind scanned.
    pub fn kind(&self) -> &KindKey {
        &self.kind
    }
}

/// What the audit knows (see the module documentation).
#[derive(Debug, Clone)]
pub struct Book {
    listing: Listing,
    scopes: BTreeMap<ReportScope, BTreeMap<KindKey, Ledger>>,
}

impl Default for Book {
    fn default() -> Self {
        Book::new(0)
    }
}

/// A report's content, rendered from the book.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportContent {
    /// Every finding counted.
    pub summary: ReportSummary,
    /// The findings listed (that need attention, and passes when listed), sorted, at most the
    /// cap.
    pub results: Vec<ReportResult>,
    /// How many findings were to be listed when more than the cap (the results were cut).
    pub cut_from: Option<u64>,
    /// Each kind's tally per policy, as [`TALLY_ANNOTATION`] holds it.
    pub tally: String,
    /// Whether passes are listed.
    pub passes: bool,
    /// How many findings that would be listed are not, being of objects made from a workload
    /// whose result stands for them ([`OWNED_ANNOTATION`]).
    pub owned: u64,
    /// The cluster's name, labelled on the report.
    pub cluster: Option<Arc<str>>,
}

impl Book {
    /// An empty book whose reports hold at most `max_results` results each, passes and the
    /// results of what controllers make from workloads counted, not listed.
    pub fn new(max_results: usize) -> Self {
        Book::listing(Listing::new(max_results))
    }

    /// An empty book whose reports list as `listing` says.
    pub fn listing(listing: Listing) -> Self {
        Book {
            listing,
            scopes: BTreeMap::new(),
        }
    }

    /// Starts a scan of `kind`.
    pub fn scan(&self, kind: KindKey) -> KindScan {
        let others: usize = self
            .scopes
            .values()
            .flat_map(|kinds| kinds.iter())
            .filter(|(other, _)| **other != kind)
            .map(|(_, ledger)| ledger.made.len())
            .sum();
        KindScan {
            kind,
            listing: self.listing.clone(),
            ledgers: BTreeMap::new(),
            objects: 0,
            from: None,
            made_room: MAX_MADE.saturating_sub(others),
        }
    }

    /// A scan of `kind` resumed at namespace `from`: the namespaces before it were read to
    /// their end and committed by the scan that was interrupted, and are left as they are.
    pub fn resume(&self, kind: KindKey, from: &str) -> KindScan {
        let mut scan = self.scan(kind);
        scan.from = Some(Some(from.to_string()));
        scan
    }

    /// Forgets the kinds `keep` does not keep (no policy reads them any more). Returns the
    /// scopes that changed.
    pub fn retain_kinds(&mut self, keep: impl Fn(&KindKey) -> bool) -> BTreeSet<ReportScope> {
        let mut changed = BTreeSet::new();
        self.scopes.retain(|scope, kinds| {
            let before = kinds.len();
            kinds.retain(|kind, _| keep(kind));
            if kinds.len() != before {
                changed.insert(scope.clone());
            }
            !kinds.is_empty()
        });
        changed
    }

    /// Puts a finished scan in place of what the book knew of its kind (from the scope it
    /// resumed at, if it did): scopes where the kind has no object any more lose it. A finding
    /// already known keeps the time it was first found. Returns the scopes whose ledgers
    /// changed.
    pub fn finish(&mut self, mut scan: KindScan) -> BTreeSet<ReportScope> {
        self.commit(&mut scan, None)
    }

    /// Commits the scopes of `scan` before `before` (all that remain when `None`): the
    /// apiserver lists objects by namespace, so once a page begins in a later namespace the
    /// earlier ones are read to their end. Returns the scopes whose ledgers changed.
    pub fn commit(
        &mut self,
        scan: &mut KindScan,
        before: Option<&ReportScope>,
    ) -> BTreeSet<ReportScope> {
        let from = scan.from.clone();
        let in_range = |scope: &ReportScope| {
            from.as_ref().is_none_or(|from| scope >= from) && before.is_none_or(|b| scope < b)
        };
        let kind = scan.kind.clone();
        let mut changed = BTreeSet::new();
        let gone: Vec<ReportScope> = self
            .scopes
            .iter()
            .filter(|(scope, kinds)| {
                in_range(scope) && kinds.contains_key(&kind) && !scan.ledgers.contains_key(*scope)
            })
            .map(|(scope, _)| scope.clone())
            .collect();
        for scope in gone {
            if let Some(kinds) = self.scopes.get_mut(&scope) {
                kinds.remove(&kind);
                if kinds.is_empty() {
                    self.scopes.remove(&scope);
                }
                changed.insert(scope);
            }
        }
        let done: Vec<ReportScope> = scan
            .ledgers
            .keys()
            .filter(|scope| in_range(scope))
            .cloned()
            .collect();
        for scope in done {
            let Some(mut ledger) = scan.ledgers.remove(&scope) else {
                continue;
            };
            let kinds = self.scopes.entry(scope.clone()).or_default();
            if let Some(old) = kinds.get_mut(&kind) {
                ledger.entries = ledger
                    .entries
                    .into_iter()
                    .map(|mut entry| {
                        if let Some(known) = old.entries.get(&entry) {
                            entry.found = known.found;
                        }
                        entry
                    })
                    .collect();
                if old.same_report(&ledger) {
                    // What the workloads found may differ where the report does not.
                    old.made = ledger.made;
                    continue;
                }
            }
            kinds.insert(kind.clone(), ledger);
            trim(kinds, self.listing.max_results);
            changed.insert(scope);
        }
        if let Some(before) = before {
            scan.from = Some(before.clone());
        }
        changed
    }

    /// Records what admission found of one object (created, or updated when `existed`): its
    /// earlier findings under the same policies are replaced, and the counts moved with them
    /// (an object the book had no finding for under a policy counted as a pass). Exact when
    /// the book knew every finding of the object, which a report cut at its cap may not: the
    /// next audit makes it exact.
    pub fn admit(
        &mut self,
        subject: &Subject,
        findings: &[Finding],
        now: Timestamp,
        existed: bool,
    ) {
        self.admit_judged(subject, &Lineage::default(), findings, now, existed);
    }

    /// [`Book::admit`], placed among workloads by `lineage` as [`KindScan::add_judged`] places
    /// what the audit reads: findings that are the result of the workload the object was made
    /// from are counted, not listed. An object the book had no listed finding for under a
    /// policy whose findings are folded so now is taken to have been folded alike before.
    pub fn admit_judged(
        &mut self,
        subject: &Subject,
        lineage: &Lineage,
        findings: &[Finding],
        now: Timestamp,
        existed: bool,
    ) {
        let listing = self.listing.clone();
        let folded: Option<Arc<[Arc<str>]>> = self
            .folded(subject, lineage, findings)
            .map(|policies| policies.into());
        let folds = |policy: &Arc<str>| folded.as_ref().is_some_and(|f| f.contains(policy));
        let ledger = self
            .scopes
            .entry(subject.namespace.clone())
            .or_default()
            .entry(subject.kind.clone())
            .or_default();
        let policies: BTreeSet<Arc<str>> = findings.iter().map(|f| f.policy.clone()).collect();
        let mut before = Vec::new();
        let mut unchanged = BTreeSet::new();
        for policy in &policies {
            let earlier: Vec<Entry> = ledger
                .entries
                .iter()
                .filter(|e| e.name == subject.name && e.policy == *policy)
                .cloned()
                .collect();
            if earlier.is_empty() && existed && folds(policy) {
                unchanged.insert(policy.clone());
                continue;
            }
            let tally = ledger.tallies.entry(policy.clone()).or_default();
            if earlier.is_empty() && existed {
                tally.remove(ResultStatus::Pass);
            }
            for entry in earlier {
                tally.remove(entry.result);
                ledger.entries.remove(&entry);
                before.push(entry);
            }
        }
        for finding in findings {
            if unchanged.contains(&finding.policy) {
                continue;
            }
            ledger
                .tallies
                .entry(finding.policy.clone())
                .or_default()
                .add(finding.result);
            if folds(&finding.policy) {
                ledger
                    .folded
                    .entry(finding.policy.clone())
                    .or_default()
                    .add(finding.result);
                continue;
            }
            if finding.result == ResultStatus::Pass && !listing.passes {
                continue;
            }
            let mut entry = entry_of_finding(subject, finding, now);
            if let Some(known) = before.iter().find(|b| **b == entry) {
                entry.found = known.found;
            }
            ledger.add(entry, listing.max_results);
        }
        let uid = uid_hash(&subject.uid);
        match findings_digest(&subject.kind, findings, &lineage.template) {
            Some(digest) => ledger.made.insert(uid, digest),
            None => ledger.made.remove(&uid),
        };
    }

    /// The policies whose findings of `subject` are folded into the result of the workload it
    /// was made from (`lineage`): those that judge the workload's template, when what they
    /// found of it is what they found of the workload. `None` when none are, or the book lists
    /// owned results.
    fn folded<'l>(
        &self,
        subject: &Subject,
        lineage: &'l Lineage,
        findings: &[Finding],
    ) -> Option<&'l [Arc<str>]> {
        if self.listing.owned {
            return None;
        }
        let made = lineage.made_by.as_ref()?;
        let mine = findings_digest(&subject.kind, findings, &made.policies)?;
        (self.made_digest(&subject.namespace, made) == Some(mine)).then_some(&made.policies)
    }

    /// The digest of what the policies of `made` found of the workload `made` names: as the
    /// book remembers it from reading the workload, else as its listed results say (a book
    /// seeded from reports), when it has some.
    fn made_digest(&self, scope: &ReportScope, made: &MadeBy) -> Option<u64> {
        let ledger = self.scopes.get(scope)?.get(&made.kind)?;
        if let Some(digest) = ledger.made.get(&uid_hash(&made.uid)) {
            return Some(*digest);
        }
        let listed: Vec<(&str, &str, ResultStatus, &str)> = ledger
            .entries
            .iter()
            .filter(|e| e.uid == made.uid && made.policies.contains(&e.policy))
            .map(|e| (&*e.policy, e.rule.as_str(), e.result, e.message.as_str()))
            .collect();
        if listed.is_empty() {
            return None;
        }
        Some(digest(&made.kind, listed))
    }

    /// Whether the book knows what the policies of `made` found of the workload it names
    /// (it read it, or lists a result of it).
    pub fn knows(&self, scope: &ReportScope, made: &MadeBy) -> bool {
        self.made_digest(scope, made).is_some()
    }

    /// Forgets the findings of policies `keep` does not keep (deleted policies). Returns the
    /// scopes that changed.
    pub fn retain_policies(&mut self, keep: impl Fn(&str) -> bool) -> BTreeSet<ReportScope> {
        let mut changed = BTreeSet::new();
        for (scope, kinds) in &mut self.scopes {
            for ledger in kinds.values_mut() {
                let before = (ledger.tallies.len(), ledger.entries.len());
                ledger.tallies.retain(|policy, _| keep(policy));
                ledger.folded.retain(|policy, _| keep(policy));
                ledger.entries.retain(|entry| keep(&entry.policy));
                if before != (ledger.tallies.len(), ledger.entries.len()) {
                    changed.insert(scope.clone());
                }
            }
        }
        changed
    }

    /// The scopes the book has findings for.
    pub fn scopes(&self) -> impl Iterator<Item = &ReportScope> {
        self.scopes.keys()
    }

    /// Every finding counted by policy and result, across scopes and kinds (the metrics).
    pub fn tallies(&self) -> BTreeMap<Arc<str>, Tally> {
        let mut total: BTreeMap<Arc<str>, Tally> = BTreeMap::new();
        for kinds in self.scopes.values() {
            for ledger in kinds.values() {
                for (policy, tally) in &ledger.tallies {
                    total.entry(policy.clone()).or_default().merge(tally);
                }
            }
        }
        total
    }

    /// The report of `scope`; `None` when the book has nothing for it (its report goes),
    /// nothing but zeros included: no policy selects anything there.
    pub fn report(&self, scope: &ReportScope) -> Option<ReportContent> {
        let kinds = self.scopes.get(scope)?;
        let passes = self.listing.passes;
        let mut tally = Tally::default();
        let (mut listed, mut owned) = (0, 0);
        let mut merged: BTreeSet<&Entry> = BTreeSet::new();
        for ledger in kinds.values() {
            tally.merge(&ledger.tally());
            listed += ledger.listed(passes);
            owned += ledger.owned(passes);
            merged.extend(ledger.entries.iter());
        }
        if tally == Tally::default() && merged.is_empty() {
            return None;
        }
        let results: Vec<ReportResult> = merged
            .into_iter()
            .take(self.listing.max_results)
            .map(|entry| report_result(entry, scope))
            .collect();
        let cut_from = (listed > results.len() as u64).then_some(listed);
        Some(ReportContent {
            summary: summary(&tally),
            results,
            cut_from,
            tally: tally::write(kinds),
            passes,
            owned,
            cluster: self.listing.cluster.clone(),
        })
    }

    /// Takes back what a report written earlier says (a replica resuming an audit another one
    /// began): its results and each kind's tally. Results beyond the report's cap were never
    /// written and stay unknown until their kind is scanned again.
    pub fn seed(
        &mut self,
        scope: &ReportScope,
        results: &[ReportResult],
        tally_annotation: Option<&str>,
    ) {
        let tallies = tally_annotation.map(tally::read).unwrap_or_default();
        let listing = self.listing.clone();
        let kinds = self.scopes.entry(scope.clone()).or_default();
        for (kind, (counted, folded)) in tallies {
            let ledger = kinds.entry(kind).or_default();
            ledger.tallies = counted;
            ledger.folded = folded;
        }
        for result in results {
            let Some(entry) = entry_of(result, listing.passes) else {
                continue;
            };
            kinds
                .entry(entry.kind.clone())
                .or_default()
                .add(entry, listing.max_results);
        }
        if kinds.is_empty() {
            self.scopes.remove(scope);
        }
    }
}

/// The field of the pod template a workload of `kind` is judged by, as messages name it.
fn template_field(kind: &KindKey) -> Option<&'static str> {
    Workload::of(&kind.api_version, &kind.kind).map(|w| w.field)
}

/// A digest of what policies found of an object of `kind`, as they would find it of another
/// made from the same pod template: its findings that are not passes (policy, rule, result,
/// and message without the pod template's field a workload's messages begin with), in order.
fn digest(kind: &KindKey, found: Vec<(&str, &str, ResultStatus, &str)>) -> u64 {
    let field = template_field(kind);
    let mut found: Vec<(&str, &str, usize, &str)> = found
        .into_iter()
        .filter(|(_, _, result, _)| *result != ResultStatus::Pass)
        .map(|(policy, rule, result, message)| {
            let message = field
                .and_then(|field| message.strip_prefix(field))
                .and_then(|rest| rest.strip_prefix(": "))
                .unwrap_or(message);
            (policy, rule, result.urgency(), message)
        })
        .collect();
    found.sort_unstable();
    let mut hasher = DefaultHasher::new();
    found.hash(&mut hasher);
    hasher.finish()
}

/// The [`digest`] of the findings of an object of `kind` under `policies`; `None` when none of
/// them found anything (not even a pass).
fn findings_digest(kind: &KindKey, findings: &[Finding], policies: &[Arc<str>]) -> Option<u64> {
    let messages: Vec<(&Finding, String)> = findings
        .iter()
        .filter(|f| policies.contains(&f.policy))
        .map(|f| (f, cut_message(&f.message)))
        .collect();
    if messages.is_empty() {
        return None;
    }
    Some(digest(
        kind,
        messages
            .iter()
            .map(|(f, message)| {
                (
                    &*f.policy,
                    f.rule.as_deref().unwrap_or_default(),
                    f.result,
                    message.as_str(),
                )
            })
            .collect(),
    ))
}

fn uid_hash(uid: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    uid.hash(&mut hasher);
    hasher.finish()
}

/// Keeps, across a scope's kinds, only the findings its report can show (the first `cap` in
/// report order), so that memory is bounded by what the reports hold, not by how many objects
/// fail. A kind whose findings shrink later shows fewer results until the others are read again
/// (their counts stay exact).
fn trim(kinds: &mut BTreeMap<KindKey, Ledger>, cap: usize) {
    let total: usize = kinds.values().map(|l| l.entries.len()).sum();
    if total <= cap {
        return;
    }
    let mut kept: Vec<&Entry> = kinds.values().flat_map(|l| l.entries.iter()).collect();
    kept.sort();
    let Some(last) = kept.get(cap - 1).map(|e| (*e).clone()) else {
        return;
    };
    for ledger in kinds.values_mut() {
        while ledger.entries.last().is_some_and(|e| *e > last) {
            ledger.entries.pop_last();
        }
    }
}

fn entry_of_finding(subject: &Subject, finding: &Finding, now: Timestamp) -> Entry {
    Entry {
        result: finding.result,
        policy: finding.policy.clone(),
        kind: subject.kind.clone(),
        name: subject.name.clone(),
        rule: finding.rule.clone().unwrap_or_default(),
        message: cut_message(&finding.message),
        uid: subject.uid.clone(),
        severity: finding.severity.clone(),
        category: finding.category.clone(),
        found: now,
    }
}

/// `message`, or when longer than [`MAX_MESSAGE_BYTES`] its beginning (cut at a character
/// boundary) followed by a marker saying how long it was; the result fits the bound.
pub fn cut_message(message: &str) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message.to_string();
    }
    let marker = format!(" [... cut from {} bytes]", message.len());
    let mut end = MAX_MESSAGE_BYTES.saturating_sub(marker.len());
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{marker}", &message[..end])
}

fn summary(tally: &Tally) -> ReportSummary {
    let count = |result| i64::try_from(tally.count(result)).unwrap_or(i64::MAX);
    ReportSummary {
        pass: count(ResultStatus::Pass),
        fail: count(ResultStatus::Fail),
        warn: count(ResultStatus::Warn),
        error: count(ResultStatus::Error),
        skip: count(ResultStatus::Skip),
    }
}

fn report_result(entry: &Entry, scope: &ReportScope) -> ReportResult {
    ReportResult {
        source: SOURCE.to_string(),
        policy: entry.policy.to_string(),
        rule: entry.rule.clone(),
        category: entry.category.as_deref().unwrap_or_default().to_string(),
        severity: entry
            .severity
            .as_deref()
            .and_then(|s| s.parse::<Severity>().ok()),
        timestamp: Some(entry.found),
        result: Some(entry.result),
        scored: true,
        resources: vec![ObjectReference {
            api_version: Some(entry.kind.api_version.clone()),
            kind: Some(entry.kind.kind.clone()),
            namespace: scope.clone(),
            name: Some(entry.name.clone()),
            uid: (!entry.uid.is_empty()).then(|| entry.uid.clone()),
            ..ObjectReference::default()
        }],
        message: entry.message.clone(),
        ..ReportResult::default()
    }
}

/// The finding a report's result lists; passes only when `passes` are listed.
fn entry_of(result: &ReportResult, passes: bool) -> Option<Entry> {
    let resource = result.resources.first()?;
    let status = result.result?;
    if status == ResultStatus::Pass && !passes {
        return None;
    }
    Some(Entry {
        result: status,
        policy: Arc::from(result.policy.as_str()),
        kind: KindKey::new(resource.api_version.clone()?, resource.kind.clone()?),
        name: resource.name.clone()?,
        rule: result.rule.clone(),
        message: cut_message(&result.message),
        uid: resource.uid.clone().unwrap_or_default(),
        severity: result.severity.map(|s| Arc::from(s.as_str())),
        category: (!result.category.is_empty()).then(|| Arc::from(result.category.as_str())),
        found: result.timestamp.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> KindKey {
        KindKey::new("v1", "Pod")
    }

    fn subject(namespace: &str, name: &str) -> Subject {
        Subject {
            kind: pods(),
            namespace: Some(namespace.to_string()),
            name: name.to_string(),
            uid: format!("uid-{name}"),
        }
    }

    fn finding(policy: &str, result: ResultStatus, message: &str) -> Finding {
        Finding {
            policy: Arc::from(policy),
            rule: Some("r".to_string()),
            result,
            message: message.to_string(),
            severity: Some(Arc::from("high")),
            category: None,
        }
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp { seconds, nanos: 0 }
    }

    fn scan(book: &Book, objects: &[(&str, &str, Vec<Finding>)], now: i64) -> KindScan {
        let mut scan = book.scan(pods());
        for (namespace, name, findings) in objects {
            scan.add(&subject(namespace, name), findings, at(now));
        }
        scan
    }

    fn shop(book: &Book) -> ReportContent {
        book.report(&Some("shop".to_string()))
            .expect("a report for shop")
    }

    #[test]
    fn summaries_count_everything_and_results_keep_what_needs_attention() {
        let mut book = Book::new(10);
        let scan = scan(
            &book,
            &[
                ("shop", "a", vec![finding("P/x", ResultStatus::Pass, "")]),
                ("shop", "b", vec![finding("P/x", ResultStatus::Fail, "bad")]),
                ("shop", "c", vec![finding("P/x", ResultStatus::Warn, "meh")]),
            ],
            1,
        );
        assert_eq!(scan.objects(), 3);
        book.finish(scan);
        let report = shop(&book);
        assert_eq!(
            report.summary,
            ReportSummary {
                pass: 1,
                fail: 1,
                warn: 1,
                error: 0,
                skip: 0
            }
        );
        let shown: Vec<(&str, Option<ResultStatus>)> = report
            .results
            .iter()
            .map(|r| (r.resources[0].name.as_deref().unwrap_or(""), r.result))
            .collect();
        assert_eq!(
            shown,
            vec![
                ("b", Some(ResultStatus::Fail)),
                ("c", Some(ResultStatus::Warn))
            ]
        );
        assert_eq!(report.results[0].severity, Some(Severity::High));
        assert_eq!(report.cut_from, None);
    }

    #[test]
    fn results_are_cut_at_the_cap_deterministically_whatever_the_order_of_objects() {
        let objects: Vec<(String, Vec<Finding>)> = (0..50)
            .map(|i| {
                let result = if i % 3 == 0 {
                    ResultStatus::Error
                } else {
                    ResultStatus::Fail
                };
                (format!("pod-{i:02}"), vec![finding("P/x", result, "m")])
            })
            .collect();
        let render = |order: &mut dyn Iterator<Item = &(String, Vec<Finding>)>| {
            let mut book = Book::new(5);
            let mut scan = book.scan(pods());
            for (name, findings) in order {
                scan.add(&subject("shop", name), findings, at(1));
            }
            book.finish(scan);
            shop(&book)
        };
        let forward = render(&mut objects.iter());
        let backward = render(&mut objects.iter().rev());
        assert_eq!(forward, backward);
        assert_eq!(forward.results.len(), 5);
        assert_eq!(forward.cut_from, Some(50));
        assert_eq!(forward.summary.error + forward.summary.fail, 50);
        // Errors first, then by name.
        assert!(
            forward
                .results
                .iter()
                .all(|r| r.result == Some(ResultStatus::Error))
        );
        assert_eq!(
            forward.results[0].resources[0].name.as_deref(),
            Some("pod-00")
        );
    }

    #[test]
    fn a_new_scan_replaces_the_kind_and_keeps_when_a_finding_was_first_seen() {
        let mut book = Book::new(10);
        let first = scan(
            &book,
            &[
                ("shop", "a", vec![finding("P/x", ResultStatus::Fail, "bad")]),
                ("shop", "b", vec![finding("P/x", ResultStatus::Fail, "bad")]),
                ("lab", "c", vec![finding("P/x", ResultStatus::Fail, "bad")]),
            ],
            100,
        );
        book.finish(first);
        // b was fixed, c and its namespace deleted.
        let second = scan(
            &book,
            &[
                ("shop", "a", vec![finding("P/x", ResultStatus::Fail, "bad")]),
                ("shop", "b", vec![finding("P/x", ResultStatus::Pass, "")]),
            ],
            200,
        );
        let changed = book.finish(second);
        assert_eq!(
            changed,
            BTreeSet::from([Some("lab".to_string()), Some("shop".to_string())])
        );
        assert!(book.report(&Some("lab".to_string())).is_none());
        let report = shop(&book);
        assert_eq!(report.results.len(), 1);
        assert_eq!(report.results[0].timestamp, Some(at(100)));
        assert_eq!(report.summary.pass, 1);
        // The same findings again change nothing.
        let third = scan(
            &book,
            &[
                ("shop", "a", vec![finding("P/x", ResultStatus::Fail, "bad")]),
                ("shop", "b", vec![finding("P/x", ResultStatus::Pass, "")]),
            ],
            300,
        );
        assert!(book.finish(third).is_empty());
        assert_eq!(shop(&book), report);
    }

    #[test]
    fn deleted_policies_lose_their_findings() {
        let mut book = Book::new(10);
        let first = scan(
            &book,
            &[(
                "shop",
                "a",
                vec![
                    finding("P/x", ResultStatus::Fail, "bad"),
                    finding("P/y", ResultStatus::Pass, ""),
                ],
            )],
            1,
        );
        book.finish(first);
        let changed = book.retain_policies(|policy| policy != "P/x");
        assert_eq!(changed.len(), 1);
        let report = shop(&book);
        assert!(report.results.is_empty());
        assert_eq!(report.summary.pass, 1);
        assert_eq!(report.summary.fail, 0);
        assert_eq!(book.tallies().len(), 1);
    }

    #[test]
    fn namespaces_are_committed_as_the_listing_passes_them_and_a_resumed_scan_keeps_them() {
        let mut book = Book::new(10);
        let first = scan(
            &book,
            &[
                ("a-ns", "p", vec![finding("P/x", ResultStatus::Fail, "bad")]),
                ("b-ns", "q", vec![finding("P/x", ResultStatus::Fail, "bad")]),
                ("z-ns", "r", vec![finding("P/x", ResultStatus::Fail, "bad")]),
            ],
            1,
        );
        book.finish(first);
        // A second scan reads a-ns (p fixed; b-ns has no object left) and reaches z-ns.
        let mut second = book.scan(pods());
        second.add(
            &subject("a-ns", "p"),
            &[finding("P/x", ResultStatus::Pass, "")],
            at(2),
        );
        let changed = book.commit(&mut second, Some(&Some("z-ns".to_string())));
        assert_eq!(
            changed,
            BTreeSet::from([Some("a-ns".to_string()), Some("b-ns".to_string())])
        );
        assert!(book.report(&Some("b-ns".to_string())).is_none());
        let a = book.report(&Some("a-ns".to_string())).expect("a-ns");
        assert_eq!((a.summary.fail, a.summary.pass), (0, 1));
        // Interrupted there; the next scan resumes at z-ns, where r was fixed.
        drop(second);
        let mut resumed = book.resume(pods(), "z-ns");
        resumed.add(
            &subject("z-ns", "r"),
            &[finding("P/x", ResultStatus::Pass, "")],
            at(3),
        );
        book.finish(resumed);
        let a = book.report(&Some("a-ns".to_string())).expect("a-ns kept");
        assert_eq!((a.summary.fail, a.summary.pass), (0, 1));
        let z = book.report(&Some("z-ns".to_string())).expect("z-ns");
        assert_eq!((z.summary.fail, z.summary.pass, z.results.len()), (0, 1, 0));
    }

    #[test]
    fn admission_moves_an_object_between_results() {
        let mut book = Book::new(10);
        let first = scan(
            &book,
            &[
                ("shop", "a", vec![finding("P/x", ResultStatus::Fail, "bad")]),
                ("shop", "b", vec![finding("P/x", ResultStatus::Pass, "")]),
            ],
            1,
        );
        book.finish(first);
        // a fixed, b broken by updates; c created broken.
        book.admit(
            &subject("shop", "a"),
            &[finding("P/x", ResultStatus::Pass, "")],
            at(2),
            true,
        );
        book.admit(
            &subject("shop", "b"),
            &[finding("P/x", ResultStatus::Fail, "bad")],
            at(2),
            true,
        );
        book.admit(
            &subject("shop", "c"),
            &[finding("P/x", ResultStatus::Fail, "bad")],
            at(3),
            false,
        );
        let report = shop(&book);
        assert_eq!((report.summary.pass, report.summary.fail), (1, 2));
        let names: Vec<_> = report
            .results
            .iter()
            .map(|r| r.resources[0].name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, ["b", "c"]);
    }

    #[test]
    fn a_scope_keeps_only_the_findings_its_report_can_show() {
        let mut book = Book::new(3);
        for kind in ["ConfigMap", "Pod", "Service"] {
            let mut scan = book.scan(KindKey::new("v1", kind));
            for i in 0..5 {
                let subject = Subject {
                    kind: KindKey::new("v1", kind),
                    namespace: Some("shop".to_string()),
                    name: format!("{kind}-{i}"),
                    uid: String::new(),
                };
                scan.add(
                    &subject,
                    &[finding("P/x", ResultStatus::Fail, "bad")],
                    at(1),
                );
            }
            book.finish(scan);
        }
        let kept: usize = book.scopes[&Some("shop".to_string())]
            .values()
            .map(|l| l.entries.len())
            .sum();
        assert_eq!(kept, 3);
        let report = shop(&book);
        assert_eq!(report.summary.fail, 15);
        assert_eq!(report.cut_from, Some(15));
        let names: Vec<_> = report
            .results
            .iter()
            .map(|r| r.resources[0].name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, ["ConfigMap-0", "ConfigMap-1", "ConfigMap-2"]);
    }

    #[test]
    fn kinds_no_policy_reads_drop_out() {
        let mut book = Book::new(10);
        let first = scan(
            &book,
            &[("shop", "a", vec![finding("P/x", ResultStatus::Fail, "bad")])],
            1,
        );
        book.finish(first);
        let changed = book.retain_kinds(|kind| kind.kind != "Pod");
        assert_eq!(changed.len(), 1);
        assert!(book.report(&Some("shop".to_string())).is_none());
    }

    #[test]
    fn a_report_written_earlier_seeds_a_new_book() {
        let mut book = Book::new(10);
        let first = scan(
            &book,
            &[
                ("shop", "a", vec![finding("P/x", ResultStatus::Fail, "bad")]),
                ("shop", "b", vec![finding("P/x", ResultStatus::Pass, "")]),
            ],
            7,
        );
        book.finish(first);
        let written = shop(&book);
        let mut resumed = Book::new(10);
        resumed.seed(
            &Some("shop".to_string()),
            &written.results,
            Some(&written.tally),
        );
        assert_eq!(shop(&resumed), written);
    }

    #[test]
    fn a_namespace_no_policy_selects_gets_no_report_and_an_old_one_goes() {
        let mut book = Book::new(10);
        let first = scan(
            &book,
            &[
                ("shop", "a", vec![finding("P/x", ResultStatus::Pass, "")]),
                ("elsewhere", "b", vec![]),
            ],
            1,
        );
        let changed = book.finish(first);
        assert_eq!(changed, BTreeSet::from([Some("shop".to_string())]));
        assert!(book.report(&Some("elsewhere".to_string())).is_none());
        // A report of zeros written before (by an earlier kanon) is not kept.
        let zeros = r#"{"v1 Pod": {}}"#;
        book.seed(&Some("elsewhere".to_string()), &[], Some(zeros));
        assert!(book.report(&Some("elsewhere".to_string())).is_none());
        // A policy that stops selecting the shop's objects leaves nothing there either.
        let again = scan(&book, &[("shop", "a", vec![])], 2);
        assert!(book.finish(again).contains(&Some("shop".to_string())));
        assert!(book.report(&Some("shop".to_string())).is_none());
    }

    #[test]
    fn a_long_message_is_cut_with_a_marker() {
        let mut book = Book::new(10);
        // Multi-byte characters, so that the cut must find a character boundary.
        let echoed = "é".repeat(125_000);
        let first = scan(
            &book,
            &[
                (
                    "shop",
                    "a",
                    vec![finding("P/x", ResultStatus::Fail, &echoed)],
                ),
                (
                    "shop",
                    "b",
                    vec![finding("P/x", ResultStatus::Fail, "short")],
                ),
            ],
            1,
        );
        book.finish(first);
        let report = shop(&book);
        let long = &report.results[0].message;
        assert!(long.len() <= MAX_MESSAGE_BYTES, "{} bytes", long.len());
        assert!(long.starts_with("éé"), "{long}");
        assert!(long.ends_with(" [... cut from 250000 bytes]"), "{long}");
        assert_eq!(report.results[1].message, "short");
        assert_eq!(
            cut_message(&"x".repeat(MAX_MESSAGE_BYTES)).len(),
            MAX_MESSAGE_BYTES
        );
    }

    // What controllers make from workloads.

    const P: &str = "ClusterValidatePolicy/no-privileged";

    fn kind(name: &str) -> KindKey {
        match name {
            "Pod" => KindKey::new("v1", "Pod"),
            "Job" | "CronJob" => KindKey::new("batch/v1", name),
            _ => KindKey::new("apps/v1", name),
        }
    }

    fn object(kind_name: &str, name: &str) -> Subject {
        Subject {
            kind: kind(kind_name),
            namespace: Some("shop".to_string()),
            name: name.to_string(),
            uid: format!("uid-{name}"),
        }
    }

    /// The lineage of an object of `kind_name` made by the workload `by` (`Kind/name`), the
    /// policy P judging templates.
    fn lineage(kind_name: &str, by: Option<&str>) -> Lineage {
        let policies: Arc<[Arc<str>]> = Arc::from(vec![Arc::from(P)]);
        Lineage {
            template: if kind_name == "Pod" {
                Arc::from(Vec::new())
            } else {
                policies.clone()
            },
            made_by: by.map(|by| {
                let (kind_name, name) = by.split_once('/').expect("Kind/name");
                MadeBy {
                    kind: kind(kind_name),
                    name: name.to_string(),
                    uid: format!("uid-{name}"),
                    policies: policies.clone(),
                }
            }),
        }
    }

    /// What P finds of an object of `kind_name`: `privileged` found in its template or in it.
    fn privileged(kind_name: &str, what: &str) -> Vec<Finding> {
        let message = match kind_name {
            "Pod" => what.to_string(),
            "CronJob" => format!("spec.jobTemplate.spec.template: {what}"),
            _ => format!("spec.template: {what}"),
        };
        vec![finding(P, ResultStatus::Fail, &message)]
    }

    /// Reads, kind by kind as the audit does, a Deployment, its ReplicaSet and two Pods made
    /// from its template, another Pod of the ReplicaSet with a container injected, and a Pod
    /// nobody's controller made, all failing P.
    fn workloads(listing: Listing) -> Book {
        let mut book = Book::listing(listing);
        let objects: [(&str, &str, Option<&str>, &str); 6] = [
            ("Deployment", "web", None, "privileged"),
            ("ReplicaSet", "web-1", Some("Deployment/web"), "privileged"),
            ("Pod", "web-1-a", Some("ReplicaSet/web-1"), "privileged"),
            ("Pod", "web-1-b", Some("ReplicaSet/web-1"), "privileged"),
            (
                "Pod",
                "web-1-c",
                Some("ReplicaSet/web-1"),
                "privileged, sidecar too",
            ),
            ("Pod", "debug", None, "privileged"),
        ];
        for kind_name in ["Deployment", "ReplicaSet", "Pod"] {
            let mut scan = book.scan(kind(kind_name));
            for (of, name, by, what) in objects {
                if of == kind_name {
                    scan.add_judged(
                        &book,
                        &object(of, name),
                        &lineage(of, by),
                        &privileged(of, what),
                        at(1),
                    );
                }
            }
            book.finish(scan);
        }
        book
    }

    fn listed(report: &ReportContent) -> Vec<String> {
        report
            .results
            .iter()
            .map(|r| {
                format!(
                    "{}/{}",
                    r.resources[0].kind.as_deref().unwrap_or(""),
                    r.resources[0].name.as_deref().unwrap_or("")
                )
            })
            .collect()
    }

    #[test]
    fn what_a_controller_made_as_its_workload_was_found_is_counted_not_listed() {
        let report = shop(&workloads(Listing::new(10)));
        // The ReplicaSet and the two Pods found as the Deployment was: its result stands for
        // them. The Pod that differs, and the one no controller made, are listed.
        assert_eq!(
            listed(&report),
            ["Deployment/web", "Pod/debug", "Pod/web-1-c"]
        );
        assert_eq!(report.summary.fail, 6);
        assert_eq!(report.owned, 3);
        assert_eq!(report.cut_from, None);
        // The message a workload's template was found with says where.
        assert_eq!(report.results[0].message, "spec.template: privileged");

        // The full list, on request.
        let full = shop(&workloads(Listing {
            owned: true,
            ..Listing::new(10)
        }));
        assert_eq!(
            listed(&full),
            [
                "Deployment/web",
                "ReplicaSet/web-1",
                "Pod/debug",
                "Pod/web-1-a",
                "Pod/web-1-b",
                "Pod/web-1-c"
            ]
        );
        assert_eq!((full.summary.fail, full.owned), (6, 0));
    }

    #[test]
    fn only_what_the_workload_was_found_to_be_under_the_same_policies_is_folded() {
        let mut book = Book::new(10);
        let mut scan = book.scan(kind("CronJob"));
        scan.add_judged(
            &book,
            &object("CronJob", "nightly"),
            &lineage("CronJob", None),
            &privileged("CronJob", "privileged"),
            at(1),
        );
        book.finish(scan);
        let mut scan = book.scan(kind("Job"));
        // Made from it and found alike; made from it, another policy finding more; made by a
        // CronJob the book never read; found alike, but by a policy that does not judge the
        // template (it selects Jobs itself: its results are the Job's own).
        scan.add_judged(
            &book,
            &object("Job", "nightly-1"),
            &lineage("Job", Some("CronJob/nightly")),
            &privileged("Job", "privileged"),
            at(1),
        );
        let mut more = privileged("Job", "privileged");
        more.push(finding(
            "ClusterValidatePolicy/jobs",
            ResultStatus::Warn,
            "old",
        ));
        scan.add_judged(
            &book,
            &object("Job", "nightly-2"),
            &lineage("Job", Some("CronJob/nightly")),
            &more,
            at(1),
        );
        scan.add_judged(
            &book,
            &object("Job", "weekly-1"),
            &lineage("Job", Some("CronJob/weekly")),
            &privileged("Job", "privileged"),
            at(1),
        );
        let mut unrelated = lineage("Job", Some("CronJob/nightly"));
        if let Some(made) = &mut unrelated.made_by {
            made.policies = Arc::from(vec![Arc::from("ClusterValidatePolicy/jobs")]);
        }
        scan.add_judged(
            &book,
            &object("Job", "nightly-3"),
            &unrelated,
            &privileged("Job", "privileged"),
            at(1),
        );
        book.finish(scan);
        let report = shop(&book);
        // nightly-2's P finding is P's of the CronJob: folded; its other policy's is listed.
        assert_eq!(
            listed(&report),
            [
                "CronJob/nightly",
                "Job/nightly-3",
                "Job/weekly-1",
                "Job/nightly-2"
            ]
        );
        assert_eq!(report.owned, 2);
        assert_eq!((report.summary.fail, report.summary.warn), (5, 1));
    }

    #[test]
    fn a_book_seeded_from_the_reports_folds_into_the_workloads_they_list() {
        let written = shop(&workloads(Listing::new(10)));
        let scope = Some("shop".to_string());
        let mut book = Book::new(10);
        book.seed(&scope, &written.results, Some(&written.tally));
        // The counts, the folded ones among them, come back from the tally.
        assert_eq!(shop(&book), written);
        // A replica resuming at the ReplicaSets compares them with the Deployment's listed
        // result (the reports say nothing of a workload they do not list).
        let mut scan = book.scan(kind("ReplicaSet"));
        scan.add_judged(
            &book,
            &object("ReplicaSet", "web-1"),
            &lineage("ReplicaSet", Some("Deployment/web")),
            &privileged("ReplicaSet", "privileged"),
            at(2),
        );
        assert!(book.finish(scan).is_empty());
        assert_eq!(shop(&book), written);
    }

    #[test]
    fn admission_folds_what_a_controller_makes_and_keeps_the_counts_of_objects_updated() {
        let mut book = Book::new(10);
        for (of, name, by) in [
            ("Deployment", "web", None),
            ("ReplicaSet", "web-1", Some("Deployment/web")),
            ("Pod", "web-1-a", Some("ReplicaSet/web-1")),
        ] {
            book.admit_judged(
                &object(of, name),
                &lineage(of, by),
                &privileged(of, "privileged"),
                at(1),
                false,
            );
        }
        let report = shop(&book);
        assert_eq!(listed(&report), ["Deployment/web"]);
        assert_eq!((report.summary.fail, report.owned), (3, 2));
        // The Pod updated (a label): found as before, folded as before, counted once.
        book.admit_judged(
            &object("Pod", "web-1-a"),
            &lineage("Pod", Some("ReplicaSet/web-1")),
            &privileged("Pod", "privileged"),
            at(2),
            true,
        );
        assert_eq!(shop(&book), report);
        // A new Pod of the ReplicaSet with a container injected is listed.
        book.admit_judged(
            &object("Pod", "web-1-b"),
            &lineage("Pod", Some("ReplicaSet/web-1")),
            &privileged("Pod", "privileged, sidecar too"),
            at(3),
            false,
        );
        let report = shop(&book);
        assert_eq!(listed(&report), ["Deployment/web", "Pod/web-1-b"]);
        assert_eq!((report.summary.fail, report.owned), (4, 2));
    }

    #[test]
    fn passes_are_listed_last_within_the_cap_when_asked_for() {
        let listing = Listing {
            passes: true,
            ..Listing::new(3)
        };
        let mut book = Book::listing(listing.clone());
        let scan = {
            let mut scan = book.scan(pods());
            scan.add(
                &subject("shop", "bad"),
                &[finding("P/x", ResultStatus::Fail, "bad")],
                at(1),
            );
            for name in ["a", "b", "c"] {
                scan.add(
                    &subject("shop", name),
                    &[finding("P/x", ResultStatus::Pass, "")],
                    at(1),
                );
            }
            scan
        };
        book.finish(scan);
        let report = shop(&book);
        let shown: Vec<(String, Option<ResultStatus>)> = report
            .results
            .iter()
            .map(|r| (r.resources[0].name.clone().unwrap_or_default(), r.result))
            .collect();
        assert_eq!(
            shown,
            [
                ("bad".to_string(), Some(ResultStatus::Fail)),
                ("a".to_string(), Some(ResultStatus::Pass)),
                ("b".to_string(), Some(ResultStatus::Pass)),
            ]
        );
        assert!(report.passes);
        assert_eq!(report.cut_from, Some(4));
        assert_eq!((report.summary.pass, report.summary.fail), (3, 1));
        // Seeded again, the passes are findings; a book that does not list them takes none.
        let scope = Some("shop".to_string());
        let mut again = Book::listing(listing);
        again.seed(&scope, &report.results, Some(&report.tally));
        assert_eq!(shop(&again), report);
        let mut counted = Book::new(3);
        counted.seed(&scope, &report.results, Some(&report.tally));
        let counted = shop(&counted);
        assert_eq!(counted.results.len(), 1);
        assert_eq!(counted.summary, report.summary);

        // What a controller made from a workload found passing passes with it, counted.
        let mut book = Book::listing(Listing {
            passes: true,
            ..Listing::new(10)
        });
        let pass = |_: &str| vec![finding(P, ResultStatus::Pass, "")];
        for (of, name, by) in [
            ("Deployment", "web", None),
            ("ReplicaSet", "web-1", Some("Deployment/web")),
            ("Pod", "web-1-a", Some("ReplicaSet/web-1")),
        ] {
            let mut scan = book.scan(kind(of));
            scan.add_judged(&book, &object(of, name), &lineage(of, by), &pass(of), at(1));
            book.finish(scan);
        }
        let report = shop(&book);
        assert_eq!(listed(&report), ["Deployment/web"]);
        assert_eq!((report.summary.pass, report.owned), (3, 2));
    }

    #[test]
    fn the_tally_is_compact_and_earlier_tallies_are_read() {
        // The library's shape: 25 policies on Pods, which judge the templates of six kinds.
        let names: Vec<String> = (0..25)
            .map(|i| format!("ClusterValidatePolicy/psa-restricted-check-number-{i:02}"))
            .collect();
        let mut book = Book::new(1000);
        for kind_name in [
            "Deployment",
            "StatefulSet",
            "DaemonSet",
            "ReplicaSet",
            "Job",
            "CronJob",
            "Pod",
        ] {
            let mut scan = book.scan(kind(kind_name));
            for i in 0..4 {
                let findings: Vec<Finding> = names
                    .iter()
                    .enumerate()
                    .map(|(n, policy)| {
                        let result = if n == 3 && i == 0 {
                            ResultStatus::Fail
                        } else {
                            ResultStatus::Pass
                        };
                        finding(policy, result, "")
                    })
                    .collect();
                scan.add(&object(kind_name, &format!("x-{i}")), &findings, at(1));
            }
            book.finish(scan);
        }
        let report = shop(&book);
        let earlier: BTreeMap<String, BTreeMap<&str, Tally>> = book.scopes
            [&Some("shop".to_string())]
            .iter()
            .map(|(kind, ledger)| {
                let policies = ledger.tallies.iter().map(|(p, t)| (&**p, *t)).collect();
                (kind.label(), policies)
            })
            .collect();
        let earlier = serde_json::to_string(&earlier).expect("JSON");
        assert!(earlier.len() > 9000, "{}", earlier.len());
        assert!(
            report.tally.len() < 1200,
            "{}: {}",
            report.tally.len(),
            report.tally
        );
        assert!(
            report.tally.contains(r#""v1 Pod":"0-2:4 3:3.1 4-24:4""#),
            "{}",
            report.tally
        );
        // Read back in either form, the counts are the same.
        for tally in [&report.tally, &earlier] {
            let mut seeded = Book::new(1000);
            seeded.seed(&Some("shop".to_string()), &report.results, Some(tally));
            assert_eq!(seeded.tallies(), book.tallies());
            assert_eq!(shop(&seeded).summary, report.summary);
        }
    }
}
