//! Resource selectors, label selectors and field selectors, compiled once per policy.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kanon_api::{FieldSelector, ResourceSelector, SelectorOperator};
use serde_json::{Map, Value};

use crate::document::scalar_text;
use crate::error::FieldError;
use crate::pointer;

mod query;

pub use query::is_label_value;

/// The identity of an object as selectors see it.
#[derive(Clone, Copy, Debug)]
pub struct ObjectView<'a> {
    /// The object's `apiVersion`.
    pub api_version: &'a str,
    /// The object's `kind`.
    pub kind: &'a str,
    /// The object's namespace; `None` for cluster-scoped objects.
    pub namespace: Option<&'a str>,
    /// The object's name (empty when the client used `generateName`).
    pub name: &'a str,
    /// The whole object.
    pub object: &'a Value,
}

impl<'a> ObjectView<'a> {
    /// The view of a whole object, its identity read from it; `None` without `apiVersion`,
    /// `kind` or `metadata.name`.
    pub(crate) fn of_object(object: &'a Value) -> Option<ObjectView<'a>> {
        let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
        Some(ObjectView {
            api_version: text("/apiVersion")?,
            kind: text("/kind")?,
            namespace: text("/metadata/namespace"),
            name: text("/metadata/name")?,
            object,
        })
    }
}

/// The labels of an object (`metadata.labels`), if any.
pub fn labels_of(object: &Value) -> Option<&Map<String, Value>> {
    // Two object lookups: on every policy's label selector.
    object
        .get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
}

#[derive(Clone, Debug, PartialEq)]
enum SetOp {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl SetOp {
    /// Shared semantics of label and field requirements: `NotIn` and `DoesNotExist` hold for an
    /// absent value, `In` and `Exists` need one.
    fn holds(&self, value: Option<&str>, values: &[String]) -> bool {
        match (self, value) {
            (SetOp::In, Some(v)) => values.iter().any(|x| x == v),
            (SetOp::In, None) => false,
            (SetOp::NotIn, Some(v)) => !values.iter().any(|x| x == v),
            (SetOp::NotIn, None) => true,
            (SetOp::Exists, found) => found.is_some(),
            (SetOp::DoesNotExist, found) => found.is_none(),
        }
    }

    fn check_values(&self, values: &[String], field: &str, errors: &mut Vec<FieldError>) {
        match self {
            SetOp::In | SetOp::NotIn if values.is_empty() => errors.push(FieldError::new(
                field,
                "values must be non-empty for the In and NotIn operators",
            )),
            SetOp::Exists | SetOp::DoesNotExist if !values.is_empty() => {
                errors.push(FieldError::new(
                    field,
                    "values must be empty for the Exists and DoesNotExist operators",
                ))
            }
            _ => {}
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
struct LabelRequirement {
    key: String,
    op: SetOp,
    values: Vec<String>,
}

/// A compiled Kubernetes label selector: `matchLabels` and `matchExpressions`, AND-ed.
/// The empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelMatcher {
    requirements: Vec<LabelRequirement>,
}

impl LabelMatcher {
    /// Compiles `selector`; problems are pushed to `errors` under `field`.
    pub fn compile(selector: &LabelSelector, field: &str, errors: &mut Vec<FieldError>) -> Self {
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            requirements.push(LabelRequirement {
                key: key.clone(),
                op: SetOp::In,
                values: vec![value.clone()],
            });
        }
        for (i, expr) in selector.match_expressions.iter().flatten().enumerate() {
            let at = format!("{field}.matchExpressions[{i}]");
            let op = match expr.operator.as_str() {
                "In" => SetOp::In,
                "NotIn" => SetOp::NotIn,
                "Exists" => SetOp::Exists,
                "DoesNotExist" => SetOp::DoesNotExist,
                other => {
                    errors.push(FieldError::new(
                        format!("{at}.operator"),
                        format!(
                            "unknown operator `{other}`; use In, NotIn, Exists or DoesNotExist"
                        ),
                    ));
                    continue;
                }
            };
            if expr.key.is_empty() {
                errors.push(FieldError::new(
                    format!("{at}.key"),
                    "key must not be empty",
                ));
            }
            let values = expr.values.clone().unwrap_or_default();
            op.check_values(&values, &format!("{at}.values"), errors);
            requirements.push(LabelRequirement {
                key: expr.key.clone(),
                op,
                values,
            });
        }
        LabelMatcher { requirements }
    }

    /// A label the selector requires to have one value (`matchLabels`, or `In` with one
    /// value): its key and value.
    fn required_label(&self) -> Option<(&str, &str)> {
        self.requirements
            .iter()
            .find_map(|r| match (&r.op, r.values.as_slice()) {
                (SetOp::In, [value]) => Some((r.key.as_str(), value.as_str())),
                _ => None,
            })
    }

    /// Whether the selector has no requirements, and so matches every set of labels.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.requirements.iter().all(|r| {
            let value = labels.and_then(|l| l.get(&r.key)).and_then(Value::as_str);
            r.op.holds(value, &r.values)
        })
    }
}

#[derive(Clone, Debug, PartialEq)]
struct FieldRequirement {
    pointer: String,
    op: SetOp,
    values: Vec<String>,
}

/// A compiled field selector: requirements on JSON-pointer-addressed fields, AND-ed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldMatcher {
    requirements: Vec<FieldRequirement>,
}

impl FieldMatcher {
    /// Compiles `selector`; problems are pushed to `errors` under `field`.
    pub fn compile(selector: &FieldSelector, field: &str, errors: &mut Vec<FieldError>) -> Self {
        let mut requirements = Vec::new();
        for (pointer_text, value) in &selector.match_fields {
            if let Err(e) = pointer::check(pointer_text) {
                errors.push(FieldError::new(
                    format!("{field}.matchFields[{pointer_text}]"),
                    e,
                ));
            }
            requirements.push(FieldRequirement {
                pointer: pointer_text.clone(),
                op: SetOp::In,
                values: vec![value.clone()],
            });
        }
        for (i, expr) in selector.match_expressions.iter().enumerate() {
            let at = format!("{field}.matchExpressions[{i}]");
            if let Err(e) = pointer::check(&expr.field) {
                errors.push(FieldError::new(format!("{at}.field"), e));
            }
            let values = match (expr.values.is_empty(), expr.value.is_empty()) {
                (_, true) => expr.values.clone(),
                (true, false) => expr.value.clone(),
                (false, false) => {
                    errors.push(FieldError::new(
                        format!("{at}.value"),
                        "set `values` or its kinitiras alias `value`, not both",
                    ));
                    expr.values.clone()
                }
            };
            let op = match expr.operator {
                SelectorOperator::In => SetOp::In,
                SelectorOperator::NotIn => SetOp::NotIn,
                SelectorOperator::Exists => SetOp::Exists,
                SelectorOperator::DoesNotExist => SetOp::DoesNotExist,
            };
            op.check_values(&values, &format!("{at}.values"), errors);
            requirements.push(FieldRequirement {
                pointer: expr.field.clone(),
                op,
                values,
            });
        }
        FieldMatcher { requirements }
    }

    /// Whether `object` satisfies every requirement. A field holding an object or an array
    /// exists but equals no value.
    pub fn matches(&self, object: &Value) -> bool {
        self.requirements.iter().all(|r| {
            let found = pointer::get(object, &r.pointer);
            match r.op {
                SetOp::Exists | SetOp::DoesNotExist => r.op.holds(found.map(|_| ""), &r.values),
                _ => {
                    let text = found.map(|v| scalar_text(v).unwrap_or_default());
                    // A non-scalar never equals a value, but still "is" for NotIn.
                    let is_scalar = found.is_none_or(|v| scalar_text(v).is_some());
                    if !is_scalar {
                        return r.op == SetOp::NotIn;
                    }
                    r.op.holds(text.as_deref(), &r.values)
                }
            }
        })
    }
}

/// A compiled resource selector.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceMatcher {
    /// The `apiVersion` selected.
    pub api_version: String,
    /// The `kind` selected.
    pub kind: String,
    namespace: Option<String>,
    name: Option<String>,
    labels: Option<LabelMatcher>,
    fields: Option<FieldMatcher>,
}

impl ResourceMatcher {
    /// Whether it selects by fields of the object (`fieldSelector`), which may lie anywhere in
    /// it.
    pub(crate) fn selects_fields(&self) -> bool {
        self.fields.is_some()
    }

    /// Compiles `selector`; problems are pushed to `errors` under `field`.
    pub fn compile(selector: &ResourceSelector, field: &str, errors: &mut Vec<FieldError>) -> Self {
        if selector.api_version.is_empty() {
            errors.push(FieldError::new(
                format!("{field}.apiVersion"),
                "must not be empty",
            ));
        }
        if selector.kind.is_empty() {
            errors.push(FieldError::new(
                format!("{field}.kind"),
                "must not be empty",
            ));
        }
        let name = selector.name.clone().filter(|n| !n.is_empty());
        let labels = selector
            .label_selector
            .as_ref()
            .map(|s| LabelMatcher::compile(s, &format!("{field}.labelSelector"), errors));
        let fields = selector
            .field_selector
            .as_ref()
            .map(|s| FieldMatcher::compile(s, &format!("{field}.fieldSelector"), errors));
        ResourceMatcher {
            api_version: selector.api_version.clone(),
            kind: selector.kind.clone(),
            namespace: selector.namespace.clone().filter(|n| !n.is_empty()),
            name,
            labels,
            fields,
        }
    }

    /// A matcher that selects every object of one type, used in place of a selector that did
    /// not compile so that a broken policy still meets the requests it was written for.
    pub fn kind_only(api_version: &str, kind: &str) -> Self {
        ResourceMatcher {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: None,
            name: None,
            labels: None,
            fields: None,
        }
    }

    /// Whether the object matches: type, then namespace, then name alone if set, else labels
    /// AND fields (either absent counts as matching).
    pub fn matches(&self, object: &ObjectView<'_>) -> bool {
        if self.api_version != object.api_version || self.kind != object.kind {
            return false;
        }
        if let Some(ns) = &self.namespace
            && object.namespace != Some(ns.as_str())
        {
            return false;
        }
        if let Some(name) = &self.name {
            return name == object.name;
        }
        self.labels
            .as_ref()
            .is_none_or(|l| l.matches(labels_of(object.object)))
            && self
                .fields
                .as_ref()
                .is_none_or(|f| f.matches(object.object))
    }

    /// The namespace this selector is restricted to, if any.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The most telling equality an object must meet to be selected (beyond its type): its
    /// name, else its namespace, else one label's value; what an index files the selector
    /// under.
    pub(crate) fn required(&self) -> Required<'_> {
        if let Some(name) = &self.name {
            return Required::Name(name);
        }
        if let Some(namespace) = &self.namespace {
            return Required::Namespace(namespace);
        }
        match self.labels.as_ref().and_then(LabelMatcher::required_label) {
            Some((key, value)) => Required::Label(key, value),
            None => Required::Nothing,
        }
    }
}

/// What an object must carry for a selector to select it ([`ResourceMatcher::required`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Required<'a> {
    /// This name (`metadata.name`).
    Name(&'a str),
    /// This namespace.
    Namespace(&'a str),
    /// This label, with this value.
    Label(&'a str, &'a str),
    /// Nothing an index can look up.
    Nothing,
}
