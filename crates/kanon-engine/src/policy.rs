//! Policy objects: decoding (strict: unknown fields and kinitiras leftovers are errors) and
//! compiling into the checked form the index and evaluation use.

use std::fmt;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kanon_api::{
    API_VERSION, ClusterOverridePolicy, ClusterValidatePolicy, FailurePolicy, Operation,
    OverridePolicy, OverrideRule, PolicyKind, ResourceSelector, ValidatePolicy, ValidateRule,
    ValidationAction,
};
use kanon_schema::Kinds;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::condition::ConditionMessage;
use crate::error::{FieldError, InvalidPolicy};
use crate::native::NativeRule;
use crate::plaintext::{self, PlaintextOp};
use crate::program::{Program, ProgramKind, ProgramLimits};
use crate::refs::CompiledRef;
use crate::selector::{LabelMatcher, ObjectView, ResourceMatcher, labels_of};

/// The identity of a policy: kind, namespace (namespaced kinds) and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PolicyId {
    /// The kind.
    pub kind: PolicyKind,
    /// The namespace, for namespaced kinds.
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl fmt::Display for PolicyId {
    /// `Kind/name`, or `Kind/namespace/name` for namespaced kinds.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{}/{}", self.kind, ns, self.name),
            None => write!(f, "{}/{}", self.kind, self.name),
        }
    }
}

/// The kanon policy kind of a document, if it is one: `apiVersion` must be
/// `policy.kanon.dev/v1alpha1` and `kind` one of the four.
pub fn policy_kind_of(document: &Value) -> Option<PolicyKind> {
    let api_version = document.get("apiVersion").and_then(Value::as_str)?;
    let kind = document.get("kind").and_then(Value::as_str)?;
    (api_version == API_VERSION)
        .then(|| PolicyKind::from_kind(kind))
        .flatten()
}

/// A decoded policy object of any of the four kinds.
#[derive(Clone, Debug)]
pub enum PolicyObject {
    /// A ClusterOverridePolicy.
    ClusterOverride(ClusterOverridePolicy),
    /// An OverridePolicy.
    Override(OverridePolicy),
    /// A ClusterValidatePolicy.
    ClusterValidate(ClusterValidatePolicy),
    /// A ValidatePolicy.
    Validate(ValidatePolicy),
}

/// Formats a serde_ignored path as a field path (`spec.overrideRules[0].overriders.foo`).
fn ignored_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", ignored_path(parent)),
        Path::Map { parent, key } => {
            let parent = ignored_path(parent);
            if parent.is_empty() {
                key.clone()
            } else {
                format!("{parent}.{key}")
            }
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => ignored_path(parent),
    }
}

/// Checks `document` against `kind`'s schema ([`crate::shape`]), then deserializes it as `T`.
/// Every problem of the shape check is returned at once: when one of them stops decoding (a
/// wrong type or value, a missing field) they are the error; unknown fields alone do not, and
/// are returned beside the value. What serde still rejects is the error at serde's path, in the
/// shape check's words.
fn decode_reporting_unknown<T: DeserializeOwned>(
    kind: PolicyKind,
    document: &Value,
) -> Result<(T, Vec<FieldError>), Vec<FieldError>> {
    use crate::shape::{self, PathStep, Problem};
    use serde_path_to_error::Segment;

    let problems = shape::check(kind, document);
    let fatal = problems.iter().any(Problem::is_fatal);
    let mut reported: Vec<FieldError> = problems.into_iter().map(|p| p.error).collect();
    if fatal {
        return Err(reported);
    }
    // serde_ignored stays as a second look: a field the schema allows but the type skips is
    // still reported.
    let mut unknown = Vec::new();
    let mut record = |path: serde_ignored::Path<'_>| {
        let field = ignored_path(&path);
        // kube's derived types carry apiVersion and kind as constants, not as fields.
        if field != "apiVersion" && field != "kind" {
            unknown.push(FieldError::new(field, "unknown field"));
        }
    };
    let de = serde_ignored::Deserializer::new(document.clone(), &mut record);
    let result: Result<T, _> = serde_path_to_error::deserialize(de);
    for u in unknown {
        if !reported.iter().any(|r| r.field == u.field) {
            reported.push(u);
        }
    }
    match result {
        Ok(value) => Ok((value, reported)),
        Err(e) => {
            let field = e.path().to_string();
            let field = if field == "." { String::new() } else { field };
            let steps: Vec<PathStep> = e
                .path()
                .iter()
                .map_while(|segment| match segment {
                    Segment::Seq { index } => Some(PathStep::Index(*index)),
                    Segment::Map { key } => Some(PathStep::Key(key.clone())),
                    Segment::Enum { variant } => Some(PathStep::Key(variant.clone())),
                    Segment::Unknown => None,
                })
                .collect();
            let message =
                shape::explain_decode_error(kind, document, &steps, &e.into_inner().to_string());
            reported.push(FieldError::new(field, message));
            Err(reported)
        }
    }
}

/// kinitiras fields that kanon replaces; a policy carrying them is rejected with the way out.
fn kinitiras_leftovers(document: &Value, errors: &mut Vec<FieldError>) {
    let spec = document.get("spec");
    let rules = |key| {
        spec.and_then(|s| s.get(key))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
    };
    for (i, rule) in rules("overrideRules").enumerate() {
        for field in ["cue", "renderedCue"] {
            if rule.pointer(&format!("/overriders/{field}")).is_some() {
                errors.push(FieldError::new(
                    format!("spec.overrideRules[{i}].overriders.{field}"),
                    "kinitiras CUE is not supported: rewrite it as a minijinja rule `program` (see `kanon render` for examples)",
                ));
            }
        }
    }
    for (i, rule) in rules("validateRules").enumerate() {
        for field in ["cue", "renderedCue"] {
            if rule.get(field).is_some() {
                errors.push(FieldError::new(
                    format!("spec.validateRules[{i}].{field}"),
                    "kinitiras CUE is not supported: rewrite it as a minijinja rule `program` (see `kanon render` for examples)",
                ));
            }
        }
    }
}

impl PolicyObject {
    /// Decodes a policy document strictly: an unknown field, a kinitiras `cue` field or a type
    /// error is an [`InvalidPolicy`] naming the field.
    pub fn decode(document: &Value) -> Result<Self, InvalidPolicy> {
        let (object, problems) = Self::decode_reporting(document)?;
        if problems.is_empty() {
            Ok(object)
        } else {
            Err(InvalidPolicy {
                policy: object.id().to_string(),
                errors: problems,
            })
        }
    }

    /// Decodes a policy document. A document that cannot be read at all (not a policy kind, a
    /// type error) is an [`InvalidPolicy`]; unknown fields and kinitiras `cue` fields are
    /// returned beside the object, to be reported together with the compile errors.
    pub fn decode_reporting(document: &Value) -> Result<(Self, Vec<FieldError>), InvalidPolicy> {
        let kind = policy_kind_of(document);
        let name = document
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let namespace = document
            .pointer("/metadata/namespace")
            .and_then(Value::as_str);
        let label = match (kind, namespace) {
            (Some(k), Some(ns)) if k.is_namespaced() => format!("{k}/{ns}/{name}"),
            (Some(k), _) => format!("{k}/{name}"),
            (None, _) => format!(
                "{}/{name}",
                document.get("kind").and_then(Value::as_str).unwrap_or("?")
            ),
        };
        let invalid = |errors| InvalidPolicy {
            policy: label.clone(),
            errors,
        };
        let Some(kind) = kind else {
            return Err(invalid(vec![FieldError::new(
                "kind",
                format!(
                    "not a kanon policy: apiVersion must be {API_VERSION} and kind one of ClusterOverridePolicy, OverridePolicy, ClusterValidatePolicy, ValidatePolicy"
                ),
            )]));
        };
        let mut problems = Vec::new();
        kinitiras_leftovers(document, &mut problems);
        let decoded = match kind {
            PolicyKind::ClusterOverridePolicy => decode_reporting_unknown(kind, document)
                .map(|(p, u)| (PolicyObject::ClusterOverride(p), u)),
            PolicyKind::OverridePolicy => decode_reporting_unknown(kind, document)
                .map(|(p, u)| (PolicyObject::Override(p), u)),
            PolicyKind::ClusterValidatePolicy => decode_reporting_unknown(kind, document)
                .map(|(p, u)| (PolicyObject::ClusterValidate(p), u)),
            PolicyKind::ValidatePolicy => decode_reporting_unknown(kind, document)
                .map(|(p, u)| (PolicyObject::Validate(p), u)),
        };
        let (object, found) = match decoded {
            Ok((object, found)) => (Some(object), found),
            Err(found) => (None, found),
        };
        // A kinitiras field is reported once, with its way out, not also as unknown.
        let kinitiras = problems.len();
        for f in found {
            if !problems[..kinitiras].iter().any(|p| p.field == f.field) {
                problems.push(f);
            }
        }
        match object {
            Some(object) => Ok((object, problems)),
            None => Err(invalid(problems)),
        }
    }

    /// Its selectors and rules, for the check against Kubernetes' kinds.
    fn written(&self) -> crate::kubernetes::Written<'_> {
        use crate::kubernetes::Written;
        match self {
            PolicyObject::ClusterOverride(p) => Written {
                selectors: &p.spec.resource_selectors,
                override_rules: &p.spec.override_rules,
                validate_rules: &[],
            },
            PolicyObject::Override(p) => Written {
                selectors: &p.spec.resource_selectors,
                override_rules: &p.spec.override_rules,
                validate_rules: &[],
            },
            PolicyObject::ClusterValidate(p) => Written {
                selectors: &p.spec.resource_selectors,
                override_rules: &[],
                validate_rules: &p.spec.validate_rules,
            },
            PolicyObject::Validate(p) => Written {
                selectors: &p.spec.resource_selectors,
                override_rules: &[],
                validate_rules: &p.spec.validate_rules,
            },
        }
    }

    /// The policy's identity.
    pub fn id(&self) -> PolicyId {
        let (kind, meta) = match self {
            PolicyObject::ClusterOverride(p) => (PolicyKind::ClusterOverridePolicy, &p.metadata),
            PolicyObject::Override(p) => (PolicyKind::OverridePolicy, &p.metadata),
            PolicyObject::ClusterValidate(p) => (PolicyKind::ClusterValidatePolicy, &p.metadata),
            PolicyObject::Validate(p) => (PolicyKind::ValidatePolicy, &p.metadata),
        };
        PolicyId {
            kind,
            namespace: if kind.is_namespaced() {
                meta.namespace.clone()
            } else {
                None
            },
            name: meta.name.clone().unwrap_or_default(),
        }
    }
}

/// A set of admission operations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OperationSet(u8);

impl OperationSet {
    /// Every operation.
    pub const ALL: OperationSet = OperationSet(0b1111);
    /// No operation.
    pub const NONE: OperationSet = OperationSet(0);

    /// The operations in either set.
    pub fn union(self, other: OperationSet) -> OperationSet {
        OperationSet(self.0 | other.0)
    }

    fn bit(op: Operation) -> u8 {
        match op {
            Operation::Create => 0b0001,
            Operation::Update => 0b0010,
            Operation::Delete => 0b0100,
            Operation::Connect => 0b1000,
            Operation::All => 0b1111,
        }
    }

    /// The set a rule's `targetOperations` describes: empty or `*` means all.
    pub fn from_targets(targets: &[Operation]) -> Self {
        if targets.is_empty() {
            return Self::ALL;
        }
        OperationSet(targets.iter().fold(0, |acc, op| acc | Self::bit(*op)))
    }

    /// Whether `op` (a concrete operation) is in the set.
    pub fn contains(self, op: Operation) -> bool {
        self.0 & Self::bit(op) != 0 && op != Operation::All
    }
}

/// One compiled override rule.
#[derive(Clone, Debug)]
pub struct CompiledOverrideRule {
    /// The operations it applies to.
    pub operations: OperationSet,
    /// The program the template renders to.
    pub template: Option<RuleProgram>,
    /// The hand-written program.
    pub program: Option<RuleProgram>,
    /// Plaintext operations, in order, with the fields they come from.
    pub plaintext: Vec<PlaintextOp>,
    /// The same operations, contiguous, to apply in one atomic step.
    pub patch: Vec<json_patch::PatchOperation>,
}

impl CompiledOverrideRule {
    /// How many atomic steps the rule takes: one per template, program and plaintext list.
    pub fn steps(&self) -> usize {
        usize::from(self.template.is_some())
            + usize::from(self.program.is_some())
            + usize::from(!self.patch.is_empty())
    }
}

/// One compiled validate rule.
#[derive(Clone, Debug)]
pub struct CompiledValidateRule {
    /// The operations it applies to.
    pub operations: OperationSet,
    /// The program the condition template renders to.
    pub template: Option<RuleProgram>,
    /// The hand-written program.
    pub program: Option<RuleProgram>,
}

/// A compiled rule program with the references it reads (as `refs.<name>`).
#[derive(Clone, Debug)]
pub struct RuleProgram {
    /// Field path of the template or program, for messages.
    pub field: String,
    /// The program.
    pub program: Program,
    /// References resolved before each run, by name.
    pub refs: Vec<(&'static str, CompiledRef)>,
    /// A structured template's native form, which gives the program's result without running
    /// it where it can vouch for it (see [`crate::native`]); `None` for hand-written programs.
    pub native: Option<NativeRule>,
    /// Written by the policy's author (a `program` field), not rendered by kanon from a
    /// template: run by the lookup's [`crate::host::ProgramHost`] when it offers one.
    pub authored: bool,
    /// A validate condition's message, rendered apart from its verdict, on a denial; `None`
    /// for other rules, whose programs give their verdicts (or operations) whole.
    pub message: Option<ConditionMessage>,
}

impl RuleProgram {
    /// How an error of this rule reads: the field and what went wrong. A template's error
    /// names the template's own field (its `condition`, for a validate template) without the
    /// line of the program kanon rendered from it; a hand-written program's names its line.
    pub fn error(&self, e: &crate::program::ProgramError) -> String {
        if self.authored {
            return format!("{}: {}", self.field, e.message);
        }
        match &self.message {
            Some(_) => format!("{}.condition: {}", self.field, e.brief()),
            None => format!("{}: {}", self.field, e.brief()),
        }
    }
}

/// A template's rendered program, for `kanon render` and the policy status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// Field path of the template.
    pub field: String,
    /// The program text (shared with the compiled program).
    pub source: Arc<str>,
}

/// Compiles a program; `lazily` for a template whose native form answers nearly every request,
/// so that 10,000 such policies do not each hold a built environment (see [`Program`]).
fn compile_program(
    source: Arc<str>,
    kind: ProgramKind,
    lazily: bool,
    field: &str,
    errors: &mut Vec<FieldError>,
) -> Option<Program> {
    match Program::compile_shared(source, kind, ProgramLimits::default(), lazily) {
        Ok(p) => Some(p),
        Err(e) => {
            errors.push(FieldError::new(field, e.message));
            None
        }
    }
}

/// What a compiled policy does.
#[derive(Clone, Debug)]
pub enum PolicyRules {
    /// Override rules, in order.
    Override(Vec<CompiledOverrideRule>),
    /// Validate rules, in order, and what a failure does.
    Validate {
        /// The rules.
        rules: Vec<CompiledValidateRule>,
        /// Deny (default), Warn and/or Audit.
        actions: Vec<ValidationAction>,
    },
}

/// A policy in the checked form the index and evaluation use, built once per policy change.
#[derive(Clone, Debug)]
pub struct CompiledPolicy {
    /// Identity.
    pub id: PolicyId,
    /// The identity as text (`Kind/name`, `Kind/namespace/name`), made once: every decision
    /// and metric names the policy by it.
    pub label: Arc<str>,
    /// What an evaluation error does.
    pub failure_policy: FailurePolicy,
    /// The resource selectors; empty selects every object the policy may see.
    pub selectors: Vec<ResourceMatcher>,
    /// The namespace selector (cluster policies).
    pub namespace_selector: Option<LabelMatcher>,
    /// The rules.
    pub rules: PolicyRules,
    /// Set when the policy did not compile: a matching request then meets this error under the
    /// policy's failure policy, as a policy that got past admission while kanon was down would.
    pub defect: Option<Arc<InvalidPolicy>>,
    /// The programs the policy's templates render to, in rule order.
    pub rendered: Vec<Rendered>,
    /// Likely mistakes that do not make the policy invalid (a path no selected kind has, a
    /// validate rule that also judges DELETE), by field path: shown by `kanon apply` and
    /// `kanon test`, returned as admission warnings when the policy is written, and kept in
    /// its status.
    pub warnings: Vec<FieldError>,
}

/// Result of [`compile`]: the compiled policy, which is usable for matching even when invalid,
/// and its errors.
pub struct Compiled {
    /// The compiled policy; its `defect` is set when `errors` is not empty.
    pub policy: CompiledPolicy,
    /// Every problem found, by field path.
    pub errors: Vec<FieldError>,
}

impl Compiled {
    /// Puts `problems` found while decoding the document (unknown fields, ...) ahead of the
    /// compile errors, and marks the policy defective when there are any: what
    /// [`crate::compile_document_reporting`] does with
    /// [`PolicyObject::decode_reporting`]'s problems.
    pub fn with_decode_problems(mut self, mut problems: Vec<FieldError>) -> Compiled {
        if problems.is_empty() {
            return self;
        }
        problems.append(&mut self.errors);
        self.errors = problems;
        self.policy.defect = Some(Arc::new(InvalidPolicy {
            policy: self.policy.id.to_string(),
            errors: self.errors.clone(),
        }));
        self
    }
}

/// Common parts of the four specs, borrowed.
struct SpecParts<'a> {
    selectors: &'a [ResourceSelector],
    namespace_selector: Option<&'a LabelSelector>,
    failure_policy: Option<FailurePolicy>,
}

fn compile_selectors(
    id: &PolicyId,
    parts: &SpecParts<'_>,
    errors: &mut Vec<FieldError>,
) -> Vec<ResourceMatcher> {
    let mut matchers = Vec::with_capacity(parts.selectors.len());
    for (i, selector) in parts.selectors.iter().enumerate() {
        let field = format!("spec.resourceSelectors[{i}]");
        let before = errors.len();
        let matcher = ResourceMatcher::compile(selector, &field, errors);
        if let Some(own) = &id.namespace
            && let Some(ns) = matcher.namespace()
            && ns != own
        {
            errors.push(FieldError::new(
                format!("{field}.namespace"),
                format!("a namespaced policy selects only its own namespace `{own}`, not `{ns}`"),
            ));
        }
        // A selector that does not compile still selects its type, so that requests it was
        // written for meet the policy's failure policy instead of passing silently.
        if errors.len() > before {
            matchers.push(ResourceMatcher::kind_only(
                &selector.api_version,
                &selector.kind,
            ));
        } else {
            matchers.push(matcher);
        }
    }
    matchers
}

fn compile_override_rules(
    rules: &[OverrideRule],
    own_namespace: Option<&str>,
    errors: &mut Vec<FieldError>,
    rendered: &mut Vec<Rendered>,
) -> Vec<CompiledOverrideRule> {
    let mut out = Vec::with_capacity(rules.len());
    for (i, rule) in rules.iter().enumerate() {
        let field = format!("spec.overrideRules[{i}].overriders");
        let o = &rule.overriders;
        if o.template.is_none() && o.program.is_none() && o.plaintext.is_empty() {
            errors.push(FieldError::new(
                &field,
                "no overrider: set template, program or plaintext",
            ));
        }
        let template = o.template.as_ref().and_then(|t| {
            let at = format!("{field}.template");
            let (source, native) = crate::template::compile_override(t, &at, errors)?;
            let source: Arc<str> = source.into();
            rendered.push(Rendered {
                field: at.clone(),
                source: source.clone(),
            });
            let refs = t
                .value_ref
                .iter()
                .map(|r| {
                    (
                        "value",
                        CompiledRef::compile(r, &format!("{at}.valueRef"), own_namespace, errors),
                    )
                })
                .collect();
            let program = compile_program(source, ProgramKind::Override, true, &at, errors)?;
            Some(RuleProgram {
                field: at,
                program,
                refs,
                native: Some(native),
                authored: false,
                message: None,
            })
        });
        let program = o.program.as_ref().and_then(|source| {
            let at = format!("{field}.program");
            let program = compile_program(
                source.as_str().into(),
                ProgramKind::Override,
                false,
                &at,
                errors,
            )?;
            Some(RuleProgram {
                field: at,
                program,
                refs: Vec::new(),
                native: None,
                authored: true,
                message: None,
            })
        });
        let plaintext: Vec<PlaintextOp> = o
            .plaintext
            .iter()
            .enumerate()
            .filter_map(|(j, p)| plaintext::compile(p, &format!("{field}.plaintext[{j}]"), errors))
            .collect();
        let patch = plaintext.iter().map(|p| p.operation.clone()).collect();
        out.push(CompiledOverrideRule {
            operations: OperationSet::from_targets(&rule.target_operations),
            template,
            program,
            plaintext,
            patch,
        });
    }
    out
}

fn compile_validate_rules(
    rules: &[ValidateRule],
    own_namespace: Option<&str>,
    errors: &mut Vec<FieldError>,
    rendered: &mut Vec<Rendered>,
) -> Vec<CompiledValidateRule> {
    let mut out = Vec::with_capacity(rules.len());
    for (i, rule) in rules.iter().enumerate() {
        let field = format!("spec.validateRules[{i}]");
        if rule.template.is_none() && rule.program.is_none() {
            errors.push(FieldError::new(&field, "no check: set template or program"));
        }
        let template = rule.template.as_ref().and_then(|t| {
            let at = format!("{field}.template");
            let Some(condition) = &t.condition else {
                errors.push(FieldError::new(
                    format!("{at}.condition"),
                    "is required for type condition",
                ));
                return None;
            };
            let cond_at = format!("{at}.condition");
            let mut refs = vec![(
                "data",
                CompiledRef::compile(
                    &condition.data_ref,
                    &format!("{cond_at}.dataRef"),
                    own_namespace,
                    errors,
                )
                .per_item(),
            )];
            if let Some(v) = &condition.value_ref {
                refs.push((
                    "value",
                    CompiledRef::compile(v, &format!("{cond_at}.valueRef"), own_namespace, errors),
                ));
            }
            let (source, native, message) =
                crate::template::compile_condition(condition, &cond_at, errors)?;
            let source: Arc<str> = source.into();
            rendered.push(Rendered {
                field: at.clone(),
                source: source.clone(),
            });
            // The message is the second part of what the condition means.
            if condition.message.is_some() {
                rendered.push(Rendered {
                    field: message.field().to_string(),
                    source: message.source().into(),
                });
            }
            let program =
                compile_program(source, ProgramKind::Validate, native.is_some(), &at, errors)?;
            Some(RuleProgram {
                field: at,
                program,
                refs,
                native,
                authored: false,
                message: Some(message),
            })
        });
        let program = rule.program.as_ref().and_then(|source| {
            let at = format!("{field}.program");
            let program = compile_program(
                source.as_str().into(),
                ProgramKind::Validate,
                false,
                &at,
                errors,
            )?;
            Some(RuleProgram {
                field: at,
                program,
                refs: Vec::new(),
                native: None,
                authored: true,
                message: None,
            })
        });
        out.push(CompiledValidateRule {
            operations: OperationSet::from_targets(&rule.target_operations),
            template,
            program,
        });
    }
    out
}

fn check_actions(
    actions: &[ValidationAction],
    errors: &mut Vec<FieldError>,
) -> Vec<ValidationAction> {
    for (i, a) in actions.iter().enumerate() {
        if actions[..i].contains(a) {
            errors.push(FieldError::new(
                format!("spec.validationActions[{i}]"),
                format!("{a:?} is listed twice"),
            ));
        }
    }
    if actions.contains(&ValidationAction::Deny) && actions.contains(&ValidationAction::Warn) {
        errors.push(FieldError::new(
            "spec.validationActions",
            "Deny and Warn may not be used together (a denied request has no use for the warning)",
        ));
    }
    if actions.is_empty() {
        vec![ValidationAction::Deny]
    } else {
        actions.to_vec()
    }
}

/// Compiles a decoded policy: checks every field and builds matchers and rules. The result is
/// usable even when there are errors (see [`CompiledPolicy::defect`]). Kinds and paths are
/// checked against Kubernetes' built-in kinds; [`compile_with`] knows custom ones too.
pub fn compile(object: &PolicyObject) -> Compiled {
    match Kinds::builtin() {
        Ok(kinds) => compile_checked(object, Some(&kinds)),
        // The schema is embedded and checked by tests: failing to load it is a defect of the
        // build, not of the policy, which then compiles without the kind checks.
        Err(_) => compile_checked(object, None),
    }
}

/// [`compile`], checking kinds and paths against `kinds`: the built-in ones and, in a
/// cluster, the custom ones its CustomResourceDefinitions serve. Custom kinds only ever add
/// warnings, so the errors are those of [`compile`].
pub fn compile_with(object: &PolicyObject, kinds: &Kinds) -> Compiled {
    compile_checked(object, Some(kinds))
}

/// The [`CompiledPolicy::warnings`] that [`compile_with`] gives `object` with `kinds`, without
/// compiling the rest: they are the only part of its result that depends on the custom kinds,
/// so this is how a compiled policy's warnings follow a change of the custom kinds.
pub fn kinds_warnings(object: &PolicyObject, kinds: &Kinds) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    crate::kubernetes::check(object.written(), kinds, &mut errors, &mut warnings);
    warnings
}

fn compile_checked(object: &PolicyObject, kinds: Option<&Kinds>) -> Compiled {
    let id = object.id();
    let mut errors = Vec::new();
    if id.name.is_empty() {
        errors.push(FieldError::new("metadata.name", "is required"));
    }
    if id.kind.is_namespaced() && id.namespace.as_deref().unwrap_or("").is_empty() {
        errors.push(FieldError::new(
            "metadata.namespace",
            format!("is required for {}", id.kind),
        ));
    }
    let parts = match object {
        PolicyObject::ClusterOverride(p) => SpecParts {
            selectors: &p.spec.resource_selectors,
            namespace_selector: p.spec.namespace_selector.as_ref(),
            failure_policy: p.spec.failure_policy,
        },
        PolicyObject::Override(p) => SpecParts {
            selectors: &p.spec.resource_selectors,
            namespace_selector: None,
            failure_policy: p.spec.failure_policy,
        },
        PolicyObject::ClusterValidate(p) => SpecParts {
            selectors: &p.spec.resource_selectors,
            namespace_selector: p.spec.namespace_selector.as_ref(),
            failure_policy: p.spec.failure_policy,
        },
        PolicyObject::Validate(p) => SpecParts {
            selectors: &p.spec.resource_selectors,
            namespace_selector: None,
            failure_policy: p.spec.failure_policy,
        },
    };
    let selectors = compile_selectors(&id, &parts, &mut errors);
    let namespace_selector = parts
        .namespace_selector
        .map(|s| LabelMatcher::compile(s, "spec.namespaceSelector", &mut errors));
    let mut rendered = Vec::new();
    let rules = match object {
        PolicyObject::ClusterOverride(p) => PolicyRules::Override(compile_override_rules(
            &p.spec.override_rules,
            id.namespace.as_deref(),
            &mut errors,
            &mut rendered,
        )),
        PolicyObject::Override(p) => PolicyRules::Override(compile_override_rules(
            &p.spec.override_rules,
            id.namespace.as_deref(),
            &mut errors,
            &mut rendered,
        )),
        PolicyObject::ClusterValidate(p) => PolicyRules::Validate {
            rules: compile_validate_rules(
                &p.spec.validate_rules,
                id.namespace.as_deref(),
                &mut errors,
                &mut rendered,
            ),
            actions: check_actions(&p.spec.validation_actions, &mut errors),
        },
        PolicyObject::Validate(p) => PolicyRules::Validate {
            rules: compile_validate_rules(
                &p.spec.validate_rules,
                id.namespace.as_deref(),
                &mut errors,
                &mut rendered,
            ),
            actions: check_actions(&p.spec.validation_actions, &mut errors),
        },
    };
    let mut warnings = Vec::new();
    if let Some(kinds) = kinds {
        crate::kubernetes::check(object.written(), kinds, &mut errors, &mut warnings);
    }
    let defect = (!errors.is_empty()).then(|| {
        Arc::new(InvalidPolicy {
            policy: id.to_string(),
            errors: errors.clone(),
        })
    });
    Compiled {
        policy: CompiledPolicy {
            label: id.to_string().into(),
            id,
            failure_policy: parts.failure_policy.unwrap_or_default(),
            selectors,
            namespace_selector,
            rules,
            defect,
            rendered,
            warnings,
        },
        errors,
    }
}

impl CompiledPolicy {
    /// Whether the policy's resource selectors select the object, the namespace rule
    /// included: a namespaced policy only ever sees objects of its own namespace. The
    /// namespace selector is separate ([`CompiledPolicy::selects_namespace`]) because it needs
    /// a lookup.
    pub fn selects_resource(&self, object: &ObjectView<'_>) -> bool {
        if let Some(own) = &self.id.namespace
            && object.namespace != Some(own.as_str())
        {
            return false;
        }
        self.selectors.is_empty() || self.selectors.iter().any(|s| s.matches(object))
    }

    /// Whether judging the object needs the labels of its namespace: the policy has a
    /// non-empty namespace selector and the object is namespaced. As in Kubernetes' own
    /// webhook matching, a Namespace is judged by its own labels and other cluster-scoped
    /// objects always pass.
    pub fn reads_namespace_labels(&self, object: &ObjectView<'_>) -> bool {
        self.namespace_selector
            .as_ref()
            .is_some_and(|s| !s.is_empty())
            && !(object.kind == "Namespace" && object.api_version == "v1")
            && object.namespace.is_some()
    }

    /// Whether the namespace selector (if any) selects the object. `namespace_labels` gives the
    /// labels of the object's namespace (`Ok(None)`: it has none; `Err`: it could not be
    /// found) and is called only when needed ([`CompiledPolicy::reads_namespace_labels`]); an
    /// empty selector selects every namespace without reading it.
    pub fn selects_namespace<'n>(
        &self,
        object: &ObjectView<'_>,
        namespace_labels: impl FnOnce() -> Result<Option<&'n Map<String, Value>>, String>,
    ) -> Result<bool, String> {
        let Some(selector) = &self.namespace_selector else {
            return Ok(true);
        };
        if selector.is_empty() {
            return Ok(true);
        }
        if object.kind == "Namespace" && object.api_version == "v1" {
            return Ok(selector.matches(labels_of(object.object)));
        }
        if object.namespace.is_none() {
            return Ok(true);
        }
        Ok(selector.matches(namespace_labels()?))
    }
}
