//! JSONPaths that descend (`$..*`) on a deeply nested object: the selection refers to the
//! object rather than copying each subtree once per ancestor, and a result that would still
//! hold too much is refused by name, under the policy's `failurePolicy` (issue 34).
//!
//! The allocator below counts the bytes the current thread holds, so the test can assert
//! what a review allocated at its peak; it counts per thread, so tests running beside it in
//! other threads do not disturb it.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::*;
use kanon_engine::{Decision, NoObjects};
use serde_json::{Value, json};

struct Counting;

thread_local! {
    static HELD: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // `try_with`: the thread's slots may already be gone while it exits.
    let _ = HELD.try_with(|held| {
        let now = held.get() + delta;
        held.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every call is passed on to the system allocator unchanged; the counting touches
// only const-initialised thread locals, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: the caller's pointer and layout, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        // SAFETY: the caller's pointer, layout and size, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// What `f` allocated on this thread at its peak, above what the thread held before.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = HELD.with(Cell::get);
    PEAK.with(|peak| peak.set(before));
    let out = f();
    let peak = PEAK.with(Cell::get);
    (out, usize::try_from(peak - before).unwrap_or(0))
}

const MIB: usize = 1024 * 1024;

/// A Pod whose spec nests `depth` objects, each with `pad` bytes of text beside the next.
fn nested_pod(depth: usize, pad: usize) -> Value {
    let mut nested = json!({"leaf": true});
    for level in 0..depth {
        nested = json!({"pad": format!("{level}").repeat(pad / format!("{level}").len()), "next": nested});
    }
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "deep", "namespace": "default"},
           "spec": {"containers": [{"name": "app", "image": "nginx"}], "deep": nested}})
}

/// What a test prints of a decision: not the object, which is megabytes long.
fn summary(d: &Decision) -> String {
    format!(
        "allowed {}, messages {:?}, warnings {:?}",
        d.allowed, d.messages, d.warnings
    )
}

fn review_with_path(path: &str, failure_policy: &str, object: &Value) -> Decision {
    let doc = cvp(
        "descend",
        json!({"failurePolicy": failure_policy, "validateRules": [{"template": {"type": "condition", "condition": {
            "cond": "Exist", "dataRef": {"from": "current", "path": path},
            "message": "found",
        }}}]}),
    );
    let set = set_of(&[doc]);
    let request = create(object);
    kanon_engine::block_on(set.review(&request, &NoObjects))
}

/// The shape of the probe: 2.5 MB nested 120 deep. `$..*` selects every level, and
/// copying each would copy every level's subtree again: some 150 MB. The review allocates a
/// small part of that and is refused by the bound's name (denied under `Fail`, allowed with
/// a warning under `Ignore`).
#[test]
fn descending_a_deeply_nested_object_stays_within_the_jsonpath_bound() {
    let object = nested_pod(120, 20_000);
    assert!(serde_json::to_vec(&object).map(|v| v.len()).unwrap_or(0) > 2_300_000);

    let (denied, peak) = peak_of(|| review_with_path("$..*", "Fail", &object));
    eprintln!("$..* peak: {} MiB", peak / MIB);
    assert!(!denied.allowed, "{}", summary(&denied));
    let message = denied.messages.join("\n");
    assert!(
        message.contains("JSONPath") && message.contains("MiB"),
        "the bound is named: {message}"
    );
    // The object and its request take a few MiB (8 measured); copying every level took 152.
    assert!(peak < 24 * MIB, "peak {} MiB", peak / MIB);

    let ignored = review_with_path("$..*", "Ignore", &object);
    assert!(ignored.allowed, "{}", summary(&ignored));
    assert!(
        ignored.warnings.join("\n").contains("JSONPath"),
        "{:?}",
        ignored.warnings
    );
}

/// A descent that selects little still works on the same object, without the copies.
#[test]
fn a_descent_that_selects_little_reads_in_place() {
    let object = nested_pod(120, 20_000);
    let (decision, peak) = peak_of(|| review_with_path("$..leaf", "Fail", &object));
    eprintln!("$..leaf peak: {} MiB", peak / MIB);
    // `leaf` exists, so Exist denies with the rule's own message.
    assert!(!decision.allowed, "{}", summary(&decision));
    assert_eq!(decision.messages.len(), 1, "{}", summary(&decision));
    assert!(
        decision.messages[0].contains("found"),
        "{}",
        summary(&decision)
    );
    assert!(peak < 24 * MIB, "peak {} MiB", peak / MIB);
}
