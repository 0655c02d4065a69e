//! `http` references: a request to a service, its placeholders rendered, its answer as
//! `{status, header, body}`.

use std::sync::Arc;

use serde_json::Value;

use super::objects::missing;
use super::target::{HttpBody, Target};
use super::text::Text;
use super::{CompiledRef, RefScope};
use crate::lookup::HttpCall;
use crate::rule::RuleError;

impl CompiledRef {
    /// The answer of the HTTP service as `{status, header, body}`; a status outside 2xx, or
    /// a body that is not JSON, is an error.
    pub(super) async fn http(&self, scope: &RefScope<'_>) -> Result<Arc<Value>, RuleError> {
        let at = format!("{}.http", self.field);
        let Some(Target::Http(t)) = &self.target else {
            return Err(missing(at));
        };
        let render = |text: &Text, what: &str| scope.render(text, &at, what);
        let url = render(&t.url, "url")?;
        let mut params = std::collections::BTreeMap::new();
        for (key, value) in &t.params {
            params.insert(key.clone(), render(value, &format!("params.{key}"))?);
        }
        let mut headers = std::collections::BTreeMap::new();
        for (key, value) in &t.headers {
            headers.insert(key.clone(), render(value, &format!("header.{key}"))?);
        }
        let body = match &t.body {
            None => None,
            Some(HttpBody::Json(v)) => Some(v.clone()),
            Some(HttpBody::Template(text)) => {
                let rendered = render(text, "body")?;
                Some(
                    serde_json::from_str(&rendered).map_err(|e| RuleError::Reference {
                        field: format!("{at}.body"),
                        message: format!("the rendered body is not JSON ({e}): {rendered}"),
                    })?,
                )
            }
        };
        let call = HttpCall {
            method: t.method,
            url,
            params,
            headers,
            body,
            token: t.token.clone(),
            timeout: t.timeout,
            policy: scope.policy.to_string(),
        };
        let answer = scope
            .lookup
            .http(&call)
            .await
            .map_err(|e| self.lookup_error(&at, e))?;
        if !(200..300).contains(&answer.status) {
            let text = String::from_utf8_lossy(&answer.body);
            let shown: String = text.chars().take(200).collect();
            return Err(RuleError::Reference {
                field: at,
                message: format!("{} answered HTTP {}: {shown}", call.url, answer.status),
            });
        }
        let body: Value = if answer.body.iter().all(u8::is_ascii_whitespace) {
            Value::Null
        } else {
            serde_json::from_slice(&answer.body).map_err(|e| RuleError::Reference {
                field: at.clone(),
                message: format!("{} answered with a body that is not JSON: {e}", call.url),
            })?
        };
        let header: serde_json::Map<String, Value> = answer
            .headers
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        Ok(Arc::new(serde_json::json!({
            "status": answer.status,
            "header": header,
            "body": body,
        })))
    }
}
