//! What admission reaches: kube-apiserver calls kanon's validating webhook only for objects its
//! `namespaceSelector` and `objectSelector` select (the chart leaves out kube-system, kanon's own
//! namespace and namespaces that opt out), so the audit judges only those: an object admission
//! never judges is never reported failing.

use std::collections::BTreeSet;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use kanon_engine::{LabelMatcher, labels_of};
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::{Map, Value};

use super::AuditError;

/// The webhook of kanon's validating configuration whose selectors the audit follows.
pub const VALIDATING_WEBHOOK: &str = "validate.kanon.dev";

/// Which objects admission reaches.
#[derive(Debug, Default)]
pub struct Reach {
    /// The namespaces the webhook's namespaceSelector leaves out.
    excluded: BTreeSet<String>,
    /// The webhook's namespaceSelector (a Namespace object is matched by its own labels).
    namespaces: Option<LabelMatcher>,
    /// The webhook's objectSelector.
    objects: Option<LabelMatcher>,
}

impl Reach {
    /// Everything (no webhook configuration to follow).
    pub fn everything() -> Self {
        Reach::default()
    }

    /// What the webhook [`VALIDATING_WEBHOOK`] of the ValidatingWebhookConfiguration
    /// `configuration` reaches, with the namespaces' labels as they are now.
    pub async fn of(client: &Client, configuration: &str) -> Result<Reach, AuditError> {
        let bad = |message: String| AuditError::Reach {
            configuration: configuration.to_string(),
            message,
        };
        let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        let found = api
            .get(configuration)
            .await
            .map_err(|e| bad(crate::apiserver_error::describe(&e)))?;
        let webhook = found
            .webhooks
            .unwrap_or_default()
            .into_iter()
            .find(|w| w.name == VALIDATING_WEBHOOK)
            .ok_or_else(|| bad(format!("it has no webhook {VALIDATING_WEBHOOK}")))?;
        let mut errors = Vec::new();
        let namespaces = webhook
            .namespace_selector
            .map(|s| LabelMatcher::compile(&s, "namespaceSelector", &mut errors));
        let objects = webhook
            .object_selector
            .map(|s| LabelMatcher::compile(&s, "objectSelector", &mut errors));
        if let Some(error) = errors.first() {
            return Err(bad(error.to_string()));
        }
        let mut excluded = BTreeSet::new();
        if let Some(selector) = namespaces.as_ref().filter(|s| !s.is_empty()) {
            let api: Api<Namespace> = Api::all(client.clone());
            let list = api
                .list_metadata(&ListParams::default())
                .await
                .map_err(|e| bad(format!("listing namespaces: {e}")))?;
            for namespace in list.items {
                let name = namespace.metadata.name.unwrap_or_default();
                let labels: Map<String, Value> = namespace
                    .metadata
                    .labels
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, Value::String(v)))
                    .collect();
                if !selector.matches(Some(&labels)) {
                    excluded.insert(name);
                }
            }
        }
        Ok(Reach {
            excluded,
            namespaces,
            objects,
        })
    }

    /// Whether admission would judge `object`.
    pub fn reaches(&self, object: &Value) -> bool {
        if let Some(selector) = &self.objects
            && !selector.matches(labels_of(object))
        {
            return false;
        }
        let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
        if let Some(namespace) = text("/metadata/namespace").filter(|n| !n.is_empty()) {
            return !self.excluded.contains(namespace);
        }
        // A Namespace is matched by the namespaceSelector on its own labels.
        if text("/apiVersion") == Some("v1")
            && text("/kind") == Some("Namespace")
            && let Some(selector) = &self.namespaces
        {
            return selector.matches(labels_of(object));
        }
        true
    }

    /// The namespaces left out.
    pub fn excluded(&self) -> &BTreeSet<String> {
        &self.excluded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    use serde_json::json;

    #[test]
    fn left_out_namespaces_their_objects_and_unselected_objects_are_not_reached() {
        let not_ignored = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "kanon.dev/ignore".to_string(),
                operator: "NotIn".to_string(),
                values: Some(vec!["true".to_string()]),
            }]),
            ..LabelSelector::default()
        };
        let mut errors = Vec::new();
        let reach = Reach {
            excluded: BTreeSet::from(["kube-system".to_string()]),
            namespaces: Some(LabelMatcher::compile(&not_ignored, "n", &mut errors)),
            objects: Some(LabelMatcher::compile(&not_ignored, "o", &mut errors)),
        };
        assert!(errors.is_empty());
        let pod = |namespace: &str, labels: Value| {
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "p", "namespace": namespace, "labels": labels}})
        };
        assert!(reach.reaches(&pod("shop", json!({}))));
        assert!(!reach.reaches(&pod("kube-system", json!({}))));
        assert!(!reach.reaches(&pod("shop", json!({"kanon.dev/ignore": "true"}))));
        let namespace = |labels: Value| {
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": "n", "labels": labels}})
        };
        assert!(reach.reaches(&namespace(json!({}))));
        assert!(!reach.reaches(&namespace(json!({"kanon.dev/ignore": "true"}))));
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}});
        assert!(reach.reaches(&node));
        assert!(Reach::everything().reaches(&pod("kube-system", json!({}))));
    }
}
