//! The webhook server over real TLS on 127.0.0.1: every fixture through both webhooks on one
//! keep-alive connection, bad input, slow clients, certificate rotation, health, metrics,
//! concurrency, review timeouts and graceful shutdown.

mod common;

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use common::{
    Client, HttpResponse, LABEL, SLOW_LOOKUP, connect_tls, fixture, fixture_files, slow_review,
    start, temp_dir, with_uid,
};
use kanon_certificates::{CA_CERT_KEY, TLS_CERT_KEY, TLS_KEY_KEY};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// Checks an answer the way kube-apiserver does; returns (allowed, decoded patch).
fn accept(request: &Value, path: &str, response: &HttpResponse) -> (bool, Option<Vec<Value>>) {
    let text = response.text();
    assert_eq!(response.status, 200, "{path}: {text}");
    assert_eq!(
        response.header("content-type"),
        Some("application/json"),
        "{path}"
    );
    let answer = response.json();
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1", "{text}");
    assert_eq!(answer["kind"], "AdmissionReview", "{text}");
    let reply = &answer["response"];
    assert_eq!(reply["uid"], request["request"]["uid"], "uid: {text}");
    let allowed = reply["allowed"].as_bool().expect("allowed is a boolean");
    if !allowed {
        let code = reply["status"]["code"].as_u64().unwrap();
        assert!(code >= 400, "{text}");
        assert!(
            !reply["status"]["message"]
                .as_str()
                .unwrap_or_default()
                .is_empty(),
            "{text}"
        );
    }
    let patch = match (reply.get("patchType"), reply.get("patch")) {
        (None, None) => None,
        (Some(kind), Some(patch)) => {
            assert!(path.starts_with("/mutate"), "a validation patched: {text}");
            assert_eq!(kind, "JSONPatch");
            let decoded = BASE64.decode(patch.as_str().unwrap()).unwrap();
            let ops: Value = serde_json::from_slice(&decoded).unwrap();
            let ops = ops.as_array().expect("an RFC 6902 array").clone();
            assert!(!ops.is_empty(), "an empty patch: {text}");
            let parsed: json_patch::Patch = serde_json::from_value(Value::Array(ops.clone()))
                .unwrap_or_else(|e| panic!("not RFC 6902 ({e}): {text}"));
            let mut object = request["request"]["object"].clone();
            json_patch::patch(&mut object, &parsed).unwrap();
            assert_eq!(object["metadata"]["labels"][LABEL], "true", "{text}");
            Some(ops)
        }
        _ => panic!("patch and patchType not together: {text}"),
    };
    (allowed, patch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_fixture_through_both_webhooks_on_one_connection() {
    let server = start("fixtures", true, |_| {}).await;
    let mut client = server.connect().await;
    let (mut patched, mut denied, mut answered) = (0, 0, 0);
    for file in fixture_files() {
        let name = file.file_name().unwrap().to_str().unwrap().to_string();
        for path in ["/mutate?timeout=10s", "/validate?timeout=10s"] {
            let uid = format!("{name}{path}");
            let review = with_uid(fixture(&name), &uid);
            let response = client.post(path, &review).await;
            answered += 1;
            if name == "every-field.synthetic.json" {
                // Placeholder operation: a bad review, the uid still echoed.
                assert_eq!(response.status, 400, "{}", response.text());
                assert_eq!(response.json()["response"]["uid"], uid);
                continue;
            }
            let (allowed, patch) = accept(&review, path, &response);
            patched += usize::from(patch.is_some());
            if !allowed {
                denied += 1;
                assert_eq!(name, "pod-create-privileged.json");
                assert!(path.starts_with("/validate"));
            }
            let operation = review["request"]["operation"].as_str().unwrap();
            if path.starts_with("/mutate") && operation != "DELETE" {
                assert!(patch.is_some(), "{name}: not labelled");
            }
        }
    }
    assert!(answered >= 26);
    assert!(patched >= 10, "{patched}");
    assert_eq!(denied, 1);
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// A good review on `good`, answered correctly.
async fn served(good: &mut Client<TlsStream<TcpStream>>, n: usize) {
    let review = with_uid(fixture("pod-create.json"), &format!("good-{n}"));
    let response = good.post("/validate", &review).await;
    accept(&review, "/validate", &response);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_is_answered_while_another_connection_is_served() {
    let server = start("bad-input", true, |config| {
        config.max_body_bytes = 16 * 1024
    })
    .await;
    let mut good = server.connect().await;
    let pod = fixture("pod-create.json");
    served(&mut good, 0).await;

    let mut bad = server.connect().await;
    // Not JSON: 400, an AdmissionReview with an empty uid and a message.
    let response = bad
        .request("POST", "/validate", b"{not json")
        .await
        .unwrap();
    assert_eq!(response.status, 400);
    let answer = response.json();
    assert_eq!(answer["response"]["uid"], "");
    assert_eq!(answer["response"]["allowed"], false);
    let message = answer["response"]["status"]["message"].as_str().unwrap();
    assert!(message.contains("not JSON"), "{message}");
    served(&mut good, 1).await;

    // JSON, but not an AdmissionReview: 400 naming the problem, the uid echoed.
    let wrong = json!({"apiVersion": "v1", "kind": "Pod", "request": {"uid": "wrong-kind"}});
    let response = bad.post("/mutate", &wrong).await;
    assert_eq!(response.status, 400, "{}", response.text());
    let answer = response.json();
    assert_eq!(answer["response"]["uid"], "wrong-kind");
    assert!(answer["response"]["status"]["message"].is_string());
    assert!(answer["response"].get("patch").is_none());
    served(&mut good, 2).await;

    // Unknown path, wrong method: plain messages, the connection kept.
    let response = bad.get("/nowhere").await;
    assert_eq!(response.status, 404);
    assert!(response.text().contains("/nowhere"), "{}", response.text());
    let response = bad.get("/mutate").await;
    assert_eq!(response.status, 405);
    assert_eq!(response.header("allow"), Some("POST"));
    let response = bad.request("DELETE", "/healthz", b"").await.unwrap();
    assert_eq!(response.status, 405);
    served(&mut good, 3).await;

    // Over the limit by its Content-Length: 413 at once, the connection closed.
    let mut large = server.connect().await;
    large
        .send_raw(&Client::<TcpStream>::head("POST", "/validate", 1 << 20))
        .await
        .unwrap();
    let response = large.read_response().await.unwrap();
    assert_eq!(response.status, 413, "{}", response.text());
    assert_eq!(response.header("connection"), Some("close"));
    // A v1 Status: kube-apiserver quotes its message to its client.
    let message = response.json()["message"].as_str().unwrap().to_string();
    assert!(message.contains("16384"), "{message}");
    assert!(large.closed_within(Duration::from_secs(2)).await);
    served(&mut good, 4).await;

    // Over the limit in chunks, no Content-Length: reading stops at the limit, 413.
    let mut chunked = server.connect().await;
    let mut request = b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let chunk = vec![b' '; 20 * 1024];
    request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
    request.extend_from_slice(&chunk);
    request.extend_from_slice(b"\r\n");
    chunked.send_raw(&request).await.unwrap();
    let response = chunked.read_response().await.unwrap();
    assert_eq!(response.status, 413, "{}", response.text());
    served(&mut good, 5).await;

    // The bad connection still answers.
    let review = with_uid(pod.clone(), "bad-conn-recovered");
    let response = bad.post("/mutate", &review).await;
    accept(&review, "/mutate", &response);

    let text = server.metrics.encode();
    assert!(
        text.contains("result=\"too_large\""),
        "no too_large in the metrics:\n{text}"
    );
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_clients_do_not_block_others() {
    let header_timeout = Duration::from_millis(800);
    let server = start("slow", true, |config| {
        config.header_read_timeout = header_timeout;
    })
    .await;
    let review = with_uid(fixture("pod-create.json"), "slow-body");
    let body = serde_json::to_vec(&review).unwrap();

    // Half a head, then nothing.
    let mut stalled = server.connect().await;
    let stalled_at = Instant::now();
    stalled
        .send_raw(b"POST /validate?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Ty")
        .await
        .unwrap();
    // A whole head and a tenth of the body, then nothing for a while.
    let mut slow_body = server.connect().await;
    let mut first = Client::<TcpStream>::head("POST", "/validate", body.len());
    first.extend_from_slice(&body[..body.len() / 10]);
    slow_body.send_raw(&first).await.unwrap();

    // Others are served at once, several times over.
    let mut other = server.connect().await;
    for i in 0..5 {
        let started = Instant::now();
        let review = with_uid(fixture("pod-create.json"), &format!("other-{i}"));
        let response = other.post("/mutate", &review).await;
        accept(&review, "/mutate", &response);
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
    }
    let health = server.connect().await.get("/healthz").await;
    assert_eq!(health.status, 200);

    // The stalled head is closed after the header timeout, not before.
    assert!(stalled.closed_within(Duration::from_secs(5)).await);
    let waited = stalled_at.elapsed();
    assert!(
        waited >= header_timeout && waited < header_timeout * 4,
        "closed after {waited:?}"
    );

    // The slow body is a request in progress: not cut by the header timeout; it is answered
    // once the rest arrives.
    slow_body.send_raw(&body[body.len() / 10..]).await.unwrap();
    let response = slow_body.read_response().await.unwrap();
    accept(&review, "/validate", &response);
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_keep_alive_connections_are_closed_after_the_idle_timeout() {
    let server = start("idle", true, |config| {
        config.idle_timeout = Duration::from_millis(600);
        config.header_read_timeout = Duration::from_secs(5);
    })
    .await;
    let mut client = server.connect().await;
    assert_eq!(client.get("/healthz").await.status, 200);
    let idle_from = Instant::now();
    // Still open well within the idle timeout: a second request on it works.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(client.get("/healthz").await.status, 200);
    let idle_from_again = Instant::now();
    assert!(client.closed_within(Duration::from_secs(5)).await);
    let waited = idle_from_again.elapsed();
    assert!(
        waited >= Duration::from_millis(600) && idle_from.elapsed() < Duration::from_secs(3),
        "closed after {waited:?}"
    );
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn certificates_rotate_without_a_restart() {
    let server = start("rotate", true, |_| {}).await;
    let old_ca = temp_dir("rotate-old-ca").join("ca.crt");
    std::fs::copy(&server.ca, &old_ca).unwrap();
    let mut before = server.connect().await;
    assert_eq!(before.get("/healthz").await.status, 200);

    // A new pair from a new CA, moved into place key first (as a rotation would).
    let fresh = temp_dir("rotate-new");
    kanon_certificates::directory::create(
        &fresh,
        &kanon_certificates::directory::standalone_settings(),
        kanon_certificates::unix_now(),
    )
    .unwrap();
    for file in [TLS_KEY_KEY, TLS_CERT_KEY] {
        let staged = server.dir.join(format!(".{file}.staged"));
        std::fs::copy(fresh.join(file), &staged).unwrap();
        std::fs::rename(&staged, server.dir.join(file)).unwrap();
    }
    let new_ca = fresh.join(CA_CERT_KEY);
    // The files are followed by the `kanon` binary, which reloads the resolver.
    assert!(connect_tls(server.addr, &new_ca).await.is_err());
    server.resolver.reload().unwrap();
    let mut rotated = connect_tls(server.addr, &new_ca)
        .await
        .expect("the new certificate is served");
    assert_eq!(rotated.get("/healthz").await.status, 200);
    // A client trusting only the old CA no longer gets in.
    assert!(connect_tls(server.addr, &old_ca).await.is_err());
    // A connection opened before the rotation keeps working.
    assert_eq!(before.get("/healthz").await.status, 200);

    // A broken certificate file: the rotated pair keeps serving.
    std::fs::write(server.dir.join(TLS_CERT_KEY), "not a certificate").unwrap();
    let error = server.resolver.reload().unwrap_err();
    assert!(error.to_string().contains(TLS_CERT_KEY), "{error}");
    let mut still = connect_tls(server.addr, &new_ca).await.unwrap();
    assert_eq!(still.get("/healthz").await.status, 200);

    server.shutdown(Duration::from_secs(5)).await.unwrap();
    let _ = std::fs::remove_dir_all(&fresh);
    let _ = std::fs::remove_dir_all(old_ca.parent().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn health_and_readiness() {
    let server = start("health", false, |_| {}).await;
    let mut client = server.connect().await;
    let response = client.get("/healthz").await;
    assert_eq!((response.status, response.text().trim()), (200, "ok"));
    let response = client.get("/readyz").await;
    assert_eq!(response.status, 503, "{}", response.text());
    assert!(response.text().contains("not ready"));

    // Before any policy set is in force a review is not answered (an allow would admit what a
    // `Fail` policy denies): 503, so kube-apiserver applies the webhook's failurePolicy.
    let review = with_uid(fixture("pod-create.json"), "early");
    for path in ["/mutate", "/validate"] {
        let response = server.connect().await.post(path, &review).await;
        assert_eq!(response.status, 503, "{path}: {}", response.text());
        assert!(
            response.text().contains("not loaded"),
            "{}",
            response.text()
        );
        assert_eq!(response.header("retry-after"), Some("1"));
    }

    server.state.replace(common::policies());
    let response = client.get("/readyz").await;
    assert_eq!(response.status, 200, "{}", response.text());
    let response = server.connect().await.post("/mutate", &review).await;
    accept(&review, "/mutate", &response);
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_on_the_plain_listener() {
    let server = start("metrics", true, |_| {}).await;
    let review = with_uid(fixture("pod-create.json"), "counted");
    let response = server.connect().await.post("/validate", &review).await;
    accept(&review, "/validate", &response);

    let mut plain = server.connect_metrics().await;
    let response = plain.get("/metrics").await;
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("content-type"),
        Some(kanon_webhook::metrics::CONTENT_TYPE)
    );
    let text = response.text();
    assert!(
        text.contains("kanon_admission_requests_total{"),
        "no request counter:\n{text}"
    );
    assert!(
        text.contains("webhook=\"validate\"") && text.contains("kind=\"Pod\""),
        "{text}"
    );
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    assert_eq!(plain.get("/nothing").await.status, 404);
    // The metrics port speaks plain HTTP only; the webhook port TLS only.
    assert!(
        connect_tls(server.metrics_addr, &server.ca).await.is_err(),
        "TLS on the metrics port"
    );
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_concurrent_requests() {
    let server = start("concurrent", true, |config| {
        config.max_concurrent_reviews = 4;
    })
    .await;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..32 {
        let (addr, ca) = (server.addr, server.ca.clone());
        tasks.spawn(async move {
            let mut client = connect_tls(addr, &ca).await.unwrap();
            let (file, path) = if i % 2 == 0 {
                ("pod-create.json", "/mutate?timeout=10s")
            } else {
                ("pod-create-privileged.json", "/validate?timeout=10s")
            };
            let review = with_uid(fixture(file), &format!("concurrent-{i}"));
            let response = client.post(path, &review).await;
            let (allowed, patch) = accept(&review, path, &response);
            assert_eq!(allowed, i % 2 == 0, "{i}");
            assert_eq!(patch.is_some(), i % 2 == 0, "{i}");
            i
        });
    }
    let mut done = Vec::new();
    while let Some(result) = tasks.join_next().await {
        done.push(result.unwrap());
    }
    done.sort();
    assert_eq!(done, (0..32).collect::<Vec<_>>());
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_request_timeout_bounds_a_review() {
    let server = start("timeout", true, |config| {
        config.max_concurrent_reviews = 1;
    })
    .await;
    let mut client = server.connect().await;
    // The lookup takes longer than the review may: it is cut short before the deadline, and
    // its policy fails under its own failure policy (Fail: denied, naming the timeout), in
    // time for kube-apiserver to read the answer.
    let review = slow_review("slow");
    let started = Instant::now();
    let response = client.post("/validate?timeout=300ms", &review).await;
    let waited = started.elapsed();
    let (allowed, _) = accept(&review, "/validate", &response);
    let answer = response.json()["response"].clone();
    assert!(!allowed, "{answer}");
    assert_eq!(answer["status"]["code"], 403, "{answer}");
    let message = answer["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("ClusterValidatePolicy/slow-lookup")
            && message.contains("example.com/v1/Slow slow")
            && message.contains("timed out"),
        "{message}"
    );
    assert!(
        waited >= Duration::from_millis(200) && waited < Duration::from_millis(300),
        "{waited:?}"
    );

    // The cut-short lookup gave its slot back: the next review is answered at once.
    let pod = with_uid(fixture("pod-create.json"), "after-the-slow-one");
    let started = Instant::now();
    let response = client.post("/mutate?timeout=10s", &pod).await;
    accept(&pod, "/mutate", &response);
    assert!(started.elapsed() < Duration::from_millis(500));

    // Without a timeout in the query, the default applies: long enough for the slow lookup,
    // which finds nothing (a missing object is an evaluation error, not a timeout).
    let review = slow_review("slow-but-in-time");
    let started = Instant::now();
    let response = client.post("/validate", &review).await;
    accept(&review, "/validate", &response);
    let answer = response.json()["response"].clone();
    assert!(started.elapsed() >= SLOW_LOOKUP);
    let message = answer["status"]["message"].as_str().unwrap();
    assert!(message.contains("was not found"), "{message}");
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_review_waiting_on_a_lookup_does_not_hold_up_others() {
    // One evaluation slot, and two reviews waiting on the slow lookup: they wait without it.
    let server = start("lookup-wait", true, |config| {
        config.max_concurrent_reviews = 1;
    })
    .await;
    let mut slow = Vec::new();
    for i in 0..2 {
        let (addr, ca) = (server.addr, server.ca.clone());
        slow.push(tokio::spawn(async move {
            let review = slow_review(&format!("waiting-{i}"));
            let mut client = connect_tls(addr, &ca).await.unwrap();
            let started = Instant::now();
            let response = client.post("/validate?timeout=10s", &review).await;
            accept(&review, "/validate", &response);
            started.elapsed()
        }));
    }
    // Both are in their lookup by now.
    tokio::time::sleep(SLOW_LOOKUP / 5).await;
    let mut client = server.connect().await;
    for i in 0..5 {
        let pod = with_uid(fixture("pod-create.json"), &format!("not-waiting-{i}"));
        let started = Instant::now();
        let response = client.post("/mutate?timeout=10s", &pod).await;
        accept(&pod, "/mutate", &response);
        assert!(
            started.elapsed() < SLOW_LOOKUP / 3,
            "a review with no lookup waited {:?} behind the lookups of others",
            started.elapsed()
        );
    }
    for task in slow {
        let waited = task.await.unwrap();
        // They took their slot back and finished: the lookup's time, not twice it.
        assert!(
            waited >= SLOW_LOOKUP && waited < SLOW_LOOKUP * 3 / 2,
            "{waited:?}"
        );
    }
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_drains_requests_in_progress() {
    let mut server = start("shutdown", true, |_| {}).await;
    // An idle keep-alive connection.
    let mut idle = server.connect().await;
    assert_eq!(idle.get("/healthz").await.status, 200);
    // A request in progress: its head and half its body.
    let review = with_uid(fixture("pod-create.json"), "in-flight");
    let body = serde_json::to_vec(&review).unwrap();
    let mut in_flight = server.connect().await;
    let mut first = Client::<TcpStream>::head("POST", "/mutate", body.len());
    first.extend_from_slice(&body[..body.len() / 2]);
    in_flight.send_raw(&first).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    server.trigger_shutdown();
    // The idle connection is closed, and new connections are refused.
    assert!(idle.closed_within(Duration::from_secs(2)).await);
    // Each listener closes on its own runtime (the metrics one on a thread of its own), each
    // soon after the signal: on a loaded machine, not at the same moment.
    for (addr, what) in [(server.addr, "webhook"), (server.metrics_addr, "metrics")] {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match tokio::net::TcpStream::connect(addr).await {
                Err(_) => break,
                Ok(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Ok(_) => panic!("the {what} listener still accepts connections after shutdown"),
            }
        }
    }

    // The request in progress is answered once its body is complete, then its connection
    // closes.
    in_flight.send_raw(&body[body.len() / 2..]).await.unwrap();
    let response = in_flight.read_response().await.unwrap();
    accept(&review, "/mutate", &response);
    // The answer says so when the connection's task saw the shutdown before writing it (on a
    // loaded machine it may not have yet); either way the connection then closes.
    assert!(
        matches!(response.header("connection"), Some("close") | None),
        "{:?}",
        response.header("connection")
    );
    assert!(in_flight.closed_within(Duration::from_secs(2)).await);
    server.shutdown(Duration::from_secs(5)).await.unwrap();
}
