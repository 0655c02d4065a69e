//! Building a [`Schema`] from a running kube-apiserver: its `/openapi/v3` documents for the
//! types, its discovery lists for the kinds (the OpenAPI documents do not say which kinds are
//! namespaced, nor their resource names).
//!
//! The caller supplies the HTTP GET ([`generate`] takes a function from a server path to the
//! response body), so this crate needs no HTTP client and `cargo xtask schema` and the
//! end-to-end staleness check read the server the same way (through `kubectl get --raw`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::model::{Kind, List, ListType, MapType, Object, Scalar, SchemaFile, Shape, Type};
use crate::{LoadError, Schema};

/// Why a schema could not be generated.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// The fetch function failed.
    #[error("fetching {path}: {message}")]
    Fetch {
        /// The server path asked for.
        path: String,
        /// What the fetch function said.
        message: String,
    },
    /// A response is not JSON.
    #[error("{path} did not answer JSON: {source}")]
    Json {
        /// The server path.
        path: String,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// A response is JSON but not of the form expected, or uses an OpenAPI keyword the
    /// converter does not know (teach it the keyword rather than drop it unseen).
    #[error("{path}: {message}")]
    Unexpected {
        /// The server path.
        path: String,
        /// What was wrong, and where in the document.
        message: String,
    },
    /// The result does not hold together (a reference to a type no document defines, a kind
    /// listed twice).
    #[error(transparent)]
    Inconsistent(#[from] LoadError),
}

/// Reads the server through `fetch` (called with paths such as `/openapi/v3` and
/// `/apis/apps/v1`; it returns the response body or an error message) and converts what it
/// serves into a [`Schema`]:
///
/// - `/version` for the server's `gitVersion`;
/// - the `/openapi/v3` index, then each group-version document it lists (`api/v1`,
///   `apis/<group>/<version>`), except those of CustomResourceDefinitions and of aggregated API
///   servers (read from `/apis/apiextensions.k8s.io/v1/customresourcedefinitions` and
///   `/apis/apiregistration.k8s.io/v1/apiservices`): only built-in kinds are kept;
/// - for each, its discovery list (`/api/v1`, `/apis/<group>/<version>`): every resource that
///   is not a subresource becomes a [`Kind`], whose root type is the component that names its
///   group, version and kind in `x-kubernetes-group-version-kind`;
/// - every type a root type reaches, converted once and shared by name.
pub fn generate(
    fetch: &mut dyn FnMut(&str) -> Result<String, String>,
) -> Result<Schema, GenerateError> {
    let version = get(fetch, "/version")?;
    let kubernetes = version
        .get("gitVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| unexpected("/version", "no `gitVersion`"))?
        .to_string();
    let custom = custom_group_versions(fetch)?;
    let index = get(fetch, "/openapi/v3")?;
    let paths = index
        .get("paths")
        .and_then(Value::as_object)
        .ok_or_else(|| unexpected("/openapi/v3", "no `paths` object"))?;

    let mut kinds = Vec::new();
    let mut types = BTreeMap::new();
    for key in paths.keys() {
        let Some((group, version)) = group_version(key) else {
            continue;
        };
        if custom.contains(&(group.to_string(), version.to_string())) {
            continue;
        }
        let document_path = format!("/openapi/v3/{key}");
        let document = get(fetch, &document_path)?;
        let schemas = document
            .pointer("/components/schemas")
            .and_then(Value::as_object)
            .ok_or_else(|| unexpected(&document_path, "no `components.schemas`"))?;
        let discovery_path = format!("/{key}");
        let discovery = get(fetch, &discovery_path)?;
        let resources = discovery
            .get("resources")
            .and_then(Value::as_array)
            .ok_or_else(|| unexpected(&discovery_path, "no `resources` list"))?;
        let mut converter = Converter {
            path: &document_path,
            schemas,
            types: &mut types,
            done: BTreeSet::new(),
        };
        for resource in resources {
            let field = |name: &str| resource.get(name);
            let text = |name: &str| {
                field(name).and_then(Value::as_str).ok_or_else(|| {
                    unexpected(&discovery_path, &format!("a resource has no {name}"))
                })
            };
            let resource_name = text("name")?;
            // `deployments/status`, `pods/log`: subresources are not kinds of their own.
            if resource_name.contains('/') {
                continue;
            }
            let kind = text("kind")?;
            let namespaced = field("namespaced")
                .and_then(Value::as_bool)
                .ok_or_else(|| {
                    unexpected(
                        &discovery_path,
                        &format!("{resource_name} does not say whether it is namespaced"),
                    )
                })?;
            let root = root_type(schemas, group, version, kind)
                .map_err(|message| unexpected(&document_path, &message))?;
            converter.convert_reachable(&root)?;
            kinds.push(Kind {
                api_version: if group.is_empty() {
                    version.to_string()
                } else {
                    format!("{group}/{version}")
                },
                kind: kind.to_string(),
                resource: resource_name.to_string(),
                namespaced,
                type_name: root,
            });
        }
    }
    kinds.sort_by(|a, b| (a.group(), a.version(), &a.kind).cmp(&(b.group(), b.version(), &b.kind)));
    Ok(Schema::from_file(SchemaFile {
        kubernetes,
        kinds,
        types,
    })?)
}

/// `GET path` through `fetch`, parsed as JSON.
fn get(
    fetch: &mut dyn FnMut(&str) -> Result<String, String>,
    path: &str,
) -> Result<Value, GenerateError> {
    let body = fetch(path).map_err(|message| GenerateError::Fetch {
        path: path.to_string(),
        message,
    })?;
    serde_json::from_str(&body).map_err(|source| GenerateError::Json {
        path: path.to_string(),
        source,
    })
}

fn unexpected(path: &str, message: &str) -> GenerateError {
    GenerateError::Unexpected {
        path: path.to_string(),
        message: message.to_string(),
    }
}

/// The group and version of an `/openapi/v3` index key: `api/v1` is the core group;
/// `apis/apps/v1` is `apps`, `v1`. `None` for every other key (`apis/apps`, `version`, ...).
fn group_version(key: &str) -> Option<(&str, &str)> {
    if key == "api/v1" {
        return Some(("", "v1"));
    }
    let (group, version) = key.strip_prefix("apis/")?.split_once('/')?;
    (!version.contains('/')).then_some((group, version))
}

/// The group-versions served by CustomResourceDefinitions or by aggregated API servers (an
/// APIService with a `service`): not built in.
fn custom_group_versions(
    fetch: &mut dyn FnMut(&str) -> Result<String, String>,
) -> Result<BTreeSet<(String, String)>, GenerateError> {
    let mut custom = BTreeSet::new();
    let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    for crd in items(&get(fetch, path)?, path)? {
        let group = crd.pointer("/spec/group").and_then(Value::as_str);
        let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
        let (Some(group), Some(versions)) = (group, versions) else {
            return Err(unexpected(
                path,
                "a CRD without spec.group or spec.versions",
            ));
        };
        for version in versions {
            let name = version.get("name").and_then(Value::as_str);
            let name = name.ok_or_else(|| unexpected(path, "a CRD version without a name"))?;
            custom.insert((group.to_string(), name.to_string()));
        }
    }
    let path = "/apis/apiregistration.k8s.io/v1/apiservices";
    for service in items(&get(fetch, path)?, path)? {
        if service.pointer("/spec/service").is_none_or(Value::is_null) {
            continue;
        }
        let group = service.pointer("/spec/group").and_then(Value::as_str);
        let version = service.pointer("/spec/version").and_then(Value::as_str);
        if let (Some(group), Some(version)) = (group, version) {
            custom.insert((group.to_string(), version.to_string()));
        }
    }
    Ok(custom)
}

/// The `items` of a list response.
fn items<'v>(list: &'v Value, path: &str) -> Result<&'v Vec<Value>, GenerateError> {
    list.get("items")
        .and_then(Value::as_array)
        .ok_or_else(|| unexpected(path, "no `items` list"))
}

/// The one component whose `x-kubernetes-group-version-kind` names this group, version and
/// kind.
fn root_type(
    schemas: &Map<String, Value>,
    group: &str,
    version: &str,
    kind: &str,
) -> Result<String, String> {
    let names_it = |gvk: &Value| {
        gvk.get("group").and_then(Value::as_str) == Some(group)
            && gvk.get("version").and_then(Value::as_str) == Some(version)
            && gvk.get("kind").and_then(Value::as_str) == Some(kind)
    };
    let mut matches = schemas.iter().filter(|(_, schema)| {
        schema
            .get("x-kubernetes-group-version-kind")
            .and_then(Value::as_array)
            .is_some_and(|gvks| gvks.iter().any(names_it))
    });
    let api_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    match (matches.next(), matches.next()) {
        (Some((name, _)), None) => Ok(name.clone()),
        (None, _) => Err(format!("no component is {api_version} {kind}")),
        (Some((a, _)), Some((b, _))) => Err(format!(
            "both `{a}` and `{b}` say they are {api_version} {kind}"
        )),
    }
}

/// Keywords that carry nothing the schema keeps: prose, defaults (admission sees defaulted
/// objects), the kind a component belongs to (taken from discovery instead) and union
/// discriminators.
const IGNORED: &[&str] = &[
    "description",
    "default",
    "example",
    "title",
    "externalDocs",
    "x-kubernetes-group-version-kind",
    "x-kubernetes-unions",
];

/// Keywords the converter reads.
const READ: &[&str] = &[
    "$ref",
    "allOf",
    "oneOf",
    "type",
    "format",
    "enum",
    "nullable",
    "items",
    "properties",
    "additionalProperties",
    "required",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-map-type",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-patch-strategy",
    "x-kubernetes-patch-merge-key",
];

const REF_PREFIX: &str = "#/components/schemas/";

/// Converts the components of one group-version document into `types`.
struct Converter<'a> {
    /// The document's server path, for messages.
    path: &'a str,
    schemas: &'a Map<String, Value>,
    types: &'a mut BTreeMap<String, Type>,
    /// Components of this document already converted.
    done: BTreeSet<String>,
}

impl Converter<'_> {
    /// Converts `root` and every component it reaches. A component another document already
    /// gave must convert to the same type (the same Go type is published in every document that
    /// uses it), else the server contradicts itself.
    fn convert_reachable(&mut self, root: &str) -> Result<(), GenerateError> {
        let mut pending = vec![root.to_string()];
        while let Some(name) = pending.pop() {
            if !self.done.insert(name.clone()) {
                continue;
            }
            let schema = self.schemas.get(&name).ok_or_else(|| {
                unexpected(
                    self.path,
                    &format!("`{name}` is referred to but not defined"),
                )
            })?;
            let ty = convert(schema, &name).map_err(|message| unexpected(self.path, &message))?;
            collect_refs(&ty, &mut pending);
            match self.types.get(&name) {
                Some(known) if *known != ty => {
                    return Err(unexpected(
                        self.path,
                        &format!("`{name}` differs from the same component in another document"),
                    ));
                }
                Some(_) => {}
                None => {
                    self.types.insert(name, ty);
                }
            }
        }
        Ok(())
    }
}

/// Adds the names every reference inside `ty` refers to.
fn collect_refs(ty: &Type, out: &mut Vec<String>) {
    match &ty.shape {
        Shape::Ref(target) => out.push(target.clone()),
        Shape::Object(object) => object.fields.values().for_each(|f| collect_refs(f, out)),
        Shape::Map(values) => collect_refs(values, out),
        Shape::List(list) => collect_refs(&list.items, out),
        _ => {}
    }
}

/// The component name of a `$ref`.
fn ref_name(reference: &Value, at: &str) -> Result<String, String> {
    reference
        .as_str()
        .and_then(|r| r.strip_prefix(REF_PREFIX))
        .map(str::to_string)
        .ok_or_else(|| format!("{at}: `$ref` {reference} is not a component reference"))
}

/// Converts one OpenAPI schema object; `at` names where it is, for messages
/// (`io.k8s.api.core.v1.PodSpec.containers[]`).
fn convert(node: &Value, at: &str) -> Result<Type, String> {
    let map = node
        .as_object()
        .ok_or_else(|| format!("{at}: a schema that is not an object"))?;
    if let Some(keyword) = map
        .keys()
        .find(|k| !READ.contains(&k.as_str()) && !IGNORED.contains(&k.as_str()))
    {
        return Err(format!(
            "{at}: the keyword `{keyword}` is not supported; teach kanon-schema's converter"
        ));
    }
    let text = |key: &str| -> Result<Option<String>, String> {
        match map.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(format!("{at}: `{key}` is {other}, not a string")),
        }
    };
    let flag = |key: &str| -> Result<bool, String> {
        match map.get(key) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(format!("{at}: `{key}` is {other}, not a boolean")),
        }
    };
    let strings = |key: &str| -> Result<Vec<String>, String> {
        match map.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(values)) => values
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| format!("{at}: `{key}` holds {v}, not a string"))
                })
                .collect(),
            Some(other) => Err(format!("{at}: `{key}` is {other}, not a list")),
        }
    };

    let type_name = text("type")?;
    // A component reference is `$ref` itself, or (where the field adds a description or a
    // default, which `$ref` may not have beside it) an `allOf` of exactly one `$ref`.
    let reference = match (map.get("$ref"), map.get("allOf")) {
        (Some(reference), None) => Some(ref_name(reference, at)?),
        (None, Some(Value::Array(all))) => match all.as_slice() {
            [Value::Object(only)] if only.len() == 1 => match only.get("$ref") {
                Some(reference) => Some(ref_name(reference, at)?),
                None => return Err(format!("{at}: an `allOf` other than one `$ref`")),
            },
            _ => return Err(format!("{at}: an `allOf` other than one `$ref`")),
        },
        (None, None) => None,
        _ => {
            return Err(format!(
                "{at}: `$ref` with `allOf`, or an `allOf` not a list"
            ));
        }
    };
    let list_type = text("x-kubernetes-list-type")?;
    let list_map_keys = strings("x-kubernetes-list-map-keys")?;
    let required = strings("required")?;
    let is = |wanted: &str| type_name.as_deref() == Some(wanted);
    // A Go `[]byte` tagged `listType=atomic` is published as a base64 string with the tag
    // still on it (APIService `caBundle`); a string is replaced whole anyway, so the tag says
    // nothing and is dropped. On any other non-array it would be a mistake to look at.
    let byte_string = is("string") && text("format")?.as_deref() == Some("byte");
    let list_type = list_type.filter(|t| !(byte_string && t == "atomic"));
    if (list_type.is_some() || !list_map_keys.is_empty()) && !is("array") {
        return Err(format!(
            "{at}: a list type on a schema that is not an array"
        ));
    }
    let has_properties = is("object") && map.contains_key("properties");
    if !required.is_empty() && !has_properties {
        return Err(format!("{at}: `required` on a schema without properties"));
    }

    let shape = if let Some(target) = reference {
        if type_name.is_some() || map.contains_key("oneOf") {
            return Err(format!("{at}: a reference with its own `type` or `oneOf`"));
        }
        Shape::Ref(target)
    } else if flag("x-kubernetes-int-or-string")? {
        Shape::IntOrString
    } else if let Some(one_of) = map.get("oneOf") {
        if type_name.is_some() {
            return Err(format!("{at}: `oneOf` beside `type`"));
        }
        one_of_shape(one_of, at)?
    } else {
        match type_name.as_deref() {
            None => Shape::Any,
            Some("boolean") => Shape::Boolean,
            Some("integer") => Shape::Integer,
            Some("number") => Shape::Number,
            Some("string") => Shape::String,
            Some("array") => {
                let items = map
                    .get("items")
                    .ok_or_else(|| format!("{at}: an array without `items`"))?;
                let list_type = match list_type.as_deref() {
                    None => None,
                    Some("atomic") => Some(ListType::Atomic),
                    Some("set") => Some(ListType::Set),
                    Some("map") => Some(ListType::Map(list_map_keys)),
                    Some(other) => return Err(format!("{at}: list type `{other}`")),
                };
                Shape::List(List {
                    items: Box::new(convert(items, &format!("{at}[]"))?),
                    list_type,
                })
            }
            Some("object") => match (map.get("properties"), map.get("additionalProperties")) {
                (Some(_), Some(_)) => {
                    return Err(format!(
                        "{at}: both `properties` and `additionalProperties`"
                    ));
                }
                (Some(properties), None) => {
                    let properties = properties
                        .as_object()
                        .ok_or_else(|| format!("{at}: `properties` is not an object"))?;
                    let fields = properties
                        .iter()
                        .map(|(name, field)| {
                            Ok((name.clone(), convert(field, &format!("{at}.{name}"))?))
                        })
                        .collect::<Result<BTreeMap<_, _>, String>>()?;
                    Shape::Object(Object { fields, required })
                }
                (None, Some(Value::Bool(true))) => Shape::Map(Box::new(Type::new(Shape::Any))),
                (None, Some(values @ Value::Object(_))) => {
                    Shape::Map(Box::new(convert(values, &format!("{at}{{}}"))?))
                }
                (None, Some(other)) => {
                    return Err(format!("{at}: `additionalProperties` is {other}"));
                }
                // No fields named: free-form (`RawExtension`, `FieldsV1`).
                (None, None) => Shape::Object(Object::default()),
            },
            Some(other) => return Err(format!("{at}: type `{other}`")),
        }
    };
    let map_type = match text("x-kubernetes-map-type")?.as_deref() {
        None => None,
        Some("atomic") => Some(MapType::Atomic),
        Some("granular") => Some(MapType::Granular),
        Some(other) => return Err(format!("{at}: map type `{other}`")),
    };
    Ok(Type {
        shape,
        format: text("format")?,
        enum_values: strings("enum")?,
        nullable: flag("nullable")?,
        preserve_unknown_fields: flag("x-kubernetes-preserve-unknown-fields")?,
        embedded_resource: flag("x-kubernetes-embedded-resource")?,
        map_type,
        patch_strategy: text("x-kubernetes-patch-strategy")?,
        patch_merge_key: text("x-kubernetes-patch-merge-key")?,
    })
}

/// A `oneOf` of bare scalar types: integer-or-string is [`Shape::IntOrString`], any other mix
/// (`Quantity`: string or number) is [`Shape::OneOf`].
fn one_of_shape(one_of: &Value, at: &str) -> Result<Shape, String> {
    let alternatives = one_of
        .as_array()
        .ok_or_else(|| format!("{at}: `oneOf` is not a list"))?;
    let mut scalars = alternatives
        .iter()
        .map(|alternative| {
            let only_type = alternative
                .as_object()
                .filter(|m| m.keys().all(|k| k == "type" || k == "description"));
            only_type
                .and_then(|m| m.get("type"))
                .and_then(Value::as_str)
                .and_then(Scalar::from_name)
                .ok_or_else(|| format!("{at}: a `oneOf` alternative other than a scalar type"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    scalars.sort();
    scalars.dedup();
    Ok(if scalars == [Scalar::Integer, Scalar::String] {
        Shape::IntOrString
    } else {
        Shape::OneOf(scalars)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn group_versions_of_index_keys() {
        assert_eq!(group_version("api/v1"), Some(("", "v1")));
        assert_eq!(group_version("apis/apps/v1"), Some(("apps", "v1")));
        assert_eq!(group_version("apis/apps"), None);
        assert_eq!(group_version("api"), None);
        assert_eq!(group_version("openid/v1/jwks"), None);
        assert_eq!(group_version(".well-known/openid-configuration"), None);
    }

    #[test]
    fn converts_the_shapes_kubernetes_uses() -> Result<(), String> {
        let containers = json!({
            "type": "array",
            "description": "ignored",
            "items": {"default": {}, "allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.Container"}]},
            "x-kubernetes-list-map-keys": ["name"],
            "x-kubernetes-list-type": "map",
            "x-kubernetes-patch-merge-key": "name",
            "x-kubernetes-patch-strategy": "merge"
        });
        let ty = convert(&containers, "containers")?;
        let Shape::List(list) = &ty.shape else {
            return Err(format!("not a list: {ty:?}"));
        };
        assert_eq!(
            list.list_type,
            Some(ListType::Map(vec!["name".to_string()]))
        );
        assert_eq!(
            list.items.shape,
            Shape::Ref("io.k8s.api.core.v1.Container".to_string())
        );
        assert_eq!(ty.patch_merge_key.as_deref(), Some("name"));

        let int_or_string =
            json!({"format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]});
        assert_eq!(convert(&int_or_string, "x")?.shape, Shape::IntOrString);
        let quantity = json!({"oneOf": [{"type": "string"}, {"type": "number"}]});
        assert_eq!(
            convert(&quantity, "x")?.shape,
            Shape::OneOf(vec![Scalar::Number, Scalar::String])
        );
        let labels = json!({"type": "object", "additionalProperties": {"type": "string", "default": ""}, "x-kubernetes-map-type": "atomic"});
        let ty = convert(&labels, "x")?;
        assert_eq!(ty.shape, Shape::Map(Box::new(Type::new(Shape::String))));
        assert_eq!(ty.map_type, Some(MapType::Atomic));
        assert_eq!(convert(&json!({}), "x")?.shape, Shape::Any);
        let raw = json!({"type": "object"});
        assert_eq!(convert(&raw, "x")?.shape, Shape::Object(Object::default()));
        Ok(())
    }

    #[test]
    fn refuses_what_it_would_drop_unseen() {
        for schema in [
            json!({"type": "string", "maxLength": 3}),
            json!({"allOf": [{"$ref": "#/components/schemas/A"}, {"$ref": "#/components/schemas/B"}]}),
            json!({"type": "string", "x-kubernetes-list-type": "set"}),
            json!({"type": "array"}),
            json!({"$ref": "https://elsewhere/A"}),
        ] {
            assert!(convert(&schema, "x").is_err(), "{schema}");
        }
    }
}
