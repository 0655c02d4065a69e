//! Saved places: the values at the targets of operations before they applied, and the patch
//! from them to the changed object.

use json_patch::jsonptr::{Pointer, PointerBuf};
use json_patch::{Patch, PatchOperation};
use serde_json::Value;

use super::differ::Differ;
use crate::pointer::{entry, find, find_mut, index};

/// A place an operation targeted and its value before (`None`: absent).
#[derive(Debug)]
pub(super) struct Place {
    pub(super) path: PointerBuf,
    pub(super) before: Option<Value>,
}

/// Saves what `op` targets in `doc` as a place, when it adds or replaces one value in an
/// object, or replaces an array item (a `test` changes nothing). `false` when it does
/// something else: the caller saves by top-level field instead.
///
/// Because every operation recorded so far did one of those, the objects above the places
/// only ever gained keys (at their end) and had values replaced, so what was there before is
/// the value now with the places put back.
pub(super) fn save_place(places: &mut Vec<Place>, op: &PatchOperation, doc: &Value) -> bool {
    let path = match op {
        PatchOperation::Test(_) => return true,
        PatchOperation::Add(add) => &add.path,
        PatchOperation::Replace(replace) => &replace.path,
        _ => return false,
    };
    let Some((parent, last)) = path.split_back() else {
        return false;
    };
    if !doc.is_object() {
        return false;
    }
    if inside_place(places, path) {
        // Inside a saved place: what was there is saved already.
        return true;
    }
    let target = match find(doc, parent.as_str()) {
        Some(Value::Object(map)) => entry(map, &last.decoded()),
        // Replacing an item shifts nothing; adding one does.
        Some(Value::Array(items)) if matches!(op, PatchOperation::Replace(_)) => {
            index(&last.decoded()).and_then(|i| items.get(i))
        }
        Some(Value::Array(_)) => return false,
        // No object or array to change: the operation fails, unless an earlier one of its step
        // makes one, and that one saved a place around this one (above). Nothing was there.
        _ => None,
    };
    if places.iter().any(|p| p.path == *path) {
        // At a saved place, changing nothing around it: no copy of the target.
        return true;
    }
    record_place(places, path.to_buf(), target.cloned());
    true
}

/// Whether `path` lies inside one of the saved places (not at one).
pub(super) fn inside_place(places: &[Place], path: &Pointer) -> bool {
    places
        .iter()
        .any(|p| path.starts_with(&p.path) && path.len() != p.path.len())
}

/// Records that `path` held `before` before the operation now applied, unless a saved place
/// already covers it; saved places inside it are folded into it.
pub(super) fn record_place(places: &mut Vec<Place>, path: PointerBuf, mut before: Option<Value>) {
    if inside_place(places, &path) || places.iter().any(|p| p.path == path) {
        // Inside or at a saved place: what was there is saved already.
        return;
    }
    if places.iter().any(|p| p.path.starts_with(&path)) {
        let mut kept = Vec::with_capacity(places.len());
        for place in places.drain(..) {
            // `strip_prefix` alone would take `/a/` for a prefix of `/a/b`.
            let inside = place.path.starts_with(&path);
            match (
                place.path.strip_prefix(&path).filter(|_| inside),
                &mut before,
            ) {
                (None, _) => kept.push(place),
                // Around saved places: what was here is the value now with them put back.
                (Some(rest), Some(value)) => restore(value, rest, place.before),
                // Nothing here now, so nothing was (places never remove): nor inside.
                (Some(_), None) => {}
            }
        }
        *places = kept;
    }
    places.push(Place { path, before });
}

/// The operations of [`diff`] from the places alone. `diff` visits keys in `now`'s order, depth
/// first, so the places are taken in their order in `now`, each diffed where it is. A nested
/// value added where nothing was is moved from `now` into its `add` (places never nest, so no
/// other place needs it), which spares copying it.
pub(super) fn diff_places(places: &[Place], mut now: Value) -> Patch {
    let (mut ops, moved) = diff_places_in(places, &now);
    for (at, path) in moved {
        if let (Some(PatchOperation::Add(add)), Some(value)) =
            (ops.get_mut(at), find_mut(&mut now, path.as_str()))
        {
            add.value = std::mem::take(value);
        }
    }
    Patch(ops)
}

/// Whether `value` holds an object or a list.
pub(super) fn nests(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.values().any(|v| v.is_object() || v.is_array()),
        Value::Array(items) => items.iter().any(|v| v.is_object() || v.is_array()),
        _ => false,
    }
}

/// [`diff_places`] on a borrowed `now`: the operations, and the operations whose value (left
/// `null`) is to be moved from `now` at the place's path.
pub(super) fn diff_places_in<'p>(
    places: &'p [Place],
    now: &Value,
) -> (Vec<PatchOperation>, Vec<(usize, &'p Pointer)>) {
    /// A place, its parent's pointer, its value now and its position in its parent now.
    struct Found<'p, 'n> {
        place: &'p Place,
        parent: &'p str,
        now: Option<&'n Value>,
        position: Option<usize>,
    }
    let mut found: Vec<Found<'p, '_>> = Vec::with_capacity(places.len());
    // Places are mostly keys of one object (labels, annotations): it is looked up once.
    let mut last_parent: Option<(&str, Option<&Value>)> = None;
    for place in places {
        let Some((parent, last)) = place.path.split_back() else {
            continue;
        };
        let parent_now = match last_parent {
            Some((text, value)) if text == parent.as_str() => value,
            _ => {
                let value = find(now, parent.as_str());
                last_parent = Some((parent.as_str(), value));
                value
            }
        };
        let key = last.decoded();
        let (position, value) = match parent_now {
            Some(Value::Object(map)) => map
                .iter()
                .enumerate()
                .find(|(_, (k, _))| **k == *key)
                .map_or((None, None), |(i, (_, v))| (Some(i), Some(v))),
            Some(Value::Array(items)) => match index(&key).and_then(|i| Some((i, items.get(i)?))) {
                Some((i, item)) => (Some(i), Some(item)),
                None => (None, None),
            },
            _ => (None, None),
        };
        found.push(Found {
            place,
            parent: parent.as_str(),
            now: value,
            position,
        });
    }
    // Stable, and no more than one comparison per place when already in order.
    found.sort_by(
        |a, b| match (a.parent == b.parent, a.position, b.position) {
            (true, Some(x), Some(y)) => x.cmp(&y),
            _ => document_order(now, &a.place.path, &b.place.path),
        },
    );
    let mut differ = Differ::new();
    let mut moved = Vec::new();
    for f in &found {
        differ.base = Some(&f.place.path);
        match (&f.place.before, f.now) {
            // Finding the value again costs about what copying a flat one does: only nested
            // values are moved.
            (None, Some(now)) if nests(now) => {
                moved.push((differ.ops.len(), f.place.path.as_ref()));
                differ.add(&Value::Null);
            }
            (None, Some(now)) => differ.add(now),
            (Some(_), None) => differ.remove(),
            (Some(before), Some(now)) => differ.value(before, now),
            (None, None) => {}
        }
    }
    (differ.ops, moved)
}

/// Puts `before` back at `at` (relative to `value`): absent means removed.
pub(super) fn restore(value: &mut Value, at: &Pointer, before: Option<Value>) {
    let Some((parent, last)) = at.split_back() else {
        if let Some(before) = before {
            *value = before;
        }
        return;
    };
    match (find_mut(value, parent.as_str()), before) {
        (Some(Value::Object(map)), None) => {
            // The key was added at the end; the others keep their order.
            map.shift_remove(last.decoded().as_ref());
        }
        (Some(Value::Object(map)), Some(before)) => {
            map.insert(last.decoded().into_owned(), before);
        }
        (Some(Value::Array(items)), Some(before)) => {
            if let Some(item) = index(&last.decoded()).and_then(|i| items.get_mut(i)) {
                *item = before;
            }
        }
        _ => {}
    }
}

/// The first token of `pointer`, decoded, and the rest.
pub(super) fn split_front(pointer: &Pointer) -> Option<(String, &Pointer)> {
    let first = pointer.tokens().next()?;
    let rest = pointer.strip_prefix(&PointerBuf::from_tokens([first.clone()]))?;
    Some((first.decoded().into_owned(), rest))
}

/// How `a` and `b` (neither inside the other) are ordered in `doc` as `diff` visits it: at the
/// first token where they part, object keys in the object's order (keys it lacks after those
/// it has), array items by index.
pub(super) fn document_order(doc: &Value, a: &Pointer, b: &Pointer) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let mut at = Some(doc);
    for (x, y) in a.tokens().zip(b.tokens()) {
        if x == y {
            at = at.and_then(|v| match v {
                Value::Object(map) => map.get(x.decoded().as_ref()),
                Value::Array(items) => index(&x.decoded()).and_then(|i| items.get(i)),
                _ => None,
            });
            continue;
        }
        let (x, y) = (x.decoded(), y.decoded());
        return match at {
            Some(Value::Object(map)) => {
                let position = |key: &str| map.keys().position(|k| k == key);
                match (position(&x), position(&y)) {
                    (Some(i), Some(j)) => i.cmp(&j),
                    (Some(_), None) => Ordering::Less,
                    (None, Some(_)) => Ordering::Greater,
                    (None, None) => x.cmp(&y),
                }
            }
            Some(Value::Array(_)) => match (index(&x), index(&y)) {
                (Some(i), Some(j)) => i.cmp(&j),
                _ => x.cmp(&y),
            },
            _ => x.cmp(&y),
        };
    }
    a.count().cmp(&b.count())
}
