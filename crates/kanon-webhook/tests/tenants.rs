//! One tenant's costly policies slow only the reviews they select: while they keep every
//! evaluation slot busy, a review no policy selects is answered at once, another namespace's
//! review with a cheap policy finds a slot, and the connections keep being accepted; once a
//! tenant's reviews proved costly, its next ones compute in the idle class, and no other
//! namespace's do. And a review's deadline counts from its arrival.

mod common;

use std::time::Duration;

use common::{Client, HttpResponse, fixture, start, with_uid};
use kanon_engine::{PolicySet, compile_document};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// A validation of about 600,000 cost units, under the per-call limit.
const COSTLY: &str = "lists.range(600000).size() > 0";

/// A tenant's ValidatePolicy on its Pods: one rule of sixteen costly validations (its whole
/// budget of 10,000,000 units).
fn costly_policy(namespace: &str, name: &str) -> Value {
    let validations: Vec<Value> = (0..16).map(|_| json!({"expression": COSTLY})).collect();
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ValidatePolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "validateRules": [{"targetOperations": ["CREATE"], "cel": {"validations": validations}}],
        },
    })
}

/// Three costly policies in each of `tenants` (30,000,000 units per review: seconds of a debug
/// build's CPU), and a cheap cluster policy on Secrets.
fn policies(tenants: &[&str]) -> PolicySet {
    let mut documents: Vec<Value> = tenants
        .iter()
        .flat_map(|ns| (0..3).map(move |i| costly_policy(ns, &format!("costly-{i}"))))
        .collect();
    documents.push(json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterValidatePolicy",
        "metadata": {"name": "secrets-named"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Secret"}],
            "validateRules": [{"targetOperations": ["CREATE"], "cel": {"validations": [
                {"expression": "object.metadata.name != ''"}
            ]}}],
        },
    }));
    let compiled = documents
        .iter()
        .map(|d| compile_document(d).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    PolicySet::build(compiled).unwrap()
}

/// A Pod CREATE in `namespace`.
fn pod(namespace: &str, uid: &str) -> Value {
    let mut review = with_uid(fixture("pod-create.json"), uid);
    review["request"]["namespace"] = json!(namespace);
    review["request"]["object"]["metadata"]["namespace"] = json!(namespace);
    review
}

/// A CREATE of `kind` (a ConfigMap or a Secret) in `namespace`.
fn object(kind: &str, namespace: &str, uid: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid, "operation": "CREATE", "namespace": namespace, "name": "settings",
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": format!("{}s", kind.to_lowercase())},
            "userInfo": {"username": "team-b"},
            "object": {"apiVersion": "v1", "kind": kind, "metadata": {"name": "settings", "namespace": namespace}, "data": {}},
        },
    })
}

fn allowed(response: &HttpResponse, uid: &str) {
    assert_eq!(response.status, 200, "{}", response.text());
    let answer = response.json();
    assert_eq!(answer["response"]["uid"], uid, "{answer}");
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
}

/// Sends the tenants' costly Pod reviews, each on its own connection.
fn flood(server: &common::TestServer, tenants: &[(&str, usize)]) -> Vec<JoinHandle<HttpResponse>> {
    let mut costly = Vec::new();
    for (namespace, count) in tenants {
        for i in 0..*count {
            let (addr, ca) = (server.addr, server.ca.clone());
            let review = pod(namespace, &format!("{namespace}-{i}"));
            costly.push(tokio::spawn(async move {
                let mut client = common::connect_tls(addr, &ca).await.unwrap();
                client.post("/validate?timeout=30s", &review).await
            }));
        }
    }
    costly
}

/// How many of `tasks` have finished.
fn finished(tasks: &[JoinHandle<HttpResponse>]) -> usize {
    tasks.iter().filter(|t| t.is_finished()).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_no_policy_selects_is_answered_while_costly_ones_hold_every_slot() {
    let server = start("tenants-unselected", true, |config| {
        config.max_concurrent_reviews = 2;
    })
    .await;
    server.state.replace(policies(&["team-a", "team-c"]));
    // Two tenants' floods: each holds its half of the slots, the rest of their reviews wait.
    let costly = flood(&server, &[("team-a", 2), ("team-c", 2)]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(finished(&costly), 0, "the costly reviews take seconds");
    // Another namespace's ConfigMaps, on new connections (a TLS handshake each): no policy
    // selects them, so they are answered at once, before any costly review.
    for i in 0..3 {
        let mut client = server.connect().await;
        let uid = format!("configmap-{i}");
        let response = client
            .post(
                "/validate?timeout=10s",
                &object("ConfigMap", "team-b", &uid),
            )
            .await;
        allowed(&response, &uid);
        assert_eq!(
            finished(&costly),
            0,
            "answered only after a costly review was"
        );
    }
    for task in costly {
        let response = task.await.unwrap();
        assert_eq!(response.status, 200, "{}", response.text());
    }
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_namespaces_cheap_review_finds_a_slot_while_a_tenant_floods() {
    let server = start("tenants-cheap", true, |config| {
        config.max_concurrent_reviews = 4;
    })
    .await;
    server.state.replace(policies(&["team-a"]));
    // Three costly reviews of one tenant: they hold half the slots, the third waits its turn.
    let costly = flood(&server, &[("team-a", 3)]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(finished(&costly), 0, "the costly reviews take seconds");
    // Another namespace's Secret, which a cheap cluster policy judges, takes a free slot.
    let mut client = server.connect().await;
    for i in 0..3 {
        let uid = format!("secret-{i}");
        let response = client
            .post("/validate?timeout=10s", &object("Secret", "team-b", &uid))
            .await;
        allowed(&response, &uid);
        assert_eq!(
            finished(&costly),
            0,
            "answered only after a costly review was"
        );
    }
    for task in costly {
        let response = task.await.unwrap();
        assert_eq!(response.status, 200, "{}", response.text());
    }
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviews_deadline_counts_from_its_arrival() {
    let server = start("tenants-arrival", true, |_| {}).await;
    // A Pod the policies judge, asking for one second; its head takes 1.2 s to arrive (within
    // the header timeout): when it is read, its time is up.
    let review = with_uid(fixture("pod-create.json"), "late");
    let body = serde_json::to_vec(&review).unwrap();
    let mut bytes =
        Client::<tokio::net::TcpStream>::head("POST", "/validate?timeout=1s", body.len());
    bytes.extend_from_slice(&body);
    let mut client = server.connect().await;
    client.send_raw(&bytes[..10]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    client.send_raw(&bytes[10..]).await.unwrap();
    let response = client.read_response().await.unwrap();
    assert_eq!(response.status, 200, "{}", response.text());
    let answer = response.json();
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let message = answer["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("deadline"), "{message}");
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// `kanon_reviews_demoted_total{webhook="validate"}` in the server's metrics.
fn demoted(server: &common::TestServer) -> f64 {
    server
        .metrics
        .encode()
        .lines()
        .find(|l| l.starts_with("kanon_reviews_demoted_total{webhook=\"validate\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_costly_namespaces_next_reviews_compute_in_the_idle_class_and_no_other_does() {
    let server = start("tenants-demoted", true, |config| {
        config.costly_review_cpu = Some(Duration::from_millis(10));
    })
    .await;
    server.state.replace(policies(&["team-a"]));
    let mut client = server.connect().await;
    // Cheap reviews of another namespace, before and after: never demoted.
    let secret = client
        .post(
            "/validate?timeout=10s",
            &object("Secret", "team-b", "secret-0"),
        )
        .await;
    allowed(&secret, "secret-0");
    // The tenant's first costly review runs as any other, and makes its namespace costly.
    let first = client
        .post("/validate?timeout=30s", &pod("team-a", "pod-0"))
        .await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(demoted(&server), 0.0);
    // Its next review computes in the idle class.
    let next = client
        .post("/validate?timeout=30s", &pod("team-a", "pod-1"))
        .await;
    assert_eq!(next.status, 200, "{}", next.text());
    assert_eq!(demoted(&server), 1.0);
    for i in 1..3 {
        let uid = format!("secret-{i}");
        let response = client
            .post("/validate?timeout=10s", &object("Secret", "team-b", &uid))
            .await;
        allowed(&response, &uid);
    }
    assert_eq!(demoted(&server), 1.0, "another namespace is never demoted");
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}
