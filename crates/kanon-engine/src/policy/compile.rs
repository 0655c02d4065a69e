//! Compiling a policy object into its checked form: every problem found, by field path.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kanon_api::{FailurePolicy, OverrideRule, ResourceSelector, ValidateRule, ValidationAction};
use kanon_schema::Kinds;

use super::compiled::{
    Compiled, CompiledOverrideRule, CompiledPolicy, CompiledValidateRule, PolicyRules, Rendered,
};
use super::object::{PolicyId, PolicyObject};
use super::operations::OperationSet;
use crate::error::{FieldError, InvalidPolicy};
use crate::language::RuleProgram;
use crate::language::plaintext::{self, PlaintextOp};
use crate::program::{Program, ProgramKind, ProgramLimits};
use crate::references::CompiledRef;
use crate::selector::{LabelMatcher, ResourceMatcher};

/// Compiles a program; `lazily` for a template whose native form answers nearly every request,
/// so that 10,000 such policies do not each hold a built environment (see [`Program`]).
pub(super) fn compile_program(
    source: Arc<str>,
    kind: ProgramKind,
    lazily: bool,
    field: &str,
    errors: &mut Vec<FieldError>,
) -> Option<Program> {
    match Program::compile_shared(source, kind, ProgramLimits::default(), lazily) {
        Ok(p) => Some(p),
        Err(e) => {
            errors.push(FieldError::new(field, e.message));
            None
        }
    }
}

/// Common parts of the four specs, borrowed.
pub(super) struct SpecParts<'a> {
    selectors: &'a [ResourceSelector],
    namespace_selector: Option<&'a LabelSelector>,
    failure_policy: Option<FailurePolicy>,
    pod_templates: Option<bool>,
}

pub(super) fn compile_selectors(
    id: &PolicyId,
    parts: &SpecParts<'_>,
    errors: &mut Vec<FieldError>,
) -> Vec<ResourceMatcher> {
    let mut matchers = Vec::with_capacity(parts.selectors.len());
    for (i, selector) in parts.selectors.iter().enumerate() {
        let field = format!("spec.resourceSelectors[{i}]");
        let before = errors.len();
        let matcher = ResourceMatcher::compile(selector, &field, errors);
        if let Some(own) = &id.namespace
            && let Some(ns) = matcher.namespace()
            && ns != own
        {
            errors.push(FieldError::new(
                format!("{field}.namespace"),
                format!("a namespaced policy selects only its own namespace `{own}`, not `{ns}`"),
            ));
        }
        // A selector that does not compile still selects its type, so that requests it was
        // written for meet the policy's failure policy instead of passing silently.
        if errors.len() > before {
            matchers.push(ResourceMatcher::kind_only(
                &selector.api_version,
                &selector.kind,
            ));
        } else {
            matchers.push(matcher);
        }
    }
    matchers
}

pub(super) fn compile_override_rules(
    rules: &[OverrideRule],
    own_namespace: Option<&str>,
    errors: &mut Vec<FieldError>,
    rendered: &mut Vec<Rendered>,
) -> Vec<CompiledOverrideRule> {
    let mut out = Vec::with_capacity(rules.len());
    for (i, rule) in rules.iter().enumerate() {
        let field = format!("spec.overrideRules[{i}].overriders");
        let o = &rule.overriders;
        if o.template.is_none() && o.program.is_none() && o.cel.is_none() && o.plaintext.is_empty()
        {
            errors.push(FieldError::new(
                &field,
                "no overrider: set template, program, cel or plaintext",
            ));
        }
        let template = o.template.as_ref().and_then(|t| {
            let at = format!("{field}.template");
            let (source, native) =
                crate::language::template::render::compile_override(t, &at, errors)?;
            let source: Arc<str> = source.into();
            rendered.push(Rendered {
                field: at.clone(),
                source: source.clone(),
            });
            let refs = t
                .value_ref
                .iter()
                .map(|r| {
                    (
                        "value",
                        CompiledRef::compile(r, &format!("{at}.valueRef"), own_namespace, errors),
                    )
                })
                .collect();
            let program = compile_program(source, ProgramKind::Override, true, &at, errors)?;
            Some(RuleProgram {
                field: at,
                program,
                refs,
                native: Some(native),
                authored: false,
                contained: false,
                message: None,
            })
        });
        let program = o
            .program
            .as_deref()
            .and_then(|source| authored_program(source, ProgramKind::Override, &field, errors));
        let plaintext: Vec<PlaintextOp> = o
            .plaintext
            .iter()
            .enumerate()
            .filter_map(|(j, p)| plaintext::compile(p, &format!("{field}.plaintext[{j}]"), errors))
            .collect();
        let patch = plaintext.iter().map(|p| p.operation.clone()).collect();
        let cel = o.cel.as_ref().and_then(|cel| {
            crate::language::cel::mutate::compile(
                cel,
                &format!("{field}.cel"),
                crate::language::cel::compile::Site::KanonRule,
                own_namespace,
                errors,
            )
            .map(Arc::new)
        });
        out.push(CompiledOverrideRule {
            name: rule_name(
                rule.name.as_deref(),
                rules[..i].iter().map(|r| r.name.as_deref()),
                &format!("spec.overrideRules[{i}].name"),
                errors,
            ),
            cel,
            operations: OperationSet::from_targets(&rule.target_operations),
            template,
            program,
            plaintext,
            patch,
        });
    }
    out
}

/// A rule's hand-written `program` (at `<field>.program`), compiled.
fn authored_program(
    source: &str,
    kind: ProgramKind,
    field: &str,
    errors: &mut Vec<FieldError>,
) -> Option<RuleProgram> {
    let at = format!("{field}.program");
    let program = compile_program(source.into(), kind, false, &at, errors)?;
    Some(RuleProgram {
        field: at,
        contained: program.contained(),
        program,
        refs: Vec::new(),
        native: None,
        authored: true,
        message: None,
    })
}

pub(super) fn compile_validate_rules(
    rules: &[ValidateRule],
    own_namespace: Option<&str>,
    errors: &mut Vec<FieldError>,
    rendered: &mut Vec<Rendered>,
) -> Vec<CompiledValidateRule> {
    let mut out = Vec::with_capacity(rules.len());
    for (i, rule) in rules.iter().enumerate() {
        let field = format!("spec.validateRules[{i}]");
        if rule.template.is_none() && rule.program.is_none() && rule.cel.is_none() {
            errors.push(FieldError::new(
                &field,
                "no check: set template, program or cel",
            ));
        }
        let template = rule.template.as_ref().and_then(|t| {
            let at = format!("{field}.template");
            let Some(condition) = &t.condition else {
                errors.push(FieldError::new(
                    format!("{at}.condition"),
                    "is required for type condition",
                ));
                return None;
            };
            let cond_at = format!("{at}.condition");
            let mut refs = vec![(
                "data",
                CompiledRef::compile(
                    &condition.data_ref,
                    &format!("{cond_at}.dataRef"),
                    own_namespace,
                    errors,
                )
                .per_item(),
            )];
            if let Some(v) = &condition.value_ref {
                refs.push((
                    "value",
                    CompiledRef::compile(v, &format!("{cond_at}.valueRef"), own_namespace, errors),
                ));
            }
            let (source, native, message) =
                crate::language::template::render::compile_condition(condition, &cond_at, errors)?;
            let source: Arc<str> = source.into();
            rendered.push(Rendered {
                field: at.clone(),
                source: source.clone(),
            });
            // The message is the second part of what the condition means.
            if condition.message.is_some() {
                rendered.push(Rendered {
                    field: message.field().to_string(),
                    source: message.source().into(),
                });
            }
            let program =
                compile_program(source, ProgramKind::Validate, native.is_some(), &at, errors)?;
            Some(RuleProgram {
                field: at,
                program,
                refs,
                native,
                authored: false,
                contained: false,
                message: Some(message),
            })
        });
        let program = rule
            .program
            .as_deref()
            .and_then(|source| authored_program(source, ProgramKind::Validate, &field, errors));
        let cel = rule.cel.as_ref().and_then(|cel| {
            crate::language::cel::validate::compile(
                cel,
                &format!("{field}.cel"),
                crate::language::cel::compile::Site::KanonRule,
                own_namespace,
                errors,
            )
            .map(Arc::new)
        });
        out.push(CompiledValidateRule {
            name: rule_name(
                rule.name.as_deref(),
                rules[..i].iter().map(|r| r.name.as_deref()),
                &format!("{field}.name"),
                errors,
            ),
            operations: OperationSet::from_targets(&rule.target_operations),
            template,
            program,
            cel,
        });
    }
    out
}

/// A rule's `name`, checked: not empty, and unique among the rules `before` it.
fn rule_name<'a>(
    name: Option<&str>,
    mut before: impl Iterator<Item = Option<&'a str>>,
    field: &str,
    errors: &mut Vec<FieldError>,
) -> Option<String> {
    let name = name?;
    if name.trim().is_empty() {
        errors.push(FieldError::new(field, "must not be empty"));
    } else if before.any(|b| b == Some(name)) {
        errors.push(FieldError::new(
            field,
            format!("another rule of this policy is named `{name}`"),
        ));
    }
    Some(name.to_string())
}

pub(super) fn check_actions(
    actions: &[ValidationAction],
    errors: &mut Vec<FieldError>,
) -> Vec<ValidationAction> {
    for (i, a) in actions.iter().enumerate() {
        if actions[..i].contains(a) {
            errors.push(FieldError::new(
                format!("spec.validationActions[{i}]"),
                format!("{a:?} is listed twice"),
            ));
        }
    }
    if actions.contains(&ValidationAction::Deny) && actions.contains(&ValidationAction::Warn) {
        errors.push(FieldError::new(
            "spec.validationActions",
            "Deny and Warn may not be used together (a denied request has no use for the warning)",
        ));
    }
    if actions.is_empty() {
        vec![ValidationAction::Deny]
    } else {
        actions.to_vec()
    }
}

/// Compiles a decoded policy: checks every field and builds matchers and rules. The result is
/// usable even when there are errors (see [`CompiledPolicy::defect`]). Kinds and paths are
/// checked against Kubernetes' built-in kinds; [`compile_with`] knows custom ones too.
pub fn compile(object: &PolicyObject) -> Compiled {
    match Kinds::builtin() {
        Ok(kinds) => compile_checked(object, Some(&kinds)),
        // The schema is embedded and checked by tests: failing to load it is a defect of the
        // build, not of the policy, which then compiles without the kind checks.
        Err(_) => compile_checked(object, None),
    }
}

/// [`compile`], checking kinds and paths against `kinds`: the built-in ones and, in a
/// cluster, the custom ones its CustomResourceDefinitions serve. Custom kinds only ever add
/// warnings, so the errors are those of [`compile`].
pub fn compile_with(object: &PolicyObject, kinds: &Kinds) -> Compiled {
    compile_checked(object, Some(kinds))
}

/// The [`CompiledPolicy::warnings`] that [`compile_with`] gives `object` with `kinds`, without
/// compiling the rest: they are the only part of its result that depends on the custom kinds,
/// so this is how a compiled policy's warnings follow a change of the custom kinds.
pub fn kinds_warnings(object: &PolicyObject, kinds: &Kinds) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    crate::kubernetes::check(object.written(), kinds, &mut errors, &mut warnings);
    warnings
}

pub(super) fn compile_checked(object: &PolicyObject, kinds: Option<&Kinds>) -> Compiled {
    let id = object.id();
    let mut errors = Vec::new();
    if id.name.is_empty() {
        errors.push(FieldError::new("metadata.name", "is required"));
    }
    if id.kind.is_namespaced() && id.namespace.as_deref().unwrap_or("").is_empty() {
        errors.push(FieldError::new(
            "metadata.namespace",
            format!("is required for {}", id.kind),
        ));
    }
    let parts = match object {
        PolicyObject::ClusterOverride(p) => SpecParts {
            selectors: &p.spec.resource_selectors,
            namespace_selector: p.spec.namespace_selector.as_ref(),
            failure_policy: p.spec.failure_policy,
            pod_templates: p.spec.pod_templates,
        },
        PolicyObject::Override(p) => SpecParts {
            selectors: &p.spec.resource_selectors,
            namespace_selector: None,
            failure_policy: p.spec.failure_policy,
            pod_templates: p.spec.pod_templates,
        },
        PolicyObject::ClusterValidate(p) => SpecParts {
            selectors: &p.spec.resource_selectors,
            namespace_selector: p.spec.namespace_selector.as_ref(),
            failure_policy: p.spec.failure_policy,
            pod_templates: p.spec.pod_templates,
        },
        PolicyObject::Validate(p) => SpecParts {
            selectors: &p.spec.resource_selectors,
            namespace_selector: None,
            failure_policy: p.spec.failure_policy,
            pod_templates: p.spec.pod_templates,
        },
    };
    let selectors = compile_selectors(&id, &parts, &mut errors);
    let pod_templates = parts.pod_templates != Some(false)
        && selectors
            .iter()
            .any(|s| s.api_version == "v1" && s.kind == "Pod");
    let namespace_selector = parts
        .namespace_selector
        .map(|s| LabelMatcher::compile(s, "spec.namespaceSelector", &mut errors));
    let mut rendered = Vec::new();
    let rules = match object {
        PolicyObject::ClusterOverride(p) => PolicyRules::Override(compile_override_rules(
            &p.spec.override_rules,
            id.namespace.as_deref(),
            &mut errors,
            &mut rendered,
        )),
        PolicyObject::Override(p) => PolicyRules::Override(compile_override_rules(
            &p.spec.override_rules,
            id.namespace.as_deref(),
            &mut errors,
            &mut rendered,
        )),
        PolicyObject::ClusterValidate(p) => PolicyRules::Validate {
            rules: compile_validate_rules(
                &p.spec.validate_rules,
                id.namespace.as_deref(),
                &mut errors,
                &mut rendered,
            ),
            actions: check_actions(&p.spec.validation_actions, &mut errors),
        },
        PolicyObject::Validate(p) => PolicyRules::Validate {
            rules: compile_validate_rules(
                &p.spec.validate_rules,
                id.namespace.as_deref(),
                &mut errors,
                &mut rendered,
            ),
            actions: check_actions(&p.spec.validation_actions, &mut errors),
        },
    };
    let mut warnings = Vec::new();
    if let Some(kinds) = kinds {
        crate::kubernetes::check(object.written(), kinds, &mut errors, &mut warnings);
    }
    let (severity, category) = report_annotations(object, &mut warnings);
    let defect = (!errors.is_empty()).then(|| {
        Arc::new(InvalidPolicy {
            policy: id.to_string(),
            errors: errors.clone(),
        })
    });
    Compiled {
        policy: CompiledPolicy {
            label: id.to_string().into(),
            id,
            failure_policy: parts.failure_policy.unwrap_or_default(),
            selectors,
            namespace_selector,
            pod_templates,
            rules,
            defect,
            rendered,
            warnings,
            admission: None,
            severity,
            category,
        },
        errors,
    }
}

/// The annotation naming how grave a policy's failures are, as reports say it.
pub const SEVERITY_ANNOTATION: &str = "policy.kanon.dev/severity";
/// The annotation naming what a policy is about, as reports say it.
pub const CATEGORY_ANNOTATION: &str = "policy.kanon.dev/category";

/// The policy's severity and category for reports. A severity OpenReports does not know is
/// left out with a warning: a report carrying it would be refused by the report's schema.
fn report_annotations(
    object: &PolicyObject,
    warnings: &mut Vec<FieldError>,
) -> (Option<Arc<str>>, Option<Arc<str>>) {
    let Some(annotations) = &object.metadata().annotations else {
        return (None, None);
    };
    let severity = annotations
        .get(SEVERITY_ANNOTATION)
        .and_then(|value| match value.parse::<kanon_api::Severity>() {
            Ok(severity) => Some(Arc::from(severity.as_str())),
            Err(error) => {
                warnings.push(FieldError::new(
                    format!("metadata.annotations[{SEVERITY_ANNOTATION}]"),
                    format!("{error}; reports leave it out"),
                ));
                None
            }
        });
    let category = annotations
        .get(CATEGORY_ANNOTATION)
        .filter(|value| !value.is_empty())
        .map(|value| Arc::from(value.as_str()));
    (severity, category)
}
