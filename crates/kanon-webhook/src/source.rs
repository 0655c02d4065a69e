//! Placeholder: filled in by the source work of issue 4.
