//! The JSON Patch from an object to its mutated form, as kube-apiserver receives it.
//!
//! The operations are exactly those of `json_patch::diff` (same order, same form: objects key by
//! key, arrays index by index with removals shifting later indexes, a `replace` for any other
//! change), so answers do not change with the implementation. It is written for the request
//! path: equal subtrees are skipped after one comparison, and a JSON pointer is built only for
//! an operation that is emitted, not for every key visited.

use json_patch::jsonptr::{Pointer, PointerBuf};
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::{Map, Value};

use crate::plaintext;
use crate::pointer::{entry, find, find_mut, index};

/// A token of the path being visited: an object key or an array index.
#[derive(Clone, Copy)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

struct Differ<'a> {
    /// Where the visited value sits in the whole document (the root unless set).
    base: Option<&'a Pointer>,
    path: Vec<Step<'a>>,
    ops: Vec<PatchOperation>,
}

impl<'a> Differ<'a> {
    fn new() -> Self {
        Differ {
            base: None,
            path: Vec::new(),
            ops: Vec::new(),
        }
    }

    /// `add` of `value` at the current path.
    fn add(&mut self, value: &Value) {
        let path = self.pointer();
        self.ops.push(PatchOperation::Add(AddOperation {
            path,
            value: value.clone(),
        }));
    }

    /// `remove` of the current path.
    fn remove(&mut self) {
        let path = self.pointer();
        self.ops
            .push(PatchOperation::Remove(RemoveOperation { path }));
    }

    fn pointer(&self) -> PointerBuf {
        let mut pointer = self.base.map(Pointer::to_buf).unwrap_or_default();
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
                    self.remove();
                }
                (None, Some(r)) => self.add(r),
                (None, None) => {}
            }
            self.path.pop();
        }
    }
}

/// The operations that turn `left` into `right`.
pub fn diff(left: &Value, right: &Value) -> Patch {
    let mut differ = Differ::new();
    differ.value(left, right);
    Patch(differ.ops)
}

/// The places of a document that JSON Patch operations may have changed: a tree of object keys
/// whose marked nodes stand for their whole subtree.
///
/// Recorded while the operations are applied, it lets [`diff_touched`] skip every subtree no
/// operation reached instead of comparing it, which for a Pod is most of the object.
#[derive(Debug, Default)]
pub struct Touched {
    whole: bool,
    children: Vec<(String, Touched)>,
}

/// The places `op` may change: its `path`, and for a `move` its `from` as well. A `test`
/// changes nothing.
fn targets(op: &PatchOperation) -> impl Iterator<Item = &Pointer> {
    let (first, second) = match op {
        PatchOperation::Test(_) => (None, None),
        PatchOperation::Move(m) => (Some(m.from.as_ref()), Some(m.path.as_ref())),
        other => (Some(other.path()), None),
    };
    first.into_iter().chain(second)
}

impl Touched {
    /// Records what `op` may change ([`targets`]).
    pub fn record(&mut self, op: &PatchOperation) {
        for pointer in targets(op) {
            self.insert(pointer);
        }
    }

    fn insert(&mut self, pointer: &Pointer) {
        let mut node = self;
        for token in pointer.tokens() {
            if node.whole {
                return;
            }
            let key = token.decoded();
            let at = match node.children.iter().position(|(k, _)| *k == *key) {
                Some(at) => at,
                None => {
                    node.children.push((key.into_owned(), Touched::default()));
                    node.children.len() - 1
                }
            };
            node = &mut node.children[at].1;
        }
        // Everything below an operation's target may have changed.
        node.whole = true;
        node.children = Vec::new();
    }

    fn child(&self, key: &str) -> Option<&Touched> {
        self.children
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, child)| child)
    }
}

impl<'a> Differ<'a> {
    fn touched(&mut self, left: &'a Value, right: &'a Value, touched: &Touched) {
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

/// What JSON Patch operations changed in an object they are applied to in place, enough to
/// diff it afterwards without a copy of the whole object: where they reached ([`Touched`]) and,
/// when `saving`, what they reached as it was before the first of them.
///
/// While every operation adds or replaces one value in an object (or replaces an array item),
/// as overriders almost always do, only the values at their targets are saved: adding a label
/// saves that the label was absent, not the object's metadata. The first operation of another
/// kind (a removal, a move, an insertion into an array, the root) turns those places into the
/// top-level fields they lie in, as they were, and saving goes on by top-level field.
///
/// Call [`Changes::before`] with the object as it is just before each operation applies (or,
/// for operations applied in one step, before the step).
#[derive(Debug, Default)]
pub struct Changes {
    touched: Touched,
    saving: bool,
    /// While saving by place: the places operations targeted, none inside another, each with
    /// its value before the first of them (`None`: absent).
    places: Option<Vec<Place>>,
    /// The object's top-level keys, in order, when the first field was saved.
    keys: Option<Vec<String>>,
    /// Top-level fields as they were (`None`: absent).
    saved: Vec<(String, Option<Value>)>,
    /// The whole object as it was, once an operation targets the root (or a root that is
    /// not an object).
    whole: Option<Value>,
}

impl Changes {
    /// Changes to an object whose original is kept by the caller: only where they reach.
    pub fn tracking() -> Self {
        Changes::default()
    }

    /// Changes to an object that is changed in place: what they reach is saved first.
    pub fn saving() -> Self {
        Changes {
            saving: true,
            places: Some(Vec::new()),
            ..Changes::default()
        }
    }

    /// Whether no operation was recorded.
    pub fn is_empty(&self) -> bool {
        !self.touched.whole
            && self.touched.children.is_empty()
            && self.places.as_ref().is_none_or(Vec::is_empty)
    }

    /// Records `op`, about to be applied to `doc`.
    pub fn before(&mut self, op: &PatchOperation, doc: &Value) {
        if let Some(places) = &mut self.places {
            if save_place(places, op, doc) {
                return;
            }
            self.by_field(doc);
        }
        self.touched.record(op);
        if self.saving {
            for pointer in targets(op) {
                self.save(pointer, doc);
            }
        }
    }

    /// Whether operations are saved by place, which [`Changes::apply_one`] needs.
    pub fn saves_places(&self) -> bool {
        self.places.is_some()
    }

    /// Applies `op` to `doc` (with [`plaintext::put`]) and records it, as [`Changes::before`]
    /// then applying would, when it is an `add` into an object or a `replace` below the root
    /// while saving by place: the target is reached in one walk, and the value it replaces is
    /// moved into the record, not copied. Gives `op` back, with `doc` unchanged and nothing
    /// recorded, for anything else (the caller records and applies it the general way, which
    /// also explains failures).
    pub fn apply_one(&mut self, doc: &mut Value, op: PatchOperation) -> Result<(), PatchOperation> {
        let Some(places) = &mut self.places else {
            return Err(op);
        };
        let (path, value, replace) = match op {
            PatchOperation::Add(add) => (add.path, add.value, false),
            PatchOperation::Replace(replace) => (replace.path, replace.value, true),
            other => return Err(other),
        };
        // A place lies below the root of an object (as `save_place` requires).
        let put = if doc.is_object() && !path.is_root() {
            plaintext::put(doc, &path, value, replace)
        } else {
            Err(value)
        };
        match put {
            Ok(before) => {
                record_place(places, path, before);
                Ok(())
            }
            Err(value) if replace => Err(PatchOperation::Replace(ReplaceOperation { path, value })),
            Err(value) => Err(PatchOperation::Add(AddOperation { path, value })),
        }
    }

    /// Turns the places saved so far into the top-level fields they lie in, as they were, and
    /// saves by top-level field from now on.
    fn by_field(&mut self, doc: &Value) {
        let Some(places) = self.places.take() else {
            return;
        };
        if places.is_empty() {
            return;
        }
        for place in &places {
            self.touched.insert(&place.path);
        }
        let Value::Object(map) = doc else {
            // Places are only saved in an object; kept total all the same.
            let mut whole = doc.clone();
            for place in places {
                restore(&mut whole, &place.path, place.before);
            }
            self.whole = Some(whole);
            return;
        };
        // The original keys: all but those the operations added (places never remove keys).
        let added = |key: &str| {
            places.iter().any(|p| {
                p.before.is_none()
                    && p.path.count() == 1
                    && p.path.tokens().any(|t| t.decoded() == key)
            })
        };
        self.keys = Some(map.keys().filter(|k| !added(k)).cloned().collect());
        for place in places {
            let Some((field, rest)) = split_front(&place.path) else {
                continue;
            };
            if rest.is_root() {
                self.saved.push((field, place.before));
                continue;
            }
            let at = match self.saved.iter().position(|(k, _)| *k == field) {
                Some(at) => at,
                None => {
                    let value = map.get(&field).cloned();
                    self.saved.push((field, value));
                    self.saved.len() - 1
                }
            };
            if let Some(value) = &mut self.saved[at].1 {
                restore(value, rest, place.before);
            }
        }
    }

    fn save(&mut self, pointer: &Pointer, doc: &Value) {
        if self.whole.is_some() {
            return;
        }
        let first = pointer.tokens().next();
        let (Some(token), Value::Object(map)) = (first, doc) else {
            self.whole = Some(self.original_of(doc));
            return;
        };
        let key = token.decoded();
        if self.saved.iter().any(|(k, _)| *k == *key) {
            return;
        }
        self.keys
            .get_or_insert_with(|| map.keys().cloned().collect());
        let value = map.get(key.as_ref()).cloned();
        self.saved.push((key.into_owned(), value));
    }

    /// `doc` with the saved fields put back as they were, in their original order.
    fn original_of(&self, doc: &Value) -> Value {
        let (Some(keys), Value::Object(map)) = (&self.keys, doc) else {
            // Nothing saved yet: `doc` is still the original.
            return doc.clone();
        };
        let mut original = Map::new();
        for key in keys {
            let value = match self.saved.iter().find(|(k, _)| k == key) {
                Some((_, saved)) => saved.clone(),
                None => map.get(key).cloned(),
            };
            if let Some(value) = value {
                original.insert(key.clone(), value);
            }
        }
        Value::Object(original)
    }

    /// The operations that turn `original` into `now`, the object they were applied to: those
    /// of [`diff`], visiting only where the operations reached.
    pub fn diff_from(&self, original: &Value, now: &Value) -> Patch {
        diff_touched(original, now, &self.touched)
    }

    /// For [`Changes::saving`]: the operations that turn the object as it was into `now`,
    /// those of [`diff`], from the saved fields alone. `None` for [`Changes::tracking`], which
    /// saved nothing (use [`Changes::diff_from`]).
    ///
    /// Takes `now` because values added where nothing was are moved into the patch, not copied.
    pub fn into_diff(self, now: Value) -> Option<Patch> {
        if !self.saving {
            return None;
        }
        if let Some(places) = self.places {
            return Some(diff_places(&places, now));
        }
        let now = &now;
        if let Some(whole) = &self.whole {
            return Some(diff_touched(whole, now, &self.touched));
        }
        // The saved fields, in the object's original order, stand for the original: the diff
        // visits nothing else.
        let mut saved = self.saved;
        let mut original = Map::new();
        for key in self.keys.into_iter().flatten() {
            if let Some(at) = saved.iter().position(|(k, _)| *k == key)
                && let (_, Some(value)) = saved.swap_remove(at)
            {
                original.insert(key, value);
            }
        }
        Some(diff_touched(&Value::Object(original), now, &self.touched))
    }
}

/// A place an operation targeted and its value before (`None`: absent).
#[derive(Debug)]
struct Place {
    path: PointerBuf,
    before: Option<Value>,
}

/// Saves what `op` targets in `doc` as a place, when it adds or replaces one value in an
/// object, or replaces an array item (a `test` changes nothing). `false` when it does
/// something else: the caller saves by top-level field instead.
///
/// Because every operation recorded so far did one of those, the objects above the places
/// only ever gained keys (at their end) and had values replaced, so what was there before is
/// the value now with the places put back.
fn save_place(places: &mut Vec<Place>, op: &PatchOperation, doc: &Value) -> bool {
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
fn inside_place(places: &[Place], path: &Pointer) -> bool {
    places
        .iter()
        .any(|p| path.starts_with(&p.path) && path.len() != p.path.len())
}

/// Records that `path` held `before` before the operation now applied, unless a saved place
/// already covers it; saved places inside it are folded into it.
fn record_place(places: &mut Vec<Place>, path: PointerBuf, mut before: Option<Value>) {
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
fn diff_places(places: &[Place], mut now: Value) -> Patch {
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
fn nests(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.values().any(|v| v.is_object() || v.is_array()),
        Value::Array(items) => items.iter().any(|v| v.is_object() || v.is_array()),
        _ => false,
    }
}

/// [`diff_places`] on a borrowed `now`: the operations, and the operations whose value (left
/// `null`) is to be moved from `now` at the place's path.
fn diff_places_in<'p>(
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
fn restore(value: &mut Value, at: &Pointer, before: Option<Value>) {
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
fn split_front(pointer: &Pointer) -> Option<(String, &Pointer)> {
    let first = pointer.tokens().next()?;
    let rest = pointer.strip_prefix(&PointerBuf::from_tokens([first.clone()]))?;
    Some((first.decoded().into_owned(), rest))
}

/// How `a` and `b` (neither inside the other) are ordered in `doc` as `diff` visits it: at the
/// first token where they part, object keys in the object's order (keys it lacks after those
/// it has), array items by index.
fn document_order(doc: &Value, a: &Pointer, b: &Pointer) -> std::cmp::Ordering {
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

/// [`diff`] when `right` differs from `left` only where `touched` says: the same operations,
/// without visiting the rest. A place changed but not recorded in `touched` is missed.
pub fn diff_touched(left: &Value, right: &Value, touched: &Touched) -> Patch {
    let mut differ = Differ::new();
    differ.touched(left, right, touched);
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
                        (PatchOperation::Remove(r), _) => {
                            PatchOperation::Replace(ReplaceOperation {
                                path: r.path,
                                value: value(&mut rng, 1),
                            })
                        }
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
}
