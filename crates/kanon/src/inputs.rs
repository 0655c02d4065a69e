//! Reading the documents named on the command line: files, directories (recursively, `*.yaml`,
//! `*.yml`, `*.json`, in name order) or `-` for standard input.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// A document and where it came from.
#[derive(Debug, Clone)]
pub struct Document {
    /// The file (or `-`) it was read from.
    pub source: String,
    /// 1-based position in that file.
    pub index: usize,
    /// The document.
    pub value: Value,
}

impl Document {
    /// `file`, or `file (document N)` past the first document of a file.
    pub fn origin(&self) -> String {
        if self.index > 1 {
            format!("{} (document {})", self.source, self.index)
        } else {
            self.source.clone()
        }
    }
}

/// A path that could not be read or parsed.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file or directory could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not valid YAML/JSON.
    #[error(transparent)]
    Parse(#[from] kanon_engine::DocumentError),
    /// A directory held no YAML or JSON file.
    #[error("{0}: no .yaml, .yml or .json file found")]
    Empty(String),
}

fn is_document_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), InputError> {
    let read_err = |source| InputError::Read {
        path: dir.display().to_string(),
        source,
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(read_err)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(read_err)?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_files(&path, out)?;
        } else if is_document_file(&path) {
            out.push(path);
        }
    }
    Ok(())
}

fn parse(text: &str, source: &str, json: bool) -> Result<Vec<Document>, InputError> {
    Ok(kanon_engine::parse_documents(text, source, json)?
        .into_iter()
        .enumerate()
        .map(|(i, value)| Document {
            source: source.to_string(),
            index: i + 1,
            value,
        })
        .collect())
}

/// Reads every document under `paths`, in the order given (directories in name order).
pub fn read_documents(paths: &[PathBuf]) -> Result<Vec<Document>, InputError> {
    let mut docs = Vec::new();
    for path in paths {
        if path.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|source| InputError::Read {
                    path: "-".into(),
                    source,
                })?;
            let json = text.trim_start().starts_with(['{', '[']);
            docs.extend(parse(&text, "-", json)?);
            continue;
        }
        let files = if path.is_dir() {
            let mut files = Vec::new();
            collect_files(path, &mut files)?;
            if files.is_empty() {
                return Err(InputError::Empty(path.display().to_string()));
            }
            files
        } else {
            vec![path.clone()]
        };
        for file in files {
            let name = file.display().to_string();
            let text = std::fs::read_to_string(&file).map_err(|source| InputError::Read {
                path: name.clone(),
                source,
            })?;
            let json = file.extension().and_then(|e| e.to_str()) == Some("json");
            docs.extend(parse(&text, &name, json)?);
        }
    }
    Ok(docs)
}
