use super::*;
use crate::admission::BadReview;
use kanon_engine::PolicyOutcome;
use kanon_engine::{Decision, PolicyResult};
use serde_json::json;

fn decided(allowed: bool, patch: bool, results: Vec<PolicyResult>) -> Reply {
    let patch: json_patch::Patch = if patch {
        serde_json::from_value(json!([{"op": "add", "path": "/a", "value": 1}])).unwrap()
    } else {
        json_patch::Patch(Vec::new())
    };
    let decision = Decision {
        allowed,
        messages: if allowed {
            vec![]
        } else {
            vec!["no".to_string()]
        },
        warnings: vec![],
        audit_annotations: Default::default(),
        status_reason: None,
        applied_policies: results.iter().map(|r| r.policy.to_string()).collect(),
        patch,
        patched: None,
        policy_results: results,
        exceptions: vec![],
        findings: None,
        admission_denied: false,
        beyond_reading: false,
    };
    Reply {
        status: 200,
        body: Vec::new(),
        uid: Some("u".into()),
        outcome: Outcome::Decided(Box::new(decision)),
        request: None,
        read_again: false,
    }
}

fn result(policy: &str, outcome: PolicyOutcome) -> PolicyResult {
    PolicyResult {
        policy: policy.into(),
        outcome,
    }
}

/// Observes `reply` as the answer to a Pod's creation.
fn pod_created(metrics: &Metrics, webhook: WebhookKind, reply: &Reply) {
    metrics.observe_review(webhook, reply, Some(Operation::Create), Some("Pod"), 0.0);
}

/// The value of the sample line `name{labels}` (labels as encoded, in order).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series).then(|| value.parse().unwrap())
    })
}

#[test]
fn reviews_read_again_are_counted_by_webhook_and_kind() {
    let metrics = Metrics::new();
    let once = decided(true, true, vec![]);
    let again = Reply {
        read_again: true,
        ..once.clone()
    };
    for reply in [&once, &again, &again] {
        pod_created(&metrics, WebhookKind::Mutating, reply);
    }
    let text = metrics.encode();
    assert_eq!(
        sample(
            &text,
            "kanon_reviews_read_again_total{webhook=\"mutate\",kind=\"Pod\"}"
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "kanon_admission_requests_total{webhook=\"mutate\",operation=\"CREATE\",kind=\"Pod\",result=\"patched\"}"
        ),
        Some(3.0),
        "{text}"
    );
}

#[test]
fn exemptions_are_counted_by_exception_and_policy() {
    let metrics = Metrics::new();
    let mut reply = decided(
        true,
        false,
        vec![result("ClusterValidatePolicy/p", PolicyOutcome::Exempted)],
    );
    if let Outcome::Decided(decision) = &mut reply.outcome {
        decision.exceptions.push(kanon_engine::AppliedException {
            exception: "PolicyException/ops/legacy".into(),
            policy: "ClusterValidatePolicy/p".into(),
            rules: vec![],
        });
    }
    pod_created(&metrics, WebhookKind::Validating, &reply);
    pod_created(&metrics, WebhookKind::Validating, &reply);
    let text = metrics.encode();
    assert_eq!(
        sample(
            &text,
            "kanon_exceptions_applied_total{exception=\"PolicyException/ops/legacy\",policy=\"ClusterValidatePolicy/p\"}"
        ),
        Some(2.0),
        "{text}"
    );
    // An exempted policy still met the request.
    assert_eq!(
        sample(
            &text,
            "kanon_policy_evaluations_total{policy=\"ClusterValidatePolicy/p\"}"
        ),
        Some(2.0),
        "{text}"
    );
}

/// A tenant writes more exceptions than the bound: the first pairs keep their series, the
/// rest count as `other` under their policy, and the series stop growing.
#[test]
fn exception_labels_are_a_bounded_set() {
    let metrics = Metrics::new();
    let observe = |exception: &str, policy: &str| {
        let mut reply = decided(true, false, vec![result(policy, PolicyOutcome::Exempted)]);
        if let Outcome::Decided(decision) = &mut reply.outcome {
            decision.exceptions.push(kanon_engine::AppliedException {
                exception: exception.into(),
                policy: policy.into(),
                rules: vec![],
            });
        }
        pod_created(&metrics, WebhookKind::Validating, &reply);
    };
    let series = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("kanon_exceptions_applied_total{"))
            .map(|l| l.rsplit_once(' ').map_or(l, |(s, _)| s).to_string())
            .collect()
    };
    // Each exception exempts from two policies: two pairs each.
    let exceptions = MAX_EXCEPTION_SERIES / 2 + 50;
    for n in 0..exceptions {
        for policy in ["ClusterValidatePolicy/a", "ClusterValidatePolicy/b"] {
            observe(&format!("PolicyException/tenant/e{n}"), policy);
        }
    }
    // A pair counted before the bound keeps its series.
    observe("PolicyException/tenant/e0", "ClusterValidatePolicy/a");
    let text = metrics.encode();
    let seen = series(&text);
    // The bound, plus `other` under each of the two policies.
    assert_eq!(seen.len(), MAX_EXCEPTION_SERIES + 2, "{seen:?}");
    assert_eq!(
        sample(
            &text,
            r#"kanon_exceptions_applied_total{exception="PolicyException/tenant/e0",policy="ClusterValidatePolicy/a"}"#
        ),
        Some(2.0)
    );
    for policy in ["ClusterValidatePolicy/a", "ClusterValidatePolicy/b"] {
        assert_eq!(
            sample(
                &text,
                &format!(
                    r#"kanon_exceptions_applied_total{{exception="other",policy="{policy}"}}"#
                )
            ),
            Some(50.0),
            "{policy}"
        );
    }
    assert!(!text.contains(&format!("e{}\"", exceptions - 1)), "{text}");
}

#[test]
fn kind_labels_are_a_bounded_set() {
    let metrics = Metrics::new();
    let allowed = decided(true, false, vec![]);
    let observe = |kind: &str| {
        metrics.observe_review(
            WebhookKind::Validating,
            &allowed,
            Some(Operation::Create),
            Some(kind),
            0.0,
        )
    };
    let kinds = |text: &str| -> HashSet<String> {
        text.lines()
            .filter(|l| l.starts_with("kanon_admission_requests_total{"))
            .filter_map(|l| l.split("kind=\"").nth(1)?.split('"').next())
            .map(str::to_string)
            .collect()
    };
    metrics.set_selected_kinds(["Widget".to_string()]);
    // What a sender chooses is not echoed: free text becomes `other`.
    observe("Pod");
    observe("password=hunter2 {\"x\"}");
    observe(&"K".repeat(64));
    for n in 0..MAX_OTHER_KIND_LABELS + 50 {
        observe(&format!("Kind{n}"));
    }
    // Kinds the policies select keep their own value after any number of junk kinds, and
    // so do kanon's own and the built-in ones, which no policy names when it selects every
    // type.
    observe("Widget");
    observe("Deployment");
    observe("ClusterValidatePolicy");
    let text = metrics.encode();
    assert!(!text.contains("hunter2"), "{text}");
    let seen = kinds(&text);
    for kind in [
        "Pod",
        "Widget",
        "Deployment",
        "ClusterValidatePolicy",
        "other",
    ] {
        assert!(seen.contains(kind), "{kind}: {seen:?}");
    }
    assert_eq!(seen.len(), MAX_OTHER_KIND_LABELS + 5, "{seen:?}");
    let other = sample(
        &text,
        r#"kanon_admission_requests_total{webhook="validate",operation="CREATE",kind="other",result="allowed"}"#,
    );
    // The free text, the 64-character kind and the 50 kinds past the bound.
    assert_eq!(other, Some(52.0));
    // A new policy set selects a kind that was counted as `other`: from then on it has
    // its own value.
    metrics.set_selected_kinds(["Gadget".to_string()]);
    observe("Gadget");
    assert!(kinds(&metrics.encode()).contains("Gadget"));
}

#[test]
fn counts_reviews_by_result() {
    let metrics = Metrics::new();
    let ops = Some(Operation::Create);
    let pod = Some("Pod");
    metrics.observe_review(
        WebhookKind::Mutating,
        &decided(true, true, vec![]),
        ops,
        pod,
        0.001,
    );
    metrics.observe_review(
        WebhookKind::Mutating,
        &decided(true, true, vec![]),
        ops,
        pod,
        0.002,
    );
    metrics.observe_review(
        WebhookKind::Mutating,
        &decided(true, false, vec![]),
        ops,
        pod,
        0.0001,
    );
    // The validating webhook never patches.
    metrics.observe_review(
        WebhookKind::Validating,
        &decided(true, true, vec![]),
        ops,
        pod,
        0.1,
    );
    metrics.observe_review(
        WebhookKind::Validating,
        &decided(false, false, vec![]),
        Some(Operation::Update),
        Some("Deployment"),
        0.2,
    );
    metrics.observe_review(
        WebhookKind::Validating,
        &Reply::invalid(None, BadReview::Empty),
        None,
        None,
        0.0,
    );
    metrics.observe_review(
        WebhookKind::Mutating,
        &Reply::too_large(10),
        None,
        None,
        0.0,
    );

    let text = metrics.encode();
    let requests = |labels: &str| {
        sample(
            &text,
            &format!("kanon_admission_requests_total{{{labels}}}"),
        )
    };
    assert_eq!(
        requests(r#"webhook="mutate",operation="CREATE",kind="Pod",result="patched""#),
        Some(2.0)
    );
    assert_eq!(
        requests(r#"webhook="mutate",operation="CREATE",kind="Pod",result="allowed""#),
        Some(1.0)
    );
    assert_eq!(
        requests(r#"webhook="validate",operation="CREATE",kind="Pod",result="allowed""#),
        Some(1.0)
    );
    assert_eq!(
        requests(r#"webhook="validate",operation="UPDATE",kind="Deployment",result="denied""#),
        Some(1.0)
    );
    assert_eq!(
        requests(r#"webhook="validate",operation="",kind="",result="invalid""#),
        Some(1.0)
    );
    assert_eq!(
        requests(r#"webhook="mutate",operation="",kind="",result="too_large""#),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"kanon_admission_duration_seconds_count{webhook="mutate"}"#
        ),
        Some(4.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"kanon_admission_duration_seconds_bucket{le="0.0001",webhook="mutate"}"#
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"kanon_admission_duration_seconds_count{webhook="validate"}"#
        ),
        Some(3.0)
    );
}

#[test]
fn counts_what_each_policy_did() {
    let metrics = Metrics::new();
    let results = vec![
        result(
            "ClusterOverridePolicy/a",
            PolicyOutcome::Mutated { patched: true },
        ),
        result(
            "OverridePolicy/ns/b",
            PolicyOutcome::Mutated { patched: false },
        ),
        result("ClusterValidatePolicy/c", PolicyOutcome::Rejected),
        result("ValidatePolicy/ns/d", PolicyOutcome::Passed),
        result(
            "ClusterValidatePolicy/e",
            PolicyOutcome::Failed {
                ignored: true,
                reason: "timed_out",
            },
        ),
        result(
            "ClusterValidatePolicy/e",
            PolicyOutcome::Failed {
                ignored: false,
                reason: "cel",
            },
        ),
    ];
    metrics.observe_review(
        WebhookKind::Mutating,
        &decided(false, false, results),
        Some(Operation::Create),
        Some("Pod"),
        0.01,
    );
    let text = metrics.encode();
    let value = |series: &str| sample(&text, series);
    assert_eq!(
        value(r#"kanon_policy_evaluations_total{policy="ClusterOverridePolicy/a"}"#),
        Some(1.0)
    );
    assert_eq!(
        value(r#"kanon_policy_evaluations_total{policy="ValidatePolicy/ns/d"}"#),
        Some(1.0)
    );
    assert_eq!(
        value(r#"kanon_policy_evaluations_total{policy="ClusterValidatePolicy/e"}"#),
        Some(2.0)
    );
    assert_eq!(
        value(r#"kanon_policy_patches_total{policy="ClusterOverridePolicy/a"}"#),
        Some(1.0)
    );
    assert_eq!(
        value(r#"kanon_policy_patches_total{policy="OverridePolicy/ns/b"}"#),
        None
    );
    assert_eq!(
        value(r#"kanon_policy_rejections_total{policy="ClusterValidatePolicy/c"}"#),
        Some(1.0)
    );
    assert_eq!(
        value(
            r#"kanon_policy_errors_total{policy="ClusterValidatePolicy/e",ignored="true",reason="timed_out"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            r#"kanon_policy_errors_total{policy="ClusterValidatePolicy/e",ignored="false",reason="cel"}"#
        ),
        Some(1.0)
    );
    // An invalid review names no policy.
    metrics.observe_review(
        WebhookKind::Mutating,
        &Reply::invalid(None, BadReview::Empty),
        None,
        None,
        0.0,
    );
    assert_eq!(
        sample(
            &metrics.encode(),
            r#"kanon_policy_evaluations_total{policy="ClusterOverridePolicy/a"}"#
        ),
        Some(1.0)
    );
}

/// Counters are cached by the address of a policy's label: the same label (a policy met
/// again, or the same policy in a newly loaded set, with a label of its own) counts in the
/// one series of that policy, and a cache emptied when full loses no count.
#[test]
fn a_policy_counts_in_one_series_whatever_its_label_copy() {
    let metrics = Metrics::new();
    let shared: Arc<str> = Arc::from("ClusterOverridePolicy/a");
    let results = |label: &Arc<str>| {
        vec![PolicyResult {
            policy: label.clone(),
            outcome: PolicyOutcome::Mutated { patched: true },
        }]
    };
    let observe = |results: Vec<PolicyResult>| {
        metrics.observe_review(
            WebhookKind::Mutating,
            &decided(true, true, results),
            Some(Operation::Create),
            Some("Pod"),
            0.001,
        )
    };
    observe(results(&shared));
    observe(results(&shared));
    // The same policy reloaded: the same text in another allocation.
    observe(results(&Arc::from("ClusterOverridePolicy/a")));
    // Many other policies: the cache is emptied on the way.
    for i in 0..MAX_CACHED_POLICIES + 10 {
        observe(results(&Arc::from(format!("ClusterOverridePolicy/x{i}"))));
    }
    observe(results(&shared));
    let text = metrics.encode();
    for series in ["evaluations", "patches"] {
        assert_eq!(
            sample(
                &text,
                &format!(r#"kanon_policy_{series}_total{{policy="ClusterOverridePolicy/a"}}"#)
            ),
            Some(4.0),
            "{series}"
        );
    }
    let cached = metrics
        .policy_counters
        .by_label
        .read()
        .map(|cache| cache.len())
        .unwrap_or_default();
    assert!(cached <= MAX_CACHED_POLICIES, "{cached} cached");
}

#[test]
fn gauges_and_reload_failures() {
    let metrics = Metrics::new();
    let text = metrics.encode();
    assert_eq!(sample(&text, "kanon_ready"), Some(0.0));
    assert_eq!(sample(&text, "kanon_policies"), Some(0.0));
    metrics.policies_loaded(7);
    metrics.set_ready(true);
    metrics.reload_failed("directory");
    metrics.reload_failed("directory");
    metrics.reload_failed("cluster");
    let text = metrics.encode();
    assert_eq!(sample(&text, "kanon_ready"), Some(1.0));
    assert_eq!(sample(&text, "kanon_policies"), Some(7.0));
    assert_eq!(
        sample(
            &text,
            r#"kanon_policy_reload_failures_total{source="directory"}"#
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"kanon_policy_reload_failures_total{source="cluster"}"#
        ),
        Some(1.0)
    );
    metrics.set_ready(false);
    assert_eq!(sample(&metrics.encode(), "kanon_ready"), Some(0.0));
}

#[test]
fn encoding_is_line_by_line_openmetrics() {
    let metrics = Metrics::new();
    metrics.observe_review(
        WebhookKind::Validating,
        &decided(
            false,
            false,
            vec![
                result("ClusterValidatePolicy/c", PolicyOutcome::Rejected),
                result(
                    "ClusterOverridePolicy/a",
                    PolicyOutcome::Mutated { patched: true },
                ),
                result(
                    "ClusterValidatePolicy/e",
                    PolicyOutcome::Failed {
                        ignored: false,
                        reason: "program",
                    },
                ),
            ],
        ),
        Some(Operation::Create),
        Some("Pod"),
        0.003,
    );
    metrics.policies_loaded(1);
    metrics.set_ready(true);
    metrics.reload_failed("directory");
    let text = metrics.encode();
    // Families without a sample are left out; every family has one here.
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "{text}");
    let mut types = std::collections::BTreeMap::new();
    for line in &lines[..lines.len() - 1] {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut words = rest.splitn(3, ' ');
            let keyword = words.next().unwrap();
            let name = words.next().unwrap();
            assert!(
                matches!(keyword, "HELP" | "TYPE" | "UNIT"),
                "bad comment line {line:?}"
            );
            if keyword == "TYPE" {
                types.insert(name.to_string(), words.next().unwrap().to_string());
            }
            continue;
        }
        // `name{labels} value` or `name value`.
        let (series, value) = line.rsplit_once(' ').expect(line);
        value
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("bad value in {line:?}"));
        let name = series.split('{').next().unwrap();
        assert!(
            name.starts_with("kanon_")
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad name in {line:?}"
        );
        let labels = &series[name.len()..];
        if !labels.is_empty() {
            let inner = labels
                .strip_prefix('{')
                .and_then(|l| l.strip_suffix('}'))
                .unwrap_or_else(|| panic!("bad labels in {line:?}"));
            for pair in inner.split(',') {
                let (key, value) = pair.split_once('=').expect(line);
                assert!(key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
                assert!(value.starts_with('"') && value.ends_with('"'), "{line:?}");
            }
        }
        assert!(
            types.keys().any(|family| name.starts_with(family.as_str())),
            "sample {line:?} before its TYPE"
        );
    }
    for (family, kind) in [
        ("kanon_admission_requests", "counter"),
        ("kanon_admission_duration_seconds", "histogram"),
        ("kanon_policy_evaluations", "counter"),
        ("kanon_policy_patches", "counter"),
        ("kanon_policy_rejections", "counter"),
        ("kanon_policy_errors", "counter"),
        ("kanon_policies", "gauge"),
        ("kanon_ready", "gauge"),
        ("kanon_policy_reload_failures", "counter"),
    ] {
        assert_eq!(
            types.get(family).map(String::as_str),
            Some(kind),
            "{family}"
        );
    }
}
