//! JSONPaths (`$.spec.containers[*].image`), parsed within kanon's bounds: the one entry point
//! for every JSONPath of a policy or a program.

use jsonpath_rust::parser::model::JpQuery;

/// The longest JSONPath kanon parses, in bytes.
pub const MAX_JSONPATH_BYTES: usize = 1024;
/// The deepest nesting of brackets and parentheses in a JSONPath kanon parses. The parser
/// backtracks through nested filters that do not close in time exponential in their depth
/// (found by fuzzing: 546 bytes of them took over 10 s, each level about twice the one
/// before), so deeper paths are refused before parsing; real paths nest two to four deep.
pub const MAX_JSONPATH_NESTING: usize = 8;

/// Parses a JSONPath (`$.spec.containers[*].image`) within kanon's bounds: at most
/// [`MAX_JSONPATH_BYTES`] long, brackets and parentheses at most [`MAX_JSONPATH_NESTING`]
/// deep. Every JSONPath of a policy or a program goes through here.
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
    jsonpath_rust::parser::parse_json_path(path).map_err(|e| e.to_string())
}
