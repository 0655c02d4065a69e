//! What kube-apiserver's Go types add to a built-in kind's OpenAPI schema: the Go names its
//! decoding errors use (`Go struct field Container.spec.containers.image of type string`),
//! which fields are `omitempty` (so dropped when empty as the apiserver writes an object back),
//! and the embedded structs a field is promoted from (named in those errors' paths:
//! `livenessProbe.ProbeHandler.httpGet`).
//!
//! The data (`data/go-types-v1.35.json`) is written by the Go program in `go-types/` from the
//! k8s.io/api module of the schema's Kubernetes version (`cargo xtask go-types`); the crate's
//! `tests/go_types.rs` checks that it is current. Kinds of the apiextensions and apiregistration
//! groups, which live in other Go modules, have no entry.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::Deserialize;

/// The embedded data file's text.
pub const GO_TYPES_JSON: &str = include_str!("../data/go-types-v1.35.json");

/// The data file's path, relative to the repository root.
pub const GO_TYPES_PATH: &str = "crates/kanon-schema/data/go-types-v1.35.json";

/// A Go struct of a built-in kind, by its OpenAPI component name.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoStruct {
    /// Go's spelling of the type, package included: `v1.Container`.
    pub go: String,
    /// The type decodes itself (`json.Unmarshaler`): `resource.Quantity`, `intstr.IntOrString`,
    /// `v1.Time`, `runtime.RawExtension`. Its fields are not listed.
    #[serde(default)]
    pub custom: bool,
    /// The JSON fields, in Go's order.
    #[serde(default)]
    pub fields: Vec<GoField>,
    #[serde(skip)]
    by_name: HashMap<String, usize>,
}

impl GoStruct {
    /// The name Go's errors give the struct: `Container` (no package).
    pub fn short_name(&self) -> &str {
        self.go.rsplit('.').next().unwrap_or(&self.go)
    }

    /// The field of this JSON name (case-sensitive, as the apiserver's decoder matches).
    pub fn field(&self, name: &str) -> Option<&GoField> {
        self.by_name.get(name).map(|&index| &self.fields[index])
    }
}

/// One JSON field of a [`GoStruct`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoField {
    /// The JSON name.
    pub name: String,
    /// Go's spelling of the field's type: `*int32`, `[]v1.Container`, `map[string]string`,
    /// `v1.PullPolicy`.
    #[serde(rename = "type")]
    pub go_type: String,
    /// `omitempty`: left out when written back if `false`, `0`, `""`, null, or an empty list
    /// or map (a struct is never empty).
    #[serde(default)]
    pub omitempty: bool,
    /// The embedded structs the field is promoted from, outermost first (`ProbeHandler`).
    #[serde(default)]
    pub via: Vec<String>,
}

/// The Go facts of every built-in struct, by OpenAPI component name.
#[derive(Debug)]
pub struct GoTypes {
    structs: HashMap<String, GoStruct>,
}

impl GoTypes {
    /// The embedded facts, parsed on first use. `None` only if the embedded file is broken,
    /// which the crate's tests rule out.
    pub fn builtin() -> Option<&'static GoTypes> {
        static BUILTIN: OnceLock<Option<GoTypes>> = OnceLock::new();
        BUILTIN
            .get_or_init(|| GoTypes::from_json(GO_TYPES_JSON).ok())
            .as_ref()
    }

    /// Parses facts in the data file's form.
    pub fn from_json(text: &str) -> Result<GoTypes, serde_json::Error> {
        let mut structs: HashMap<String, GoStruct> = serde_json::from_str(text)?;
        for go in structs.values_mut() {
            go.by_name = go
                .fields
                .iter()
                .enumerate()
                .map(|(index, field)| (field.name.clone(), index))
                .collect();
        }
        Ok(GoTypes { structs })
    }

    /// The struct of this OpenAPI component name (`io.k8s.api.core.v1.Container`).
    pub fn get(&self, name: &str) -> Option<&GoStruct> {
        self.structs.get(name)
    }

    /// How many structs there are.
    pub fn len(&self) -> usize {
        self.structs.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.structs.is_empty()
    }
}

/// What a Go type spelled as `go` is made of, for the decoder: a pointer is transparent (its
/// target decodes), a slice has items, a map has values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoShape<'a> {
    /// `[]T`: the items' type.
    Slice(&'a str),
    /// `map[K]V`: the values' type.
    Map(&'a str),
    /// Anything else: a named or scalar type.
    Named(&'a str),
}

/// `go` without its pointers (`*int32` is `int32`), as Go's errors name a pointer field's type.
pub fn without_pointer(go: &str) -> &str {
    go.trim_start_matches('*')
}

/// The shape of the Go type `go` (pointers removed first).
pub fn go_shape(go: &str) -> GoShape<'_> {
    let go = without_pointer(go);
    if let Some(items) = go.strip_prefix("[]") {
        return GoShape::Slice(items);
    }
    if let Some(rest) = go.strip_prefix("map[") {
        // Map keys of built-in types are plain names, never brackets.
        if let Some((_, values)) = rest.split_once(']') {
            return GoShape::Map(values);
        }
    }
    GoShape::Named(go)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_facts_load_and_name_promoted_fields() {
        let go = GoTypes::builtin().expect("the embedded Go facts load");
        assert!(go.len() > 400, "{} structs", go.len());
        let probe = go.get("io.k8s.api.core.v1.Probe").expect("Probe");
        assert_eq!(probe.short_name(), "Probe");
        let http = probe.field("httpGet").expect("httpGet");
        assert_eq!(http.via, ["ProbeHandler"]);
        assert_eq!(http.go_type, "*v1.HTTPGetAction");
        let container = go.get("io.k8s.api.core.v1.Container").expect("Container");
        assert!(!container.field("name").expect("name").omitempty);
        assert!(container.field("env").expect("env").omitempty);
        assert!(
            container.field("Name").is_none(),
            "names are case-sensitive"
        );
        assert!(
            go.get("io.k8s.apimachinery.pkg.api.resource.Quantity")
                .expect("Quantity")
                .custom
        );
    }

    #[test]
    fn go_type_spellings_split_into_their_parts() {
        assert_eq!(go_shape("[]v1.Container"), GoShape::Slice("v1.Container"));
        assert_eq!(go_shape("*[]string"), GoShape::Slice("string"));
        assert_eq!(
            go_shape("map[v1.ResourceName]resource.Quantity"),
            GoShape::Map("resource.Quantity")
        );
        assert_eq!(go_shape("*int64"), GoShape::Named("int64"));
    }
}
