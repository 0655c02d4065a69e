//! PolicyExceptions: compiled once per change, like policies. At evaluation, a policy (or some of
//! its rules) that an exception names is skipped for the objects the exception selects, while it
//! has not expired; every exemption is reported. Which namespaces may hold exceptions is the
//! caller's choice (an operator's flag): the engine applies the exceptions it is given.

use std::collections::HashMap;
use std::sync::Arc;

use kanon_api::{EXCEPTION_KIND, PolicyException, PolicyKind};
use serde_json::Value;

use crate::error::{FieldError, InvalidPolicy};
use crate::language::cel::compile::{Named, RuleEnv, Site};
use crate::language::cel::validate::{Inputs, matches};
use crate::language::cel::{Ceiling, MATCH_CONDITIONS_LIMIT, PolicyBudget};
use crate::policy::{CompiledPolicy, PolicyId, PolicyRules};
use crate::request::Request;
use crate::rule::RuleError;
use crate::selector::{ObjectView, ResourceMatcher};

/// A policy an exception exempts from, and which of its rules (none: all).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exempted {
    /// The policy.
    pub policy: PolicyId,
    /// Names of its rules; empty: the whole policy.
    pub rules: Vec<String>,
}

/// A PolicyException in the form evaluation uses.
#[derive(Clone, Debug)]
pub struct CompiledException {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// `PolicyException/<namespace>/<name>`: how messages and metrics name it.
    pub label: Arc<str>,
    /// What it exempts from.
    pub exempted: Vec<Exempted>,
    selectors: Vec<ResourceMatcher>,
    conditions: Vec<Named>,
    /// When it stops applying, in Unix seconds; `None`: never.
    pub expires_at: Option<i64>,
    /// `expiresAt` as written, for messages.
    pub expires_at_text: Option<String>,
    /// Why, as written.
    pub reason: String,
}

/// `at` in Unix seconds, the unit of `expiresAt` and [`Evaluation::with_now`]: what callers
/// that read the clock hand the engine (0 before 1970).
///
/// [`Evaluation::with_now`]: crate::Evaluation::with_now
pub fn unix_seconds(at: std::time::SystemTime) -> i64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Parses an RFC 3339 time (`2026-12-31T23:59:59Z`) into Unix seconds, as `expiresAt` is read.
pub fn parse_time(text: &str) -> Result<i64, String> {
    kanon_cel::Timestamp::parse(text)
        .map(|t| t.unix_seconds())
        .map_err(|_| format!("must be an RFC 3339 time such as 2026-12-31T23:59:59Z, not `{text}`"))
}

/// Whether `document` is a PolicyException of kanon's API.
pub fn is_exception(document: &Value) -> bool {
    document.get("apiVersion").and_then(Value::as_str) == Some(kanon_api::API_VERSION)
        && document.get("kind").and_then(Value::as_str) == Some(EXCEPTION_KIND)
}

/// Decodes and compiles a PolicyException document; the error lists every problem by field
/// path (unknown fields, type errors, selectors, match conditions, `expiresAt`, policy
/// references).
pub fn compile_exception(document: &Value) -> Result<CompiledException, InvalidPolicy> {
    let namespace = document
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let name = document
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let label: Arc<str> = format!("{EXCEPTION_KIND}/{namespace}/{name}").into();
    let invalid = |errors| InvalidPolicy {
        policy: label.to_string(),
        errors,
    };
    let (exception, mut errors) =
        crate::policy::decode_reporting_unknown::<PolicyException>(None, document)
            .map_err(invalid)?;
    if name.is_empty() {
        errors.push(FieldError::new("metadata.name", "is required"));
    }
    if namespace.is_empty() {
        errors.push(FieldError::new(
            "metadata.namespace",
            "is required: a PolicyException is namespaced",
        ));
    }
    let spec = &exception.spec;
    if spec.policies.is_empty() {
        errors.push(FieldError::new(
            "spec.policies",
            "name at least one policy to exempt from",
        ));
    }
    let mut exempted = Vec::with_capacity(spec.policies.len());
    for (i, policy) in spec.policies.iter().enumerate() {
        let at = format!("spec.policies[{i}]");
        let Some(kind) = PolicyKind::from_kind(&policy.kind) else {
            errors.push(FieldError::new(
                format!("{at}.kind"),
                format!(
                    "`{}` is not a kanon policy kind: ClusterValidatePolicy, ValidatePolicy, ClusterOverridePolicy or OverridePolicy",
                    policy.kind
                ),
            ));
            continue;
        };
        if policy.name.is_empty() {
            errors.push(FieldError::new(format!("{at}.name"), "is required"));
        }
        match (kind.is_namespaced(), &policy.namespace) {
            (true, None) => errors.push(FieldError::new(
                format!("{at}.namespace"),
                format!("is required for a {kind}"),
            )),
            (false, Some(_)) => errors.push(FieldError::new(
                format!("{at}.namespace"),
                format!("a {kind} has no namespace"),
            )),
            _ => {}
        }
        for (r, rule) in policy.rules.iter().enumerate() {
            if rule.is_empty() {
                errors.push(FieldError::new(
                    format!("{at}.rules[{r}]"),
                    "a rule name is required",
                ));
            } else if let Some((family, _)) = place_of(rule)
                && family != rules_field(kind)
            {
                errors.push(FieldError::new(
                    format!("{at}.rules[{r}]"),
                    format!(
                        "a {kind}'s rules are `{}[N]` by place (or their `name`), not `{rule}`",
                        rules_field(kind)
                    ),
                ));
            }
        }
        exempted.push(Exempted {
            policy: PolicyId::new(kind, policy.namespace.clone(), policy.name.clone()),
            rules: policy.rules.clone(),
        });
    }
    if spec.resource_selectors.is_empty() {
        errors.push(FieldError::new(
            "spec.resourceSelectors",
            "select the objects to exempt (at least one selector): an exception for every object would switch the policy off",
        ));
    }
    let selectors = spec
        .resource_selectors
        .iter()
        .enumerate()
        .map(|(i, s)| {
            ResourceMatcher::compile(s, &format!("spec.resourceSelectors[{i}]"), &mut errors)
        })
        .collect();
    let env = RuleEnv::validation(Site::KanonRule);
    let conditions = env.match_conditions(&spec.match_conditions, "spec", &mut errors);
    let expires_at = spec
        .expires_at
        .as_deref()
        .and_then(|text| match parse_time(text) {
            Ok(at) => Some(at),
            Err(e) => {
                errors.push(FieldError::new("spec.expiresAt", e));
                None
            }
        });
    if spec.reason.trim().is_empty() {
        errors.push(FieldError::new(
            "spec.reason",
            "say why the objects are exempt (and who decided)",
        ));
    }
    if !errors.is_empty() {
        return Err(invalid(errors));
    }
    Ok(CompiledException {
        namespace,
        name,
        label,
        exempted,
        selectors,
        conditions,
        expires_at,
        expires_at_text: spec.expires_at.clone(),
        reason: spec.reason.clone(),
    })
}

impl CompiledException {
    /// Whether it has expired at `now` (Unix seconds). Without a clock (`None`), an exception
    /// that expires is taken as expired: it never applies longer than its author meant.
    pub fn expired(&self, now: Option<i64>) -> bool {
        match (self.expires_at, now) {
            (None, _) => false,
            (Some(at), Some(now)) => now >= at,
            (Some(_), None) => true,
        }
    }

    /// What is wrong with it against the policies `policy` finds by identity (a set's
    /// [`PolicySet::get`](crate::PolicySet::get), or a source's own map): a named policy that
    /// does not exist (with the nearest of `known` of its kind and namespace, when one is
    /// close), or a named rule the policy does not have (with the rule names it has, or that
    /// it has none), as `(reason, message)` for its status. Empty when it names only what
    /// exists.
    pub fn missing<'p>(
        &self,
        policy: impl Fn(&PolicyId) -> Option<&'p CompiledPolicy>,
        known: &[&PolicyId],
    ) -> Vec<(&'static str, String)> {
        let mut missing = Vec::new();
        for exempted in &self.exempted {
            let wanted = &exempted.policy;
            let Some(policy) = policy(wanted) else {
                let alike = known.iter().filter(|id| {
                    id.kind == wanted.kind
                        && id.namespace == wanted.namespace
                        && id.binding.is_none()
                });
                let meant = kanon_schema::nearest(&wanted.name, alike.map(|id| id.name.as_str()));
                let hint = meant
                    .map(|name| {
                        let mut id = wanted.clone();
                        id.name = name.to_owned();
                        format!("; did you mean {id}?")
                    })
                    .unwrap_or_default();
                missing.push(("PolicyNotFound", format!("{wanted} does not exist{hint}")));
                continue;
            };
            if let Some(message) = self.meets_nothing_of(policy) {
                missing.push(("SelectsNothing", message));
            }
            let names = rule_names(policy);
            let field = rules_field(policy.id.kind);
            let count = rule_count(policy);
            for rule in &exempted.rules {
                if is_rule(policy, rule) {
                    continue;
                }
                if place_of(rule).is_some() {
                    missing.push((
                        "RuleNotFound",
                        format!(
                            "{wanted} has no rule `{rule}`: it has {count} rule{} ({field}[0] to {field}[{}])",
                            if count == 1 { "" } else { "s" },
                            count.saturating_sub(1)
                        ),
                    ));
                    continue;
                }
                let hint = if names.is_empty() {
                    format!(
                        " (none of its rules has a `name`: exempt one by place, `{field}[0]` to \
                         `{field}[{}]`, name the rule in the policy, or exempt the whole policy by \
                         leaving `rules` out)",
                        count.saturating_sub(1)
                    )
                } else {
                    let listed = names
                        .iter()
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(", ");
                    match kanon_schema::nearest(rule, names.iter().copied()) {
                        Some(meant) => format!(" (its rules: {listed}); did you mean `{meant}`?"),
                        None => format!(" (its rules: {listed})"),
                    }
                };
                missing.push((
                    "RuleNotFound",
                    format!("{wanted} has no rule named `{rule}`{hint}"),
                ));
            }
        }
        missing
    }

    /// Why none of its selectors can select what `policy` judges, nor a workload whose pod
    /// template it judges, nor an owner of what it judges; `None` when one can (or the policy
    /// judges every kind).
    fn meets_nothing_of(&self, policy: &CompiledPolicy) -> Option<String> {
        if policy.selectors.is_empty() || policy.admission.is_some() {
            return None;
        }
        let judged: Vec<(&str, &str)> = policy
            .selectors
            .iter()
            .map(|s| (s.api_version.as_str(), s.kind.as_str()))
            .collect();
        let reaches = |selector: &ResourceMatcher| {
            let kind = (selector.api_version.as_str(), selector.kind.as_str());
            judged.iter().any(|judged| {
                *judged == kind
                    || judged.1 == "*"
                    || kind.1 == "*"
                    || crate::owners::owns(kind, *judged)
                    || (policy.pod_templates
                        && *judged == ("v1", "Pod")
                        && crate::workload::WORKLOADS
                            .iter()
                            .any(|w| (w.api_version, w.kind) == kind))
            })
        };
        if self.selectors.iter().any(reaches) {
            return None;
        }
        Some(format!(
            "its resourceSelectors ({}) select nothing {} judges ({}): not those kinds, a \
             workload whose pod template it judges, nor an owner of them; it exempts nothing",
            kinds_text(&self.selectors),
            policy.id,
            kinds_text(&policy.selectors),
        ))
    }

    /// Whether it exempts the request's object (`view`): a selector selects it and every
    /// match condition holds. A condition that cannot be evaluated keeps the exception from
    /// applying (the error is returned for a warning); so does a spent budget: the conditions
    /// spend at most kube-apiserver's budget for match conditions
    /// ([`MATCH_CONDITIONS_LIMIT`]), within what all exceptions may spend on the review
    /// (`ceiling`).
    fn selects(
        &self,
        view: &ObjectView<'_>,
        request: &Request,
        object: &Value,
        (ceiling, interrupted): Metered<'_>,
    ) -> Result<bool, RuleError> {
        if !self.selectors.iter().any(|s| s.matches(view)) {
            return Ok(false);
        }
        if self.conditions.is_empty() {
            return Ok(true);
        }
        let inputs = Inputs {
            object,
            old_object: request.old_object.as_ref().unwrap_or(&Value::Null),
            request: &request.info,
            namespace_object: &Value::Null,
            fifth: &Value::Null,
        };
        let mut activation = inputs.activation(&[]);
        let mut budget = PolicyBudget::of(MATCH_CONDITIONS_LIMIT, ceiling);
        matches(
            &self.conditions,
            &mut activation,
            &mut budget.meter(interrupted),
        )
    }
}

/// What else an exception may select to exempt the object judged: the workload whose pod
/// template it is, and the object's owners (see [`crate::owners`]).
#[derive(Clone, Copy, Default)]
pub(crate) struct Beyond<'b> {
    /// The workload's request and object, when its pod template is judged as a Pod.
    pub(crate) workload: Option<(&'b Request, &'b Value)>,
    /// The object's owners, nearest first.
    pub(crate) owners: &'b [Arc<Value>],
}

/// What exceptions' match conditions spend from on one review, and when to stop: the review's
/// ceiling for exceptions and the deadline.
pub(crate) type Metered<'a> = (&'a Ceiling, &'a (dyn Fn() -> bool + Sync));

/// `apiVersion kind` of each selector, in order, a kind named again left out.
fn kinds_text(selectors: &[ResourceMatcher]) -> String {
    let mut kinds: Vec<String> = selectors
        .iter()
        .map(|s| format!("{} {}", s.api_version, s.kind))
        .collect();
    kinds.dedup();
    kinds.join(", ")
}

/// The field a policy of `kind` holds its rules in, by which a rule is named by place
/// (`validateRules[0]`).
fn rules_field(kind: PolicyKind) -> &'static str {
    if kind.is_override() {
        "overrideRules"
    } else {
        "validateRules"
    }
}

/// A rule named by place: `validateRules[2]` → `("validateRules", 2)`.
fn place_of(rule: &str) -> Option<(&str, usize)> {
    let (family, rest) = rule.split_once('[')?;
    let index = rest.strip_suffix(']')?;
    if !matches!(family, "validateRules" | "overrideRules")
        || index.is_empty()
        || !index.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    Some((family, index.parse().ok()?))
}

/// How many rules a policy has.
fn rule_count(policy: &CompiledPolicy) -> usize {
    match &policy.rules {
        PolicyRules::Override(rules) => rules.len(),
        PolicyRules::Validate { rules, .. } => rules.len(),
    }
}

/// Whether `rule` (a name, or a place) is one of the policy's rules.
fn is_rule(policy: &CompiledPolicy, rule: &str) -> bool {
    match place_of(rule) {
        Some((family, index)) => {
            family == rules_field(policy.id.kind) && index < rule_count(policy)
        }
        None => rule_names(policy).contains(&rule),
    }
}

/// The names of a policy's rules.
fn rule_names(policy: &CompiledPolicy) -> Vec<&str> {
    match &policy.rules {
        PolicyRules::Override(rules) => rules.iter().filter_map(|r| r.name.as_deref()).collect(),
        PolicyRules::Validate { rules, .. } => {
            rules.iter().filter_map(|r| r.name.as_deref()).collect()
        }
    }
}

/// The exceptions of a policy set, by the policy they name.
#[derive(Debug, Default)]
pub(crate) struct Exceptions {
    by_policy: HashMap<PolicyId, Vec<(Arc<CompiledException>, usize)>>,
    all: Vec<Arc<CompiledException>>,
    /// The kinds the exceptions' selectors name (`apiVersion`, `kind`): whether an owner of a
    /// request's object can matter is decided on them, before any owner is looked up.
    selected_kinds: Vec<(String, String)>,
}

impl Exceptions {
    /// Whether there are none.
    pub(crate) fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    pub(crate) fn build(mut all: Vec<Arc<CompiledException>>) -> Self {
        all.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let mut by_policy: HashMap<PolicyId, Vec<(Arc<CompiledException>, usize)>> = HashMap::new();
        for exception in &all {
            for (i, exempted) in exception.exempted.iter().enumerate() {
                by_policy
                    .entry(exempted.policy.clone())
                    .or_default()
                    .push((exception.clone(), i));
            }
        }
        let mut selected_kinds: Vec<(String, String)> = all
            .iter()
            .flat_map(|exception| &exception.selectors)
            .map(|s| (s.api_version.clone(), s.kind.clone()))
            .collect();
        selected_kinds.sort();
        selected_kinds.dedup();
        Exceptions {
            by_policy,
            all,
            selected_kinds,
        }
    }

    pub(crate) fn all(&self) -> &[Arc<CompiledException>] {
        &self.all
    }

    /// Whether some exception selects a kind that owns objects of `kind` (`(apiVersion,
    /// kind)`), so that a request's owners could decide whether it is exempt.
    pub(crate) fn select_owners_of(&self, kind: (&str, &str)) -> bool {
        self.selected_kinds.iter().any(|(api_version, selected)| {
            selected == "*" || crate::owners::owns((api_version, selected), kind)
        })
    }

    /// What the exceptions in force exempt `policy` from on this request: the exceptions that
    /// apply, each with the rules it exempts (empty: the whole policy), and the errors of
    /// exceptions that could not be matched. An exception also applies when it selects one of
    /// `beyond`'s objects: the workload whose pod template is judged, the object's owners.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn for_policy<'e>(
        &'e self,
        policy: &CompiledPolicy,
        view: &ObjectView<'_>,
        request: &Request,
        object: &Value,
        beyond: Beyond<'_>,
        now: Option<i64>,
        metered: Metered<'_>,
    ) -> Exemption<'e> {
        let mut exemption = Exemption::default();
        if self.by_policy.is_empty() {
            return exemption;
        }
        let Some(candidates) = self.by_policy.get(&policy.id) else {
            return exemption;
        };
        // The object judged, the workload whose template it is, and its owners: the first
        // that an exception selects (or fails to match) decides.
        let targets: Vec<(ObjectView<'_>, &Request, &Value)> =
            std::iter::once((*view, request, object))
                .chain(
                    beyond
                        .workload
                        .map(|(request, object)| (request.view(object), request, object)),
                )
                .chain(beyond.owners.iter().filter_map(|owner| {
                    ObjectView::of_object(owner).map(|view| (view, request, view.object))
                }))
                .collect();
        let selects = |exception: &CompiledException| {
            for (view, request, object) in &targets {
                match exception.selects(view, request, object, metered) {
                    Ok(false) => {}
                    decided => return decided,
                }
            }
            Ok(false)
        };
        for (exception, index) in candidates {
            if exception.expired(now) {
                // Said when it would still select the object: a denial it no longer prevents
                // names it.
                if now.is_some()
                    && let Ok(true) = selects(exception)
                {
                    exemption.expired.push(exception.as_ref());
                }
                continue;
            }
            match selects(exception) {
                Ok(true) => {
                    let named = &exception.exempted[*index].rules;
                    let rules: Vec<&str> = match named.as_slice() {
                        [] => Vec::new(),
                        named => {
                            // Only rules the policy has: one that names none of them exempts
                            // nothing (its status says which do not exist).
                            let present: Vec<&str> = named
                                .iter()
                                .map(String::as_str)
                                .filter(|r| is_rule(policy, r))
                                .collect();
                            if present.is_empty() {
                                continue;
                            }
                            present
                        }
                    };
                    exemption.applied.push((exception.as_ref(), rules));
                }
                Ok(false) => {}
                Err(error) => exemption.errors.push((exception.as_ref(), error)),
            }
        }
        exemption
    }
}

/// What exceptions do to one policy on one request.
#[derive(Debug, Default)]
pub(crate) struct Exemption<'e> {
    /// The exceptions that apply, with the rules each exempts (empty: all).
    pub(crate) applied: Vec<(&'e CompiledException, Vec<&'e str>)>,
    /// Exceptions whose match conditions failed to evaluate (not applied).
    pub(crate) errors: Vec<(&'e CompiledException, RuleError)>,
    /// Exceptions that select the object but have expired.
    pub(crate) expired: Vec<&'e CompiledException>,
}

impl Exemption<'_> {
    /// Whether the whole policy is exempt.
    pub(crate) fn whole(&self) -> bool {
        self.applied.iter().any(|(_, rules)| rules.is_empty())
    }

    /// Whether the rule at `index` of its policy's rules, named `name` if it has one, is
    /// exempt (by name or by place).
    pub(crate) fn exempts_rule(&self, name: Option<&str>, index: usize) -> bool {
        self.applied.iter().any(|(_, rules)| {
            rules.iter().any(|rule| match place_of(rule) {
                Some((_, place)) => place == index,
                None => name == Some(*rule),
            })
        })
    }
}
