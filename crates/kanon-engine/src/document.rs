//! Parsing of YAML and JSON text into JSON documents, with errors that name the source and line.

use serde_json::Value;

/// A document that could not be parsed.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    /// The text is not valid YAML (or JSON).
    #[error("{source_name}: invalid YAML{location}: {message}")]
    Yaml {
        /// Where the text came from (a file path).
        source_name: String,
        /// ` at line L column C`, when known.
        location: String,
        /// The parser's message.
        message: String,
    },
    /// The text is not valid JSON.
    #[error("{source_name}: invalid JSON at line {line} column {column}: {message}")]
    Json {
        /// Where the text came from (a file path).
        source_name: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// A document is not a mapping (e.g. a bare string or list).
    #[error("{source_name}: document {index} is not an object (found {found})")]
    NotAnObject {
        /// Where the text came from.
        source_name: String,
        /// 1-based position of the document in the text.
        index: usize,
        /// The JSON type found instead.
        found: &'static str,
    },
}

/// The JSON type name of a value, for messages.
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A scalar's value as text (strings as they are, numbers and booleans as JSON writes them);
/// objects, arrays and null have none.
pub fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Most documents in one YAML file or stream (a directory may hold many files).
pub const MAX_YAML_DOCUMENTS: usize = 10_000;
/// Most YAML nodes (maps, lists, scalars) in one file, aliases expanded: about 50,000 typical
/// policies, and a bound on the memory and time a file can cost however its aliases are
/// arranged.
pub const MAX_YAML_NODES: usize = 1_000_000;
/// Deepest nesting of YAML maps and lists (a policy needs a dozen levels).
pub const MAX_YAML_DEPTH: usize = 64;

/// The parser's bounds for policy YAML: the parser's defaults (which stop alias bombs, anchor
/// storms and huge scalars) with room for large policy files.
fn yaml_options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_documents = MAX_YAML_DOCUMENTS;
    budget.max_nodes = MAX_YAML_NODES;
    budget.max_depth = MAX_YAML_DEPTH;
    // Events include the expansion of every alias.
    budget.max_events = MAX_YAML_NODES;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options
}

/// The error under the parser's wrappers (a source snippet, the alias being expanded).
fn innermost(mut error: &serde_saphyr::Error) -> &serde_saphyr::Error {
    while let serde_saphyr::Error::AliasError { error: inner, .. }
    | serde_saphyr::Error::WithSnippet { error: inner, .. } = error
    {
        error = inner;
    }
    error
}

/// What a breached parser bound means, in words.
fn budget_message(breach: &serde_saphyr::budget::BudgetBreach) -> String {
    use serde_saphyr::budget::BudgetBreach as B;
    match breach {
        B::Documents { .. } => format!(
            "more than {MAX_YAML_DOCUMENTS} documents in one file (split it into several files)"
        ),
        B::Nodes { .. } => format!(
            "more than {MAX_YAML_NODES} YAML nodes in one file (split it into several files)"
        ),
        B::Depth { .. } => format!("nested deeper than {MAX_YAML_DEPTH} levels"),
        B::Aliases { .. } | B::AliasAnchorRatio { .. } | B::Anchors { .. } => {
            "too many aliases (`*name`) for its anchors: refused as an alias bomb".to_string()
        }
        B::ScalarBytes { .. } => "more than 64 MiB of text in its values".to_string(),
        B::Events { .. } => "too many YAML events once its aliases are expanded".to_string(),
        other => format!("exceeds the parser's bounds ({other:?})"),
    }
}

/// Parses every document in `text`: multi-document YAML (`---` separated) or, when `json` is
/// set, one JSON value. Empty documents are skipped; `kind: List` documents are expanded into
/// their `items`. Every document must be an object.
pub fn parse_documents(
    text: &str,
    source_name: &str,
    json: bool,
) -> Result<Vec<Value>, DocumentError> {
    Ok(parse_located_documents(text, source_name, json)?
        .into_iter()
        .map(|located| located.value)
        .collect())
}

/// A parsed document and the line it starts at.
#[derive(Debug, Clone, PartialEq)]
pub struct LocatedDocument {
    /// The document (an object).
    pub value: Value,
    /// The 1-based line of the document's first node in the text (for an item of a
    /// `kind: List`, the list's), when known: YAML only.
    pub line: Option<usize>,
}

/// [`parse_documents`], each document with the line it starts at, so that a message about
/// it can point there (`policies.yaml:12`).
pub fn parse_located_documents(
    text: &str,
    source_name: &str,
    json: bool,
) -> Result<Vec<LocatedDocument>, DocumentError> {
    let raw: Vec<(Value, Option<usize>)> = if json {
        let value: Value = serde_json::from_str(text).map_err(|e| DocumentError::Json {
            source_name: source_name.to_string(),
            line: e.line(),
            column: e.column(),
            message: strip_location(&e.to_string()),
        })?;
        match value {
            // A JSON array of objects is a common way to hand over several objects.
            Value::Array(items) => items.into_iter().map(|item| (item, None)).collect(),
            other => vec![(other, None)],
        }
    } else {
        serde_saphyr::from_multiple_with_options::<serde_saphyr::Spanned<Value>>(
            text,
            yaml_options(),
        )
        .map_err(|e| yaml_error(&e, source_name))?
        .into_iter()
        .map(|spanned| {
            let line = spanned.referenced.line();
            (spanned.value, (line > 0).then_some(line as usize))
        })
        .collect()
    };
    let mut out = Vec::with_capacity(raw.len());
    for (i, (doc, line)) in raw.into_iter().enumerate() {
        let not_an_object = |found: &Value| DocumentError::NotAnObject {
            source_name: source_name.to_string(),
            index: i + 1,
            found: type_name(found),
        };
        match doc {
            Value::Null => {}
            Value::Object(mut map) => {
                let is_list = map
                    .get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| k.ends_with("List"))
                    && map.get("items").is_some_and(Value::is_array);
                if is_list {
                    if let Some(Value::Array(items)) = map.remove("items") {
                        for item in items {
                            if !item.is_object() {
                                return Err(not_an_object(&item));
                            }
                            out.push(LocatedDocument { value: item, line });
                        }
                    }
                } else {
                    out.push(LocatedDocument {
                        value: Value::Object(map),
                        line,
                    });
                }
            }
            other => return Err(not_an_object(&other)),
        }
    }
    Ok(out)
}

/// A YAML parse error as [`DocumentError::Yaml`]: the location once, the parser's bounds in
/// words.
fn yaml_error(e: &serde_saphyr::Error, source_name: &str) -> DocumentError {
    DocumentError::Yaml {
        source_name: source_name.to_string(),
        location: e
            .location()
            .map(|l| format!(" at line {} column {}", l.line(), l.column()))
            .unwrap_or_default(),
        message: if let serde_saphyr::Error::Budget { breach, .. } = innermost(e) {
            budget_message(breach)
        } else {
            // The plain message; the location is given once, by `location`.
            let plain = e.without_snippet().to_string();
            let plain = plain.strip_prefix("error: ").unwrap_or(&plain).to_string();
            let plain = match plain.split_once(": ") {
                Some((head, rest)) if head.starts_with("line ") => rest,
                _ => plain.as_str(),
            };
            let plain = match plain.rfind(" at line ") {
                Some(at) => &plain[..at],
                None => plain,
            };
            if plain.contains("recursion limit exceeded") {
                format!("nested deeper than {MAX_YAML_DEPTH} levels")
            } else {
                plain.to_string()
            }
        },
    }
}

/// serde_json appends " at line L column C" to its messages; the error says it already.
fn strip_location(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn located_documents_carry_their_first_line() {
        let text = "# a comment\na: 1\n---\n\n---\nkind: List\napiVersion: v1\nitems:\n- b: 2\n- c: 3\n---\n# lead\nd: 4\n";
        let docs = parse_located_documents(text, "x.yaml", false).unwrap();
        let lines: Vec<Option<usize>> = docs.iter().map(|d| d.line).collect();
        assert_eq!(lines, vec![Some(2), Some(6), Some(6), Some(13)]);
        let json = parse_located_documents("[{\"a\": 1}]", "x.json", true).unwrap();
        assert_eq!(json[0].line, None);
    }

    #[test]
    fn yaml_multi_document_skips_empty_and_expands_lists() {
        let text = "a: 1\n---\n---\nkind: List\napiVersion: v1\nitems:\n- b: 2\n- c: 3\n";
        let docs = parse_documents(text, "x.yaml", false).unwrap();
        assert_eq!(
            docs,
            vec![
                serde_json::json!({"a": 1}),
                serde_json::json!({"b": 2}),
                serde_json::json!({"c": 3})
            ]
        );
    }

    #[test]
    fn bad_yaml_names_file_and_line() {
        let err = parse_documents("a: 1\nb: [1, 2\nc: 3\n", "bad.yaml", false)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("bad.yaml: invalid YAML at line "), "{err}");
    }

    #[test]
    fn bad_json_names_file_line_and_column() {
        let err = parse_documents("{\n  \"a\": ,\n}", "bad.json", true)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("bad.json: invalid JSON at line 2 column"),
            "{err}"
        );
    }

    #[test]
    fn scalar_document_is_rejected() {
        let err = parse_documents("just a string\n", "s.yaml", false)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "s.yaml: document 1 is not an object (found string)");
    }

    #[test]
    fn json_array_gives_one_document_per_item() {
        let docs = parse_documents("[{\"a\":1},{\"b\":2}]", "x.json", true).unwrap();
        assert_eq!(docs.len(), 2);
    }
}
