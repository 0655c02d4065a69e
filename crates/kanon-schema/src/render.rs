//! The data file's text, and the difference between two schemas in words.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::{Kind, SchemaFile, Shape, Type};

/// The file's text: compact JSON per kind and per field, one per line, everything else laid
/// out with two-space indentation. Deterministic: the kinds are in the file's order and every
/// map is sorted.
pub(crate) fn render(file: &SchemaFile) -> Result<String, serde_json::Error> {
    let mut out = String::new();
    out.push_str("{\n");
    out.push_str(&format!(
        "  \"kubernetes\": {},\n",
        serde_json::to_string(&file.kubernetes)?
    ));
    out.push_str("  \"kinds\": [\n");
    for (index, kind) in file.kinds.iter().enumerate() {
        out.push_str("    ");
        out.push_str(&serde_json::to_string(kind)?);
        out.push_str(separator(index, file.kinds.len()));
    }
    out.push_str("  ],\n");
    out.push_str("  \"types\": {\n");
    for (index, (name, ty)) in file.types.iter().enumerate() {
        out.push_str(&format!("    {}: ", serde_json::to_string(name)?));
        render_named_type(&mut out, ty)?;
        out.push_str(separator(index, file.types.len()));
    }
    out.push_str("  }\n}\n");
    Ok(out)
}

/// `,\n` after every item but the last, `\n` after that.
fn separator(index: usize, len: usize) -> &'static str {
    if index + 1 < len { ",\n" } else { "\n" }
}

/// A named type: an object with fields has its attributes and then one field per line; any
/// other type is one line.
fn render_named_type(out: &mut String, ty: &Type) -> Result<(), serde_json::Error> {
    let Shape::Object(object) = &ty.shape else {
        out.push_str(&serde_json::to_string(ty)?);
        return Ok(());
    };
    if object.fields.is_empty() {
        out.push_str(&serde_json::to_string(ty)?);
        return Ok(());
    }
    // The attributes as the compact form writes them, without the fields (written below).
    let mut attributes = serde_json::to_value(ty)?;
    if let Some(map) = attributes.as_object_mut() {
        map.remove("fields");
    }
    out.push_str("{\n");
    if let Some(map) = attributes.as_object() {
        for (key, value) in map {
            out.push_str(&format!(
                "      {}: {},\n",
                serde_json::to_string(key)?,
                serde_json::to_string(value)?
            ));
        }
    }
    out.push_str("      \"fields\": {\n");
    for (index, (name, field)) in object.fields.iter().enumerate() {
        out.push_str(&format!(
            "        {}: {}",
            serde_json::to_string(name)?,
            serde_json::to_string(field)?
        ));
        out.push_str(separator(index, object.fields.len()));
    }
    out.push_str("      }\n    }");
    Ok(())
}

/// One value as compact JSON, for a message.
fn compact<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("<{e}>"))
}

/// The first difference between `data` and `served`, in words.
pub(crate) fn first_difference(data: &SchemaFile, served: &SchemaFile) -> Option<String> {
    if data.kubernetes != served.kubernetes {
        return Some(format!(
            "the data is of kube-apiserver {}, the server is {}",
            data.kubernetes, served.kubernetes
        ));
    }
    let kinds = |file: &SchemaFile| -> BTreeMap<(String, String), Kind> {
        file.kinds
            .iter()
            .map(|kind| ((kind.api_version.clone(), kind.kind.clone()), kind.clone()))
            .collect()
    };
    if let Some(difference) = first_map_difference(&kinds(data), &kinds(served), |(v, k)| {
        format!("kind {v} {k}")
    }) {
        return Some(difference);
    }
    if data.kinds != served.kinds {
        return Some("the kinds are the same but in another order".to_string());
    }
    for (name, data_type) in &data.types {
        let Some(served_type) = served.types.get(name) else {
            continue;
        };
        if data_type == served_type {
            continue;
        }
        // Narrow a changed object down to the field that changed.
        if let (Shape::Object(a), Shape::Object(b)) = (&data_type.shape, &served_type.shape)
            && let Some(difference) =
                first_map_difference(&a.fields, &b.fields, |f| format!("type {name} field `{f}`"))
        {
            return Some(difference);
        }
        return Some(format!(
            "type {name}: the data has {}, the server {}",
            compact(data_type),
            compact(served_type)
        ));
    }
    first_map_difference(&data.types, &served.types, |name| format!("type {name}"))
}

/// The first key whose entry differs between `data` and `served` (missing in one, or another
/// value), named by `what`.
fn first_map_difference<K: Ord, V: PartialEq + Serialize>(
    data: &BTreeMap<K, V>,
    served: &BTreeMap<K, V>,
    what: impl Fn(&K) -> String,
) -> Option<String> {
    for (key, served_value) in served {
        match data.get(key) {
            None => return Some(format!("{} is served but not in the data", what(key))),
            Some(data_value) if data_value != served_value => {
                return Some(format!(
                    "{}: the data has {}, the server {}",
                    what(key),
                    compact(data_value),
                    compact(served_value)
                ));
            }
            Some(_) => {}
        }
    }
    data.keys()
        .find(|key| !served.contains_key(key))
        .map(|key| format!("{} is in the data but no longer served", what(key)))
}
