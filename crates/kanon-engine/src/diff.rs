//! The JSON Patch from an object to its mutated form, as kube-apiserver receives it.
//!
//! The operations are exactly those of `json_patch::diff` (same order, same form: objects key by
//! key, arrays index by index with removals shifting later indexes, a `replace` for any other
//! change), so answers do not change with the implementation. It is written for the request
//! path: equal subtrees are skipped after one comparison, and a JSON pointer is built only for
//! an operation that is emitted, not for every key visited.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::{Map, Value};

/// A token of the path being visited: an object key or an array index.
#[derive(Clone, Copy)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

struct Differ<'a> {
    path: Vec<Step<'a>>,
    ops: Vec<PatchOperation>,
}

impl<'a> Differ<'a> {
    fn pointer(&self) -> PointerBuf {
        let mut pointer = PointerBuf::new();
        for step in &self.path {
            match *step {
                Step::Key(key) => pointer.push_back(key),
                Step::Index(index) => pointer.push_back(index),
            }
        }
        pointer
    }

    fn value(&mut self, left: &'a Value, right: &'a Value) {
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

    fn object(&mut self, left: &'a Map<String, Value>, right: &'a Map<String, Value>) {
        if left == right {
            return;
        }
        for (key, right_value) in right {
            self.path.push(Step::Key(key));
            match left.get(key) {
                Some(left_value) => self.value(left_value, right_value),
                None => {
                    let path = self.pointer();
                    self.ops.push(PatchOperation::Add(AddOperation {
                        path,
                        value: right_value.clone(),
                    }));
                }
            }
            self.path.pop();
        }
        for key in left.keys() {
            if !right.contains_key(key) {
                self.path.push(Step::Key(key));
                let path = self.pointer();
                self.ops
                    .push(PatchOperation::Remove(RemoveOperation { path }));
                self.path.pop();
            }
        }
    }

    fn array(&mut self, left: &'a [Value], right: &'a [Value]) {
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
                    let path = self.pointer();
                    self.ops
                        .push(PatchOperation::Remove(RemoveOperation { path }));
                }
                (None, Some(r)) => {
                    let path = self.pointer();
                    self.ops.push(PatchOperation::Add(AddOperation {
                        path,
                        value: r.clone(),
                    }));
                }
                (None, None) => {}
            }
            self.path.pop();
        }
    }
}

/// The operations that turn `left` into `right`.
pub fn diff(left: &Value, right: &Value) -> Patch {
    let mut differ = Differ {
        path: Vec::new(),
        ops: Vec::new(),
    };
    differ.value(left, right);
    Patch(differ.ops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// SplitMix64, for generated cases.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) % n
        }
    }

    const KEYS: &[&str] = &["a", "b", "a/b", "m~n", "~1", "", "ünï", "labels"];

    fn value(rng: &mut Rng, depth: u32) -> Value {
        match rng.below(if depth == 0 { 4 } else { 7 }) {
            0 => Value::Null,
            1 => json!(rng.below(3)),
            2 => json!(["x", "y", "z"][rng.below(3) as usize]),
            3 => json!(rng.below(2) == 0),
            4 | 5 => Value::Object(
                (0..rng.below(4))
                    .map(|_| {
                        let key = KEYS[rng.below(KEYS.len() as u64) as usize].to_string();
                        (key, value(rng, depth - 1))
                    })
                    .collect(),
            ),
            _ => Value::Array((0..rng.below(4)).map(|_| value(rng, depth - 1)).collect()),
        }
    }

    /// `value` changed in a few places, so that most of it stays equal.
    fn mutated(rng: &mut Rng, value: &Value, depth: u32) -> Value {
        if rng.below(6) == 0 {
            return super::tests::value(rng, depth);
        }
        match value {
            Value::Object(map) => {
                let mut out = Map::new();
                for (k, v) in map {
                    if rng.below(8) != 0 {
                        out.insert(k.clone(), mutated(rng, v, depth.saturating_sub(1)));
                    }
                }
                if rng.below(4) == 0 {
                    let key = KEYS[rng.below(KEYS.len() as u64) as usize].to_string();
                    out.insert(key, super::tests::value(rng, 1));
                }
                Value::Object(out)
            }
            Value::Array(items) => {
                let mut out = Vec::new();
                for v in items {
                    if rng.below(6) != 0 {
                        out.push(mutated(rng, v, depth.saturating_sub(1)));
                    }
                }
                if rng.below(4) == 0 {
                    out.push(super::tests::value(rng, 1));
                }
                Value::Array(out)
            }
            other => other.clone(),
        }
    }

    #[test]
    fn the_same_operations_as_json_patch_diff() {
        let mut rng = Rng(7);
        for case in 0..20_000 {
            let left = value(&mut rng, 4);
            let right = mutated(&mut rng, &left, 4);
            let ours = diff(&left, &right);
            assert_eq!(
                ours,
                json_patch::diff(&left, &right),
                "case {case}: {left} -> {right}"
            );
            let mut applied = left.clone();
            json_patch::patch(&mut applied, &ours).unwrap_or_else(|e| panic!("case {case}: {e}"));
            assert_eq!(applied, right, "case {case}");
        }
    }

    #[test]
    fn keys_are_escaped_in_paths() {
        let patch = diff(
            &json!({"metadata": {"labels": {}}}),
            &json!({"metadata": {"labels": {"a/b": "x", "m~n": "y"}}}),
        );
        let text = serde_json::to_value(&patch).unwrap_or_default();
        assert_eq!(
            text,
            json!([
                {"op": "add", "path": "/metadata/labels/a~1b", "value": "x"},
                {"op": "add", "path": "/metadata/labels/m~0n", "value": "y"},
            ])
        );
    }
}
