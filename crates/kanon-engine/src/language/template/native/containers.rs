//! Containers' fields (resources, images, ...) changed natively, container by container.

use json_patch::jsonptr::Pointer;
use serde_json::{Map, Value};

use super::MAX_CONTAINERS;
use super::ops::{Ops, all_equal, changes, program_equal};
use crate::podspec::{self, Edit};
use crate::pointer::{entry, member};

/// How a template edits each selected container's `resources`.
#[derive(Clone, Debug)]
pub(crate) enum ContainerEdit {
    /// `resources_with(resources, template, edit)`.
    Resources(Value),
    /// `oversold(resources, factors, edit)`; the factors also read already, in the same order.
    Oversell(Value, Vec<(String, crate::quantity::Decimal)>),
}

/// Calls `each` with the pod spec's pointer, the list's name (`containers`, then
/// `initContainers`), the index and each container the program's loop selects (by
/// `names`, all when empty). `None` where the program's loop could go otherwise: a list that
/// is not one, a container that is not an object, a name that is not a string, more
/// containers than [`MAX_CONTAINERS`].
pub(super) fn each_container(
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
pub(super) fn containers_change(
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
pub(super) fn resources_path(spec: &Pointer, list: &str, index: usize) -> String {
    crate::pointer::join(spec.as_str(), &[list, &index.to_string(), "resources"])
}
