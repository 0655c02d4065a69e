//! Entry points into the engine's internals, for its fuzz targets (`fuzz/`) and its
//! differential tests (`tests/native.rs`, `tests/fuzz_regressions.rs`), which check pieces no
//! policy reaches one at a time. Built only with the `internals` feature; not an API: nothing
//! in kanon's own crates uses it.

pub use crate::language::RuleProgram;
pub use crate::language::plaintext::apply_all as apply_plaintext;
pub use crate::language::template::native::{NativeOutcome, NativeRule};
pub use crate::program::{json_value, patch_from_output, verdict_from_output};
pub use crate::references::selects_many;
pub use crate::selector::{FieldMatcher, ObjectView, ResourceMatcher};
pub use crate::shape::explain_decode_error;

/// JSONPaths run as the engine runs them: by reference, then copied within a bound.
pub mod jsonpath {
    pub use crate::jsonpath::copy::MAX_JSONPATH_RESULT_BYTES;
    pub use crate::jsonpath::select::MAX_JSONPATH_NODES;
    pub use crate::jsonpath::{SelectionError, copied, select};
}

/// JSON Pointer (RFC 6901) reading, as policies' paths use it.
pub mod pointer {
    pub use crate::pointer::{check, deepest_existing, escape, get};
}

/// The functions behind rule programs' helpers.
pub mod helpers {
    pub use crate::helpers::{compare, contains_all, contains_none, process_value, values_equal};
}
