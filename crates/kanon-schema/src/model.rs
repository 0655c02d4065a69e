//! The schema's data model and its compact JSON form (the embedded data file).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A kind the API server serves at the top level (not a subresource), as discovery lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Kind {
    /// `v1` for the core group, `<group>/<version>` otherwise (`apps/v1`).
    pub api_version: String,
    /// The kind's name, `Deployment`.
    pub kind: String,
    /// The plural resource name in URLs and RBAC rules, `deployments`.
    pub resource: String,
    /// Whether objects of this kind live in a namespace.
    pub namespaced: bool,
    /// The name of the kind's root type in [`Schema::types`](crate::Schema::types), an OpenAPI
    /// component name such as `io.k8s.api.apps.v1.Deployment`.
    #[serde(rename = "type")]
    pub type_name: String,
}

impl Kind {
    /// The API group, empty for the core group.
    pub fn group(&self) -> &str {
        crate::group_version(&self.api_version).0
    }

    /// The version within the group, `v1`.
    pub fn version(&self) -> &str {
        crate::group_version(&self.api_version).1
    }
}

/// A type: a named one (an OpenAPI component, shared by every field that uses it) or one
/// written inline at a field, a list's items or a map's values.
///
/// The attributes besides [`shape`](Self::shape) describe the value at this place; for a
/// [`Shape::Ref`] they are the ones the referring field adds (a patch strategy, say), and the
/// named type carries its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "TypeRepr", into = "TypeRepr")]
pub struct Type {
    /// What values look like.
    pub shape: Shape,
    /// OpenAPI `format`: `int32`, `int64`, `double`, `date-time`, `byte`, `int-or-string`...
    pub format: Option<String>,
    /// The allowed values, when the schema lists them (`enum`; strings in every built-in type).
    pub enum_values: Vec<String>,
    /// `nullable`: `null` is a valid value.
    pub nullable: bool,
    /// `x-kubernetes-preserve-unknown-fields`: fields the schema does not name are kept (and
    /// are not errors).
    pub preserve_unknown_fields: bool,
    /// `x-kubernetes-embedded-resource`: the value is a whole object with `apiVersion`, `kind`
    /// and `metadata`.
    pub embedded_resource: bool,
    /// `x-kubernetes-map-type`: whether an object or map is replaced whole or merged key by key
    /// on apply. `None` when the schema does not say (Kubernetes then merges).
    pub map_type: Option<MapType>,
    /// `x-kubernetes-patch-strategy` as written (`merge`, `retainKeys`, `merge,retainKeys`):
    /// how a strategic merge patch treats this field.
    pub patch_strategy: Option<String>,
    /// `x-kubernetes-patch-merge-key`: the key that identifies list items in a strategic merge
    /// patch.
    pub patch_merge_key: Option<String>,
    /// The schema's `default`, when it is a scalar (a string, number or boolean): what a
    /// list-map key field that an item leaves out counts as when items are matched by key
    /// (a container port's `protocol` is `TCP`). Other defaults are left out.
    pub default: Option<serde_json::Value>,
}

impl Type {
    /// A type of `shape` with no other attribute.
    pub const fn new(shape: Shape) -> Type {
        Type {
            shape,
            format: None,
            enum_values: Vec::new(),
            nullable: false,
            preserve_unknown_fields: false,
            embedded_resource: false,
            map_type: None,
            patch_strategy: None,
            patch_merge_key: None,
            default: None,
        }
    }

    /// Whether a JSON string is a valid value of this shape (a string, an int-or-string, or a
    /// one-of that includes strings, such as `Quantity`). A [`Shape::Ref`] answers `false`:
    /// follow it first ([`Schema::deref`](crate::Schema::deref)).
    pub fn accepts_string(&self) -> bool {
        match &self.shape {
            Shape::String | Shape::IntOrString | Shape::Any => true,
            Shape::OneOf(scalars) => scalars.contains(&Scalar::String),
            _ => false,
        }
    }
}

/// The shape of a [`Type`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// Any JSON value (a schema with no `type`, such as `apiextensions.k8s.io/v1` `JSON`).
    Any,
    /// `true` or `false`.
    Boolean,
    /// A whole number.
    Integer,
    /// Any number.
    Number,
    /// A string; see [`Type::format`].
    String,
    /// An integer or a string (`IntOrString`, `x-kubernetes-int-or-string`).
    IntOrString,
    /// One of several scalar types (`oneOf`): `Quantity` is a string or a number.
    OneOf(Vec<Scalar>),
    /// An object with named fields. One with no fields at all is free-form (`RawExtension`).
    Object(Object),
    /// An object whose keys are free and whose values are all of one type
    /// (`additionalProperties`).
    Map(Box<Type>),
    /// A list.
    List(List),
    /// The named type of this name (an OpenAPI component); see
    /// [`Schema::named_type`](crate::Schema::named_type).
    Ref(String),
}

/// A scalar type in a [`Shape::OneOf`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scalar {
    /// `boolean`
    Boolean,
    /// `integer`
    Integer,
    /// `number`
    Number,
    /// `string`
    String,
}

impl Scalar {
    /// The OpenAPI type name.
    pub fn name(self) -> &'static str {
        match self {
            Scalar::Boolean => "boolean",
            Scalar::Integer => "integer",
            Scalar::Number => "number",
            Scalar::String => "string",
        }
    }

    /// The scalar of an OpenAPI type name.
    pub fn from_name(name: &str) -> Option<Scalar> {
        match name {
            "boolean" => Some(Scalar::Boolean),
            "integer" => Some(Scalar::Integer),
            "number" => Some(Scalar::Number),
            "string" => Some(Scalar::String),
            _ => None,
        }
    }
}

/// The fields of an object type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Object {
    /// Field name to type, sorted by name.
    pub fields: BTreeMap<String, Type>,
    /// The fields that must be present, in the schema's order.
    pub required: Vec<String>,
}

/// A list type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct List {
    /// The type of every item.
    pub items: Box<Type>,
    /// `x-kubernetes-list-type`. `None` when the schema does not say, which Kubernetes treats
    /// as [`ListType::Atomic`].
    pub list_type: Option<ListType>,
}

/// How a list merges on server-side apply (`x-kubernetes-list-type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// Replaced whole.
    Atomic,
    /// Scalar items, each at most once, merged as a set.
    Set,
    /// Object items identified by these key fields (`x-kubernetes-list-map-keys`), merged item by
    /// item: `containers` is keyed by `name`.
    Map(Vec<String>),
}

/// How an object or map merges on server-side apply (`x-kubernetes-map-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MapType {
    /// Replaced whole.
    Atomic,
    /// Merged key by key.
    Granular,
}

/// The data file: what `cargo xtask schema` writes and the crate embeds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct SchemaFile {
    /// `gitVersion` of the kube-apiserver it was read from, `v1.35.8`.
    pub kubernetes: String,
    /// Sorted by group (core first), version and kind.
    pub kinds: Vec<Kind>,
    /// Every type a kind's root type reaches, by OpenAPI component name.
    pub types: BTreeMap<String, Type>,
}

/// `type` in the compact form: one name, or several scalar names for a `oneOf`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
enum TypeName {
    One(String),
    OneOf(Vec<String>),
}

/// The compact JSON form of a [`Type`]: one flat object, absent attributes left out.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TypeRepr {
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    reference: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    type_name: Option<TypeName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    format: Option<String>,
    #[serde(rename = "enum", default, skip_serializing_if = "Vec::is_empty")]
    enum_values: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    items: Option<Box<Type>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    values: Option<Box<Type>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    list_type: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    list_map_keys: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    map_type: Option<MapType>,
    #[serde(default, skip_serializing_if = "is_false")]
    nullable: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    preserve_unknown_fields: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    embedded_resource: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    patch_strategy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    patch_merge_key: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    required: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    default: Option<serde_json::Value>,
    // Last, so a named object type reads as its attributes, then its fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fields: Option<BTreeMap<String, Type>>,
}

fn is_false(value: &bool) -> bool {
    !*value
}

impl From<Type> for TypeRepr {
    fn from(ty: Type) -> TypeRepr {
        let mut repr = TypeRepr {
            format: ty.format,
            enum_values: ty.enum_values,
            map_type: ty.map_type,
            nullable: ty.nullable,
            preserve_unknown_fields: ty.preserve_unknown_fields,
            embedded_resource: ty.embedded_resource,
            patch_strategy: ty.patch_strategy,
            patch_merge_key: ty.patch_merge_key,
            default: ty.default,
            ..TypeRepr::default()
        };
        let name = |name: &str| Some(TypeName::One(name.to_string()));
        match ty.shape {
            Shape::Any => repr.type_name = name("any"),
            Shape::Boolean => repr.type_name = name("boolean"),
            Shape::Integer => repr.type_name = name("integer"),
            Shape::Number => repr.type_name = name("number"),
            Shape::String => repr.type_name = name("string"),
            Shape::IntOrString => repr.type_name = name("int-or-string"),
            Shape::OneOf(scalars) => {
                repr.type_name = Some(TypeName::OneOf(
                    scalars.iter().map(|s| s.name().to_string()).collect(),
                ));
            }
            Shape::Object(object) => {
                repr.type_name = name("object");
                repr.required = object.required;
                // An object without fields is written without `fields`, which reads back the same.
                if !object.fields.is_empty() {
                    repr.fields = Some(object.fields);
                }
            }
            Shape::Map(values) => {
                repr.type_name = name("map");
                repr.values = Some(values);
            }
            Shape::List(list) => {
                repr.type_name = name("list");
                repr.items = Some(list.items);
                match list.list_type {
                    None => {}
                    Some(ListType::Atomic) => repr.list_type = Some("atomic".to_string()),
                    Some(ListType::Set) => repr.list_type = Some("set".to_string()),
                    Some(ListType::Map(keys)) => {
                        repr.list_type = Some("map".to_string());
                        repr.list_map_keys = keys;
                    }
                }
            }
            Shape::Ref(target) => repr.reference = Some(target),
        }
        repr
    }
}

impl TryFrom<TypeRepr> for Type {
    type Error = String;

    fn try_from(repr: TypeRepr) -> Result<Type, String> {
        let TypeRepr {
            reference,
            type_name,
            format,
            enum_values,
            items,
            values,
            list_type,
            list_map_keys,
            map_type,
            nullable,
            preserve_unknown_fields,
            embedded_resource,
            patch_strategy,
            patch_merge_key,
            required,
            default,
            fields,
        } = repr;
        let type_label = match &type_name {
            Some(TypeName::One(name)) => name.clone(),
            Some(TypeName::OneOf(names)) => format!("{names:?}"),
            None => "ref".to_string(),
        };
        // Attributes that belong to one shape only: anywhere else the file is corrupt.
        let stray = |present: bool, attribute: &str| -> Result<(), String> {
            if present {
                Err(format!(
                    "`{attribute}` does not belong to type `{type_label}`"
                ))
            } else {
                Ok(())
            }
        };
        let is = |wanted: &str| matches!(&type_name, Some(TypeName::One(n)) if n == wanted);
        stray(items.is_some() && !is("list"), "items")?;
        stray(list_type.is_some() && !is("list"), "listType")?;
        stray(values.is_some() && !is("map"), "values")?;
        stray(
            (fields.is_some() || !required.is_empty()) && !is("object"),
            "fields",
        )?;
        stray(
            !list_map_keys.is_empty() && list_type.as_deref() != Some("map"),
            "listMapKeys",
        )?;
        stray(
            default
                .as_ref()
                .is_some_and(|d| !(d.is_string() || d.is_number() || d.is_boolean())),
            "default (other than a scalar)",
        )?;
        let shape = match (reference, type_name) {
            (Some(_), Some(_)) => return Err("a type has both `ref` and `type`".to_string()),
            (Some(target), None) => Shape::Ref(target),
            (None, None) => return Err("a type has neither `ref` nor `type`".to_string()),
            (None, Some(TypeName::OneOf(names))) => {
                let scalars = names
                    .iter()
                    .map(|n| Scalar::from_name(n).ok_or_else(|| format!("`{n}` is not a scalar")))
                    .collect::<Result<Vec<_>, _>>()?;
                Shape::OneOf(scalars)
            }
            (None, Some(TypeName::One(name))) => match name.as_str() {
                "any" => Shape::Any,
                "boolean" => Shape::Boolean,
                "integer" => Shape::Integer,
                "number" => Shape::Number,
                "string" => Shape::String,
                "int-or-string" => Shape::IntOrString,
                "object" => Shape::Object(Object {
                    fields: fields.unwrap_or_default(),
                    required,
                }),
                "map" => Shape::Map(values.ok_or("a map without `values`")?),
                "list" => Shape::List(List {
                    items: items.ok_or("a list without `items`")?,
                    list_type: match list_type.as_deref() {
                        None => None,
                        Some("atomic") => Some(ListType::Atomic),
                        Some("set") => Some(ListType::Set),
                        Some("map") => Some(ListType::Map(list_map_keys)),
                        Some(other) => return Err(format!("unknown listType `{other}`")),
                    },
                }),
                other => return Err(format!("unknown type `{other}`")),
            },
        };
        Ok(Type {
            shape,
            format,
            enum_values,
            nullable,
            preserve_unknown_fields,
            embedded_resource,
            map_type,
            patch_strategy,
            patch_merge_key,
            default,
        })
    }
}
