//! Writing the book's reports: one OpenReports `Report` named `kanon` per namespace with
//! findings, one `ClusterReport` named `kanon` for cluster-scoped objects, written by
//! server-side apply only when their content changed, deleted when the book has nothing for
//! their scope.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kanon_api::{ClusterReport, Report, ReportConfiguration, ReportLimits, ResultStatus};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};

use super::AuditError;
use super::book::{Book, CUT_ANNOTATION, ReportContent, ReportScope, SOURCE, TALLY_ANNOTATION};

/// The name of kanon's report in each namespace, and of its ClusterReport.
pub const REPORT_NAME: &str = "kanon";
/// The label on kanon's reports.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "kanon");
/// The field manager of report writes.
const FIELD_MANAGER: &str = "kanon-audit";

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
        let tally = tally_of;
        let mut found = Vec::new();
        for report in reports.list(&params).await.map_err(read_error)?.items {
            if report.metadata.name.as_deref() != Some(REPORT_NAME) {
                continue;
            }
            found.push(WrittenReport {
                scope: report.metadata.namespace.clone(),
                tally: tally(&report.metadata),
                resource_version: report.metadata.resource_version.clone(),
                results: report.results,
            });
        }
        for report in clusters.list(&params).await.map_err(read_error)?.items {
            if report.metadata.name.as_deref() != Some(REPORT_NAME) {
                continue;
            }
            found.push(WrittenReport {
                scope: None,
                tally: tally(&report.metadata),
                resource_version: report.metadata.resource_version.clone(),
                results: report.results,
            });
        }
        Ok(found)
    }

    /// Remembers the reports found in the cluster as written, so that only changes are
    /// written and reports of scopes the book no longer has are deleted.
    pub fn know(&mut self, book: &Book, existing: &[WrittenReport]) {
        for report in existing {
            self.written.insert(
                report.scope.clone(),
                Written {
                    content: book.report(&report.scope),
                    resource_version: report.resource_version.clone(),
                },
            );
        }
    }

    /// Reads the reports back and returns the scopes whose report changed since this writer
    /// wrote it (admission results recorded by any replica, someone's edit) or that it did not
    /// write: the next [`ReportWriter::write`] of those writes the book's content again (or
    /// deletes the report).
    pub async fn refresh(&mut self) -> Result<BTreeSet<ReportScope>, AuditError> {
        let existing = self.existing().await?;
        let mut stale = BTreeSet::new();
        for report in existing {
            let known = self.written.get(&report.scope);
            if known.is_some_and(|w| w.resource_version == report.resource_version) {
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
    /// nothing for. Every scope is tried: how many were written or deleted, and the errors.
    pub async fn write(
        &mut self,
        book: &Book,
        scopes: &BTreeSet<ReportScope>,
    ) -> (usize, Vec<AuditError>) {
        let mut written = 0;
        let mut errors = Vec::new();
        for scope in scopes {
            let result = match book.report(scope) {
                Some(content) => {
                    let known = self.written.get(scope).and_then(|w| w.content.as_ref());
                    if known == Some(&content) {
                        continue;
                    }
                    self.apply(scope, &content).await.map(|resource_version| {
                        self.written.insert(
                            scope.clone(),
                            Written {
                                content: Some(content),
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
                Ok(()) => written += 1,
                Err(error) => errors.push(error),
            }
        }
        (written, errors)
    }

    /// The scopes of reports written (or found) and not deleted.
    pub fn scopes(&self) -> BTreeSet<ReportScope> {
        self.written.keys().cloned().collect()
    }

    /// Writes the report; the resource version it got.
    async fn apply(
        &self,
        scope: &ReportScope,
        content: &ReportContent,
    ) -> Result<Option<String>, AuditError> {
        apply(
            &self.client,
            scope,
            &render(scope, content, self.max_results),
        )
        .await
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

/// Writes `rendered` by server-side apply; the resource version it got.
pub async fn apply(
    client: &Client,
    scope: &ReportScope,
    rendered: &Rendered,
) -> Result<Option<String>, AuditError> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let written = match rendered {
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
    };
    written.map_err(|error| write_error(scope, error))
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
    let tally = tally_of;
    let found = match scope {
        Some(namespace) => {
            let api: Api<Report> = Api::namespaced(client.clone(), namespace);
            api.get_opt(REPORT_NAME)
                .await
                .map(|r| r.map(|r| (tally(&r.metadata), r.metadata.resource_version, r.results)))
        }
        None => {
            let api: Api<ClusterReport> = Api::all(client.clone());
            api.get_opt(REPORT_NAME)
                .await
                .map(|r| r.map(|r| (tally(&r.metadata), r.metadata.resource_version, r.results)))
        }
    };
    let found = found.map_err(|error| write_error(scope, error))?;
    Ok(
        found.map(|(tally, resource_version, results)| WrittenReport {
            scope: scope.clone(),
            results,
            tally,
            resource_version,
        }),
    )
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
}

/// The report kanon writes for `scope` with `content`: named [`REPORT_NAME`], labelled
/// [`MANAGED_BY`], its tally (and, when cut, how many results there were) in annotations, its
/// limits and status filter (passes are counted, not listed) in `configuration`.
pub fn render(scope: &ReportScope, content: &ReportContent, max_results: usize) -> Rendered {
    let mut annotations = BTreeMap::from([(TALLY_ANNOTATION.to_string(), content.tally.clone())]);
    if let Some(total) = content.cut_from {
        annotations.insert(CUT_ANNOTATION.to_string(), total.to_string());
    }
    let metadata = ObjectMeta {
        name: Some(REPORT_NAME.to_string()),
        namespace: scope.clone(),
        labels: Some(BTreeMap::from([(
            MANAGED_BY.0.to_string(),
            MANAGED_BY.1.to_string(),
        )])),
        annotations: Some(annotations),
        ..ObjectMeta::default()
    };
    let configuration = Some(ReportConfiguration {
        limits: ReportLimits {
            max_results: Some(i64::try_from(max_results).unwrap_or(i64::MAX)),
            status_filter: vec![
                ResultStatus::Error,
                ResultStatus::Fail,
                ResultStatus::Warn,
                ResultStatus::Skip,
            ],
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
        message: error.to_string(),
    }
}

fn read_error(error: kube::Error) -> AuditError {
    AuditError::Report {
        scope: "every namespace".to_string(),
        message: error.to_string(),
    }
}
