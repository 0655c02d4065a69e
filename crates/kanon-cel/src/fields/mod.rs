//! Which fields of a declared variable a program may read: every place the variable is named,
//! followed as far as constant field names select from it. What lies below a path is read
//! whole; a variable named bare, or indexed by a computed key right away, is read whole.
//!
//! A caller that decodes the variable from a larger document (the object of an admission
//! review) may then leave out every field no path reaches: no evaluation of the program can
//! tell the difference, since a value is only ever reached through its variable.

use std::sync::Arc;

use crate::program::{Attr, Node, Program, QualKey, Root};
use crate::value::Value;

/// The fields of a variable a program may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldsRead {
    /// The whole value (named bare, compared whole, indexed by a computed key, …).
    Whole,
    /// The subtrees at these paths of field names, each read whole (`has(object.status)`
    /// reads `status`). Empty when the program never names the variable.
    Paths(Vec<Vec<Arc<str>>>),
}

impl FieldsRead {
    /// The subtrees at `paths`, each a list of field names.
    pub fn of_paths(paths: &[&[&str]]) -> FieldsRead {
        FieldsRead::Paths(
            paths
                .iter()
                .map(|path| path.iter().map(|field| Arc::from(*field)).collect())
                .collect(),
        )
    }

    /// Adds the subtree at `path` (all of it for an empty path).
    pub fn add(&mut self, path: Vec<Arc<str>>) {
        match self {
            FieldsRead::Whole => {}
            _ if path.is_empty() => *self = FieldsRead::Whole,
            FieldsRead::Paths(paths) => paths.push(path),
        }
    }
}

impl Program {
    /// Which fields of the declared variable `name` the expression may read (see
    /// [`FieldsRead`]): a caller that decodes the variable's value may leave out the rest.
    pub fn fields_read(&self, name: &str) -> FieldsRead {
        match self.reads.iter().find(|(read, _)| &**read == name) {
            Some(&(_, slot)) => read(&self.root, slot),
            None => FieldsRead::Paths(Vec::new()),
        }
    }
}

/// The fields of the variable in `slot` that `root` may read.
fn read(root: &Node, slot: usize) -> FieldsRead {
    let mut found = FieldsRead::Paths(Vec::new());
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        if matches!(found, FieldsRead::Whole) {
            break;
        }
        match node {
            Node::Const(_) | Node::Built(..) | Node::Fail(_) => {}
            Node::Attr(attr) | Node::Test(attr) => attribute(attr, slot, &mut found, &mut stack),
            Node::Call(call) => stack.extend(&call.args),
            Node::And(a, b) | Node::Or(a, b) | Node::OptOr(a, b) | Node::OptOrValue(a, b) => {
                stack.push(a);
                stack.push(b);
            }
            Node::NotStrictlyFalse(operand) | Node::SetMembership(operand, _) => {
                stack.push(operand);
            }
            Node::List(elements, _) => stack.extend(elements),
            Node::Map(entries, _) => {
                for (key, value, _) in entries {
                    stack.push(key);
                    stack.push(value);
                }
            }
            Node::Struct(_, fields) => stack.extend(fields.iter().map(|(_, value, _)| value)),
            Node::Fold(fold) => stack.extend([
                &fold.range,
                &fold.init,
                &fold.condition,
                &fold.step,
                &fold.result,
            ]),
        }
    }
    found
}

/// An attribute: a path when its root is the variable, and whatever its root and computed keys
/// read.
fn attribute<'n>(attr: &'n Attr, slot: usize, found: &mut FieldsRead, stack: &mut Vec<&'n Node>) {
    for qualifier in &attr.qualifiers {
        if let QualKey::Attr(key) = &qualifier.key {
            attribute(key, slot, found, stack);
        }
    }
    match &attr.root {
        Root::Variable(root) if *root == slot => {
            let path = attr
                .qualifiers
                .iter()
                .map_while(|qualifier| match &qualifier.key {
                    QualKey::Const(Value::String(name)) => Some(Arc::from(name.as_str())),
                    _ => None,
                })
                .collect();
            found.add(path);
        }
        Root::Variable(_) | Root::Local(_) | Root::Missing(_) => {}
        Root::Value(node) => stack.push(node),
        Root::Conditional(parts) => {
            stack.push(&parts.0);
            attribute(&parts.1, slot, found, stack);
            attribute(&parts.2, slot, found, stack);
        }
    }
}

#[cfg(test)]
mod tests;
