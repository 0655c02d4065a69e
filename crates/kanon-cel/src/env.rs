//! The declarations an expression is compiled against: variables, function overloads, object
//! types and the parser's and checker's options. What compiles an expression in an environment
//! is in `compile`; the standard definitions and kube-apiserver's libraries install themselves
//! into one (`Env::standard`, `Env::kubernetes`).

use std::collections::HashMap;
use std::sync::Arc;

use crate::function::parse_signature;
pub use crate::function::{CostFn, Implementation, Overload, Signature, parse_type};
use crate::options::ParseOptions;
use crate::types::Type;

/// Where object types get their fields: a Kubernetes schema, or nothing (every field `dyn`).
pub trait ObjectTypes: Send + Sync + std::fmt::Debug {
    /// The type of `field` in the object type `type_name`: `None` when the type is not known
    /// here (its fields are then `dyn`), `Some(None)` when it is known and has no such field.
    fn field(&self, type_name: &str, field: &str) -> Option<Option<Type>>;
}

/// The environment expressions are compiled in.
#[derive(Debug, Clone, Default)]
pub struct Env {
    pub(crate) variables: Vec<(Arc<str>, Type)>,
    pub(crate) functions: HashMap<Arc<str>, Vec<Arc<Overload>>>,
    pub(crate) parse_options: ParseOptions,
    pub(crate) objects: HashMap<Arc<str>, ()>,
    /// Families of object types: a root name whose dotted extensions are object types too
    /// (MutatingAdmissionPolicy's `Object`, `Object.spec`, `Object.spec.containers`, ...).
    pub(crate) object_families: Vec<Arc<str>>,
    /// Type names usable as type values (`type(x) == net.IP`) that no struct literal builds.
    pub(crate) type_names: std::collections::HashSet<Arc<str>>,
    /// Where object types find their fields, asked in order.
    pub(crate) object_types: Vec<Arc<dyn ObjectTypes>>,
    /// List and map literals must not mix element types (kube-apiserver's
    /// HomogeneousAggregateLiterals); off in cel-spec's plain environment.
    pub(crate) homogeneous_literals: bool,
    /// Build constant list and map literals and constant conversions when compiling, as
    /// kube-apiserver's `OptOptimize` does (a failing constant conversion is then a compile
    /// error); off in cel-spec's plain environment, where such errors are evaluation errors.
    pub(crate) fold_constants: bool,
    /// A map literal's repeated key replaces the earlier entry, as in cel-go (kube-apiserver);
    /// off in cel-spec's plain environment, where it is an error.
    pub(crate) repeated_keys: bool,
    /// kube-apiserver's literal validators: `duration('…')`, `timestamp('…')` and
    /// `matches('…')` with an invalid literal are compile errors.
    pub(crate) literal_validators: bool,
}

impl Env {
    /// An environment with nothing declared.
    pub fn empty() -> Env {
        Env::default()
    }

    pub fn parse_options(&self) -> &ParseOptions {
        &self.parse_options
    }

    pub fn set_parse_options(&mut self, options: ParseOptions) {
        self.parse_options = options;
    }

    /// Declares a variable; its position in declaration order is its slot in the values passed
    /// to [`Program::eval`](crate::Program::eval). Declaring a name again replaces its type,
    /// keeping its slot.
    pub fn declare_variable(&mut self, name: &str, kind: Type) -> usize {
        if let Some(slot) = self
            .variables
            .iter()
            .position(|(known, _)| &**known == name)
        {
            self.variables[slot].1 = kind;
            return slot;
        }
        self.variables.push((Arc::from(name), kind));
        self.variables.len() - 1
    }

    /// Removes the variable `name`, so that reading it is an undeclared reference. The
    /// variables declared after it move down a slot: for an environment that only checks
    /// expressions, or one whose activation is built after this.
    pub fn remove_variable(&mut self, name: &str) {
        self.variables.retain(|(known, _)| &**known != name);
    }

    pub fn variables(&self) -> &[(Arc<str>, Type)] {
        &self.variables
    }

    /// Adds a global overload, written as a signature: `"size(list(A)) -> int"` or
    /// `"optional.of(A) -> optional_type(A)"` (the name may hold dots; single capital letters are
    /// type parameters).
    ///
    /// # Panics
    /// When the signature does not parse: signatures are constants of this crate and its callers,
    /// checked by their tests.
    pub fn function(&mut self, id: &str, signature: &str, implementation: Implementation) {
        self.add(id, signature, false, implementation);
    }

    /// Adds a method overload: `"string.contains(string) -> bool"`; the receiver's type is
    /// everything before the last dot outside parentheses, and its first parameter.
    ///
    /// # Panics
    /// As [`Env::function`].
    pub fn method(&mut self, id: &str, signature: &str, implementation: Implementation) {
        self.add(id, signature, true, implementation);
    }

    fn add(&mut self, id: &str, text: &str, method: bool, implementation: Implementation) {
        let (function, signature) = parse_signature(text, method)
            .unwrap_or_else(|problem| panic!("overload {id}: signature {text:?}: {problem}"));
        let function: Arc<str> = Arc::from(function.as_str());
        let overload = Arc::new(Overload {
            id: Arc::from(id),
            function: function.clone(),
            signature,
            implementation,
            cost: None,
            cost_by_name: false,
            dispatched_cost: None,
        });
        self.functions.entry(function).or_default().push(overload);
    }

    /// Sets the cost of an overload already added (by id).
    pub fn set_cost(&mut self, id: &str, cost: CostFn) {
        for overloads in self.functions.values_mut() {
            for overload in overloads.iter_mut() {
                if &*overload.id == id {
                    Arc::make_mut(overload).cost = Some(cost);
                }
            }
        }
    }

    /// Sets the cost of an overload already added (by id), as kube-apiserver's estimator meters
    /// its function by name: it applies even where the overload is chosen at run time.
    pub fn set_name_cost(&mut self, id: &str, cost: CostFn) {
        for overloads in self.functions.values_mut() {
            for overload in overloads.iter_mut() {
                if &*overload.id == id {
                    let overload = Arc::make_mut(overload);
                    overload.cost = Some(cost);
                    overload.cost_by_name = true;
                }
            }
        }
    }

    /// Sets the cost of an overload (by id) where it is chosen at run time.
    pub fn set_dispatched_cost(&mut self, id: &str, cost: CostFn) {
        for overloads in self.functions.values_mut() {
            for overload in overloads.iter_mut() {
                if &*overload.id == id {
                    Arc::make_mut(overload).dispatched_cost = Some(cost);
                }
            }
        }
    }

    /// Adds where object types find their fields when checked (a Kubernetes schema): each
    /// type is asked of the sources in the order they were added, the first that knows it
    /// answers.
    pub fn add_object_types(&mut self, types: Arc<dyn ObjectTypes>) {
        self.object_types.push(types);
    }

    /// Refuse list and map literals that mix element types, as kube-apiserver does.
    pub fn set_homogeneous_literals(&mut self, homogeneous: bool) {
        self.homogeneous_literals = homogeneous;
    }

    /// Fold constants at compile time, as kube-apiserver's `OptOptimize` does.
    pub fn set_fold_constants(&mut self, fold: bool) {
        self.fold_constants = fold;
    }

    /// Validate duration, timestamp and regex literals when compiling, as kube-apiserver does.
    pub fn set_literal_validators(&mut self, validate: bool) {
        self.literal_validators = validate;
    }

    /// Let a map literal's repeated key replace the earlier entry, as cel-go does.
    pub fn set_repeated_keys(&mut self, allowed: bool) {
        self.repeated_keys = allowed;
    }

    /// Declares an object type that struct literals may build (`Object`, `JSONPatch`, …).
    pub fn declare_object(&mut self, name: &str) {
        self.objects.insert(Arc::from(name), ());
    }

    /// Declares a family of object types: `root` and every `root.<field>.<field>...`, each
    /// buildable by a struct literal with any fields (of type `dyn`), as kube-apiserver's
    /// MutatingAdmissionPolicy declares `Object` for apply configurations.
    pub fn declare_object_family(&mut self, root: &str) {
        self.object_families.push(Arc::from(root));
    }

    /// Whether a struct literal may build `name`.
    pub(crate) fn is_object(&self, name: &str) -> bool {
        self.objects.contains_key(name)
            || self.object_families.iter().any(|root| {
                name == &**root
                    || name
                        .strip_prefix(&**root)
                        .is_some_and(|rest| rest.starts_with('.') && rest.len() > 1)
            })
    }

    /// Declares a type name that expressions may use as a type value (`net.IP`), without
    /// letting a struct literal build it (see [`Env::declare_object`] for that).
    pub fn declare_type(&mut self, name: &str) {
        self.type_names.insert(Arc::from(name));
    }

    /// Is `name` a declared object or type name?
    pub(crate) fn names_type(&self, name: &str) -> bool {
        self.is_object(name) || self.type_names.contains(name)
    }

    /// Removes a function entirely (every overload): for environments that must refuse it.
    pub fn remove_function(&mut self, function: &str) {
        self.functions.remove(function);
    }

    /// Puts `function`'s overloads in the order of `ids` (any not named keep their order, after
    /// those named): the order the checker tries them in.
    pub(crate) fn order_overloads(&mut self, function: &str, ids: &[&str]) {
        if let Some(overloads) = self.functions.get_mut(function) {
            overloads.sort_by_key(|overload| {
                ids.iter()
                    .position(|id| **id == *overload.id)
                    .unwrap_or(ids.len())
            });
        }
    }

    /// The overloads of `function`, in the order the checker tries them.
    pub fn overloads(&self, function: &str) -> &[Arc<Overload>] {
        self.functions.get(function).map_or(&[], Vec::as_slice)
    }
}
