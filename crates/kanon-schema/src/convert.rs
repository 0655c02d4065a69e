//! Converting one OpenAPI schema object into a [`Type`]: the job shared by the generator (the
//! built-in kinds' `/openapi/v3` components) and by CustomResourceDefinitions (their structural
//! `openAPIV3Schema`), which differ only in how strict the reading is (see [`Dialect`]).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::model::{List, ListType, MapType, Object, Scalar, Shape, Type};

/// Which kind of schema is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// An `/openapi/v3` component of a built-in kind. Strict: a keyword the converter does not
    /// know, or a shape Kubernetes does not publish, is an error, so that regenerating the
    /// embedded data never drops something unseen.
    #[cfg_attr(not(feature = "generate"), allow(dead_code))]
    OpenApi,
    /// A CustomResourceDefinition's structural schema, which the apiserver has already
    /// validated. Lenient: validation keywords (`pattern`, `maxLength`, `x-kubernetes-validations`,
    /// `anyOf`, `oneOf`, `not`, ...) constrain values, not their shape, and are skipped; `enum`
    /// values may be of any type; an `x-kubernetes-embedded-resource` object gets the
    /// `apiVersion`, `kind` and `metadata` every object has.
    Crd,
}

/// The OpenAPI component name of `ObjectMeta`, which the `metadata` of a custom resource (and
/// of an object embedded in one) refers to.
pub(crate) const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// Keywords that carry nothing the schema keeps: prose, the kind a component belongs to (taken
/// from discovery instead) and union discriminators.
const IGNORED: &[&str] = &[
    "description",
    "example",
    "title",
    "externalDocs",
    "x-kubernetes-group-version-kind",
    "x-kubernetes-unions",
];

/// Keywords the converter reads.
const READ: &[&str] = &[
    "$ref",
    // Kept when it is a scalar (for list-map keys); admission sees defaulted objects otherwise.
    "default",
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

/// Adds the names every reference inside `ty` refers to.
pub(crate) fn collect_refs(ty: &Type, out: &mut Vec<String>) {
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

/// Adds what every object embedded as a whole resource has (`apiVersion`, `kind` and
/// `metadata`, the last as `ObjectMeta`) to `fields`; a `metadata` the schema spells out is
/// replaced, since the apiserver keeps every `ObjectMeta` field of it.
pub(crate) fn add_resource_fields(fields: &mut BTreeMap<String, Type>) {
    for name in ["apiVersion", "kind"] {
        fields
            .entry(name.to_string())
            .or_insert_with(|| Type::new(Shape::String));
    }
    fields.insert(
        "metadata".to_string(),
        Type::new(Shape::Ref(OBJECT_META.to_string())),
    );
}

/// Converts one OpenAPI schema object; `at` names where it is, for messages
/// (`io.k8s.api.core.v1.PodSpec.containers[]`).
pub(crate) fn convert(node: &Value, at: &str, dialect: Dialect) -> Result<Type, String> {
    let strict = dialect == Dialect::OpenApi;
    let map = node
        .as_object()
        .ok_or_else(|| format!("{at}: a schema that is not an object"))?;
    if strict
        && let Some(keyword) = map
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
    // default, which `$ref` may not have beside it) an `allOf` of exactly one `$ref`. A CRD
    // has no references (the apiserver refuses `$ref`), and its `allOf` only validates.
    let reference = match (strict, map.get("$ref"), map.get("allOf")) {
        (false, _, _) | (true, None, None) => None,
        (true, Some(reference), None) => Some(ref_name(reference, at)?),
        (true, None, Some(Value::Array(all))) => match all.as_slice() {
            [Value::Object(only)] if only.len() == 1 => match only.get("$ref") {
                Some(reference) => Some(ref_name(reference, at)?),
                None => return Err(format!("{at}: an `allOf` other than one `$ref`")),
            },
            _ => return Err(format!("{at}: an `allOf` other than one `$ref`")),
        },
        (true, _, _) => {
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
    if strict && (list_type.is_some() || !list_map_keys.is_empty()) && !is("array") {
        return Err(format!(
            "{at}: a list type on a schema that is not an array"
        ));
    }
    let has_properties = is("object") && map.contains_key("properties");
    if strict && !required.is_empty() && !has_properties {
        return Err(format!("{at}: `required` on a schema without properties"));
    }
    let embedded_resource = flag("x-kubernetes-embedded-resource")?;
    let preserve_unknown_fields = flag("x-kubernetes-preserve-unknown-fields")?;

    let mut shape = if let Some(target) = reference {
        if type_name.is_some() || map.contains_key("oneOf") {
            return Err(format!("{at}: a reference with its own `type` or `oneOf`"));
        }
        Shape::Ref(target)
    } else if flag("x-kubernetes-int-or-string")? {
        Shape::IntOrString
    } else if let Some(one_of) = map.get("oneOf").filter(|_| strict) {
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
                let items = match (map.get("items"), dialect) {
                    (Some(items), _) => convert(items, &format!("{at}[]"), dialect)?,
                    (None, Dialect::Crd) => Type::new(Shape::Any),
                    (None, Dialect::OpenApi) => {
                        return Err(format!("{at}: an array without `items`"));
                    }
                };
                let list_type = match list_type.as_deref() {
                    None => None,
                    Some("atomic") => Some(ListType::Atomic),
                    Some("set") => Some(ListType::Set),
                    Some("map") => Some(ListType::Map(list_map_keys)),
                    Some(other) => return Err(format!("{at}: list type `{other}`")),
                };
                Shape::List(List {
                    items: Box::new(items),
                    list_type,
                })
            }
            Some("object") => object_shape(map, required, at, dialect)?,
            Some(other) => return Err(format!("{at}: type `{other}`")),
        }
    };
    if dialect == Dialect::Crd && embedded_resource {
        // The apiserver treats the value as a whole object: its `apiVersion`, `kind` and
        // `metadata` are there whether or not the schema names them.
        match &mut shape {
            Shape::Object(object) => add_resource_fields(&mut object.fields),
            Shape::Any => {
                let mut fields = BTreeMap::new();
                add_resource_fields(&mut fields);
                shape = Shape::Object(Object {
                    fields,
                    required: Vec::new(),
                });
            }
            _ => {}
        }
    }
    let map_type = match text("x-kubernetes-map-type")?.as_deref() {
        None => None,
        Some("atomic") => Some(MapType::Atomic),
        Some("granular") => Some(MapType::Granular),
        Some(other) => return Err(format!("{at}: map type `{other}`")),
    };
    let enum_values = match dialect {
        Dialect::OpenApi => strings("enum")?,
        // A CRD may list numbers or booleans: kept as their JSON text.
        Dialect::Crd => match map.get("enum") {
            None => Vec::new(),
            Some(Value::Array(values)) => values
                .iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect(),
            Some(other) => return Err(format!("{at}: `enum` is {other}, not a list")),
        },
    };
    Ok(Type {
        shape,
        format: text("format")?,
        enum_values,
        nullable: flag("nullable")?,
        preserve_unknown_fields,
        embedded_resource,
        map_type,
        patch_strategy: text("x-kubernetes-patch-strategy")?,
        patch_merge_key: text("x-kubernetes-patch-merge-key")?,
        default: map
            .get("default")
            .filter(|d| d.is_string() || d.is_number() || d.is_boolean())
            .cloned(),
    })
}

/// The shape of a `type: object` schema: named fields, a map, or free-form.
fn object_shape(
    map: &serde_json::Map<String, Value>,
    required: Vec<String>,
    at: &str,
    dialect: Dialect,
) -> Result<Shape, String> {
    let properties = |properties: &Value| -> Result<Shape, String> {
        let properties = properties
            .as_object()
            .ok_or_else(|| format!("{at}: `properties` is not an object"))?;
        let fields = properties
            .iter()
            .map(|(name, field)| {
                Ok((
                    name.clone(),
                    convert(field, &format!("{at}.{name}"), dialect)?,
                ))
            })
            .collect::<Result<BTreeMap<_, _>, String>>()?;
        Ok(Shape::Object(Object { fields, required }))
    };
    Ok(
        match (
            map.get("properties"),
            map.get("additionalProperties"),
            dialect,
        ) {
            (Some(_), Some(_), Dialect::OpenApi) => {
                return Err(format!(
                    "{at}: both `properties` and `additionalProperties`"
                ));
            }
            // The apiserver refuses both in a CRD; the named fields are the useful part.
            (Some(named), _, _) => properties(named)?,
            (None, Some(Value::Bool(true)), _) => Shape::Map(Box::new(Type::new(Shape::Any))),
            (None, Some(values @ Value::Object(_)), _) => {
                Shape::Map(Box::new(convert(values, &format!("{at}{{}}"), dialect)?))
            }
            // `additionalProperties: false` names no field: nothing is allowed, nothing known.
            (None, Some(Value::Bool(false)), Dialect::Crd) => Shape::Object(Object::default()),
            (None, Some(other), _) => {
                return Err(format!("{at}: `additionalProperties` is {other}"));
            }
            // No fields named: free-form (`RawExtension`, `FieldsV1`).
            (None, None, _) => Shape::Object(Object::default()),
        },
    )
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

    fn openapi(node: &Value) -> Result<Type, String> {
        convert(node, "x", Dialect::OpenApi)
    }

    fn crd(node: &Value) -> Result<Type, String> {
        convert(node, "x", Dialect::Crd)
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
        let ty = convert(&containers, "containers", Dialect::OpenApi)?;
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
        assert_eq!(openapi(&int_or_string)?.shape, Shape::IntOrString);
        let quantity = json!({"oneOf": [{"type": "string"}, {"type": "number"}]});
        assert_eq!(
            openapi(&quantity)?.shape,
            Shape::OneOf(vec![Scalar::Number, Scalar::String])
        );
        let labels = json!({"type": "object", "additionalProperties": {"type": "string", "default": ""}, "x-kubernetes-map-type": "atomic"});
        let ty = openapi(&labels)?;
        let mut value = Type::new(Shape::String);
        value.default = Some(json!(""));
        assert_eq!(ty.shape, Shape::Map(Box::new(value)));
        assert_eq!(ty.map_type, Some(MapType::Atomic));
        // Only a scalar default is kept.
        let object_default = json!({"type": "object", "default": {}});
        assert_eq!(openapi(&object_default)?.default, None);
        assert_eq!(openapi(&json!({}))?.shape, Shape::Any);
        let raw = json!({"type": "object"});
        assert_eq!(openapi(&raw)?.shape, Shape::Object(Object::default()));
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
            assert!(openapi(&schema).is_err(), "{schema}");
        }
    }

    #[test]
    fn a_crd_schema_skips_validation_and_keeps_the_shape() -> Result<(), String> {
        let port = json!({
            "type": "integer", "minimum": 1, "maximum": 65535, "enum": [80, 443],
            "x-kubernetes-validations": [{"rule": "self != 22"}]
        });
        let ty = crd(&port)?;
        assert_eq!(ty.shape, Shape::Integer);
        assert_eq!(ty.enum_values, ["80", "443"]);
        // The same schema is refused in the strict dialect: it would lose the bounds unseen.
        assert!(openapi(&port).is_err());

        let target = json!({
            "x-kubernetes-int-or-string": true,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": "^[0-9]+%?$"
        });
        assert_eq!(crd(&target)?.shape, Shape::IntOrString);

        // `oneOf` in a CRD only says which fields go together.
        let exclusive = json!({
            "type": "object",
            "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
            "properties": {"a": {"type": "string"}, "b": {"type": "string", "nullable": true}},
        });
        let ty = crd(&exclusive)?;
        let Shape::Object(object) = &ty.shape else {
            return Err(format!("not an object: {ty:?}"));
        };
        assert_eq!(object.fields.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert!(object.fields.get("b").is_some_and(|b| b.nullable));

        let keyed = json!({
            "type": "array", "maxItems": 8,
            "items": {"type": "object", "required": ["name"],
                      "properties": {"name": {"type": "string"}}},
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]
        });
        let Shape::List(list) = crd(&keyed)?.shape else {
            return Err("not a list".to_string());
        };
        assert_eq!(
            list.list_type,
            Some(ListType::Map(vec!["name".to_string()]))
        );
        Ok(())
    }

    #[test]
    fn an_embedded_resource_has_api_version_kind_and_object_meta() -> Result<(), String> {
        let template = json!({
            "type": "object",
            "x-kubernetes-embedded-resource": true,
            "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"metadata": {"type": "object", "properties": {"name": {"type": "string"}}}}
        });
        let ty = crd(&template)?;
        assert!(ty.embedded_resource && ty.preserve_unknown_fields);
        let Shape::Object(object) = &ty.shape else {
            return Err(format!("not an object: {ty:?}"));
        };
        assert_eq!(
            object.fields.keys().collect::<Vec<_>>(),
            ["apiVersion", "kind", "metadata"]
        );
        assert_eq!(
            object.fields.get("metadata").map(|m| &m.shape),
            Some(&Shape::Ref(OBJECT_META.to_string()))
        );
        Ok(())
    }
}
