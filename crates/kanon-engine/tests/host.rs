//! Hand-written programs through a [`ProgramHost`]: the engine passes them, with their
//! variables as JSON, to the host its evaluation has, and gets the same decision as running
//! them in place. The host here serializes each call and its reply as a worker process's
//! would, so what a worker sees is what the program would have seen.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use kanon_api::Operation;
use kanon_engine::Program;
use kanon_engine::{
    Evaluation, Lookup, LookupFuture, ObjectQuery, ObjectStore, PolicySet, Request, block_on,
    compile_document,
};
use kanon_engine::{HttpAnswer, HttpCall};
use kanon_engine::{ProgramCall, ProgramFuture, ProgramHost, ProgramInput, ProgramReply};
use serde_json::{Value, json};

mod common;
use common::{cop, cvp};

/// The cluster: one namespace with labels and a ConfigMap a reference reads.
fn store() -> ObjectStore {
    let mut store = ObjectStore::new();
    store
        .insert(json!({"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": "team-a", "labels": {"tier": "gold"}}}))
        .unwrap();
    store
        .insert(json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "defaults", "namespace": "team-a"},
                       "data": {"owner": "platform"}}))
        .unwrap();
    store
}

/// A lookup over [`store`] whose programs run through a JSON round trip, counted.
struct Hosted {
    store: ObjectStore,
    calls: AtomicUsize,
    sources: Mutex<Vec<String>>,
}

impl Lookup for Hosted {
    fn get<'a>(
        &'a self,
        query: ObjectQuery<'a>,
        name: &'a str,
    ) -> LookupFuture<'a, Option<std::sync::Arc<Value>>> {
        self.store.get(query, name)
    }
    fn list<'a>(&'a self, query: ObjectQuery<'a>) -> LookupFuture<'a, Vec<std::sync::Arc<Value>>> {
        self.store.list(query)
    }
    fn http<'a>(&'a self, call: &'a HttpCall) -> LookupFuture<'a, HttpAnswer> {
        self.store.http(call)
    }
}

impl Hosted {
    /// A host over [`store`] that has run nothing yet.
    fn new() -> Self {
        Hosted {
            store: store(),
            calls: AtomicUsize::new(0),
            sources: Mutex::new(Vec::new()),
        }
    }

    /// An evaluation over the store whose programs run through this host.
    fn evaluation(&self) -> Evaluation<'_> {
        Evaluation::new(self).with_programs(Some(self))
    }
}

impl ProgramHost for Hosted {
    fn run<'a>(&'a self, program: &'a Program, input: ProgramInput) -> ProgramFuture<'a> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.sources
            .lock()
            .unwrap()
            .push(program.source().to_string());
        // What crosses the pipe to a worker, and back.
        let wire = serde_json::to_vec(&ProgramCall::new(program, input)).unwrap();
        let call: ProgramCall = serde_json::from_slice(&wire).unwrap();
        let reply = serde_json::to_vec(&call.run()).unwrap();
        let reply: ProgramReply = serde_json::from_slice(&reply).unwrap();
        Box::pin(std::future::ready(reply.into()))
    }
}

/// Every variable a program sees, printed: object, oldObject, operation, request,
/// namespaceObject and a resolved reference.
const SHOW_ALL: &str = r#"
- op: add
  path: /metadata/annotations
  value:
    name: {{ object.metadata.name | tojson }}
    old: {{ (oldObject.metadata.labels if oldObject else none) | tojson | tojson }}
    operation: {{ operation | tojson }}
    user: {{ request.userInfo.username | tojson }}
    request: {{ request | tojson | tojson }}
    namespace: {{ (namespaceObject.metadata.labels.tier if namespaceObject else "none") | tojson }}
    containers: {{ object.spec.containers | map(attribute="name") | join(",") | tojson }}
    images: {{ jsonpath(object, "$.spec.containers[*].image") | tojson | tojson }}
"#;

fn policies() -> PolicySet {
    let docs = [
        cop(
            "show",
            json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                "overrideRules": [{"overriders": {"program": SHOW_ALL}}],
            }),
        ),
        // A template (rendered by kanon): stays in place, never sent to the host.
        cop(
            "template",
            json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                "overrideRules": [{"overriders": {"template": {
                    "type": "labels", "operation": "add", "path": "templated",
                    "value": {"string": "yes"}}}}],
            }),
        ),
        cvp(
            "owner",
            json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                "validateRules": [{"program": r#"
{%- set image = object.spec.containers[0].image -%}
valid: {{ (image is startingwith("registry.example/")) | tojson }}
reason: "{{ image }} is not from registry.example (user {{ request.userInfo.username | default("-") }}, tier {{ namespaceObject.metadata.labels.tier if namespaceObject else "-" }})"
warnings: ["checked {{ operation }}"]
"#}],
            }),
        ),
        cvp(
            "fails",
            json!({
                "failurePolicy": "Ignore",
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                "validateRules": [{"program": "{{ object.spec.nothing.here }}"}],
            }),
        ),
    ];
    PolicySet::build(
        docs.iter()
            .map(|d| compile_document(d).expect("compiles"))
            .collect(),
    )
    .unwrap()
}

fn pod(name: &str, image: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "labels": {"app": name}},
        "spec": {"containers": [{"name": "main", "image": image}, {"name": "side", "image": "busybox"}]},
    })
}

fn requests() -> Vec<Request> {
    let review = |operation: &str, object: Value, old: Option<Value>| {
        json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u-1", "operation": operation, "namespace": "team-a", "name": "web",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "userInfo": {"username": "alice", "groups": ["dev"]},
                "object": object, "oldObject": old,
            }
        })
    };
    vec![
        Request::from_admission_review(&review("CREATE", pod("web", "nginx"), None)).unwrap(),
        Request::from_admission_review(&review(
            "UPDATE",
            pod("web", "registry.example/web:2"),
            Some(pod("web-old", "registry.example/web:1")),
        ))
        .unwrap(),
        Request::from_objects(Operation::Create, Some(pod("bare", "nginx")), None).unwrap(),
    ]
}

#[test]
fn hosted_programs_decide_exactly_as_programs_run_in_place() {
    let set = policies();
    let (mut allowed, mut denied) = (0, 0);
    for request in requests() {
        let hosted = Hosted::new();
        let in_place = block_on(set.review(&request, &store()));
        let through_host = block_on(set.review_in(&request, &hosted.evaluation()));
        assert_eq!(
            serde_json::to_value(&through_host.patch).unwrap(),
            serde_json::to_value(&in_place.patch).unwrap(),
            "patch"
        );
        assert_eq!(through_host.allowed, in_place.allowed);
        assert_eq!(through_host.messages, in_place.messages);
        assert_eq!(through_host.warnings, in_place.warnings);
        assert_eq!(through_host.patched, in_place.patched);
        // The hand-written programs went to the host (show, owner), the template not, nor the
        // contained program (fails: one placeholder), which ran in place.
        assert_eq!(hosted.calls.load(Ordering::SeqCst), 2);
        assert!(
            hosted
                .sources
                .lock()
                .unwrap()
                .iter()
                .all(|s| !s.contains("map_path")),
            "a rendered template was sent to the host"
        );
        // The variables really reached the programs: the image check denies nginx, with the
        // user and the namespace's tier in its reason, and the annotations name the containers.
        let image = request.subject().unwrap()["spec"]["containers"][0]["image"].clone();
        if in_place.allowed {
            let patched = &through_host.patched.as_ref().unwrap()["metadata"]["annotations"];
            assert_eq!(patched["containers"], "main,side");
            assert_eq!(
                patched["images"],
                format!(r#"["{}", "busybox"]"#, image.as_str().unwrap())
            );
            allowed += 1;
        } else {
            assert!(
                through_host.messages.iter().any(|m| m.contains(&format!(
                    "{} is not from registry.example (user ",
                    image.as_str().unwrap()
                ))),
                "{:?}",
                through_host.messages
            );
            denied += 1;
        }
    }
    assert_eq!((allowed, denied), (1, 2));
}

#[test]
fn every_variable_survives_the_trip_to_a_worker() {
    let set = policies();
    let update = &requests()[1];
    let hosted = Hosted::new();
    let decision = block_on(set.review_in(update, &hosted.evaluation()));
    let annotations = &decision.patched.as_ref().unwrap()["metadata"]["annotations"];
    assert_eq!(annotations["name"], "web");
    assert_eq!(annotations["old"], r#"{"app": "web-old"}"#);
    assert_eq!(annotations["operation"], "UPDATE");
    assert_eq!(annotations["user"], "alice");
    assert_eq!(annotations["namespace"], "gold");
    let request: Value = serde_json::from_str(annotations["request"].as_str().unwrap()).unwrap();
    assert_eq!(request["uid"], "u-1");
    assert_eq!(request["kind"]["kind"], "Pod");
    assert!(decision.allowed, "{:?}", decision.messages);
    assert_eq!(
        decision
            .warnings
            .iter()
            .filter(|w| *w == "ClusterValidatePolicy/owner: checked UPDATE")
            .count(),
        1,
        "{:?}",
        decision.warnings
    );
}

/// Hand-written programs within the language of texts but for `{% if %}` branches: each prints
/// one variable's value a different way, so that a difference between the context built for
/// the host and the one built for a contained run shows.
const CONTAINED: &[&str] = &[
    "- {op: add, path: /metadata/annotations, value: {}}",
    r#"- {op: add, path: /metadata/annotations/request, value: {{ request | tojson | tojson }}}"#,
    r#"- {op: add, path: /metadata/annotations/user, value: {{ request.userInfo | string | tojson }}}"#,
    r#"- {op: add, path: /metadata/annotations/groups, value: {{ ((request.userInfo.groups | default([]) | join(',')) ~ " " ~ (request.dryRun | default("unset")) ~ " " ~ (request.userInfo.groups | default(none))) | tojson }}}"#,
    r#"- {op: add, path: /metadata/annotations/ns, value: {{ ((namespaceObject.metadata.labels | items | list) ~ " " ~ (namespaceObject is none) ~ " " ~ namespaceObject.metadata.labels) | tojson }}}"#,
    r#"{% if oldObject %}- {op: add, path: /metadata/annotations/old, value: {{ ((oldObject.metadata.labels | dictsort) ~ " " ~ oldObject.metadata) | tojson }}}{% else %}- {op: add, path: /metadata/annotations/old, value: {{ (oldObject ~ " " ~ (oldObject is none)) | tojson }}}{% endif %}"#,
    r#"- {op: add, path: /metadata/annotations/object, value: {{ (object.spec.containers[0] ~ " " ~ (object.spec.containers | length) ~ " " ~ (object.metadata.labels | tojson) ~ " " ~ (object.spec.containers | map(attribute='image') | list)) | tojson }}}"#,
    r#"- {op: add, path: /metadata/annotations/operation, value: {{ (operation ~ " " ~ (operation | lower) ~ " " ~ request.kind) | tojson }}}"#,
];

fn contained_policies() -> PolicySet {
    let mut docs: Vec<Value> = CONTAINED
        .iter()
        .enumerate()
        .map(|(i, program)| {
            cop(
                &format!("contained-{i}"),
                json!({
                    "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                    "overrideRules": [{"overriders": {"program": program}}],
                }),
            )
        })
        .collect();
    docs.push(cvp(
        "contained-verdict",
        json!({
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "validateRules": [{"program": r#"{% if object.spec.containers[0].image is startingwith("registry.example/") %}{"valid": true}{% else %}{"valid": false, "reason": "{{ object.spec.containers[0].image }} by {{ request.userInfo.username | default("") }} in {{ namespaceObject.metadata.name if namespaceObject else '-' }}"}{% endif %}"#}],
        }),
    ));
    PolicySet::build(
        docs.iter()
            .map(|d| compile_document(d).expect("compiles"))
            .collect(),
    )
    .unwrap()
}

#[test]
fn contained_programs_run_in_place_and_decide_as_the_host_would() {
    let set = contained_policies();
    let (mut allowed, mut denied) = (0, 0);
    for request in requests() {
        let hosted = Hosted::new();
        // Without a host every program runs in place on the context a worker builds.
        let unhosted = block_on(set.review(&request, &store()));
        let contained = block_on(set.review_in(&request, &hosted.evaluation()));
        assert_eq!(hosted.calls.load(Ordering::SeqCst), 0, "sent to the host");
        assert_eq!(
            serde_json::to_value(&contained.patched).unwrap(),
            serde_json::to_value(&unhosted.patched).unwrap(),
        );
        assert_eq!(contained.allowed, unhosted.allowed);
        assert_eq!(contained.messages, unhosted.messages);
        assert_eq!(contained.warnings, unhosted.warnings);
        if !contained.allowed {
            // The verdict's reason reads the variables too.
            assert!(
                contained.messages[0].ends_with("nginx by alice in team-a")
                    || contained.messages[0].ends_with("nginx by  in team-a"),
                "{:?}",
                contained.messages
            );
            denied += 1;
            continue;
        }
        let patched = contained.patched.as_ref().expect("patched");
        let annotations = patched["metadata"]["annotations"]
            .as_object()
            .unwrap_or_else(|| panic!("{:?}", contained.messages));
        assert_eq!(annotations.len(), CONTAINED.len() - 1, "{annotations:?}");
        assert_eq!(
            annotations["user"],
            "{'username': 'alice', 'groups': ['dev']}"
        );
        assert_eq!(
            annotations["ns"],
            "[('tier', 'gold')] False {'tier': 'gold'}"
        );
        assert_eq!(
            annotations["operation"],
            "UPDATE update {'group': '', 'version': 'v1', 'kind': 'Pod'}"
        );
        allowed += 1;
    }
    assert_eq!((allowed, denied), (1, 2));
}

#[test]
fn a_contained_program_that_reads_more_than_a_text_may_runs_in_the_host() {
    // Each mention of the 600 KB annotation is charged: three pass the 1 MiB a text may read.
    let set = PolicySet::build(vec![
        compile_document(&cvp(
            "reads-much",
            json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
                "validateRules": [{"program": r#"{"valid": {{ ((object.metadata.annotations.big + object.metadata.annotations.big + object.metadata.annotations.big) | length < 10) | tojson }}, "reason": "read {{ object.metadata.annotations.big | length }}"}"#}],
            }),
        ))
        .unwrap(),
    ])
    .unwrap();
    let mut big = pod("big", "nginx");
    big["metadata"]["annotations"] = json!({"big": "x".repeat(600_000)});
    let request = Request::from_objects(Operation::Create, Some(big), None).unwrap();
    let hosted = Hosted::new();
    let decision = block_on(set.review_in(&request, &hosted.evaluation()));
    assert_eq!(hosted.calls.load(Ordering::SeqCst), 1);
    assert!(!decision.allowed);
    assert!(
        decision.messages.iter().any(|m| m.contains("read 600000")),
        "{:?}",
        decision.messages
    );
}
