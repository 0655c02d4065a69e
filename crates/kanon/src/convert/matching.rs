//! Kubernetes' resource rules and label selectors in the terms of kanon's selectors: the kinds
//! and operations a list of rules can meet, whether selectors say them exactly, and CEL match
//! conditions on `request` for what they cannot.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kanon_engine::NamedRule;

pub(super) const OPERATIONS: [&str; 4] = ["CREATE", "UPDATE", "DELETE", "CONNECT"];

/// A kind of the built-in schema: `(apiVersion, kind)`.
pub(super) type KindKey = (String, String);

/// The kinds a list of resource rules can meet, and whether resource selectors of those kinds
/// with the rules' operations select exactly the requests (without subresources) the rules
/// match.
pub(super) struct Coverage {
    /// `None`: any kind (a wildcard group, a subresource, a resource the schema does not
    /// know).
    pub(super) kinds: Option<BTreeMap<KindKey, BTreeSet<&'static str>>>,
    /// Every operation any rule names.
    pub(super) operations: BTreeSet<&'static str>,
    /// What the selectors cannot say, if anything.
    pub(super) inexact: Vec<String>,
}

pub(super) fn operations_of(rule: &NamedRule) -> BTreeSet<&'static str> {
    OPERATIONS
        .into_iter()
        .filter(|op| rule.operations.iter().any(|o| o == "*" || o == op))
        .collect()
}

pub(super) fn coverage(rules: &[NamedRule], kinds: &[kanon_schema::Kind]) -> Coverage {
    let mut found: Option<BTreeMap<KindKey, BTreeSet<&'static str>>> = Some(BTreeMap::new());
    let mut operations = BTreeSet::new();
    let mut inexact = Vec::new();
    let mut note = |text: String| {
        if !inexact.contains(&text) {
            inexact.push(text);
        }
    };
    for rule in rules {
        let ops = operations_of(rule);
        operations.extend(ops.iter().copied());
        if !rule.resource_names.is_empty() {
            note("resourceNames".to_owned());
        }
        if let Some(scope) = rule.scope.as_deref().filter(|s| *s != "*") {
            note(format!("scope {scope}"));
        }
        if rule.api_groups.iter().any(|g| g == "*") {
            note("apiGroups `*`".to_owned());
            found = None;
            continue;
        }
        if rule.api_versions.iter().any(|v| v == "*") {
            note("apiVersions `*`".to_owned());
        }
        for group in &rule.api_groups {
            for version in &rule.api_versions {
                for written in &rule.resources {
                    let (resource, sub) = written.split_once('/').unwrap_or((written, ""));
                    if !sub.is_empty() {
                        note(format!("subresource `{written}`"));
                        found = None;
                        continue;
                    }
                    if resource == "*" {
                        note("resources `*`".to_owned());
                    }
                    let matching: Vec<&kanon_schema::Kind> = kinds
                        .iter()
                        .filter(|k| {
                            k.group() == group
                                && (version == "*" || k.version() == version)
                                && (resource == "*" || k.resource == resource)
                        })
                        .collect();
                    // A scope leaves out the kinds it never meets (a namespaced object's
                    // request always has a namespace, a cluster-scoped one's never), unless
                    // that leaves none.
                    let in_scope: Vec<&kanon_schema::Kind> = matching
                        .iter()
                        .copied()
                        .filter(|k| match rule.scope.as_deref() {
                            Some("Namespaced") => k.namespaced,
                            Some("Cluster") => !k.namespaced,
                            _ => true,
                        })
                        .collect();
                    let matching = if in_scope.is_empty() {
                        matching
                    } else {
                        in_scope
                    };
                    if matching.is_empty() {
                        let at = if group.is_empty() {
                            format!("{version} {resource}")
                        } else {
                            format!("{group}/{version} {resource}")
                        };
                        note(format!("{at} (not a built-in kind)"));
                        found = None;
                        continue;
                    }
                    if let Some(found) = found.as_mut() {
                        for kind in matching {
                            found
                                .entry((kind.api_version.clone(), kind.kind.clone()))
                                .or_default()
                                .extend(ops.iter().copied());
                        }
                    }
                }
            }
        }
    }
    if let Some(found) = &found
        && found.values().any(|ops| *ops != operations)
    {
        note("operations that differ by rule".to_owned());
    }
    Coverage {
        kinds: found,
        operations,
        inexact,
    }
}

/// A CEL string literal.
pub(super) fn lit(text: &str) -> String {
    let mut out = String::from("'");
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A CEL list of string literals.
pub(super) fn list<S: AsRef<str>>(items: &[S]) -> String {
    let items: Vec<String> = items.iter().map(|s| lit(s.as_ref())).collect();
    format!("[{}]", items.join(", "))
}

/// `request.subResource` (absent when there is none).
pub(super) const SUB_RESOURCE: &str = "request.?subResource.orValue('')";
/// `request.namespace` (absent for cluster-scoped objects).
pub(super) const NAMESPACE: &str = "request.?namespace.orValue('')";
/// Whether the request is on a Namespace (whose `request.namespace` is its own name).
pub(super) const IS_NAMESPACE: &str =
    "(request.resource.group == '' && request.resource.resource == 'namespaces')";

/// What one resource rule matches, as kube-apiserver matches it, in CEL on `request`.
pub(super) fn rule_cel(rule: &NamedRule) -> String {
    let mut parts = Vec::new();
    if !rule.operations.iter().any(|o| o == "*") {
        parts.push(format!("request.operation in {}", list(&rule.operations)));
    }
    if !rule.api_groups.iter().any(|g| g == "*") {
        parts.push(format!(
            "request.resource.group in {}",
            list(&rule.api_groups)
        ));
    }
    if !rule.api_versions.iter().any(|v| v == "*") {
        parts.push(format!(
            "request.resource.version in {}",
            list(&rule.api_versions)
        ));
    }
    let mut plain = Vec::new();
    let mut others = Vec::new();
    let mut any = false;
    for written in &rule.resources {
        let (resource, sub) = written.split_once('/').unwrap_or((written, ""));
        match (resource, sub) {
            ("*", "*") => any = true,
            (resource, "") if resource != "*" => plain.push(resource.to_owned()),
            (resource, sub) => {
                let mut alt = Vec::new();
                if resource != "*" {
                    alt.push(format!("request.resource.resource == {}", lit(resource)));
                }
                if sub != "*" {
                    alt.push(format!("{SUB_RESOURCE} == {}", lit(sub)));
                }
                others.push(alt.join(" && "));
            }
        }
    }
    if !any {
        let mut alternatives = Vec::new();
        match plain.as_slice() {
            [] => {}
            [one] => alternatives.push(format!(
                "request.resource.resource == {} && {SUB_RESOURCE} == ''",
                lit(one)
            )),
            many => alternatives.push(format!(
                "request.resource.resource in {} && {SUB_RESOURCE} == ''",
                list(many)
            )),
        }
        alternatives.extend(others);
        match alternatives.len() {
            0 => parts.push("false".to_owned()),
            1 => parts.push(alternatives.remove(0)),
            _ => parts.push(format!("({})", alternatives.join(" || "))),
        }
    }
    match rule.scope.as_deref() {
        Some("Cluster") => parts.push(format!("({IS_NAMESPACE} || {NAMESPACE} == '')")),
        Some("Namespaced") => parts.push(format!("!{IS_NAMESPACE} && {NAMESPACE} != ''")),
        _ => {}
    }
    if !rule.resource_names.is_empty() {
        parts.push(format!(
            "request.?name.orValue('') in {}",
            list(&rule.resource_names)
        ));
    }
    if parts.is_empty() {
        "true".to_owned()
    } else {
        parts.join(" && ")
    }
}

/// Whether any of `rules` matches, in CEL.
pub(super) fn any_rule_cel(rules: &[NamedRule]) -> String {
    let each: Vec<String> = rules.iter().map(rule_cel).collect();
    if each.len() == 1 {
        each.into_iter().next().unwrap_or_default()
    } else {
        each.iter()
            .map(|e| format!("({e})"))
            .collect::<Vec<_>>()
            .join(" || ")
    }
}

pub(super) fn is_empty_selector(selector: &LabelSelector) -> bool {
    selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty)
}

/// Both selectors at once: a label selector is a conjunction of requirements, so the
/// requirements of both make one selector (a key both give different values becomes two `In`
/// requirements, which no labels meet, as neither pair of selectors does).
pub(super) fn merge_selectors<'a>(
    selectors: impl IntoIterator<Item = &'a LabelSelector>,
) -> Option<LabelSelector> {
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    let mut expressions: Vec<LabelSelectorRequirement> = Vec::new();
    for selector in selectors {
        for (key, value) in selector.match_labels.iter().flatten() {
            match labels.get(key) {
                None => {
                    labels.insert(key.clone(), value.clone());
                }
                Some(same) if same == value => {}
                Some(_) => expressions.push(LabelSelectorRequirement {
                    key: key.clone(),
                    operator: "In".to_owned(),
                    values: Some(vec![value.clone()]),
                }),
            }
        }
        expressions.extend(selector.match_expressions.iter().flatten().cloned());
    }
    let merged = LabelSelector {
        match_labels: (!labels.is_empty()).then_some(labels),
        match_expressions: (!expressions.is_empty()).then_some(expressions),
    };
    (!is_empty_selector(&merged)).then_some(merged)
}

/// Whether labels `l` (a CEL map) meet `selector`, in CEL.
pub(super) fn selector_cel(selector: &LabelSelector) -> String {
    let mut parts = Vec::new();
    for (key, value) in selector.match_labels.iter().flatten() {
        // Guarded: a missing key is an error in CEL, not false.
        let key = lit(key);
        parts.push(format!("{key} in l && l[{key}] == {}", lit(value)));
    }
    for requirement in selector.match_expressions.iter().flatten() {
        let key = lit(&requirement.key);
        let values = list(requirement.values.as_deref().unwrap_or_default());
        parts.push(match requirement.operator.as_str() {
            "In" => format!("{key} in l && l[{key}] in {values}"),
            "NotIn" => format!("!({key} in l && l[{key}] in {values})"),
            "Exists" => format!("{key} in l"),
            _ => format!("!({key} in l)"),
        });
    }
    parts.join(" && ")
}

/// An object selector as kube-apiserver applies it: the object's labels or the old object's
/// meet it.
pub(super) fn object_selector_cel(selector: &LabelSelector) -> String {
    format!(
        "[object, oldObject].filter(o, o != null).map(o, o.?metadata.?labels.orValue({{}})).exists(l, {})",
        selector_cel(selector)
    )
}

pub(super) fn non_empty(selector: Option<&LabelSelector>) -> Option<&LabelSelector> {
    selector.filter(|s| !is_empty_selector(s))
}
