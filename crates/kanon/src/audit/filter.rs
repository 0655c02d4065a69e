//! What `kanon audit` prints: the filters `--policy`, `--namespace`, `--kind` and `--result`.
//! Kinds and namespaces left out are not judged at all (a kind is not even read); policies and
//! results are filtered from each object's findings once it is judged.

use clap::Args;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use kanon_api::ResultStatus;
use kanon_cluster::audit::book::KindKey;
use kanon_engine::Finding;
use serde_json::Value;

/// How many known names a warning about a filter that matches nothing lists.
const LISTED: usize = 10;

/// The filters of `kanon audit`. Each one given narrows what every output prints (text, json,
/// reports), and the exit status follows what they leave; values of one filter (repeated, or
/// separated by commas) add up: any of them matches.
#[derive(Debug, Default, Args)]
pub struct Filter {
    /// Only the findings of this policy (repeatable, or comma-separated): as findings name it
    /// (`ClusterValidatePolicy/NAME`, `ValidatePolicy/NAMESPACE/NAME`) or without its kind
    /// (`NAME`, `NAMESPACE/NAME`); `*` matches any characters (`team-*`).
    #[arg(id = "policy", long, value_name = "NAME", value_delimiter = ',')]
    policies: Vec<String>,
    /// Only objects in this namespace (repeatable, or comma-separated; `*` matches any
    /// characters): cluster-scoped objects (Namespaces among them) are left out.
    #[arg(
        id = "namespace",
        short = 'n',
        long,
        value_name = "NAMESPACE",
        value_delimiter = ','
    )]
    namespaces: Vec<String>,
    /// Only objects of this kind (repeatable, or comma-separated): its name in any case
    /// (`Deployment`, `deployment`), or as the text output prints it (`apps/v1/Deployment`).
    #[arg(id = "kind", long, value_name = "KIND", value_delimiter = ',')]
    kinds: Vec<String>,
    /// Only findings with this result (repeatable, or comma-separated). Default: every result,
    /// of which the text output lists all but passes (and counts them all).
    #[arg(
        id = "result",
        long,
        value_name = "RESULT",
        value_delimiter = ',',
        ignore_case = true,
        value_parser = result_parser()
    )]
    results: Vec<ResultStatus>,
}

fn result_parser() -> impl TypedValueParser<Value = ResultStatus> {
    PossibleValuesParser::new(ResultStatus::ALL.map(ResultStatus::as_str))
        .try_map(|text| text.parse::<ResultStatus>().map_err(|e| e.to_string()))
}

impl Filter {
    /// Whether objects of `kind` are read at all.
    pub fn reads_kind(&self, kind: &KindKey, namespaced: bool) -> bool {
        (namespaced || self.namespaces.is_empty())
            && (self.kinds.is_empty() || self.kinds.iter().any(|k| kind_matches(k, kind)))
    }

    /// Whether an object read (as the apiserver lists it) is judged: its namespace is one of
    /// `--namespace`'s.
    pub fn judges(&self, object: &Value) -> bool {
        if self.namespaces.is_empty() {
            return true;
        }
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty());
        namespace.is_some_and(|ns| self.namespaces.iter().any(|p| crate::glob::matches(p, ns)))
    }

    /// The findings of a judged object the filters keep.
    pub fn findings(&self, mut findings: Vec<Finding>) -> Vec<Finding> {
        findings.retain(|f| self.keeps(f));
        findings
    }

    fn keeps(&self, finding: &Finding) -> bool {
        (self.results.is_empty() || self.results.contains(&finding.result))
            && (self.policies.is_empty()
                || self
                    .policies
                    .iter()
                    .any(|p| policy_matches(p, &finding.policy)))
    }

    /// Whether some findings may be left out: an object none are left of is then not
    /// printed (one no policy selects included).
    pub fn narrows_findings(&self) -> bool {
        !self.policies.is_empty() || !self.results.is_empty()
    }

    /// Whether the text output lists passes: `--result pass` asks for them.
    pub fn lists_passes(&self) -> bool {
        self.results.contains(&ResultStatus::Pass)
    }

    /// A warning for each `--policy` that matches none of `policies` (the validate policies'
    /// labels) and each `--kind` that matches none of `kinds` (the kinds the policies judge).
    pub fn unmatched(&self, policies: &[&str], kinds: &[&KindKey]) -> Vec<String> {
        let mut warnings = Vec::new();
        for pattern in &self.policies {
            if !policies.iter().any(|p| policy_matches(pattern, p)) {
                let names = policies.iter().flat_map(|p| policy_names(p));
                let meant = (!pattern.contains('*'))
                    .then(|| nearest(pattern, names))
                    .flatten();
                warnings.push(unmatched_warning(
                    &format!("--policy {pattern} matches no validate policy"),
                    meant,
                    "the validate policies",
                    policies.iter().copied(),
                ));
            }
        }
        for wanted in &self.kinds {
            if !kinds.iter().any(|k| kind_matches(wanted, k)) {
                let meant = nearest(&wanted.to_lowercase(), kinds.iter().map(|k| &*k.kind));
                warnings.push(unmatched_warning(
                    &format!("--kind {wanted} is no kind the validate policies judge"),
                    meant,
                    "the kinds they judge",
                    kinds.iter().map(|k| &*k.kind),
                ));
            }
        }
        warnings
    }
}

/// `WHAT; did you mean `x`? (THOSE: a, b, c and N more)`, or that there are none.
fn unmatched_warning<'a>(
    what: &str,
    meant: Option<&str>,
    those: &str,
    known: impl Iterator<Item = &'a str>,
) -> String {
    let mut known: Vec<&str> = known.collect();
    known.sort_unstable();
    known.dedup();
    if known.is_empty() {
        return format!("{what}: there are none");
    }
    let meant = meant
        .map(|meant| format!("; did you mean `{meant}`?"))
        .unwrap_or_default();
    let more = match known.len().checked_sub(LISTED) {
        Some(more) if more > 0 => format!(" and {more} more"),
        _ => String::new(),
    };
    let listed = known[..known.len().min(LISTED)].join(", ");
    format!("{what}{meant} ({those}: {listed}{more})")
}

/// The one of `known` nearest to `wanted` (compared in lower case), when a misspelling could
/// explain the difference: a third of `wanted`'s length at most.
fn nearest<'a>(wanted: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let wanted = wanted.to_lowercase();
    let (distance, meant) = known
        .map(|k| (kanon_schema::edit_distance(&wanted, &k.to_lowercase()), k))
        .min()?;
    (distance <= (wanted.chars().count() / 3).max(1)).then_some(meant)
}

/// Whether `--kind` `wanted` names `kind`: its name, or `apiVersion/kind`, in any case.
fn kind_matches(wanted: &str, kind: &KindKey) -> bool {
    wanted.eq_ignore_ascii_case(&kind.kind) || wanted.eq_ignore_ascii_case(&kind.to_string())
}

/// Whether `--policy` `pattern` names the policy of `label` by one of its names.
fn policy_matches(pattern: &str, label: &str) -> bool {
    policy_names(label).any(|name| crate::glob::matches(pattern, name))
}

/// The names a policy answers to, from its label (as findings name it): the label
/// (`ClusterValidatePolicy/p`, `ValidatePolicy/ns/p`, `ValidatingAdmissionPolicy/p with
/// binding b`), each tail of it after a `/` (`p`, `ns/p`), and these without a binding.
fn policy_names(label: &str) -> impl Iterator<Item = &str> {
    let unbound = label.split_once(" with binding ").map(|(policy, _)| policy);
    std::iter::once(label)
        .chain(unbound)
        .flat_map(|whole| std::iter::once(whole).chain(tails(whole)))
}

fn tails(name: &str) -> impl Iterator<Item = &str> {
    name.match_indices('/').map(move |(at, _)| &name[at + 1..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn finding(policy: &str, result: ResultStatus) -> Finding {
        Finding {
            policy: Arc::from(policy),
            rule: None,
            result,
            message: String::new(),
            severity: None,
            category: None,
        }
    }

    fn policies(filter: &Filter, findings: &[(&str, ResultStatus)]) -> Vec<String> {
        let findings = findings.iter().map(|(p, r)| finding(p, *r)).collect();
        filter
            .findings(findings)
            .iter()
            .map(|f| format!("{} {}", f.policy, f.result))
            .collect()
    }

    #[derive(Debug, clap::Parser)]
    struct Command {
        #[command(flatten)]
        filter: Filter,
    }

    fn parse(args: &[&str]) -> Result<Filter, String> {
        use clap::Parser;
        Command::try_parse_from(std::iter::once("audit").chain(args.iter().copied()))
            .map(|c| c.filter)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn each_filter_is_repeated_or_separated_by_commas() {
        let filter = parse(&[
            "--result",
            "fail,error",
            "--result",
            "WARN",
            "-n",
            "shop,lab",
            "--namespace",
            "team-*",
            "--policy",
            "a",
            "--kind",
            "Pod,Deployment",
        ])
        .expect("valid filters");
        assert_eq!(
            filter.results,
            [ResultStatus::Fail, ResultStatus::Error, ResultStatus::Warn]
        );
        assert_eq!(filter.namespaces, ["shop", "lab", "team-*"]);
        assert_eq!(filter.policies, ["a"]);
        assert_eq!(filter.kinds, ["Pod", "Deployment"]);
        let error = parse(&["--result", "failed"]).expect_err("no such result");
        assert!(
            error.contains("[possible values: pass, fail, warn, error, skip]"),
            "{error}"
        );
    }

    #[test]
    fn a_policy_is_named_with_or_without_its_kind() {
        let cluster = "ClusterValidatePolicy/no-debug";
        let namespaced = "ValidatePolicy/shop/no-debug";
        let binding = "ValidatingAdmissionPolicy/replicas with binding prod";
        for (pattern, label) in [
            ("ClusterValidatePolicy/no-debug", cluster),
            ("no-debug", cluster),
            ("no-*", cluster),
            ("ClusterValidatePolicy/*", cluster),
            ("ValidatePolicy/shop/no-debug", namespaced),
            ("shop/no-debug", namespaced),
            ("no-debug", namespaced),
            ("replicas", binding),
            ("ValidatingAdmissionPolicy/replicas", binding),
            ("replicas with binding prod", binding),
            (binding, binding),
        ] {
            assert!(policy_matches(pattern, label), "{pattern} names {label}");
        }
        for (pattern, label) in [
            ("no-debu", cluster),
            ("ValidatePolicy/no-debug", cluster),
            ("lab/no-debug", namespaced),
            ("Policy/no-debug", cluster),
            ("prod", binding),
        ] {
            assert!(!policy_matches(pattern, label), "{pattern} is not {label}");
        }
    }

    #[test]
    fn findings_are_kept_by_policy_and_result() {
        let found = [
            ("ClusterValidatePolicy/a", ResultStatus::Fail),
            ("ClusterValidatePolicy/a", ResultStatus::Pass),
            ("ClusterValidatePolicy/b", ResultStatus::Fail),
            ("ValidatePolicy/shop/c", ResultStatus::Warn),
        ];
        let every = Filter::default();
        assert_eq!(policies(&every, &found).len(), 4);
        assert!(!every.narrows_findings());
        let a = Filter {
            policies: vec!["a".into()],
            ..Filter::default()
        };
        assert_eq!(
            policies(&a, &found),
            [
                "ClusterValidatePolicy/a fail",
                "ClusterValidatePolicy/a pass"
            ]
        );
        let failures_of_a_and_c = Filter {
            policies: vec!["a".into(), "shop/c".into()],
            results: vec![ResultStatus::Fail, ResultStatus::Warn],
            ..Filter::default()
        };
        assert_eq!(
            policies(&failures_of_a_and_c, &found),
            ["ClusterValidatePolicy/a fail", "ValidatePolicy/shop/c warn"]
        );
        assert!(failures_of_a_and_c.narrows_findings());
        assert!(!failures_of_a_and_c.lists_passes());
    }

    #[test]
    fn namespaces_leave_cluster_scoped_objects_out() {
        let filter = Filter {
            namespaces: vec!["shop".into(), "team-*".into()],
            ..Filter::default()
        };
        let object =
            |namespace: Option<&str>| json!({"metadata": {"name": "x", "namespace": namespace}});
        assert!(filter.judges(&object(Some("shop"))));
        assert!(filter.judges(&object(Some("team-a"))));
        assert!(!filter.judges(&object(Some("lab"))));
        assert!(!filter.judges(&object(None)));
        assert!(!filter.judges(&object(Some(""))));
        assert!(Filter::default().judges(&object(None)));
        let namespace = KindKey::new("v1", "Namespace");
        assert!(!filter.reads_kind(&namespace, false));
        assert!(filter.reads_kind(&KindKey::new("v1", "ConfigMap"), true));
        assert!(Filter::default().reads_kind(&namespace, false));
    }

    #[test]
    fn kinds_are_named_in_any_case_with_or_without_their_api_version() {
        let deployment = KindKey::new("apps/v1", "Deployment");
        for wanted in [
            "Deployment",
            "deployment",
            "apps/v1/Deployment",
            "APPS/V1/deployment",
        ] {
            let filter = Filter {
                kinds: vec![wanted.into()],
                ..Filter::default()
            };
            assert!(filter.reads_kind(&deployment, true), "{wanted}");
        }
        for wanted in ["Deployments", "apps/Deployment", "v1/Deployment"] {
            let filter = Filter {
                kinds: vec![wanted.into()],
                ..Filter::default()
            };
            assert!(!filter.reads_kind(&deployment, true), "{wanted}");
        }
    }

    #[test]
    fn a_filter_matching_nothing_is_named_with_what_there_is() {
        let filter = Filter {
            policies: vec![
                "no-debg".into(),
                "no-debug".into(),
                "team-*".into(),
                "zzz".into(),
                "No-Debug".into(),
            ],
            kinds: vec!["Deploymnet".into(), "configmap".into()],
            ..Filter::default()
        };
        let deployment = KindKey::new("apps/v1", "Deployment");
        let config_map = KindKey::new("v1", "ConfigMap");
        let warnings = filter.unmatched(
            &[
                "ClusterValidatePolicy/no-debug",
                "ValidatePolicy/shop/owner",
            ],
            &[&config_map, &deployment],
        );
        assert_eq!(
            warnings,
            [
                "--policy no-debg matches no validate policy; did you mean `no-debug`? (the \
                 validate policies: ClusterValidatePolicy/no-debug, ValidatePolicy/shop/owner)",
                "--policy team-* matches no validate policy (the validate policies: \
                 ClusterValidatePolicy/no-debug, ValidatePolicy/shop/owner)",
                "--policy zzz matches no validate policy (the validate policies: \
                 ClusterValidatePolicy/no-debug, ValidatePolicy/shop/owner)",
                "--policy No-Debug matches no validate policy; did you mean `no-debug`? (the \
                 validate policies: ClusterValidatePolicy/no-debug, ValidatePolicy/shop/owner)",
                "--kind Deploymnet is no kind the validate policies judge; did you mean \
                 `Deployment`? (the kinds they judge: ConfigMap, Deployment)",
            ]
        );
        let none = filter.unmatched(&[], &[]);
        assert_eq!(
            none[0],
            "--policy no-debg matches no validate policy: there are none"
        );
    }

    #[test]
    fn a_long_list_of_known_names_is_cut() {
        let known: Vec<String> = (0..12)
            .map(|i| format!("ClusterValidatePolicy/p{i:02}"))
            .collect();
        let known: Vec<&str> = known.iter().map(String::as_str).collect();
        let filter = Filter {
            policies: vec!["other".into()],
            ..Filter::default()
        };
        let warning = &filter.unmatched(&known, &[])[0];
        assert!(
            warning.ends_with("ClusterValidatePolicy/p09 and 2 more)"),
            "{warning}"
        );
    }
}
