//! The places a list of operations reached, to compare only there.

use json_patch::PatchOperation;
use json_patch::jsonptr::Pointer;

/// The places of a document that JSON Patch operations may have changed: a tree of object keys
/// whose marked nodes stand for their whole subtree.
///
/// Recorded while the operations are applied, it lets [`diff_touched`](super::diff_touched) skip every subtree no
/// operation reached instead of comparing it, which for a Pod is most of the object.
#[derive(Debug, Default)]
pub struct Touched {
    pub(super) whole: bool,
    pub(super) children: Vec<(String, Touched)>,
}

/// The places `op` may change: its `path`, and for a `move` its `from` as well. A `test`
/// changes nothing.
pub(super) fn targets(op: &PatchOperation) -> impl Iterator<Item = &Pointer> {
    let (first, second) = match op {
        PatchOperation::Test(_) => (None, None),
        PatchOperation::Move(m) => (Some(m.from.as_ref()), Some(m.path.as_ref())),
        other => (Some(other.path()), None),
    };
    first.into_iter().chain(second)
}

/// Every place `op` names: where it writes or tests, and where it moves or copies from.
pub(crate) fn operation_pointers(op: &PatchOperation) -> impl Iterator<Item = &Pointer> {
    let from = match op {
        PatchOperation::Move(m) => Some(m.from.as_ref()),
        PatchOperation::Copy(c) => Some(c.from.as_ref()),
        _ => None,
    };
    std::iter::once(op.path()).chain(from)
}

impl Touched {
    /// Records what `op` may change (`targets`).
    pub fn record(&mut self, op: &PatchOperation) {
        for pointer in targets(op) {
            self.insert(pointer);
        }
    }

    pub(super) fn insert(&mut self, pointer: &Pointer) {
        let mut node = self;
        for token in pointer.tokens() {
            if node.whole {
                return;
            }
            let key = token.decoded();
            let at = match node.children.iter().position(|(k, _)| *k == *key) {
                Some(at) => at,
                None => {
                    node.children.push((key.into_owned(), Touched::default()));
                    node.children.len() - 1
                }
            };
            node = &mut node.children[at].1;
        }
        // Everything below an operation's target may have changed.
        node.whole = true;
        node.children = Vec::new();
    }

    pub(super) fn child(&self, key: &str) -> Option<&Touched> {
        self.children
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, child)| child)
    }
}
