//! `kanon convert`: Kubernetes' own admission policies, each (policy, binding) pair turned into
//! the kanon cluster policy that decides the same requests the same way.
//!
//! A ValidatingAdmissionPolicy with one of its bindings becomes a `ClusterValidatePolicy`, a
//! MutatingAdmissionPolicy with one of its bindings a `ClusterOverridePolicy`; the CEL parts
//! (match conditions, variables, validations, audit annotations, mutations) are copied as
//! written. Matching is translated: the resource rules become resource selectors (one per kind
//! of the built-in schema) and target operations, the namespace selectors of the policy and the
//! binding (both conjunctions of requirements on the same labels) one namespace selector, and
//! whatever selectors cannot say exactly (subresources, wildcards, scope, resource names,
//! excluded rules, the binding's own rules, an object selector that on UPDATE also matches the
//! old object) a match condition named `kanon-convert-…` put before the policy's own, which
//! reads the `request` as kube-apiserver sends it. What cannot be converted (params) is refused
//! by field, and the converted policies are compiled before they are printed.

mod matching;
mod pair;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use kanon_api::{MatchCondition, Variable};
use kanon_engine::{
    BindingSpec, Manifest, MatchResources, MutatingPolicySpec, ValidatingPolicySpec,
};
use serde_json::Value;

use crate::apply::Format;
use crate::inputs::{Document, read_documents};

/// Arguments of `kanon convert`.
#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// Files or directories holding ValidatingAdmissionPolicies, MutatingAdmissionPolicies and
    /// their bindings (YAML or JSON, multi-document); `-` reads standard input.
    #[arg(
        long = "filename",
        short = 'f',
        required = true,
        num_args = 1..,
        value_name = "PATH"
    )]
    files: Vec<PathBuf>,
    /// Output format: multi-document YAML, or a JSON list.
    #[arg(long, short = 'o', value_enum, default_value_t = Format::Yaml)]
    output: Format,
}

/// The annotation that names the policy and binding a kanon policy was converted from.
const CONVERTED_FROM: &str = "policy.kanon.dev/converted-from";
/// The first words of every match condition `kanon convert` writes.
const PREFIX: &str = "kanon-convert-";

/// What the converted policies say differently, at the top of the YAML output.
const HEADER: &str = "\
# Converted by `kanon convert`: each ValidatingAdmissionPolicy or MutatingAdmissionPolicy with
# one of its bindings is one kanon cluster policy that admits, denies, warns and patches the
# same requests. Match conditions named `kanon-convert-...` say what kanon's selectors cannot.
# Messages are worded by kanon: where kube-apiserver says
#   ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request: <message>
#   Validation failed for ValidatingAdmissionPolicy '<policy>' with binding '<binding>': <message>
#   policy '<policy>' with binding '<binding>' denied request: <error>
# kanon says `ClusterValidatePolicy/<name>: <message>` (denials and warnings) and
# `ClusterOverridePolicy/<name>: ...<error>`; audit annotations are keyed
# `clustervalidatepolicy.<name>.<key>` instead of `<policy>/<key>`. Under failurePolicy Ignore,
# kanon also warns about the error it ignores, where kube-apiserver says nothing.
";

/// Runs `kanon convert`: exit status 0 with the converted policies on standard output, 2 with
/// every problem on standard error.
pub fn run(args: &ConvertArgs) -> ExitCode {
    match convert_paths(&args.files) {
        Ok(converted) => {
            let printed = match args.output {
                Format::Json => {
                    let list: Vec<&Value> = converted.iter().map(|c| &c.policy).collect();
                    serde_json::to_string_pretty(&list)
                        .map(|text| format!("{text}\n"))
                        .map_err(|e| e.to_string())
                }
                Format::Yaml => yaml(&converted),
            };
            match printed {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: cannot print the converted policies: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Err(problems) => {
            for problem in problems {
                eprintln!("error: {problem}");
            }
            ExitCode::from(2)
        }
    }
}

/// Multi-document YAML: the header, then each policy headed by what it came from and why it
/// has the match conditions it has.
fn yaml(converted: &[Converted]) -> Result<String, String> {
    let mut out = String::from(HEADER);
    for policy in converted {
        out.push_str("---\n");
        let _ = writeln!(out, "# From {}.", policy.from);
        for note in &policy.notes {
            let _ = writeln!(out, "# {note}");
        }
        let text = serde_saphyr::to_string(&policy.policy).map_err(|e| e.to_string())?;
        out.push_str(text.trim_start_matches("---\n"));
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// One converted policy.
struct Converted {
    /// `ValidatingAdmissionPolicy/p with ValidatingAdmissionPolicyBinding/b`.
    from: String,
    /// Why each generated match condition is there.
    notes: Vec<String>,
    /// The kanon policy.
    policy: Value,
}

/// Reads `paths` and converts what they hold; every problem found otherwise.
fn convert_paths(paths: &[PathBuf]) -> Result<Vec<Converted>, Vec<String>> {
    let documents = read_documents(paths).map_err(|e| vec![e.to_string()])?;
    let converted = convert_documents(&documents)?;
    self_check(&converted)?;
    Ok(converted)
}

/// Why params cannot be converted.
const NO_PARAMS: &str = "cannot be converted: kanon's rules have no params; they read other objects through `references` (a rule's `cel.references`, read as `references.<name>`): write the policy as a kanon policy whose expressions read a reference instead of `params`";

// ---------------------------------------------------------------------------------------------
// The admission policies as the engine reads them (which also checks them, strictly, before
// anything is converted).

/// A policy's spec, of either kind.
enum Spec {
    Validating(ValidatingPolicySpec),
    Mutating(MutatingPolicySpec),
}

impl Spec {
    fn match_constraints(&self) -> Option<&MatchResources> {
        match self {
            Spec::Validating(s) => s.match_constraints.as_ref(),
            Spec::Mutating(s) => s.match_constraints.as_ref(),
        }
    }

    fn failure_policy(&self) -> Option<&str> {
        match self {
            Spec::Validating(s) => s.failure_policy.as_deref(),
            Spec::Mutating(s) => s.failure_policy.as_deref(),
        }
    }

    fn match_conditions(&self) -> &[MatchCondition] {
        match self {
            Spec::Validating(s) => &s.match_conditions,
            Spec::Mutating(s) => &s.match_conditions,
        }
    }

    fn variables(&self) -> &[Variable] {
        match self {
            Spec::Validating(s) => &s.variables,
            Spec::Mutating(s) => &s.variables,
        }
    }

    fn has_params(&self) -> bool {
        match self {
            Spec::Validating(s) => s.param_kind.is_some(),
            Spec::Mutating(s) => s.param_kind.is_some(),
        }
    }
}

struct Policy {
    mutating: bool,
    name: String,
    spec: Spec,
}

struct Binding {
    origin: String,
    mutating: bool,
    name: String,
    spec: BindingSpec,
}

fn policy_kind(mutating: bool) -> &'static str {
    if mutating {
        "MutatingAdmissionPolicy"
    } else {
        "ValidatingAdmissionPolicy"
    }
}

fn binding_kind(mutating: bool) -> &'static str {
    if mutating {
        "MutatingAdmissionPolicyBinding"
    } else {
        "ValidatingAdmissionPolicyBinding"
    }
}

fn convert_documents(documents: &[Document]) -> Result<Vec<Converted>, Vec<String>> {
    use kanon_engine::{AdmissionKind, admission_kind_of};

    let mut problems = Vec::new();
    let mut policies: Vec<Policy> = Vec::new();
    let mut bindings: Vec<Binding> = Vec::new();
    for document in documents {
        let origin = document.origin();
        let Some(kind) = admission_kind_of(&document.value) else {
            let text = |key| {
                document
                    .value
                    .get(key)
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_owned()
            };
            problems.push(format!(
                "{origin}: {} {} is not a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1), MutatingAdmissionPolicy (v1beta1 or v1) or a binding of one: kanon convert converts only those",
                text("apiVersion"),
                text("kind"),
            ));
            continue;
        };
        let name = document
            .value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let unreadable = |e: serde_json::Error| format!("{origin}: {kind}/{name}: {e}");
        match kind {
            AdmissionKind::ValidatingPolicy | AdmissionKind::MutatingPolicy => {
                let mutating = kind == AdmissionKind::MutatingPolicy;
                let spec = if mutating {
                    serde_json::from_value::<Manifest<MutatingPolicySpec>>(document.value.clone())
                        .map(|m| Spec::Mutating(m.spec))
                } else {
                    serde_json::from_value::<Manifest<ValidatingPolicySpec>>(document.value.clone())
                        .map(|m| Spec::Validating(m.spec))
                };
                match spec {
                    Ok(spec) => {
                        if spec.has_params() {
                            problems.push(format!(
                                "{origin}: {kind}/{name}: spec.paramKind: {NO_PARAMS}"
                            ));
                        }
                        policies.push(Policy {
                            mutating,
                            name: name.to_owned(),
                            spec,
                        });
                    }
                    Err(e) => problems.push(unreadable(e)),
                }
            }
            AdmissionKind::ValidatingBinding | AdmissionKind::MutatingBinding => {
                let mutating = kind == AdmissionKind::MutatingBinding;
                match serde_json::from_value::<Manifest<BindingSpec>>(document.value.clone()) {
                    Ok(m) => {
                        if m.spec.param_ref.is_some() {
                            problems.push(format!(
                                "{origin}: {kind}/{name}: spec.paramRef: {NO_PARAMS}"
                            ));
                        }
                        bindings.push(Binding {
                            origin: origin.clone(),
                            mutating,
                            name: name.to_owned(),
                            spec: m.spec,
                        });
                    }
                    Err(e) => problems.push(unreadable(e)),
                }
            }
        }
    }
    if policies.is_empty() && bindings.is_empty() && problems.is_empty() {
        problems.push("no document to convert: the paths hold no ValidatingAdmissionPolicy, MutatingAdmissionPolicy or binding".to_owned());
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    // The documents as kube-apiserver would check them (fields, values, expressions), and
    // every policy paired with its bindings, by the engine that evaluates them beside kanon's
    // kinds.
    crate::inputs::compile_documents(documents)?;

    let kinds = kanon_schema::Kinds::builtin()
        .map_err(|e| vec![format!("cannot load the built-in schema: {e}")])?;
    let kinds = kinds.builtin_schema().kinds();
    let mut converted = Vec::new();
    let mut names: BTreeMap<(bool, String), String> = BTreeMap::new();
    for binding in &bindings {
        let Some(policy) = policies
            .iter()
            .find(|p| p.mutating == binding.mutating && p.name == binding.spec.policy_name)
        else {
            continue;
        };
        let one = match pair::convert_pair(policy, binding, kinds) {
            Ok(one) => one,
            Err(problem) => {
                problems.push(format!(
                    "{}: {}/{}: {problem}",
                    binding.origin,
                    binding_kind(binding.mutating),
                    binding.name
                ));
                continue;
            }
        };
        let name = one.policy["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if let Some(earlier) = names.insert((policy.mutating, name.clone()), one.from.clone()) {
            problems.push(format!(
                "{}: {}/{}: the converted policy would be named `{name}`, as the one converted from {earlier}: rename one of the bindings",
                binding.origin,
                binding_kind(binding.mutating),
                binding.name
            ));
            continue;
        }
        converted.push(one);
    }
    if problems.is_empty() {
        Ok(converted)
    } else {
        Err(problems)
    }
}

/// Compiles the converted policies as kanon would load them: a conversion kanon would refuse
/// (e.g. an expression reading `authorizer`, or more than 64 match conditions with the
/// generated ones) is reported instead of printed.
fn self_check(converted: &[Converted]) -> Result<(), Vec<String>> {
    let documents: Vec<Document> = converted
        .iter()
        .enumerate()
        .map(|(index, c)| Document {
            source: "converted policies".to_owned(),
            index: index + 1,
            line: None,
            value: c.policy.clone(),
        })
        .collect();
    match crate::inputs::compile_documents(&documents) {
        // Its warnings (a field a selected kind does not have, a rule that judges DELETE) are
        // the original policy's as written, not the conversion's: not repeated here.
        Ok(_) => Ok(()),
        Err(problems) => Err(problems
            .into_iter()
            .map(|p| format!("the converted policy would not compile: {p}"))
            .collect()),
    }
}
