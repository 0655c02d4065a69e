//! What the request path records while it changes the object in place, to give the patch
//! afterwards without a copy of the whole object.

use json_patch::jsonptr::Pointer;
use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation};
use serde_json::{Map, Value};

use super::differ::diff_touched;
use super::places::{Place, diff_places, record_place, restore, save_place, split_front};
use super::touched::{Touched, operation_pointers, targets};
use crate::pointer::labels_or_annotations;
use crate::projection::Projection;

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
    pub(super) touched: Touched,
    pub(super) saving: bool,
    /// While saving by place: the places operations targeted, none inside another, each with
    /// its value before the first of them (`None`: absent).
    pub(super) places: Option<Vec<Place>>,
    /// The object's top-level keys, in order, when the first field was saved.
    pub(super) keys: Option<Vec<String>>,
    /// Top-level fields as they were (`None`: absent).
    pub(super) saved: Vec<(String, Option<Value>)>,
    /// The whole object as it was, once an operation targets the root (or a root that is
    /// not an object).
    pub(super) whole: Option<Value>,
    /// Whether the object was defaulted whole, and every operation recorded since named only
    /// its labels or annotations (see [`Changes::settled_but_for_labels`]).
    settled_but_for_labels: bool,
    /// What of the object was decoded, when it was read in part ([`Changes::within`]).
    within: Option<std::sync::Arc<Projection>>,
    /// Whether an operation, or a reading of the whole object, reached beyond `within`.
    beyond: bool,
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

    /// Changes to an object decoded only as far as `projection` keeps (`None`: whole): an
    /// operation that names a place it does not keep whole, or a step that reads the whole
    /// object ([`Changes::read_whole`]), marks the changes as [`Changes::beyond_reading`], and
    /// the object must then be read whole and changed again.
    pub fn within(mut self, projection: Option<std::sync::Arc<Projection>>) -> Self {
        self.within = projection;
        self
    }

    /// Whether something reached beyond what the object's reading decoded: the object and the
    /// changes are then not those a whole reading gives.
    pub fn beyond_reading(&self) -> bool {
        self.beyond
    }

    /// Whether the value at `pointer` was decoded whole (always, for an object read whole);
    /// when not, the changes are [`Changes::beyond_reading`].
    pub(crate) fn reaches(&mut self, pointer: &Pointer) -> bool {
        let Some(projection) = &self.within else {
            return true;
        };
        let covered = projection.covers_pointer(pointer);
        self.beyond |= !covered;
        covered
    }

    /// [`Changes::reaches`] for a path given as its field names.
    pub(crate) fn reaches_path<'t>(&mut self, path: impl IntoIterator<Item = &'t str>) -> bool {
        let Some(projection) = &self.within else {
            return true;
        };
        let covered = projection.covers(path);
        self.beyond |= !covered;
        covered
    }

    /// Notes a step that reads the whole object (a kind's defaulting): beyond the reading of
    /// an object decoded in part. Whether the object was read whole.
    pub(crate) fn read_whole(&mut self) -> bool {
        self.beyond |= self.within.is_some();
        self.within.is_none()
    }

    /// The projection the object was decoded with, when in part.
    pub(crate) fn projection(&self) -> Option<&Projection> {
        self.within.as_deref()
    }

    /// Notes `op`'s places ([`Changes::reaches`]).
    fn check(&mut self, op: &PatchOperation) {
        if self.within.is_some() {
            for pointer in operation_pointers(op) {
                self.reaches(pointer);
            }
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
        self.check(op);
        // A `test` changes nothing.
        self.settled_but_for_labels = self.settled_but_for_labels
            && (matches!(op, PatchOperation::Test(_))
                || operation_pointers(op).all(labels_or_annotations));
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

    /// Whether the object was defaulted whole and nothing but its labels and annotations has
    /// changed since: defaulting it again would change nothing when the kind's defaulting
    /// neither reads nor writes them.
    pub(crate) fn settled_but_for_labels(&self) -> bool {
        self.settled_but_for_labels
    }

    /// Marks the object, as it is now, as defaulted whole.
    pub(crate) fn mark_settled(&mut self) {
        self.settled_but_for_labels = true;
    }

    /// Forgets that the object was defaulted: for a caller that puts back an earlier copy of it
    /// (which no operation records).
    pub(crate) fn unsettle(&mut self) {
        self.settled_but_for_labels = false;
    }

    /// Whether operations are saved by place, which [`Changes::apply_one`] needs.
    pub fn saves_places(&self) -> bool {
        self.places.is_some()
    }

    /// Applies `op` to `doc` (with [`crate::pointer::put`]) and records it, as [`Changes::before`]
    /// then applying would, when it is an `add` into an object or a `replace` below the root
    /// while saving by place: the target is reached in one walk, and the value it replaces is
    /// moved into the record, not copied. Gives `op` back, with `doc` unchanged and nothing
    /// recorded, for anything else (the caller records and applies it the general way, which
    /// also explains failures).
    pub fn apply_one(&mut self, doc: &mut Value, op: PatchOperation) -> Result<(), PatchOperation> {
        self.check(&op);
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
            crate::pointer::put(doc, &path, value, replace)
        } else {
            Err(value)
        };
        match put {
            Ok(before) => {
                // Noted only when applied: one given back is recorded by the caller.
                self.settled_but_for_labels =
                    self.settled_but_for_labels && labels_or_annotations(&path);
                record_place(places, path, before);
                Ok(())
            }
            Err(value) if replace => Err(PatchOperation::Replace(ReplaceOperation { path, value })),
            Err(value) => Err(PatchOperation::Add(AddOperation { path, value })),
        }
    }

    /// Turns the places saved so far into the top-level fields they lie in, as they were, and
    /// saves by top-level field from now on.
    pub(super) fn by_field(&mut self, doc: &Value) {
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

    pub(super) fn save(&mut self, pointer: &Pointer, doc: &Value) {
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
    pub(super) fn original_of(&self, doc: &Value) -> Value {
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
    /// of [`diff`](super::diff()), visiting only where the operations reached.
    pub fn diff_from(&self, original: &Value, now: &Value) -> Patch {
        diff_touched(original, now, &self.touched)
    }

    /// For [`Changes::saving`]: the operations that turn the object as it was into `now`,
    /// those of [`diff`](super::diff()), from the saved fields alone. `None` for [`Changes::tracking`], which
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
