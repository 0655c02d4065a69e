//! Which requests an admission policy's `matchConstraints` and a binding's `matchResources`
//! select, as kube-apiserver decides: namespace selector, object selector, excluded rules (which
//! win), then the resource rules with their operations, groups, versions, resources,
//! subresources, scope and resource names; under `matchPolicy: Equivalent` (the default), rules
//! also match the request's resource at the other versions that serve it.

use kanon_api::Operation;
use serde_json::Value;

use super::manifest::{MatchResources, NamedRule};
use crate::error::FieldError;
use crate::selector::{LabelMatcher, labels_of};

/// What matching reads of a request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attributes<'a> {
    pub(crate) operation: Operation,
    pub(crate) group: &'a str,
    pub(crate) version: &'a str,
    pub(crate) resource: &'a str,
    pub(crate) sub_resource: &'a str,
    /// Empty for cluster-scoped objects (a Namespace included).
    pub(crate) namespace: &'a str,
    pub(crate) name: &'a str,
    /// The object (null on DELETE) and the old object (null on CREATE).
    pub(crate) object: &'a Value,
    pub(crate) old_object: &'a Value,
}

/// What a matcher makes of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Selection {
    /// Not selected.
    No,
    /// Selected as the request came.
    Yes,
    /// Selected only through the request's resource at this other version (`matchPolicy:
    /// Equivalent`): kube-apiserver converts the object to it before evaluating.
    Equivalent(String),
}

impl Attributes<'_> {
    fn is_namespace(&self) -> bool {
        self.group.is_empty() && self.resource == "namespaces"
    }
}

/// A compiled `NamedRuleWithOperations`.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    operations: crate::policy::OperationSet,
    /// What every request its policy may select is compared with, kept in the rule.
    compared: Compared,
    groups: Vec<String>,
    versions: Vec<String>,
    resources: Vec<String>,
    scope: Scope,
    names: Vec<String>,
}

/// A rule's groups, versions and resources (each split at its subresource) as the request path
/// compares them: beside the rule, not a heap string each. A policy's rules are compared on
/// every request of the types it may select, and a name behind a pointer of its own is a cache
/// miss on each such request once the rule has gone cold (most of `map100`'s string
/// comparisons were such misses in perf).
#[derive(Debug, Clone)]
struct Compared {
    groups: smallvec::SmallVec<[Name; 1]>,
    versions: smallvec::SmallVec<[Name; 1]>,
    resources: smallvec::SmallVec<[(Name, Name); 1]>,
}

/// Text of at most [`Name::INLINE`] bytes is held inline; longer text on the heap.
#[derive(Clone)]
enum Name {
    Inline { len: u8, bytes: [u8; Name::INLINE] },
    Heap(Box<str>),
}

impl Name {
    const INLINE: usize = 30;

    fn new(text: &str) -> Name {
        match u8::try_from(text.len()) {
            Ok(len) if text.len() <= Name::INLINE => {
                let mut bytes = [0; Name::INLINE];
                bytes[..text.len()].copy_from_slice(text.as_bytes());
                Name::Inline { len, bytes }
            }
            _ => Name::Heap(text.into()),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Name::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Name::Heap(text) => text.as_bytes(),
        }
    }

    /// Whether it is `text` (or, when `wildcard`, `*`).
    fn is(&self, text: &str, wildcard: bool) -> bool {
        let bytes = self.as_bytes();
        (wildcard && bytes == b"*") || same(bytes, text.as_bytes())
    }
}

/// Byte equality without a call to `memcmp`: the names compared are a few bytes long.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |differ, (x, y)| differ | (x ^ y)) == 0
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Any,
    Cluster,
    Namespaced,
}

impl Rule {
    fn compile(rule: &NamedRule, at: &str, mutating: bool, errors: &mut Vec<FieldError>) -> Self {
        for (list, name) in [
            (&rule.operations, "operations"),
            (&rule.api_groups, "apiGroups"),
            (&rule.api_versions, "apiVersions"),
            (&rule.resources, "resources"),
        ] {
            if list.is_empty() {
                errors.push(FieldError::new(format!("{at}.{name}"), "is required"));
            }
            if list.len() > 1 && list.iter().any(|item| item == "*") {
                errors.push(FieldError::new(
                    format!("{at}.{name}"),
                    "if `*` is present, it must be the only entry",
                ));
            }
        }
        for (index, operation) in rule.operations.iter().enumerate() {
            let allowed: &[&str] = if mutating {
                // kube-apiserver refuses DELETE and CONNECT in a MutatingAdmissionPolicy.
                &["*", "CREATE", "UPDATE"]
            } else {
                &["*", "CREATE", "UPDATE", "DELETE", "CONNECT"]
            };
            if !allowed.contains(&operation.as_str()) {
                errors.push(FieldError::new(
                    format!("{at}.operations[{index}]"),
                    format!(
                        "unsupported value `{operation}`: supported values: {}",
                        allowed.join(", ")
                    ),
                ));
            }
        }
        for (index, resource) in rule.resources.iter().enumerate() {
            if resource.is_empty() || resource.split('/').count() > 2 {
                errors.push(FieldError::new(
                    format!("{at}.resources[{index}]"),
                    "must be a resource, `resource/subresource`, `*`, `*/*` or `*/subresource`",
                ));
            }
        }
        let scope = match rule.scope.as_deref() {
            None | Some("*") => Scope::Any,
            Some("Cluster") => Scope::Cluster,
            Some("Namespaced") => Scope::Namespaced,
            Some(other) => {
                errors.push(FieldError::new(
                    format!("{at}.scope"),
                    format!(
                        "unsupported value `{other}`: supported values: *, Cluster, Namespaced"
                    ),
                ));
                Scope::Any
            }
        };
        let names = |list: &[String]| list.iter().map(|text| Name::new(text)).collect();
        Rule {
            operations: operation_set(&rule.operations),
            compared: Compared {
                groups: names(&rule.api_groups),
                versions: names(&rule.api_versions),
                resources: rule
                    .resources
                    .iter()
                    .map(|written| {
                        let (resource, sub) = written.split_once('/').unwrap_or((written, ""));
                        (Name::new(resource), Name::new(sub))
                    })
                    .collect(),
            },
            groups: rule.api_groups.clone(),
            versions: rule.api_versions.clone(),
            resources: rule.resources.clone(),
            scope,
            names: rule.resource_names.clone(),
        }
    }

    /// Whether the rule matches the request, its resource names included (read first: a
    /// rule for other names is the common miss among rules for the request's type).
    fn matches(&self, request: &Attributes<'_>) -> bool {
        (self.names.is_empty() || self.names.iter().any(|n| n == request.name))
            && self.matches_at(request, request.version)
    }

    /// Whether the rule matches the request's resource at `version`, names aside (the
    /// apiserver does not read them when it matches an equivalent resource).
    fn matches_at(&self, request: &Attributes<'_>, version: &str) -> bool {
        self.compared.versions.iter().any(|v| v.is(version, true))
            && self.matches_but_version(request)
    }

    /// The built-in types (`apiVersion`, `kind`) whose requests the rule may match, at any
    /// version of its resources (`matchPolicy: Equivalent` reaches them all); `None` when the
    /// built-in schema cannot say: a wildcard, a subresource, or a group, resource or version
    /// it does not serve (a custom resource, another Kubernetes version's API).
    fn types(&self, schema: &kanon_schema::Schema, into: &mut Vec<(String, String)>) -> Option<()> {
        let concrete = |list: &[String]| !list.iter().any(|item| item == "*");
        if !concrete(&self.groups) || !concrete(&self.versions) || !concrete(&self.resources) {
            return None;
        }
        for group in &self.groups {
            for resource in &self.resources {
                if resource.contains('/') {
                    return None;
                }
                let kinds: Vec<&kanon_schema::Kind> =
                    schema.kinds_of_resource(group, resource).collect();
                let served = |version: &String| kinds.iter().any(|k| k.version() == version);
                if kinds.is_empty() || !self.versions.iter().all(served) {
                    return None;
                }
                into.extend(
                    kinds
                        .iter()
                        .map(|k| (k.api_version.clone(), k.kind.clone())),
                );
            }
        }
        Some(())
    }

    /// Whether the rule matches the request's resource at some version, names aside: only
    /// then may an equivalent version match it.
    fn matches_but_version(&self, request: &Attributes<'_>) -> bool {
        let Compared {
            groups, resources, ..
        } = &self.compared;
        self.operations.contains(request.operation)
            && groups.iter().any(|group| group.is(request.group, true))
            && resources.iter().any(|(resource, sub)| {
                resource.is(request.resource, true) && sub.is(request.sub_resource, true)
            })
            && match self.scope {
                Scope::Any => true,
                Scope::Cluster => request.is_namespace() || request.namespace.is_empty(),
                Scope::Namespaced => !request.is_namespace() && !request.namespace.is_empty(),
            }
    }
}

/// The types of request an admission policy's rules may select.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reach {
    /// The built-in types (`apiVersion`, `kind`) they may select, each once; `None`: any.
    pub(crate) builtin: Option<Vec<(String, String)>>,
    /// Whether they may select types the built-in schema does not know (custom resources).
    pub(crate) custom: bool,
}

impl Reach {
    /// Every type.
    pub(crate) const ANY: Reach = Reach {
        builtin: None,
        custom: true,
    };
}

/// The operations a rule names (`*`: all; names kanon does not know match nothing).
fn operation_set(written: &[String]) -> crate::policy::OperationSet {
    use crate::policy::OperationSet;
    written.iter().fold(OperationSet::NONE, |set, operation| {
        let named = match operation.as_str() {
            "*" => return OperationSet::ALL,
            "CREATE" => Operation::Create,
            "UPDATE" => Operation::Update,
            "DELETE" => Operation::Delete,
            "CONNECT" => Operation::Connect,
            _ => return set,
        };
        set.union(OperationSet::from_targets(&[named]))
    })
}

/// Compiled `matchConstraints` / `matchResources`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Matcher {
    namespace_selector: Option<LabelMatcher>,
    object_selector: Option<LabelMatcher>,
    rules: Vec<Rule>,
    excluded: Vec<Rule>,
    /// `matchPolicy: Equivalent` (the default).
    equivalent: bool,
}

impl Matcher {
    /// Compiles `written` at `at`. A policy's constraints need resource rules; a binding's
    /// may leave them out (then the policy's alone decide).
    pub(crate) fn compile(
        written: &MatchResources,
        at: &str,
        mutating: bool,
        rules_required: bool,
        errors: &mut Vec<FieldError>,
    ) -> Self {
        if rules_required && written.resource_rules.is_empty() {
            errors.push(FieldError::new(
                format!("{at}.resourceRules"),
                "at least one resource rule is required",
            ));
        }
        if let Some(policy) = written.match_policy.as_deref()
            && !matches!(policy, "Exact" | "Equivalent")
        {
            errors.push(FieldError::new(
                format!("{at}.matchPolicy"),
                format!("unsupported value `{policy}`: supported values: Exact, Equivalent"),
            ));
        }
        let selector = |selector: &Option<_>, name: &str, errors: &mut Vec<FieldError>| {
            selector
                .as_ref()
                .map(|s| LabelMatcher::compile(s, &format!("{at}.{name}"), errors))
                .filter(|m| !m.is_empty())
        };
        let rules = |rules: &[NamedRule], name: &str, errors: &mut Vec<FieldError>| {
            rules
                .iter()
                .enumerate()
                .map(|(i, r)| Rule::compile(r, &format!("{at}.{name}[{i}]"), mutating, errors))
                .collect()
        };
        Matcher {
            namespace_selector: selector(&written.namespace_selector, "namespaceSelector", errors),
            object_selector: selector(&written.object_selector, "objectSelector", errors),
            rules: rules(&written.resource_rules, "resourceRules", errors),
            excluded: rules(
                &written.exclude_resource_rules,
                "excludeResourceRules",
                errors,
            ),
            equivalent: written.match_policy.as_deref() != Some("Exact"),
        }
    }

    /// Whether judging a request needs the labels of its namespace.
    pub(crate) fn reads_namespace(&self, request: &Attributes<'_>) -> bool {
        self.namespace_selector.is_some()
            && !request.is_namespace()
            && !request.namespace.is_empty()
    }

    /// Whether the matcher selects the request; `namespace_labels` are the labels of its
    /// namespace when [`Matcher::reads_namespace`] says they are needed, `versions` the
    /// versions that serve the request's resource (read only under `matchPolicy: Equivalent`,
    /// when no rule matches the request as it came).
    pub(crate) fn selects(
        &self,
        request: &Attributes<'_>,
        namespace_labels: Option<&serde_json::Map<String, Value>>,
        versions: &mut dyn FnMut() -> Vec<String>,
    ) -> Selection {
        if !self.selects_labels(request, namespace_labels) {
            return Selection::No;
        }
        let mut others: Option<Vec<String>> = None;
        // The versions are looked up only when some rule names the request's resource at a
        // version other than the request's, so that it could match through one of them.
        let mut equivalent = |rules: &[Rule]| -> Option<String> {
            let other_version = |rule: &Rule| {
                rule.versions
                    .iter()
                    .any(|v| v == "*" || v != request.version)
            };
            if !self.equivalent
                || !rules
                    .iter()
                    .any(|rule| other_version(rule) && rule.matches_but_version(request))
            {
                return None;
            }
            let others = others.get_or_insert_with(&mut *versions);
            rules.iter().find_map(|rule| {
                others
                    .iter()
                    .filter(|version| *version != request.version)
                    .find(|version| rule.matches_at(request, version))
                    .cloned()
            })
        };
        if self.excluded.iter().any(|r| r.matches(request)) || equivalent(&self.excluded).is_some()
        {
            return Selection::No;
        }
        if self.rules.is_empty() || self.rules.iter().any(|r| r.matches(request)) {
            return Selection::Yes;
        }
        match equivalent(&self.rules) {
            Some(version) => Selection::Equivalent(version),
            None => Selection::No,
        }
    }

    /// Whether the namespace and object selectors hold.
    fn selects_labels(
        &self,
        request: &Attributes<'_>,
        namespace_labels: Option<&serde_json::Map<String, Value>>,
    ) -> bool {
        if let Some(selector) = &self.namespace_selector {
            // A cluster-scoped object that is not a Namespace is never left out by it.
            let holds = if request.is_namespace() {
                let own = if request.object.is_null() {
                    request.old_object
                } else {
                    request.object
                };
                selector.matches(labels_of(own))
            } else if request.namespace.is_empty() {
                true
            } else {
                selector.matches(namespace_labels)
            };
            if !holds {
                return false;
            }
        }
        if let Some(selector) = &self.object_selector {
            let holds = [request.object, request.old_object]
                .into_iter()
                .filter(|o| !o.is_null())
                .any(|o| selector.matches(labels_of(o)));
            if !holds {
                return false;
            }
        }
        true
    }

    /// The types whose requests its rules may select.
    pub(crate) fn reach(&self) -> Reach {
        let Ok(schema) = kanon_schema::Schema::builtin() else {
            return Reach::ANY;
        };
        if self.rules.is_empty() {
            return Reach::ANY;
        }
        let mut types = Vec::new();
        let mut custom = false;
        for rule in &self.rules {
            if rule.types(schema, &mut types).is_some() {
                continue;
            }
            // Groups the built-in schema does not serve are no built-in type's: such a rule
            // reaches only custom resources.
            if rule
                .groups
                .iter()
                .all(|group| group != "*" && !schema.serves_group(group))
            {
                custom = true;
                continue;
            }
            return Reach::ANY;
        }
        types.sort_unstable();
        types.dedup();
        Reach {
            builtin: Some(types),
            custom,
        }
    }

    /// The resource names a request for the built-in type (`api_version`, `kind`) must have
    /// for the matcher to select it, when its rules say: every rule that may match the type's
    /// resource lists names, and none can match it through another version (`matchPolicy:
    /// Exact`, or rules naming only the type's own version), where kube-apiserver reads no
    /// names. `None` when a request of any name may be selected.
    pub(crate) fn names_for(&self, api_version: &str, kind: &str) -> Option<Vec<String>> {
        let schema = kanon_schema::Schema::builtin().ok()?;
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let mut names: Vec<String> = Vec::new();
        for rule in &self.rules {
            let serves = |written: &String| {
                let resource = written.split('/').next().unwrap_or_default();
                resource == "*"
                    || schema
                        .kinds_of_resource(group, resource)
                        .any(|k| k.kind == kind)
            };
            let may_match = rule.groups.iter().any(|g| g == "*" || g == group)
                && rule.resources.iter().any(serves);
            if !may_match {
                continue;
            }
            if rule.names.is_empty()
                || (self.equivalent && !rule.versions.iter().all(|v| v == version))
            {
                return None;
            }
            names.extend(rule.names.iter().cloned());
        }
        if names.is_empty() {
            return None;
        }
        names.sort_unstable();
        names.dedup();
        Some(names)
    }

    /// The operations its rules can match (for the webhook's rules), as kanon's operation set.
    pub(crate) fn operations(&self) -> crate::policy::OperationSet {
        self.rules
            .iter()
            .fold(crate::policy::OperationSet::NONE, |set, rule| {
                set.union(rule.operations)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_compare_as_text_does() {
        let texts = [
            "",
            "*",
            "v1",
            "v2",
            "v1beta1",
            "pods",
            "podz",
            "pods/status",
            "p",
            "x".repeat(31).leak(),
        ];
        for a in texts {
            let name = Name::new(a);
            for b in texts {
                assert_eq!(name.is(b, false), a == b, "{a:?} is {b:?}");
                assert_eq!(
                    name.is(b, true),
                    a == b || a == "*",
                    "{a:?} is {b:?} or a wildcard"
                );
            }
        }
    }

    /// A small deterministic generator (the same cases every run).
    struct Draw(u64);

    impl Draw {
        fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            &from[((self.0 >> 33) as usize) % from.len()]
        }
    }

    /// The requests drawn against: (group, version, resource, kind) of built-in types, one of
    /// them served at two versions.
    const TYPES: &[(&str, &str, &str, &str)] = &[
        ("", "v1", "pods", "Pod"),
        ("", "v1", "configmaps", "ConfigMap"),
        ("apps", "v1", "deployments", "Deployment"),
        (
            "autoscaling",
            "v1",
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
        ),
        (
            "autoscaling",
            "v2",
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
        ),
    ];

    #[test]
    fn a_request_outside_the_names_a_matcher_is_filed_under_is_never_selected() {
        let mut draw = Draw(7);
        let (mut filed, mut left_out) = (0, 0);
        for _ in 0..3000 {
            let rules: Vec<Value> = (0..*draw.pick(&[1, 1, 2, 3]))
                .map(|_| {
                    json!({
                        "apiGroups": draw.pick(&[json!([""]), json!(["apps"]), json!(["autoscaling"]), json!(["*"]), json!(["", "apps"])]),
                        "apiVersions": draw.pick(&[json!(["v1"]), json!(["v2"]), json!(["*"]), json!(["v1", "v2"])]),
                        "resources": draw.pick(&[json!(["pods"]), json!(["deployments"]), json!(["horizontalpodautoscalers"]), json!(["*"]), json!(["pods/status"]), json!(["configmaps", "pods"])]),
                        "resourceNames": draw.pick(&[json!([]), json!(["a"]), json!(["a", "b"]), json!(["c"])]),
                        "operations": draw.pick(&[json!(["*"]), json!(["CREATE"])]),
                    })
                })
                .collect();
            let mut written = json!({"resourceRules": rules});
            if let Some(policy) = draw.pick(&[None, Some("Exact"), Some("Equivalent")]) {
                written["matchPolicy"] = json!(policy);
            }
            let written: MatchResources = serde_json::from_value(written).expect("decodes");
            let matcher = Matcher::compile(&written, "spec", false, true, &mut Vec::new());
            for &(group, version, resource, kind) in TYPES {
                let api_version = match group {
                    "" => version.to_string(),
                    group => format!("{group}/{version}"),
                };
                let Some(names) = matcher.names_for(&api_version, kind) else {
                    continue;
                };
                filed += 1;
                let served: Vec<String> = TYPES
                    .iter()
                    .filter(|t| t.0 == group && t.2 == resource)
                    .map(|t| t.1.to_string())
                    .collect();
                for name in ["a", "b", "c", ""] {
                    for sub_resource in ["", "status"] {
                        for operation in [Operation::Create, Operation::Update] {
                            let object = json!({"metadata": {"name": name}});
                            let request = Attributes {
                                operation,
                                group,
                                version,
                                resource,
                                sub_resource,
                                namespace: "ns",
                                name,
                                object: &object,
                                old_object: &Value::Null,
                            };
                            let selection = matcher.selects(&request, None, &mut || served.clone());
                            if names.iter().any(|n| n == name) {
                                continue;
                            }
                            left_out += 1;
                            assert_eq!(
                                selection,
                                Selection::No,
                                "{written:?} selects {name:?} ({group}/{version} {resource}/{sub_resource}) but files it under {names:?}"
                            );
                        }
                    }
                }
            }
        }
        // The draw reaches both sides: matchers filed under names, and requests they leave out.
        assert!(filed > 300 && left_out > 3000, "{filed} {left_out}");
    }

    #[test]
    fn names_are_required_only_where_no_rule_for_the_type_goes_without_them() {
        let names = |rules: Value, policy: Option<&str>, api_version: &str, kind: &str| {
            let mut written = json!({"resourceRules": rules});
            if let Some(policy) = policy {
                written["matchPolicy"] = json!(policy);
            }
            let written: MatchResources = serde_json::from_value(written).expect("decodes");
            Matcher::compile(&written, "spec", false, true, &mut Vec::new())
                .names_for(api_version, kind)
        };
        let rule = |group: &str, versions: Value, resource: &str, names: Value| {
            json!({"apiGroups": [group], "apiVersions": versions, "resources": [resource],
                   "operations": ["CREATE"], "resourceNames": names})
        };
        let pods = rule("", json!(["v1"]), "pods", json!(["web", "api"]));
        assert_eq!(
            names(json!([pods]), None, "v1", "Pod"),
            Some(vec!["api".to_string(), "web".to_string()])
        );
        // A rule for another type does not count; one for the type without names does.
        let configmaps = rule("", json!(["v1"]), "configmaps", json!([]));
        assert!(names(json!([pods, configmaps]), None, "v1", "Pod").is_some());
        let all_pods = rule("", json!(["v1"]), "pods", json!([]));
        assert_eq!(names(json!([pods, all_pods]), None, "v1", "Pod"), None);
        // Another version of the resource: under Equivalent, kube-apiserver matches it at that
        // version without reading names.
        let hpa = rule(
            "autoscaling",
            json!(["v2"]),
            "horizontalpodautoscalers",
            json!(["h"]),
        );
        let v1 = ("autoscaling/v1", "HorizontalPodAutoscaler");
        assert_eq!(names(json!([hpa]), None, v1.0, v1.1), None);
        // Under Exact it matches no v1 request at all; filed under its names, it still is a
        // candidate for one named so.
        assert_eq!(
            names(json!([hpa]), Some("Exact"), v1.0, v1.1),
            Some(vec!["h".to_string()])
        );
        assert_eq!(
            names(json!([hpa]), Some("Equivalent"), "autoscaling/v2", v1.1),
            Some(vec!["h".to_string()])
        );
        let both = rule(
            "autoscaling",
            json!(["v1", "v2"]),
            "horizontalpodautoscalers",
            json!(["h"]),
        );
        assert_eq!(names(json!([both]), None, "autoscaling/v2", v1.1), None);
        assert_eq!(
            names(json!([both]), Some("Exact"), "autoscaling/v2", v1.1),
            Some(vec!["h".to_string()])
        );
    }
}
