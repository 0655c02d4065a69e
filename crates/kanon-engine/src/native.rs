//! Structured templates executed natively.
//!
//! A structured template is rendered once per policy generation into a rule program, and that
//! program is its documented semantics (`kanon render` and the policy status show it). Running
//! the program on each request costs the program context, the interpreter and parsing its
//! output. Beside the program, compiling a template builds its native form ([`NativeRule`]),
//! which computes the same operations (or the same verdict) straight on the JSON object,
//! calling the very helper functions the program calls (`helpers`, `podspec`).
//!
//! The native form is a shortcut, never a second semantics: whenever its result could differ
//! from the program's it declines ([`NativeRule::run`] gives `None`) and the program runs. It
//! declines on anything the program would report as an error (a helper's error, a value of an
//! unexpected type, a structured `valueRef` for a label), on values only minijinja's number
//! coercion can compare (an integer against a float), on a `field` value holding a float its
//! output would not give back exactly, near the program's limits (output size, fuel, nesting
//! of the output). A condition's message is not part of either: it is
//! rendered apart, after the verdict (see [`crate::condition`]). `tests/native.rs` runs both on
//! generated inputs and requires the same operations, verdicts and errors.

use std::sync::Arc;

use json_patch::jsonptr::{Pointer, PointerBuf};
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation};
use kanon_api::{Cond, FieldWithin};
use serde_json::{Map, Value};

use crate::condition::{Compared, ConditionVerdict};
use crate::helpers;
use crate::podspec::{self, Edit};
use crate::pointer::{entry, member};
use crate::program::ProgramLimits;

/// Most entries of a label, annotation or node selector map handled natively (each costs the
/// program fuel).
const MAX_MAP_ENTRIES: usize = 10_000;
/// Most containers and init containers, together, handled natively (the program's loop costs
/// fuel per container).
const MAX_CONTAINERS: usize = 128;
/// Most values a JSONPath `dataRef` may select for a native condition.
const MAX_SELECTED: usize = 1_000;
/// Deepest nesting of a value in an operation handled natively: the program's output is
/// parsed back, and the parser refuses more than 128 levels.
const MAX_DEPTH: usize = 100;
/// Room for what the program writes besides the operations (whitespace, brackets).
const OUTPUT_SLACK: usize = 1024;

/// The native form of a structured template.
#[derive(Clone, Debug)]
pub enum NativeRule {
    /// An override template.
    Override(NativeOverride),
    /// A validate condition.
    Condition(NativeCondition),
}

/// What a native run produced: what the program's output reads as.
#[derive(Clone, Debug, PartialEq)]
pub enum NativeOutcome {
    /// The operations of an override template.
    Patch(Patch),
    /// The verdict of a condition.
    Verdict(ConditionVerdict),
}

impl NativeRule {
    /// Runs the template on `object` with the resolved references (`refs.value`,
    /// `refs.data`), within the limits of its program. `None`: the native form cannot vouch
    /// for the result here, run the program.
    pub fn run(
        &self,
        object: &Value,
        refs: &Map<String, Value>,
        limits: &ProgramLimits,
    ) -> Option<NativeOutcome> {
        match self {
            NativeRule::Override(o) => o.run(object, refs, limits).map(NativeOutcome::Patch),
            NativeRule::Condition(c) => c.run(refs).map(NativeOutcome::Verdict),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Override templates
// ---------------------------------------------------------------------------------------------

/// The native form of an override template.
#[derive(Clone, Debug)]
pub struct NativeOverride {
    change: Change,
}

/// Which string map a template edits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapAt {
    /// `/metadata/annotations`.
    Annotations,
    /// `/metadata/labels`.
    Labels,
    /// The pod spec's `nodeSelector`.
    NodeSelector,
}

/// How a template edits a string map.
#[derive(Clone, Debug)]
pub(crate) enum MapEdit {
    /// Remove these keys (`keys`: the same keys as a JSON list, as the program passes them).
    Remove { names: Vec<String>, keys: Value },
    /// Set these entries (an object of strings).
    Set(Value),
    /// Set this key to the text of `refs.value`.
    SetFromRef(String),
    /// Set these entries where the map has none (`default`).
    Default(Value),
    /// Set this key to the text of `refs.value` where the map has none (`default`).
    DefaultFromRef(String),
}

/// The value a `field` template sets.
#[derive(Clone, Debug)]
pub(crate) enum FieldValue {
    /// None: `remove`.
    Nothing,
    /// A constant, and whether the program's output gives it back exactly ([`reparses`]).
    Constant { value: Value, reparses: bool },
    /// `refs.value`; absent or null changes nothing.
    Reference,
}

impl FieldValue {
    /// A constant value.
    pub(crate) fn constant(value: Value) -> Self {
        let reparses = reparses(&value);
        FieldValue::Constant { value, reparses }
    }
}

/// How a template edits each selected container's `resources`.
#[derive(Clone, Debug)]
pub(crate) enum ContainerEdit {
    /// `resources_with(resources, template, edit)`.
    Resources(Value),
    /// `oversold(resources, factors, edit)`; the factors also read already, in the same order.
    Oversell(Value, Vec<(String, crate::quantity::Decimal)>),
}

/// A pod spec field edited as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SpecField {
    /// `tolerations_with(tolerations, template, edit)`.
    Tolerations,
    /// `affinity_with(affinity, template, edit)`.
    Affinity,
}

#[derive(Clone, Debug)]
enum Change {
    Map {
        at: MapAt,
        edit: MapEdit,
    },
    Containers {
        names: Vec<String>,
        edit: ContainerEdit,
        op: Edit,
    },
    SpecField {
        field: SpecField,
        template: Value,
        op: Edit,
        /// The field as the template makes it where the pod spec has none, which depends on
        /// the template alone: worked out once, with its [`value_bound`] (`None`: too deep).
        from_absent: (Value, Option<usize>),
    },
    Field(FieldChange),
}

/// A `field` template: the field at `path` below `within` (containers narrowed by `names`).
#[derive(Clone, Debug)]
struct FieldChange {
    within: FieldWithin,
    names: Vec<String>,
    path: String,
    value: FieldValue,
    op: Edit,
}

impl NativeOverride {
    /// `annotations`, `labels`, `nodeSelector`.
    pub(crate) fn map(at: MapAt, edit: MapEdit) -> Self {
        NativeOverride {
            change: Change::Map { at, edit },
        }
    }

    /// `resources`, `resourcesOversell` on the containers named (all when empty).
    pub(crate) fn containers(names: Vec<String>, edit: ContainerEdit, op: Edit) -> Self {
        NativeOverride {
            change: Change::Containers { names, edit, op },
        }
    }

    /// `tolerations`, `affinity`.
    pub(crate) fn spec_field(field: SpecField, template: Value, op: Edit) -> Self {
        let from_absent = field.edited(&field.absent(), &template, op);
        let bound = value_bound(&from_absent, MAX_DEPTH);
        let from_absent = (from_absent, bound);
        NativeOverride {
            change: Change::SpecField {
                field,
                template,
                op,
                from_absent,
            },
        }
    }

    /// `field`: the field at `path` below `within` (containers narrowed by `names`).
    pub(crate) fn field(
        within: FieldWithin,
        names: Vec<String>,
        path: String,
        value: FieldValue,
        op: Edit,
    ) -> Self {
        NativeOverride {
            change: Change::Field(FieldChange {
                within,
                names,
                path,
                value,
                op,
            }),
        }
    }

    fn run(
        &self,
        object: &Value,
        refs: &Map<String, Value>,
        limits: &ProgramLimits,
    ) -> Option<Patch> {
        let mut ops = Ops::new(limits);
        match &self.change {
            Change::Map { at, edit } => map_change(*at, edit, object, refs, &mut ops)?,
            Change::Containers { names, edit, op } => {
                containers_change(names, edit, *op, object, &mut ops)?
            }
            Change::SpecField {
                field,
                template,
                op,
                from_absent,
            } => spec_field_change(*field, template, *op, from_absent, object, &mut ops)?,
            Change::Field(field) => field.run(object, refs, &mut ops)?,
        }
        Some(Patch(ops.list))
    }
}

/// Operations under construction, with an upper bound of the program's output for them.
struct Ops {
    list: Vec<PatchOperation>,
    bound: usize,
    limit: usize,
}

impl Ops {
    fn new(limits: &ProgramLimits) -> Self {
        Ops {
            list: Vec::new(),
            bound: 2,
            limit: limits.output_bytes.saturating_sub(OUTPUT_SLACK),
        }
    }

    /// Adds `{"op": "add", "path": path, "value": value}`; `None` when the program's output
    /// could exceed its limit or nest too deep for its parser.
    fn add(&mut self, path: String, value: Value) -> Option<()> {
        let bound = value_bound(&value, MAX_DEPTH)?;
        self.add_bounded(path, value, bound)
    }

    /// Adds `{"op": "remove", "path": path}`.
    fn remove(&mut self, path: String) -> Option<()> {
        self.charge(&path, None)?;
        let path = PointerBuf::parse(path).ok()?;
        self.list
            .push(PatchOperation::Remove(RemoveOperation { path }));
        Some(())
    }

    /// Sets each of `entries` into the object at `path`, which is `current` now, with one `add`
    /// per key: the same object in the end as a program's one `add` of the whole updated
    /// object, and charged for as that output: at most `current` and every entry (its key and
    /// value, in an object of their own, as [`value_bound`] counts them).
    fn set_keys<'k>(
        &mut self,
        path: &str,
        current: &Value,
        entries: impl IntoIterator<Item = (&'k str, Value)>,
    ) -> Option<()> {
        self.charge(path, Some(current))?;
        // The braces of the entries' object.
        self.bound = self.bound.saturating_add(2);
        for (key, value) in entries {
            let entry = string_bound(key) + 4 + value_bound(&value, MAX_DEPTH - 1)?;
            self.bound = self.bound.saturating_add(entry);
            if self.bound > self.limit {
                return None;
            }
            let path = PointerBuf::parse(crate::pointer::join(path, &[key])).ok()?;
            self.list
                .push(PatchOperation::Add(AddOperation { path, value }));
        }
        (self.bound <= self.limit).then_some(())
    }

    fn charge(&mut self, path: &str, value: Option<&Value>) -> Option<()> {
        let value = match value {
            Some(value) => value_bound(value, MAX_DEPTH)?,
            None => 0,
        };
        self.charge_bound(path, value)
    }

    /// [`Ops::charge`] for a value whose bound is known already.
    fn charge_bound(&mut self, path: &str, value_bound: usize) -> Option<()> {
        // `{"op": "remove", "path": ..., "value": ...}, ` and the path.
        let bound = (48 + string_bound(path)).saturating_add(value_bound);
        self.bound = self.bound.saturating_add(bound);
        (self.bound <= self.limit).then_some(())
    }

    /// [`Ops::add`] of a value whose [`value_bound`] is known already.
    fn add_bounded(&mut self, path: String, value: Value, value_bound: usize) -> Option<()> {
        self.charge_bound(&path, value_bound)?;
        let path = PointerBuf::parse(path).ok()?;
        self.list
            .push(PatchOperation::Add(AddOperation { path, value }));
        Some(())
    }
}

/// An upper bound of the bytes `tojson` writes for a string: every byte escaped
/// (`\u00XX`) when that already fits the limit, else the exact escaped length.
fn string_bound(text: &str) -> usize {
    if text.len() <= 4096 {
        return 6 * text.len() + 2;
    }
    let escaped: usize = text
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\x08' | b'\x0c' | b'\n' | b'\r' | b'\t' => 2,
            b'<' | b'>' | b'&' | b'\'' => 6,
            b if b < 0x20 => 6,
            _ => 1,
        })
        .sum();
    escaped + 2
}

/// An upper bound of the bytes `tojson` writes for `value` (spaced style: `", "`, `": "`);
/// `None` when it nests deeper than `levels`.
fn value_bound(value: &Value, levels: usize) -> Option<usize> {
    Some(match value {
        Value::Null | Value::Bool(_) => 5,
        // The longest integer has 20 characters, the longest float 24.
        Value::Number(_) => 32,
        Value::String(s) => string_bound(s),
        Value::Array(items) => {
            let levels = levels.checked_sub(1)?;
            let mut sum = 2usize;
            for item in items {
                sum = sum.saturating_add(value_bound(item, levels)? + 2);
            }
            sum
        }
        Value::Object(map) => {
            let levels = levels.checked_sub(1)?;
            let mut sum = 2usize;
            for (key, item) in map {
                sum = sum.saturating_add(string_bound(key) + 4 + value_bound(item, levels)?);
            }
            sum
        }
    })
}

/// Whether two JSON values are equal as a program's `==` sees them: as JSON, except that
/// minijinja compares an integer with a float by value (`300` equals `300.0`). `None` where
/// only minijinja can tell (a boolean against a number, integers beyond 2^53 against
/// floats). Objects compare without regard to the order of their keys, as in both.
fn program_equal(a: &Value, b: &Value) -> Option<bool> {
    match (a, b) {
        (Value::Null, Value::Null) => Some(true),
        (Value::Bool(x), Value::Bool(y)) => Some(x == y),
        (Value::String(x), Value::String(y)) => Some(x == y),
        (Value::Number(x), Value::Number(y)) => {
            if x == y {
                Some(true)
            } else if x.is_f64() == y.is_f64() {
                Some(false)
            } else {
                // An integer against a float: minijinja compares them as floats when the
                // integer is exactly one. Up to 2^53 every integer is; beyond, the program.
                let (float, int) = if x.is_f64() { (x, y) } else { (y, x) };
                let int = int
                    .as_i64()
                    .map(|i| i as f64)
                    .or(int.as_u64().map(|u| u as f64))?;
                (int.abs() <= 9_007_199_254_740_992.0).then(|| float.as_f64() == Some(int))
            }
        }
        (Value::Bool(_), Value::Number(_)) | (Value::Number(_), Value::Bool(_)) => None,
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                return Some(false);
            }
            all_equal(x.iter().zip(y).map(|(a, b)| program_equal(a, b)))
        }
        (Value::Object(x), Value::Object(y)) => {
            if x.len() != y.len() {
                return Some(false);
            }
            all_equal(x.iter().map(|(k, a)| match y.get(k) {
                Some(b) => program_equal(a, b),
                None => Some(false),
            }))
        }
        _ => Some(false),
    }
}

/// Folds item comparisons: unequal when one is surely unequal, equal when all surely are.
fn all_equal(items: impl Iterator<Item = Option<bool>>) -> Option<bool> {
    let mut sure = true;
    for item in items {
        match item {
            Some(false) => return Some(false),
            Some(true) => {}
            None => sure = false,
        }
    }
    sure.then_some(true)
}

/// Whether the program would add `updated` in place of `current`: `Some(true)` when they
/// differ, `None` when that cannot be told without the program.
fn changes(updated: &Value, current: &Value) -> Option<bool> {
    program_equal(updated, current).map(|equal| !equal)
}

/// Where an object keeps its labels.
const LABELS: &str = "/metadata/labels";
/// Where an object keeps its annotations.
const ANNOTATIONS: &str = "/metadata/annotations";

/// annotations, labels, nodeSelector: one `add` of the whole map.
fn map_change(
    at: MapAt,
    edit: &MapEdit,
    object: &Value,
    refs: &Map<String, Value>,
    ops: &mut Ops,
) -> Option<()> {
    let (path, found) = match at {
        MapAt::Annotations => (
            ANNOTATIONS.to_string(),
            crate::pointer::find(object, ANNOTATIONS),
        ),
        MapAt::Labels => (LABELS.to_string(), crate::pointer::find(object, LABELS)),
        MapAt::NodeSelector => match podspec::pod_spec(object) {
            Some((spec_path, spec)) => (
                crate::pointer::join(spec_path.as_str(), &["nodeSelector"]),
                member(spec, "nodeSelector"),
            ),
            None => return Some(()),
        },
    };
    // `pointer(object, map_path) | default({})`: absent and null are an empty map.
    let empty = Value::Object(Map::new());
    let found = found.filter(|v| !v.is_null());
    let present = found.is_some();
    let current = found.unwrap_or(&empty);
    let Value::Object(entries) = current else {
        // with_keys/without_keys fail on it, and `select` iterates it by its own rules.
        return None;
    };
    if entries.len() > MAX_MAP_ENTRIES {
        return None;
    }
    let updated = match edit {
        MapEdit::Remove { names, keys } => {
            if !entries.keys().any(|k| names.contains(k)) {
                return Some(());
            }
            helpers::without_keys(current.clone(), std::slice::from_ref(keys)).ok()?
        }
        MapEdit::Set(updates) if present => {
            // The program adds the whole map with the keys set; the keys are set one by one
            // instead (the same object in the end, key order included), charged for as the
            // program's output would be.
            let Value::Object(set) = updates else {
                return None;
            };
            let equal = all_equal(set.iter().map(|(key, value)| match entry(entries, key) {
                Some(now) => program_equal(value, now),
                None => Some(false),
            }))?;
            if equal {
                return Some(());
            }
            return ops.set_keys(
                &path,
                current,
                set.iter().map(|(key, value)| (key.as_str(), value.clone())),
            );
        }
        MapEdit::Set(updates) => {
            let updated = helpers::with_keys(current.clone(), updates.clone()).ok()?;
            if !changes(&updated, current)? {
                return Some(());
            }
            updated
        }
        MapEdit::Default(updates) => {
            let Value::Object(set) = updates else {
                return None;
            };
            // Only the keys the map lacks, one `add` each: the same object in the end as the
            // program's one `add` of `with_defaults(current, updates)`, charged as that.
            let mut missing = set
                .iter()
                .filter(|(key, _)| crate::pointer::absent_in(entries, key))
                .peekable();
            if missing.peek().is_none() {
                return Some(());
            }
            if present {
                return ops.set_keys(
                    &path,
                    current,
                    missing.map(|(key, value)| (key.as_str(), value.clone())),
                );
            }
            helpers::with_defaults(current.clone(), updates.clone()).ok()?
        }
        MapEdit::SetFromRef(key) | MapEdit::DefaultFromRef(key) => {
            let text = match refs.get("value") {
                None | Some(Value::Null) => return Some(()),
                Some(Value::String(s)) => s.clone(),
                // `refs.value | tojson`: integers and booleans read the same in JSON.
                Some(v @ Value::Bool(_)) => v.to_string(),
                Some(Value::Number(n)) if !n.is_f64() => n.to_string(),
                // Floats (as minijinja writes them) and structures (an error): the program.
                Some(_) => return None,
            };
            if matches!(edit, MapEdit::DefaultFromRef(_))
                && !crate::pointer::absent_in(entries, key)
            {
                return Some(());
            }
            let mut updates = Map::new();
            updates.insert(key.clone(), Value::String(text));
            helpers::with_keys(current.clone(), Value::Object(updates)).ok()?
        }
    };
    ops.add(path, updated)
}

/// Calls `each` with the pod spec's pointer, the list's name (`containers`, then
/// `initContainers`), the index and each container the program's loop selects (by
/// `names`, all when empty). `None` where the program's loop could go otherwise: a list that
/// is not one, a container that is not an object, a name that is not a string, more
/// containers than [`MAX_CONTAINERS`].
fn each_container(
    object: &Value,
    names: &[String],
    mut each: impl FnMut(&'static Pointer, &'static str, usize, &Value) -> Option<()>,
) -> Option<()> {
    let Some((spec_path, spec)) = podspec::pod_spec(object) else {
        return Some(());
    };
    const LISTS: [&str; 2] = ["containers", "initContainers"];
    let mut lists: [&[Value]; 2] = [&[], &[]];
    for (list, name) in lists.iter_mut().zip(LISTS) {
        match member(spec, name) {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => *list = items,
            Some(_) => return None,
        }
    }
    if lists.iter().map(|l| l.len()).sum::<usize>() > MAX_CONTAINERS {
        return None;
    }
    for (list, name) in lists.into_iter().zip(LISTS) {
        for (i, container) in list.iter().enumerate() {
            let Value::Object(fields) = container else {
                return None;
            };
            if !names.is_empty() {
                match entry(fields, "name") {
                    Some(Value::String(name)) if names.contains(name) => {}
                    Some(Value::String(_)) => continue,
                    _ => return None,
                }
            }
            each(spec_path, name, i, container)?;
        }
    }
    Some(())
}

/// resources, resourcesOversell: each selected container's `resources`, one `add` each.
fn containers_change(
    names: &[String],
    edit: &ContainerEdit,
    op: Edit,
    object: &Value,
    ops: &mut Ops,
) -> Option<()> {
    let empty = Value::Object(Map::new());
    each_container(object, names, |spec_path, list, i, container| {
        // `c.resources | default({})`: absent is an empty map, null stays null.
        let resources = member(container, "resources");
        let current = resources.unwrap_or(&empty);
        // Oversell of no resources (absent or `{}`, not null): no limit to scale, no request to
        // remove; the program's result is `{}` again, no change.
        if matches!(edit, ContainerEdit::Oversell(..))
            && current.as_object().is_some_and(Map::is_empty)
        {
            return Some(());
        }
        if let Some(Value::Object(present)) = resources {
            // Only the sections the program changes, as `add`s into the existing resources
            // (the same object in the end), not a copy of the whole resources added back.
            let sections = match edit {
                ContainerEdit::Resources(template) => {
                    podspec::resources_sections(current, template, op)
                }
                ContainerEdit::Oversell(_, read) => {
                    let factors = read
                        .iter()
                        .map(|(name, factor)| (name.as_str(), podspec::Factor::Read(*factor)));
                    vec![(
                        "requests",
                        podspec::oversold_requests_by(current, factors, op).ok()?,
                    )]
                }
            };
            // A dropped section is a removal, which reorders keys: the whole resources then.
            if sections.iter().all(|(_, value)| value.is_some()) {
                let equal = all_equal(sections.iter().map(|(name, value)| {
                    match (entry(present, name), value) {
                        (Some(now), Some(value)) => program_equal(value, now),
                        _ => Some(false),
                    }
                }))?;
                if equal {
                    return Some(());
                }
                let sections = sections
                    .into_iter()
                    .filter_map(|(name, value)| Some((name, value?)));
                return ops.set_keys(&resources_path(spec_path, list, i), current, sections);
            }
        }
        let updated = match edit {
            ContainerEdit::Resources(template) => podspec::resources_with(current, template, op),
            ContainerEdit::Oversell(factors, _) => podspec::oversold(current, factors, op).ok()?,
        };
        if changes(&updated, current)? {
            ops.add(resources_path(spec_path, list, i), updated)?;
        }
        Some(())
    })
}

/// `<spec>/<list>/<index>/resources`.
fn resources_path(spec: &Pointer, list: &str, index: usize) -> String {
    crate::pointer::join(spec.as_str(), &[list, &index.to_string(), "resources"])
}

/// Whether the program's output gives `value` back as it is: `tojson` writes a float in its
/// shortest form, which serde_json reads back to the nearest float only mostly.
fn reparses(value: &Value) -> bool {
    match value {
        Value::Number(n) if n.is_f64() => {
            serde_json::from_str::<Value>(&n.to_string()).is_ok_and(|back| &back == value)
        }
        Value::Array(items) => items.iter().all(reparses),
        Value::Object(map) => map.values().all(reparses),
        _ => true,
    }
}

impl FieldChange {
    /// The one operation `field_op` works out, for the object, its pod spec or each selected
    /// container.
    fn run(&self, object: &Value, refs: &Map<String, Value>, ops: &mut Ops) -> Option<()> {
        // A value the program's output would not give back exactly: the program.
        let value = match &self.value {
            FieldValue::Nothing => None,
            FieldValue::Constant { value, reparses } if *reparses => Some(value),
            FieldValue::Constant { .. } => return None,
            FieldValue::Reference => match refs.get("value") {
                None | Some(Value::Null) => return Some(()),
                Some(value) if reparses(value) => Some(value),
                Some(_) => return None,
            },
        };
        let mut one = |doc: &Value, base: &str| -> Option<()> {
            // An error (a parent that is no object) is the program's to report.
            match helpers::field_op(doc, base, &self.path, value, self.op).ok()? {
                None => Some(()),
                Some(helpers::FieldOp::Add { path, value }) => ops.add(path, value),
                Some(helpers::FieldOp::Remove { path }) => ops.remove(path),
            }
        };
        match self.within {
            FieldWithin::Object => one(object, ""),
            FieldWithin::PodSpec => match podspec::pod_spec(object) {
                Some((spec_path, spec)) => one(spec, spec_path.as_str()),
                None => Some(()),
            },
            FieldWithin::Containers => {
                each_container(object, &self.names, |spec_path, list, i, container| {
                    let base = crate::pointer::join(spec_path.as_str(), &[list, &i.to_string()]);
                    one(container, &base)
                })
            }
        }
    }
}

impl SpecField {
    /// The field's name in the pod spec.
    fn name(self) -> &'static str {
        match self {
            SpecField::Tolerations => "tolerations",
            SpecField::Affinity => "affinity",
        }
    }

    /// What the program takes for the field where the pod spec has none (`default([])`,
    /// `default({})`).
    fn absent(self) -> Value {
        match self {
            SpecField::Tolerations => Value::Array(Vec::new()),
            SpecField::Affinity => Value::Object(Map::new()),
        }
    }

    /// The program's helper for the field.
    fn edited(self, current: &Value, template: &Value, op: Edit) -> Value {
        match self {
            SpecField::Tolerations => podspec::tolerations_with(current, template, op),
            SpecField::Affinity => podspec::affinity_with(current, template, op),
        }
    }
}

/// tolerations, affinity: the pod spec field set (`add`) or removed when it ends up empty.
/// `from_absent`: what the helper makes of the field where the pod spec has none, and its
/// [`value_bound`].
fn spec_field_change(
    field: SpecField,
    template: &Value,
    op: Edit,
    from_absent: &(Value, Option<usize>),
    object: &Value,
    ops: &mut Ops,
) -> Option<()> {
    let Some((spec_path, spec)) = podspec::pod_spec(object) else {
        return Some(());
    };
    let name = field.name();
    let present = member(spec, name);
    // `spec.<field> | default([] or {})` as the helper's input; null stays null.
    let (updated, bound) = match present {
        None => (from_absent.0.clone(), Some(from_absent.1?)),
        Some(current) => (field.edited(current, template, op), None),
    };
    // Compared with `spec.<field> | default(none)`.
    if !changes(&updated, present.unwrap_or(&Value::Null))? {
        return Some(());
    }
    let path = crate::pointer::join(spec_path.as_str(), &[name]);
    match bound {
        _ if updated.is_null() => ops.remove(path),
        Some(bound) => ops.add_bounded(path, updated, bound),
        None => ops.add(path, updated),
    }
}

// ---------------------------------------------------------------------------------------------
// Conditions
// ---------------------------------------------------------------------------------------------

/// The native form of a validate `condition`.
#[derive(Clone, Debug)]
pub struct NativeCondition {
    cond: Cond,
    compared: Compared,
    /// `affectMode: allow`: deny when the condition does not hold.
    allow: bool,
    /// `dataRef` selects several values, each tested on its own.
    each: bool,
    /// The pattern of a `Regex` condition against a constant.
    pattern: Option<Arc<regex::Regex>>,
    /// Patterns that come from `valueRef`.
    patterns: helpers::RegexCache,
}

impl NativeCondition {
    /// A condition; `None` when its program fails on every run.
    pub(crate) fn new(cond: Cond, compared: Compared, allow: bool, each: bool) -> Option<Self> {
        let pattern = match (&compared, cond) {
            (Compared::Constant(Value::String(p)), Cond::Regex) => {
                Some(helpers::RegexCache::default().get(p).ok()?)
            }
            // A constant that is not a pattern fails the policy; nothing to run.
            (Compared::Constant(_), Cond::Regex) => return None,
            _ => None,
        };
        Some(NativeCondition {
            cond,
            compared,
            allow,
            each,
            pattern,
            patterns: helpers::RegexCache::default(),
        })
    }

    fn run(&self, refs: &Map<String, Value>) -> Option<ConditionVerdict> {
        let present = |name: &str| refs.get(name).filter(|v| !v.is_null());
        let processed;
        let value = match &self.compared {
            Compared::Nothing => None,
            Compared::Constant(v) => Some(v),
            Compared::Reference(process) => match (present("value"), process) {
                (None, _) => None,
                (Some(v), None) => Some(v),
                (Some(v), Some((op, operand))) => {
                    processed = helpers::process_value(v, op, operand).ok()?;
                    Some(&processed)
                }
            },
        };
        let (hit, item) = if self.each {
            // An empty selection is one absent value.
            let selected: &[Value] = match present("data") {
                None => &[Value::Null],
                Some(Value::Array(items)) if items.len() <= MAX_SELECTED => items,
                Some(_) => return None,
            };
            // Every value is tested (an error on any one fails the program); the first that
            // hits and the first that misses are kept for the message.
            let (mut first_hit, mut first_miss) = (None, None);
            for (i, data) in selected.iter().enumerate() {
                if self.test(Some(data).filter(|d| !d.is_null()), value)? {
                    first_hit.get_or_insert(i);
                } else {
                    first_miss.get_or_insert(i);
                }
            }
            if self.allow {
                (first_miss.is_none(), first_miss)
            } else {
                (first_hit.is_some(), first_hit)
            }
        } else {
            (self.test(present("data"), value)?, None)
        };
        let valid = if self.allow { hit } else { !hit };
        Some(ConditionVerdict {
            valid,
            item: if valid { None } else { item },
        })
    }

    /// Whether one value hits; `None` when the program's helper would fail.
    fn test(&self, data: Option<&Value>, value: Option<&Value>) -> Option<bool> {
        match self.cond {
            Cond::Exist => return Some(data.is_some()),
            Cond::NotExist => return Some(data.is_none()),
            _ => {}
        }
        // A missing value on either side is never hit.
        let (Some(data), Some(value)) = (data, value) else {
            return Some(false);
        };
        Some(match self.cond {
            Cond::Exist | Cond::NotExist => unreachable!("answered above"),
            Cond::Equal => helpers::values_equal(data, value),
            Cond::NotEqual => !helpers::values_equal(data, value),
            Cond::In => helpers::contains_all(value, data).ok()?,
            Cond::NotIn => helpers::contains_none(value, data).ok()?,
            Cond::Gt => helpers::compare(data, value).ok()? > 0,
            Cond::Gte => helpers::compare(data, value).ok()? >= 0,
            Cond::Lt => helpers::compare(data, value).ok()? < 0,
            Cond::Lte => helpers::compare(data, value).ok()? <= 0,
            Cond::Regex => {
                let regex = match (&self.pattern, value) {
                    (Some(regex), _) => regex.clone(),
                    (None, Value::String(pattern)) => self.patterns.get(pattern).ok()?,
                    // minijinja would take the value's display text as the pattern.
                    (None, _) => return None,
                };
                regex.is_match(&helpers::regex_text(data))
            }
        })
    }
}
