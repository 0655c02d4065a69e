//! The variables a rule sees, whatever its language. `Scope::variables` gathers them, in one
//! place; each language turns them into its own values (the program runtime into a minijinja
//! context, see [`crate::program::context`]; a worker's call into JSON, see
//! [`crate::host::ProgramInput`]).

use std::sync::Arc;

use serde_json::{Map, Value};

/// What a rule reads: the request's object and old object, the operation, the request's
/// fields, the namespace of the object, and the rule's resolved references.
#[derive(Clone, Debug, PartialEq)]
pub struct Variables<'v> {
    /// `object`: the object as it stands (after earlier policies' changes).
    pub object: &'v Value,
    /// `oldObject`: the previous object (UPDATE, DELETE).
    pub old_object: Option<&'v Value>,
    /// `operation`: `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: &'v str,
    /// `request`: uid, kind, resource, subResource, name, namespace, operation, userInfo,
    /// dryRun.
    pub request: &'v Value,
    /// `namespaceObject`: the object's namespace, when known.
    pub namespace_object: Option<Arc<Value>>,
    /// `refs`: the rule's resolved references, by name (`data`, `value` for templates).
    pub refs: Map<String, Value>,
    /// The documents above already held shared, so that a program's context wraps them
    /// instead of copying them; empty where they are not.
    pub shared: Shared,
}

/// [`Variables`]' documents held shared ([`Arc`]): each the same value as its variable, made
/// once per request so that every program on it reads one copy.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shared {
    /// `object`, when it is the request's own.
    pub object: Option<Arc<Value>>,
    /// `oldObject`.
    pub old_object: Option<Arc<Value>>,
    /// `request`.
    pub request: Option<Arc<Value>>,
}
