//! Validate conditions rendered into programs, with their native forms and messages.

use std::fmt::Write as _;

use kanon_api::{AffectMode, ArithmeticOp, Cond, ValidateCondition};
use serde_json::Value;

use super::{constant_json, decimal_of, literal, operand};
use crate::error::FieldError;
use crate::language::template::message::{Compared, ConditionMessage};
use crate::language::template::native::{NativeCondition, NativeRule};

/// Renders a validate `condition` to a program that decides the verdict, builds its native
/// form from the same values (see [`super::native`]; a condition whose constant
/// `valueProcess` fails has none: its program fails on every run) and its message, rendered
/// apart (see [`super::message`]). Problems go to `errors` under `field`.
pub fn compile_condition(
    c: &ValidateCondition,
    field: &str,
    errors: &mut Vec<FieldError>,
) -> Option<(String, Option<NativeRule>, ConditionMessage)> {
    let before = errors.len();
    let needs_value = !matches!(c.cond, Cond::Exist | Cond::NotExist);
    let constant = c
        .value
        .as_ref()
        .and_then(|v| constant_json(v, &format!("{field}.value"), errors));
    let value_expr = match (&constant, &c.value_ref, needs_value) {
        (Some(_), Some(_), _) => {
            errors.push(FieldError::new(field, "set value or valueRef, not both"));
            None
        }
        (None, None, true) => {
            errors.push(FieldError::new(
                field,
                format!("{:?} compares with a value: set value or valueRef", c.cond),
            ));
            None
        }
        (Some(v), None, _) => Some(literal(v)),
        (None, Some(_), _) => Some("refs.value".to_string()),
        (None, None, false) => None,
    };
    if !needs_value && (c.value.is_some() || c.value_ref.is_some()) {
        errors.push(FieldError::new(
            field,
            format!("{:?} takes no value; remove value/valueRef", c.cond),
        ));
    }
    if matches!(c.cond, Cond::In | Cond::NotIn)
        && let Some(v) = &constant
        && !v.is_array()
    {
        errors.push(FieldError::new(
            format!("{field}.value"),
            format!(
                "{:?} needs a list (stringSlice, integerSlice or floatSlice)",
                c.cond
            ),
        ));
    }
    if c.cond == Cond::Regex {
        match &constant {
            Some(Value::String(pattern)) => {
                if let Err(e) = regex::RegexBuilder::new(pattern)
                    .size_limit(1 << 20)
                    .build()
                {
                    errors.push(FieldError::new(
                        format!("{field}.value.string"),
                        format!("invalid regular expression: {e}"),
                    ));
                }
            }
            Some(_) => errors.push(FieldError::new(
                format!("{field}.value"),
                "Regex needs a string pattern",
            )),
            None => {}
        }
    }
    let process = c.value_process.as_ref().and_then(|p| {
        let with = operand(
            &p.operation_with,
            &format!("{field}.valueProcess.operationWith"),
            errors,
        )?;
        let op = match p.operation {
            ArithmeticOp::Add => "+",
            ArithmeticOp::Subtract => "-",
            ArithmeticOp::Multiply => "*",
            ArithmeticOp::Divide => "/",
        };
        if op == "/" && decimal_of(&with).is_some_and(|d| d.to_f64() == 0.0) {
            errors.push(FieldError::new(
                format!("{field}.valueProcess.operationWith"),
                "division by zero",
            ));
        }
        Some((op, with))
    });
    let cond = format!("{:?}", c.cond);
    let allow = c.affect_mode == Some(AffectMode::Allow);
    // A JSONPath that may select several values: each is tested on its own.
    let each = crate::references::selects_many(c.data_ref.path.as_deref());
    // The native form compares the same values: the constant (with `valueProcess` applied
    // once, here) or `refs.value`.
    let compared = match (&value_expr, &constant, &process) {
        (None, _, _) => Some(Compared::Nothing),
        (Some(_), Some(v), None) => Some(Compared::Constant(v.clone())),
        (Some(_), Some(v), Some((op, with))) => crate::helpers::process_value(v, op, with)
            .ok()
            .map(Compared::Constant),
        (Some(_), None, process) => Some(Compared::Reference(
            process
                .as_ref()
                .map(|(op, with)| (op.to_string(), with.clone())),
        )),
    };
    let default_message = if allow {
        format!("{cond} condition does not hold")
    } else {
        format!("{cond} condition holds")
    };
    let rule = field.strip_suffix(".template.condition").unwrap_or(field);
    let message = ConditionMessage::compile(
        c.message.as_deref(),
        default_message,
        compared.clone().unwrap_or(Compared::Nothing),
        each,
        field,
        rule,
        errors,
    );
    if errors.len() > before {
        return None;
    }
    let message = message?;
    let mut out = format!("{{#- {field}: {cond} -#}}\n");
    if let Some(v) = &value_expr {
        if c.value_ref.is_some() {
            let _ = writeln!(out, "{{%- set value = {v} if {v} is defined else none -%}}");
        } else {
            let _ = writeln!(out, "{{%- set value = {v} -%}}");
        }
        if let Some((op, with)) = &process {
            let _ = writeln!(
                out,
                "{{%- set value = process_value(value, {}, {}) if value is not none else none -%}}",
                Value::from(*op),
                Value::from(with.as_str())
            );
        }
    }
    // A missing value on either side is never hit (Exist/NotExist aside), never an error.
    let test = match c.cond {
        Cond::Exist => "data is not none",
        Cond::NotExist => "data is none",
        Cond::Equal => "data is not none and value is not none and equal(data, value)",
        Cond::NotEqual => "data is not none and value is not none and not equal(data, value)",
        Cond::In => "data is not none and value is not none and contains_all(value, data)",
        Cond::NotIn => "data is not none and value is not none and contains_none(value, data)",
        Cond::Gt => "data is not none and value is not none and compare(data, value) > 0",
        Cond::Gte => "data is not none and value is not none and compare(data, value) >= 0",
        Cond::Lt => "data is not none and value is not none and compare(data, value) < 0",
        Cond::Lte => "data is not none and value is not none and compare(data, value) <= 0",
        Cond::Regex => "data is not none and value is not none and regex_match(data, value)",
    };
    if each {
        // Every selected value is tested: `reject` denies when some value hits, `allow` when
        // some value misses; an empty selection is one absent value. `item` is the index of
        // the value that decides, which the message sees as `data`.
        out.push_str(
            "{%- set selected = refs.data if refs.data is defined and refs.data is not none else [none] -%}\n",
        );
        out.push_str("{%- set found = namespace(any=false, all=true, hit=none, miss=none) -%}\n");
        out.push_str("{%- for data in selected -%}\n");
        let _ = writeln!(out, "{{%- if {test} -%}}");
        out.push_str(
            "{%- if not found.any %}{% set found.hit = loop.index0 %}{% endif %}{% set found.any = true -%}\n",
        );
        out.push_str("{%- else -%}\n");
        out.push_str(
            "{%- if found.all %}{% set found.miss = loop.index0 %}{% endif %}{% set found.all = false -%}\n",
        );
        out.push_str("{%- endif -%}\n{%- endfor -%}\n");
        if allow {
            out.push_str("{%- set hit = found.all -%}\n");
            out.push_str("{%- set item = found.miss -%}\n");
        } else {
            out.push_str("{%- set hit = found.any -%}\n");
            out.push_str("{%- set item = found.hit -%}\n");
        }
    } else {
        out.push_str("{%- set data = refs.data if refs.data is defined else none -%}\n");
        let _ = writeln!(out, "{{%- set hit = {test} -%}}");
        out.push_str("{%- set item = none -%}\n");
    }
    // The verdict alone: the message is rendered apart, only for a denial.
    let valid = if allow { "hit" } else { "not hit" };
    let _ = writeln!(out, "{{%- if {valid} -%}}");
    out.push_str("{\"valid\": true}\n{%- else -%}\n");
    out.push_str("{\"valid\": false, \"item\": {{ item | tojson }}}\n{%- endif %}\n");
    let native = compared
        .and_then(|compared| NativeCondition::new(c.cond, compared, allow, each))
        .map(NativeRule::Condition);
    Some((out, native, message))
}
