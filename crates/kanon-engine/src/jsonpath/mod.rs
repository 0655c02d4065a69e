//! JSONPaths (`$.spec.containers[*].image`), parsed and run within kanon's bounds: the one entry
//! point for every JSONPath of a policy or a program.
//!
//! Parsing refuses paths too long, too deeply nested, or that descend (`..`) inside a filter.
//! Running a path ([`select()`]) refers to the nodes of the document rather than copying them,
//! and visits at most [`select::MAX_JSONPATH_NODES`]; what a caller keeps is copied by
//! [`copied`], which refuses a result that would take more than
//! [`copy::MAX_JSONPATH_RESULT_BYTES`]. Before, `$..*` on an object nested 120 deep copied
//! each subtree once per ancestor: 2.5 MB of JSON became some 150 MiB (issue 34).

pub(crate) mod copy;
mod filters;
pub(crate) mod select;

use jsonpath_rust::parser::model::JpQuery;

pub use copy::copied;
pub use select::select;

/// The longest JSONPath kanon parses, in bytes.
pub const MAX_JSONPATH_BYTES: usize = 1024;
/// The deepest nesting of brackets and parentheses in a JSONPath kanon parses. The parser
/// backtracks through nested filters that do not close in time exponential in their depth
/// (found by fuzzing: 546 bytes of them took over 10 s, each level about twice the one
/// before), so deeper paths are refused before parsing; real paths nest two to four deep.
pub const MAX_JSONPATH_NESTING: usize = 8;

/// Why a JSONPath selected nothing kanon may keep.
#[derive(Debug, thiserror::Error)]
pub enum SelectionError {
    /// Running the path would visit or select more nodes than [`select::MAX_JSONPATH_NODES`].
    #[error("it visits more than {limit} nodes of the document (the bound of one JSONPath)")]
    TooManyNodes {
        /// The bound.
        limit: usize,
    },
    /// Copying what the path selected would take more than
    /// [`copy::MAX_JSONPATH_RESULT_BYTES`].
    #[error(
        "its result would take more than {} MiB once copied ({values} values selected; the bound of one JSONPath's result)",
        .limit / (1024 * 1024)
    )]
    TooLarge {
        /// The bound, in bytes.
        limit: usize,
        /// How many values the path selected.
        values: usize,
    },
    /// The JSONPath library refused the query.
    #[error(transparent)]
    Query(#[from] jsonpath_rust::parser::errors::JsonPathError),
}

/// Parses a JSONPath (`$.spec.containers[*].image`) within kanon's bounds: at most
/// [`MAX_JSONPATH_BYTES`] long, brackets and parentheses at most [`MAX_JSONPATH_NESTING`]
/// deep, and no descent (`..`) inside a filter, which the library would run once per node
/// tested, building a path string per node it passes. Every JSONPath of a policy or a
/// program goes through here.
pub fn parse_jsonpath(path: &str) -> Result<JpQuery, String> {
    if path.len() > MAX_JSONPATH_BYTES {
        return Err(format!(
            "it is {} bytes long; the limit is {MAX_JSONPATH_BYTES}",
            path.len()
        ));
    }
    let (mut depth, mut deepest) = (0usize, 0usize);
    for b in path.bytes() {
        match b {
            b'[' | b'(' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if deepest > MAX_JSONPATH_NESTING {
        return Err(format!(
            "its brackets and parentheses nest {deepest} deep; the limit is {MAX_JSONPATH_NESTING}"
        ));
    }
    let query = jsonpath_rust::parser::parse_json_path(path).map_err(|e| e.to_string())?;
    if filters::descend(&query.segments) {
        return Err(
            "it descends (`..`) inside a filter, which would walk the document once per node tested; descend outside the filter (`$..[?(@.name == 'app')]`)"
                .to_string(),
        );
    }
    Ok(query)
}
