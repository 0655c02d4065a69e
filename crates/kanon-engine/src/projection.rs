//! What of a request's object (and old object) the policies that may select it can read: a
//! reader of the review may decode only that and skip the rest of the object's text, which is
//! most of a review (its `managedFields`, the parts of its spec and status no rule names).
//!
//! A projection is only ever made where every reader is known: the rules of policies and
//! admission policies — CEL expressions ([`kanon_cel::FieldsRead`]), templates, programs and
//! placeholder texts (`crate::program::reads`), references to the object or its old version by
//! JSON pointer, the places constant patches name — and kanon's own reads of the object's type
//! and metadata (selectors, owners, events), which every projection keeps. Anything else — a
//! lookup whose target is written with placeholders, a JSONPath, a field selector, an
//! exception, a workload's pod template, a policy with the `Audit` action (whose admitted
//! objects go to the audit's reports) — reads it whole.
//!
//! What a mutation writes is not always known before it runs (a path an expression makes, an
//! apply configuration): each operation is checked against the projection as it applies
//! ([`crate::diff::Changes::within`]), and one that reaches beyond it has the review read whole.

use kanon_cel::FieldsRead;

/// The parts of an object to decode; the rest may be skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projection(Part);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Whole,
    /// By name, in the order of the names: every policy keeps one, so a few fields take a few
    /// dozen bytes each rather than a map's node (a `BTreeMap` leaf is half a kilobyte).
    Fields(Vec<(Box<str>, Projection)>),
}

/// The entry of `name` in `fields` (sorted by name), added as nothing when it is not there.
fn entry<'f>(fields: &'f mut Vec<(Box<str>, Projection)>, name: &str) -> &'f mut Projection {
    let at = match fields.binary_search_by(|(field, _)| (**field).cmp(name)) {
        Ok(at) => at,
        Err(at) => {
            fields.insert(at, (name.into(), Projection::nothing()));
            at
        }
    };
    &mut fields[at].1
}

/// What a projection says of one field of the value it applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selected<'p> {
    /// Nothing reads it: skip it.
    Skip,
    /// Decode it whole.
    Whole,
    /// Decode it with this projection (when it is an object; any other value whole).
    Within(&'p Projection),
}

/// The fields of `metadata` kanon itself reads (all of ObjectMeta but `managedFields`).
const METADATA: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
];

impl Projection {
    /// The whole object.
    pub fn whole() -> Projection {
        Projection(Part::Whole)
    }

    /// Nothing of the object.
    pub(crate) fn nothing() -> Projection {
        Projection(Part::Fields(Vec::new()))
    }

    /// What kanon reads of every object: its `apiVersion`, `kind` and metadata but for
    /// `managedFields`.
    pub fn base() -> Projection {
        let mut projection = Projection::nothing();
        projection.add_path(["apiVersion"]);
        projection.add_path(["kind"]);
        for field in METADATA {
            projection.add_path(["metadata", field]);
        }
        projection
    }

    /// Whether it keeps the whole object.
    pub fn is_whole(&self) -> bool {
        self.0 == Part::Whole
    }

    /// Adds what a program reads of the object.
    pub fn add_read(&mut self, read: &FieldsRead) {
        match read {
            FieldsRead::Whole => self.0 = Part::Whole,
            FieldsRead::Paths(paths) => {
                for path in paths {
                    self.add_path(path.iter().map(|field| &**field));
                }
            }
        }
    }

    /// Adds the subtree at `pointer` (a place a constant patch writes; the whole object for
    /// the root).
    pub(crate) fn add_pointer(&mut self, pointer: &json_patch::jsonptr::Pointer) {
        let tokens: Vec<String> = pointer
            .tokens()
            .map(|token| token.decoded().into_owned())
            .collect();
        self.add_path(tokens.iter().map(String::as_str));
    }

    /// Adds the subtree at `path` (the whole object for an empty path).
    fn add_path<'f>(&mut self, path: impl IntoIterator<Item = &'f str>) {
        let mut part = &mut self.0;
        for field in path {
            // A CEL name escaped as Kubernetes escapes property names (`__dash__`, …) may
            // stand for another key: what holds it is read whole.
            if field.contains("__") {
                break;
            }
            match part {
                Part::Whole => return,
                Part::Fields(fields) => part = &mut entry(fields, field).0,
            }
        }
        *part = Part::Whole;
    }

    /// Adds everything `other` keeps.
    pub(crate) fn union(&mut self, other: &Projection) {
        union(&mut self.0, &other.0);
    }

    /// Whether the value at the path of `tokens` is decoded whole: the path reaches a part
    /// kept whole at or above its end. A change there, or a read of it, sees what a whole
    /// reading sees; anywhere else (a skipped field, or an object decoded only in part) it
    /// may not.
    pub fn covers<'t>(&self, tokens: impl IntoIterator<Item = &'t str>) -> bool {
        let mut at = self;
        for token in tokens {
            match at.select(token) {
                Selected::Skip => return false,
                Selected::Whole => return true,
                Selected::Within(within) => at = within,
            }
        }
        at.is_whole()
    }

    /// [`Projection::covers`] for the place `pointer` names.
    pub(crate) fn covers_pointer(&self, pointer: &json_patch::jsonptr::Pointer) -> bool {
        let mut at = self;
        for token in pointer.tokens() {
            match at.select(&token.decoded()) {
                Selected::Skip => return false,
                Selected::Whole => return true,
                Selected::Within(within) => at = within,
            }
        }
        at.is_whole()
    }

    /// Whether an apply configuration merged into `live` (the object as decoded) reaches only
    /// what is decoded whole: each of its fields lies in a part kept whole, or is the object's
    /// root or `metadata` (plain structures, merged field by field, never atomic) holding such
    /// fields. A merge into any other part decoded in part might read the fields it skipped.
    /// The root and `metadata` must also keep a field the configuration does not name, as
    /// decoded: whether one is left decides how the merge goes, and the skipped fields cannot
    /// be asked.
    pub fn covers_configuration(
        &self,
        configuration: &serde_json::Value,
        live: &serde_json::Value,
    ) -> bool {
        fn within(
            projection: &Projection,
            value: &serde_json::Value,
            live: Option<&serde_json::Value>,
            metadata: bool,
        ) -> bool {
            let serde_json::Value::Object(fields) = value else {
                return projection.is_whole();
            };
            if projection.is_whole() {
                return true;
            }
            let Some(serde_json::Value::Object(live)) = live else {
                return false;
            };
            live.keys().any(|name| !fields.contains_key(name))
                && fields
                    .iter()
                    .all(|(name, value)| match projection.select(name) {
                        Selected::Skip => false,
                        Selected::Whole => true,
                        Selected::Within(inner) => {
                            metadata
                                && name == "metadata"
                                && within(inner, value, live.get(name), false)
                        }
                    })
        }
        within(self, configuration, Some(live), true)
    }

    /// What it says of the field `name`.
    pub fn select(&self, name: &str) -> Selected<'_> {
        match &self.0 {
            Part::Whole => Selected::Whole,
            Part::Fields(fields) => {
                match fields.binary_search_by(|(field, _)| (**field).cmp(name)) {
                    Err(_) => Selected::Skip,
                    Ok(at) => match &fields[at].1 {
                        Projection(Part::Whole) => Selected::Whole,
                        within => Selected::Within(within),
                    },
                }
            }
        }
    }
}

fn union(into: &mut Part, other: &Part) {
    match (into, other) {
        (Part::Whole, _) => {}
        (into, Part::Whole) => *into = Part::Whole,
        (Part::Fields(into), Part::Fields(other)) => {
            for (name, part) in other {
                union(&mut entry(into, name).0, &part.0);
            }
        }
    }
}

#[cfg(test)]
mod tests;
