//! Kubernetes' semver library at version 1 (kube-apiserver 1.33+): `semver(string[, bool])`,
//! `isSemver(string[, bool])`, `major`, `minor`, `patch`, `compareTo`, `isGreaterThan`,
//! `isLessThan`, over versions parsed as github.com/blang/semver/v4 parses them. A version is a
//! `kubernetes.Semver` object whose canonical form leaves out build metadata, which Kubernetes'
//! equality ignores.

use std::cmp::Ordering;

use crate::env::Env;
use crate::error::EvalError;
use crate::function::no_overload;
use crate::value::Value;

use super::{
    SEMVER_TYPE, STRING_TRAVERSAL, actual_size, canonical, go_quote, opaque, scaled_cost,
    string_arg,
};

const NUMBERS: &str = "0123456789";
const ALPHANUM: &str = "-ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// A prerelease identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pre {
    Number(u64),
    Text(String),
}

/// A version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
    pub pre: Vec<Pre>,
    pub build: Vec<String>,
}

fn contains_only(text: &str, set: &str) -> bool {
    text.chars().all(|c| set.contains(c))
}

fn has_leading_zeroes(text: &str) -> bool {
    text.len() > 1 && text.starts_with('0')
}

/// Go's `strconv.ParseUint(text, 10, 64)`, with its error text.
fn parse_uint(text: &str) -> Result<u64, String> {
    text.parse::<u64>().map_err(|error| {
        let reason =
            if text.is_empty() || matches!(error.kind(), std::num::IntErrorKind::InvalidDigit) {
                "invalid syntax"
            } else {
                "value out of range"
            };
        format!("strconv.ParseUint: parsing {}: {reason}", go_quote(text))
    })
}

fn number(text: &str, part: &str, name: &str) -> Result<u64, String> {
    if !contains_only(text, NUMBERS) {
        return Err(format!(
            "Invalid character(s) found in {part} number {}",
            go_quote(text)
        ));
    }
    if has_leading_zeroes(text) {
        return Err(format!(
            "{name} number must not contain leading zeroes {}",
            go_quote(text)
        ));
    }
    parse_uint(text)
}

/// blang/semver's `Parse`, with its error texts.
pub fn parse(text: &str) -> Result<Version, String> {
    if text.is_empty() {
        return Err("Version string empty".to_owned());
    }
    let parts: Vec<&str> = text.splitn(3, '.').collect();
    if parts.len() != 3 {
        return Err("No Major.Minor.Patch elements found".to_owned());
    }
    let major = number(parts[0], "major", "Major")?;
    let minor = number(parts[1], "minor", "Minor")?;
    let mut patch = parts[2];
    let mut build = Vec::new();
    let mut prerelease = Vec::new();
    if let Some((before, meta)) = patch.split_once('+') {
        build = meta.split('.').collect();
        patch = before;
    }
    if let Some((before, pre)) = patch.split_once('-') {
        prerelease = pre.split('.').collect();
        patch = before;
    }
    let patch = number(patch, "patch", "Patch")?;
    let mut pre = Vec::with_capacity(prerelease.len());
    for part in prerelease {
        if part.is_empty() {
            return Err("Prerelease is empty".to_owned());
        }
        if contains_only(part, NUMBERS) {
            if has_leading_zeroes(part) {
                return Err(format!(
                    "Numeric PreRelease version must not contain leading zeroes {}",
                    go_quote(part)
                ));
            }
            pre.push(Pre::Number(parse_uint(part)?));
        } else if contains_only(part, ALPHANUM) {
            pre.push(Pre::Text(part.to_owned()));
        } else {
            return Err(format!(
                "Invalid character(s) found in prerelease {}",
                go_quote(part)
            ));
        }
    }
    let mut builds = Vec::with_capacity(build.len());
    for part in build {
        if part.is_empty() {
            return Err("Build meta data is empty".to_owned());
        }
        if !contains_only(part, ALPHANUM) {
            return Err(format!(
                "Invalid character(s) found in build meta data {}",
                go_quote(part)
            ));
        }
        builds.push(part.to_owned());
    }
    Ok(Version {
        major,
        minor,
        patch,
        pre,
        build: builds,
    })
}

/// Kubernetes' `normalizeAndParse`: a leading `v` dropped, leading zeroes trimmed, missing minor
/// and patch numbers taken as 0.
pub fn normalize_and_parse(text: &str) -> Result<Version, String> {
    let text = text.strip_prefix('v').unwrap_or(text);
    let mut parts: Vec<String> = text
        .splitn(3, '.')
        .map(|part| {
            if part.len() > 1 {
                let trimmed = part.trim_start_matches('0');
                if trimmed.is_empty() || !trimmed.starts_with(|c: char| c.is_ascii_digit()) {
                    format!("0{trimmed}")
                } else {
                    trimmed.to_owned()
                }
            } else {
                part.to_owned()
            }
        })
        .collect();
    if parts.len() < 3 {
        if parts.last().is_some_and(|last| last.contains(['+', '-'])) {
            return Err("short version cannot contain PreRelease/Build meta data".to_owned());
        }
        while parts.len() < 3 {
            parts.push("0".to_owned());
        }
    }
    parse(&parts.join("."))
}

impl Version {
    /// blang/semver's `Compare`: build metadata does not count.
    pub fn compare(&self, other: &Version) -> Ordering {
        let release =
            (self.major, self.minor, self.patch).cmp(&(other.major, other.minor, other.patch));
        if release != Ordering::Equal {
            return release;
        }
        match (self.pre.is_empty(), other.pre.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Greater,
            (false, true) => return Ordering::Less,
            _ => {}
        }
        for (a, b) in self.pre.iter().zip(&other.pre) {
            let order = match (a, b) {
                (Pre::Number(a), Pre::Number(b)) => a.cmp(b),
                (Pre::Number(_), Pre::Text(_)) => Ordering::Less,
                (Pre::Text(_), Pre::Number(_)) => Ordering::Greater,
                (Pre::Text(a), Pre::Text(b)) => a.cmp(b),
            };
            if order != Ordering::Equal {
                return order;
            }
        }
        self.pre.len().cmp(&other.pre.len())
    }

    /// The version without its build metadata: equal texts are equal versions.
    fn canonical(&self) -> String {
        let mut text = format!("{}.{}.{}", self.major, self.minor, self.patch);
        for (index, part) in self.pre.iter().enumerate() {
            text.push(if index == 0 { '-' } else { '.' });
            match part {
                Pre::Number(number) => text.push_str(&number.to_string()),
                Pre::Text(part) => text.push_str(part),
            }
        }
        text
    }
}

fn semver_value<'a>(version: &Version) -> Value<'a> {
    opaque(SEMVER_TYPE, version.canonical())
}

fn semver_of(value: &Value<'_>) -> Option<Version> {
    canonical(value, SEMVER_TYPE).and_then(|text| parse(text).ok())
}

fn parse_arg(args: &[Value<'_>], function: &str) -> Result<Result<Version, String>, EvalError> {
    let text = string_arg(function, args, 0)?;
    let normalize = match args.get(1) {
        None => false,
        Some(Value::Bool(normalize)) => *normalize,
        Some(_) => return Err(no_overload(function, args)),
    };
    Ok(if normalize {
        normalize_and_parse(text)
    } else {
        parse(text)
    })
}

pub(crate) fn install(env: &mut Env) {
    env.function(
        "string_to_semver",
        "semver(string) -> kubernetes.Semver",
        to_semver,
    );
    env.function(
        "string_bool_to_semver",
        "semver(string, bool) -> kubernetes.Semver",
        to_semver,
    );
    env.function("is_semver_string", "isSemver(string) -> bool", is_semver);
    env.function(
        "is_semver_string_bool",
        "isSemver(string, bool) -> bool",
        is_semver,
    );
    for id in [
        "string_to_semver",
        "string_bool_to_semver",
        "is_semver_string",
        "is_semver_string_bool",
    ] {
        env.set_name_cost(id, |args| {
            scaled_cost(actual_size(&args[0]), STRING_TRAVERSAL)
        });
    }
    env.method(
        "semver_major",
        "kubernetes.Semver.major() -> int",
        |_, args| part(args, "major", |version| version.major),
    );
    env.method(
        "semver_minor",
        "kubernetes.Semver.minor() -> int",
        |_, args| part(args, "minor", |version| version.minor),
    );
    env.method(
        "semver_patch",
        "kubernetes.Semver.patch() -> int",
        |_, args| part(args, "patch", |version| version.patch),
    );
    env.method(
        "semver_is_greater_than",
        "kubernetes.Semver.isGreaterThan(kubernetes.Semver) -> bool",
        |_, args| {
            compare(args, "isGreaterThan").map(|order| Value::Bool(order == Ordering::Greater))
        },
    );
    env.method(
        "semver_is_less_than",
        "kubernetes.Semver.isLessThan(kubernetes.Semver) -> bool",
        |_, args| compare(args, "isLessThan").map(|order| Value::Bool(order == Ordering::Less)),
    );
    env.method(
        "semver_compare_to",
        "kubernetes.Semver.compareTo(kubernetes.Semver) -> int",
        |_, args| compare(args, "compareTo").map(|order| Value::Int(order as i64)),
    );
}

fn to_semver<'a>(
    _: &mut crate::function::Ctx<'_, '_>,
    args: &[Value<'a>],
) -> Result<Value<'a>, EvalError> {
    parse_arg(args, "semver")?
        .map(|version| semver_value(&version))
        .map_err(EvalError::Invalid)
}

fn is_semver<'a>(
    _: &mut crate::function::Ctx<'_, '_>,
    args: &[Value<'a>],
) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(parse_arg(args, "isSemver")?.is_ok()))
}

fn part<'a>(
    args: &[Value<'a>],
    function: &str,
    get: fn(&Version) -> u64,
) -> Result<Value<'a>, EvalError> {
    let version = semver_of(&args[0]).ok_or_else(|| no_overload(function, args))?;
    // Go converts the uint64 to int64 as it is (wrapping).
    Ok(Value::Int(get(&version) as i64))
}

fn compare(args: &[Value<'_>], function: &str) -> Result<Ordering, EvalError> {
    match (semver_of(&args[0]), semver_of(&args[1])) {
        (Some(a), Some(b)) => Ok(a.compare(&b)),
        _ => Err(no_overload(function, args)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn semver(text: &str) -> Value<'static> {
        function("semver", vec![s(text)]).unwrap_or_else(|error| panic!("{error}"))
    }

    #[test]
    fn parse_errors_follow_blang_semver() {
        for (input, expected) in [
            (
                "1.2.3-alpha.01",
                "Numeric PreRelease version must not contain leading zeroes \"01\"",
            ),
            (
                "01.2.3",
                "Major number must not contain leading zeroes \"01\"",
            ),
            ("1.2.3+", "Build meta data is empty"),
            ("1.2.3-", "Prerelease is empty"),
            ("1.2.a", "Invalid character(s) found in patch number \"a\""),
            ("1.2", "No Major.Minor.Patch elements found"),
            ("", "Version string empty"),
            (
                "99999999999999999999.0.0",
                "strconv.ParseUint: parsing \"99999999999999999999\": value out of range",
            ),
            (
                "v1.2.3",
                "Invalid character(s) found in major number \"v1\"",
            ),
        ] {
            assert_eq!(
                error_text(function("semver", vec![s(input)])),
                expected,
                "{input}"
            );
        }
        assert_eq!(
            error_text(function("semver", vec![s("1.2-x"), Value::Bool(true)])),
            "short version cannot contain PreRelease/Build meta data"
        );
        assert_eq!(
            error_text(function("semver", vec![s("1.2.3.4"), Value::Bool(true)])),
            "Invalid character(s) found in patch number \"3.4\""
        );
    }

    #[test]
    fn semver_functions() {
        assert!(truth(function("isSemver", vec![s("1.2.3")])));
        assert!(!truth(function("isSemver", vec![s("v1.2.3")])));
        assert!(truth(function(
            "isSemver",
            vec![s("v1.2.3"), Value::Bool(true)]
        )));
        assert!(!truth(function(
            "isSemver",
            vec![s("v1.2.3"), Value::Bool(false)]
        )));
        assert_value(method("major", vec![semver("1.2.3")]), Value::Int(1));
        assert_value(method("minor", vec![semver("1.2.3")]), Value::Int(2));
        assert_value(method("patch", vec![semver("1.2.3")]), Value::Int(3));
        let normalized = function("semver", vec![s("1.00.02"), Value::Bool(true)]).unwrap();
        assert_value(method("minor", vec![normalized.clone()]), Value::Int(0));
        assert_value(method("patch", vec![normalized]), Value::Int(2));
        let short = function("semver", vec![s("v1"), Value::Bool(true)]).unwrap();
        assert!(short.equals(&semver("1.0.0")));
        assert!(truth(method(
            "isGreaterThan",
            vec![semver("1.2.4"), semver("1.2.3")]
        )));
        assert!(truth(method(
            "isLessThan",
            vec![semver("1.2.3-1"), semver("1.2.3-a")]
        )));
        assert_value(
            method(
                "compareTo",
                vec![semver("1.2.3-alpha"), semver("1.2.3-alpha.1")],
            ),
            Value::Int(-1),
        );
        assert_value(
            method("compareTo", vec![semver("1.2.3"), semver("1.2.3-rc.1")]),
            Value::Int(1),
        );
        assert_value(
            method("compareTo", vec![semver("1.2.3+a"), semver("1.2.3+b")]),
            Value::Int(0),
        );
        assert!(semver("1.2.3-alpha.1").equals(&semver("1.2.3-alpha.1+build")));
        assert!(!semver("1.2.3").equals(&semver("1.2.4")));
    }
}
