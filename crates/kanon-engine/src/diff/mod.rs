//! The JSON Patch from an object to its mutated form, as kube-apiserver receives it.
//!
//! The operations are exactly those of `json_patch::diff` (same order, same form: objects key by
//! key, arrays index by index with removals shifting later indexes, a `replace` for any other
//! change), so answers do not change with the implementation. It is written for the request
//! path: equal subtrees are skipped after one comparison, and a JSON pointer is built only for
//! an operation that is emitted, not for every key visited.

mod changes;
mod differ;
mod places;
#[cfg(test)]
mod tests;
mod touched;

pub use changes::Changes;
#[cfg(test)]
use differ::diff_touched;
pub(crate) use differ::{diff, diff_at};
#[cfg(test)]
use touched::Touched;
pub(crate) use touched::operation_pointers;
