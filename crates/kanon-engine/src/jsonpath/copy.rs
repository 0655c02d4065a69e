//! Copying what a JSONPath selected, within a bound: the nodes a path selects may nest (`$..*`
//! selects every node and each of its ancestors), so copies of them may take the document's
//! size once per level of nesting. The copies are measured before any is made, and the
//! measuring stops as soon as they would pass the bound.

use serde_json::Value;

use super::SelectionError;

/// The most memory the copied values of one JSONPath's result may take: 16 MiB. A review's
/// JSON budget is 24 MiB for the object and its old version together, so any one node of an
/// admitted review fits; what passes it is a selection of nested nodes that copies the same
/// parts again and again.
pub const MAX_JSONPATH_RESULT_BYTES: usize = 16 * 1024 * 1024;

/// Copies of `found`, or an error naming [`MAX_JSONPATH_RESULT_BYTES`] when they would take
/// more memory than that.
pub fn copied(found: &[&Value]) -> Result<Vec<Value>, SelectionError> {
    let too_large = || SelectionError::TooLarge {
        limit: MAX_JSONPATH_RESULT_BYTES,
        values: found.len(),
    };
    let mut bytes = 0usize;
    let mut stack: Vec<&Value> = Vec::new();
    for node in found {
        stack.push(node);
        while let Some(value) = stack.pop() {
            bytes = bytes.saturating_add(size_of::<Value>());
            match value {
                Value::String(s) => bytes = bytes.saturating_add(s.len()),
                Value::Array(items) => stack.extend(items),
                Value::Object(map) => {
                    for (key, item) in map {
                        // The entry's key and its place in the map's table and index.
                        bytes = bytes.saturating_add(
                            key.len() + size_of::<String>() + 2 * size_of::<usize>(),
                        );
                        stack.push(item);
                    }
                }
                Value::Null | Value::Bool(_) | Value::Number(_) => {}
            }
            if bytes > MAX_JSONPATH_RESULT_BYTES {
                return Err(too_large());
            }
        }
    }
    Ok(found.iter().map(|v| (*v).clone()).collect())
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::{MAX_JSONPATH_RESULT_BYTES, copied};
    use crate::jsonpath::SelectionError;

    #[test]
    fn values_are_copied_whole() {
        let object = json!({"a": {"b": [1, "two", null]}, "c": true});
        let found = [&object["a"], &object["c"], &object["a"]["b"]];
        let copies = copied(&found).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            copies,
            vec![object["a"].clone(), json!(true), json!([1, "two", null])]
        );
    }

    /// One value of 12 MiB is copied; the same value selected twice is, and three times it
    /// passes the bound, which the error names.
    #[test]
    fn a_result_over_the_bound_is_refused_by_name() {
        let big = Value::String("x".repeat(6 * 1024 * 1024));
        assert!(copied(&[&big, &big]).is_ok());
        let error = copied(&[&big, &big, &big]).err();
        assert!(
            matches!(
                error,
                Some(SelectionError::TooLarge {
                    limit: MAX_JSONPATH_RESULT_BYTES,
                    values: 3
                })
            ),
            "{error:?}"
        );
        let message = error.map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("more than 16 MiB"), "{message}");
    }

    /// Values are charged their place as well as their text: a million small numbers pass
    /// the bound although their JSON is 2 MB.
    #[test]
    fn small_values_are_charged_their_place() {
        let many = Value::Array(vec![json!(0); 1_000_000]);
        assert!(copied(&[&many]).is_err());
        let fewer = Value::Array(vec![json!(0); 100_000]);
        assert!(copied(&[&fewer]).is_ok());
    }
}
