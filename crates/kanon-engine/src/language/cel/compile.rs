//! Compiling a CEL rule's expressions: one environment per rule (the base variables, then each
//! of the rule's `variables` typed by its own expression), every expression checked for the
//! type its field needs, every problem reported at its field path.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};

use kanon_cel::composition::{declared_name, variable_type};
use kanon_cel::{Env, Program, Type};

use crate::error::FieldError;

/// The variable holding the request's Namespace, read only for rules that name it.
const NAMESPACE_OBJECT: &str = "namespaceObject";

/// The variables every CEL rule of kanon's kinds sees, in slot order.
pub(crate) const BASE_VARIABLES: [&str; 5] = [
    "object",
    "oldObject",
    "request",
    "namespaceObject",
    "references",
];

/// The variables a ValidatingAdmissionPolicy's or MutatingAdmissionPolicy's expressions see, in
/// slot order: kube-apiserver's, with `params` where kanon's rules have `references`.
pub(crate) const ADMISSION_VARIABLES: [&str; 5] = [
    "object",
    "oldObject",
    "request",
    "namespaceObject",
    "params",
];

/// Where a CEL rule is written, which decides the names it sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Site {
    /// In a rule of kanon's kinds: `references`, no `params`.
    KanonRule,
    /// In a Kubernetes admission policy: `params`, no `references`.
    AdmissionPolicy,
}

/// Names kube-apiserver declares that kanon does not, with why: refused when written, never
/// silently false or null.
const NOT_HERE: [(&str, &str); 2] = [
    (
        "authorizer",
        "`authorizer` (authorization checks) is not available in kanon: kanon does not make SubjectAccessReviews",
    ),
    (
        "params",
        "`params` exists only in a ValidatingAdmissionPolicy or MutatingAdmissionPolicy with a paramKind; a kanon rule reads other objects through `references`",
    ),
];

fn environment(variables: [&str; 5]) -> Env {
    let mut env = Env::kubernetes();
    for name in variables {
        env.declare_variable(name, Type::Dyn);
    }
    kanon_cel::library::admission::declare_variables(&mut env);
    env
}

/// MutatingAdmissionPolicy's additions: `jsonpatch.escapeKey`, the `JSONPatch` type and the
/// `Object` types of apply configurations (`Object`, `Object.spec`, ...).
fn for_mutations(mut env: Env) -> Env {
    kanon_cel::library::install_patch_types(&mut env);
    env.declare_object("JSONPatch");
    env.declare_object_family("Object");
    env
}

/// kube-apiserver's environment with kanon's base variables: built once.
static BASE: LazyLock<Env> = LazyLock::new(|| environment(BASE_VARIABLES));
/// The same for override rules.
static MUTATION_BASE: LazyLock<Env> = LazyLock::new(|| for_mutations(BASE.clone()));
/// kube-apiserver's own environment of admission policies.
static ADMISSION: LazyLock<Env> = LazyLock::new(|| environment(ADMISSION_VARIABLES));
/// The same for MutatingAdmissionPolicy.
static ADMISSION_MUTATION: LazyLock<Env> = LazyLock::new(|| for_mutations(ADMISSION.clone()));

/// A compiled expression and where it was written.
#[derive(Debug, Clone)]
pub(crate) struct Expression {
    /// Its field path (`spec.validateRules[0].cel.validations[1].expression`).
    pub(crate) field: String,
    /// The plan.
    pub(crate) program: Arc<Program>,
}

impl Expression {
    /// The expression's text.
    pub(crate) fn source(&self) -> &str {
        self.program.source()
    }
}

/// A named expression (a match condition or a variable).
#[derive(Debug, Clone)]
pub(crate) struct Named {
    pub(crate) name: String,
    pub(crate) expression: Expression,
}

/// A problem of one expression when compiled.
pub(crate) type CelError = FieldError;

/// The environment one rule's expressions are compiled in, growing as its variables compile.
pub(crate) struct RuleEnv {
    env: Env,
    site: Site,
    /// Whether an expression compiled here names `namespaceObject`.
    reads_namespace: std::cell::Cell<bool>,
    /// What the expressions compiled so far read of `object` and `oldObject`.
    object_read: std::cell::RefCell<crate::projection::Projection>,
    /// What the environment was made of (its base, then each variable declared, by name and
    /// source), so that an expression compiled in an equal one shares its program (see
    /// [`Interned`]); `None` once the environment was changed some other way.
    made_of: Option<String>,
}

/// Compiled programs by the environment they were compiled in ([`RuleEnv::made_of`]) and their
/// source, held weakly: ten thousand policies with the same rule (one per namespace, say) hold
/// one program between them, not ten thousand (about 2 KiB each for a rule over a Pod's
/// containers), and a program goes when the last policy holding it does.
struct Interned {
    programs: HashMap<(String, String), Weak<Program>>,
    /// The table's size after it was last cleared of programs no policy holds.
    live: usize,
}

static INTERNED: LazyLock<Mutex<Interned>> = LazyLock::new(|| {
    Mutex::new(Interned {
        programs: HashMap::new(),
        live: 0,
    })
});

/// The program `compile` gives for `source` in the environment `made_of`: the one an earlier
/// compile made, while some policy still holds it, else a new one. Compiling is pure, so the
/// two are the same program.
fn interned(
    made_of: &str,
    source: &str,
    compile: impl FnOnce() -> Result<Program, kanon_cel::CompileError>,
) -> Result<Arc<Program>, kanon_cel::CompileError> {
    let key = (made_of.to_owned(), source.to_owned());
    let lock = || INTERNED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(program) = lock().programs.get(&key).and_then(Weak::upgrade) {
        return Ok(program);
    }
    // Compiled without the lock: two threads compiling the same source at once each keep
    // their own, which is only memory.
    let program = Arc::new(compile()?);
    let mut table = lock();
    table.programs.insert(key, Arc::downgrade(&program));
    if table.programs.len() > 2 * table.live.max(512) {
        table
            .programs
            .retain(|_, program| program.strong_count() > 0);
        table.live = table.programs.len();
    }
    Ok(program)
}

/// What a field's expression must give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expect {
    Bool,
    String,
    /// A string or null (an audit annotation's value).
    StringOrNull,
    /// A list of `JSONPatch`.
    Patches,
    /// An `Object{...}` (an apply configuration).
    ApplyConfiguration,
    Any,
}

impl RuleEnv {
    /// The environment of a validate rule.
    pub(crate) fn validation(site: Site) -> Self {
        let env = match site {
            Site::KanonRule => &BASE,
            Site::AdmissionPolicy => &ADMISSION,
        };
        RuleEnv {
            env: LazyLock::force(env).clone(),
            site,
            reads_namespace: std::cell::Cell::new(false),
            object_read: std::cell::RefCell::new(crate::projection::Projection::nothing()),
            made_of: Some(format!("{site:?} validation")),
        }
    }

    /// The environment of an override rule (MutatingAdmissionPolicy's).
    pub(crate) fn mutation(site: Site) -> Self {
        let env = match site {
            Site::KanonRule => &MUTATION_BASE,
            Site::AdmissionPolicy => &ADMISSION_MUTATION,
        };
        RuleEnv {
            env: LazyLock::force(env).clone(),
            site,
            reads_namespace: std::cell::Cell::new(false),
            object_read: std::cell::RefCell::new(crate::projection::Projection::nothing()),
            made_of: Some(format!("{site:?} mutation")),
        }
    }

    /// Whether some expression compiled so far names `namespaceObject`: a rule none of whose
    /// expressions does runs without its namespace being read.
    pub(crate) fn reads_namespace(&self) -> bool {
        self.reads_namespace.get()
    }

    /// What the expressions compiled so far read of `object` and `oldObject`.
    pub(crate) fn object_read(&self) -> crate::projection::Projection {
        self.object_read.borrow().clone()
    }

    /// Changes the environment (the schema checks type `object` as a kind).
    pub(crate) fn with_env(&mut self, change: impl FnOnce(&mut Env)) {
        change(&mut self.env);
        self.made_of = None;
    }

    /// Declares `variables.<name>` as `kind`, made of `source` (`None`: an expression that did
    /// not compile, declared as dyn).
    fn declare(&mut self, name: &str, kind: Type, source: Option<&str>) {
        self.env.declare_variable(&declared_name(name), kind);
        if let Some(made_of) = &mut self.made_of {
            made_of.push_str(&format!("\0{name}\0{}", source.unwrap_or("\0")));
        }
    }

    /// The environment as it stands, for compiling on one's own terms.
    pub(crate) fn into_env(self) -> Env {
        self.env
    }

    /// Compiles one expression at `field`, which must give `expect`.
    pub(crate) fn compile(
        &self,
        source: &str,
        field: &str,
        expect: Expect,
        errors: &mut Vec<CelError>,
    ) -> Option<Expression> {
        if source.trim().is_empty() {
            errors.push(FieldError::new(field, "an expression is required"));
            return None;
        }
        let compiled = match &self.made_of {
            Some(made_of) => interned(made_of, source, || self.env.compile(source)),
            None => self.env.compile(source).map(Arc::new),
        };
        let program = match compiled {
            Ok(program) => program,
            Err(error) => {
                errors.push(FieldError::new(field, explain(&error)));
                return None;
            }
        };
        if program.reads(NAMESPACE_OBJECT) {
            self.reads_namespace.set(true);
        }
        {
            let mut read = self.object_read.borrow_mut();
            read.add_read(&program.fields_read("object"));
            read.add_read(&program.fields_read("oldObject"));
        }
        // The result's static type must be exactly the one wanted, as kube-apiserver checks it
        // when a policy is written (`IsExactType`): `dyn` is not `bool`, so a rule reading a
        // field of an untyped object (`object.spec.hostNetwork`) must compare it.
        let found = program.result_type();
        let fits = match expect {
            Expect::Any => true,
            Expect::Bool => *found == Type::Bool,
            Expect::String => *found == Type::String,
            Expect::StringOrNull => matches!(found, Type::String | Type::Null),
            // A list of JSONPatch, as kube-apiserver requires (`[]` alone is `list(dyn)`).
            Expect::Patches => {
                *found == Type::List(std::sync::Arc::new(Type::Object("JSONPatch".into())))
            }
            Expect::ApplyConfiguration => *found == Type::Object("Object".into()),
        };
        if !fits {
            // kube-apiserver's words (and cel-go's names of the types).
            let wanted = match expect {
                Expect::Bool => "bool",
                Expect::String => "string",
                Expect::StringOrNull => "one of [string null_type]",
                Expect::Patches => "list(JSONPatch)",
                Expect::ApplyConfiguration => "Object",
                Expect::Any => "any",
            };
            errors.push(FieldError::new(
                field,
                format!("must evaluate to {wanted} but got {}", found.runtime_text()),
            ));
            return None;
        }
        Some(Expression {
            field: field.to_owned(),
            program,
        })
    }

    /// Compiles the rule's variables in order, each visible to the ones after it (and to the
    /// rule's other expressions) as `variables.<name>`.
    pub(crate) fn variables(
        &mut self,
        variables: &[kanon_api::Variable],
        at: &str,
        errors: &mut Vec<CelError>,
    ) -> Vec<Named> {
        let mut compiled = Vec::with_capacity(variables.len());
        for (index, variable) in variables.iter().enumerate() {
            let field = format!("{at}.variables[{index}]");
            if !is_identifier(&variable.name) {
                errors.push(FieldError::new(
                    format!("{field}.name"),
                    format!("`{}` is not a CEL identifier (letters, digits and `_`, not starting with a digit)", variable.name),
                ));
                continue;
            }
            let earlier = compiled
                .iter()
                .position(|known: &Named| known.name == variable.name);
            if earlier.is_some() && self.site == Site::KanonRule {
                errors.push(FieldError::new(
                    format!("{field}.name"),
                    format!("variable `{}` is declared twice", variable.name),
                ));
                continue;
            }
            let expression_field = format!("{field}.expression");
            let Some(expression) =
                self.compile(&variable.expression, &expression_field, Expect::Any, errors)
            else {
                // Declared anyway (as dyn), so that its uses are not reported again.
                self.declare(&variable.name, Type::Dyn, None);
                continue;
            };
            let kind = variable_type(expression.program.result_type());
            self.declare(&variable.name, kind, Some(&variable.expression));
            let named = Named {
                name: variable.name.clone(),
                expression,
            };
            match earlier {
                // kube-apiserver accepts a name declared twice in an admission policy: the
                // later definition replaces the earlier one for every expression (in its slot).
                Some(slot) => compiled[slot] = named,
                None => compiled.push(named),
            }
        }
        compiled
    }

    /// Compiles the rule's kanon references, each read as `references.<name>`.
    pub(crate) fn references(
        &self,
        references: &std::collections::BTreeMap<String, kanon_api::ResourceRefer>,
        at: &str,
        own_namespace: Option<&str>,
        errors: &mut Vec<CelError>,
    ) -> Vec<(String, crate::references::CompiledRef)> {
        references
            .iter()
            .map(|(name, reference)| {
                let field = format!("{at}.references.{name}");
                if !is_identifier(name) {
                    errors.push(FieldError::new(
                        &field,
                        format!("`{name}` is not a CEL identifier (letters, digits and `_`, not starting with a digit), so `references.{name}` could not read it"),
                    ));
                }
                let compiled = crate::references::CompiledRef::compile(reference, &field, own_namespace, errors);
                (name.clone(), compiled)
            })
            .collect()
    }

    /// Compiles the rule's match conditions (at most 64, names unique, each a bool).
    pub(crate) fn match_conditions(
        &self,
        conditions: &[kanon_api::MatchCondition],
        at: &str,
        errors: &mut Vec<CelError>,
    ) -> Vec<Named> {
        if conditions.len() > 64 {
            errors.push(FieldError::new(
                format!("{at}.matchConditions"),
                format!(
                    "at most 64 match conditions are allowed, found {}",
                    conditions.len()
                ),
            ));
        }
        let mut compiled = Vec::with_capacity(conditions.len());
        for (index, condition) in conditions.iter().enumerate() {
            let field = format!("{at}.matchConditions[{index}]");
            if condition.name.is_empty() {
                errors.push(FieldError::new(
                    format!("{field}.name"),
                    "a name is required",
                ));
            } else if conditions[..index].iter().any(|c| c.name == condition.name) {
                errors.push(FieldError::new(
                    format!("{field}.name"),
                    format!("match condition `{}` is declared twice", condition.name),
                ));
            }
            if let Some(expression) = self.compile(
                &condition.expression,
                &format!("{field}.expression"),
                Expect::Bool,
                errors,
            ) {
                compiled.push(Named {
                    name: condition.name.clone(),
                    expression,
                });
            }
        }
        compiled
    }
}

/// A compile error as the policy author should read it: kube-apiserver's text, with a hint for
/// names kanon leaves out on purpose.
fn explain(error: &kanon_cel::CompileError) -> String {
    let text = error.to_string();
    for (name, why) in NOT_HERE {
        if text.contains(&format!("undeclared reference to '{name}'")) {
            return format!("{why}\n{text}");
        }
    }
    text
}

fn is_identifier(name: &str) -> bool {
    let mut characters = name.chars();
    characters
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && characters.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(env: &RuleEnv, source: &str) -> Arc<Program> {
        let mut errors = Vec::new();
        let expression = env.compile(source, "f", Expect::Bool, &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        expression.expect("compiles").program
    }

    fn variable(name: &str, expression: &str) -> kanon_api::Variable {
        serde_json::from_value(serde_json::json!({"name": name, "expression": expression}))
            .expect("a variable")
    }

    #[test]
    fn an_expression_compiled_in_an_equal_environment_shares_its_program() {
        const SOURCE: &str = "object.spec.containers.all(c, has(c.resources)) && variables.n > 1";
        let with = |expression: &str| {
            let mut env = RuleEnv::validation(Site::KanonRule);
            let mut errors = Vec::new();
            env.variables(&[variable("n", expression)], "spec", &mut errors);
            assert!(errors.is_empty(), "{errors:?}");
            env
        };
        let one = compiled(&with("1 + 1"), SOURCE);
        let two = compiled(&with("1 + 1"), SOURCE);
        assert!(Arc::ptr_eq(&one, &two), "one program for both rules");
        // Another variable (its type could differ), another site or another kind of rule:
        // programs of their own.
        let other = compiled(&with("2"), SOURCE);
        assert!(!Arc::ptr_eq(&one, &other));
        let admission = {
            let mut env = RuleEnv::validation(Site::AdmissionPolicy);
            env.variables(&[variable("n", "1 + 1")], "spec", &mut Vec::new());
            compiled(&env, SOURCE)
        };
        assert!(!Arc::ptr_eq(&one, &admission));
        // An environment changed by hand is never shared.
        let mut typed = with("1 + 1");
        typed.with_env(|env| {
            env.declare_variable("extra", Type::Int);
        });
        assert!(!Arc::ptr_eq(&one, &compiled(&typed, SOURCE)));
        // The table holds programs weakly: once no rule holds one, the next compile makes it
        // anew.
        let weak = Arc::downgrade(&one);
        drop((one, two));
        assert_eq!(weak.strong_count(), 0);
    }
}
