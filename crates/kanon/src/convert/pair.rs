//! One (policy, binding) pair converted into a kanon cluster policy.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Map, Value, json};

use super::matching::{
    OPERATIONS, SUB_RESOURCE, any_rule_cel, coverage, merge_selectors, non_empty,
    object_selector_cel,
};
use super::{Binding, CONVERTED_FROM, Converted, PREFIX, Policy, Spec, binding_kind, policy_kind};

/// The variables with a name declared twice written once: kube-apiserver accepts the repeat
/// and reads the later definition everywhere, which kanon's rules (that refuse a repeat) say by
/// keeping the later expression at the first one's place.
fn last_definitions(variables: &[kanon_api::Variable]) -> Vec<kanon_api::Variable> {
    let mut kept: Vec<kanon_api::Variable> = Vec::with_capacity(variables.len());
    for variable in variables {
        match kept.iter_mut().find(|known| known.name == variable.name) {
            Some(known) => known.expression = variable.expression.clone(),
            None => kept.push(variable.clone()),
        }
    }
    kept
}

/// Each item as JSON, as written.
fn values<T: serde::Serialize>(items: &[T]) -> Vec<Value> {
    items
        .iter()
        .filter_map(|item| serde_json::to_value(item).ok())
        .collect()
}

/// The kanon policy that decides what `binding` of `policy` decides.
pub(super) fn convert_pair(
    policy: &Policy,
    binding: &Binding,
    kinds: &[kanon_schema::Kind],
) -> Result<Converted, String> {
    let mutating = policy.mutating;
    let constraints = policy.spec.match_constraints().cloned().unwrap_or_default();
    let narrowed = binding.spec.match_resources.clone().unwrap_or_default();
    let mut conditions: Vec<(String, String)> = Vec::new();
    let mut notes: Vec<String> = Vec::new();

    // Resource rules: kinds and operations, with a condition where they are not exact.
    let policy_cover = coverage(&constraints.resource_rules, kinds);
    let mut selected = policy_cover.kinds.clone();
    let mut operations = policy_cover.operations.clone();
    if policy_cover.inexact.is_empty() {
        conditions.push((
            format!("{PREFIX}no-subresource"),
            format!("{SUB_RESOURCE} == ''"),
        ));
        notes.push(format!(
            "{PREFIX}no-subresource: the policy's resource rules name no subresource, but a resource selector also selects requests on subresources whose object is of its kind (e.g. pods/status)."
        ));
    } else {
        conditions.push((
            format!("{PREFIX}resource-rules"),
            any_rule_cel(&constraints.resource_rules),
        ));
        notes.push(format!(
            "{PREFIX}resource-rules: the policy's spec.matchConstraints.resourceRules, which resource selectors cannot say exactly ({}).",
            policy_cover.inexact.join(", ")
        ));
    }
    if !narrowed.resource_rules.is_empty() {
        let binding_cover = coverage(&narrowed.resource_rules, kinds);
        // Narrow the selectors to the kinds both can meet (never to none, which would be all).
        selected = match (selected, binding_cover.kinds) {
            (None, theirs) => theirs,
            (Some(ours), None) => Some(ours),
            (Some(ours), Some(theirs)) => {
                let both: BTreeMap<_, _> = ours
                    .iter()
                    .filter(|(k, _)| theirs.contains_key(*k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                Some(if both.is_empty() { ours } else { both })
            }
        };
        let both: BTreeSet<_> = operations
            .intersection(&binding_cover.operations)
            .copied()
            .collect();
        if !both.is_empty() {
            operations = both;
        }
        conditions.push((
            format!("{PREFIX}binding-resource-rules"),
            any_rule_cel(&narrowed.resource_rules),
        ));
        notes.push(format!(
            "{PREFIX}binding-resource-rules: the binding's spec.matchResources.resourceRules, which narrow the policy's: a request must match both."
        ));
    }
    for (rules, name, field) in [
        (
            &constraints.exclude_resource_rules,
            "exclude-resource-rules",
            "the policy's spec.matchConstraints.excludeResourceRules",
        ),
        (
            &narrowed.exclude_resource_rules,
            "binding-exclude-resource-rules",
            "the binding's spec.matchResources.excludeResourceRules",
        ),
    ] {
        if rules.is_empty() {
            continue;
        }
        conditions.push((
            format!("{PREFIX}{name}"),
            format!("!({})", any_rule_cel(rules)),
        ));
        notes.push(format!(
            "{PREFIX}{name}: {field}: a request they match is left out."
        ));
    }

    // Namespace selectors: one selector with the requirements of both.
    let namespace_selector = merge_selectors(
        [
            &constraints.namespace_selector,
            &narrowed.namespace_selector,
        ]
        .into_iter()
        .filter_map(|s| non_empty(s.as_ref())),
    );
    if non_empty(constraints.namespace_selector.as_ref()).is_some()
        && non_empty(narrowed.namespace_selector.as_ref()).is_some()
    {
        notes.push("namespaceSelector: the requirements of the policy's and the binding's namespace selectors, which a namespace must both meet.".to_owned());
    }

    // Object selectors: a resource selector's labelSelector reads the object (the old object
    // on DELETE); kube-apiserver's objectSelector also accepts the old object's labels on
    // UPDATE, which only a condition can say.
    let object_selectors: Vec<(&LabelSelector, &str, &str)> = [
        (
            non_empty(constraints.object_selector.as_ref()),
            "object-selector",
            "the policy's spec.matchConstraints.objectSelector",
        ),
        (
            non_empty(narrowed.object_selector.as_ref()),
            "binding-object-selector",
            "the binding's spec.matchResources.objectSelector",
        ),
    ]
    .into_iter()
    .filter_map(|(s, name, field)| s.map(|s| (s, name, field)))
    .collect();
    let updates = operations.contains("UPDATE");
    let label_selector = if selected.is_some() && !updates {
        merge_selectors(object_selectors.iter().map(|(s, _, _)| *s))
    } else {
        for (selector, name, field) in &object_selectors {
            conditions.push((format!("{PREFIX}{name}"), object_selector_cel(selector)));
            let why = if updates {
                "on UPDATE it also accepts the old object's labels, which a labelSelector does not read"
            } else {
                "the policy selects every kind, and only a resource selector has a labelSelector"
            };
            notes.push(format!("{PREFIX}{name}: {field}: {why}."));
        }
        None
    };

    if policy.spec.failure_policy() == Some("Ignore") {
        let kind = if mutating {
            "ClusterOverridePolicy"
        } else {
            "ClusterValidatePolicy"
        };
        notes.push(format!(
            "failurePolicy Ignore: an expression that fails to evaluate is ignored as kube-apiserver ignores it, but kanon also returns a warning (`{kind}/<name>: skipped (failurePolicy Ignore): <error>`) where kube-apiserver says nothing."
        ));
    }

    // The policy's own match conditions come after the generated ones.
    for written in policy.spec.match_conditions() {
        let name = &written.name;
        if conditions.iter().any(|(n, _)| n == name) {
            return Err(format!(
                "spec.matchConditions: `{name}` is also the name of a match condition kanon convert writes: rename it"
            ));
        }
    }
    let mut match_conditions: Vec<Value> = conditions
        .into_iter()
        .map(|(name, expression)| json!({"name": name, "expression": expression}))
        .collect();
    match_conditions.extend(values(policy.spec.match_conditions()));

    let mut spec = Map::new();
    if let Some(selected) = &selected {
        let selectors: Vec<Value> = selected
            .keys()
            .map(|(api_version, kind)| {
                let mut selector = json!({"apiVersion": api_version, "kind": kind});
                if let Some(labels) = &label_selector {
                    selector["labelSelector"] = json!(labels);
                }
                selector
            })
            .collect();
        // A Kubernetes admission policy judges Pods only, never the pod templates of
        // workloads, which a kanon policy that selects Pods reaches unless told not to.
        if selected.contains_key(&("v1".to_string(), "Pod".to_string())) {
            spec.insert("podTemplates".into(), Value::Bool(false));
        }
        spec.insert("resourceSelectors".into(), Value::Array(selectors));
    }
    if let Some(selector) = &namespace_selector {
        spec.insert("namespaceSelector".into(), json!(selector));
    }
    if let Some(failure_policy) = policy.spec.failure_policy() {
        spec.insert("failurePolicy".into(), json!(failure_policy));
    }
    let mut rule = Map::new();
    if operations.len() < OPERATIONS.len() {
        let listed: Vec<&str> = OPERATIONS
            .into_iter()
            .filter(|op| operations.contains(op))
            .collect();
        rule.insert("targetOperations".into(), json!(listed));
    }
    let mut cel = Map::new();
    let mut put = |key: &str, values: &[Value]| {
        if !values.is_empty() {
            cel.insert(key.into(), Value::Array(values.to_vec()));
        }
    };
    put("matchConditions", &match_conditions);
    put(
        "variables",
        &values(&last_definitions(policy.spec.variables())),
    );
    let kind = if let Spec::Mutating(written) = &policy.spec {
        put("mutations", &values(&written.mutations));
        rule.insert("overriders".into(), json!({"cel": cel}));
        spec.insert("overrideRules".into(), json!([rule]));
        "ClusterOverridePolicy"
    } else {
        if let Spec::Validating(written) = &policy.spec {
            put("validations", &values(&written.validations));
            put("auditAnnotations", &values(&written.audit_annotations));
        }
        rule.insert("cel".into(), Value::Object(cel));
        if let Some(actions) = &binding.spec.validation_actions {
            spec.insert("validationActions".into(), json!(actions));
        }
        spec.insert("validateRules".into(), json!([rule]));
        "ClusterValidatePolicy"
    };
    let name = if binding.name == policy.name {
        policy.name.clone()
    } else {
        format!("{}-{}", policy.name, binding.name)
    };
    let from = format!(
        "{}/{} with {}/{}",
        policy_kind(mutating),
        policy.name,
        binding_kind(mutating),
        binding.name
    );
    Ok(Converted {
        policy: json!({
            "apiVersion": kanon_api::API_VERSION,
            "kind": kind,
            "metadata": {
                "name": name,
                "annotations": {CONVERTED_FROM: from},
            },
            "spec": spec,
        }),
        from,
        notes,
    })
}
