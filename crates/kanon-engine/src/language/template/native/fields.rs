//! A field of the object, and the pod spec's own fields, changed natively.

use kanon_api::FieldWithin;
use serde_json::{Map, Value};

use super::containers::each_container;
use super::ops::{Ops, changes};
use crate::helpers;
use crate::podspec::{self, Edit};
use crate::pointer::member;

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

/// A pod spec field edited as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SpecField {
    /// `tolerations_with(tolerations, template, edit)`.
    Tolerations,
    /// `affinity_with(affinity, template, edit)`.
    Affinity,
}

/// A `field` template: the field at `path` below `within` (containers narrowed by `names`).
#[derive(Clone, Debug)]
pub(super) struct FieldChange {
    pub(super) within: FieldWithin,
    pub(super) names: Vec<String>,
    pub(super) path: String,
    pub(super) value: FieldValue,
    pub(super) op: Edit,
}

/// Whether the program's output gives `value` back as it is: `tojson` writes a float in its
/// shortest form, which serde_json reads back to the nearest float only mostly.
pub(super) fn reparses(value: &Value) -> bool {
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
    pub(super) fn run(
        &self,
        object: &Value,
        refs: &Map<String, Value>,
        ops: &mut Ops,
    ) -> Option<()> {
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
    pub(super) fn name(self) -> &'static str {
        match self {
            SpecField::Tolerations => "tolerations",
            SpecField::Affinity => "affinity",
        }
    }

    /// What the program takes for the field where the pod spec has none (`default([])`,
    /// `default({})`).
    pub(super) fn absent(self) -> Value {
        match self {
            SpecField::Tolerations => Value::Array(Vec::new()),
            SpecField::Affinity => Value::Object(Map::new()),
        }
    }

    /// The program's helper for the field.
    pub(super) fn edited(self, current: &Value, template: &Value, op: Edit) -> Value {
        match self {
            SpecField::Tolerations => podspec::tolerations_with(current, template, op),
            SpecField::Affinity => podspec::affinity_with(current, template, op),
        }
    }
}

/// tolerations, affinity: the pod spec field set (`add`) or removed when it ends up empty.
/// `from_absent`: what the helper makes of the field where the pod spec has none, and its
/// [`value_bound`].
pub(super) fn spec_field_change(
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
