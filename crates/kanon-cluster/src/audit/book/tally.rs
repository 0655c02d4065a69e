//! The tally a report keeps in its [`TALLY_ANNOTATION`]: each kind's counts per policy, so that
//! a replica resuming an audit another began, or recording an object it admitted, counts as
//! the auditor did. It is compact, so as not to crowd the report: each policy is named once,
//! grouped by the kind of policy, and a kind's counts name policies by their place in that
//! list, policies in a row with the same counts as one range:
//!
//! ```json
//! {"policies":{"ClusterValidatePolicy":["no-privileged","probes"],"ValidatePolicy":["shop/x"]},
//!  "kinds":{"apps/v1 Deployment":"0-1:3","v1 Pod":"0:4.2/0.2 1-2:6"}}
//! ```
//!
//! Counts are `pass.fail.warn.error.skip` (the summary's order), trailing zeros left out; after
//! a `/`, how many of them are of objects made from a workload whose result stands for them
//! (counted, not listed). The form of earlier kanons, `{"v1 Pod": {"POLICY": [error, fail,
//! warn, skip, pass]}}`, is read too.
//!
//! [`TALLY_ANNOTATION`]: super::TALLY_ANNOTATION

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kanon_api::ResultStatus;
use serde::{Deserialize, Serialize};

use super::{KindKey, Ledger, Tally};

/// A kind's counts per policy, and of those the ones folded into workloads' results.
pub(super) type Counts = (BTreeMap<Arc<str>, Tally>, BTreeMap<Arc<str>, Tally>);

/// The order counts are written in: the summary's.
const ORDER: [ResultStatus; 5] = [
    ResultStatus::Pass,
    ResultStatus::Fail,
    ResultStatus::Warn,
    ResultStatus::Error,
    ResultStatus::Skip,
];

#[derive(Debug, Default, Serialize, Deserialize)]
struct Compact {
    /// Policy names by the kind of policy (a policy's label up to its first `/`).
    policies: BTreeMap<String, Vec<String>>,
    /// Each kind's counts (`apps/v1 Deployment`).
    kinds: BTreeMap<String, String>,
}

/// A policy's label as its kind and the rest.
fn split(label: &str) -> (&str, &str) {
    label.split_once('/').unwrap_or(("", label))
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}/{name}")
    }
}

/// The annotation of a scope's ledgers.
pub(super) fn write(kinds: &BTreeMap<KindKey, Ledger>) -> String {
    let mut names: Vec<(&str, &str)> = kinds
        .values()
        .flat_map(|ledger| ledger.tallies.keys())
        .map(|label| split(label))
        .collect();
    names.sort_unstable();
    names.dedup();
    let place: HashMap<(&str, &str), usize> = names
        .iter()
        .enumerate()
        .map(|(i, name)| (*name, i))
        .collect();
    let mut compact = Compact::default();
    for (prefix, name) in &names {
        compact
            .policies
            .entry(prefix.to_string())
            .or_default()
            .push(name.to_string());
    }
    for (kind, ledger) in kinds {
        let mut counted: Vec<(usize, String)> = ledger
            .tallies
            .iter()
            .map(|(policy, tally)| {
                let folded = ledger.folded.get(policy).copied().unwrap_or_default();
                let mut text = counts(tally);
                if folded != Tally::default() {
                    text = format!("{text}/{}", counts(&folded));
                }
                (place[&split(policy)], text)
            })
            .collect();
        if counted.is_empty() {
            continue;
        }
        counted.sort_unstable();
        let mut runs: Vec<(usize, usize, &str)> = Vec::new();
        for (at, text) in &counted {
            match runs.last_mut() {
                Some((_, last, same)) if *last + 1 == *at && *same == text.as_str() => *last = *at,
                _ => runs.push((*at, *at, text)),
            }
        }
        let text: Vec<String> = runs
            .into_iter()
            .map(|(first, last, counts)| match first == last {
                true => format!("{first}:{counts}"),
                false => format!("{first}-{last}:{counts}"),
            })
            .collect();
        compact.kinds.insert(kind.label(), text.join(" "));
    }
    serde_json::to_string(&compact).unwrap_or_default()
}

/// `pass.fail.warn.error.skip`, trailing zeros left out.
fn counts(tally: &Tally) -> String {
    let counts: Vec<u64> = ORDER.iter().map(|r| tally.count(*r)).collect();
    let len = counts
        .iter()
        .rposition(|c| *c != 0)
        .map_or(1, |last| last + 1);
    counts[..len]
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(".")
}

fn parse_counts(text: &str) -> Option<Tally> {
    let mut tally = Tally::default();
    for (result, count) in ORDER.iter().zip(text.split('.')) {
        tally.0[result.urgency()] = count.parse().ok()?;
    }
    (text.split('.').count() <= ORDER.len()).then_some(tally)
}

/// Each kind's counts as the annotation says, in this form or the earlier one; what cannot be
/// read is left out (the kind is counted again when it is read).
pub(super) fn read(text: &str) -> BTreeMap<KindKey, Counts> {
    match serde_json::from_str::<Compact>(text) {
        Ok(compact) => read_compact(compact),
        Err(_) => read_earlier(text),
    }
}

fn read_compact(compact: Compact) -> BTreeMap<KindKey, Counts> {
    let policies: Vec<Arc<str>> = compact
        .policies
        .iter()
        .flat_map(|(prefix, names)| names.iter().map(|name| Arc::from(join(prefix, name))))
        .collect();
    let mut kinds = BTreeMap::new();
    for (label, text) in compact.kinds {
        let Some(kind) = KindKey::parse(&label) else {
            continue;
        };
        let mut read: Counts = Default::default();
        for run in text.split_whitespace() {
            let Some((places, counted)) = run.split_once(':') else {
                continue;
            };
            let (first, last) = places.split_once('-').unwrap_or((places, places));
            let (Ok(first), Ok(last)) = (first.parse::<usize>(), last.parse::<usize>()) else {
                continue;
            };
            let (counted, folded) = match counted.split_once('/') {
                Some((counted, folded)) => (counted, Some(folded)),
                None => (counted, None),
            };
            let Some(tally) = parse_counts(counted) else {
                continue;
            };
            let folded = folded.and_then(parse_counts);
            for policy in policies.iter().take(last.saturating_add(1)).skip(first) {
                read.0.insert(policy.clone(), tally);
                if let Some(folded) = folded {
                    read.1.insert(policy.clone(), folded);
                }
            }
        }
        kinds.insert(kind, read);
    }
    kinds
}

/// `{"v1 Pod": {"POLICY": [error, fail, warn, skip, pass]}}`, as kanon wrote it before.
fn read_earlier(text: &str) -> BTreeMap<KindKey, Counts> {
    let earlier: BTreeMap<String, BTreeMap<String, Tally>> =
        serde_json::from_str(text).unwrap_or_default();
    earlier
        .into_iter()
        .filter_map(|(label, policies)| {
            let kind = KindKey::parse(&label)?;
            let counted = policies
                .into_iter()
                .map(|(policy, tally)| (Arc::from(policy), tally))
                .collect();
            Some((kind, (counted, BTreeMap::new())))
        })
        .collect()
}
