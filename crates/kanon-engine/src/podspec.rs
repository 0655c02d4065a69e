//! Where a kind keeps its pod spec.

use json_patch::jsonptr::Pointer;
use serde_json::{Map, Value};

use crate::pointer::member;

/// A Pod's own spec.
const POD_SPEC: &Pointer = Pointer::from_static("/spec");
/// A CronJob's pod spec.
const CRONJOB_POD_SPEC: &Pointer = Pointer::from_static("/spec/jobTemplate/spec/template/spec");
/// The pod spec of a workload with a pod template.
const TEMPLATE_POD_SPEC: &Pointer = Pointer::from_static("/spec/template/spec");

/// The JSON pointer of the object's pod spec: `/spec` for a Pod, `/spec/jobTemplate/spec/
/// template/spec` for a CronJob, `/spec/template/spec` for workloads with a pod template
/// (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, and custom kinds of that shape).
/// `None` when the object has none.
pub fn pod_spec_pointer(object: &Value) -> Option<&'static str> {
    pod_spec(object).map(|(pointer, _)| pointer.as_str())
}

/// The object's pod spec and its pointer, as [`pod_spec_pointer`] finds it.
pub(crate) fn pod_spec(object: &Value) -> Option<(&'static Pointer, &Value)> {
    let kind = member(object, "kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let candidate = match kind {
        "Pod" => POD_SPEC,
        "CronJob" => CRONJOB_POD_SPEC,
        _ => TEMPLATE_POD_SPEC,
    };
    crate::pointer::find(object, candidate.as_str())
        .filter(|v| v.is_object())
        .map(|spec| (candidate, spec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_the_pod_spec_of_each_kind() {
        let pod = json!({"kind": "Pod", "spec": {"containers": []}});
        let deploy =
            json!({"kind": "Deployment", "spec": {"template": {"spec": {"containers": []}}}});
        let cron = json!({"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {"spec": {}}}}}});
        let custom = json!({"kind": "Rollout", "spec": {"template": {"spec": {}}}});
        let service = json!({"kind": "Service", "spec": {"ports": []}});
        assert_eq!(pod_spec_pointer(&pod), Some("/spec"));
        assert_eq!(pod_spec_pointer(&deploy), Some("/spec/template/spec"));
        assert_eq!(
            pod_spec_pointer(&cron),
            Some("/spec/jobTemplate/spec/template/spec")
        );
        assert_eq!(pod_spec_pointer(&custom), Some("/spec/template/spec"));
        assert_eq!(pod_spec_pointer(&service), None);
    }
}

/// The four template operations, as the helpers take them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edit {
    /// Set (maps) or insert (lists).
    Add,
    /// Set (maps) or replace the matching entries (lists).
    Replace,
    /// Delete keys or matching entries.
    Remove,
    /// Set only what is absent (or null); lists only where there is none.
    Default,
}

impl Edit {
    /// Parses `add`, `replace`, `remove` or `default`.
    pub fn parse(text: &str) -> Result<Edit, String> {
        match text {
            "add" => Ok(Edit::Add),
            "replace" => Ok(Edit::Replace),
            "remove" => Ok(Edit::Remove),
            "default" => Ok(Edit::Default),
            other => Err(format!(
                "unknown operation `{other}`; use add, replace, remove or default"
            )),
        }
    }

    /// The operation's name, as programs pass it.
    pub fn as_str(self) -> &'static str {
        match self {
            Edit::Add => "add",
            Edit::Replace => "replace",
            Edit::Remove => "remove",
            Edit::Default => "default",
        }
    }
}

fn object(value: &Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

/// A value as text: a string as it is, anything else as JSON.
fn text(value: &Value) -> std::borrow::Cow<'_, str> {
    match value.as_str() {
        Some(text) => std::borrow::Cow::Borrowed(text),
        None => std::borrow::Cow::Owned(value.to_string()),
    }
}

/// A container's `resources` with the template's requests and limits set (add, replace), set
/// where the container has none of that name (default) or their keys removed (remove). Empty
/// sections are dropped.
pub fn resources_with(current: &Value, template: &Value, edit: Edit) -> Value {
    let mut result = object(current);
    for (section, value) in resources_sections(current, template, edit) {
        match value {
            Some(value) => {
                result.insert(section.to_string(), value);
            }
            None => {
                result.shift_remove(section);
            }
        }
    }
    Value::Object(result)
}

/// The sections of [`resources_with`]'s result that the template edits, in order, each with
/// its new value (`None`: dropped, none left); the other keys stay as they are.
pub fn resources_sections(
    current: &Value,
    template: &Value,
    edit: Edit,
) -> Vec<(&'static str, Option<Value>)> {
    let mut sections = Vec::new();
    for section in ["requests", "limits"] {
        let Some(entries) = member(template, section).and_then(Value::as_object) else {
            continue;
        };
        let now = member(current, section);
        if now.is_none() && edit != Edit::Remove && !entries.is_empty() {
            // Every entry set into an empty section: the template's section, as it is.
            sections.push((section, Some(Value::Object(entries.clone()))));
            continue;
        }
        let mut target = now.map(object).unwrap_or_default();
        for (name, quantity) in entries {
            match edit {
                Edit::Add | Edit::Replace => {
                    target.insert(name.clone(), quantity.clone());
                }
                // The container's own value stays (`cpu: 200m` is not a default's to change).
                Edit::Default if crate::pointer::absent_in(&target, name) => {
                    target.insert(name.clone(), quantity.clone());
                }
                Edit::Default => {}
                Edit::Remove => {
                    target.shift_remove(name);
                }
            }
        }
        sections.push((
            section,
            (!target.is_empty()).then_some(Value::Object(target)),
        ));
    }
    sections
}

/// A container's `resources` with each request set to its limit × factor, rounded up to whole
/// millicores (CPU) or units (bytes), on add and replace (on default only where the container
/// has no such request); or removed (remove). Resources without a limit are left alone.
pub fn oversold(current: &Value, factors: &Value, edit: Edit) -> Result<Value, String> {
    let mut result = object(current);
    // Taken out of `result` (not copied again); put back under the same key, in the same place.
    let mut requests = match result.get_mut("requests") {
        Some(Value::Object(requests)) => std::mem::take(requests),
        _ => Map::new(),
    };
    let limits = member(current, "limits").and_then(Value::as_object);
    oversell_into(&mut requests, limits, text_factors(factors), edit)?;
    if requests.is_empty() {
        result.shift_remove("requests");
    } else {
        result.insert("requests".to_string(), Value::Object(requests));
    }
    Ok(Value::Object(result))
}

/// The factors of a JSON object (resource name → factor), each to be read where needed.
fn text_factors(factors: &Value) -> impl Iterator<Item = (&str, Factor<'_>)> {
    factors
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, factor)| (name.as_str(), Factor::Text(factor)))
}

/// A factor of [`oversold`]: its text, read when it is needed, or read already.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Factor<'f> {
    /// As the template or a program gives it.
    Text(&'f Value),
    /// Read (a template's factors are checked when it is compiled).
    Read(crate::quantity::Decimal),
}

/// The `requests` of [`oversold`]'s result (`None` when it drops them: none left), with factors
/// given one by one (resource name, factor), each read
/// only where a limit needs it, as the program helper reads them.
pub(crate) fn oversold_requests_by<'f>(
    current: &Value,
    factors: impl Iterator<Item = (&'f str, Factor<'f>)>,
    edit: Edit,
) -> Result<Option<Value>, String> {
    let limits = member(current, "limits").and_then(Value::as_object);
    let mut requests = match member(current, "requests").and_then(Value::as_object) {
        Some(requests) => requests.clone(),
        // Room for a request per limit at once, rather than grown entry by entry.
        None => Map::with_capacity(limits.map_or(0, Map::len)),
    };
    oversell_into(&mut requests, limits, factors, edit)?;
    Ok((!requests.is_empty()).then_some(Value::Object(requests)))
}

/// Sets each request to its limit × factor, rounded up to whole millicores (CPU) or units
/// (bytes), on add and replace, and on default where there is no such request; removes the
/// requests named on remove. Resources without a limit are left alone.
fn oversell_into<'f>(
    requests: &mut Map<String, Value>,
    limits: Option<&Map<String, Value>>,
    factors: impl Iterator<Item = (&'f str, Factor<'f>)>,
    edit: Edit,
) -> Result<(), String> {
    for (name, factor) in factors {
        match edit {
            Edit::Remove => {
                requests.shift_remove(name);
            }
            Edit::Default if !crate::pointer::absent_in(requests, name) => {}
            Edit::Add | Edit::Replace | Edit::Default => {
                let Some(limit) = limits.and_then(|limits| crate::pointer::entry(limits, name))
                else {
                    continue;
                };
                let quantity: crate::quantity::Quantity = text(limit)
                    .parse()
                    .map_err(|e: crate::quantity::QuantityError| format!("limits.{name}: {e}"))?;
                let decimal = match factor {
                    Factor::Read(decimal) => decimal,
                    Factor::Text(factor) => {
                        let factor_text = text(factor);
                        crate::quantity::Decimal::parse(&factor_text)
                            .ok_or_else(|| format!("`{factor_text}` is not a decimal factor"))?
                    }
                };
                // Requests are whole millicores for CPU and whole units (bytes) otherwise.
                let unit = if name == "cpu" {
                    1_000_000
                } else {
                    1_000_000_000
                };
                let scaled = quantity
                    .scaled(decimal)
                    .ok_or_else(|| format!("limits.{name}: overflow"))?
                    .rounded_up(unit);
                requests.insert(name.to_string(), Value::String(scaled.canonical_text()));
            }
        }
    }
    Ok(())
}

/// Appends the entries of `wanted` that `list` does not hold yet, in order.
fn append_missing(list: &mut Vec<Value>, wanted: Vec<Value>) {
    for t in wanted {
        if !list.contains(&t) {
            list.push(t);
        }
    }
}

/// Whether an existing toleration is the one a template toleration designates: same key, and
/// same effect where the template gives one; for removal also the same value where given (a
/// replacement is how a value changes, so it ignores the value).
fn toleration_matches(existing: &Value, template: &Value, edit: Edit) -> bool {
    let text = |v: &Value, k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    text(existing, "key") == text(template, "key")
        && (text(template, "effect").is_empty()
            || text(existing, "effect") == text(template, "effect"))
        && (edit != Edit::Remove
            || text(template, "value").is_empty()
            || text(existing, "value") == text(template, "value"))
}

/// A pod spec's tolerations edited by the template's: `add` appends those not already present,
/// `replace` swaps each matching entry for its template (or sets the whole list when nothing
/// matches), `remove` drops the matching entries, `default` sets the template's only where
/// there are none (no list, or an empty one). `null` when the result is empty.
pub fn tolerations_with(current: &Value, template: &Value, edit: Edit) -> Value {
    let mut list: Vec<Value> = current.as_array().cloned().unwrap_or_default();
    let wanted: Vec<Value> = template.as_array().cloned().unwrap_or_default();
    match edit {
        Edit::Add => append_missing(&mut list, wanted),
        // A pod spec's own tolerations, whatever they are, are not a default's to extend.
        Edit::Default if !list.is_empty() => {}
        Edit::Default => append_missing(&mut list, wanted),
        Edit::Replace => {
            let any_match = wanted
                .iter()
                .any(|t| list.iter().any(|e| toleration_matches(e, t, edit)));
            if any_match {
                for entry in list.iter_mut() {
                    if let Some(t) = wanted.iter().find(|t| toleration_matches(entry, t, edit)) {
                        *entry = t.clone();
                    }
                }
            } else {
                list = wanted;
            }
        }
        Edit::Remove => list.retain(|e| !wanted.iter().any(|t| toleration_matches(e, t, edit))),
    }
    if list.is_empty() {
        Value::Null
    } else {
        Value::Array(list)
    }
}

/// Edits one list of affinity terms: add appends missing terms, replace sets the list, remove
/// drops equal terms (or the whole list when the template's is empty).
fn terms_with(current: Option<&Value>, template: &Value, edit: Edit) -> Option<Value> {
    let mut list: Vec<Value> = current
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let wanted: Vec<Value> = template.as_array().cloned().unwrap_or_default();
    match edit {
        // `default` sets a whole affinity only where there is none (see affinity_with).
        Edit::Add | Edit::Default => append_missing(&mut list, wanted),
        Edit::Replace => list = wanted,
        Edit::Remove if wanted.is_empty() => list.clear(),
        Edit::Remove => list.retain(|e| !wanted.contains(e)),
    }
    (!list.is_empty()).then_some(Value::Array(list))
}

/// A pod spec's affinity edited by the template's, term list by term list (node, pod and
/// anti-affinity; required and preferred); `default` sets it as `add` would only where the pod
/// spec has none (no affinity, or `{}`), and leaves any other as it is. `null` when the result
/// is empty.
pub fn affinity_with(current: &Value, template: &Value, edit: Edit) -> Value {
    if edit == Edit::Default
        && let Some(present) = current.as_object().filter(|a| !a.is_empty())
    {
        return Value::Object(present.clone());
    }
    let mut affinity = object(current);
    for (kind, sections) in template.as_object().into_iter().flatten() {
        let mut target = affinity.get(kind).map(object).unwrap_or_default();
        for (section, wanted) in sections.as_object().into_iter().flatten() {
            // Node affinity's required section wraps its terms in nodeSelectorTerms.
            let (edited, wrap) = match wanted.get("nodeSelectorTerms") {
                Some(terms) => (
                    terms_with(
                        target.get(section).and_then(|s| s.get("nodeSelectorTerms")),
                        terms,
                        edit,
                    ),
                    true,
                ),
                None => (terms_with(target.get(section), wanted, edit), false),
            };
            match edited {
                Some(list) if wrap => {
                    // Built directly: `json!` would serialize the list into a new value.
                    let mut wrapped = Map::new();
                    wrapped.insert("nodeSelectorTerms".to_string(), list);
                    target.insert(section.clone(), Value::Object(wrapped));
                }
                Some(list) => {
                    target.insert(section.clone(), list);
                }
                None => {
                    target.shift_remove(section);
                }
            }
        }
        if target.is_empty() {
            affinity.shift_remove(kind);
        } else {
            affinity.insert(kind.clone(), Value::Object(target));
        }
    }
    if affinity.is_empty() {
        Value::Null
    } else {
        Value::Object(affinity)
    }
}

#[cfg(test)]
mod edit_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resources_set_and_remove() {
        let current = json!({"limits": {"cpu": "1"}, "requests": {"cpu": "100m"}});
        let t = json!({"requests": {"cpu": "500m", "memory": "1Gi"}});
        assert_eq!(
            resources_with(&current, &t, Edit::Add),
            json!({"limits": {"cpu": "1"}, "requests": {"cpu": "500m", "memory": "1Gi"}})
        );
        assert_eq!(
            resources_with(&current, &json!({"requests": {"cpu": "0"}}), Edit::Remove),
            json!({"limits": {"cpu": "1"}})
        );
        assert_eq!(
            resources_with(&json!(null), &t, Edit::Replace),
            json!({"requests": {"cpu": "500m", "memory": "1Gi"}})
        );
    }

    #[test]
    fn oversell_is_exact() {
        let current =
            json!({"limits": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "2Gi"}});
        let factors = json!({"cpu": "0.25", "memory": "0.5"});
        assert_eq!(
            oversold(&current, &factors, Edit::Add).unwrap(),
            json!({"limits": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "2Gi"}, "requests": {"cpu": "125m", "memory": "512Mi"}})
        );
        let with_requests =
            json!({"limits": {"cpu": "1"}, "requests": {"cpu": "1", "memory": "1Gi"}});
        assert_eq!(
            oversold(&with_requests, &json!({"cpu": "0.5"}), Edit::Remove).unwrap(),
            json!({"limits": {"cpu": "1"}, "requests": {"memory": "1Gi"}})
        );
        // No limit: nothing to derive a request from.
        assert_eq!(
            oversold(&json!({}), &factors, Edit::Add).unwrap(),
            json!({})
        );
        let err = oversold(&json!({"limits": {"cpu": "lots"}}), &factors, Edit::Add).unwrap_err();
        assert!(
            err.starts_with("limits.cpu: `lots` is not a Kubernetes quantity"),
            "{err}"
        );
    }

    #[test]
    fn tolerations_add_replace_remove() {
        let a = json!({"key": "a", "operator": "Exists", "effect": "NoSchedule"});
        let b = json!({"key": "b", "operator": "Equal", "value": "1", "effect": "NoExecute"});
        let b2 = json!({"key": "b", "operator": "Equal", "value": "2", "effect": "NoExecute"});
        let current = json!([a, b]);
        assert_eq!(
            tolerations_with(&current, &json!([a]), Edit::Add),
            json!([a, b])
        );
        assert_eq!(
            tolerations_with(&json!(null), &json!([a]), Edit::Add),
            json!([a])
        );
        assert_eq!(
            tolerations_with(
                &current,
                &json!([{"key": "b", "operator": "Equal", "value": "2", "effect": "NoExecute"}]),
                Edit::Replace
            ),
            json!([a, b2])
        );
        let c = json!({"key": "c", "operator": "Exists"});
        assert_eq!(
            tolerations_with(&current, &json!([c]), Edit::Replace),
            json!([c])
        );
        assert_eq!(
            tolerations_with(&current, &json!([{"key": "a"}]), Edit::Remove),
            json!([b])
        );
        assert_eq!(
            tolerations_with(&json!([a]), &json!([{"key": "a"}]), Edit::Remove),
            json!(null)
        );
    }

    #[test]
    fn affinity_term_lists() {
        let term = |v: &str| json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": [v]}]});
        let current = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term("a")]}}});
        let t = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term("b")]}}});
        assert_eq!(
            affinity_with(&current, &t, Edit::Add),
            json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term("a"), term("b")]}}})
        );
        assert_eq!(affinity_with(&current, &t, Edit::Replace), t);
        let remove_a = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term("a")]}}});
        assert_eq!(
            affinity_with(&current, &remove_a, Edit::Remove),
            json!(null)
        );
        let anti = json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "podAffinityTerm": {"topologyKey": "zone"}}]}});
        assert_eq!(
            affinity_with(&current, &anti, Edit::Add)["podAntiAffinity"],
            anti["podAntiAffinity"]
        );
    }
}
