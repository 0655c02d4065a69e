//! Placeholder: filled in by the server work of issue 4.
