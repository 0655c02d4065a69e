//! Kubernetes' named formats (kube-apiserver 1.31+): `format.named(string)`, the constants
//! `format.dns1123Label()` … `format.datetime()`, and `<format>.validate(string)`, which is
//! `optional.none()` for a valid string and otherwise the list of Kubernetes' messages.
//! A format is a `kubernetes.NamedFormat` object whose canonical form is its name.

use std::sync::{Arc, LazyLock};

use regex::Regex;

use crate::env::Env;
use crate::error::EvalError;
use crate::function::no_overload;
use crate::value::Value;

use super::{
    FORMAT_TYPE, REGEX_LENGTH, STRING_TRAVERSAL, actual_size, canonical, opaque, scaled_cost,
    string_arg,
};

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const UUID_PATTERN: &str = "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$";
const BASE64_PATTERN: &str =
    "^(?:[A-Za-z0-9+\\/]{4})*(?:[A-Za-z0-9+\\/]{2}==|[A-Za-z0-9+\\/]{3}=|[A-Za-z0-9+\\/]{4})$";
const DATE_TIME_PATTERN: &str =
    "^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$";

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const LABEL_KEY_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

fn anchored(pattern: &str) -> Regex {
    // The patterns are constants of this file, checked by its tests.
    Regex::new(&format!("^(?:{pattern})$")).unwrap_or_else(|error| panic!("{pattern}: {error}"))
}

static DNS1123_LABEL: LazyLock<Regex> = LazyLock::new(|| anchored(DNS1123_LABEL_FMT));
static DNS1123_SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| anchored(DNS1123_SUBDOMAIN_FMT));
static DNS1035_LABEL: LazyLock<Regex> = LazyLock::new(|| anchored(DNS1035_LABEL_FMT));
static LABEL_KEY: LazyLock<Regex> = LazyLock::new(|| anchored(LABEL_KEY_FMT));
static LABEL_VALUE: LazyLock<Regex> = LazyLock::new(|| anchored(LABEL_VALUE_FMT));
static UUID: LazyLock<Regex> = LazyLock::new(|| anchored(UUID_PATTERN));
static BASE64: LazyLock<Regex> = LazyLock::new(|| anchored(BASE64_PATTERN));
static DATE_TIME: LazyLock<Regex> = LazyLock::new(|| anchored(DATE_TIME_PATTERN));

/// A named format: the name CEL calls it by, the name it compares by, its validation, and the
/// regex size Kubernetes' cost assumes for it.
pub struct NamedFormat {
    pub key: &'static str,
    pub name: &'static str,
    pub validate: fn(&str) -> Vec<String>,
    pub max_regex_size: u64,
}

/// Kubernetes' `ConstantFormats`.
pub static FORMATS: &[NamedFormat] = &[
    NamedFormat {
        key: "dns1123Label",
        name: "DNS1123Label",
        validate: |text| dns1123_label(text),
        max_regex_size: 30,
    },
    NamedFormat {
        key: "dns1123Subdomain",
        name: "DNS1123Subdomain",
        validate: |text| dns1123_subdomain(text),
        max_regex_size: 60,
    },
    NamedFormat {
        key: "dns1035Label",
        name: "DNS1035Label",
        validate: |text| dns1035_label(text),
        max_regex_size: 30,
    },
    NamedFormat {
        key: "qualifiedName",
        name: "QualifiedName",
        validate: qualified_name,
        max_regex_size: 60,
    },
    NamedFormat {
        key: "dns1123LabelPrefix",
        name: "DNS1123LabelPrefix",
        validate: |text| dns1123_label(&mask_trailing_dash(text)),
        max_regex_size: 30,
    },
    NamedFormat {
        key: "dns1123SubdomainPrefix",
        name: "DNS1123SubdomainPrefix",
        validate: |text| dns1123_subdomain(&mask_trailing_dash(text)),
        max_regex_size: 60,
    },
    NamedFormat {
        key: "dns1035LabelPrefix",
        name: "DNS1035LabelPrefix",
        validate: |text| dns1035_label(&mask_trailing_dash(text)),
        max_regex_size: 30,
    },
    NamedFormat {
        key: "labelValue",
        name: "LabelValue",
        validate: label_value,
        max_regex_size: 40,
    },
    NamedFormat {
        key: "uri",
        name: "URI",
        validate: |text| {
            super::urls::parse_request_uri(text)
                .err()
                .into_iter()
                .collect()
        },
        max_regex_size: 1103,
    },
    NamedFormat {
        key: "uuid",
        name: "uuid",
        validate: |text| failure(UUID.is_match(text), "does not match the UUID format"),
        max_regex_size: UUID_PATTERN.len() as u64,
    },
    NamedFormat {
        key: "byte",
        name: "byte",
        validate: |text| failure(BASE64.is_match(text), "invalid base64"),
        max_regex_size: 84,
    },
    NamedFormat {
        key: "date",
        name: "date",
        validate: |text| failure(is_date(text), "invalid date"),
        max_regex_size: DATE_TIME_PATTERN.len() as u64,
    },
    NamedFormat {
        key: "datetime",
        name: "datetime",
        validate: |text| failure(is_date_time(text), "invalid datetime"),
        max_regex_size: DATE_TIME_PATTERN.len() as u64,
    },
];

fn failure(valid: bool, message: &str) -> Vec<String> {
    if valid {
        Vec::new()
    } else {
        vec![message.to_owned()]
    }
}

/// apimachinery's `RegexError`.
fn regex_error(message: &str, pattern: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{message} (regex used for validation is '{pattern}')");
    }
    let examples: Vec<String> = examples
        .iter()
        .map(|example| format!("'{example}', "))
        .collect();
    format!(
        "{message} (e.g. {}regex used for validation is '{pattern}')",
        examples.join(" or ")
    )
}

/// apimachinery's `maskTrailingDash`: a generated name may end in `-`; the last two bytes become
/// `a` (as Kubernetes writes it).
fn mask_trailing_dash(name: &str) -> String {
    if name.len() > 1 && name.ends_with('-') {
        let mut bytes = name.as_bytes()[..name.len() - 2].to_vec();
        bytes.push(b'a');
        return String::from_utf8_lossy(&bytes).into_owned();
    }
    name.to_owned()
}

fn dns1123_label(text: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if text.len() > 63 {
        errors.push("must be no more than 63 characters".to_owned());
    }
    if !DNS1123_LABEL.is_match(text) {
        if DNS1123_SUBDOMAIN.is_match(text) {
            errors.push("must not contain dots".to_owned());
        } else {
            errors.push(regex_error(
                DNS1123_LABEL_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errors
}

/// `unit` is "characters" for apimachinery's util/validation, "bytes" for its newer content
/// package (which label keys use).
fn dns1123_subdomain_in(text: &str, unit: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if text.len() > 253 {
        errors.push(format!("must be no more than 253 {unit}"));
    }
    if !DNS1123_SUBDOMAIN.is_match(text) {
        errors.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errors
}

fn dns1123_subdomain(text: &str) -> Vec<String> {
    dns1123_subdomain_in(text, "characters")
}

fn dns1035_label(text: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if text.len() > 63 {
        errors.push("must be no more than 63 characters".to_owned());
    }
    if !DNS1035_LABEL.is_match(text) {
        errors.push(regex_error(
            DNS1035_LABEL_MSG,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errors
}

/// apimachinery's `IsQualifiedName` (`content.IsLabelKey`).
fn qualified_name(text: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let parts: Vec<&str> = text.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_owned());
            } else {
                errors.extend(
                    dns1123_subdomain_in(prefix, "bytes")
                        .into_iter()
                        .map(|message| format!("prefix part {message}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    LABEL_KEY_MSG,
                    LABEL_KEY_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            )];
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errors.push("name part must be no more than 63 bytes".to_owned());
    }
    if !LABEL_KEY.is_match(name) {
        errors.push(format!(
            "name part {}",
            regex_error(
                LABEL_KEY_MSG,
                LABEL_KEY_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errors
}

fn label_value(text: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if text.len() > 63 {
        errors.push("must be no more than 63 bytes".to_owned());
    }
    if !LABEL_VALUE.is_match(text) {
        errors.push(regex_error(
            LABEL_VALUE_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errors
}

/// Go's `time.Parse("2006-01-02", text)` succeeding.
fn is_date(text: &str) -> bool {
    let bytes = text.as_bytes();
    if bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' {
        return false;
    }
    let number = |range: std::ops::Range<usize>| -> Option<u32> {
        let part = &bytes[range];
        part.iter().all(u8::is_ascii_digit).then(|| {
            part.iter()
                .fold(0, |total, digit| total * 10 + u32::from(digit - b'0'))
        })
    };
    let (Some(year), Some(month), Some(day)) = (number(0..4), number(5..7), number(8..10)) else {
        return false;
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&day)
}

/// kube-openapi's `IsDateTime`.
fn is_date_time(text: &str) -> bool {
    if text.len() < 4 {
        return false;
    }
    let lower = text.to_lowercase();
    let parts: Vec<&str> = lower.split('t').collect();
    if parts.len() < 2 || !is_date(parts[0]) {
        return false;
    }
    let Some(captures) = DATE_TIME.captures(parts[1]) else {
        return false;
    };
    let field = |index: usize| captures.get(index).map_or("", |found| found.as_str());
    field(1) <= "23" && field(2) <= "59" && field(3) <= "59"
}

fn format_value<'a>(format: &NamedFormat) -> Value<'a> {
    opaque(FORMAT_TYPE, format.name.to_owned())
}

fn format_of(value: &Value<'_>) -> Option<&'static NamedFormat> {
    let name = canonical(value, FORMAT_TYPE)?;
    FORMATS.iter().find(|format| format.name == name)
}

pub(crate) fn install(env: &mut Env) {
    env.method(
        "format-validate",
        "kubernetes.NamedFormat.validate(string) -> optional_type(list(string))",
        |_, args| {
            let format = format_of(&args[0]).ok_or_else(|| no_overload("validate", args))?;
            let errors = (format.validate)(string_arg("validate", args, 1)?);
            Ok(if errors.is_empty() {
                Value::Optional(None)
            } else {
                Value::Optional(Some(Arc::new(Value::list(
                    errors.into_iter().map(Value::string).collect(),
                ))))
            })
        },
    );
    env.set_name_cost("format-validate", |args| {
        let regex_size = format_of(&args[0]).map_or(0, |format| format.max_regex_size);
        scaled_cost(1 + actual_size(&args[1]), STRING_TRAVERSAL)
            * scaled_cost(regex_size, REGEX_LENGTH)
    });
    env.function(
        "format-named",
        "format.named(string) -> optional_type(kubernetes.NamedFormat)",
        |_, args| {
            let name = string_arg("format.named", args, 0)?;
            Ok(Value::Optional(
                FORMATS
                    .iter()
                    .find(|format| format.key == name)
                    .map(|format| Arc::new(format_value(format))),
            ))
        },
    );
    for (format, implementation) in FORMATS.iter().zip(CONSTANTS) {
        let name = format!("format.{}", format.key);
        env.function(
            &name,
            &format!("{name}() -> kubernetes.NamedFormat"),
            implementation,
        );
    }
}

/// `format.<key>()`: one implementation per entry of [`FORMATS`] (an implementation is a plain
/// `fn`, so the index is a const parameter).
fn constant<'a, const INDEX: usize>(
    _: &mut crate::function::Ctx<'_, '_>,
    _: &[Value<'a>],
) -> Result<Value<'a>, EvalError> {
    FORMATS
        .get(INDEX)
        .map(format_value)
        .ok_or_else(|| EvalError::Invalid(format!("no named format {INDEX}")))
}

const CONSTANTS: [crate::function::Implementation; 13] = [
    constant::<0>,
    constant::<1>,
    constant::<2>,
    constant::<3>,
    constant::<4>,
    constant::<5>,
    constant::<6>,
    constant::<7>,
    constant::<8>,
    constant::<9>,
    constant::<10>,
    constant::<11>,
    constant::<12>,
];

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn named(key: &str) -> Value<'static> {
        match function("format.named", vec![s(key)]) {
            Ok(Value::Optional(Some(format))) => (*format).clone(),
            other => panic!("{key}: {other:?}"),
        }
    }

    fn errors(key: &str, text: &str) -> Vec<String> {
        match method("validate", vec![named(key), s(text)]) {
            Ok(Value::Optional(None)) => Vec::new(),
            Ok(Value::Optional(Some(list))) => match &*list {
                Value::List(items) => items
                    .iter()
                    .map(|item| match item {
                        Value::String(text) => text.as_str().to_owned(),
                        other => panic!("{other}"),
                    })
                    .collect(),
                other => panic!("{other}"),
            },
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn messages_match_kube_apiserver() {
        assert_eq!(
            errors("dns1123Label", "Abc"),
            vec![
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ]
        );
        assert_eq!(errors("dns1123Label", "a.b"), vec!["must not contain dots"]);
        assert_eq!(errors("uuid", "x"), vec!["does not match the UUID format"]);
        assert_eq!(
            errors("uri", "%%%"),
            vec!["parse \"%%%\": invalid URI for request"]
        );
        assert_eq!(errors("date", "2020-13-01"), vec!["invalid date"]);
        assert!(errors("datetime", "2020-01-01T00:00:00Z").is_empty());
        assert_eq!(errors("byte", "!!"), vec!["invalid base64"]);
        assert_eq!(
            errors("labelValue", "-a"),
            vec![
                "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
            ]
        );
        assert_eq!(
            errors("qualifiedName", "a/b/c"),
            vec![
                "a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ]
        );
        assert!(errors("dns1123SubdomainPrefix", "a-").is_empty());
    }

    #[test]
    fn validations() {
        assert!(errors("dns1123Label", "my-name").is_empty());
        assert_eq!(
            errors("dns1123Label", &"a".repeat(64)),
            vec!["must be no more than 63 characters"]
        );
        assert!(errors("dns1123LabelPrefix", "my-name-").is_empty());
        assert!(errors("dns1123Subdomain", "example.com").is_empty());
        assert!(!errors("dns1123Subdomain", "example..com").is_empty());
        assert!(errors("dns1035Label", "abc-123").is_empty());
        assert!(!errors("dns1035Label", "1abc").is_empty());
        assert!(errors("qualifiedName", "example.com/MyName").is_empty());
        assert_eq!(
            errors("qualifiedName", "/a"),
            vec!["prefix part must be non-empty"]
        );
        assert!(errors("labelValue", "").is_empty());
        assert!(errors("uuid", "123e4567-e89b-12d3-a456-426614174000").is_empty());
        assert!(errors("uuid", "123E4567E89B12D3A456426614174000").is_empty());
        assert!(errors("byte", "aGVsbG8=").is_empty());
        assert!(!errors("byte", "").is_empty());
        assert!(errors("date", "2020-02-29").is_empty());
        assert!(!errors("date", "2021-02-29").is_empty());
        assert!(errors("datetime", "2020-01-01T23:59:59.123+01:00").is_empty());
        assert!(!errors("datetime", "2020-01-01T24:00:00Z").is_empty());
        assert!(!errors("datetime", "2020-01-01").is_empty());
    }

    #[test]
    fn named_and_constants() {
        assert_value(
            function("format.named", vec![s("nope")]),
            Value::Optional(None),
        );
        assert!(named("dns1123Label").equals(&function("format.dns1123Label", vec![]).unwrap()));
        assert!(!named("dns1123Label").equals(&named("uuid")));
        assert_eq!(FORMATS.len(), CONSTANTS.len());
        for format in FORMATS {
            assert!(
                function(&format!("format.{}", format.key), vec![])
                    .unwrap()
                    .equals(&named(format.key)),
                "{}",
                format.key
            );
        }
        // ceil((1 + 3) × 0.1) × ceil(30 × 0.25).
        assert_eq!(
            method_cost("validate", vec![named("dns1123Label"), s("abc")]),
            8
        );
    }
}
