//! Writing the book's reports: one OpenReports `Report` named `kanon` per namespace with
//! findings, one `ClusterReport` named `kanon` for cluster-scoped objects, written by
//! server-side apply only when their content changed, deleted when the book has nothing for
//! their scope.
//!
//! A report is always written: its results are cut to fit [`MAX_REPORT_BYTES`] (saying so), and
//! one that still does not fit, or that the apiserver refuses, is replaced by one that says why
//! ([`NOT_WRITTEN_ANNOTATION`]), keeping its summary: a namespace never keeps a stale report, nor
//! loses every policy's findings to one policy's large messages.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kanon_api::{
    ClusterReport, Report, ReportConfiguration, ReportLimits, ReportResult, ResultStatus,
};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};

use super::AuditError;
use super::book::{
    Book, CUT_ANNOTATION, OWNED_ANNOTATION, ReportContent, ReportScope, SOURCE, TALLY_ANNOTATION,
    cut_message,
};

/// The name of kanon's report in each namespace, and of its ClusterReport.
pub const REPORT_NAME: &str = "kanon";
/// The label on kanon's reports.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "kanon");
/// The label that names the cluster a report is of (`--cluster-name`), so that a fleet's
/// reports can be gathered in one place and told apart.
pub const CLUSTER_LABEL: &str = "kanon.dev/cluster";
/// The field manager of report writes.
const FIELD_MANAGER: &str = "kanon-audit";

/// The most bytes a report takes as JSON: well under etcd's limit on one request (1.5 MiB by
/// default), which the report and its managed fields must fit in.
pub const MAX_REPORT_BYTES: usize = 1024 * 1024;
/// The annotation of a report whose results were cut to fit [`MAX_REPORT_BYTES`]: that bound
/// ([`CUT_ANNOTATION`] says how many results there were).
pub const CUT_TO_BYTES_ANNOTATION: &str = "audit.kanon.dev/results-cut-to-bytes";
/// The annotation of a report kanon could not write as it is: why. Such a report keeps its
/// summary and holds one result saying so instead of its findings.
pub const NOT_WRITTEN_ANNOTATION: &str = "audit.kanon.dev/not-written";
/// The policy named by the result of a report kanon could not write.
pub const NOT_WRITTEN_POLICY: &str = "kanon-audit";

/// How a report was made to fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// Whole.
    Whole,
    /// Its results were cut to fit [`MAX_REPORT_BYTES`]; this many were kept.
    Cut(usize),
    /// Replaced by a report that says why it could not be written.
    Replaced,
}

/// What [`ReportWriter::write`] did.
#[derive(Debug, Default)]
pub struct Writes {
    /// Reports written or deleted.
    pub written: usize,
    /// Reports whose results were cut to fit their size.
    pub cut: usize,
    /// Reports replaced by one saying why they could not be written.
    pub replaced: usize,
    /// What could not be written or deleted.
    pub errors: Vec<AuditError>,
}

/// Writes reports, remembering what it wrote (and the resource version it got back, so that
/// a report someone else changed since is written again).
pub struct ReportWriter {
    client: Client,
    max_results: usize,
    written: BTreeMap<ReportScope, Written>,
}

/// What the writer last wrote to a scope (or found there).
#[derive(Debug, Clone)]
struct Written {
    /// `None`: not known to match the book (written again at the next write).
    content: Option<ReportContent>,
    resource_version: Option<String>,
}

/// A report kanon wrote earlier, as read back.
#[derive(Debug, Clone)]
pub struct WrittenReport {
    /// Its scope.
    pub scope: ReportScope,
    /// Its results.
    pub results: Vec<kanon_api::ReportResult>,
    /// Its tally annotation.
    pub tally: Option<String>,
    /// Its resource version.
    pub resource_version: Option<String>,
    /// Whether it is the replacement of a report that could not be written
    /// ([`NOT_WRITTEN_ANNOTATION`]): its results are not the findings.
    pub replaced: bool,
    /// Its annotations of kanon's (`audit.kanon.dev/…`).
    pub annotations: BTreeMap<String, String>,
    /// Its configuration (the limits and the results it lists).
    pub configuration: Option<ReportConfiguration>,
    /// Its [`CLUSTER_LABEL`].
    pub cluster: Option<String>,
}

/// The prefix of the annotations kanon writes on its reports.
const ANNOTATION_PREFIX: &str = "audit.kanon.dev/";

impl WrittenReport {
    fn of(
        scope: ReportScope,
        metadata: &ObjectMeta,
        configuration: Option<ReportConfiguration>,
        results: Vec<ReportResult>,
    ) -> Self {
        WrittenReport {
            scope,
            tally: tally_of(metadata),
            replaced: replaced(metadata),
            resource_version: metadata.resource_version.clone(),
            annotations: kanon_annotations(metadata),
            configuration,
            cluster: cluster_of(metadata),
            results,
        }
    }

    /// Whether it is what `rendered` writes: the same results, annotations and configuration.
    /// One written under other settings (a larger `--report-max-results`, passes listed, an
    /// earlier kanon's tally) is not.
    pub fn is(&self, rendered: &Rendered) -> bool {
        let (metadata, configuration) = match rendered {
            Rendered::Namespaced(_, report) => (&report.metadata, &report.configuration),
            Rendered::Cluster(report) => (&report.metadata, &report.configuration),
        };
        rendered.results() == self.results.as_slice()
            && kanon_annotations(metadata) == self.annotations
            && *configuration == self.configuration
            && cluster_of(metadata) == self.cluster
    }
}

fn cluster_of(metadata: &ObjectMeta) -> Option<String> {
    metadata.labels.as_ref()?.get(CLUSTER_LABEL).cloned()
}

impl ReportWriter {
    /// A writer whose reports say they hold at most `max_results` results.
    pub fn new(client: Client, max_results: usize) -> Self {
        ReportWriter {
            client,
            max_results,
            written: BTreeMap::new(),
        }
    }

    /// The reports kanon wrote before (by any replica).
    pub async fn existing(&self) -> Result<Vec<WrittenReport>, AuditError> {
        let params = ListParams::default().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1));
        let reports: Api<Report> = Api::all(self.client.clone());
        let clusters: Api<ClusterReport> = Api::all(self.client.clone());
        let mut found = Vec::new();
        for report in reports.list(&params).await.map_err(read_error)?.items {
            if report.metadata.name.as_deref() != Some(REPORT_NAME) {
                continue;
            }
            found.push(WrittenReport::of(
                report.metadata.namespace.clone(),
                &report.metadata,
                report.configuration,
                report.results,
            ));
        }
        for report in clusters.list(&params).await.map_err(read_error)?.items {
            if report.metadata.name.as_deref() != Some(REPORT_NAME) {
                continue;
            }
            found.push(WrittenReport::of(
                None,
                &report.metadata,
                report.configuration,
                report.results,
            ));
        }
        Ok(found)
    }

    /// Remembers the reports found in the cluster as written, so that only changes are
    /// written and reports of scopes the book no longer has are deleted. A report that is not
    /// what this writer would write of the book (written under other settings, such as a
    /// larger `--report-max-results`, or by an earlier kanon) is known as stale: the next
    /// audit writes it again.
    pub fn know(&mut self, book: &Book, existing: &[WrittenReport]) {
        for report in existing {
            let content = book.report(&report.scope).filter(|content| {
                !report.replaced && report.is(&render(&report.scope, content, self.max_results))
            });
            self.written.insert(
                report.scope.clone(),
                Written {
                    content,
                    resource_version: report.resource_version.clone(),
                },
            );
        }
    }

    /// Reads the reports back and returns the scopes whose report changed since this writer
    /// wrote it (admission results recorded by any replica, someone's edit or deletion) or that
    /// it did not write: the next [`ReportWriter::write`] of those writes the book's content again (or
    /// deletes the report).
    pub async fn refresh(&mut self) -> Result<BTreeSet<ReportScope>, AuditError> {
        let existing = self.existing().await?;
        let mut stale = BTreeSet::new();
        // A report someone deleted is written again.
        let found: BTreeSet<&ReportScope> = existing.iter().map(|report| &report.scope).collect();
        for (scope, written) in &mut self.written {
            if !found.contains(scope) {
                written.content = None;
                written.resource_version = None;
                stale.insert(scope.clone());
            }
        }
        for report in existing {
            let known = self.written.get(&report.scope);
            // Unchanged, unless what was written is not known to match the book (a report
            // that was replaced because it could not be written).
            if known.is_some_and(|w| {
                w.resource_version == report.resource_version && w.content.is_some()
            }) {
                continue;
            }
            self.written.insert(
                report.scope.clone(),
                Written {
                    content: None,
                    resource_version: report.resource_version,
                },
            );
            stale.insert(report.scope);
        }
        Ok(stale)
    }

    /// Writes the report of each of `scopes` whose content changed; deletes those the book has
    /// nothing for. Every scope is tried: what was written, cut, replaced, and the errors.
    pub async fn write(&mut self, book: &Book, scopes: &BTreeSet<ReportScope>) -> Writes {
        let mut writes = Writes::default();
        for scope in scopes {
            let result = match book.report(scope) {
                Some(content) => {
                    let known = self.written.get(scope).and_then(|w| w.content.as_ref());
                    if known == Some(&content) {
                        continue;
                    }
                    self.apply(scope, &content)
                        .await
                        .map(|(resource_version, fit)| {
                            match fit {
                                Fit::Whole => {}
                                Fit::Cut(_) => writes.cut += 1,
                                Fit::Replaced => writes.replaced += 1,
                            }
                            // A replaced report is written again at the next audit's end
                            // (`refresh` finds it stale): what refused it may have passed.
                            let content = (fit != Fit::Replaced).then_some(content);
                            self.written.insert(
                                scope.clone(),
                                Written {
                                    content,
                                    resource_version,
                                },
                            );
                        })
                }
                None => {
                    if !self.written.contains_key(scope) {
                        continue;
                    }
                    self.delete(scope).await.map(|()| {
                        self.written.remove(scope);
                    })
                }
            };
            match result {
                Ok(()) => writes.written += 1,
                Err(error) => writes.errors.push(error),
            }
        }
        writes
    }

    /// The scopes of reports written (or found) and not deleted.
    pub fn scopes(&self) -> BTreeSet<ReportScope> {
        self.written.keys().cloned().collect()
    }

    /// Writes the report, cut to fit, or one saying why it could not be written; the resource
    /// version it got and how it was made to fit.
    async fn apply(
        &self,
        scope: &ReportScope,
        content: &ReportContent,
    ) -> Result<(Option<String>, Fit), AuditError> {
        write_fitted(&self.client, scope, content, self.max_results).await
    }

    async fn delete(&self, scope: &ReportScope) -> Result<(), AuditError> {
        let deleted = match scope {
            Some(namespace) => {
                let api: Api<Report> = Api::namespaced(self.client.clone(), namespace);
                api.delete(REPORT_NAME, &DeleteParams::default())
                    .await
                    .map(drop)
            }
            None => {
                let api: Api<ClusterReport> = Api::all(self.client.clone());
                api.delete(REPORT_NAME, &DeleteParams::default())
                    .await
                    .map(drop)
            }
        };
        match deleted {
            Ok(()) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(error) => Err(write_error(scope, error)),
        }
    }
}

/// Writes the report of `scope` with `content` by server-side apply, its results cut to fit
/// [`MAX_REPORT_BYTES`]; when the apiserver refuses it for what it holds (too large for etcd,
/// invalid), writes in its place the report that says why. The resource version it got and
/// how the report was made to fit.
pub async fn write_fitted(
    client: &Client,
    scope: &ReportScope,
    content: &ReportContent,
    max_results: usize,
) -> Result<(Option<String>, Fit), AuditError> {
    let (rendered, fit) = fit(scope, content, max_results, MAX_REPORT_BYTES);
    match apply_rendered(client, &rendered).await {
        Ok(version) => Ok((version, fit)),
        Err(kube::Error::Api(status)) if refused_for_content(&status) => {
            let why = format!(
                "the apiserver refused the report ({} {}): {}",
                status.code, status.reason, status.message
            );
            tracing::warn!(scope = %scope_name(scope), %why, "an audit report is replaced by one saying why");
            let replacement = replacement(scope, content, max_results, &why);
            apply_rendered(client, &replacement)
                .await
                .map(|version| (version, Fit::Replaced))
                .map_err(|error| write_error(scope, error))
        }
        Err(error) => Err(write_error(scope, error)),
    }
}

/// Whether the apiserver refused a write for what it holds, so that writing it again as it is
/// cannot succeed: too large (the apiserver's 413, etcd's `request is too large` as a 500), or
/// invalid (400, 422: a schema or an admission policy).
fn refused_for_content(status: &kube::core::Status) -> bool {
    match status.code {
        400 | 413 | 422 => true,
        500 => status.message.contains("too large"),
        _ => false,
    }
}

/// Writes `rendered` by server-side apply; the resource version it got.
pub async fn apply(
    client: &Client,
    scope: &ReportScope,
    rendered: &Rendered,
) -> Result<Option<String>, AuditError> {
    apply_rendered(client, rendered)
        .await
        .map_err(|error| write_error(scope, error))
}

async fn apply_rendered(
    client: &Client,
    rendered: &Rendered,
) -> Result<Option<String>, kube::Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match rendered {
        Rendered::Namespaced(namespace, report) => {
            let api: Api<Report> = Api::namespaced(client.clone(), namespace);
            api.patch(REPORT_NAME, &params, &Patch::Apply(report))
                .await
                .map(|r| r.metadata.resource_version)
        }
        Rendered::Cluster(report) => {
            let api: Api<ClusterReport> = Api::all(client.clone());
            api.patch(REPORT_NAME, &params, &Patch::Apply(report))
                .await
                .map(|r| r.metadata.resource_version)
        }
    }
}

/// Replaces the report of `scope` with `rendered` if it is still at `resource_version`;
/// `Ok(false)` when someone wrote it since (read it again and retry).
pub async fn replace(
    client: &Client,
    scope: &ReportScope,
    mut rendered: Rendered,
    resource_version: String,
) -> Result<bool, AuditError> {
    let params = PostParams::default();
    let replaced = match &mut rendered {
        Rendered::Namespaced(namespace, report) => {
            report.metadata.resource_version = Some(resource_version);
            let api: Api<Report> = Api::namespaced(client.clone(), namespace);
            api.replace(REPORT_NAME, &params, report).await.map(drop)
        }
        Rendered::Cluster(report) => {
            report.metadata.resource_version = Some(resource_version);
            let api: Api<ClusterReport> = Api::all(client.clone());
            api.replace(REPORT_NAME, &params, report).await.map(drop)
        }
    };
    match replaced {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(error) => Err(write_error(scope, error)),
    }
}

/// The report of `scope` as written: its results, tally and resource version; `None` when
/// there is none.
pub async fn read(
    client: &Client,
    scope: &ReportScope,
) -> Result<Option<WrittenReport>, AuditError> {
    let found = match scope {
        Some(namespace) => {
            let api: Api<Report> = Api::namespaced(client.clone(), namespace);
            api.get_opt(REPORT_NAME)
                .await
                .map(|r| r.map(|r| (r.metadata, r.configuration, r.results)))
        }
        None => {
            let api: Api<ClusterReport> = Api::all(client.clone());
            api.get_opt(REPORT_NAME)
                .await
                .map(|r| r.map(|r| (r.metadata, r.configuration, r.results)))
        }
    };
    let found = found.map_err(|error| write_error(scope, error))?;
    Ok(found.map(|(metadata, configuration, results)| {
        WrittenReport::of(scope.clone(), &metadata, configuration, results)
    }))
}

/// A report as kanon writes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Rendered {
    /// The Report of a namespace.
    Namespaced(String, Report),
    /// The ClusterReport.
    Cluster(ClusterReport),
}

impl Rendered {
    /// The report as JSON, with `apiVersion` and `kind`.
    pub fn to_value(&self) -> Result<serde_json::Value, serde_json::Error> {
        match self {
            Rendered::Namespaced(_, report) => serde_json::to_value(report),
            Rendered::Cluster(report) => serde_json::to_value(report),
        }
    }

    /// How many bytes the report takes as JSON.
    pub fn json_len(&self) -> usize {
        let written = match self {
            Rendered::Namespaced(_, report) => serde_json::to_vec(report),
            Rendered::Cluster(report) => serde_json::to_vec(report),
        };
        written.map_or(usize::MAX, |json| json.len())
    }

    /// Its results.
    fn results(&self) -> &[ReportResult] {
        match self {
            Rendered::Namespaced(_, report) => &report.results,
            Rendered::Cluster(report) => &report.results,
        }
    }

    /// Its metadata, results and annotations, to change before it is written.
    fn parts(&mut self) -> (&mut ObjectMeta, &mut Vec<ReportResult>) {
        match self {
            Rendered::Namespaced(_, report) => (&mut report.metadata, &mut report.results),
            Rendered::Cluster(report) => (&mut report.metadata, &mut report.results),
        }
    }

    fn annotate(&mut self, key: &str, value: String) {
        let (metadata, _) = self.parts();
        metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_string(), value);
    }
}

/// The report kanon writes for `scope` with `content`, cut to fit [`MAX_REPORT_BYTES`] (see
/// [`fit`]).
pub fn render(scope: &ReportScope, content: &ReportContent, max_results: usize) -> Rendered {
    fit(scope, content, max_results, MAX_REPORT_BYTES).0
}

/// The report kanon writes for `scope` with `content`, in at most `max_bytes` of JSON: whole
/// when it fits; else its results cut (the least urgent go first) and the report saying so
/// ([`CUT_ANNOTATION`]: how many results there were, [`CUT_TO_BYTES_ANNOTATION`]: the bound);
/// when even its summary and tally take more, the [`replacement`] that says why.
pub fn fit(
    scope: &ReportScope,
    content: &ReportContent,
    max_results: usize,
    max_bytes: usize,
) -> (Rendered, Fit) {
    let mut rendered = whole(scope, content, max_results);
    if rendered.json_len() <= max_bytes {
        return (rendered, Fit::Whole);
    }
    let total = content.cut_from.unwrap_or(content.results.len() as u64);
    rendered.annotate(CUT_ANNOTATION, total.to_string());
    rendered.annotate(CUT_TO_BYTES_ANNOTATION, max_bytes.to_string());
    let results = std::mem::take(rendered.parts().1);
    // `"results":[` and `]`, and a comma before it and between results.
    let mut size = rendered.json_len() + r#","results":[]"#.len();
    let mut kept = 0;
    for result in &results {
        size += serde_json::to_vec(result).map_or(usize::MAX, |json| json.len()) + 1;
        if size > max_bytes + 1 {
            break;
        }
        kept += 1;
    }
    if kept == 0 && rendered.json_len() > max_bytes {
        let why = format!(
            "the report takes more than {max_bytes} bytes without any result (its tally of \
             each kind and policy is that large)"
        );
        return (
            replacement(scope, content, max_results, &why),
            Fit::Replaced,
        );
    }
    let mut results = results;
    results.truncate(kept);
    *rendered.parts().1 = results;
    (rendered, Fit::Cut(kept))
}

/// The report written in place of one that cannot be written: the summary of `content`, no
/// tally, and instead of its results one error result of [`NOT_WRITTEN_POLICY`] whose message
/// says `why`, as [`NOT_WRITTEN_ANNOTATION`] does; [`CUT_ANNOTATION`] says how many results
/// there were.
pub fn replacement(
    scope: &ReportScope,
    content: &ReportContent,
    max_results: usize,
    why: &str,
) -> Rendered {
    let why = cut_message(why);
    let mut rendered = whole(scope, content, max_results);
    let total = content.cut_from.unwrap_or(content.results.len() as u64);
    let (metadata, results) = rendered.parts();
    *results = vec![ReportResult {
        source: SOURCE.to_string(),
        policy: NOT_WRITTEN_POLICY.to_string(),
        rule: "report-not-written".to_string(),
        result: Some(ResultStatus::Error),
        message: format!(
            "kanon could not write this report's {total} results: {why}; the summary counts them"
        ),
        ..ReportResult::default()
    }];
    let annotations = metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.remove(TALLY_ANNOTATION);
    annotations.insert(CUT_ANNOTATION.to_string(), total.to_string());
    annotations.insert(NOT_WRITTEN_ANNOTATION.to_string(), why);
    rendered
}

/// The report kanon writes for `scope` with `content`: named [`REPORT_NAME`], labelled
/// [`MANAGED_BY`], its tally (and, when cut, how many results there were; when some are
/// counted only for their workload's, how many) in annotations, its limits and status filter
/// (unless listed, passes are counted, not listed) in `configuration`.
fn whole(scope: &ReportScope, content: &ReportContent, max_results: usize) -> Rendered {
    let mut annotations = BTreeMap::from([(TALLY_ANNOTATION.to_string(), content.tally.clone())]);
    if let Some(total) = content.cut_from {
        annotations.insert(CUT_ANNOTATION.to_string(), total.to_string());
    }
    if content.owned > 0 {
        annotations.insert(OWNED_ANNOTATION.to_string(), content.owned.to_string());
    }
    let metadata = ObjectMeta {
        name: Some(REPORT_NAME.to_string()),
        namespace: scope.clone(),
        labels: Some(
            [(MANAGED_BY.0, MANAGED_BY.1)]
                .into_iter()
                .chain(content.cluster.as_deref().map(|name| (CLUSTER_LABEL, name)))
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect(),
        ),
        annotations: Some(annotations),
        ..ObjectMeta::default()
    };
    let configuration = Some(ReportConfiguration {
        limits: ReportLimits {
            max_results: Some(i64::try_from(max_results).unwrap_or(i64::MAX)),
            status_filter: ResultStatus::BY_URGENCY
                .into_iter()
                .filter(|status| content.passes || *status != ResultStatus::Pass)
                .collect(),
        },
    });
    match scope {
        Some(namespace) => Rendered::Namespaced(
            namespace.clone(),
            Report {
                metadata,
                source: SOURCE.to_string(),
                configuration,
                summary: content.summary,
                results: content.results.clone(),
                ..Report::default()
            },
        ),
        None => Rendered::Cluster(ClusterReport {
            metadata,
            source: SOURCE.to_string(),
            configuration,
            summary: content.summary,
            results: content.results.clone(),
            ..ClusterReport::default()
        }),
    }
}

fn replaced(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(NOT_WRITTEN_ANNOTATION))
}

fn kanon_annotations(meta: &ObjectMeta) -> BTreeMap<String, String> {
    meta.annotations
        .iter()
        .flatten()
        .filter(|(key, _)| key.starts_with(ANNOTATION_PREFIX))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

fn tally_of(meta: &ObjectMeta) -> Option<String> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(TALLY_ANNOTATION))
        .cloned()
}

pub(crate) fn scope_name(scope: &ReportScope) -> String {
    match scope {
        Some(namespace) => format!("namespace {namespace}"),
        None => "cluster-scoped objects".to_string(),
    }
}

fn write_error(scope: &ReportScope, error: kube::Error) -> AuditError {
    AuditError::Report {
        scope: scope_name(scope),
        message: crate::apiserver_error::describe(&error),
    }
}

fn read_error(error: kube::Error) -> AuditError {
    AuditError::Report {
        scope: "every namespace".to_string(),
        message: crate::apiserver_error::describe(&error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::book::{KindKey, Subject};
    use kanon_api::Timestamp;
    use kanon_engine::Finding;
    use std::sync::Arc;

    /// The shop's report content with `failing` ConfigMaps failing with `message`.
    fn shop(failing: usize, message: &str, max_results: usize) -> ReportContent {
        let mut book = Book::new(max_results);
        let mut scan = book.scan(KindKey::new("v1", "ConfigMap"));
        for i in 0..failing {
            let subject = Subject {
                kind: KindKey::new("v1", "ConfigMap"),
                namespace: Some("shop".to_string()),
                name: format!("cm-{i:04}"),
                uid: String::new(),
            };
            let finding = Finding {
                policy: Arc::from("ClusterValidatePolicy/echo"),
                rule: None,
                result: ResultStatus::Fail,
                message: message.to_string(),
                severity: None,
                category: None,
            };
            scan.add(&subject, &[finding], Timestamp::default());
        }
        book.finish(scan);
        book.report(&Some("shop".to_string())).expect("a report")
    }

    fn annotation(rendered: &Rendered, key: &str) -> Option<String> {
        let value = rendered.to_value().expect("JSON");
        value["metadata"]["annotations"][key]
            .as_str()
            .map(str::to_string)
    }

    fn results(rendered: &Rendered) -> Vec<ReportResult> {
        rendered.results().to_vec()
    }

    #[test]
    fn a_report_that_fits_is_whole() {
        let content = shop(3, "bad", 1000);
        let (rendered, fit) = fit(&Some("shop".to_string()), &content, 1000, MAX_REPORT_BYTES);
        assert_eq!(fit, Fit::Whole);
        assert_eq!(results(&rendered).len(), 3);
        assert_eq!(annotation(&rendered, CUT_ANNOTATION), None);
    }

    #[test]
    fn a_report_is_cut_to_its_size_saying_so() {
        // 1,200 objects whose messages are 5 KiB (capped at 1 KiB): more than a MiB of results.
        let scope = Some("shop".to_string());
        let content = shop(1200, &"x".repeat(5 * 1024), 1000);
        assert_eq!(content.results.len(), 1000);
        let (rendered, fit) = fit(&scope, &content, 1000, MAX_REPORT_BYTES);
        let kept = results(&rendered).len();
        assert_eq!(fit, Fit::Cut(kept));
        assert!((500..1000).contains(&kept), "{kept} results kept");
        assert!(
            rendered.json_len() <= MAX_REPORT_BYTES,
            "{}",
            rendered.json_len()
        );
        // One more result would not have fitted.
        let next = serde_json::to_vec(&content.results[kept])
            .expect("JSON")
            .len();
        assert!(rendered.json_len() + next + 1 > MAX_REPORT_BYTES);
        assert_eq!(
            annotation(&rendered, CUT_ANNOTATION).as_deref(),
            Some("1200")
        );
        assert_eq!(
            annotation(&rendered, CUT_TO_BYTES_ANNOTATION),
            Some(MAX_REPORT_BYTES.to_string())
        );
        // The most urgent results are kept, the summary counts every one.
        assert_eq!(results(&rendered)[..], content.results[..kept]);
        let value = rendered.to_value().expect("JSON");
        assert_eq!(value["summary"]["fail"], 1200);
        assert!(annotation(&rendered, TALLY_ANNOTATION).is_some());
        // What the apiserver would get is exactly what was measured.
        assert_eq!(
            serde_json::to_vec(&value).expect("JSON").len(),
            rendered.json_len()
        );
    }

    #[test]
    fn a_report_that_cannot_fit_is_replaced_by_one_saying_why() {
        let scope = Some("shop".to_string());
        let content = shop(5, "bad", 1000);
        // A bound smaller than the report without its results.
        let (rendered, fit) = fit(&scope, &content, 1000, 200);
        assert_eq!(fit, Fit::Replaced);
        let why = annotation(&rendered, NOT_WRITTEN_ANNOTATION).expect("why");
        assert!(why.contains("more than 200 bytes"), "{why}");
        assert_eq!(annotation(&rendered, TALLY_ANNOTATION), None);
        assert_eq!(annotation(&rendered, CUT_ANNOTATION).as_deref(), Some("5"));
        let shown = results(&rendered);
        assert_eq!(shown.len(), 1);
        assert_eq!(shown[0].policy, NOT_WRITTEN_POLICY);
        assert_eq!(shown[0].result, Some(ResultStatus::Error));
        assert!(shown[0].message.contains(&why), "{}", shown[0].message);
        assert_eq!(rendered.to_value().expect("JSON")["summary"]["fail"], 5);
        // A refusal's reason, however long, is capped in it.
        let refused = replacement(&scope, &content, 1000, &"no ".repeat(10_000));
        assert!(refused.json_len() < 8 * 1024, "{}", refused.json_len());
        // A book seeded from the replacement takes none of its results for findings.
        let mut book = Book::new(1000);
        book.seed(&scope, &results(&refused), None);
        assert!(book.report(&scope).is_none());
    }

    #[test]
    fn only_refusals_for_what_a_report_holds_replace_it() {
        let status = |code: u16, message: &str| kube::core::Status {
            code,
            message: message.to_string(),
            ..kube::core::Status::default()
        };
        assert!(refused_for_content(&status(413, "too large")));
        assert!(refused_for_content(&status(422, "denied")));
        assert!(refused_for_content(&status(
            500,
            "etcdserver: request is too large"
        )));
        assert!(!refused_for_content(&status(
            500,
            "etcdserver: leader changed"
        )));
        assert!(!refused_for_content(&status(403, "forbidden")));
        assert!(!refused_for_content(&status(429, "slow down")));
    }

    /// `rendered` as kanon reads it back.
    fn read_back(rendered: &Rendered) -> WrittenReport {
        match rendered {
            Rendered::Namespaced(namespace, report) => WrittenReport::of(
                Some(namespace.clone()),
                &report.metadata,
                report.configuration.clone(),
                report.results.clone(),
            ),
            Rendered::Cluster(report) => WrittenReport::of(
                None,
                &report.metadata,
                report.configuration.clone(),
                report.results.clone(),
            ),
        }
    }

    #[test]
    fn a_report_names_its_cluster_and_one_of_no_or_another_cluster_is_written_again() {
        let scope = Some("shop".to_string());
        let content = shop(1, "bad", 1000);
        let named = ReportContent {
            cluster: Some(Arc::from("eu-west-1")),
            ..content.clone()
        };
        let rendered = render(&scope, &named, 1000);
        let value = rendered.to_value().expect("JSON");
        assert_eq!(value["metadata"]["labels"][CLUSTER_LABEL], "eu-west-1");
        assert_eq!(value["metadata"]["labels"][MANAGED_BY.0], MANAGED_BY.1);
        let written = read_back(&rendered);
        assert_eq!(written.cluster.as_deref(), Some("eu-west-1"));
        assert!(written.is(&rendered));
        // Written before the cluster had a name, or under another: written again.
        let unnamed = render(&scope, &content, 1000);
        assert!(unnamed.to_value().expect("JSON")["metadata"]["labels"][CLUSTER_LABEL].is_null());
        assert!(!read_back(&unnamed).is(&rendered));
        let other = ReportContent {
            cluster: Some(Arc::from("us-east-1")),
            ..content
        };
        assert!(!read_back(&render(&scope, &other, 1000)).is(&rendered));
    }

    #[test]
    fn a_report_written_otherwise_is_known_to_be_written_again() {
        let scope = Some("shop".to_string());
        let content = shop(3, "bad", 1000);
        let rendered = render(&scope, &content, 1000);
        let written = read_back(&rendered);
        assert!(written.is(&rendered));
        // The tally an earlier kanon wrote, 4 KB of JSON where this one writes less.
        let mut earlier = written.clone();
        earlier.annotations.insert(
            TALLY_ANNOTATION.to_string(),
            r#"{"v1 ConfigMap":{"ClusterValidatePolicy/echo":[0,3,0,0,0]}}"#.to_string(),
        );
        assert!(!earlier.is(&rendered));
        // Another cap; passes listed (the same results: there are none to list).
        assert!(!written.is(&render(&scope, &content, 50)));
        let passes = ReportContent {
            passes: true,
            ..content.clone()
        };
        assert!(!written.is(&render(&scope, &passes, 1000)));
        // Annotations of others' are not kanon's to compare.
        let mut annotated = written.clone();
        annotated.annotations.remove(TALLY_ANNOTATION);
        assert!(!annotated.is(&rendered));
        let mut others = rendered.clone();
        others.annotate("example.com/note", "hello".to_string());
        assert!(written.is(&others));
    }

    #[test]
    fn a_report_says_what_it_lists_and_how_many_results_its_workloads_stand_for() {
        let scope = Some("shop".to_string());
        let content = shop(2, "bad", 1000);
        let filter = |content: &ReportContent| {
            let value = render(&scope, content, 1000).to_value().expect("JSON");
            value["configuration"]["limits"]["statusFilter"].clone()
        };
        assert_eq!(
            filter(&content),
            serde_json::json!(["error", "fail", "warn", "skip"])
        );
        let listing_passes = ReportContent {
            passes: true,
            owned: 7,
            ..content.clone()
        };
        assert_eq!(
            filter(&listing_passes),
            serde_json::json!(["error", "fail", "warn", "skip", "pass"])
        );
        let rendered = render(&scope, &listing_passes, 1000);
        assert_eq!(
            annotation(&rendered, OWNED_ANNOTATION).as_deref(),
            Some("7")
        );
        assert_eq!(
            annotation(&render(&scope, &content, 1000), OWNED_ANNOTATION),
            None
        );
    }
}
