//! Placeholder: filled in by the metrics work of issue 4.
