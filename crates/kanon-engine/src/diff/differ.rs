//! The walk that compares two documents and emits the operations between them.

use json_patch::jsonptr::{Pointer, PointerBuf};
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::{Map, Value};

use super::touched::Touched;

/// A token of the path being visited: an object key or an array index.
#[derive(Clone, Copy)]
pub(super) enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

pub(super) struct Differ<'a> {
    /// Where the visited value sits in the whole document (the root unless set).
    pub(super) base: Option<&'a Pointer>,
    pub(super) path: Vec<Step<'a>>,
    pub(super) ops: Vec<PatchOperation>,
}

impl<'a> Differ<'a> {
    pub(super) fn new() -> Self {
        Differ {
            base: None,
            path: Vec::new(),
            ops: Vec::new(),
        }
    }

    /// `add` of `value` at the current path.
    pub(super) fn add(&mut self, value: &Value) {
        let path = self.pointer();
        self.ops.push(PatchOperation::Add(AddOperation {
            path,
            value: value.clone(),
        }));
    }

    /// `remove` of the current path.
    pub(super) fn remove(&mut self) {
        let path = self.pointer();
        self.ops
            .push(PatchOperation::Remove(RemoveOperation { path }));
    }

    pub(super) fn pointer(&self) -> PointerBuf {
        let mut pointer = self.base.map(Pointer::to_buf).unwrap_or_default();
        for step in &self.path {
            match *step {
                Step::Key(key) => pointer.push_back(key),
                Step::Index(index) => pointer.push_back(index),
            }
        }
        pointer
    }

    pub(super) fn value(&mut self, left: &'a Value, right: &'a Value) {
        match (left, right) {
            (Value::Object(l), Value::Object(r)) => self.object(l, r),
            (Value::Array(l), Value::Array(r)) => self.array(l, r),
            _ if left == right => {}
            _ => {
                let path = self.pointer();
                self.ops.push(PatchOperation::Replace(ReplaceOperation {
                    path,
                    value: right.clone(),
                }));
            }
        }
    }

    pub(super) fn object(&mut self, left: &'a Map<String, Value>, right: &'a Map<String, Value>) {
        if left == right {
            return;
        }
        for (key, right_value) in right {
            self.path.push(Step::Key(key));
            match left.get(key) {
                Some(left_value) => self.value(left_value, right_value),
                None => self.add(right_value),
            }
            self.path.pop();
        }
        for key in left.keys() {
            if !right.contains_key(key) {
                self.path.push(Step::Key(key));
                self.remove();
                self.path.pop();
            }
        }
    }

    pub(super) fn array(&mut self, left: &'a [Value], right: &'a [Value]) {
        if left == right {
            return;
        }
        // Index by index; each removal shifts the indexes of the operations after it.
        let mut shift = 0usize;
        for index in 0..left.len().max(right.len()) {
            self.path.push(Step::Index(index - shift));
            match (left.get(index), right.get(index)) {
                (Some(l), Some(r)) => self.value(l, r),
                (Some(_), None) => {
                    shift += 1;
                    self.remove();
                }
                (None, Some(r)) => self.add(r),
                (None, None) => {}
            }
            self.path.pop();
        }
    }
}

impl<'a> Differ<'a> {
    pub(super) fn touched(&mut self, left: &'a Value, right: &'a Value, touched: &Touched) {
        let (Value::Object(l), Value::Object(r)) = (left, right) else {
            // Arrays shift under their operations; compare them (and scalars) in full.
            return self.value(left, right);
        };
        if touched.whole {
            return self.object(l, r);
        }
        // The order of `object`: right's keys, then the keys only left has.
        for (key, right_value) in r {
            let Some(child) = touched.child(key) else {
                continue;
            };
            self.path.push(Step::Key(key));
            match l.get(key) {
                Some(left_value) => self.touched(left_value, right_value, child),
                None => self.add(right_value),
            }
            self.path.pop();
        }
        if touched.children.iter().all(|(key, _)| r.contains_key(key)) {
            return;
        }
        for key in l.keys() {
            if touched.child(key).is_some() && !r.contains_key(key) {
                self.path.push(Step::Key(key));
                self.remove();
                self.path.pop();
            }
        }
    }
}

/// The operations that turn `left` into `right`: `json_patch::diff`'s, found faster (a
/// request's final patch diffs only where the operations reached, [`diff_touched`]; the tests
/// compare the two).
pub fn diff(left: &Value, right: &Value) -> Patch {
    let mut differ = Differ::new();
    differ.value(left, right);
    Patch(differ.ops)
}

/// [`diff`] of two values that sit at `at` in their documents: the operations' paths start
/// there.
pub fn diff_at(at: &Pointer, left: &Value, right: &Value) -> Patch {
    let mut differ = Differ::new();
    differ.base = Some(at);
    differ.value(left, right);
    Patch(differ.ops)
}

/// [`diff`] when `right` differs from `left` only where `touched` says: the same operations,
/// without visiting the rest. A place changed but not recorded in `touched` is missed.
pub fn diff_touched(left: &Value, right: &Value, touched: &Touched) -> Patch {
    let mut differ = Differ::new();
    differ.touched(left, right, touched);
    Patch(differ.ops)
}
