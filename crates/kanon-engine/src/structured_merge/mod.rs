//! Server-side apply's structured merge of an apply configuration into an object, driven by the
//! kind's schema, as a MutatingAdmissionPolicy's `ApplyConfiguration` mutation merges in
//! kube-apiserver: the configuration is first checked against the schema (a field the type does
//! not declare, or a value of the wrong kind, is refused), then refused if it sets any atomic
//! list, map or struct (whose unset parts it would silently drop), then merged: structs and maps
//! field by field, `x-kubernetes-list-type: map` lists item by key (a key field an item leaves
//! out counting as its schema default) and `set` lists by value (in structured-merge-diff's
//! order: the object's items, with the configuration's placed where they first meet), scalars
//! replaced.

mod go_format;
mod validate;

pub(crate) use validate::fractional_integer;

use std::collections::HashMap;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation};
use kanon_schema::{List, ListType, MapType, Schema, Shape, Type};
use serde_json::{Map, Value};

/// Why an apply configuration could not be merged; the text is kube-apiserver's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// The configuration does not fit the kind's schema.
    #[error("failed to convert patch object to typed object: {0}")]
    Schema(String),
    /// The configuration sets atomic lists, maps or structs.
    #[error("invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: {0}")]
    Atomic(String),
    /// The items of a keyed list cannot be told apart.
    #[error("failed to merge patch: {0}")]
    Merge(String),
}

/// What a schema type is to the merge, once references are followed.
enum Node<'s> {
    /// Replaced whole: scalars, int-or-string, quantities.
    Leaf,
    /// Anything: objects merge key by key, lists are atomic.
    Untyped,
    Struct {
        fields: &'s std::collections::BTreeMap<String, Type>,
        atomic: bool,
    },
    Map {
        values: &'s Type,
        atomic: bool,
    },
    List(&'s List),
}

fn node<'s>(schema: &'s Schema, ty: &'s Type) -> Node<'s> {
    let (ty, _) = schema.deref(ty).unwrap_or((ty, None));
    let atomic = ty.map_type == Some(MapType::Atomic);
    match &ty.shape {
        Shape::Object(object) if object.fields.is_empty() => Node::Untyped,
        Shape::Object(object) => Node::Struct {
            fields: &object.fields,
            atomic,
        },
        Shape::Map(values) => Node::Map { values, atomic },
        Shape::List(list) => Node::List(list),
        Shape::Any => Node::Untyped,
        _ if ty.preserve_unknown_fields => Node::Untyped,
        _ => Node::Leaf,
    }
}

/// The paths of the atomic lists, maps and structs `value` sets.
fn atomics(schema: &Schema, ty: &Type, value: &Value, path: &str, found: &mut Vec<String>) {
    match (node(schema, ty), value) {
        (Node::Struct { fields, atomic }, Value::Object(map)) => {
            if atomic {
                found.push(path.to_owned());
            }
            for (key, child) in map {
                if let Some(field) = fields.get(key) {
                    atomics(schema, field, child, &format!("{path}.{key}"), found);
                }
            }
        }
        (Node::Map { values, atomic }, Value::Object(map)) => {
            if atomic {
                found.push(path.to_owned());
            }
            for (key, child) in map {
                atomics(schema, values, child, &format!("{path}.{key}"), found);
            }
        }
        (Node::List(list), Value::Array(items)) => {
            if matches!(list.list_type, None | Some(ListType::Atomic)) {
                found.push(path.to_owned());
            }
            for (index, item) in items.iter().enumerate() {
                atomics(
                    schema,
                    &list.items,
                    item,
                    &format!("{path}[{index}]"),
                    found,
                );
            }
        }
        _ => {}
    }
}

/// Merges the apply configuration `patch` into `live`, an object of the type `root`.
pub fn apply(
    schema: &Schema,
    root: &Type,
    live: &Value,
    patch: &Value,
) -> Result<Value, MergeError> {
    check(schema, root, patch)?;
    Ok(merge(schema, root, Some(live), Some(patch))?.unwrap_or(Value::Null))
}

/// The JSON patch that turns `live` into [`apply`]'s merge of `patch`, found by walking the
/// configuration: what it does not name is neither copied nor compared (a label set by an apply
/// configuration costs the label, not the object). `None` when the root itself does not merge
/// field by field (use [`apply`] then).
pub(crate) fn apply_operations(
    schema: &Schema,
    root: &Type,
    live: &Value,
    patch: &Value,
) -> Result<Option<Vec<PatchOperation>>, MergeError> {
    check(schema, root, patch)?;
    apply_operations_checked(schema, root, live, patch)
}

/// [`apply_operations`] for a configuration already checked against `root`'s schema (the
/// check reads the configuration alone: one that never changes is checked once).
pub(crate) fn apply_operations_checked(
    schema: &Schema,
    root: &Type,
    live: &Value,
    patch: &Value,
) -> Result<Option<Vec<PatchOperation>>, MergeError> {
    if children(schema, root, live, patch).is_none() {
        return Ok(None);
    }
    let mut operations = Vec::new();
    merge_into(
        schema,
        root,
        live,
        patch,
        &PointerBuf::root(),
        &mut operations,
    )?;
    Ok(Some(operations))
}

/// Whether the field at `path` from `root` is reached through structs that merge field by field
/// and is a map of leaves that merges key by key (an object's labels, its annotations): a
/// configuration that sets strings there changes the keys it names and nothing else.
pub(crate) fn leaf_map_by_key(schema: &Schema, root: &Type, path: &[&str]) -> bool {
    let mut ty = root;
    for name in path {
        match node(schema, ty) {
            Node::Struct {
                fields,
                atomic: false,
            } => match fields.get(*name) {
                Some(field) => ty = field,
                None => return false,
            },
            _ => return false,
        }
    }
    match node(schema, ty) {
        Node::Map {
            values,
            atomic: false,
        } => matches!(node(schema, values), Node::Leaf),
        _ => false,
    }
}

/// How the members of a value merge when it merges member by member.
enum Children<'s> {
    Struct(&'s std::collections::BTreeMap<String, Type>),
    Map(&'s Type),
    Untyped,
}

/// How `lhs` and `rhs` (of type `ty`) merge member by member, when they do and the merge
/// keeps the value (some member of `lhs` is left as it is, so the merged map is not empty).
fn children<'s>(
    schema: &'s Schema,
    ty: &'s Type,
    lhs: &Value,
    rhs: &Value,
) -> Option<Children<'s>> {
    let (Value::Object(left), Value::Object(right)) = (lhs, rhs) else {
        return None;
    };
    if !left.keys().any(|key| !right.contains_key(key)) {
        return None;
    }
    match node(schema, ty) {
        Node::Struct {
            fields,
            atomic: false,
        } => Some(Children::Struct(fields)),
        Node::Map {
            values,
            atomic: false,
        } => Some(Children::Map(values)),
        Node::Untyped => Some(Children::Untyped),
        _ => None,
    }
}

/// Appends to `operations` what merging `rhs` into `lhs` (of type `ty`, at `at`) changes.
fn merge_into(
    schema: &Schema,
    ty: &Type,
    lhs: &Value,
    rhs: &Value,
    at: &PointerBuf,
    operations: &mut Vec<PatchOperation>,
) -> Result<(), MergeError> {
    let (Some(how), Value::Object(left), Value::Object(right)) =
        (children(schema, ty, lhs, rhs), lhs, rhs)
    else {
        // Merged whole here: lists, leaves, atomic parts, maps the merge may empty.
        match merge(schema, ty, Some(lhs), Some(rhs))? {
            Some(merged) => changed(lhs, &merged, at, operations),
            None => operations.push(PatchOperation::Remove(RemoveOperation { path: at.clone() })),
        }
        return Ok(());
    };
    for (key, r) in right {
        let mut place = at.clone();
        place.push_back(key.as_str());
        let ty = match &how {
            Children::Struct(fields) => fields.get(key),
            Children::Map(values) => Some(*values),
            Children::Untyped => None,
        };
        let l = left.get(key);
        match (ty, l) {
            (Some(ty), Some(l)) => merge_into(schema, ty, l, r, &place, operations)?,
            (Some(ty), None) => {
                if let Some(value) = merge(schema, ty, None, Some(r))? {
                    operations.push(PatchOperation::Add(AddOperation { path: place, value }));
                }
            }
            (None, _) => match (l, merge_untyped(l, Some(r))) {
                (Some(l), Some(merged)) => changed(l, &merged, &place, operations),
                (None, Some(value)) => {
                    operations.push(PatchOperation::Add(AddOperation { path: place, value }));
                }
                (_, None) => {}
            },
        }
    }
    Ok(())
}

/// Appends the operations that turn `old` (at `at`) into `new`.
fn changed(old: &Value, new: &Value, at: &PointerBuf, operations: &mut Vec<PatchOperation>) {
    if old == new {
        return;
    }
    operations.extend(crate::diff::diff_at(at, old, new).0);
}

/// Refuses a configuration that does not fit the schema or sets atomic parts.
fn check(schema: &Schema, root: &Type, patch: &Value) -> Result<(), MergeError> {
    let mut errors = Vec::new();
    validate::check(schema, root, patch, "", false, &mut errors);
    match errors.as_slice() {
        [] => {}
        [one] => return Err(MergeError::Schema(one.clone())),
        // structured-merge-diff's list of several errors.
        many => {
            return Err(MergeError::Schema(format!(
                "errors:\n  {}",
                many.join("\n  ")
            )));
        }
    }
    let mut found = Vec::new();
    atomics(schema, root, patch, "", &mut found);
    if !found.is_empty() {
        return Err(MergeError::Atomic(found.join(", ")));
    }
    Ok(())
}

fn is_empty(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => true,
        Some(Value::Object(map)) => map.is_empty(),
        Some(Value::Array(items)) => items.is_empty(),
        Some(_) => false,
    }
}

/// The merge of `lhs` (the object) and `rhs` (the configuration) at a value of type `ty`.
fn merge(
    schema: &Schema,
    ty: &Type,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
) -> Result<Option<Value>, MergeError> {
    let (Some(lhs_value), Some(rhs_value)) = (lhs, rhs) else {
        return Ok(rhs.or(lhs).cloned());
    };
    let leaf = || Ok(Some(rhs_value.clone()));
    match node(schema, ty) {
        Node::Leaf => leaf(),
        Node::Struct { atomic: true, .. } | Node::Map { atomic: true, .. } => leaf(),
        Node::List(list) if matches!(list.list_type, None | Some(ListType::Atomic)) => leaf(),
        _ if is_empty(lhs) && is_empty(rhs) => leaf(),
        Node::Struct { fields, .. } => merge_maps(lhs_value, rhs_value, |key| {
            fields.get(key).map(|field| (schema, field))
        }),
        Node::Map { values, .. } => merge_maps(lhs_value, rhs_value, |_| Some((schema, values))),
        Node::Untyped => match (lhs_value, rhs_value) {
            (Value::Object(_), Value::Object(_)) => {
                merge_maps(lhs_value, rhs_value, |_| None::<(&Schema, &Type)>)
            }
            _ => leaf(),
        },
        Node::List(list) => merge_lists(schema, list, lhs_value, rhs_value),
    }
}

/// Two maps merged key by key (the object's keys in its order, then the configuration's new
/// ones); a key whose type `field` does not know merges as untyped.
fn merge_maps<'s>(
    lhs: &Value,
    rhs: &Value,
    field: impl Fn(&str) -> Option<(&'s Schema, &'s Type)>,
) -> Result<Option<Value>, MergeError> {
    let (Value::Object(left), Value::Object(right)) = (lhs, rhs) else {
        return Ok(Some(rhs.clone()));
    };
    let mut out = Map::new();
    let keys = left
        .keys()
        .chain(right.keys().filter(|k| !left.contains_key(*k)));
    for key in keys {
        let (l, r) = (left.get(key), right.get(key));
        let merged = match field(key) {
            Some((schema, ty)) => merge(schema, ty, l, r)?,
            None => merge_untyped(l, r),
        };
        if let Some(value) = merged {
            out.insert(key.clone(), value);
        }
    }
    Ok((!out.is_empty()).then_some(Value::Object(out)))
}

fn merge_untyped(lhs: Option<&Value>, rhs: Option<&Value>) -> Option<Value> {
    match (lhs, rhs) {
        (Some(Value::Object(left)), Some(Value::Object(right)))
            if !(left.is_empty() && right.is_empty()) =>
        {
            let mut out = left.clone();
            for (key, value) in right {
                let merged = merge_untyped(left.get(key), Some(value));
                if let Some(merged) = merged {
                    out.insert(key.clone(), merged);
                }
            }
            Some(Value::Object(out))
        }
        _ => rhs.or(lhs).cloned(),
    }
}

/// What identifies an item of an associative list: its key fields' values, or itself. A key
/// field the item leaves out counts as its default (a port's `protocol` is `TCP`), or, without
/// one, is left out of the key; an item with no key field at all cannot be told apart.
fn item_key(schema: &Schema, list: &List, item: &Value) -> Result<String, String> {
    let Some(ListType::Map(keys)) = &list.list_type else {
        return Ok(format!("[={}]", go_format::key_text(item)));
    };
    let fields = match item {
        Value::Object(fields) => fields,
        Value::Null => {
            return Err("associative list with keys may not have a null element".to_owned());
        }
        _ => return Err("associative list with keys may not have non-map elements".to_owned()),
    };
    let default = |key: &str| {
        let (item_type, _) = schema.deref(&list.items)?;
        match &item_type.shape {
            Shape::Object(object) => object.fields.get(key)?.default.clone(),
            _ => None,
        }
    };
    // Sorted by field name, as structured-merge-diff sorts a key.
    let mut sorted: Vec<&String> = keys.iter().collect();
    sorted.sort();
    let mut parts = Vec::with_capacity(keys.len());
    for key in sorted {
        if let Some(value) = fields.get(key).cloned().or_else(|| default(key)) {
            // CEL's null is protobuf's NullValue in a configuration, which structured-merge-diff
            // cannot write as a key value.
            match value {
                Value::Null => parts.push(format!("{key}={{{{undefined}}}}")),
                value => parts.push(format!("{key}={}", go_format::key_text(&value))),
            }
        }
    }
    if parts.is_empty() && !keys.is_empty() {
        let quoted: Vec<String> = keys.iter().map(|k| format!("{k:?}")).collect();
        return Err(format!(
            "associative list with keys has an element that omits all key fields [{}] (and doesn't have default values for any key fields)",
            quoted.join(" ")
        ));
    }
    Ok(format!("[{}]", parts.join(",")))
}

/// Two associative lists merged item by item, in structured-merge-diff's order.
fn merge_lists(
    schema: &Schema,
    list: &List,
    lhs: &Value,
    rhs: &Value,
) -> Result<Option<Value>, MergeError> {
    let (Value::Array(left), Value::Array(right)) = (lhs, rhs) else {
        return Ok(Some(rhs.clone()));
    };
    let keys = |items: &[Value], duplicates_allowed: bool| -> Result<Vec<String>, MergeError> {
        let mut seen = std::collections::HashSet::new();
        let mut keys = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let key = item_key(schema, list, item)
                .map_err(|e| MergeError::Merge(format!("element {index}: {e}")))?;
            if !seen.insert(key.clone()) && !duplicates_allowed {
                return Err(MergeError::Merge(format!(
                    "duplicate entries for key {key}"
                )));
            }
            keys.push(key);
        }
        Ok(keys)
    };
    let (lkeys, rkeys) = (keys(left, true)?, keys(right, false)?);
    let mut lhs_by_key: HashMap<&str, &Value> = HashMap::new();
    for (key, item) in lkeys.iter().zip(left) {
        lhs_by_key.entry(key).or_insert(item);
    }
    let rhs_by_key: HashMap<&str, &Value> = rkeys.iter().map(String::as_str).zip(right).collect();
    let mut shared = rkeys
        .iter()
        .filter(|k| lhs_by_key.contains_key(k.as_str()))
        .map(String::as_str);
    let mut next_shared = shared.next();
    let mut merged_rhs = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(left.len().max(right.len()));
    let mut push = |merged: Option<Value>| {
        if let Some(value) = merged {
            out.push(value);
        }
    };
    // The item of this key, both sides merged.
    let merged = |key: &str| {
        merge(
            schema,
            &list.items,
            lhs_by_key.get(key).copied(),
            rhs_by_key.get(key).copied(),
        )
    };
    let (mut l, mut r) = (0, 0);
    while l < left.len() || r < right.len() {
        if l < left.len() && r < right.len() {
            let key = lkeys[l].as_str();
            if key == rkeys[r] {
                merged_rhs.insert(key);
                push(merged(key)?);
                l += 1;
                r += 1;
                next_shared = shared.next();
                continue;
            }
            if rhs_by_key.contains_key(key) && next_shared.is_some_and(|next| next != key) {
                // A shared item, but not the one whose turn it is.
                l += 1;
                continue;
            }
        }
        if l < left.len() {
            let key = lkeys[l].as_str();
            if !rhs_by_key.contains_key(key) {
                push(merge(schema, &list.items, Some(&left[l]), None)?);
                l += 1;
                continue;
            } else if merged_rhs.contains(key) {
                l += 1;
            }
        }
        if r < right.len() {
            let key = rkeys[r].as_str();
            merged_rhs.insert(key);
            push(merged(key)?);
            r += 1;
            if next_shared == Some(key) {
                next_shared = shared.next();
            }
        }
    }
    Ok((!out.is_empty()).then_some(Value::Array(out)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> (&'static Schema, &'static Type) {
        let schema = Schema::builtin().expect("the built-in schema");
        let kind = schema.kind("apps/v1", "Deployment").expect("Deployment");
        (schema, schema.root_type(kind).expect("its type"))
    }

    fn live() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"app": "web"}},
               "spec": {"replicas": 1, "template": {"spec": {"containers": [
                   {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}]},
                   {"name": "side", "image": "side:1"}],
                   "tolerations": [{"key": "k", "operator": "Exists"}]}}}})
    }

    #[test]
    fn list_maps_merge_by_key_and_new_items_follow() {
        let (schema, root) = deployment();
        let patch = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "side", "image": "side:2"},
            {"name": "new", "image": "new:1"}]}}}});
        let merged = apply(schema, root, &live(), &patch).unwrap();
        let containers = &merged["spec"]["template"]["spec"]["containers"];
        assert_eq!(containers[0]["image"], "app:1");
        assert_eq!(containers[0]["env"][0]["name"], "A");
        assert_eq!(containers[1]["image"], "side:2");
        assert_eq!(containers[2]["name"], "new");
        assert_eq!(merged["spec"]["replicas"], 1);
        assert_eq!(merged["metadata"]["labels"]["app"], "web");
    }

    #[test]
    fn the_operations_of_a_merge_give_the_whole_merge() {
        let (schema, root) = deployment();
        let mut live = live();
        live["spec"]["template"]["spec"]["securityContext"] = json!({});
        live["metadata"]["annotations"] = json!({"only": "one"});
        live["status"] = json!({"replicas": 1});
        let patches = [
            json!({"metadata": {"labels": {"tier": "web"}}}),
            json!({"metadata": {"labels": {"app": "other"}, "annotations": {"a": "b"}}, "spec": {"replicas": 3}}),
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "side", "image": "side:2"}, {"name": "new", "image": "new:1"}]}}}}),
            // A field the object does not have, one it has with the same value, empty ones.
            json!({"status": {"replicas": 1}, "spec": {}, "metadata": {"labels": {"app": "web"}}}),
            json!({"spec": {"template": {"spec": {"securityContext": {}}}}}),
            // Every member of a map named: merged whole there.
            json!({"metadata": {"annotations": {"only": "two"}}}),
            json!({"spec": {"template": {"metadata": {"labels": {"x": "y"}}}}}),
        ];
        for patch in patches {
            let whole = apply(schema, root, &live, &patch).expect("merges");
            let operations = apply_operations(schema, root, &live, &patch)
                .expect("merges")
                .expect("field by field");
            let mut patched = live.clone();
            json_patch::patch(&mut patched, &operations).expect("applies");
            assert_eq!(patched, whole, "{patch}");
            // Keys in the same order too.
            assert_eq!(patched.to_string(), whole.to_string(), "{patch}");
        }
        // Refused as the whole merge refuses.
        let atomic = json!({"spec": {"template": {"spec": {"tolerations": [{"key": "other"}]}}}});
        assert_eq!(
            apply_operations(schema, root, &live, &atomic).err(),
            apply(schema, root, &live, &atomic).err()
        );
    }

    #[test]
    fn atomic_lists_unknown_fields_and_wrong_scalars_are_refused() {
        let (schema, root) = deployment();
        let atomic = json!({"spec": {"template": {"spec": {"tolerations": [{"key": "other"}]}}}});
        assert_eq!(
            apply(schema, root, &live(), &atomic)
                .unwrap_err()
                .to_string(),
            "invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: .spec.template.spec.tolerations"
        );
        let unknown = json!({"spec": {"replicaz": 2}});
        assert_eq!(
            apply(schema, root, &live(), &unknown)
                .unwrap_err()
                .to_string(),
            "failed to convert patch object to typed object: .spec.replicaz: field not declared in schema"
        );
        let wrong = json!({"spec": {"replicas": "two"}});
        assert!(
            apply(schema, root, &live(), &wrong)
                .unwrap_err()
                .to_string()
                .starts_with("failed to convert patch object to typed object: .spec.replicas: expected numeric")
        );
        // A container's `name` defaults to "" in Kubernetes' schema, so one without a name is
        // the container named "" (which validation refuses later), not an error here.
        let keyless = json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}});
        let merged = apply(schema, root, &live(), &keyless).expect("merges");
        assert_eq!(
            merged["spec"]["template"]["spec"]["containers"]
                .as_array()
                .map(Vec::len),
            Some(3)
        );
    }

    #[test]
    fn an_item_without_any_key_field_cannot_be_told_apart() {
        let (schema, _) = deployment();
        let mut fields = std::collections::BTreeMap::new();
        fields.insert("port".to_owned(), Type::new(Shape::Integer));
        let mut protocol = Type::new(Shape::String);
        protocol.default = Some(json!("TCP"));
        fields.insert("protocol".to_owned(), protocol);
        let list = List {
            items: Box::new(Type::new(Shape::Object(kanon_schema::Object {
                fields,
                required: Vec::new(),
            }))),
            list_type: Some(ListType::Map(vec!["port".to_owned(), "name".to_owned()])),
        };
        // Keys sorted by name; a default stands in for a missing key; a key with neither is
        // left out.
        assert_eq!(
            item_key(schema, &list, &json!({"port": 80, "name": "web"})),
            Ok("[name=\"web\",port=80]".to_owned())
        );
        assert_eq!(
            item_key(schema, &list, &json!({"port": 80})),
            Ok("[port=80]".to_owned())
        );
        assert_eq!(
            item_key(schema, &list, &json!({"other": 1})),
            Err("associative list with keys has an element that omits all key fields [\"port\" \"name\"] (and doesn't have default values for any key fields)".to_owned())
        );
        assert_eq!(
            item_key(schema, &list, &json!(null)),
            Err("associative list with keys may not have a null element".to_owned())
        );
    }

    #[test]
    fn a_key_field_left_out_counts_as_its_default() {
        let (schema, root) = deployment();
        let containers = |ports: Value| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {"spec": {
                "containers": [{"name": "app", "image": "app", "ports": ports}],
            }}}})
        };
        let live = containers(json!([{"containerPort": 80, "protocol": "TCP", "name": "http"}]));
        // A port's key is (containerPort, protocol), and protocol defaults to TCP: the same port.
        let same = containers(json!([{"containerPort": 80, "name": "web"}]));
        let merged = apply(schema, root, &live, &same).expect("merges");
        assert_eq!(
            merged["spec"]["template"]["spec"]["containers"][0]["ports"],
            json!([{"containerPort": 80, "protocol": "TCP", "name": "web"}])
        );
        // UDP is another port.
        let udp = containers(json!([{"containerPort": 80, "protocol": "UDP"}]));
        let merged = apply(schema, root, &live, &udp).expect("merges");
        assert_eq!(
            merged["spec"]["template"]["spec"]["containers"][0]["ports"]
                .as_array()
                .map(Vec::len),
            Some(2)
        );
    }
}
