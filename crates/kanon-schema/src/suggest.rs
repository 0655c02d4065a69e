//! What an unknown `apiVersion` + `kind` probably meant.

use std::fmt;

use crate::distance::{edit_distance, max_distance};
use crate::{Kind, Schema};

/// What was probably meant by an `apiVersion` and `kind` that name no served kind; see
/// [`Schema::suggest_kind`]. Its `Display` is the hint to append to a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KindSuggestion<'s> {
    /// A kind of exactly this name exists, at other apiVersions (`Pod` asked at `apps/v1` is
    /// served at `v1`). Displays as "`Pod` is served at `v1`".
    ServedAt(Vec<&'s Kind>),
    /// No kind has this name; this one is the nearest by spelling, ignoring case (`pod` →
    /// `Pod` at `v1`). Displays as "did you mean `Pod` (v1)?".
    DidYouMean(&'s Kind),
}

impl fmt::Display for KindSuggestion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KindSuggestion::ServedAt(kinds) => {
                let Some(first) = kinds.first() else {
                    return Ok(());
                };
                write!(f, "`{}` is served at ", first.kind)?;
                for (index, kind) in kinds.iter().enumerate() {
                    if index > 0 {
                        f.write_str(if index + 1 == kinds.len() {
                            " and "
                        } else {
                            ", "
                        })?;
                    }
                    write!(f, "`{}`", kind.api_version)?;
                }
                Ok(())
            }
            KindSuggestion::DidYouMean(kind) => {
                write!(f, "did you mean `{}` ({})?", kind.kind, kind.api_version)
            }
        }
    }
}

impl Schema {
    /// For an `api_version` and `kind` that [`kind`](Self::kind) does not find: the same
    /// kind at the apiVersions that serve it, else the kind nearest in spelling (ignoring case,
    /// a few edits at most; one at `api_version` first, then one in the same group). `None`
    /// when the kind exists as asked or nothing is near.
    pub fn suggest_kind(&self, api_version: &str, kind: &str) -> Option<KindSuggestion<'_>> {
        if self.kind(api_version, kind).is_some() {
            return None;
        }
        suggest_among(self.kinds(), api_version, kind)
    }
}

/// What `api_version` and `kind` (found in none of `candidates`) probably meant, among
/// `candidates` (sorted): the same kind at other apiVersions, else the nearest in spelling,
/// ignoring case, a few edits at most (one at `api_version` first, then one in the same group).
pub(crate) fn suggest_among<'s>(
    candidates: impl IntoIterator<Item = &'s Kind> + Clone,
    api_version: &str,
    kind: &str,
) -> Option<KindSuggestion<'s>> {
    let served: Vec<&Kind> = candidates
        .clone()
        .into_iter()
        .filter(|candidate| candidate.kind == kind)
        .collect();
    if !served.is_empty() {
        return Some(KindSuggestion::ServedAt(served));
    }
    let lower = kind.to_lowercase();
    let group = crate::group_version(api_version).0;
    candidates
        .into_iter()
        .map(|candidate| {
            let distance = edit_distance(&lower, &candidate.kind.to_lowercase());
            let rank = (
                distance,
                candidate.api_version != api_version,
                candidate.group() != group,
            );
            (rank, candidate)
        })
        .filter(|((distance, _, _), _)| *distance <= max_distance(kind))
        // The first of equal ranks wins: the kinds are sorted, so this is stable.
        .min_by_key(|(rank, _)| *rank)
        .map(|(_, candidate)| KindSuggestion::DidYouMean(candidate))
}
