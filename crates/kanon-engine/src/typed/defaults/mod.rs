//! A built-in kind's defaulting, as kube-apiserver's scheme runs it when it decodes an object
//! and again after each MutatingAdmissionPolicy mutation: the generated walk
//! (`SetObjectDefaults_<Kind>`) that calls each type's defaulting function wherever the type
//! occurs in the object, parent before children, and sets the fields the types declare a
//! default for (`+default=`, which the OpenAPI schema carries).
//!
//! The walk follows the schema and the Go facts, so it reaches what Go reaches: a struct field
//! that is not a pointer is always there in Go, so it is defaulted even when the JSON leaves it
//! out (a Namespace without `status` gets `status.phase: Active`). Every `ResourceList`
//! quantity is rounded up to a thousandth (`SetDefaults_ResourceList`).

mod image;
mod kinds;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashSet};
use std::sync::OnceLock;

use kanon_schema::{GoShape, GoTypes, Schema, Shape, Type, go_shape};
use serde_json::{Map, Value};

use super::Typed;

/// The Go type whose fields `SetDefaults_ResourceList` rounds.
const RESOURCE_LIST: &str = "v1.ResourceList";

impl Typed<'_> {
    /// Defaults `object` in place as kube-apiserver 1.35 defaults an object of this kind; with
    /// `template`, a Pod made of a workload's template is defaulted as the template is (its
    /// metadata and spec, without what only a Pod gets: requests from limits,
    /// `enableServiceLinks`, host ports).
    pub(crate) fn default_object(&self, object: &mut Value, template: bool) {
        let walker = Walker {
            schema: self.schema,
            go: self.go,
            walked: walked(self.schema, self.go),
        };
        walker.object(self.root, object, !template);
    }

    /// Whether a change to the object's labels or annotations alone can give defaulting more
    /// to do: when it cannot, an object defaulting left unchanged stays so after such a change.
    pub(crate) fn defaulting_reads_metadata(&self) -> bool {
        kinds::reads_metadata(self.root)
    }
}

struct Walker<'s> {
    schema: &'s Schema,
    go: &'s GoTypes,
    /// The types with something to default in them or below them.
    walked: &'s HashSet<String>,
}

impl Walker<'_> {
    /// A value of the named type `name`.
    fn named(&self, name: &str, value: &mut Value) {
        self.object(name, value, true);
    }

    /// A value of the named type `name`, with the type's own defaulting function (`own`) or
    /// only what is below it.
    fn object(&self, name: &str, value: &mut Value, own: bool) {
        if !self.walked.contains(name) {
            return;
        }
        let (Some(ty), Some(object)) = (self.schema.named_type(name), value.as_object_mut()) else {
            return;
        };
        if let Some(defaulter) = kinds::defaulter(name).filter(|_| own) {
            defaulter(object);
        }
        let Shape::Object(shape) = &ty.shape else {
            return;
        };
        let go = self.go.get(name);
        let go_type = |field: &str| {
            go.and_then(|go| go.field(field))
                .map(|f| f.go_type.as_str())
        };
        for (field, field_type) in &shape.fields {
            let Some(default) = &field_type.default else {
                continue;
            };
            let pointer = go_type(field).is_some_and(|go| go.starts_with('*'));
            let set = match object.get(field) {
                None | Some(Value::Null) => pointer || !zero(default),
                Some(value) => !pointer && !zero(default) && zero(value),
            };
            if set {
                object.insert(field.clone(), default.clone());
            }
        }
        for (field, field_type) in &shape.fields {
            let go_type = go_type(field);
            if go_type == Some(RESOURCE_LIST) {
                if let Some(list) = object.get_mut(field).and_then(Value::as_object_mut) {
                    round_up(list);
                }
                continue;
            }
            match object.get_mut(field) {
                Some(child) if !child.is_null() => self.value(field_type, go_type, child),
                _ => {
                    // A struct field that is not a pointer is there in Go whatever the JSON
                    // says, and defaulted; it is written only if that gave it something.
                    let Some(component) = self.struct_field(field_type, go_type) else {
                        continue;
                    };
                    let mut child = Value::Object(Map::new());
                    self.named(component, &mut child);
                    if child.as_object().is_some_and(|child| !child.is_empty()) {
                        object.insert(field.clone(), child);
                    }
                }
            }
        }
    }

    /// A value of type `ty` (Go type `go_type`, where known).
    fn value(&self, ty: &Type, go_type: Option<&str>, value: &mut Value) {
        let Some((ty, name)) = self.schema.deref(ty) else {
            return;
        };
        if let Some(name) = name {
            return self.named(name, value);
        }
        match (&ty.shape, value) {
            (Shape::List(list), Value::Array(items)) => {
                let go_items = match go_type.map(go_shape) {
                    Some(GoShape::Slice(items)) => Some(items),
                    _ => None,
                };
                for item in items {
                    self.value(&list.items, go_items, item);
                }
            }
            (Shape::Map(values_type), Value::Object(values)) => {
                let go_values = match go_type.map(go_shape) {
                    Some(GoShape::Map(values)) => Some(values),
                    _ => None,
                };
                for value in values.values_mut() {
                    self.value(values_type, go_values, value);
                }
            }
            _ => {}
        }
    }

    /// The named type of a field that holds a struct by value (not a pointer) with something
    /// to default.
    fn struct_field<'t>(&self, ty: &'t Type, go_type: Option<&str>) -> Option<&'t str> {
        let go_type = go_type?;
        if go_type.starts_with('*') || !matches!(go_shape(go_type), GoShape::Named(_)) {
            return None;
        }
        let Shape::Ref(name) = &ty.shape else {
            return None;
        };
        let structure = self.go.get(name)?;
        (!structure.custom && self.walked.contains(name.as_str())).then_some(name.as_str())
    }
}

/// Whether Go holds `value` as its zero value.
fn zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(number) => number.as_f64() == Some(0.0),
        Value::String(text) => text.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
    }
}

/// `SetDefaults_ResourceList`: each quantity rounded up (away from zero) to a thousandth, and
/// written as the apiserver writes back what it decoded, canonical (`0.5Gi` is `512Mi`).
fn round_up(list: &mut Map<String, Value>) {
    const MILLI_NANOS: i128 = 1_000_000;
    for value in list.values_mut() {
        if let Some(quantity) = super::quantity_of(value) {
            let written = Value::String(
                quantity
                    .rounded_away_from_zero(MILLI_NANOS)
                    .canonical_text(),
            );
            if *value != written {
                *value = written;
            }
        }
    }
}

/// The types the walk enters: those with a defaulting function, a field default or a
/// `ResourceList`, and those whose fields reach one. Computed once, for the embedded schema
/// (the only one [`Typed`] is built on).
fn walked(schema: &Schema, go: &GoTypes) -> &'static HashSet<String> {
    static WALKED: OnceLock<HashSet<String>> = OnceLock::new();
    WALKED.get_or_init(|| {
        let fields = |name: &str| match schema.named_type(name).map(|ty| &ty.shape) {
            Some(Shape::Object(object)) => Some(object),
            _ => None,
        };
        let mut walked: HashSet<String> = HashSet::new();
        let mut references: Vec<(&str, BTreeSet<&str>)> = Vec::new();
        for name in schema.types().keys() {
            let Some(object) = fields(name) else {
                continue;
            };
            let structure = go.get(name);
            let direct = kinds::defaulter(name).is_some()
                || object.fields.iter().any(|(field, ty)| {
                    let go_type = structure.and_then(|s| s.field(field)).map(|f| &f.go_type);
                    go_type.is_some_and(|go| go == RESOURCE_LIST)
                        || ty.default.as_ref().is_some_and(|default| {
                            !zero(default) || go_type.is_some_and(|go| go.starts_with('*'))
                        })
                });
            if direct {
                walked.insert(name.clone());
            }
            let mut named = BTreeSet::new();
            for ty in object.fields.values() {
                referenced(ty, &mut named);
            }
            references.push((name, named));
        }
        loop {
            let before = walked.len();
            for (name, named) in &references {
                if !walked.contains(*name) && named.iter().any(|n| walked.contains(*n)) {
                    walked.insert((*name).to_owned());
                }
            }
            if walked.len() == before {
                return walked;
            }
        }
    })
}

/// The named types `ty` holds, through lists and maps.
fn referenced<'t>(ty: &'t Type, named: &mut BTreeSet<&'t str>) {
    match &ty.shape {
        Shape::Ref(name) => {
            named.insert(name);
        }
        Shape::List(list) => referenced(&list.items, named),
        Shape::Map(values) => referenced(values, named),
        _ => {}
    }
}
