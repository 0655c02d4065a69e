//! CEL expressions checked against the schema of the kinds a policy selects, as
//! kube-apiserver type-checks a ValidatingAdmissionPolicy's expressions against its matched
//! kinds: an expression that reads a field the kind does not have (`object.spec.containerz`,
//! `has(object.spec.replica)`) gets a warning when written, instead of an error or a silent
//! `false` on every request.
//!
//! At run time `object` stays `dyn` (as in the apiserver), so these checks only warn, and only
//! of fields the kind does not have.

use std::sync::Arc;

use kanon_cel::{Env, ObjectTypes, Type};
use kanon_schema::{Kinds, KnownKind, Schema, Shape};

use super::compile::{Expect, RuleEnv};
use crate::error::FieldError;

/// The prefix of the object type names this module gives the checker.
const PREFIX: &str = "k8s:";
/// Separates the steps of an inline type's place (`<named type>\u{1f}.spec\u{1f}[]`).
const STEP: char = '\u{1f}';

/// The object types of one kind's schema: `k8s:<OpenAPI name>` for a named type, followed by
/// steps for a type written inline at a field (`.name`), a list's items (`[]`) or a map's
/// values (`{}`).
#[derive(Debug)]
struct KindTypes {
    kinds: Kinds,
    api_version: String,
    kind: String,
}

impl KindTypes {
    fn schema(&self) -> Option<&Schema> {
        self.kinds
            .kind(&self.api_version, &self.kind)
            .map(|known| known.schema)
    }

    /// The type at a place named by [`KindTypes`]' scheme.
    fn at<'s>(schema: &'s Schema, name: &str) -> Option<&'s kanon_schema::Type> {
        let mut steps = name.strip_prefix(PREFIX)?.split(STEP);
        let mut current = schema.named_type(steps.next()?)?;
        for step in steps {
            let (resolved, _) = schema.deref(current)?;
            current = match (&resolved.shape, step) {
                (Shape::List(list), "[]") => &list.items,
                (Shape::Map(values), "{}") => values,
                (Shape::Object(object), field) => object.fields.get(field.strip_prefix('.')?)?,
                _ => return None,
            };
        }
        Some(current)
    }
}

impl ObjectTypes for KindTypes {
    fn field(&self, type_name: &str, field: &str) -> Option<Option<Type>> {
        let schema = self.schema()?;
        let found = Self::at(schema, type_name)?;
        let (resolved, _) = schema.deref(found)?;
        let Shape::Object(object) = &resolved.shape else {
            return None;
        };
        if object.fields.is_empty() || resolved.preserve_unknown_fields {
            return None;
        }
        Some(
            object
                .fields
                .get(field)
                .map(|ty| cel_type(schema, ty, &format!("{type_name}{STEP}.{field}"))),
        )
    }
}

/// The CEL type of a schema type at `place` (as the values of an unstructured object are read:
/// numbers that may be whole or not, int-or-string and free-form values are `dyn`).
fn cel_type(schema: &Schema, ty: &kanon_schema::Type, place: &str) -> Type {
    let Some((resolved, name)) = schema.deref(ty) else {
        return Type::Dyn;
    };
    // A named type starts a place of its own.
    let place = match name {
        Some(name) => format!("{PREFIX}{name}"),
        None => place.to_owned(),
    };
    match &resolved.shape {
        Shape::Object(object) if !object.fields.is_empty() && !resolved.preserve_unknown_fields => {
            Type::Object(Arc::from(place.as_str()))
        }
        Shape::Map(values) => Type::map(
            Type::String,
            cel_type(schema, values, &format!("{place}{STEP}{{}}")),
        ),
        Shape::List(list) => Type::list(cel_type(schema, &list.items, &format!("{place}{STEP}[]"))),
        Shape::String => Type::String,
        Shape::Integer => Type::Int,
        Shape::Boolean => Type::Bool,
        _ => Type::Dyn,
    }
}

/// The expressions of one rule, where they are written and what each must give.
pub(crate) struct Sources<'r> {
    /// `variables`, in order: name, expression, field.
    pub(crate) variables: Vec<(&'r str, &'r str, String)>,
    /// Every other expression: text, field, expected result.
    pub(crate) expressions: Vec<(&'r str, String, Expect)>,
}

impl<'r> Sources<'r> {
    /// The expressions of a `cel` validate rule at `at`.
    pub(crate) fn validation(rule: &'r kanon_api::CelValidation, at: &str) -> Self {
        let mut expressions = Vec::new();
        for (i, condition) in rule.match_conditions.iter().enumerate() {
            expressions.push((
                condition.expression.as_str(),
                format!("{at}.matchConditions[{i}].expression"),
                Expect::Bool,
            ));
        }
        for (i, validation) in rule.validations.iter().enumerate() {
            let field = format!("{at}.validations[{i}]");
            expressions.push((
                validation.expression.as_str(),
                format!("{field}.expression"),
                Expect::Bool,
            ));
            if let Some(message) = &validation.message_expression {
                expressions.push((
                    message.as_str(),
                    format!("{field}.messageExpression"),
                    Expect::String,
                ));
            }
        }
        for (i, annotation) in rule.audit_annotations.iter().enumerate() {
            expressions.push((
                annotation.value_expression.as_str(),
                format!("{at}.auditAnnotations[{i}].valueExpression"),
                Expect::StringOrNull,
            ));
        }
        Sources {
            variables: variables(&rule.variables, at),
            expressions,
        }
    }

    /// The expressions of a `cel` overrider at `at`.
    pub(crate) fn mutation(rule: &'r kanon_api::CelMutation, at: &str) -> Self {
        let mut expressions = Vec::new();
        for (i, condition) in rule.match_conditions.iter().enumerate() {
            expressions.push((
                condition.expression.as_str(),
                format!("{at}.matchConditions[{i}].expression"),
                Expect::Bool,
            ));
        }
        for (i, mutation) in rule.mutations.iter().enumerate() {
            if let Some(patch) = &mutation.json_patch {
                expressions.push((
                    patch.expression.as_str(),
                    format!("{at}.mutations[{i}].jsonPatch.expression"),
                    Expect::Patches,
                ));
            }
        }
        Sources {
            variables: variables(&rule.variables, at),
            expressions,
        }
    }
}

fn variables<'r>(
    variables: &'r [kanon_api::Variable],
    at: &str,
) -> Vec<(&'r str, &'r str, String)> {
    variables
        .iter()
        .enumerate()
        .map(|(i, v)| {
            (
                v.name.as_str(),
                v.expression.as_str(),
                format!("{at}.variables[{i}].expression"),
            )
        })
        .collect()
}

/// Warnings for the expressions of one rule that do not type-check against a selected kind.
pub(crate) fn warnings(
    sources: &Sources<'_>,
    env: impl Fn() -> RuleEnv,
    selected: &[KnownKind<'_>],
    kinds: &Kinds,
    warnings: &mut Vec<FieldError>,
) {
    for known in selected {
        let kind = known.kind;
        let types = Arc::new(KindTypes {
            kinds: kinds.clone(),
            api_version: kind.api_version.clone(),
            kind: kind.kind.clone(),
        });
        let root = Type::Object(Arc::from(format!("{PREFIX}{}", kind.type_name)));
        let mut rule = env();
        rule.with_env(|env: &mut Env| {
            env.add_object_types(types.clone());
            env.declare_variable("object", root.clone());
            env.declare_variable("oldObject", root.clone());
        });
        let mut found = Vec::new();
        for (name, source, field) in &sources.variables {
            let typed = rule.compile(source, field, Expect::Any, &mut found);
            let kind = typed.map_or(Type::Dyn, |e| {
                kanon_cel::composition::variable_type(e.program.result_type())
            });
            rule.with_env(|env| {
                env.declare_variable(&format!("variables.{name}"), kind);
            });
        }
        for (source, field, expect) in &sources.expressions {
            let _ = rule.compile(source, field, *expect, &mut found);
        }
        // Only a field the kind does not have is reported: other type errors against the
        // schema's stricter types (a list of Containers joined to one of EphemeralContainers,
        // `orValue(null)` on a string) are sound at run time, where `object` is dyn.
        for problem in found {
            let first = problem
                .message
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned();
            if !first.contains(": undefined field '") {
                continue;
            }
            warnings.push(FieldError::new(
                problem.field,
                format!(
                    "checked against {} ({}): {first}",
                    kind.kind, kind.api_version
                ),
            ));
        }
    }
}
