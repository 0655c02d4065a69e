//! The suite file (`kanon-test.yaml`) as written; its format is described in [`super`].

use std::path::PathBuf;

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use super::resource::CaseResource;

/// The file name `kanon test` looks for in folders.
pub(super) const SUITE_FILE: &str = "kanon-test.yaml";

/// A suite as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Suite {
    pub(super) name: Option<String>,
    pub(super) policies: Vec<PathBuf>,
    pub(super) resources: Vec<PathBuf>,
    /// `objects` reads as `kanon serve --objects` and `kanon apply --objects` do.
    #[serde(default, alias = "objects")]
    pub(super) context: Vec<PathBuf>,
    #[serde(default)]
    pub(super) old_resources: Vec<PathBuf>,
    #[serde(default = "default_operation")]
    pub(super) operation: String,
    #[serde(default)]
    pub(super) exception_namespaces: Vec<String>,
    pub(super) now: Option<String>,
    /// `false`: plain resources are judged as written, without the apiserver's defaults.
    #[serde(default = "defaults_on")]
    pub(super) defaults: bool,
    /// `true`: a warning on any of the suite's policies fails the run (as `--strict` does).
    #[serde(default)]
    pub(super) strict: bool,
    pub(super) cases: Vec<serde_saphyr::Spanned<Case>>,
}

fn defaults_on() -> bool {
    true
}

fn default_operation() -> String {
    "CREATE".into()
}

/// One case as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Case {
    /// What the case is called in reports and by `--case`; default: its operation and
    /// resource (`CREATE Pod/shop/web-0`).
    pub(super) name: Option<String>,
    pub(super) resource: CaseResource,
    pub(super) operation: Option<String>,
    /// A path relative to the suite (one document), or the object itself.
    pub(super) old_resource: Option<Value>,
    pub(super) allowed: Option<bool>,
    pub(super) messages: Option<Vec<Expect>>,
    pub(super) messages_include: Option<Vec<Expect>>,
    pub(super) warnings: Option<Vec<Expect>>,
    pub(super) warnings_include: Option<Vec<Expect>>,
    pub(super) applied_policies: Option<Vec<String>>,
    pub(super) exceptions: Option<Vec<String>>,
    pub(super) audit_annotations: Option<serde_json::Map<String, Value>>,
    pub(super) patch: Option<Value>,
    pub(super) patched: Option<Value>,
}

/// An expected message or warning, as written in a suite.
#[derive(Debug, Clone)]
pub(super) enum Expect {
    /// A string: the whole text.
    Exact(String),
    /// `{contains: TEXT}`: a part of the text.
    Contains(String),
    /// `{matches: REGEX}`: a regular expression found in the text.
    Matches(String),
}

impl<'de> Deserialize<'de> for Expect {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ExpectVisitor;

        impl<'de> Visitor<'de> for ExpectVisitor {
            type Value = Expect;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string (the whole text), {contains: TEXT} or {matches: REGEX}")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Expect, E> {
                Ok(Expect::Exact(text.to_string()))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Expect, A::Error> {
                const KEYS: &[&str] = &["contains", "matches"];
                let Some(key) = map.next_key::<String>()? else {
                    return Err(de::Error::custom(
                        "an empty map: give {contains: TEXT} or {matches: REGEX}",
                    ));
                };
                let expect = match key.as_str() {
                    "contains" => Expect::Contains(map.next_value()?),
                    "matches" => Expect::Matches(map.next_value()?),
                    other => return Err(de::Error::unknown_field(other, KEYS)),
                };
                if let Some(extra) = map.next_key::<String>()? {
                    return Err(de::Error::custom(format!(
                        "give one of `contains` and `matches` per entry, not `{key}` and `{extra}` (write two entries)"
                    )));
                }
                Ok(expect)
            }
        }

        deserializer.deserialize_any(ExpectVisitor)
    }
}
