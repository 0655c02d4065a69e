//! What a `kanon test` run found: each suite, its cases (passed or failed, each with its
//! place in the suite file) and the warnings of its policies. Every output format prints this.

use serde::Serialize;

use crate::inputs::Place;

/// A whole run, suite by suite in the order found.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Run {
    pub(crate) suites: Vec<SuiteRun>,
}

/// One suite file's run.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SuiteRun {
    /// Its `name`, or its folder.
    pub(crate) name: String,
    /// The suite file.
    pub(crate) file: String,
    /// The cases run (those selected), and under `strict` a failing check per policy warning.
    pub(crate) cases: Vec<CaseRun>,
    /// Why the suite could not run (bad input: exit status 2); its cases are then empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) errors: Vec<String>,
    /// The warnings of the suite's policies.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) warnings: Vec<PolicyWarning>,
    /// What is worth knowing but wrong with nothing (documents skipped as not policies,
    /// Namespaces assumed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) notes: Vec<String>,
    /// Whether a policy warning fails the suite (`--strict` or the suite's `strict`).
    pub(crate) strict: bool,
    /// Wall time, in seconds.
    pub(crate) seconds: f64,
}

/// One case, or under `strict` one policy's warnings, as a check that passed or failed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CaseRun {
    /// The case's `name`, or its operation and resource (`CREATE Pod/shop/web-0`); for a
    /// strict check, `policy Kind/name has no warnings`.
    pub(crate) name: String,
    /// Where it is written: the case in the suite file, or the policy's document.
    #[serde(serialize_with = "place_text")]
    pub(crate) place: Place,
    /// Each difference from what the case expects; empty when it passed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) failures: Vec<String>,
    /// What each policy that judged the resource did (`--detailed`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) policies: Vec<PolicyVerdict>,
    /// Wall time, in seconds.
    pub(crate) seconds: f64,
}

impl CaseRun {
    /// Whether the case passed.
    pub(crate) fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// What one policy did with a case's request (`--detailed`).
#[derive(Debug, Serialize)]
pub(crate) struct PolicyVerdict {
    /// `Kind/name`.
    pub(crate) policy: String,
    /// `passed`, `rejected`, `exempted`, `mutated`, `unchanged`, `failed: <reason>` or
    /// `failed (ignored): <reason>`.
    pub(crate) outcome: String,
    /// The policy's messages and warnings on the request.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) said: Vec<String>,
}

/// A warning on one of a suite's policies: a likely mistake (a field no selected kind has)
/// that does not make the policy invalid.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PolicyWarning {
    /// `Kind/name`.
    pub(crate) policy: String,
    /// The policy's document, when read from a file.
    #[serde(serialize_with = "optional_place_text")]
    pub(crate) place: Option<Place>,
    /// The warning, with its field path.
    pub(crate) message: String,
}

impl PolicyWarning {
    /// `<policy> (<file>:<line>): <message>`, as the text output and a JUnit report write it.
    pub(crate) fn line(&self) -> String {
        match &self.place {
            Some(place) => format!("{} ({place}): {}", self.policy, self.message),
            None => format!("{}: {}", self.policy, self.message),
        }
    }
}

fn place_text<S: serde::Serializer>(place: &Place, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(place)
}

fn optional_place_text<S: serde::Serializer>(
    place: &Option<Place>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match place {
        Some(place) => serializer.collect_str(place),
        None => serializer.serialize_none(),
    }
}

/// Counts of a run or a suite.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Tally {
    pub(crate) passed: usize,
    pub(crate) failed: usize,
    /// Suites that could not run.
    pub(crate) errors: usize,
}

impl SuiteRun {
    /// The suite's counts.
    pub(crate) fn tally(&self) -> Tally {
        let failed = self.cases.iter().filter(|c| !c.passed()).count();
        Tally {
            passed: self.cases.len() - failed,
            failed,
            errors: usize::from(!self.errors.is_empty()),
        }
    }
}

impl Run {
    /// The run's counts.
    pub(crate) fn tally(&self) -> Tally {
        self.suites
            .iter()
            .map(SuiteRun::tally)
            .fold(Tally::default(), |sum, t| Tally {
                passed: sum.passed + t.passed,
                failed: sum.failed + t.failed,
                errors: sum.errors + t.errors,
            })
    }

    /// The run as JSON: `suites` (with `fail_only`, each suite's passing cases left out) and
    /// `summary`, the counts.
    pub(crate) fn to_json(&self, fail_only: bool) -> serde_json::Value {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if fail_only && let Some(suites) = value["suites"].as_array_mut() {
            for suite in suites {
                if let Some(cases) = suite["cases"].as_array_mut() {
                    cases.retain(|case| case.get("failures").is_some());
                }
            }
        }
        value["summary"] = serde_json::to_value(self.tally()).unwrap_or_default();
        value
    }

    /// The exit status: 2 when a suite could not run, 1 when a case failed, else 0.
    pub(crate) fn exit_code(&self) -> u8 {
        let tally = self.tally();
        if tally.errors > 0 {
            2
        } else if tally.failed > 0 {
            1
        } else {
            0
        }
    }
}
