//! Plaintext overriders: RFC 6902 operations, checked when the policy compiles and applied to
//! the evolving object with messages that say why an operation failed.

use json_patch::jsonptr::PointerBuf;
use json_patch::{
    AddOperation, CopyOperation, MoveOperation, PatchOperation, RemoveOperation, ReplaceOperation,
    TestOperation,
};
use kanon_api::{PatchOp, PlaintextOverrider};
use serde_json::Value;

use crate::error::FieldError;
use crate::pointer;

/// A checked plaintext operation and the field it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct PlaintextOp {
    /// The operation.
    pub operation: PatchOperation,
    /// Field path of the overrider, e.g. `spec.overrideRules[0].overriders.plaintext[1]`.
    pub field: String,
}

fn parse_pointer(text: &str, field: String, errors: &mut Vec<FieldError>) -> Option<PointerBuf> {
    if let Err(e) = pointer::check(text) {
        errors.push(FieldError::new(field, e));
        return None;
    }
    match PointerBuf::parse(text) {
        Ok(p) => Some(p),
        Err(e) => {
            errors.push(FieldError::new(
                field,
                format!("`{text}` is not a JSON pointer: {e}"),
            ));
            None
        }
    }
}

/// Checks one plaintext overrider: `path` (and `from`) are JSON pointers, `value` is present
/// exactly for add/replace/test and `from` exactly for copy/move. Problems go to `errors`.
pub fn compile(
    p: &PlaintextOverrider,
    field: &str,
    errors: &mut Vec<FieldError>,
) -> Option<PlaintextOp> {
    let before = errors.len();
    let path = parse_pointer(&p.path, format!("{field}.path"), errors);
    let needs_value = matches!(p.op, PatchOp::Add | PatchOp::Replace | PatchOp::Test);
    let needs_from = matches!(p.op, PatchOp::Copy | PatchOp::Move);
    let op = p.op.as_str();
    match (&p.value, needs_value) {
        (None, true) => errors.push(FieldError::new(
            format!("{field}.value"),
            format!("is required for `{op}`"),
        )),
        (Some(_), false) => errors.push(FieldError::new(
            format!("{field}.value"),
            format!("is not used by `{op}`; remove it"),
        )),
        _ => {}
    }
    let from = match (&p.from, needs_from) {
        (None, true) => {
            errors.push(FieldError::new(
                format!("{field}.from"),
                format!("is required for `{op}`"),
            ));
            None
        }
        (Some(_), false) => {
            errors.push(FieldError::new(
                format!("{field}.from"),
                format!("is not used by `{op}`; remove it"),
            ));
            None
        }
        (Some(f), true) => parse_pointer(f, format!("{field}.from"), errors),
        (None, false) => None,
    };
    if errors.len() > before {
        return None;
    }
    let path = path?;
    let value = p.value.clone().unwrap_or(Value::Null);
    let operation = match p.op {
        PatchOp::Add => PatchOperation::Add(AddOperation { path, value }),
        PatchOp::Remove => PatchOperation::Remove(RemoveOperation { path }),
        PatchOp::Replace => PatchOperation::Replace(ReplaceOperation { path, value }),
        PatchOp::Test => PatchOperation::Test(TestOperation { path, value }),
        PatchOp::Copy => PatchOperation::Copy(CopyOperation { from: from?, path }),
        PatchOp::Move => PatchOperation::Move(MoveOperation { from: from?, path }),
    };
    Some(PlaintextOp {
        operation,
        field: field.to_string(),
    })
}

fn op_name(op: &PatchOperation) -> &'static str {
    match op {
        PatchOperation::Add(_) => "add",
        PatchOperation::Remove(_) => "remove",
        PatchOperation::Replace(_) => "replace",
        PatchOperation::Move(_) => "move",
        PatchOperation::Copy(_) => "copy",
        PatchOperation::Test(_) => "test",
    }
}

/// Why `pointer` cannot be written (add) or read (the others) in `doc`.
fn explain_missing(doc: &Value, path: &str, for_add: bool) -> String {
    let parent = match path.rfind('/') {
        Some(i) => &path[..i],
        None => "",
    };
    if for_add {
        match doc.pointer(parent) {
            None => format!(
                "the parent `{parent}` does not exist (the deepest existing parent is `{}`); add the parent first",
                pointer::deepest_existing(doc, parent)
            ),
            Some(Value::Array(items)) => format!(
                "`{path}` is not a valid position in an array of {} items (use an index up to {} or `-` to append)",
                items.len(),
                items.len()
            ),
            Some(other) => format!(
                "the parent `{parent}` is a {}, not an object or array",
                crate::document::type_name(other)
            ),
        }
    } else {
        format!(
            "nothing exists at `{path}` (the deepest existing parent is `{}`)",
            pointer::deepest_existing(doc, path)
        )
    }
}

/// Applies one operation to `doc`. On error `doc` is unchanged and the message says why
/// (target missing, parent missing, value mismatch, ...), starting with the operation.
pub fn apply(doc: &mut Value, op: &PatchOperation) -> Result<(), String> {
    let result = json_patch::patch(doc, std::slice::from_ref(op));
    let Err(err) = result else { return Ok(()) };
    let path = op.path().as_str().to_string();
    let reason = match (&err.kind, op) {
        (json_patch::PatchErrorKind::TestFailed, PatchOperation::Test(t)) => format!(
            "the value at `{path}` is {}, not {}",
            doc.pointer(&path)
                .map(Value::to_string)
                .unwrap_or_else(|| "absent".into()),
            t.value
        ),
        (json_patch::PatchErrorKind::InvalidFromPointer, PatchOperation::Move(m)) => {
            explain_missing(doc, m.from.as_str(), false)
        }
        (json_patch::PatchErrorKind::InvalidFromPointer, PatchOperation::Copy(c)) => {
            explain_missing(doc, c.from.as_str(), false)
        }
        (json_patch::PatchErrorKind::CannotMoveInsideItself, _) => {
            "cannot move a value inside itself".to_string()
        }
        (_, PatchOperation::Add(_) | PatchOperation::Copy(_) | PatchOperation::Move(_)) => {
            explain_missing(doc, &path, true)
        }
        (_, PatchOperation::Replace(_)) => format!(
            "{}; use `add` to create it",
            explain_missing(doc, &path, false)
        ),
        _ => explain_missing(doc, &path, false),
    };
    Err(format!("{} {path}: {reason}", op_name(op)))
}

/// The common single operations, applied directly: `true` when `op` applied, `false` (and
/// `doc` unchanged) when `json_patch` is to apply it or explain why it cannot.
fn apply_direct(doc: &mut Value, op: &PatchOperation) -> bool {
    match op {
        PatchOperation::Add(a) => pointer::put(doc, &a.path, a.value.clone(), false).is_ok(),
        PatchOperation::Replace(r) => pointer::put(doc, &r.path, r.value.clone(), true).is_ok(),
        PatchOperation::Remove(r) => {
            let Some((parent, last)) = r.path.split_back() else {
                return false;
            };
            match pointer::find_mut(doc, parent.as_str()) {
                // `json_patch` removes the way serde_json's `remove` does (the last key takes
                // the removed one's place), so this does too.
                Some(Value::Object(map)) => map.remove(last.decoded().as_ref()).is_some(),
                _ => false,
            }
        }
        PatchOperation::Test(t) => pointer::find(doc, t.path.as_str()) == Some(&t.value),
        PatchOperation::Move(_) | PatchOperation::Copy(_) => false,
    }
}

/// [`apply_all`] for operations no longer needed afterwards (a program's output): a single
/// `add` or `replace` moves its value into `doc` instead of copying it.
pub fn apply_all_owned(
    doc: &mut Value,
    mut ops: Vec<PatchOperation>,
) -> Result<(), (usize, String)> {
    if let [op] = ops.as_mut_slice() {
        let single = match op {
            PatchOperation::Add(a) => Some((&a.path, &mut a.value, false)),
            PatchOperation::Replace(r) => Some((&r.path, &mut r.value, true)),
            _ => None,
        };
        if let Some((path, value, replace)) = single {
            match pointer::put(doc, path, std::mem::take(value), replace) {
                Ok(_) => return Ok(()),
                Err(back) => *value = back,
            }
        }
    }
    apply_all(doc, &ops)
}

/// Applies `ops` in one atomic step: on error `doc` is unchanged and the result names the
/// failing operation's index and why it failed (judged on the document as that operation saw
/// it).
pub fn apply_all(doc: &mut Value, ops: &[PatchOperation]) -> Result<(), (usize, String)> {
    if let [op] = ops
        && apply_direct(doc, op)
    {
        return Ok(());
    }
    let Err(err) = json_patch::patch(doc, ops) else {
        return Ok(());
    };
    let index = err.operation.min(ops.len().saturating_sub(1));
    // Rare path: replay the operations before the failing one on a copy to explain it.
    let mut replay = doc.clone();
    for op in &ops[..index] {
        if let Err(e) = apply(&mut replay, op) {
            return Err((index, e));
        }
    }
    let message = match ops.get(index) {
        Some(op) => apply(&mut replay, op)
            .err()
            .unwrap_or_else(|| err.to_string()),
        None => err.to_string(),
    };
    Err((index, message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(v: Value) -> PlaintextOp {
        let p: PlaintextOverrider = serde_json::from_value(v).unwrap();
        let mut errors = Vec::new();
        let compiled = compile(&p, "f", &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        compiled.unwrap()
    }

    fn errors_of(v: Value) -> Vec<String> {
        let p: PlaintextOverrider = serde_json::from_value(v).unwrap();
        let mut errors = Vec::new();
        assert!(compile(&p, "f", &mut errors).is_none());
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn every_operation_applies() {
        let mut doc = json!({"a": {"b": 1}, "l": [1, 2]});
        for v in [
            json!({"op": "add", "path": "/a/c", "value": 2}),
            json!({"op": "replace", "path": "/a/b", "value": 10}),
            json!({"op": "copy", "from": "/a/b", "path": "/d"}),
            json!({"op": "move", "from": "/a/c", "path": "/e"}),
            json!({"op": "test", "path": "/e", "value": 2}),
            json!({"op": "remove", "path": "/l/0"}),
            json!({"op": "add", "path": "/l/-", "value": 3}),
        ] {
            apply(&mut doc, &op(v).operation).unwrap();
        }
        assert_eq!(doc, json!({"a": {"b": 10}, "d": 10, "e": 2, "l": [2, 3]}));
    }

    #[test]
    fn failures_explain_themselves_and_leave_doc_unchanged() {
        let doc = json!({"metadata": {"labels": {"a": "1"}}, "l": [1]});
        let cases = [
            (
                json!({"op": "remove", "path": "/metadata/labels/x"}),
                "remove /metadata/labels/x: nothing exists at `/metadata/labels/x` (the deepest existing parent is `/metadata/labels`)",
            ),
            (
                json!({"op": "replace", "path": "/metadata/annotations/x", "value": "v"}),
                "replace /metadata/annotations/x: nothing exists at `/metadata/annotations/x` (the deepest existing parent is `/metadata`); use `add` to create it",
            ),
            (
                json!({"op": "add", "path": "/metadata/annotations/x", "value": "v"}),
                "add /metadata/annotations/x: the parent `/metadata/annotations` does not exist (the deepest existing parent is `/metadata`); add the parent first",
            ),
            (
                json!({"op": "add", "path": "/l/5", "value": 1}),
                "add /l/5: `/l/5` is not a valid position in an array of 1 items (use an index up to 1 or `-` to append)",
            ),
            (
                json!({"op": "test", "path": "/metadata/labels/a", "value": "2"}),
                "test /metadata/labels/a: the value at `/metadata/labels/a` is \"1\", not \"2\"",
            ),
            (
                json!({"op": "move", "from": "/nope", "path": "/x"}),
                "move /x: nothing exists at `/nope` (the deepest existing parent is `/`)",
            ),
            (
                json!({"op": "move", "from": "/metadata", "path": "/metadata/x"}),
                "move /metadata/x: cannot move a value inside itself",
            ),
        ];
        for (v, want) in cases {
            let mut d = doc.clone();
            let got = apply(&mut d, &op(v).operation).unwrap_err();
            assert_eq!(got, want);
            assert_eq!(d, doc);
        }
    }

    #[test]
    fn apply_all_is_atomic_and_explains_the_failing_operation() {
        let ops: Vec<PatchOperation> = [
            json!({"op": "add", "path": "/b", "value": {}}),
            json!({"op": "add", "path": "/b/c", "value": 1}),
            json!({"op": "remove", "path": "/b/d"}),
        ]
        .into_iter()
        .map(|v| op(v).operation)
        .collect();
        let mut doc = json!({"a": 1});
        let (index, message) = apply_all(&mut doc, &ops).unwrap_err();
        assert_eq!(index, 2);
        assert_eq!(
            message,
            "remove /b/d: nothing exists at `/b/d` (the deepest existing parent is `/b`)"
        );
        assert_eq!(doc, json!({"a": 1}));
        apply_all(&mut doc, &ops[..2]).unwrap();
        assert_eq!(doc, json!({"a": 1, "b": {"c": 1}}));
    }

    /// The direct path for single operations changes documents exactly as `json_patch` does
    /// (key order included), and fails exactly when it does, on a grid of documents and
    /// operations: every operation, objects and arrays, escaped and empty keys, index-like keys,
    /// missing parents, values of other types.
    #[test]
    fn single_operations_apply_as_json_patch_does() {
        let docs = [
            json!({"a": {"b": 1, "c": {"d": [1, 2]}}, "l": [1, {"x": 2}], "": {"": 0}, "a/b": {"~": 1}, "0": {"1": 2}}),
            json!({"metadata": {"labels": {"app": "web", "tier": "fe"}, "name": "n"}, "spec": {"containers": [{"name": "c", "resources": {}}]}}),
            json!([1, {"a": 2}]),
            json!("scalar"),
        ];
        let paths = [
            "",
            "/",
            "/a",
            "/a/b",
            "/a/x",
            "/a/c/d",
            "/a/c/d/0",
            "/a/c/d/-",
            "/a/c/d/2",
            "/a/c/d/01",
            "/l/1/x",
            "/l/1/y",
            "/l/5",
            "/l/-",
            "//",
            "/a~1b/~0",
            "/a~1b/x",
            "/0/1",
            "/0/2",
            "/x/y",
            "/metadata/labels/app",
            "/metadata/labels/team",
            "/metadata/labels",
            "/metadata/x/y",
            "/spec/containers/0/resources/requests",
            "/spec/containers/1/resources",
            "/1/a",
            "/1/b",
            "/0",
        ];
        let values = [json!("v"), json!({"k": [1]}), Value::Null, json!(1)];
        let mut cases = 0;
        for doc in &docs {
            for (i, path) in paths.iter().enumerate() {
                let path = PointerBuf::parse(*path).unwrap();
                let value = values[i % values.len()].clone();
                let existing = doc.pointer(path.as_str()).cloned().unwrap_or(Value::Null);
                for op in [
                    PatchOperation::Add(AddOperation {
                        path: path.clone(),
                        value: value.clone(),
                    }),
                    PatchOperation::Replace(ReplaceOperation {
                        path: path.clone(),
                        value: value.clone(),
                    }),
                    PatchOperation::Remove(RemoveOperation { path: path.clone() }),
                    PatchOperation::Test(TestOperation {
                        path: path.clone(),
                        value: value.clone(),
                    }),
                    PatchOperation::Test(TestOperation {
                        path: path.clone(),
                        value: existing,
                    }),
                ] {
                    let mut want = doc.clone();
                    let want_ok = json_patch::patch(&mut want, std::slice::from_ref(&op)).is_ok();
                    let mut got = doc.clone();
                    let got_ok = apply_all(&mut got, std::slice::from_ref(&op)).is_ok();
                    let mut owned = doc.clone();
                    let owned_ok = apply_all_owned(&mut owned, vec![op.clone()]).is_ok();
                    assert_eq!((got_ok, owned_ok), (want_ok, want_ok), "{op:?} on {doc}");
                    // Key order too: serde_json's equality ignores it, the text does not.
                    assert_eq!(got.to_string(), want.to_string(), "{op:?} on {doc}");
                    assert_eq!(owned.to_string(), want.to_string(), "{op:?} on {doc}");
                    cases += usize::from(want_ok);
                }
            }
        }
        assert!(cases > 60, "only {cases} operations applied");
    }

    #[test]
    fn null_is_a_value() {
        let mut doc = json!({"a": 1});
        apply(
            &mut doc,
            &op(json!({"op": "add", "path": "/b", "value": null})).operation,
        )
        .unwrap();
        apply(
            &mut doc,
            &op(json!({"op": "test", "path": "/b", "value": null})).operation,
        )
        .unwrap();
        apply(
            &mut doc,
            &op(json!({"op": "replace", "path": "/a", "value": null})).operation,
        )
        .unwrap();
        assert_eq!(doc, json!({"a": null, "b": null}));
    }

    #[test]
    fn compile_checks_fields() {
        assert_eq!(
            errors_of(json!({"op": "add", "path": "metadata.labels.a", "value": 1})).len(),
            1
        );
        assert_eq!(
            errors_of(json!({"op": "add", "path": "/a"})),
            vec!["f.value: is required for `add`"]
        );
        assert_eq!(
            errors_of(json!({"op": "remove", "path": "/a", "value": 1})),
            vec!["f.value: is not used by `remove`; remove it"]
        );
        assert_eq!(
            errors_of(json!({"op": "copy", "path": "/a"})),
            vec!["f.from: is required for `copy`"]
        );
        assert_eq!(
            errors_of(json!({"op": "add", "path": "/a", "value": 1, "from": "/b"})),
            vec!["f.from: is not used by `add`; remove it"]
        );
        let e = errors_of(json!({"op": "move", "path": "/a", "from": "b"}));
        assert!(
            e[0].starts_with("f.from: `b` is not a JSON pointer"),
            "{e:?}"
        );
    }
}
