//! The operations a native run makes, bounded as the program's output is, and equality as
//! the program judges it.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation};
use serde_json::Value;

use super::{MAX_DEPTH, OUTPUT_SLACK};
use crate::program::ProgramLimits;

/// Operations under construction, with an upper bound of the program's output for them.
pub(super) struct Ops {
    pub(super) list: Vec<PatchOperation>,
    pub(super) bound: usize,
    pub(super) limit: usize,
}

impl Ops {
    pub(super) fn new(limits: &ProgramLimits) -> Self {
        Ops {
            list: Vec::new(),
            bound: 2,
            limit: limits.output_bytes.saturating_sub(OUTPUT_SLACK),
        }
    }

    /// Adds `{"op": "add", "path": path, "value": value}`; `None` when the program's output
    /// could exceed its limit or nest too deep for its parser.
    pub(super) fn add(&mut self, path: String, value: Value) -> Option<()> {
        let bound = value_bound(&value, MAX_DEPTH)?;
        self.add_bounded(path, value, bound)
    }

    /// Adds `{"op": "remove", "path": path}`.
    pub(super) fn remove(&mut self, path: String) -> Option<()> {
        self.charge(&path, None)?;
        let path = PointerBuf::parse(path).ok()?;
        self.list
            .push(PatchOperation::Remove(RemoveOperation { path }));
        Some(())
    }

    /// Sets each of `entries` into the object at `path`, which is `current` now, with one `add`
    /// per key: the same object in the end as a program's one `add` of the whole updated
    /// object, and charged for as that output: at most `current` and every entry (its key and
    /// value, in an object of their own, as [`value_bound`] counts them).
    pub(super) fn set_keys<'k>(
        &mut self,
        path: &str,
        current: &Value,
        entries: impl IntoIterator<Item = (&'k str, Value)>,
    ) -> Option<()> {
        self.charge(path, Some(current))?;
        // The braces of the entries' object.
        self.bound = self.bound.saturating_add(2);
        for (key, value) in entries {
            let entry = string_bound(key) + 4 + value_bound(&value, MAX_DEPTH - 1)?;
            self.bound = self.bound.saturating_add(entry);
            if self.bound > self.limit {
                return None;
            }
            let path = PointerBuf::parse(crate::pointer::join(path, &[key])).ok()?;
            self.list
                .push(PatchOperation::Add(AddOperation { path, value }));
        }
        (self.bound <= self.limit).then_some(())
    }

    pub(super) fn charge(&mut self, path: &str, value: Option<&Value>) -> Option<()> {
        let value = match value {
            Some(value) => value_bound(value, MAX_DEPTH)?,
            None => 0,
        };
        self.charge_bound(path, value)
    }

    /// [`Ops::charge`] for a value whose bound is known already.
    pub(super) fn charge_bound(&mut self, path: &str, value_bound: usize) -> Option<()> {
        // `{"op": "remove", "path": ..., "value": ...}, ` and the path.
        let bound = (48 + string_bound(path)).saturating_add(value_bound);
        self.bound = self.bound.saturating_add(bound);
        (self.bound <= self.limit).then_some(())
    }

    /// [`Ops::add`] of a value whose [`value_bound`] is known already.
    pub(super) fn add_bounded(
        &mut self,
        path: String,
        value: Value,
        value_bound: usize,
    ) -> Option<()> {
        self.charge_bound(&path, value_bound)?;
        let path = PointerBuf::parse(path).ok()?;
        self.list
            .push(PatchOperation::Add(AddOperation { path, value }));
        Some(())
    }
}

/// An upper bound of the bytes `tojson` writes for a string: every byte escaped
/// (`\u00XX`) when that already fits the limit, else the exact escaped length.
pub(super) fn string_bound(text: &str) -> usize {
    if text.len() <= 4096 {
        return 6 * text.len() + 2;
    }
    let escaped: usize = text
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\x08' | b'\x0c' | b'\n' | b'\r' | b'\t' => 2,
            b'<' | b'>' | b'&' | b'\'' => 6,
            b if b < 0x20 => 6,
            _ => 1,
        })
        .sum();
    escaped + 2
}

/// An upper bound of the bytes `tojson` writes for `value` (spaced style: `", "`, `": "`);
/// `None` when it nests deeper than `levels`.
pub(super) fn value_bound(value: &Value, levels: usize) -> Option<usize> {
    Some(match value {
        Value::Null | Value::Bool(_) => 5,
        // The longest integer has 20 characters, the longest float 24.
        Value::Number(_) => 32,
        Value::String(s) => string_bound(s),
        Value::Array(items) => {
            let levels = levels.checked_sub(1)?;
            let mut sum = 2usize;
            for item in items {
                sum = sum.saturating_add(value_bound(item, levels)? + 2);
            }
            sum
        }
        Value::Object(map) => {
            let levels = levels.checked_sub(1)?;
            let mut sum = 2usize;
            for (key, item) in map {
                sum = sum.saturating_add(string_bound(key) + 4 + value_bound(item, levels)?);
            }
            sum
        }
    })
}

/// Whether two JSON values are equal as a program's `==` sees them: as JSON, except that
/// minijinja compares an integer with a float by value (`300` equals `300.0`). `None` where
/// only minijinja can tell (a boolean against a number, integers beyond 2^53 against
/// floats). Objects compare without regard to the order of their keys, as in both.
pub(super) fn program_equal(a: &Value, b: &Value) -> Option<bool> {
    match (a, b) {
        (Value::Null, Value::Null) => Some(true),
        (Value::Bool(x), Value::Bool(y)) => Some(x == y),
        (Value::String(x), Value::String(y)) => Some(x == y),
        (Value::Number(x), Value::Number(y)) => {
            if x == y {
                Some(true)
            } else if x.is_f64() == y.is_f64() {
                Some(false)
            } else {
                // An integer against a float: minijinja compares them as floats when the
                // integer is exactly one. Up to 2^53 every integer is; beyond, the program.
                let (float, int) = if x.is_f64() { (x, y) } else { (y, x) };
                let int = int
                    .as_i64()
                    .map(|i| i as f64)
                    .or(int.as_u64().map(|u| u as f64))?;
                (int.abs() <= 9_007_199_254_740_992.0).then(|| float.as_f64() == Some(int))
            }
        }
        (Value::Bool(_), Value::Number(_)) | (Value::Number(_), Value::Bool(_)) => None,
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                return Some(false);
            }
            all_equal(x.iter().zip(y).map(|(a, b)| program_equal(a, b)))
        }
        (Value::Object(x), Value::Object(y)) => {
            if x.len() != y.len() {
                return Some(false);
            }
            all_equal(x.iter().map(|(k, a)| match y.get(k) {
                Some(b) => program_equal(a, b),
                None => Some(false),
            }))
        }
        _ => Some(false),
    }
}

/// Folds item comparisons: unequal when one is surely unequal, equal when all surely are.
pub(super) fn all_equal(items: impl Iterator<Item = Option<bool>>) -> Option<bool> {
    let mut sure = true;
    for item in items {
        match item {
            Some(false) => return Some(false),
            Some(true) => {}
            None => sure = false,
        }
    }
    sure.then_some(true)
}

/// Whether the program would add `updated` in place of `current`: `Some(true)` when they
/// differ, `None` when that cannot be told without the program.
pub(super) fn changes(updated: &Value, current: &Value) -> Option<bool> {
    program_equal(updated, current).map(|equal| !equal)
}
