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

use std::collections::{BTreeSet, HashMap, HashSet};
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
        let Some(plans) = plans() else {
            return;
        };
        let walker = Walker {
            schema: plans.schema,
            plans: &plans.by_type,
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
    /// What to do in a value of each type with something to default in it or below it.
    plans: &'s HashMap<String, Plan>,
}

/// What the walk does in a value of one named type, worked out once from the schema and the
/// Go facts (a walk then looks up one type per value, not each of its fields).
struct Plan {
    defaulter: Option<fn(&mut Map<String, Value>)>,
    /// The fields with a `+default`: each with its value and whether its Go type is a pointer.
    defaults: Vec<(&'static str, &'static Value, bool)>,
    /// The fields to walk into, in the schema's order: those whose type reaches something to
    /// default, and the `ResourceList`s.
    visits: Vec<Visit>,
}

struct Visit {
    field: &'static str,
    ty: &'static Type,
    /// A `ResourceList`, whose quantities are rounded.
    resource_list: bool,
    /// The named type of a struct held by value (not a pointer) with something to default:
    /// Go has it, and defaults it, even when the JSON leaves it out.
    component: Option<&'static str>,
}

impl Walker<'_> {
    /// A value of the named type `name`.
    fn named(&self, name: &str, value: &mut Value) {
        self.object(name, value, true);
    }

    /// A value of the named type `name`, with the type's own defaulting function (`own`) or
    /// only what is below it.
    fn object(&self, name: &str, value: &mut Value, own: bool) {
        let (Some(plan), Some(object)) = (self.plans.get(name), value.as_object_mut()) else {
            return;
        };
        if let Some(defaulter) = plan.defaulter.filter(|_| own) {
            defaulter(object);
        }
        for &(field, default, pointer) in &plan.defaults {
            let set = match object.get(field) {
                None | Some(Value::Null) => pointer || !zero(default),
                Some(value) => !pointer && !zero(default) && zero(value),
            };
            if set {
                object.insert(field.to_owned(), default.clone());
            }
        }
        for visit in &plan.visits {
            if visit.resource_list {
                if let Some(list) = object.get_mut(visit.field).and_then(Value::as_object_mut) {
                    round_up(list);
                }
                continue;
            }
            match object.get_mut(visit.field) {
                Some(child) if !child.is_null() => self.value(visit.ty, child),
                _ => {
                    // A struct field that is not a pointer is there in Go whatever the JSON
                    // says, and defaulted; it is written only if that gave it something.
                    let Some(component) = visit.component else {
                        continue;
                    };
                    let mut child = Value::Object(Map::new());
                    self.named(component, &mut child);
                    if child.as_object().is_some_and(|child| !child.is_empty()) {
                        object.insert(visit.field.to_owned(), child);
                    }
                }
            }
        }
    }

    /// A value of type `ty`.
    fn value(&self, ty: &Type, value: &mut Value) {
        let Some((ty, name)) = self.schema.deref(ty) else {
            return;
        };
        if let Some(name) = name {
            return self.named(name, value);
        }
        match (&ty.shape, value) {
            (Shape::List(list), Value::Array(items)) => {
                for item in items {
                    self.value(&list.items, item);
                }
            }
            (Shape::Map(values_type), Value::Object(values)) => {
                for value in values.values_mut() {
                    self.value(values_type, value);
                }
            }
            _ => {}
        }
    }
}

/// The walk's plans for the embedded schema (the only one [`Typed`] is built on), made once.
struct Plans {
    schema: &'static Schema,
    by_type: HashMap<String, Plan>,
}

fn plans() -> Option<&'static Plans> {
    static PLANS: OnceLock<Option<Plans>> = OnceLock::new();
    PLANS
        .get_or_init(|| {
            let schema = Schema::builtin().ok()?;
            let go = GoTypes::builtin()?;
            let walked = walked(schema, go);
            let by_type = walked
                .iter()
                .filter_map(|name| Some((name.clone(), plan(schema, go, &walked, name)?)))
                .collect();
            Some(Plans { schema, by_type })
        })
        .as_ref()
}

/// The plan of the walked type `name`.
fn plan(
    schema: &'static Schema,
    go: &'static GoTypes,
    walked: &HashSet<String>,
    name: &str,
) -> Option<Plan> {
    let ty = schema.named_type(name)?;
    let defaulter = kinds::defaulter(name);
    let Shape::Object(shape) = &ty.shape else {
        return Some(Plan {
            defaulter,
            defaults: Vec::new(),
            visits: Vec::new(),
        });
    };
    let structure = go.get(name);
    let go_type = |field: &str| {
        structure
            .and_then(|go| go.field(field))
            .map(|f| f.go_type.as_str())
    };
    let defaults = shape
        .fields
        .iter()
        .filter_map(|(field, field_type)| {
            let default = field_type.default.as_ref()?;
            let pointer = go_type(field).is_some_and(|go| go.starts_with('*'));
            Some((field.as_str(), default, pointer))
        })
        .collect();
    let visits = shape
        .fields
        .iter()
        .filter_map(|(field, field_type)| {
            let go_type = go_type(field);
            let resource_list = go_type == Some(RESOURCE_LIST);
            let component = struct_field(go, walked, field_type, go_type);
            (resource_list || component.is_some() || reaches(schema, walked, field_type)).then_some(
                Visit {
                    field: field.as_str(),
                    ty: field_type,
                    resource_list,
                    component,
                },
            )
        })
        .collect();
    Some(Plan {
        defaulter,
        defaults,
        visits,
    })
}

/// Whether a value of type `ty` may hold a walked type: the walk has something to do in it.
fn reaches(schema: &Schema, walked: &HashSet<String>, ty: &Type) -> bool {
    let Some((ty, name)) = schema.deref(ty) else {
        return false;
    };
    if let Some(name) = name {
        return walked.contains(name);
    }
    match &ty.shape {
        Shape::List(list) => reaches(schema, walked, &list.items),
        Shape::Map(values) => reaches(schema, walked, values),
        _ => false,
    }
}

/// The named type of a field that holds a struct by value (not a pointer) with something
/// to default.
fn struct_field(
    go: &GoTypes,
    walked: &HashSet<String>,
    ty: &'static Type,
    go_type: Option<&str>,
) -> Option<&'static str> {
    let go_type = go_type?;
    if go_type.starts_with('*') || !matches!(go_shape(go_type), GoShape::Named(_)) {
        return None;
    }
    let Shape::Ref(name) = &ty.shape else {
        return None;
    };
    let structure = go.get(name)?;
    (!structure.custom && walked.contains(name.as_str())).then_some(name.as_str())
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
/// `ResourceList`, and those whose fields reach one (computed once, by [`plans`]).
fn walked(schema: &Schema, go: &GoTypes) -> HashSet<String> {
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
