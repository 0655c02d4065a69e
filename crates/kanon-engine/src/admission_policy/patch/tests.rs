//! Cases from gopkg.in/evanphx/json-patch.v4's own tests and errors, the library kube-apiserver
//! applies a MutatingAdmissionPolicy's JSON Patch with.

use serde_json::{Value, json};

use super::{Refusal, WrittenOperation, resolve};

fn written(operations: Value) -> Vec<WrittenOperation> {
    let Value::Array(operations) = operations else {
        panic!("a list of operations");
    };
    operations
        .into_iter()
        .map(|operation| WrittenOperation {
            op: operation["op"].as_str().unwrap_or_default().to_owned(),
            path: operation["path"].as_str().unwrap_or_default().to_owned(),
            from: operation["from"].as_str().map(str::to_owned),
            value: operation.get("value").cloned(),
        })
        .collect()
}

/// The document after the patch, or why it does not apply; `doc` itself is never changed.
fn patched(doc: Value, operations: Value) -> Result<Value, Refusal> {
    let before = doc.clone();
    let resolved = resolve(&doc, &written(operations))?;
    assert_eq!(doc, before, "resolving changed the document");
    let mut after = doc;
    json_patch::patch(&mut after, &resolved).expect("resolved operations apply");
    Ok(after)
}

/// Every `(document, operations, expected)` patches to the expected document.
fn each_patches_to<const N: usize>(cases: [(Value, Value, Value); N]) {
    for (doc, operations, expected) in cases {
        assert_eq!(
            patched(doc, operations.clone()),
            Ok(expected),
            "{operations}"
        );
    }
}

fn refused(doc: Value, operations: Value) -> String {
    match patched(doc, operations) {
        Err(Refusal::Error(message)) => message,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn the_rfc_cases_apply_as_the_rfc_says() {
    let cases = [
        (
            json!({"foo": "bar"}),
            json!([{"op": "add", "path": "/baz", "value": "qux"}]),
            json!({"foo": "bar", "baz": "qux"}),
        ),
        (
            json!({"foo": ["bar", "baz"]}),
            json!([{"op": "add", "path": "/foo/1", "value": "qux"}]),
            json!({"foo": ["bar", "qux", "baz"]}),
        ),
        (
            json!({"baz": "qux", "foo": "bar"}),
            json!([{"op": "remove", "path": "/baz"}]),
            json!({"foo": "bar"}),
        ),
        (
            json!({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}}),
            json!([{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}]),
            json!({"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}),
        ),
        (
            json!({"foo": ["all", "grass", "cows", "eat"]}),
            json!([{"op": "move", "from": "/foo/1", "path": "/foo/3"}]),
            json!({"foo": ["all", "cows", "eat", "grass"]}),
        ),
        (
            json!({"foo": ["bar"]}),
            json!([{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}]),
            json!({"foo": ["bar", ["abc", "def"]]}),
        ),
        (
            json!({"foo": ["bar"]}),
            json!([{"op": "copy", "path": "/foo/0", "from": "/foo"}]),
            json!({"foo": [["bar"], "bar"]}),
        ),
        (
            json!({"baz/foo": "qux", "a~b": 1}),
            json!([
                {"op": "test", "path": "/baz~1foo", "value": "qux"},
                {"op": "replace", "path": "/a~0b", "value": 2},
            ]),
            json!({"baz/foo": "qux", "a~b": 2}),
        ),
    ];
    each_patches_to(cases);
}

#[test]
fn where_the_library_departs_from_the_rfc_kanon_does_too() {
    let cases = [
        // A negative index counts from the end.
        (
            json!({"foo": ["bar", "qux", "baz"]}),
            json!([{"op": "remove", "path": "/foo/-2"}]),
            json!({"foo": ["bar", "baz"]}),
        ),
        (
            json!({"foo": []}),
            json!([{"op": "add", "path": "/foo/-1", "value": "qux"}]),
            json!({"foo": ["qux"]}),
        ),
        (
            json!({"foo": ["a", "b", "c"]}),
            json!([{"op": "replace", "path": "/foo/-1", "value": "z"}]),
            json!({"foo": ["a", "b", "z"]}),
        ),
        // `replace` of an absent member adds it.
        (
            json!({"metadata": {"labels": {"app": "web"}}}),
            json!([{"op": "replace", "path": "/metadata/labels/tier", "value": "front"}]),
            json!({"metadata": {"labels": {"app": "web", "tier": "front"}}}),
        ),
        // No value writes null; a copy from an absent member copies null.
        (
            json!({"foo": {}}),
            json!([
                {"op": "add", "path": "/foo/a"},
                {"op": "copy", "from": "/foo/none", "path": "/foo/b"},
            ]),
            json!({"foo": {"a": null, "b": null}}),
        ),
        // Go's Atoi reads a sign and leading zeros.
        (
            json!({"foo": ["a", "b"]}),
            json!([{"op": "replace", "path": "/foo/+01", "value": "z"}]),
            json!({"foo": ["a", "z"]}),
        ),
        // The first piece of a path is dropped whatever it is.
        (
            json!({"foo": 1}),
            json!([{"op": "replace", "path": "anything/foo", "value": 2}]),
            json!({"foo": 2}),
        ),
        // A test of an absent member without a value holds.
        (
            json!({"baz": []}),
            json!([{"op": "test", "path": "/foo"}, {"op": "add", "path": "/x", "value": 1}]),
            json!({"baz": [], "x": 1}),
        ),
        // Numbers are equal by value.
        (
            json!({"n": 1}),
            json!([{"op": "test", "path": "/n", "value": 1.0}]),
            json!({"n": 1}),
        ),
    ];
    each_patches_to(cases);
}

#[test]
fn a_test_that_does_not_hold_leaves_the_patch_out() {
    let cases = [
        (
            json!({"baz": "qux"}),
            json!([{"op": "test", "path": "/foo", "value": 42}]),
        ),
        // kube-apiserver always passes the value it has, a null one included.
        (
            json!({"baz": "qux"}),
            json!([{"op": "test", "path": "/foo", "value": null}]),
        ),
        (
            json!({"foo": {}}),
            json!([{"op": "test", "path": "/foo", "value": null}]),
        ),
        (json!({"foo": []}), json!([{"op": "test", "path": "/foo"}])),
        (
            json!({"foo": 1}),
            json!([{"op": "test", "path": "", "value": {"foo": 2}}]),
        ),
        (
            json!({"foo": 1}),
            json!([
                {"op": "add", "path": "/bar", "value": 1},
                {"op": "test", "path": "/bar", "value": 2},
            ]),
        ),
    ];
    for (doc, operations) in cases {
        assert_eq!(
            patched(doc, operations.clone()),
            Err(Refusal::TestFailed),
            "{operations}"
        );
    }
}

#[test]
fn errors_are_worded_as_the_library_words_them() {
    let cases = [
        (
            json!({"foo": "bar"}),
            json!([{"op": "add", "path": "/baz/bat", "value": "qux"}]),
            "add operation does not apply: doc is missing path: \"/baz/bat\": missing value",
        ),
        (
            json!({"foo": "bar"}),
            json!([{"op": "add", "path": "", "value": "qux"}]),
            "add operation does not apply: doc is missing path: \"\": missing value",
        ),
        (
            json!({"a": {"b": {"d": 1}}}),
            json!([{"op": "remove", "path": "/a/b/c"}]),
            "error in remove for path: '/a/b/c': Unable to remove nonexistent key: c: missing value",
        ),
        (
            json!({"a": {"b": {"d": 1}}}),
            json!([{"op": "move", "from": "/a/b/c", "path": "/a/b/e"}]),
            "error in move for path: 'c': Unable to remove nonexistent key: c: missing value",
        ),
        (
            json!({"a": {"b": [1]}}),
            json!([{"op": "remove", "path": "/a/b/1"}]),
            "error in remove for path: '/a/b/1': Unable to access invalid index: 1: invalid index referenced",
        ),
        (
            json!({"a": {"b": [1]}}),
            json!([{"op": "move", "from": "/a/b/1", "path": "/a/b/2"}]),
            "error in move for path: '1': Unable to access invalid index: 1: invalid index referenced",
        ),
        (
            json!({"foo": ["bar", "baz"]}),
            json!([{"op": "replace", "path": "/foo/2", "value": "bum"}]),
            "replace operation does not apply: doc is missing key: /foo/2: missing value",
        ),
        (
            json!({"spec": {"containers": []}}),
            json!([{"op": "replace", "path": "/spec/containers/-", "value": {}}]),
            "replace operation does not apply: doc is missing key: /spec/containers/-: missing value",
        ),
        (
            json!({"foo": ["bar", "baz"]}),
            json!([{"op": "add", "path": "/foo/-4", "value": "bum"}]),
            "error in add for path: '/foo/-4': Unable to access invalid index: -4: invalid index referenced",
        ),
        (
            json!({"name": {"foo": "bat"}}),
            json!([{"op": "replace", "path": "/foo/bar", "value": "baz"}]),
            "replace operation does not apply: doc is missing path: /foo/bar: missing value",
        ),
        (
            json!({"foo": []}),
            json!([{"op": "remove", "path": "/foo/-"}]),
            "error in remove for path: '/foo/-': strconv.Atoi: parsing \"-\": invalid syntax",
        ),
        (
            json!({"foo": ["bar"]}),
            json!([{"op": "add", "path": "/foo/x", "value": 1}]),
            "error in add for path: '/foo/x': value was not a proper array index: 'x': strconv.Atoi: parsing \"x\": invalid syntax",
        ),
        (
            json!({"foo": ["bar"]}),
            json!([{"op": "copy", "path": "/foo/6666666666", "from": "/"}]),
            "error while adding value during copy: Unable to access invalid index: 6666666666: invalid index referenced",
        ),
        (
            json!({"foo": ["bar"]}),
            json!([{"op": "add", "path": "/foo/99999999999999999999", "value": 1}]),
            "error in add for path: '/foo/99999999999999999999': value was not a proper array index: '99999999999999999999': strconv.Atoi: parsing \"99999999999999999999\": value out of range",
        ),
        (
            json!({"foo": ["all", "grass", "cows", "eat"]}),
            json!([{"op": "move", "from": "/foo/1", "path": "/foo/4"}]),
            "error in move for path: '/foo/4': Unable to access invalid index: 4: invalid index referenced",
        ),
        (
            json!({"foo": 1}),
            json!([{"op": "move", "path": "/bar"}]),
            "move operation failed to decode from: operation, missing from field: missing value",
        ),
        (
            json!({"foo": 1}),
            json!([{"op": "test", "path": "/a/b", "value": 1}]),
            "test operation does not apply: is missing path: /a/b: missing value",
        ),
        (
            json!({"foo": 1}),
            json!([{"op": "replace", "path": "", "value": "text"}]),
            "replace operation value must be object or array: %!w(<nil>)",
        ),
        (
            json!({"foo": 1}),
            json!([{"op": "merge", "path": "/foo", "value": 2}]),
            "Unexpected kind: merge",
        ),
    ];
    for (doc, operations, expected) in cases {
        assert_eq!(refused(doc, operations.clone()), expected, "{operations}");
    }
}

#[test]
fn copies_are_capped_as_kube_apiserver_caps_them() {
    let big = "A".repeat(1024 * 1024);
    let doc = json!({"foo": [big]});
    let copy = json!({"op": "copy", "from": "/foo/0", "path": "/foo/-"});
    let three = patched(doc.clone(), json!([copy, copy])).expect("two copies fit");
    assert_eq!(three["foo"].as_array().map(Vec::len), Some(3));
    let message = refused(doc, json!([copy, copy, copy]));
    assert_eq!(
        message,
        format!(
            "Unable to complete the copy, the accumulated size increase of copy is {}, exceeding the limit {}",
            3 * (1024 * 1024 + 2),
            3 * 1024 * 1024
        )
    );
}

#[test]
fn a_failed_operation_leaves_nothing_applied() {
    let doc = json!({"foo": {"a": 1}});
    let operations = json!([
        {"op": "add", "path": "/foo/b", "value": 2},
        {"op": "remove", "path": "/foo/c"},
    ]);
    assert!(matches!(
        patched(doc, operations),
        Err(Refusal::Error(message)) if message.contains("nonexistent key: c")
    ));
}

#[test]
fn a_null_written_by_the_patch_is_an_empty_object_to_remove_from_and_a_panic_to_add_into() {
    // kube-apiserver 1.35.8: removing from it is a missing key (not a missing path), and adding
    // into it panics in the library (assignment to entry in nil map): no answer at all.
    assert_eq!(
        refused(
            json!({"data": {"a": "b"}}),
            json!([{"op": "replace", "path": "/data", "value": null}, {"op": "remove", "path": "/data/extra"}])
        ),
        "error in remove for path: '/data/extra': Unable to remove nonexistent key: extra: missing value"
    );
    // A `test` for an empty object holds on it.
    assert_eq!(
        patched(
            json!({"data": {"a": "b"}}),
            json!([{"op": "add", "path": "/data", "value": null}, {"op": "test", "path": "/data", "value": {}}])
        ),
        Ok(json!({"data": null}))
    );
    let outcome = patched(
        json!({"data": {"a": "b"}}),
        json!([{"op": "replace", "path": "/data", "value": null}, {"op": "add", "path": "/data/extra", "value": "x"}]),
    );
    assert!(
        matches!(&outcome, Err(Refusal::Panics(why)) if why.contains("'/data/extra'")),
        "{outcome:?}"
    );
    // So does replacing into it, which adds an absent member (found by the random MAP run,
    // seed 210397220033410).
    let outcome = patched(
        json!({"data": {"a": "b"}}),
        json!([{"op": "add", "path": "/data", "value": null}, {"op": "replace", "path": "/data/extra", "value": {}}]),
    );
    assert!(
        matches!(&outcome, Err(Refusal::Panics(why)) if why.contains("its replace writes '/data/extra'")),
        "{outcome:?}"
    );
}

#[test]
fn the_members_of_a_null_written_by_the_patch_are_absent() {
    // Found by the random MAP run (seed 269908045559371): kube-apiserver opens the null as an
    // empty object, so a `test` of a member is a failed test (the patch is left out), not a
    // missing path; without a value it holds.
    let doc = json!({"data": {"a": "b"}});
    assert_eq!(
        patched(
            doc.clone(),
            json!([{"op": "replace", "path": "/data", "value": null}, {"op": "test", "path": "/data/a", "value": "b"}])
        ),
        Err(Refusal::TestFailed)
    );
    assert_eq!(
        patched(
            doc.clone(),
            json!([{"op": "replace", "path": "/data", "value": null}, {"op": "test", "path": "/data/a"}, {"op": "add", "path": "/held", "value": true}])
        ),
        Ok(json!({"data": null, "held": true}))
    );
    // Deeper than its members is a missing path, as for any absent member.
    assert_eq!(
        refused(
            doc.clone(),
            json!([{"op": "replace", "path": "/data", "value": null}, {"op": "test", "path": "/data/a/b", "value": "b"}])
        ),
        "test operation does not apply: is missing path: /data/a/b: missing value"
    );
    // Copying a member copies null; moving one is a missing key.
    assert_eq!(
        patched(
            doc.clone(),
            json!([{"op": "replace", "path": "/data", "value": null}, {"op": "copy", "from": "/data/a", "path": "/copied"}])
        ),
        Ok(json!({"data": null, "copied": null}))
    );
    assert_eq!(
        refused(
            doc.clone(),
            json!([{"op": "replace", "path": "/data", "value": null}, {"op": "move", "from": "/data/a", "path": "/moved"}])
        ),
        "error in move for path: 'a': Unable to remove nonexistent key: a: missing value"
    );
    // Copying into it panics once the source is found; a missing source is the error.
    let outcome = patched(
        json!({"data": {"a": "b"}, "x": 1}),
        json!([{"op": "replace", "path": "/data", "value": null}, {"op": "copy", "from": "/x", "path": "/data/x"}]),
    );
    assert!(
        matches!(&outcome, Err(Refusal::Panics(why)) if why.contains("its copy writes '/data/x'")),
        "{outcome:?}"
    );
    assert_eq!(
        refused(
            doc.clone(),
            json!([{"op": "replace", "path": "/data", "value": null}, {"op": "copy", "from": "/nothere/x", "path": "/data/x"}])
        ),
        "copy operation does not apply: doc is missing from path: /nothere/x: missing value"
    );
    // A null copied from a written one is written too.
    assert_eq!(
        refused(
            doc,
            json!([{"op": "replace", "path": "/data", "value": null}, {"op": "copy", "from": "/data", "path": "/other"}, {"op": "remove", "path": "/other/a"}])
        ),
        "error in remove for path: '/other/a': Unable to remove nonexistent key: a: missing value"
    );
}
