//! Object lookups against a real kube-apiserver 1.35 (see `kanon-control-plane`): a listing by
//! label selector is filtered by the apiserver, one read is bounded in bytes, and reviews
//! missing the cache for the same listing at once cause one LIST.
//!
//! One control plane, one namespace of ConfigMaps: twenty of 900 KiB (18 MiB together) that no
//! selector below wants except `size=large`, and three small ones labelled `app=wanted`.

use std::sync::Arc;

use kanon_cluster::ClusterMetrics;
use kanon_cluster::objects::{ObjectConfig, ObjectReader};
use kanon_control_plane::Options;
use kanon_control_plane::kanon as kit;
use kanon_engine::{LookupError, ObjectQuery};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const NAMESPACE: &str = "tenant";
const LARGE: usize = 20;

fn config_map(name: &str, labels: Value, bytes: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
           "data": {"blob": "x".repeat(bytes)}})
}

async fn fill(client: &kube::Client) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .expect("the namespace");
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), NAMESPACE);
    let objects = (0..LARGE)
        .map(|i| {
            config_map(
                &format!("large-{i:02}"),
                json!({"size": "large"}),
                900 << 10,
            )
        })
        .chain(["c", "a", "b"].map(|n| config_map(n, json!({"app": "wanted"}), 100)));
    for object in objects {
        let object = serde_json::from_value(object).unwrap();
        config_maps
            .create(&PostParams::default(), &object)
            .await
            .expect("a ConfigMap");
    }
}

fn query<'a>(selector: Option<&'a str>) -> ObjectQuery<'a> {
    ObjectQuery {
        api_version: "v1",
        kind: "ConfigMap",
        namespace: None,
        policy: "ValidatePolicy/tenant/reads",
        confined_to: Some(NAMESPACE),
        label_selector: selector,
    }
}

fn names(objects: &[Arc<Value>]) -> Vec<&str> {
    objects
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap_or_default())
        .collect()
}

fn metric(registry: &prometheus_client::registry::Registry, series: &str) -> f64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).expect("the metrics");
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn label_selector_lookups_are_filtered_by_the_apiserver_and_bounded() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kit = kit::Cluster::start("lookups", Options::default())
        .unwrap_or_else(|e| panic!("the control plane with kanon's CRDs: {e:#}"));
    let runtime = kit::runtime().expect("a runtime");
    runtime.block_on(async {
        let client = kit.client().await.expect("a client");
        fill(&client).await;
        let metrics = ClusterMetrics::new();
        let mut registry = prometheus_client::registry::Registry::default();
        metrics.register(&mut registry);
        // A bound well under the namespace's 18 MiB, pages of two objects.
        let reader = Arc::new(ObjectReader::new(
            client,
            ObjectConfig {
                read_max_bytes: 2 << 20,
                page_objects: 2,
                ..ObjectConfig::default()
            },
            metrics,
        ));

        // Only the matching objects come back, over two pages, ordered: the apiserver
        // filtered (the whole namespace would be over the bound, as below).
        let wanted = reader
            .list(query(Some("app=wanted")))
            .await
            .expect("the wanted ConfigMaps");
        assert_eq!(names(&wanted), ["a", "b", "c"]);

        // Without a selector, and with one matching the large objects: over the bound, a
        // typed error naming it, before the 18 MiB were read.
        for selector in [None, Some("size=large"), Some("size in (large,huge)")] {
            match reader.list(query(selector)).await {
                Err(LookupError::Failed { what, message }) => {
                    assert_eq!(what, "v1/ConfigMap");
                    assert!(
                        message.contains("more than 2 MiB, the bound on one read")
                            && message.contains("--object-read-max-mib"),
                        "{message}"
                    );
                }
                other => panic!("{selector:?}: {:?}", other.map(|o| o.len())),
            }
        }

        // Sixteen reviews missing the cache for one listing at once: one LIST, one copy.
        let misses = |r| metric(r, r#"kanon_lookups_total{source="k8s",cache="miss"}"#);
        let before = misses(&registry);
        let reads = (0..16).map(|_| {
            let reader = reader.clone();
            tokio::spawn(async move { reader.list(query(Some("app in (wanted)"))).await })
        });
        let answers: Vec<_> = futures::future::join_all(reads)
            .await
            .into_iter()
            .map(|a| a.expect("a read").expect("the listing"))
            .collect();
        assert_eq!(misses(&registry) - before, 1.0);
        assert!(answers.iter().all(|a| names(a) == ["a", "b", "c"]));
        assert!(answers.iter().all(|a| Arc::ptr_eq(&a[0], &answers[0][0])));

        // The confinement and the Secrets refusal hold on this path too.
        let elsewhere = ObjectQuery {
            namespace: Some("default"),
            ..query(Some("app=wanted"))
        };
        assert!(matches!(
            reader.list(elsewhere).await,
            Err(LookupError::Forbidden { reason, .. }) if reason.contains("own namespace `tenant`")
        ));
        let secrets = ObjectQuery {
            kind: "Secret",
            ..query(Some("app=wanted"))
        };
        assert!(matches!(
            reader.list(secrets).await,
            Err(LookupError::Forbidden { reason, .. }) if reason.contains("--allow-secret-lookups")
        ));
        // By name: found, absent, and a large one within the bound.
        let named = ObjectQuery {
            namespace: Some(NAMESPACE),
            ..query(None)
        };
        let get = |name| reader.get(named, name);
        assert!(get("a").await.expect("a").is_some());
        assert!(get("missing").await.expect("none").is_none());
        assert!(get("large-00").await.expect("one large").is_some());
    });
}
