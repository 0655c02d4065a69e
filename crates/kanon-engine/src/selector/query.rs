//! A compiled label selector written in the apiserver's `labelSelector` syntax, so that a
//! listing can be filtered by the apiserver rather than read whole.

use super::{LabelMatcher, SetOp};

impl LabelMatcher {
    /// The selector as the apiserver's `labelSelector` parameter takes it (`a=b,c in (d,e),
    /// f notin (g),h,!i`); `None` when it has no requirement (every object) or holds a key or
    /// value no label can have (the apiserver would refuse the selector, where matching here
    /// just finds nothing), so the caller then reads every object and filters them itself.
    pub fn query_text(&self) -> Option<String> {
        if self.requirements.is_empty() {
            return None;
        }
        let mut parts = Vec::with_capacity(self.requirements.len());
        for r in &self.requirements {
            if !is_label_key(&r.key) || !r.values.iter().all(|v| is_label_value(v)) {
                return None;
            }
            let key = &r.key;
            parts.push(match (&r.op, r.values.as_slice()) {
                (SetOp::In, [value]) => format!("{key}={value}"),
                (SetOp::NotIn, [value]) => format!("{key}!={value}"),
                // An empty value inside a set is not written unambiguously.
                (SetOp::In | SetOp::NotIn, values) if values.iter().any(String::is_empty) => {
                    return None;
                }
                (SetOp::In, values) => format!("{key} in ({})", values.join(",")),
                (SetOp::NotIn, values) => format!("{key} notin ({})", values.join(",")),
                (SetOp::Exists, _) => key.clone(),
                (SetOp::DoesNotExist, _) => format!("!{key}"),
            });
        }
        Some(parts.join(","))
    }
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name of at most 63
/// characters.
fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part.len() <= 63
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    prefix_ok && !name.is_empty() && is_label_value(name)
}

/// A label value: empty, or at most 63 alphanumerics, `-`, `_` and `.`, beginning and ending
/// with an alphanumeric.
pub fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    let alphanumeric = |b: &u8| b.is_ascii_alphanumeric();
    value.is_empty()
        || (bytes.len() <= 63
            && bytes.first().is_some_and(alphanumeric)
            && bytes.last().is_some_and(alphanumeric)
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

    use super::LabelMatcher;

    fn matcher(labels: &[(&str, &str)], expressions: &[(&str, &str, &[&str])]) -> LabelMatcher {
        let selector = LabelSelector {
            match_labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            match_expressions: Some(
                expressions
                    .iter()
                    .map(|(key, operator, values)| LabelSelectorRequirement {
                        key: key.to_string(),
                        operator: operator.to_string(),
                        values: Some(values.iter().map(|v| v.to_string()).collect()),
                    })
                    .collect(),
            ),
        };
        let mut errors = Vec::new();
        let matcher = LabelMatcher::compile(&selector, "s", &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        matcher
    }

    #[test]
    fn selectors_are_written_as_the_apiserver_reads_them() {
        assert_eq!(matcher(&[], &[]).query_text(), None);
        assert_eq!(
            matcher(
                &[("app", "web"), ("example.com/tier", "")],
                &[
                    ("team", "In", &["a", "b"]),
                    ("env", "NotIn", &["dev"]),
                    ("zone", "NotIn", &["x", "y"]),
                    ("owner", "Exists", &[]),
                    ("legacy", "DoesNotExist", &[]),
                ],
            )
            .query_text()
            .as_deref(),
            Some("app=web,example.com/tier=,team in (a,b),env!=dev,zone notin (x,y),owner,!legacy")
        );
    }

    #[test]
    fn what_no_label_can_hold_is_left_to_the_caller() {
        // A rendered value with a space, a comma or a parenthesis would change the selector's
        // meaning or be refused; the caller lists everything and matches itself.
        for value in ["a b", "a,b", "x)", "-a", &"a".repeat(64)] {
            assert_eq!(
                matcher(&[("app", value)], &[]).query_text(),
                None,
                "{value}"
            );
        }
        for key in ["Bad_Prefix/a", "a/b/c", "/a", "a b"] {
            assert_eq!(matcher(&[(key, "v")], &[]).query_text(), None, "{key}");
        }
        assert_eq!(
            matcher(&[], &[("team", "In", &["", "a"])]).query_text(),
            None
        );
    }
}
