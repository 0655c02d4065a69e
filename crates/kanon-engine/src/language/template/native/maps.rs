//! Label, annotation and node selector maps, changed natively.

use serde_json::{Map, Value};

use super::MAX_MAP_ENTRIES;
use super::ops::{Ops, all_equal, changes, program_equal};
use crate::helpers;
use crate::podspec::{self};
use crate::pointer::{entry, member};

/// Which string map a template edits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapAt {
    /// `/metadata/annotations`.
    Annotations,
    /// `/metadata/labels`.
    Labels,
    /// The pod spec's `nodeSelector`.
    NodeSelector,
}

/// How a template edits a string map.
#[derive(Clone, Debug)]
pub(crate) enum MapEdit {
    /// Remove these keys (`keys`: the same keys as a JSON list, as the program passes them).
    Remove { names: Vec<String>, keys: Value },
    /// Set these entries (an object of strings).
    Set(Value),
    /// Set this key to the text of `refs.value`.
    SetFromRef(String),
    /// Set these entries where the map has none (`default`).
    Default(Value),
    /// Set this key to the text of `refs.value` where the map has none (`default`).
    DefaultFromRef(String),
}

/// Where an object keeps its labels.
pub(super) const LABELS: &str = "/metadata/labels";
/// Where an object keeps its annotations.
pub(super) const ANNOTATIONS: &str = "/metadata/annotations";

/// annotations, labels, nodeSelector: one `add` of the whole map.
pub(super) fn map_change(
    at: MapAt,
    edit: &MapEdit,
    object: &Value,
    refs: &Map<String, Value>,
    ops: &mut Ops,
) -> Option<()> {
    let (path, found) = match at {
        MapAt::Annotations => (
            ANNOTATIONS.to_string(),
            crate::pointer::find(object, ANNOTATIONS),
        ),
        MapAt::Labels => (LABELS.to_string(), crate::pointer::find(object, LABELS)),
        MapAt::NodeSelector => match podspec::pod_spec(object) {
            Some((spec_path, spec)) => (
                crate::pointer::join(spec_path.as_str(), &["nodeSelector"]),
                member(spec, "nodeSelector"),
            ),
            None => return Some(()),
        },
    };
    // `pointer(object, map_path) | default({})`: absent and null are an empty map.
    let empty = Value::Object(Map::new());
    let found = found.filter(|v| !v.is_null());
    let present = found.is_some();
    let current = found.unwrap_or(&empty);
    let Value::Object(entries) = current else {
        // with_keys/without_keys fail on it, and `select` iterates it by its own rules.
        return None;
    };
    if entries.len() > MAX_MAP_ENTRIES {
        return None;
    }
    let updated = match edit {
        MapEdit::Remove { names, keys } => {
            if !entries.keys().any(|k| names.contains(k)) {
                return Some(());
            }
            helpers::without_keys(current.clone(), std::slice::from_ref(keys)).ok()?
        }
        MapEdit::Set(updates) if present => {
            // The program adds the whole map with the keys set; the keys are set one by one
            // instead (the same object in the end, key order included), charged for as the
            // program's output would be.
            let Value::Object(set) = updates else {
                return None;
            };
            let equal = all_equal(set.iter().map(|(key, value)| match entry(entries, key) {
                Some(now) => program_equal(value, now),
                None => Some(false),
            }))?;
            if equal {
                return Some(());
            }
            return ops.set_keys(
                &path,
                current,
                set.iter().map(|(key, value)| (key.as_str(), value.clone())),
            );
        }
        MapEdit::Set(updates) => {
            let updated = helpers::with_keys(current.clone(), updates.clone()).ok()?;
            if !changes(&updated, current)? {
                return Some(());
            }
            updated
        }
        MapEdit::Default(updates) => {
            let Value::Object(set) = updates else {
                return None;
            };
            // Only the keys the map lacks, one `add` each: the same object in the end as the
            // program's one `add` of `with_defaults(current, updates)`, charged as that.
            let mut missing = set
                .iter()
                .filter(|(key, _)| crate::pointer::absent_in(entries, key))
                .peekable();
            if missing.peek().is_none() {
                return Some(());
            }
            if present {
                return ops.set_keys(
                    &path,
                    current,
                    missing.map(|(key, value)| (key.as_str(), value.clone())),
                );
            }
            helpers::with_defaults(current.clone(), updates.clone()).ok()?
        }
        MapEdit::SetFromRef(key) | MapEdit::DefaultFromRef(key) => {
            let text = match refs.get("value") {
                None | Some(Value::Null) => return Some(()),
                Some(Value::String(s)) => s.clone(),
                // `refs.value | tojson`: integers and booleans read the same in JSON.
                Some(v @ Value::Bool(_)) => v.to_string(),
                Some(Value::Number(n)) if !n.is_f64() => n.to_string(),
                // Floats (as minijinja writes them) and structures (an error): the program.
                Some(_) => return None,
            };
            if matches!(edit, MapEdit::DefaultFromRef(_))
                && !crate::pointer::absent_in(entries, key)
            {
                return Some(());
            }
            let mut updates = Map::new();
            updates.insert(key.clone(), Value::String(text));
            helpers::with_keys(current.clone(), Value::Object(updates)).ok()?
        }
    };
    ops.add(path, updated)
}
