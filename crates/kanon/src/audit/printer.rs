//! What `kanon audit` prints of the findings the filters keep: a line per object as it is
//! judged (json), or everything at the end (the text tables, the reports).

use std::collections::BTreeMap;
use std::sync::Arc;

use kanon_api::ResultStatus;
use kanon_cluster::audit::book::{Book, KindKey, Subject, Tally};
use kanon_cluster::audit::reports::render;
use kanon_engine::Finding;

use super::AuditOutput;
use super::table::{Align, MAX_WIDTH, Table};

/// Prints findings as they come, or reports at the end.
pub struct Printer {
    output: AuditOutput,
    /// What the findings add up to, per report scope and kind: the reports, the counts per
    /// policy, and whether something failed.
    pub book: Book,
    max_results: usize,
    /// Whether the text output lists passes too (`--result pass`).
    lists_passes: bool,
    /// Whether an object with no findings is printed (json): not when filters left it none.
    prints_bare_objects: bool,
    /// The rows of the text output's findings table, kept to print sorted.
    rows: Vec<Row>,
    /// Findings the text output counts and does not list: those of objects a controller made
    /// from a workload, found as the workload was (as the reports fold them).
    folded: usize,
    /// Some kind could not be read to its end.
    pub unread: bool,
}

/// A finding as the text output lists it; ordered most urgent first, then by kind, object,
/// policy and rule.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Row {
    urgency: usize,
    result: ResultStatus,
    kind: KindKey,
    object: String,
    policy: Arc<str>,
    rule: Option<String>,
    message: String,
}

impl Printer {
    /// A printer of `output`, whose reports hold at most `max_results` results each.
    pub fn new(output: AuditOutput, max_results: usize, filter: &super::Filter) -> Self {
        Printer {
            output,
            book: Book::new(max_results),
            max_results,
            lists_passes: filter.lists_passes(),
            prints_bare_objects: !filter.narrows_findings(),
            rows: Vec::new(),
            folded: 0,
            unread: false,
        }
    }

    /// Takes the findings the filters kept of `subject` (the book has them already); those of
    /// the `folded` policies the book counted without listing, and the text output does too.
    pub fn object(
        &mut self,
        subject: &Subject,
        findings: Vec<Finding>,
        folded: Option<&[Arc<str>]>,
    ) {
        match self.output {
            AuditOutput::Text => {
                let folded = folded.unwrap_or_default();
                let (hidden, kept): (Vec<Finding>, Vec<Finding>) = findings
                    .into_iter()
                    .partition(|f| folded.contains(&f.policy));
                let lists_passes = self.lists_passes;
                self.folded += hidden
                    .iter()
                    .filter(|f| lists_passes || f.result != ResultStatus::Pass)
                    .count();
                let listed = kept
                    .into_iter()
                    .filter(|f| self.lists_passes || f.result != ResultStatus::Pass);
                let rows: Vec<Row> = listed.map(|f| row(subject, f)).collect();
                self.rows.extend(rows);
            }
            AuditOutput::Json if self.prints_bare_objects || !findings.is_empty() => {
                println!("{}", json_line(subject, &findings));
            }
            AuditOutput::Json | AuditOutput::Reports => {}
        }
    }

    /// Forgets the rows of `kind` (read again from its start).
    pub fn forget(&mut self, kind: &KindKey) {
        self.rows.retain(|row| &row.kind != kind);
    }

    /// Prints what is left to print; whether nothing failed: no finding is a failure or an
    /// error, and every kind was read.
    pub fn finish(mut self) -> Result<bool, String> {
        let tallies = self.book.tallies();
        match self.output {
            AuditOutput::Text => {
                self.rows.sort();
                for line in text(&self.rows, &tallies) {
                    println!("{line}");
                }
                if self.folded > 0 {
                    println!(
                        "{} result{} of objects a controller made from a workload above, found as the workload was, counted and not listed (as the reports do)",
                        self.folded,
                        if self.folded == 1 { "" } else { "s" }
                    );
                }
            }
            AuditOutput::Json => {}
            AuditOutput::Reports => print!("{}", self.reports()?),
        }
        Ok(!self.unread && !failing(&tallies))
    }

    /// The reports of the book, as YAML documents.
    fn reports(&self) -> Result<String, String> {
        let mut documents = Vec::new();
        for scope in self.book.scopes() {
            let Some(content) = self.book.report(scope) else {
                continue;
            };
            let report = render(scope, &content, self.max_results)
                .to_value()
                .map_err(|e| e.to_string())?;
            documents.push(serde_saphyr::to_string(&report).map_err(|e| e.to_string())?);
        }
        Ok(documents.join("---\n"))
    }
}

fn row(subject: &Subject, finding: Finding) -> Row {
    Row {
        urgency: finding.result.urgency(),
        result: finding.result,
        kind: subject.kind.clone(),
        object: object_name(subject),
        policy: finding.policy,
        rule: finding.rule,
        message: finding.message,
    }
}

fn json_line(subject: &Subject, findings: &[Finding]) -> serde_json::Value {
    serde_json::json!({
        "object": {
            "apiVersion": subject.kind.api_version,
            "kind": subject.kind.kind,
            "namespace": subject.namespace,
            "name": subject.name,
        },
        "findings": findings,
    })
}

/// Whether some finding counted is a failure or an error.
fn failing(tallies: &BTreeMap<Arc<str>, Tally>) -> bool {
    tallies
        .values()
        .any(|t| t.count(ResultStatus::Fail) + t.count(ResultStatus::Error) > 0)
}

/// The text output: the findings table (when there are rows), a blank line, and the counts
/// per policy.
fn text(rows: &[Row], tallies: &BTreeMap<Arc<str>, Tally>) -> Vec<String> {
    let mut lines = Vec::new();
    if !rows.is_empty() {
        lines.extend(findings_table(rows).lines());
        lines.push(String::new());
    }
    lines.extend(counts_table(tallies).lines());
    lines
}

fn findings_table(rows: &[Row]) -> Table<'static> {
    Table {
        header: &["RESULT", "KIND", "OBJECT", "POLICY", "RULE", "MESSAGE"],
        align: &[Align::Left; 6],
        cap: MAX_WIDTH,
        rows: rows
            .iter()
            .map(|row| {
                vec![
                    row.result.to_string(),
                    row.kind.to_string(),
                    row.object.clone(),
                    row.policy.to_string(),
                    row.rule.clone().unwrap_or_else(|| "-".to_string()),
                    row.message.clone(),
                ]
            })
            .collect(),
    }
}

fn counts_table(tallies: &BTreeMap<Arc<str>, Tally>) -> Table<'static> {
    const COLUMNS: [ResultStatus; 5] = [
        ResultStatus::Pass,
        ResultStatus::Fail,
        ResultStatus::Warn,
        ResultStatus::Error,
        ResultStatus::Skip,
    ];
    Table {
        header: &["POLICY", "PASS", "FAIL", "WARN", "ERROR", "SKIP"],
        align: &[
            Align::Left,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
            Align::Right,
        ],
        // Policy names are bounded and one row each: the column fits the longest, so that no
        // row's counts stray from their columns.
        cap: usize::MAX,
        rows: tallies
            .iter()
            .map(|(policy, tally)| {
                std::iter::once(policy.to_string())
                    .chain(COLUMNS.iter().map(|&r| tally.count(r).to_string()))
                    .collect()
            })
            .collect(),
    }
}

fn object_name(subject: &Subject) -> String {
    match &subject.namespace {
        Some(namespace) => format!("{namespace}/{}", subject.name),
        None => subject.name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject(kind: &str, namespace: Option<&str>, name: &str) -> Subject {
        Subject {
            kind: KindKey::new("v1", kind),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
            uid: String::new(),
        }
    }

    fn finding(policy: &str, rule: Option<&str>, result: ResultStatus, message: &str) -> Finding {
        Finding {
            policy: Arc::from(policy),
            rule: rule.map(str::to_string),
            result,
            message: message.to_string(),
            severity: None,
            category: None,
        }
    }

    fn tally(counts: [(ResultStatus, u64); 2]) -> Tally {
        let mut tally = Tally::default();
        for (result, count) in counts {
            tally.0[result.urgency()] = count;
        }
        tally
    }

    #[test]
    fn the_text_output_is_two_tables_sized_to_their_content() {
        let shop = subject("ConfigMap", Some("shop"), "a-config-map-with-a-long-name");
        let cluster = subject("Namespace", None, "shop");
        let mut rows = vec![
            row(
                &shop,
                finding(
                    "ClusterValidatePolicy/no-debug",
                    Some("no-debug"),
                    ResultStatus::Warn,
                    "debug must be off",
                ),
            ),
            row(
                &cluster,
                finding(
                    "ClusterValidatePolicy/owner",
                    None,
                    ResultStatus::Fail,
                    "a namespace needs an owner",
                ),
            ),
        ];
        rows.sort();
        let tallies = BTreeMap::from([
            (
                Arc::from("ClusterValidatePolicy/no-debug"),
                tally([(ResultStatus::Pass, 12), (ResultStatus::Warn, 1)]),
            ),
            (
                Arc::from("ClusterValidatePolicy/owner"),
                tally([(ResultStatus::Pass, 0), (ResultStatus::Fail, 1)]),
            ),
        ]);
        let expected = [
            "RESULT  KIND          OBJECT                              POLICY                          RULE      MESSAGE",
            "fail    v1/Namespace  shop                                ClusterValidatePolicy/owner     -         a namespace needs an owner",
            "warn    v1/ConfigMap  shop/a-config-map-with-a-long-name  ClusterValidatePolicy/no-debug  no-debug  debug must be off",
            "",
            "POLICY                          PASS  FAIL  WARN  ERROR  SKIP",
            "ClusterValidatePolicy/no-debug    12     0     1      0     0",
            "ClusterValidatePolicy/owner        0     1     0      0     0",
        ];
        assert_eq!(text(&rows, &tallies), expected);
        assert!(failing(&tallies));
    }

    #[test]
    fn without_findings_to_list_the_counts_stand_alone() {
        let tallies = BTreeMap::from([(
            Arc::from("ValidatePolicy/shop/a-policy-with-a-name-longer-than-the-old-columns-were"),
            tally([(ResultStatus::Pass, 3), (ResultStatus::Skip, 1)]),
        )]);
        assert_eq!(
            text(&[], &tallies),
            [
                "POLICY                                                                     PASS  FAIL  WARN  ERROR  SKIP",
                "ValidatePolicy/shop/a-policy-with-a-name-longer-than-the-old-columns-were     3     0     0      0     1",
            ]
        );
        assert!(!failing(&tallies));
        assert_eq!(
            text(&[], &BTreeMap::new()),
            ["POLICY  PASS  FAIL  WARN  ERROR  SKIP"]
        );
    }

    #[test]
    fn passes_are_listed_when_asked_for_and_bare_objects_only_without_finding_filters() {
        let filter = crate::audit::Filter::default();
        let mut printer = Printer::new(AuditOutput::Text, 10, &filter);
        let shop = subject("ConfigMap", Some("shop"), "a");
        printer.object(
            &shop,
            vec![
                finding("ClusterValidatePolicy/p", None, ResultStatus::Pass, ""),
                finding("ClusterValidatePolicy/p", None, ResultStatus::Fail, "no"),
            ],
            None,
        );
        assert_eq!(printer.rows.len(), 1);
        assert!(printer.prints_bare_objects);
        printer.lists_passes = true;
        printer.object(
            &shop,
            vec![finding(
                "ClusterValidatePolicy/p",
                None,
                ResultStatus::Pass,
                "",
            )],
            None,
        );
        assert_eq!(printer.rows.len(), 2);
        // What the book folded into a workload's results is counted, not listed.
        let folded: Vec<Arc<str>> = vec!["ClusterValidatePolicy/p".into()];
        printer.object(
            &shop,
            vec![
                finding("ClusterValidatePolicy/p", None, ResultStatus::Fail, "no"),
                finding("ClusterValidatePolicy/q", None, ResultStatus::Fail, "no"),
            ],
            Some(&folded),
        );
        assert_eq!(printer.rows.len(), 3);
        assert_eq!(printer.folded, 1);
        printer.forget(&KindKey::new("v1", "ConfigMap"));
        assert!(printer.rows.is_empty());
    }
}
