//! Placeholder: filled in by the tls work of issue 4.
