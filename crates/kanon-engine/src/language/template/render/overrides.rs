//! Override templates rendered into programs, with their native forms.

use std::fmt::Write as _;

use kanon_api::{FieldWithin, OverrideTemplate, OverrideTemplateType, TemplateOperation};
use serde_json::Value;

use super::{constant_json, decimal_of, literal};
use crate::document::scalar_text;
use crate::error::FieldError;
use crate::language::template::native::{
    ContainerEdit, FieldValue, MapAt, MapEdit, NativeOverride, NativeRule, SpecField,
};
use crate::podspec::Edit;

/// Renders an override template to a program and builds its native form from the same
/// values (see [`super::native`]). Problems go to `errors` under `field`.
pub fn compile_override(
    t: &OverrideTemplate,
    field: &str,
    errors: &mut Vec<FieldError>,
) -> Option<(String, NativeRule)> {
    let before = errors.len();
    let op = t.operation;
    let (op_name, edit) = match op {
        TemplateOperation::Add => ("add", Edit::Add),
        TemplateOperation::Replace => ("replace", Edit::Replace),
        TemplateOperation::Remove => ("remove", Edit::Remove),
        TemplateOperation::Default => ("default", Edit::Default),
    };
    let kind = match t.type_ {
        OverrideTemplateType::Annotations => "annotations",
        OverrideTemplateType::Labels => "labels",
        OverrideTemplateType::NodeSelector => "nodeSelector",
        OverrideTemplateType::Resources => "resources",
        OverrideTemplateType::ResourcesOversell => "resourcesOversell",
        OverrideTemplateType::Tolerations => "tolerations",
        OverrideTemplateType::Affinity => "affinity",
        OverrideTemplateType::Field => "field",
    };
    let keyed = matches!(
        t.type_,
        OverrideTemplateType::Annotations
            | OverrideTemplateType::Labels
            | OverrideTemplateType::NodeSelector
            | OverrideTemplateType::Field
    );
    // Fields that belong to other template types are mistakes worth naming.
    let stray = [
        ("path", t.path.is_some(), keyed),
        ("value", t.value.is_some(), keyed),
        ("valueRef", t.value_ref.is_some(), keyed),
        (
            "resources",
            t.resources.is_some(),
            t.type_ == OverrideTemplateType::Resources,
        ),
        (
            "resourcesOversell",
            t.resources_oversell.is_some(),
            t.type_ == OverrideTemplateType::ResourcesOversell,
        ),
        (
            "tolerations",
            !t.tolerations.is_empty(),
            t.type_ == OverrideTemplateType::Tolerations,
        ),
        (
            "affinity",
            t.affinity.is_some(),
            t.type_ == OverrideTemplateType::Affinity,
        ),
        (
            "within",
            t.within.is_some(),
            t.type_ == OverrideTemplateType::Field,
        ),
        (
            "containerNames",
            !t.container_names.is_empty(),
            matches!(
                t.type_,
                OverrideTemplateType::Resources
                    | OverrideTemplateType::ResourcesOversell
                    | OverrideTemplateType::Field
            ),
        ),
    ];
    for (name, set, allowed) in stray {
        if set && !allowed {
            errors.push(FieldError::new(
                format!("{field}.{name}"),
                format!("is not used by type {kind}"),
            ));
        }
    }
    let mut out = format!("{{#- {field}: {kind}, {op_name} -#}}\n");
    // Operations collect in `acc.ops` (a namespace, so loops can add to it) and print as JSON.
    out.push_str("{%- set acc = namespace(ops=[]) -%}\n");
    let native = match t.type_ {
        OverrideTemplateType::Annotations
        | OverrideTemplateType::Labels
        | OverrideTemplateType::NodeSelector => {
            let at = match t.type_ {
                OverrideTemplateType::Labels => MapAt::Labels,
                OverrideTemplateType::NodeSelector => MapAt::NodeSelector,
                _ => MapAt::Annotations,
            };
            string_map_program(t, kind, field, errors, &mut out)
                .map(|map_edit| NativeOverride::map(at, map_edit))
        }
        OverrideTemplateType::Resources => {
            let Some(resources) = &t.resources else {
                errors.push(FieldError::new(
                    format!("{field}.resources"),
                    "is required for type resources",
                ));
                return None;
            };
            let json = serde_json::to_value(resources).unwrap_or(Value::Null);
            for (section, map) in json.as_object().into_iter().flatten() {
                for (name, quantity) in map.as_object().into_iter().flatten() {
                    if let Some(text) = quantity.as_str()
                        && let Err(e) = text.parse::<crate::quantity::Quantity>()
                        && op != TemplateOperation::Remove
                    {
                        errors.push(FieldError::new(
                            format!("{field}.resources.{section}.{name}"),
                            e.to_string(),
                        ));
                    }
                }
            }
            resources_program(
                &mut out,
                t,
                &format!(
                    "resources_with(c.resources | default({{}}), {}, {})",
                    literal(&json),
                    literal(&Value::from(op_name))
                ),
            );
            Some(NativeOverride::containers(
                t.container_names.clone(),
                ContainerEdit::Resources(json),
                edit,
            ))
        }
        OverrideTemplateType::ResourcesOversell => {
            let Some(oversell) = &t.resources_oversell else {
                errors.push(FieldError::new(
                    format!("{field}.resourcesOversell"),
                    "is required for type resourcesOversell",
                ));
                return None;
            };
            let mut factors = serde_json::Map::new();
            let mut read = Vec::new();
            for (name, resource, factor) in [
                ("cpuFactor", "cpu", &oversell.cpu_factor),
                ("memoryFactor", "memory", &oversell.memory_factor),
                ("diskFactor", "ephemeral-storage", &oversell.disk_factor),
            ] {
                let Some(factor) = factor else { continue };
                let text = factor.text();
                match decimal_of(&text) {
                    Some(d) if d.is_proper_fraction() => {
                        factors
                            .insert(resource.to_string(), Value::String(text.trim().to_string()));
                        read.push((resource.to_string(), d));
                    }
                    _ => errors.push(FieldError::new(
                        format!("{field}.resourcesOversell.{name}"),
                        format!("`{text}` must be a number strictly between 0 and 1"),
                    )),
                }
            }
            if factors.is_empty() && errors.len() == before {
                errors.push(FieldError::new(
                    format!("{field}.resourcesOversell"),
                    "set at least one of cpuFactor, memoryFactor, diskFactor",
                ));
            }
            let factors = Value::Object(factors);
            resources_program(
                &mut out,
                t,
                &format!(
                    "oversold(c.resources | default({{}}), {}, {})",
                    literal(&factors),
                    literal(&Value::from(op_name))
                ),
            );
            Some(NativeOverride::containers(
                t.container_names.clone(),
                ContainerEdit::Oversell(factors, read),
                edit,
            ))
        }
        OverrideTemplateType::Tolerations => {
            if t.tolerations.is_empty() {
                errors.push(FieldError::new(
                    format!("{field}.tolerations"),
                    "is required for type tolerations",
                ));
            }
            let list = serde_json::to_value(&t.tolerations).unwrap_or(Value::Null);
            pod_spec_program(
                &mut out,
                &format!(
                    "tolerations_with(spec.tolerations | default([]), {}, {})",
                    literal(&list),
                    literal(&Value::from(op_name))
                ),
                "tolerations",
            );
            Some(NativeOverride::spec_field(
                SpecField::Tolerations,
                list,
                edit,
            ))
        }
        OverrideTemplateType::Affinity => {
            let Some(affinity) = &t.affinity else {
                errors.push(FieldError::new(
                    format!("{field}.affinity"),
                    "is required for type affinity",
                ));
                return None;
            };
            let json = serde_json::to_value(affinity).unwrap_or(Value::Null);
            pod_spec_program(
                &mut out,
                &format!(
                    "affinity_with(spec.affinity | default({{}}), {}, {})",
                    literal(&json),
                    literal(&Value::from(op_name))
                ),
                "affinity",
            );
            Some(NativeOverride::spec_field(SpecField::Affinity, json, edit))
        }
        OverrideTemplateType::Field => field_program(t, field, edit, errors, &mut out),
    };
    out.push_str("{{ acc.ops | tojson }}\n");
    let native = native.filter(|_| errors.len() == before)?;
    Some((out, NativeRule::Override(native)))
}

/// Annotations, labels and nodeSelector: one `add` of the whole map, so missing parents are
/// created, any key works, and removing an absent key changes nothing. Returns the same edit
/// for the native form.
fn string_map_program(
    t: &OverrideTemplate,
    kind: &str,
    field: &str,
    errors: &mut Vec<FieldError>,
    out: &mut String,
) -> Option<MapEdit> {
    // `map_path` is where the map lives; the guard skips kinds without a pod spec.
    let guard = match kind {
        "nodeSelector" => {
            "{%- set spec_path = pod_spec_pointer(object) -%}\n{%- set map_path = spec_path ~ \"/nodeSelector\" if spec_path is defined -%}\n{%- if map_path is defined -%}\n"
        }
        "labels" => "{%- set map_path = \"/metadata/labels\" -%}\n{%- if map_path is defined -%}\n",
        _ => "{%- set map_path = \"/metadata/annotations\" -%}\n{%- if map_path is defined -%}\n",
    };
    // At a constant place the map is read there alone (`PolicySet::object_read`).
    let map_expr = match kind {
        "labels" => "pointer(object, \"/metadata/labels\")",
        "annotations" => "pointer(object, \"/metadata/annotations\")",
        _ => "pointer(object, map_path)",
    };
    let path_expr = "map_path";
    out.push_str(guard);
    let _ = writeln!(out, "{{%- set current = {map_expr} | default({{}}) -%}}");
    let key = t.path.clone().filter(|p| !p.is_empty());
    let constant = t
        .value
        .as_ref()
        .and_then(|v| constant_json(v, &format!("{field}.value"), errors));
    if t.operation == TemplateOperation::Remove {
        let keys: Vec<String> = match (&constant, &key) {
            (Some(Value::Object(map)), _) => map.keys().cloned().collect(),
            (_, Some(k)) => vec![k.clone()],
            _ => {
                errors.push(FieldError::new(
                    format!("{field}.path"),
                    "names the key to remove (or give the keys as value.stringMap)",
                ));
                return None;
            }
        };
        let names = keys.clone();
        let keys = Value::from(keys);
        let _ = writeln!(out, "{{%- set keys = {} -%}}", literal(&keys));
        out.push_str("{%- if current | select(\"in\", keys) | list | length > 0 %}\n");
        let _ = writeln!(
            out,
            "{{%- set acc.ops = acc.ops + [{{\"op\": \"add\", \"path\": {path_expr}, \"value\": without_keys(current, keys)}}] -%}}"
        );
        out.push_str("{%- endif %}\n{%- endif %}\n");
        return Some(MapEdit::Remove { names, keys });
    }
    let updates = match (&constant, &t.value_ref, &key) {
        (Some(_), Some(_), _) => {
            errors.push(FieldError::new(field, "set value or valueRef, not both"));
            return None;
        }
        (Some(Value::Object(map)), None, _) => Value::Object(map.clone()).to_string(),
        (Some(v), None, Some(k)) => match scalar_text(v) {
            Some(text) => serde_json::json!({ k: text }).to_string(),
            None => {
                errors.push(FieldError::new(
                    format!("{field}.value"),
                    format!("{kind} take a string value (or several keys as stringMap)"),
                ));
                return None;
            }
        },
        (None, Some(_), Some(k)) => {
            // A missing reference changes nothing; a structured one cannot be a label.
            let default = t.operation == TemplateOperation::Default;
            out.push_str("{%- if refs.value is defined and refs.value is not none -%}\n");
            let _ = writeln!(
                out,
                "{{%- if refs.value is mapping or (refs.value is iterable and refs.value is not string) -%}}{{{{ fail(\"valueRef: {kind} take text, not \" ~ (refs.value | tojson)) }}}}{{%- endif -%}}"
            );
            let _ = writeln!(
                out,
                "{{%- set updates = {{{}: refs.value if refs.value is string else refs.value | tojson}} -%}}",
                Value::String(k.clone())
            );
            if default {
                out.push_str("{%- if with_defaults(current, updates) != current %}\n");
                let _ = writeln!(
                    out,
                    "{{%- set acc.ops = acc.ops + [{{\"op\": \"add\", \"path\": {path_expr}, \"value\": with_defaults(current, updates)}}] -%}}"
                );
                out.push_str("{%- endif %}\n");
            } else {
                let _ = writeln!(
                    out,
                    "{{%- set acc.ops = acc.ops + [{{\"op\": \"add\", \"path\": {path_expr}, \"value\": with_keys(current, updates)}}] -%}}"
                );
            }
            out.push_str("{%- endif %}\n{%- endif %}\n");
            return Some(if default {
                MapEdit::DefaultFromRef(k.clone())
            } else {
                MapEdit::SetFromRef(k.clone())
            });
        }
        (None, None, _) => {
            errors.push(FieldError::new(field, "set value or valueRef"));
            return None;
        }
        (_, _, None) => {
            errors.push(FieldError::new(
                format!("{field}.path"),
                format!("names the {kind} key to set (or give several keys as value.stringMap)"),
            ));
            return None;
        }
    };
    let updates: Value = serde_json::from_str(&updates).unwrap_or(Value::Null);
    // `default` sets only the keys the map lacks; `add` and `replace` set them all.
    let default = t.operation == TemplateOperation::Default;
    let merge = if default {
        "with_defaults"
    } else {
        "with_keys"
    };
    let _ = writeln!(out, "{{%- set updates = {} -%}}", literal(&updates));
    let _ = writeln!(out, "{{%- if {merge}(current, updates) != current %}}");
    let _ = writeln!(
        out,
        "{{%- set acc.ops = acc.ops + [{{\"op\": \"add\", \"path\": {path_expr}, \"value\": {merge}(current, updates)}}] -%}}"
    );
    out.push_str("{%- endif %}\n{%- endif %}\n");
    Some(if default {
        MapEdit::Default(updates)
    } else {
        MapEdit::Set(updates)
    })
}

/// Opens the pod spec: `spec_path` and `spec` are bound inside, and kinds without a pod spec
/// skip what follows (closed by [`close_pod_spec`]).
fn open_pod_spec(out: &mut String) {
    out.push_str(
        "{%- set spec_path = pod_spec_pointer(object) -%}\n{%- if spec_path is defined -%}\n",
    );
    out.push_str("{%- set spec = pointer(object, spec_path) -%}\n");
}

/// Closes [`open_pod_spec`].
fn close_pod_spec(out: &mut String) {
    out.push_str("{%- endif %}\n");
}

/// Loops over the pod spec's containers, then its init containers, both narrowed by
/// `containerNames`, with `c` bound to the container, `list` to its list's name and `i` to its
/// index; writes `body` for each. A list that is absent or null has no containers. (Ephemeral
/// containers are not touched: they take no resources and are added through their own
/// subresource.)
fn containers_program(out: &mut String, names: &[String], body: &str) {
    open_pod_spec(out);
    let names = Value::from(names.to_vec());
    let _ = writeln!(out, "{{%- set names = {} -%}}", literal(&names));
    out.push_str("{%- for list in [\"containers\", \"initContainers\"] -%}\n");
    out.push_str("{%- set items = spec[list] if spec[list] is defined and spec[list] is not none else [] -%}\n");
    out.push_str("{%- for i in range(items | length) -%}\n{%- set c = items[i] -%}\n");
    out.push_str("{%- if names | length == 0 or c.name in names -%}\n");
    out.push_str(body);
    out.push_str("{%- endif -%}\n{%- endfor -%}\n{%- endfor -%}\n");
    close_pod_spec(out);
}

/// Sets each selected container's `resources` to `expr` (evaluated with `c` bound to the
/// container).
fn resources_program(out: &mut String, t: &OverrideTemplate, expr: &str) {
    let mut body = String::new();
    let _ = writeln!(body, "{{%- set updated = {expr} -%}}");
    body.push_str("{%- if updated != (c.resources | default({})) %}\n");
    body.push_str("{%- set acc.ops = acc.ops + [{\"op\": \"add\", \"path\": spec_path ~ \"/\" ~ list ~ \"/\" ~ i ~ \"/resources\", \"value\": updated}] -%}\n");
    body.push_str("{%- endif -%}\n");
    containers_program(out, &t.container_names, &body);
}

/// `field`: one `field_op` call for the object, its pod spec, or each selected container.
/// Returns the native form.
fn field_program(
    t: &OverrideTemplate,
    field: &str,
    edit: Edit,
    errors: &mut Vec<FieldError>,
    out: &mut String,
) -> Option<NativeOverride> {
    let before = errors.len();
    let within = t.within.unwrap_or_default();
    let path = match t.path.as_deref() {
        None | Some("") => {
            errors.push(FieldError::new(
                format!("{field}.path"),
                "is required for type field: a JSON pointer such as /securityContext/runAsNonRoot",
            ));
            None
        }
        Some(path) => match crate::pointer::check(path) {
            Ok(()) => Some(path),
            Err(e) => {
                errors.push(FieldError::new(format!("{field}.path"), e));
                None
            }
        },
    };
    if within != FieldWithin::Containers && !t.container_names.is_empty() {
        errors.push(FieldError::new(
            format!("{field}.containerNames"),
            "is used by type field only with within: containers",
        ));
    }
    let constant = t
        .value
        .as_ref()
        .and_then(|v| constant_json(v, &format!("{field}.value"), errors));
    let value = match (edit, t.value.is_some(), t.value_ref.is_some()) {
        (Edit::Remove, false, false) => Some(FieldValue::Nothing),
        (Edit::Remove, value, _) => {
            let name = if value { "value" } else { "valueRef" };
            errors.push(FieldError::new(
                format!("{field}.{name}"),
                "remove takes no value",
            ));
            None
        }
        (_, true, true) => {
            errors.push(FieldError::new(field, "set value or valueRef, not both"));
            None
        }
        (_, true, false) => constant.map(FieldValue::constant),
        (_, false, true) => Some(FieldValue::Reference),
        (_, false, false) => {
            errors.push(FieldError::new(
                field,
                format!("{} sets a value: set value or valueRef", edit.as_str()),
            ));
            None
        }
    };
    if errors.len() > before {
        return None;
    }
    let (path, value) = (path?, value?);
    let value_expr = match &value {
        FieldValue::Nothing => "none".to_string(),
        FieldValue::Constant { value, .. } => literal(value),
        FieldValue::Reference => "refs.value".to_string(),
    };
    let reference = matches!(value, FieldValue::Reference);
    if reference {
        // A missing reference changes nothing.
        out.push_str("{%- if refs.value is defined and refs.value is not none -%}\n");
    }
    let call = |doc: &str, base: &str| {
        format!(
            "{{%- set found = field_op({doc}, {base}, {}, {value_expr}, {}) -%}}\n{{%- if found is not none %}}{{% set acc.ops = acc.ops + [found] %}}{{% endif -%}}\n",
            Value::from(path),
            literal(&Value::from(edit.as_str()))
        )
    };
    match within {
        FieldWithin::Object => out.push_str(&call("object", "\"\"")),
        FieldWithin::PodSpec => {
            open_pod_spec(out);
            out.push_str(&call("spec", "spec_path"));
            close_pod_spec(out);
        }
        FieldWithin::Containers => containers_program(
            out,
            &t.container_names,
            &call("c", "spec_path ~ \"/\" ~ list ~ \"/\" ~ i"),
        ),
    }
    if reference {
        out.push_str("{%- endif %}\n");
    }
    Some(NativeOverride::field(
        within,
        t.container_names.clone(),
        path.to_string(),
        value,
        edit,
    ))
}

/// Sets one field of the pod spec to `expr` (evaluated with `spec` bound to the pod spec).
fn pod_spec_program(out: &mut String, expr: &str, name: &str) {
    open_pod_spec(out);
    let _ = writeln!(out, "{{%- set updated = {expr} -%}}");
    let _ = writeln!(out, "{{%- if updated != (spec.{name} | default(none)) %}}");
    let _ = writeln!(
        out,
        "{{%- if updated is none -%}}\n{{%- set acc.ops = acc.ops + [{{\"op\": \"remove\", \"path\": spec_path ~ \"/{name}\"}}] -%}}"
    );
    let _ = writeln!(
        out,
        "{{%- else -%}}\n{{%- set acc.ops = acc.ops + [{{\"op\": \"add\", \"path\": spec_path ~ \"/{name}\", \"value\": updated}}] -%}}"
    );
    out.push_str("{%- endif %}\n{%- endif %}\n");
    close_pod_spec(out);
}
