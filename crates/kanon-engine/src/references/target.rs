//! What a `k8s` or `http` reference reads, compiled: its texts (with placeholders), its label
//! selector, its HTTP request.

use kanon_api::ObjectRefer;
use serde_json::Value;

use super::text::Text;
use crate::error::FieldError;
use crate::lookup::HttpToken;
use crate::selector::LabelMatcher;

/// A label selector whose values may hold `{{ }}` placeholders: compiled once when it has
/// none, else rendered and compiled per request.
#[derive(Clone, Debug)]
pub(super) enum SelectorTarget {
    Fixed(LabelMatcher),
    Templated {
        match_labels: Vec<(String, Text)>,
        match_expressions: Vec<(String, String, Vec<Text>)>,
    },
}

/// A compiled `k8s` reference target.
#[derive(Clone, Debug)]
pub(super) struct ObjectTarget {
    pub(super) api_version: Text,
    pub(super) kind: Text,
    pub(super) namespace: Option<Text>,
    pub(super) name: Option<Text>,
    pub(super) selector: Option<SelectorTarget>,
}

/// A JSON body of an `http` reference: a constant, or a string with placeholders whose
/// rendering is parsed as JSON (`"{{ object | tojson }}"`).
#[derive(Clone, Debug)]
pub(super) enum HttpBody {
    Json(Value),
    Template(Text),
}

/// A compiled `http` reference target.
#[derive(Clone, Debug)]
pub(super) struct HttpTarget {
    pub(super) method: kanon_api::HttpMethod,
    pub(super) url: Text,
    pub(super) params: Vec<(String, Text)>,
    pub(super) headers: Vec<(String, Text)>,
    pub(super) body: Option<HttpBody>,
    pub(super) token: Option<HttpToken>,
    pub(super) timeout: Option<std::time::Duration>,
}

/// What a `k8s` or `http` reference reads.
#[derive(Clone, Debug)]
pub(super) enum Target {
    Object(ObjectTarget),
    Http(HttpTarget),
}

pub(super) fn compile_http(
    h: &kanon_api::HttpRefer,
    field: &str,
    own_namespace: Option<&str>,
    errors: &mut Vec<FieldError>,
) -> HttpTarget {
    let url = Text::compile(&h.url, format!("{field}.url"), errors);
    if let Text::Plain(url) = &url {
        // A URL with placeholders is checked when it is rendered, per request.
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            errors.push(FieldError::new(
                format!("{field}.url"),
                format!("`{url}` is not an http:// or https:// URL"),
            ));
        }
    }
    let texts = |map: &std::collections::BTreeMap<String, String>,
                 what: &str,
                 errors: &mut Vec<FieldError>| {
        map.iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    Text::compile(v, format!("{field}.{what}.{k}"), errors),
                )
            })
            .collect::<Vec<_>>()
    };
    let params = texts(&h.params, "params", errors);
    let headers = texts(&h.header, "header", errors);
    if h.body.is_some() && h.method != kanon_api::HttpMethod::Post {
        errors.push(FieldError::new(
            format!("{field}.body"),
            "is sent only with method: POST",
        ));
    }
    let body = h.body.as_ref().map(|b| match b {
        Value::String(text) if text.contains("{{") || text.contains("{%") => {
            HttpBody::Template(Text::compile(text, format!("{field}.body"), errors))
        }
        other => HttpBody::Json(other.clone()),
    });
    let token = h.auth.as_ref().and_then(|auth| {
        match (&auth.static_token, &auth.secret_ref) {
            (Some(_), Some(_)) => {
                errors.push(FieldError::new(
                    format!("{field}.auth"),
                    "set staticToken or secretRef, not both",
                ));
                None
            }
            (None, None) => {
                errors.push(FieldError::new(
                    format!("{field}.auth"),
                    "set staticToken or secretRef",
                ));
                None
            }
            (Some(token), None) => Some(HttpToken::Static(token.clone())),
            (None, Some(secret)) => {
                if secret.namespace.is_empty() || secret.name.is_empty() {
                    errors.push(FieldError::new(
                        format!("{field}.auth.secretRef"),
                        "needs a namespace and a name",
                    ));
                }
                if let Some(own) = own_namespace
                    && secret.namespace != own
                {
                    errors.push(FieldError::new(
                        format!("{field}.auth.secretRef.namespace"),
                        format!(
                            "a namespaced policy reads Secrets only in its own namespace `{own}`, not `{}`",
                            secret.namespace
                        ),
                    ));
                }
                Some(HttpToken::Secret {
                    namespace: secret.namespace.clone(),
                    name: secret.name.clone(),
                    key: secret.key.clone().unwrap_or_else(|| "token".to_string()),
                })
            }
        }
    });
    let timeout = match h.timeout_seconds {
        None => None,
        Some(s @ 1..=30) => Some(std::time::Duration::from_secs(s as u64)),
        Some(s) => {
            errors.push(FieldError::new(
                format!("{field}.timeoutSeconds"),
                format!("{s} is outside 1..=30"),
            ));
            None
        }
    };
    HttpTarget {
        method: h.method,
        url,
        params,
        headers,
        body,
        token,
        timeout,
    }
}

pub(super) fn compile_target(
    k: &ObjectRefer,
    field: &str,
    own_namespace: Option<&str>,
    errors: &mut Vec<FieldError>,
) -> ObjectTarget {
    if k.api_version.is_empty() {
        errors.push(FieldError::new(
            format!("{field}.apiVersion"),
            "must not be empty",
        ));
    }
    if k.kind.is_empty() {
        errors.push(FieldError::new(
            format!("{field}.kind"),
            "must not be empty",
        ));
    }
    match (&k.name, &k.label_selector) {
        (Some(_), Some(_)) => errors.push(FieldError::new(
            field,
            "set name or labelSelector, not both",
        )),
        (None, None) => errors.push(FieldError::new(field, "set name or labelSelector")),
        _ => {}
    }
    if let (Some(own), Some(ns)) = (own_namespace, k.namespace.as_deref())
        && !ns.is_empty()
        && !ns.contains("{{")
        && !ns.contains("{%")
        && ns != own
    {
        errors.push(FieldError::new(
            format!("{field}.namespace"),
            format!(
                "a namespaced policy reads objects only in its own namespace `{own}`, not `{ns}`"
            ),
        ));
    }
    let selector = k.label_selector.as_ref().map(|s| {
        let at = format!("{field}.labelSelector");
        // The structure (operators, keys, value counts) is checked once, placeholders and all.
        let matcher = LabelMatcher::compile(s, &at, errors);
        let templated = |v: &str| v.contains("{{") || v.contains("{%");
        let has_placeholders = s.match_labels.iter().flatten().any(|(_, v)| templated(v))
            || s.match_expressions
                .iter()
                .flatten()
                .flat_map(|e| e.values.iter().flatten())
                .any(|v| templated(v));
        if !has_placeholders {
            return SelectorTarget::Fixed(matcher);
        }
        SelectorTarget::Templated {
            match_labels: s
                .match_labels
                .iter()
                .flatten()
                .map(|(key, v)| {
                    (
                        key.clone(),
                        Text::compile(v, format!("{at}.matchLabels.{key}"), errors),
                    )
                })
                .collect(),
            match_expressions: s
                .match_expressions
                .iter()
                .flatten()
                .enumerate()
                .map(|(i, e)| {
                    let values = e
                        .values
                        .iter()
                        .flatten()
                        .enumerate()
                        .map(|(j, v)| {
                            Text::compile(
                                v,
                                format!("{at}.matchExpressions[{i}].values[{j}]"),
                                errors,
                            )
                        })
                        .collect();
                    (e.key.clone(), e.operator.clone(), values)
                })
                .collect(),
        }
    });
    ObjectTarget {
        api_version: Text::compile(&k.api_version, format!("{field}.apiVersion"), errors),
        kind: Text::compile(&k.kind, format!("{field}.kind"), errors),
        namespace: k
            .namespace
            .as_ref()
            .map(|n| Text::compile(n, format!("{field}.namespace"), errors)),
        name: k
            .name
            .as_ref()
            .map(|n| Text::compile(n, format!("{field}.name"), errors)),
        selector,
    }
}
