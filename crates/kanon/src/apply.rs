//! `kanon apply`: evaluate policies against resources offline, exactly as the webhook would.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use kanon_api::Operation;
use kanon_engine::{ObjectStore, PolicySet, Request, parse_operation};
use serde::Serialize;
use serde_json::Value;

use crate::exceptions::{ExceptionArgs, honoured};
use crate::inputs::{Document, LoadedPolicies, read_documents};
use crate::objects::load_objects;
use crate::programs::{DeadlineArgs, OfflineEvaluation, ProgramArgs};

/// Output formats.
#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub enum Format {
    /// Readable YAML.
    #[default]
    Yaml,
    /// A JSON array, one element per resource.
    Json,
}

/// Arguments of `kanon apply`.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Policy files or directories (YAML or JSON, multi-document); `-` reads standard input.
    #[arg(long = "policy", short = 'p', required = true, value_name = "PATH")]
    policies: Vec<PathBuf>,
    /// Resources to evaluate: objects, or AdmissionReviews (whose operation and old object
    /// are then used).
    #[arg(long = "resource", short = 'r', required = true, value_name = "PATH")]
    resources: Vec<PathBuf>,
    /// Objects that stand for the cluster: Namespaces (for namespaceSelector), owners and
    /// objects that `k8s` references look up. `--objects` is the same flag (as on
    /// `kanon serve`).
    #[arg(
        long = "context",
        visible_alias = "objects",
        short = 'c',
        value_name = "PATH"
    )]
    context: Vec<PathBuf>,
    /// The admission operation for plain resources.
    #[arg(long, default_value = "CREATE", value_parser = parse_op, value_name = "OP")]
    operation: Operation,
    /// Previous versions of the resources (for UPDATE; matched by apiVersion, kind,
    /// namespace and name).
    #[arg(long = "old-resource", value_name = "PATH")]
    old_resources: Vec<PathBuf>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Format::Yaml)]
    output: Format,
    /// Judge plain resources as written, without the defaults kube-apiserver fills in before
    /// any webhook sees an object (`imagePullPolicy`, `restartPolicy`, a Deployment's
    /// `replicas`, ...).
    #[arg(long)]
    no_defaults: bool,
    #[command(flatten)]
    programs: ProgramArgs,
    #[command(flatten)]
    deadline: DeadlineArgs,
    #[command(flatten)]
    exceptions: ExceptionArgs,
}

fn parse_op(text: &str) -> Result<Operation, String> {
    parse_operation(text).map_err(|e| e.to_string())
}

/// The identity of a resource in the output.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResourceId {
    pub(crate) api_version: String,
    pub(crate) kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) namespace: Option<String>,
    pub(crate) name: String,
}

impl ResourceId {
    /// The identity of the request's resource.
    pub(crate) fn of(request: &Request) -> Self {
        ResourceId {
            api_version: request.api_version.clone(),
            kind: request.kind.clone(),
            namespace: request.namespace.clone(),
            name: request.name.clone(),
        }
    }
}

/// One resource's verdict.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Verdict {
    pub(crate) resource: ResourceId,
    pub(crate) source: String,
    pub(crate) operation: Operation,
    #[serde(flatten)]
    pub(crate) decision: kanon_engine::Decision,
}

/// Bad input: printed with every problem found, exit status 2.
pub(crate) struct BadInput(pub(crate) Vec<String>);

impl From<String> for BadInput {
    fn from(message: String) -> Self {
        BadInput(vec![message])
    }
}

/// Runs `kanon apply`.
pub fn run(args: &ApplyArgs) -> ExitCode {
    match evaluate(args) {
        Ok(verdicts) => {
            let printed = match args.output {
                Format::Json => serde_json::to_string_pretty(&verdicts).map_err(|e| e.to_string()),
                Format::Yaml => serde_saphyr::to_string(&verdicts).map_err(|e| e.to_string()),
            };
            match printed {
                Ok(text) => println!("{}", text.trim_end()),
                Err(e) => {
                    eprintln!("error: cannot print the result: {e}");
                    return ExitCode::from(2);
                }
            }
            if verdicts.iter().all(|v| v.decision.allowed) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(BadInput(problems)) => {
            for p in problems {
                eprintln!("error: {p}");
            }
            ExitCode::from(2)
        }
    }
}

/// The policies under `paths`, compiled; every problem found is bad input. Their warnings
/// (likely mistakes that do not make a policy invalid) and a note on the documents skipped as
/// not policies go to standard error.
pub(crate) fn load_policies(paths: &[PathBuf]) -> Result<PolicySet, BadInput> {
    let loaded = load_policies_for(paths, &ObjectStore::new())?;
    print_load_notes(&loaded);
    Ok(loaded.set)
}

/// The policies under `paths`, compiled and checked against the built-in kinds and the custom
/// kinds of the CustomResourceDefinitions among `context` (a CRD kanon cannot read is bad
/// input); nothing printed.
pub(crate) fn load_policies_for(
    paths: &[PathBuf],
    context: &ObjectStore,
) -> Result<LoadedPolicies, BadInput> {
    let problems = context.crd_problems();
    if !problems.is_empty() {
        return Err(BadInput(problems));
    }
    crate::inputs::load_policies_with(paths, context.custom_kinds()).map_err(BadInput)
}

/// Each policy's warnings on standard error, naming the policy and where it is
/// (`warning: ClusterValidatePolicy/x (policies/x.yaml:3): spec...`), then the note on
/// skipped documents.
pub(crate) fn print_load_notes(loaded: &LoadedPolicies) {
    for policy in loaded.set.policies() {
        let place = loaded
            .origins
            .of(policy)
            .map(|place| format!(" ({place})"))
            .unwrap_or_default();
        for warning in &policy.warnings {
            // A type-checking warning ends in a newline, as kube-controller-manager writes it.
            eprintln!(
                "warning: {}{place}: {}",
                policy.id,
                warning.to_string().trim_end()
            );
        }
    }
    if let Some(note) = loaded.skipped_note() {
        eprintln!("note: {note}");
    }
}

/// The objects under `paths` that stand for the cluster ([`load_objects`]).
pub(crate) fn load_context(paths: &[PathBuf]) -> Result<ObjectStore, BadInput> {
    load_objects(paths).map_err(|e| BadInput::from(e.to_string()))
}

/// `(apiVersion, kind, namespace, name)` of an object, for pairing old and new versions.
pub(crate) fn identity(value: &Value) -> (String, String, String, String) {
    let text = |p: &str| {
        value
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (
        text("/apiVersion"),
        text("/kind"),
        text("/metadata/namespace"),
        text("/metadata/name"),
    )
}

/// Whether the document is an AdmissionReview (which brings its own operation and old object)
/// rather than a plain object.
pub(crate) fn is_review(doc: &Document) -> bool {
    doc.value.get("kind").and_then(Value::as_str) == Some("AdmissionReview")
}

/// The previous version of `doc` among `old`: the one with its apiVersion, kind, namespace
/// and name.
pub(crate) fn paired_old(doc: &Document, old: &[Document]) -> Option<Value> {
    let id = identity(&doc.value);
    old.iter()
        .find(|o| identity(&o.value) == id)
        .map(|o| o.value.clone())
}

/// `object` as kube-apiserver hands it to admission (and keeps it, for an old object): defaulted
/// as the apiserver's decoding defaults a built-in kind (`imagePullPolicy`, `restartPolicy`,
/// requests from limits, a Deployment's `replicas`, ...), so that offline verdicts and patches
/// are the cluster's. An AdmissionReview's objects come from the apiserver and are left alone.
/// With `defaults` off (`--no-defaults`), the object as written.
fn as_admitted(mut object: Value, defaults: bool) -> Value {
    if defaults {
        kanon_engine::apply_builtin_defaults(&mut object);
    }
    object
}

/// The request for a plain `object` (and its `old` version) as kube-apiserver hands it to
/// admission ([`as_admitted`]); with `defaults` off, judged and mutated as written, the
/// defaulting after each mutation off too.
pub(crate) fn admitted_request(
    operation: Operation,
    object: Value,
    old: Option<Value>,
    (defaults, context): (bool, &ObjectStore),
) -> Result<Request, kanon_engine::RequestError> {
    let old = old.map(|old| as_admitted(old, defaults));
    let mut object = as_admitted(object, defaults);
    if defaults {
        // What the apiserver's default admission plugins add before webhooks (a Pod's service
        // account token, priority, default tolerations).
        kanon_engine::apply_admission_plugins(operation, &mut object, old.as_ref(), context);
    }
    let request = Request::from_objects(operation, Some(object), old)?;
    Ok(if defaults {
        request
    } else {
        request.without_defaults()
    })
}

pub(crate) fn build_request(
    doc: &Document,
    operation: Operation,
    old: &[Document],
    admitted: (bool, &ObjectStore),
) -> Result<Request, String> {
    if is_review(doc) {
        // As the apiserver sent it: defaulted, as `kanon serve` takes every review.
        return Request::from_admission_review(&doc.value)
            .map(Request::defaulted_on_arrival)
            .map_err(|e| format!("{}: {e}", doc.origin()));
    }
    let old_object = paired_old(doc, old);
    admitted_request(operation, doc.value.clone(), old_object, admitted).map_err(|e| {
        let hint = if operation == Operation::Update {
            " (give it with --old-resource)"
        } else {
            ""
        };
        format!("{}: {e}{hint}", doc.origin())
    })
}

fn evaluate(args: &ApplyArgs) -> Result<Vec<Verdict>, BadInput> {
    let evaluation = OfflineEvaluation::new(&args.programs, &args.deadline)?;
    if let Some(now) = args.exceptions.now {
        evaluation.set_now(now);
    }
    let context = load_context(&args.context)?;
    let loaded = load_policies_for(&args.policies, &context)?;
    print_load_notes(&loaded);
    let policies = honoured(loaded.set, &args.exceptions.namespaces);
    let old = read_documents(&args.old_resources).map_err(|e| e.to_string())?;
    let resources = read_documents(&args.resources).map_err(|e| e.to_string())?;
    if resources.is_empty() {
        return Err(BadInput(vec![
            "no resource to evaluate: the --resource paths hold no document".into(),
        ]));
    }
    evaluate_documents(
        &evaluation,
        &policies,
        &context,
        &resources,
        &old,
        args.operation,
        !args.no_defaults,
    )
}

/// Evaluates one request as the webhook would, in `evaluation` (its deadline and program
/// workers); `source` says where it came from.
pub(crate) fn evaluate_request(
    evaluation: &OfflineEvaluation,
    policies: &PolicySet,
    context: &dyn kanon_engine::Lookup,
    request: &Request,
    source: String,
) -> Verdict {
    let decision = evaluation.review(policies, request, context);
    Verdict {
        resource: ResourceId::of(request),
        source,
        operation: request.operation,
        decision,
    }
}

/// Evaluates each resource document (an object, or an AdmissionReview) as the webhook would.
pub(crate) fn evaluate_documents(
    evaluation: &OfflineEvaluation,
    policies: &PolicySet,
    context: &ObjectStore,
    resources: &[Document],
    old: &[Document],
    operation: Operation,
    defaults: bool,
) -> Result<Vec<Verdict>, BadInput> {
    let mut problems = Vec::new();
    let mut requests = Vec::new();
    for doc in resources {
        match build_request(doc, operation, old, (defaults, context)) {
            Ok(request) => requests.push((request, doc.origin())),
            Err(e) => problems.push(e),
        }
    }
    if !problems.is_empty() {
        return Err(BadInput(problems));
    }
    let namespaces = crate::namespaces::Namespaces::new(
        context,
        requests.iter().filter_map(|(r, _)| r.namespace.as_deref()),
    );
    let verdicts = requests
        .into_iter()
        .map(|(request, origin)| {
            evaluate_request(evaluation, policies, &namespaces, &request, origin)
        })
        .collect();
    for note in namespaces.notes("--context") {
        eprintln!("note: {note}");
    }
    Ok(verdicts)
}
