use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::{Map, Value, json};

use super::*;

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

/// A random operation on `doc`: often at a path that exists, sometimes one level below it.
fn operation(rng: &mut Rng, doc: &Value) -> PatchOperation {
    let mut path = Vec::new();
    let mut at = doc;
    loop {
        let next = match at {
            Value::Object(map) if !map.is_empty() && rng.below(3) != 0 => {
                let (k, v) = map
                    .iter()
                    .nth(rng.below(map.len() as u64) as usize)
                    .unwrap_or_else(|| unreachable!());
                Some((k.clone(), v))
            }
            Value::Array(items) if !items.is_empty() && rng.below(3) != 0 => {
                let i = rng.below(items.len() as u64) as usize;
                Some((i.to_string(), &items[i]))
            }
            _ => None,
        };
        match next {
            Some((token, child)) => {
                path.push(token);
                at = child;
            }
            None => break,
        }
    }
    if rng.below(2) == 0 {
        path.push(KEYS[rng.below(KEYS.len() as u64) as usize].to_string());
    }
    let pointer = PointerBuf::from_tokens(path.iter().map(String::as_str));
    let value = super::tests::value(rng, 2);
    let from = PointerBuf::from_tokens(path.iter().take(1).map(String::as_str));
    match rng.below(5) {
        0 => PatchOperation::Add(AddOperation {
            path: pointer,
            value,
        }),
        1 => PatchOperation::Remove(RemoveOperation { path: pointer }),
        2 => PatchOperation::Replace(ReplaceOperation {
            path: pointer,
            value,
        }),
        3 => PatchOperation::Move(json_patch::MoveOperation {
            from,
            path: pointer,
        }),
        _ => PatchOperation::Copy(json_patch::CopyOperation {
            from,
            path: pointer,
        }),
    }
}

#[test]
fn touched_places_give_the_full_diff() {
    let mut rng = Rng(11);
    let mut changed = 0;
    for case in 0..20_000 {
        let left =
            json!({"spec": value(&mut rng, 4), "metadata": value(&mut rng, 3), "kind": "Pod"});
        let mut right = left.clone();
        let mut touched = Touched::default();
        for _ in 0..1 + rng.below(4) {
            let op = operation(&mut rng, &right);
            touched.record(&op);
            // Operations that fail change nothing (a patch undoes itself).
            let _ = json_patch::patch(&mut right, std::slice::from_ref(&op));
        }
        let full = diff(&left, &right);
        changed += usize::from(!full.0.is_empty());
        assert_eq!(
            diff_touched(&left, &right, &touched),
            full,
            "case {case}: {left} -> {right}"
        );
    }
    // The generator must change documents, or the comparison above proves nothing.
    assert!(changed > 10_000, "only {changed} cases changed anything");
}

/// Asserts that what `changes` saved gives the operations of [`diff`] from `original` to
/// `doc`; whether there were any.
#[track_caller]
fn saved_diff_is_full(case: usize, original: &Value, doc: &Value, changes: Changes) -> bool {
    let full = diff(original, doc);
    let changed = !full.0.is_empty();
    assert_eq!(
        changes.into_diff(doc.clone()),
        Some(full),
        "case {case}: {original} -> {doc}"
    );
    changed
}

#[test]
fn saved_fields_give_the_full_diff() {
    let mut rng = Rng(13);
    let mut changed = 0;
    for case in 0..20_000 {
        let original = match rng.below(8) {
            // Now and then a root that is not an object.
            0 => value(&mut rng, 3),
            _ => {
                json!({"spec": value(&mut rng, 4), "metadata": value(&mut rng, 3), "kind": "Pod", "status": {}})
            }
        };
        let mut doc = original.clone();
        let mut changes = Changes::saving();
        for _ in 0..1 + rng.below(5) {
            let op = if rng.below(12) == 0 {
                PatchOperation::Replace(ReplaceOperation {
                    path: PointerBuf::new(),
                    value: value(&mut rng, 2),
                })
            } else {
                operation(&mut rng, &doc)
            };
            changes.before(&op, &doc);
            let _ = json_patch::patch(&mut doc, std::slice::from_ref(&op));
        }
        changed += usize::from(saved_diff_is_full(case, &original, &doc, changes));
    }
    assert!(changed > 10_000, "only {changed} cases changed anything");
}

/// Mostly adds and replaces, as overriders do, so that saving by place is what runs (to
/// the end in most cases), with now and then another operation that turns the places into
/// fields; sometimes several operations are recorded first and applied as one step.
#[test]
fn saved_places_give_the_full_diff() {
    let mut rng = Rng(17);
    let (mut changed, mut by_place, mut in_one_walk) = (0, 0, 0);
    for case in 0..20_000 {
        let original =
            json!({"spec": value(&mut rng, 4), "metadata": value(&mut rng, 3), "kind": "Pod"});
        let mut doc = original.clone();
        let mut changes = Changes::saving();
        for _ in 0..1 + rng.below(6) {
            let step: Vec<PatchOperation> = (0..1 + rng.below(2) * rng.below(3))
                .map(|_| match (operation(&mut rng, &doc), rng.below(16)) {
                    (op, 0) => op,
                    (PatchOperation::Remove(r), _) => PatchOperation::Replace(ReplaceOperation {
                        path: r.path,
                        value: value(&mut rng, 1),
                    }),
                    (PatchOperation::Move(json_patch::MoveOperation { path, .. }), _)
                    | (PatchOperation::Copy(json_patch::CopyOperation { path, .. }), _) => {
                        PatchOperation::Add(AddOperation {
                            path,
                            value: value(&mut rng, 2),
                        })
                    }
                    // Insertions into arrays shift items: mostly replace one instead.
                    (PatchOperation::Add(add), _)
                        if add.path.split_back().is_some_and(|(parent, _)| {
                            doc.pointer(parent.as_str()).is_some_and(Value::is_array)
                        }) =>
                    {
                        PatchOperation::Replace(ReplaceOperation {
                            path: add.path,
                            value: add.value,
                        })
                    }
                    (op, _) => op,
                })
                .collect();
            // Half the single operations recorded and applied in one walk, as templates'
            // are: the same document (key order included) and the same record.
            if let [op] = step.as_slice()
                && rng.below(2) == 0
            {
                let mut expected = doc.clone();
                let applies = json_patch::patch(&mut expected, &step).is_ok();
                let unchanged = doc.clone();
                match changes.apply_one(&mut doc, op.clone()) {
                    Ok(()) => {
                        assert!(applies, "case {case}: {op:?} applied, json_patch refuses");
                        assert_eq!(
                            serde_json::to_string(&doc).ok(),
                            serde_json::to_string(&expected).ok(),
                            "case {case}: {op:?}"
                        );
                        in_one_walk += 1;
                        continue;
                    }
                    Err(back) => {
                        assert_eq!(&back, op, "case {case}");
                        assert_eq!(doc, unchanged, "case {case}: {op:?} given back");
                    }
                }
            }
            step.iter().for_each(|op| changes.before(op, &doc));
            let _ = json_patch::patch(&mut doc, &step);
        }
        by_place += usize::from(changes.places.is_some());
        changed += usize::from(saved_diff_is_full(case, &original, &doc, changes));
    }
    assert!(changed > 10_000, "only {changed} cases changed anything");
    assert!(
        by_place > 5_000,
        "only {by_place} cases saved by place to the end"
    );
    assert!(
        in_one_walk > 5_000,
        "only {in_one_walk} operations applied in one walk"
    );
}

#[test]
fn untouched_places_are_not_visited() {
    let left = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"x": 1}});
    let right = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": 2}});
    let mut touched = Touched::default();
    touched.record(&PatchOperation::Add(AddOperation {
        path: PointerBuf::parse("/metadata/labels/b").unwrap_or_default(),
        value: json!("2"),
    }));
    // /spec changed without an operation saying so: only the recorded change is reported.
    let text = serde_json::to_value(diff_touched(&left, &right, &touched)).unwrap_or_default();
    assert_eq!(
        text,
        json!([{"op": "add", "path": "/metadata/labels/b", "value": "2"}])
    );
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
