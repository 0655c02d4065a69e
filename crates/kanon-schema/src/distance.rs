//! Edit distance, for "did you mean" suggestions.

/// The number of single-character insertions, deletions, substitutions and swaps of two
/// neighbours that turn `a` into `b` (optimal string alignment distance), by characters and
/// case-sensitive: `replica` → `replicas` is 1, `Deploymnet` → `Deployment` is 1.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rows of the dynamic-programming table: two back (for swaps), one back, current.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(before[j - 2] + 1);
            }
            current[j] = best;
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

/// The largest case-insensitive distance at which a candidate still counts as a misspelling of
/// `word`: a third of its length, at least 1. Further away, a suggestion is more likely wrong
/// than helpful.
pub(crate) fn max_distance(word: &str) -> usize {
    (word.chars().count() / 3).max(1)
}

/// The candidate nearest to `word`, ignoring case, if it is near enough to be a likely
/// misspelling (within a third of `word`'s length, at least one edit). Ties go to the candidate
/// whose case matches more closely, then to the earlier one.
pub fn nearest<'c, I>(word: &str, candidates: I) -> Option<&'c str>
where
    I: IntoIterator<Item = &'c str>,
{
    let lower = word.to_lowercase();
    let limit = max_distance(word);
    candidates
        .into_iter()
        .filter(|&candidate| candidate != word)
        .map(|candidate| {
            let distance = edit_distance(&lower, &candidate.to_lowercase());
            (distance, edit_distance(word, candidate), candidate)
        })
        .filter(|&(distance, _, _)| distance <= limit)
        // `min_by_key` keeps the first of equal keys, so ties go to the earlier candidate.
        .min_by_key(|&(distance, exact, _)| (distance, exact))
        .map(|(_, _, candidate)| candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("replica", "replicas"), 1);
        assert_eq!(edit_distance("Deploymnet", "Deployment"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("pod", "Pod"), 1);
        assert_eq!(edit_distance("ü", "u"), 1);
    }

    #[test]
    fn nearest_ignores_case_and_prefers_the_closer_case() {
        assert_eq!(nearest("pod", ["Node", "Pod"]), Some("Pod"));
        assert_eq!(nearest("replica", ["replicas", "paused"]), Some("replicas"));
        assert_eq!(nearest("image", ["IMAGE", "Image"]), Some("Image"));
        assert_eq!(nearest("xyz", ["replicas", "paused"]), None);
        // The word itself is no suggestion.
        assert_eq!(nearest("name", ["name"]), None);
    }
}
