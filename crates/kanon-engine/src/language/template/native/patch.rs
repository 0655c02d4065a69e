//! The native form of an override template: the change it makes, run on the object.

use json_patch::Patch;
use kanon_api::FieldWithin;
use serde_json::{Map, Value};

use super::MAX_DEPTH;
use super::containers::{ContainerEdit, containers_change};
use super::fields::{FieldChange, FieldValue, SpecField, spec_field_change};
use super::maps::{MapAt, MapEdit, map_change};
use super::ops::{Ops, value_bound};
use crate::podspec::Edit;
use crate::program::ProgramLimits;

/// The native form of an override template.
#[derive(Clone, Debug)]
pub struct NativeOverride {
    change: Change,
}

#[derive(Clone, Debug)]
pub(super) enum Change {
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

    pub(super) fn run(
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
