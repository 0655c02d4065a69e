//! `Program::fields_read` held to its promise: an expression evaluated over its variables'
//! documents with every field it is not said to read removed gives the same outcome (value,
//! type, error, cost) as over the whole documents. The documents are pruned here on their own
//! terms, as a reader that skips fields would leave them: a path's end is kept whole, the
//! objects on the way keep only the fields some path goes through, and a value on the way
//! that is not an object is kept whole.

use kanon_cel::{FieldsRead, Program};
use serde_json::{Map, Value as Json};

/// The variables whose documents are pruned.
pub const PRUNED: [&str; 2] = ["object", "oldObject"];

/// What `programs` read together of `variable`.
pub fn read_by(programs: &[&Program], variable: &str) -> FieldsRead {
    let mut paths = Vec::new();
    for program in programs {
        match program.fields_read(variable) {
            FieldsRead::Whole => return FieldsRead::Whole,
            FieldsRead::Paths(more) => paths.extend(more),
        }
    }
    FieldsRead::Paths(paths)
}

/// `document` with only what `read` reaches.
pub fn pruned(document: &Json, read: &FieldsRead) -> Json {
    match read {
        FieldsRead::Whole => document.clone(),
        FieldsRead::Paths(paths) => {
            let mut kept = Json::Object(Map::new());
            let Json::Object(_) = document else {
                return document.clone();
            };
            for path in paths {
                keep(document, &mut kept, path);
            }
            kept
        }
    }
}

/// Copies what lies at `path` in `from` into `into` (an object, as `from` is).
fn keep(from: &Json, into: &mut Json, path: &[std::sync::Arc<str>]) {
    let Some((first, rest)) = path.split_first() else {
        *into = from.clone();
        return;
    };
    let (Json::Object(from), Json::Object(into)) = (from, &mut *into) else {
        return;
    };
    let Some(value) = from.get(&**first) else {
        return;
    };
    if rest.is_empty() || !value.is_object() {
        into.insert(first.to_string(), value.clone());
        return;
    }
    let slot = into
        .entry(first.to_string())
        .or_insert_with(|| Json::Object(Map::new()));
    keep(value, slot, rest);
}
