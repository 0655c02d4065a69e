//! The warnings kube-controller-manager writes in a ValidatingAdmissionPolicy's
//! `status.typeChecking`, word for word (k8s.io/apiserver's `validating.TypeChecker`): each
//! validation's `expression` and `messageExpression` is compiled again with `object` and
//! `oldObject` typed as each kind the policy's `matchConstraints` name (at most 10, in the
//! order of group, version and kind; rules with a wildcard group or version, and wildcard or
//! subresource resources, name none), `params` typed as the `paramKind`, and every compile error
//! is a warning for that kind. The policy works the same whatever they say: at run time
//! `object` is `dyn`.
//!
//! Where kanon does not know a schema the cluster would resolve (a custom kind whose
//! CustomResourceDefinition kanon was not given), that kind is not checked, and `params` of an
//! unknown `paramKind` stay `dyn`: kanon then says less than the cluster, never more.

use std::collections::BTreeSet;
use std::sync::Arc;

use kanon_cel::{Env, Type};
use kanon_schema::Kinds;

use super::decl_type::DeclTypes;
use super::manifest::{MatchResources, ValidatingPolicySpec};
use crate::error::FieldError;
use crate::language::cel::compile::{RuleEnv, Site};
use kanon_cel::composition::variable_type;

/// kube-controller-manager checks at most this many kinds of one policy.
const MAX_KINDS: usize = 10;

/// A kind to check against, ordered as kube-controller-manager orders them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Gvk {
    group: String,
    version: String,
    kind: String,
}

impl Gvk {
    fn api_version(&self) -> String {
        match self.group.as_str() {
            "" => self.version.clone(),
            group => format!("{group}/{}", self.version),
        }
    }
}

impl std::fmt::Display for Gvk {
    /// Go's `schema.GroupVersionKind` as `%v` prints it: `/v1, Kind=Pod`, `apps/v1, Kind=Deployment`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}, Kind={}", self.group, self.version, self.kind)
    }
}

/// The `status.typeChecking.expressionWarnings` kube-controller-manager would write for a
/// ValidatingAdmissionPolicy with `spec`: each a field path (`spec.validations[0].expression`)
/// and the warning's text.
pub(crate) fn warnings(spec: &ValidatingPolicySpec, kinds: &Kinds) -> Vec<FieldError> {
    let checked = kinds_to_check(spec.match_constraints.as_ref(), kinds);
    if checked.is_empty() {
        return Vec::new();
    }
    let envs: Vec<(Gvk, Env)> = checked
        .into_iter()
        .map(|gvk| {
            let env = environment(spec, &gvk, kinds);
            (gvk, env)
        })
        .collect();
    let mut warnings = Vec::new();
    for (index, validation) in spec.validations.iter().enumerate() {
        let at = format!("spec.validations[{index}]");
        let mut sources = vec![("expression", validation.expression.as_str())];
        if let Some(message) = validation.message_expression.as_deref()
            && !message.is_empty()
        {
            sources.push(("messageExpression", message));
        }
        for (field, source) in sources {
            let found: Vec<String> = envs
                .iter()
                .filter_map(|(gvk, env)| {
                    env.compile(source)
                        .err()
                        .map(|issues| format!("{gvk}: {issues}\n"))
                })
                .collect();
            if !found.is_empty() {
                warnings.push(FieldError::new(format!("{at}.{field}"), found.join("\n")));
            }
        }
    }
    warnings
}

/// The environment the policy's expressions are checked in against `gvk`: kube-apiserver's for
/// admission policies with `object` and `oldObject` of the kind's type, `params` of the
/// `paramKind`'s type, and the policy's variables typed in order.
fn environment(spec: &ValidatingPolicySpec, gvk: &Gvk, kinds: &Kinds) -> Env {
    let mut types = DeclTypes::new(kinds.clone());
    let object = types
        .add_root(&gvk.kind, &gvk.api_version(), &gvk.kind)
        .unwrap_or(Type::Dyn);
    // A paramKind whose schema is not found leaves `params` undeclared in the check. kanon
    // knows every built-in kind; a custom one it was not given may be served in the cluster,
    // so its `params` stay `dyn` rather than be called undeclared.
    let undeclared = spec.param_kind.as_ref().is_some_and(|param_kind| {
        kinds.is_builtin_group(&param_kind.api_version)
            && kinds
                .kind(&param_kind.api_version, &param_kind.kind)
                .is_none()
    });
    let params = spec.param_kind.as_ref().and_then(|param_kind| {
        // A kind of the same name as the object's is another type in the cluster: the root
        // names differ there by the nanosecond each was made at.
        let root = if param_kind.kind == gvk.kind {
            format!("{}Params", param_kind.kind)
        } else {
            param_kind.kind.clone()
        };
        types.add_root(&root, &param_kind.api_version, &param_kind.kind)
    });
    let types = Arc::new(types);
    let mut rule = RuleEnv::validation(Site::AdmissionPolicy);
    rule.with_env(|env| {
        env.add_object_types(types);
        env.declare_variable("object", object.clone());
        env.declare_variable("oldObject", object);
        if let Some(params) = params {
            env.declare_variable("params", params);
        }
        if undeclared {
            env.remove_variable("params");
        }
    });
    let mut env = rule.into_env();
    for variable in &spec.variables {
        let kind = env
            .compile(&variable.expression)
            .map_or(Type::Dyn, |program| variable_type(program.result_type()));
        env.declare_variable(&kanon_cel::composition::declared_name(&variable.name), kind);
    }
    env
}

/// The kinds kube-controller-manager checks a policy against: those its `matchConstraints`'
/// resource rules name without wildcards, at most [`MAX_KINDS`], sorted.
fn kinds_to_check(constraints: Option<&MatchResources>, kinds: &Kinds) -> Vec<Gvk> {
    let Some(constraints) = constraints else {
        return Vec::new();
    };
    let mut found = BTreeSet::new();
    let mut count = 0;
    for rule in &constraints.resource_rules {
        // A wildcard among the groups or versions gives the whole rule up.
        if rule.api_groups.is_empty() || rule.api_groups.iter().any(|g| g.contains('*')) {
            continue;
        }
        if rule.api_versions.is_empty() || rule.api_versions.iter().any(|v| v.contains('*')) {
            continue;
        }
        let mut resources: Vec<&String> = rule
            .resources
            .iter()
            .filter(|r| !r.contains('*') && !r.contains('/'))
            .collect();
        if resources.is_empty() {
            continue;
        }
        let mut groups: Vec<&String> = rule.api_groups.iter().collect();
        let mut versions: Vec<&String> = rule.api_versions.iter().collect();
        groups.sort();
        versions.sort();
        resources.sort();
        for group in &groups {
            for version in &versions {
                for resource in &resources {
                    for gvk in kinds_for(kinds, group, version, resource) {
                        found.insert(gvk);
                        // Counted per resolution, not per new kind, as the controller counts.
                        count += 1;
                        if count == MAX_KINDS {
                            return found.into_iter().collect();
                        }
                    }
                }
            }
        }
    }
    found.into_iter().collect()
}

/// The kinds kube-controller-manager's REST mapper finds for `resource` (plural, or the
/// singular: the kind in lower case) at `group`/`version`, among those kanon knows. The core
/// group (`""`) is no group to the mapper: the resource at that version in any group is found
/// (`events` at `v1` is `v1` Event and `events.k8s.io/v1` Event), the core group's first.
fn kinds_for(kinds: &Kinds, group: &str, version: &str, resource: &str) -> Vec<Gvk> {
    let mut found: Vec<Gvk> = Vec::new();
    for schema in [Some(kinds.builtin_schema()), kinds.custom_schema()]
        .into_iter()
        .flatten()
    {
        for kind in schema.kinds() {
            let named = kind.resource == resource || kind.kind.to_lowercase() == resource;
            let in_group = group.is_empty() || kind.group() == group;
            if !named || !in_group || kind.version() != version {
                continue;
            }
            // Through `Kinds::kind`, so a custom kind in a built-in group is not taken.
            if kinds.kind(&kind.api_version, &kind.kind).is_none() {
                continue;
            }
            let gvk = Gvk {
                group: kind.group().to_owned(),
                version: version.to_owned(),
                kind: kind.kind.clone(),
            };
            if !found.contains(&gvk) {
                found.push(gvk);
            }
        }
    }
    found.sort_by_key(|gvk| !gvk.group.is_empty());
    found
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn checked(spec: serde_json::Value) -> Vec<(String, String)> {
        let spec: ValidatingPolicySpec = serde_json::from_value(spec).unwrap();
        let kinds = Kinds::builtin().unwrap();
        warnings(&spec, &kinds)
            .into_iter()
            .map(|w| (w.field, w.message))
            .collect()
    }

    fn rules(resources: &[(&str, &str)]) -> serde_json::Value {
        let rules: Vec<_> = resources
            .iter()
            .map(|(group, resource)| {
                json!({"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": [resource]})
            })
            .collect();
        json!({"resourceRules": rules})
    }

    // Each expected text is what kube-controller-manager 1.35.8 wrote in the policy's
    // status.typeChecking, with the nanosecond it adds to the kind's type name left out.

    #[test]
    fn a_field_the_kind_does_not_have_and_a_mistyped_comparison_warn_as_the_cluster_writes() {
        let found = checked(json!({
            "matchConstraints": rules(&[("", "pods")]),
            "validations": [
                {"expression": "object.spec.containerz.size() > 0",
                 "messageExpression": "'m' + object.metadata.namee"},
                {"expression": "object.metadata.creationTimestamp == ''"},
                {"expression": "size(object.spec.containers + object.spec.initContainers) > 0"},
                {"expression": "object.metadata.namespace == 'x' && object.metadata.labels['a'] == 'b'"},
            ],
        }));
        assert_eq!(
            found,
            [
                (
                    "spec.validations[0].expression".to_owned(),
                    "/v1, Kind=Pod: ERROR: <input>:1:12: undefined field 'containerz'\n | object.spec.containerz.size() > 0\n | ...........^\n".to_owned()
                ),
                (
                    "spec.validations[0].messageExpression".to_owned(),
                    "/v1, Kind=Pod: ERROR: <input>:1:22: undefined field 'namee'\n | 'm' + object.metadata.namee\n | .....................^\n".to_owned()
                ),
                (
                    "spec.validations[1].expression".to_owned(),
                    "/v1, Kind=Pod: ERROR: <input>:1:35: found no matching overload for '_==_' applied to '(timestamp, string)'\n | object.metadata.creationTimestamp == ''\n | ..................................^\n".to_owned()
                ),
                (
                    "spec.validations[2].expression".to_owned(),
                    "/v1, Kind=Pod: ERROR: <input>:1:29: found no matching overload for '_+_' applied to '(list(Pod.spec.containers.@idx), list(Pod.spec.initContainers.@idx))'\n | size(object.spec.containers + object.spec.initContainers) > 0\n | ............................^\n".to_owned()
                ),
            ]
        );
    }

    #[test]
    fn a_quantity_is_not_exposed_and_int_or_string_is_dyn() {
        let found = checked(json!({
            "matchConstraints": rules(&[("", "pods")]),
            "validations": [
                {"expression": "object.spec.containers[0].resources.limits['cpu'] == '1'"},
                {"expression": "object.spec.containers[0].livenessProbe.httpGet.port == 'a' || object.spec.containers[0].livenessProbe.httpGet.port == 1"},
            ],
        }));
        assert_eq!(
            found,
            [(
                "spec.validations[0].expression".to_owned(),
                "/v1, Kind=Pod: ERROR: <input>:1:36: undefined field 'limits'\n | object.spec.containers[0].resources.limits['cpu'] == '1'\n | ...................................^\n".to_owned()
            )]
        );
    }

    #[test]
    fn each_kind_is_checked_in_the_controllers_order_and_joined_as_it_joins_them() {
        let found = checked(json!({
            "matchConstraints": rules(&[("", "pods"), ("", "configmaps")]),
            "validations": [{"expression": "object.data.size() > 0",
                             "messageExpression": "'m' + object.metadata.namee"}],
        }));
        assert_eq!(
            found,
            [
                (
                    "spec.validations[0].expression".to_owned(),
                    "/v1, Kind=Pod: ERROR: <input>:1:7: undefined field 'data'\n | object.data.size() > 0\n | ......^\n".to_owned()
                ),
                (
                    "spec.validations[0].messageExpression".to_owned(),
                    "/v1, Kind=ConfigMap: ERROR: <input>:1:22: undefined field 'namee'\n | 'm' + object.metadata.namee\n | .....................^\n\n/v1, Kind=Pod: ERROR: <input>:1:22: undefined field 'namee'\n | 'm' + object.metadata.namee\n | .....................^\n".to_owned()
                ),
            ]
        );
    }

    #[test]
    fn variables_of_object_or_optional_types_are_dyn_as_the_composition_declares_them() {
        let found = checked(json!({
            "matchConstraints": rules(&[("", "pods")]),
            "variables": [
                {"name": "o", "expression": "object.?spec"},
                {"name": "u", "expression": "request.userInfo"},
                {"name": "s", "expression": "object.spec"},
                {"name": "l", "expression": "[request.kind]"},
            ],
            "validations": [
                {"expression": "variables.o + 1 > 0 && variables.u.usernamee == '' && variables.l[0].x == 1"},
                {"expression": "variables.s.containerz == 1 && object.spec.nodeName == null && has(object.spec.nodeNamee)"},
                {"expression": "object.?spec.?containerz.orValue(1) == 1"},
            ],
        }));
        assert_eq!(
            found,
            [
                (
                    "spec.validations[1].expression".to_owned(),
                    "/v1, Kind=Pod: ERROR: <input>:1:53: found no matching overload for '_==_' applied to '(string, null)'\n | variables.s.containerz == 1 && object.spec.nodeName == null && has(object.spec.nodeNamee)\n | ....................................................^\nERROR: <input>:1:67: undefined field 'nodeNamee'\n | variables.s.containerz == 1 && object.spec.nodeName == null && has(object.spec.nodeNamee)\n | ..................................................................^\n".to_owned()
                ),
                (
                    "spec.validations[2].expression".to_owned(),
                    "/v1, Kind=Pod: ERROR: <input>:1:13: undefined field 'containerz'\n | object.?spec.?containerz.orValue(1) == 1\n | ............^\n".to_owned()
                ),
            ]
        );
    }

    #[test]
    fn wildcards_and_subresources_name_no_kind_and_ten_kinds_at_most_are_checked() {
        let spec = |constraints| {
            json!({"matchConstraints": constraints,
                   "validations": [{"expression": "object.x == 1"}]})
        };
        for constraints in [
            json!({"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["v1"], "resources": ["pods"]}]}),
            json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["*"], "resources": ["pods"]}]}),
            json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["*", "pods/status"]}]}),
            json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["nothings"]}]}),
        ] {
            assert_eq!(checked(spec(constraints.clone())), [], "{constraints}");
        }
        let eleven = [
            "configmaps",
            "endpoints",
            "events",
            "limitranges",
            "namespaces",
            "nodes",
            "persistentvolumeclaims",
            "persistentvolumes",
            "pods",
            "podtemplates",
            "replicationcontrollers",
        ];
        let found = checked(spec(
            json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": eleven}]}),
        ));
        let kinds: Vec<&str> = found[0]
            .1
            .lines()
            .filter_map(|line| line.split_once(", Kind="))
            .map(|(_, rest)| rest.split(':').next().unwrap())
            .collect();
        // `events` in the core group's rule is also events.k8s.io's Event (the REST mapper
        // takes `""` for any group), so the tenth kind found is Pod's and PodTemplate is left
        // out; then sorted by group, version and kind.
        assert_eq!(
            kinds,
            [
                "ConfigMap",
                "Endpoints",
                "Event",
                "LimitRange",
                "Namespace",
                "Node",
                "PersistentVolume",
                "PersistentVolumeClaim",
                "Pod",
                "Event"
            ]
        );
        assert!(
            found[0]
                .1
                .contains("\n\nevents.k8s.io/v1, Kind=Event: ERROR")
        );
    }

    #[test]
    fn params_have_the_param_kinds_type_and_a_schema_cut_at_its_circle() {
        let found = checked(json!({
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": rules(&[("", "pods")]),
            "validations": [
                {"expression": "params.data.x == 'a' && params.dataa == 1"},
                {"expression": "params.metadata == object.metadata"},
            ],
        }));
        assert_eq!(
            found,
            [
                (
                    "spec.validations[0].expression".to_owned(),
                    "/v1, Kind=Pod: ERROR: <input>:1:31: undefined field 'dataa'\n | params.data.x == 'a' && params.dataa == 1\n | ..............................^\n".to_owned()
                ),
                (
                    "spec.validations[1].expression".to_owned(),
                    "/v1, Kind=Pod: ERROR: <input>:1:17: found no matching overload for '_==_' applied to '(ConfigMap.metadata, Pod.metadata)'\n | params.metadata == object.metadata\n | ................^\n".to_owned()
                ),
            ]
        );
        let expression = "object.spec.versions[0].schema.openAPIV3Schema.properties['a'].properties['b'].type == 1 && object.spec.versions[0].schema.openAPIV3Schema.properties['a'].x == 1";
        let found = checked(json!({
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apiextensions.k8s.io"],
                "apiVersions": ["v1"], "resources": ["customresourcedefinitions"]}]},
            "validations": [{"expression": expression}],
        }));
        assert_eq!(
            found,
            [(
                "spec.validations[0].expression".to_owned(),
                format!(
                    "apiextensions.k8s.io/v1, Kind=CustomResourceDefinition: ERROR: <input>:1:63: undefined field 'properties'\n | {expression}\n | {}^\nERROR: <input>:1:155: undefined field 'x'\n | {expression}\n | {}^\n",
                    ".".repeat(62),
                    ".".repeat(154)
                )
            )]
        );
    }

    #[test]
    fn params_of_a_kind_no_schema_is_found_for() {
        let spec = |api_version: &str| {
            json!({
                "paramKind": {"apiVersion": api_version, "kind": "Setting"},
                "matchConstraints": rules(&[("", "pods")]),
                "validations": [{"expression": "params.x == 1 && object.y == 1"}],
            })
        };
        // A custom kind kanon was not given may be served in the cluster: kanon says nothing of
        // `params` (the cluster, which has no such kind here, calls it undeclared).
        assert_eq!(
            checked(spec("example.com/v1")),
            [(
                "spec.validations[0].expression".to_owned(),
                "/v1, Kind=Pod: ERROR: <input>:1:24: undefined field 'y'\n | params.x == 1 && object.y == 1\n | .......................^\n".to_owned()
            )]
        );
        // A built-in group has no such kind anywhere: `params` is undeclared, as in the cluster.
        assert_eq!(
            checked(spec("v1")),
            [(
                "spec.validations[0].expression".to_owned(),
                "/v1, Kind=Pod: ERROR: <input>:1:1: undeclared reference to 'params' (in container '')\n | params.x == 1 && object.y == 1\n | ^\nERROR: <input>:1:24: undefined field 'y'\n | params.x == 1 && object.y == 1\n | .......................^\n".to_owned()
            )]
        );
    }
}
