//! The engine's small parsers, one per first byte: JSON pointers, JSONPaths (parsed and run as
//! the engine does), quantities (parse, compare, write, scale, round, valueProcess) and
//! selectors (resource, label and field selectors compiled and matched).

#![no_main]

use std::sync::LazyLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kanon_api::{FieldSelector, ResourceSelector};
use kanon_engine::internals::helpers;
use kanon_engine::internals::pointer;
use kanon_engine::internals::{FieldMatcher, ObjectView, ResourceMatcher};
use kanon_engine::{Decimal, Quantity};
use kanon_engine::{LabelMatcher, labels_of};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

static OBJECTS: LazyLock<Vec<Value>> = LazyLock::new(kanon_fuzz::sample_objects);

fn views(objects: &[Value]) -> impl Iterator<Item = ObjectView<'_>> {
    objects.iter().map(|object| ObjectView {
        api_version: object["apiVersion"].as_str().unwrap_or_default(),
        kind: object["kind"].as_str().unwrap_or_default(),
        namespace: object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str),
        name: object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        object,
    })
}

fn pointers(text: &str) {
    let checked = pointer::check(text);
    for object in OBJECTS.iter() {
        let found = pointer::get(object, text);
        let deepest = pointer::deepest_existing(object, text);
        // The deepest existing prefix exists.
        let at = if deepest == "/" { "" } else { deepest.as_str() };
        assert!(object.pointer(at).is_some(), "{text}: {deepest}");
        if found.is_some() {
            assert!(checked.is_ok() || text.contains('~'), "{text}");
        }
    }
    // A key escaped as a token reaches that key.
    let escaped = format!("/{}", pointer::escape(text));
    assert_eq!(pointer::check(&escaped), Ok(()), "{escaped}");
    let object: Value = serde_json::json!({ text: 1 });
    assert_eq!(
        pointer::get(&object, &escaped),
        Some(&Value::from(1)),
        "{escaped}"
    );
}

fn jsonpath(text: &str) {
    use kanon_engine::internals::jsonpath::{copied, select};
    let _ = kanon_engine::internals::selects_many(Some(text));
    // The engine's entry point, with its bounds; then the query run as the engine runs it
    // (by reference, within its bounds), which selects the very nodes the library's own run
    // selects, in the same order.
    let Ok(query) = kanon_engine::parse_jsonpath(text) else {
        return;
    };
    for object in OBJECTS.iter() {
        let ours = select(&query, object);
        let theirs = jsonpath_rust::query::js_path_process(&query, object);
        if let (Ok(ours), Ok(theirs)) = (&ours, &theirs) {
            assert_eq!(ours.len(), theirs.len(), "{text}");
            for (a, b) in ours.iter().zip(theirs) {
                assert!(std::ptr::eq(*a, b.val), "{text}");
            }
            if let Ok(copies) = copied(ours) {
                assert!(copies.iter().zip(ours).all(|(c, o)| c == *o), "{text}");
            }
        }
    }
}

fn quantities(text: &str) {
    let mut parts = text.splitn(3, '\n');
    let a = parts.next().unwrap_or_default();
    let b = parts.next().unwrap_or_default();
    let c = parts.next().unwrap_or_default();
    let qa = a.parse::<Quantity>();
    let qb = b.parse::<Quantity>();
    if let Err(e) = &qa {
        let _ = e.to_string();
    }
    for q in [&qa, &qb].into_iter().flatten() {
        let written = q.to_string();
        // The canonical form reads back as the same quantity.
        let again: Quantity = written
            .parse()
            .unwrap_or_else(|e| panic!("{q:?} written as `{written}`: {e}"));
        assert_eq!(again, *q, "{written}");
        let _ = q.to_f64();
        let _ = q.rounded_up(1_000_000);
        let _ = q.rounded_up(1_000_000_000);
    }
    if let (Ok(x), Ok(y)) = (&qa, &qb) {
        assert_eq!(x.cmp(y), y.cmp(x).reverse());
    }
    if let Some(d) = Decimal::parse(c) {
        let _ = d.to_f64();
        let _ = d.is_proper_fraction();
        if let Ok(q) = &qa
            && let Some(scaled) = q.scaled(d)
        {
            let _ = scaled.to_string();
            let _ = scaled.rounded_up(1_000_000);
            let _ = scaled.rounded_up(1_000_000_000);
        }
    }
    let (va, vb) = (Value::from(a), Value::from(b));
    let numeric = serde_json::from_str::<Value>(b).unwrap_or(Value::Null);
    for op in ["+", "-", "*", "/", c] {
        let _ = helpers::process_value(&va, op, b);
        let _ = helpers::process_value(&numeric, op, c);
    }
    let _ = helpers::compare(&va, &vb);
    let _ = helpers::compare(&va, &numeric);
    let _ = helpers::values_equal(&va, &numeric);
    let list = Value::Array(vec![va.clone(), numeric.clone()]);
    let _ = helpers::contains_all(&list, &vb);
    let _ = helpers::contains_none(&list, &numeric);
}

fn selectors(data: &[u8]) {
    let Ok(document) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let mut errors = Vec::new();
    if let Ok(selector) = serde_json::from_value::<ResourceSelector>(document.clone()) {
        let matcher = ResourceMatcher::compile(&selector, "selector", &mut errors);
        let _ = matcher.namespace();
        for view in views(&OBJECTS) {
            let _ = matcher.matches(&view);
        }
    }
    if let Ok(selector) = serde_json::from_value::<LabelSelector>(document.clone()) {
        let matcher = LabelMatcher::compile(&selector, "labelSelector", &mut errors);
        let _ = matcher.is_empty();
        for object in OBJECTS.iter() {
            let _ = matcher.matches(labels_of(object));
        }
    }
    if let Ok(selector) = serde_json::from_value::<FieldSelector>(document) {
        let matcher = FieldMatcher::compile(&selector, "fieldSelector", &mut errors);
        for object in OBJECTS.iter() {
            let _ = matcher.matches(object);
        }
    }
    for error in &errors {
        let _ = error.to_string();
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&choice, rest)) = data.split_first() else {
        return;
    };
    match choice % 4 {
        3 => selectors(rest),
        n => {
            let Ok(text) = std::str::from_utf8(rest) else {
                return;
            };
            match n {
                0 => pointers(text),
                1 => jsonpath(text),
                _ => quantities(text),
            }
        }
    }
});
