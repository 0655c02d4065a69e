//! A kind's schema as the CEL types kube-controller-manager checks a ValidatingAdmissionPolicy
//! against (k8s.io/apiserver's `SchemaDeclType` over the kind's OpenAPI schema, references
//! expanded): every object is a type of its own, named by where it sits (`Pod.spec`,
//! `Pod.spec.containers.@idx`, `Pod.spec.nodeSelector.@elem`), and a field whose schema has no
//! `type` (a quantity's `oneOf`) is not there at all, so reading it is an undefined field, as in
//! the cluster.
//!
//! kube-controller-manager names the root after the kind and the nanosecond it checked at
//! (`Pod470222652`); kanon writes the kind alone.

use std::sync::Arc;

use kanon_cel::{ObjectTypes, Type};
use kanon_schema::{Kinds, Schema, Shape};

/// The object types of the kinds one check declares: each root name (`Pod`) with its kind.
#[derive(Debug)]
pub(crate) struct DeclTypes {
    kinds: Kinds,
    /// Root type name, apiVersion, kind.
    roots: Vec<(String, String, String)>,
}

impl DeclTypes {
    pub(crate) fn new(kinds: Kinds) -> Self {
        DeclTypes {
            kinds,
            roots: Vec::new(),
        }
    }

    /// Declares the kind at `api_version` as the object type `root`, if the kind is known.
    pub(crate) fn add_root(&mut self, root: &str, api_version: &str, kind: &str) -> Option<Type> {
        self.kinds.kind(api_version, kind)?;
        self.roots
            .push((root.to_owned(), api_version.to_owned(), kind.to_owned()));
        Some(Type::Object(Arc::from(root)))
    }

    /// The type at the place `type_name` names, in its kind's schema, with the named types
    /// expanded on the way there (`None` inside: a circle's placeholder, an empty object).
    fn place<'s>(
        &'s self,
        type_name: &str,
    ) -> Option<(&'s Schema, Option<&'s kanon_schema::Type>, Vec<&'s str>)> {
        let mut steps = type_name.split('.');
        let root = steps.next()?;
        let (_, api_version, kind) = self.roots.iter().find(|(name, _, _)| name == root)?;
        let known = self.kinds.kind(api_version, kind)?;
        let schema = known.schema;
        let mut visited: Vec<&str> = Vec::new();
        let mut current = expand(schema, schema.root_type(known.kind)?, &mut visited);
        for step in steps {
            // Inside a circle's placeholder (an object without fields) there are no places.
            let ty = current?;
            let next = match (&ty.shape, step) {
                (Shape::List(list), "@idx") => &list.items,
                (Shape::Map(values), "@elem") => values,
                (Shape::Object(object), field) => object.fields.get(field)?,
                _ => return None,
            };
            current = expand(schema, next, &mut visited);
        }
        Some((schema, current, visited))
    }
}

/// `ty` with its references followed, `None` for a reference to a type already expanded above
/// it (kube-apiserver's placeholder for a circle: an object with no fields).
fn expand<'s>(
    schema: &'s Schema,
    mut ty: &'s kanon_schema::Type,
    visited: &mut Vec<&'s str>,
) -> Option<&'s kanon_schema::Type> {
    while let Shape::Ref(target) = &ty.shape {
        if visited.iter().any(|seen| *seen == target) {
            return None;
        }
        visited.push(target);
        ty = schema.named_type(target)?;
    }
    Some(ty)
}

impl ObjectTypes for DeclTypes {
    fn field(&self, type_name: &str, field: &str) -> Option<Option<Type>> {
        let (schema, place, mut visited) = self.place(type_name)?;
        let Some(ty) = place else {
            return Some(None);
        };
        let Shape::Object(object) = &ty.shape else {
            return None;
        };
        Some(object.fields.get(field).and_then(|found| {
            decl_type(schema, found, &format!("{type_name}.{field}"), &mut visited)
        }))
    }
}

/// The CEL type of the schema type `ty` at the place `name`, `None` when kube-apiserver does
/// not expose it (no `type`, or a list or map of such).
fn decl_type<'s>(
    schema: &'s Schema,
    ty: &'s kanon_schema::Type,
    name: &str,
    visited: &mut Vec<&'s str>,
) -> Option<Type> {
    let depth = visited.len();
    let result = match expand(schema, ty, visited) {
        None => Some(Type::Object(Arc::from(name))),
        Some(ty) => shape_type(schema, ty, name, visited),
    };
    visited.truncate(depth);
    result
}

fn shape_type<'s>(
    schema: &'s Schema,
    ty: &'s kanon_schema::Type,
    name: &str,
    visited: &mut Vec<&'s str>,
) -> Option<Type> {
    if ty.format.as_deref() == Some("int-or-string") {
        return Some(Type::Dyn);
    }
    match &ty.shape {
        Shape::IntOrString => Some(Type::Dyn),
        Shape::List(list) => {
            decl_type(schema, &list.items, &format!("{name}.@idx"), visited).map(Type::list)
        }
        Shape::Map(values) => decl_type(schema, values, &format!("{name}.@elem"), visited)
            .map(|value| Type::map(Type::String, value)),
        Shape::Object(_) => Some(Type::Object(Arc::from(name))),
        Shape::String => Some(match ty.format.as_deref() {
            Some("byte") => Type::Bytes,
            Some("duration") => Type::Duration,
            Some("date" | "date-time") => Type::Timestamp,
            _ => Type::String,
        }),
        Shape::Boolean => Some(Type::Bool),
        Shape::Integer => Some(Type::Int),
        Shape::Number => Some(Type::Double),
        // No single `type` (a quantity is a string or a number; free-form JSON): not exposed.
        Shape::Any | Shape::OneOf(_) | Shape::Ref(_) => None,
    }
}
