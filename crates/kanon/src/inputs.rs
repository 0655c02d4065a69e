//! Reading the documents named on the command line: files, directories (recursively, `*.yaml`,
//! `*.yml`, `*.json`, in name order) or `-` for standard input. One implementation, shared
//! with `kanon serve --policies DIR`: [`kanon_webhook::source`].

pub use kanon_webhook::source::{Document, read_documents};
