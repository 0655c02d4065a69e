//! `ApplyConfiguration` mutations: the configuration an expression gives, checked as
//! kube-apiserver checks it, and merged into the object by the kind's schema
//! ([`crate::structured_merge`]); a constant one that sets only strings in labels and
//! annotations merges as the keys it sets.

use json_patch::{AddOperation, PatchOperation, ReplaceOperation};
use kanon_cel::Value;
use serde_json::Value as Json;

use super::decoded::written_back;
use crate::rule::RuleError;

/// A constant apply configuration, made JSON once.
#[derive(Debug, Clone)]
pub(crate) struct PreparedApply {
    pub(super) configuration: Json,
    /// When it sets nothing but strings in the object's labels and annotations (the usual
    /// label mutation): the maps it sets, each with its entries in the configuration's order.
    pub(super) metadata: Option<MetadataSets>,
}

/// What a constant apply configuration that sets only strings in labels and annotations sets.
#[derive(Debug, Clone)]
pub(super) struct MetadataSets {
    sets: Vec<MetadataSet>,
    /// The kind (its root type's address) whose maps were found to merge key by key.
    by_key_for: std::sync::OnceLock<usize>,
}

/// What such a configuration sets in one of `metadata.labels`, `metadata.annotations`: the
/// entries with, in the same order, the place of each (made once, not per request).
#[derive(Debug, Clone)]
struct MetadataSet {
    map: &'static str,
    at: json_patch::jsonptr::PointerBuf,
    entries: serde_json::Map<String, Json>,
    places: Vec<json_patch::jsonptr::PointerBuf>,
}

impl PreparedApply {
    pub(super) fn new(configuration: Json) -> PreparedApply {
        let metadata = metadata_sets(&configuration);
        PreparedApply {
            configuration,
            metadata,
        }
    }
}

/// The maps `{"metadata": {"labels": {...}, "annotations": {...}}}` sets when that is all it
/// sets, and every value set is a string.
fn metadata_sets(configuration: &Json) -> Option<MetadataSets> {
    let root = configuration.as_object()?;
    let metadata = root.get("metadata")?.as_object()?;
    if root.len() != 1 || metadata.is_empty() {
        return None;
    }
    let sets = metadata
        .iter()
        .map(|(name, entries)| {
            let map = ["labels", "annotations"]
                .into_iter()
                .find(|map| map == name)?;
            let entries = entries.as_object()?;
            let at = json_patch::jsonptr::PointerBuf::from_tokens(["metadata", map]);
            entries.values().all(Json::is_string).then(|| MetadataSet {
                map,
                places: entries
                    .keys()
                    .map(|key| at.with_trailing_token(key.as_str()))
                    .collect(),
                at,
                entries: entries.clone(),
            })
        })
        .collect::<Option<_>>()?;
    Some(MetadataSets {
        sets,
        by_key_for: std::sync::OnceLock::new(),
    })
}

/// An apply configuration to merge: one an expression gave on this request, or the prepared
/// one of an expression that reads nothing, with the record of the built-in kind it was
/// checked against (its root type's address).
pub(crate) enum Configuration<'m> {
    Computed(Json),
    Prepared(&'m PreparedApply, &'m std::sync::OnceLock<usize>),
}

impl std::fmt::Debug for Configuration<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.json().fmt(f)
    }
}

impl Configuration<'_> {
    /// The configuration, as JSON.
    pub(super) fn json(&self) -> &Json {
        match self {
            Configuration::Computed(json) => json,
            Configuration::Prepared(prepared, _) => &prepared.configuration,
        }
    }
}

/// What merging a configuration gave: the operations to apply, or, for a configuration that
/// sets only labels and annotations, how many operations it applied already.
pub(super) enum Merged {
    Applied(usize),
    Operations(Vec<PatchOperation>),
}

/// Merges `configuration` into `working` by its kind's schema (from `lookup`'s kinds): the
/// operations from the object to the merge. A built-in object it leaves with a fraction in an
/// integer field fails as the apiserver's conversion fails it. A prepared configuration is
/// checked against a built-in kind once; one that sets only labels and annotations is then
/// applied here, recorded in `changes`.
pub(super) fn merge(
    working: &mut Json,
    configuration: &Configuration<'_>,
    request: &crate::request::Request,
    lookup: &dyn crate::lookup::Lookup,
    changes: &mut crate::diff::Changes,
    field: &str,
) -> Result<Merged, RuleError> {
    let failure = |message: String| RuleError::Patch {
        field: field.to_owned(),
        message,
    };
    let (checked_for, metadata_sets) = match configuration {
        Configuration::Computed(_) => (None, None),
        Configuration::Prepared(prepared, checked_for) => {
            (Some(*checked_for), prepared.metadata.as_ref())
        }
    };
    let configuration = configuration.json();
    let kinds = crate::lookup::kinds_of(lookup);
    let Some(known) = kinds.as_ref().and_then(|kinds| known_kind(kinds, working)) else {
        return Err(failure(format!(
            "Resource kind {}/{} not found: an apply configuration needs the kind's schema",
            working
                .get("apiVersion")
                .and_then(Json::as_str)
                .unwrap_or("?"),
            working.get("kind").and_then(Json::as_str).unwrap_or("?"),
        )));
    };
    let root = known
        .schema
        .root_type(known.kind)
        .ok_or_else(|| failure(format!("the schema has no type for {}", known.kind.kind)))?;
    let merge_failed = |error| failure(format!("error applying patch: {error}"));
    // A built-in object is then converted to its Go type, which takes no fraction in
    // an integer field (a custom object stays unstructured).
    let fraction = |integer: &str| {
        let (group, version) = kanon_schema::group_version(&known.kind.api_version);
        failure(format!(
            "unable to convert unstructured object to {group}/{version}, Kind={}: cannot convert float64 to {integer}",
            known.kind.kind
        ))
    };
    let builtin = request.builtin_kind().is_some();
    // An object kube-apiserver decoded holds no fraction in an integer field, and
    // every value of the configuration is in the merge: the configuration alone is
    // checked, and the merge is walked where it reaches. An object from a file is
    // merged and checked whole.
    // A prepared configuration never changes: checked once against a built-in kind,
    // whose schema is kanon's own for as long as it runs (its root type's address
    // names the kind).
    let checked_for = checked_for.filter(|_| {
        request
            .builtin_kind()
            .is_some_and(|(schema, _)| std::ptr::eq(schema, known.schema))
    });
    let kind = std::ptr::from_ref(root) as usize;
    let checked = checked_for.and_then(std::sync::OnceLock::get) == Some(&kind);
    // A checked configuration that sets only strings in labels and annotations, where
    // the merge goes key by key: the keys it sets, each compared with the object's, are
    // the merge's operations.
    if checked
        && request.arrived_defaulted()
        && let Some(sets) = metadata_sets
        && let Some(operations) = metadata_operations(known.schema, root, working, sets)
    {
        return apply_metadata(working, operations, request, changes, field).map(Merged::Applied);
    }
    let by_field = if !request.arrived_defaulted() {
        None
    } else if checked {
        crate::structured_merge::apply_operations_checked(
            known.schema,
            root,
            working,
            configuration,
        )
        .map_err(merge_failed)?
    } else {
        crate::structured_merge::apply_operations(known.schema, root, working, configuration)
            .map_err(merge_failed)?
    };
    let operations = match by_field {
        Some(operations) => {
            if !checked {
                if let Some(integer) =
                    crate::structured_merge::fractional_integer(known.schema, root, configuration)
                        .filter(|_| builtin)
                {
                    return Err(fraction(integer));
                }
                if let Some(checked_for) = checked_for {
                    let _ = checked_for.set(kind);
                }
            }
            operations
        }
        None => {
            let merged = crate::structured_merge::apply(known.schema, root, working, configuration)
                .map_err(merge_failed)?;
            if let Some(integer) =
                crate::structured_merge::fractional_integer(known.schema, root, &merged)
                    .filter(|_| builtin)
            {
                return Err(fraction(integer));
            }
            crate::diff::diff(working, &merged).0
        }
    };
    Ok(Merged::Operations(operations))
}

/// The apply configuration an `ApplyConfiguration` mutation's value holds: an `Object{...}`
/// whose nested objects are named after their field paths (`Object.spec.template`), as
/// kube-apiserver checks before merging.
pub(super) fn apply_configuration(value: &Value<'_>) -> Result<Json, String> {
    let Value::Object(object) = value else {
        return Err(format!("expected Object, got {}", value.type_of()));
    };
    let mut mismatches = Vec::new();
    type_names(
        value,
        &mut vec![object.type_name.to_string()],
        &mut mismatches,
    );
    if !mismatches.is_empty() {
        return Err(format!("type mismatch: {}", mismatches.join("\n")));
    }
    value.to_json()
}

/// Every nested object whose type name is not its field path from the root `Object`.
fn type_names(value: &Value<'_>, path: &mut Vec<String>, mismatches: &mut Vec<String>) {
    match value {
        Value::Object(object) => {
            let expected = path.join(".");
            if *object.type_name != *expected {
                mismatches.push(format!(
                    "unexpected type name {:?}, expected {expected:?}, which matches field name path from root Object type",
                    &*object.type_name
                ));
            }
            for (name, field) in &object.fields {
                path.push(name.to_string());
                type_names(field, path, mismatches);
                path.pop();
            }
        }
        Value::List(items) => items
            .iter()
            .for_each(|item| type_names(&item, path, mismatches)),
        Value::Map(map) => map
            .entries()
            .iter()
            .for_each(|(_, item)| type_names(item, path, mismatches)),
        _ => {}
    }
}

/// The operations merging `sets` into `working` (of the type `root`) gives, when the merge goes
/// field by field into the object and its metadata (each keeps a field the configuration does
/// not set) and key by key into each map (the same condition, or the map is absent): what
/// [`crate::structured_merge::apply_operations_checked`] gives then, without walking the
/// configuration through the schema. `None` otherwise.
fn metadata_operations(
    schema: &kanon_schema::Schema,
    root: &kanon_schema::Type,
    working: &Json,
    sets: &MetadataSets,
) -> Option<Vec<PatchOperation>> {
    let kind = std::ptr::from_ref(root) as usize;
    if sets.by_key_for.get() != Some(&kind) {
        if !sets.sets.iter().all(|set| {
            crate::structured_merge::leaf_map_by_key(schema, root, &["metadata", set.map])
        }) {
            return None;
        }
        let _ = sets.by_key_for.set(kind);
    }
    let sets = &sets.sets;
    let object = working.as_object()?;
    let metadata = object.get("metadata")?.as_object()?;
    fn keeps<'k>(mut keys: impl Iterator<Item = &'k String>, set: impl Fn(&str) -> bool) -> bool {
        keys.any(|key| !set(key))
    }
    if !keeps(object.keys(), |key| key == "metadata")
        || !keeps(metadata.keys(), |key| sets.iter().any(|set| set.map == key))
    {
        return None;
    }
    let mut operations = Vec::new();
    for set in sets {
        match metadata.get(set.map) {
            None => operations.push(PatchOperation::Add(AddOperation {
                path: set.at.clone(),
                value: Json::Object(set.entries.clone()),
            })),
            Some(Json::Object(live)) => {
                if !keeps(live.keys(), |key| set.entries.contains_key(key)) {
                    return None;
                }
                for ((key, value), place) in set.entries.iter().zip(&set.places) {
                    match live.get(key) {
                        Some(old) if old == value => {}
                        Some(_) => operations.push(PatchOperation::Replace(ReplaceOperation {
                            path: place.clone(),
                            value: value.clone(),
                        })),
                        None => operations.push(PatchOperation::Add(AddOperation {
                            path: place.clone(),
                            value: value.clone(),
                        })),
                    }
                }
            }
            Some(_) => return None,
        }
    }
    Some(operations)
}

/// Applies [`metadata_operations`]' operations one by one (each an `add` or `replace` in an
/// object, applied in one walk): how many. A
/// string put at one key is written back as it is; a map added whole is written back as Go
/// writes it.
fn apply_metadata(
    working: &mut Json,
    operations: Vec<PatchOperation>,
    request: &crate::request::Request,
    changes: &mut crate::diff::Changes,
    field: &str,
) -> Result<usize, RuleError> {
    let count = operations.len();
    let mut maps = Vec::new();
    for (index, operation) in operations.into_iter().enumerate() {
        if let PatchOperation::Add(add) = &operation
            && !add.value.is_string()
        {
            maps.push(add.path.clone());
        }
        crate::language::apply_recorded(working, vec![operation], changes).map_err(|(_, e)| {
            RuleError::Patch {
                field: field.to_owned(),
                message: format!("JSON Patch: operation {index}: {e}"),
            }
        })?;
    }
    written_back(
        working,
        maps.iter().map(AsRef::as_ref),
        request,
        changes,
        field,
    )?;
    Ok(count)
}

/// `object`'s kind, when `kinds` know it.
fn known_kind<'k>(
    kinds: &'k kanon_schema::Kinds,
    object: &Json,
) -> Option<kanon_schema::KnownKind<'k>> {
    let text = |key: &str| object.get(key).and_then(Json::as_str);
    kinds.kind(text("apiVersion")?, text("kind")?)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value as Json, json};

    use super::{metadata_operations, metadata_sets};

    /// A small seeded generator: the cases are the same on every run.
    struct Seeded(u64);

    impl Seeded {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }

        /// A map of some of `keys`, each `"a"` or `"b"`.
        fn map(&mut self) -> Json {
            let mut map = serde_json::Map::new();
            for key in ["app", "tier", "team", "kanon.dev/x"] {
                if self.below(2) == 0 {
                    map.insert(
                        key.into(),
                        json!(if self.below(2) == 0 { "a" } else { "b" }),
                    );
                }
            }
            Json::Object(map)
        }
    }

    #[test]
    fn a_label_configuration_gives_the_operations_the_structured_merge_gives() {
        let schema = kanon_schema::Schema::builtin().expect("the built-in schema");
        let kind = schema.kind("v1", "Pod").expect("Pod");
        let root = schema.root_type(kind).expect("its type");
        let mut seeded = Seeded(0x2545_f491_4f6c_dd1d);
        let (mut fast, mut cases) = (0, 0);
        for _ in 0..4000 {
            let mut metadata = serde_json::Map::new();
            if seeded.below(4) != 0 {
                metadata.insert("name".into(), json!("web"));
            }
            for map in ["labels", "annotations"] {
                match seeded.below(5) {
                    0 => {}
                    1 => {
                        metadata.insert(map.into(), json!({}));
                    }
                    _ => {
                        metadata.insert(map.into(), seeded.map());
                    }
                }
            }
            let mut object = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata});
            if seeded.below(8) == 0 {
                object
                    .as_object_mut()
                    .expect("an object")
                    .remove("apiVersion");
                object.as_object_mut().expect("an object").remove("kind");
            }
            let mut set = serde_json::Map::new();
            for map in ["labels", "annotations"] {
                if seeded.below(3) != 0 {
                    set.insert(map.into(), seeded.map());
                }
            }
            if set.is_empty() {
                set.insert("labels".into(), seeded.map());
            }
            let configuration = json!({"metadata": set});
            let sets = metadata_sets(&configuration).expect("labels and annotations only");
            cases += 1;
            let merged =
                crate::structured_merge::apply_operations(schema, root, &object, &configuration)
                    .expect("the configuration merges");
            if let Some(operations) = metadata_operations(schema, root, &object, &sets) {
                fast += 1;
                assert_eq!(Some(operations), merged, "{object} {configuration}");
            }
        }
        // Many cases take the shorter way (the others set every key a map holds, or the
        // object has no name).
        assert!(fast * 3 > cases, "{fast} of {cases}");
    }

    #[test]
    fn only_strings_in_labels_and_annotations_make_a_label_configuration() {
        for configuration in [
            json!({"metadata": {"labels": {"a": 1}}}),
            json!({"metadata": {"labels": {"a": "x"}, "name": "n"}}),
            json!({"metadata": {"labels": {"a": "x"}}, "spec": {}}),
            json!({"metadata": {}}),
            json!({"metadata": {"labels": ["a"]}}),
        ] {
            assert!(metadata_sets(&configuration).is_none(), "{configuration}");
        }
        let sets = metadata_sets(&json!({"metadata": {"annotations": {"a": "x"}, "labels": {}}}))
            .expect("a label configuration");
        assert_eq!(sets.sets.len(), 2);
    }
}
