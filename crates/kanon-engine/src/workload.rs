//! The pod templates of workloads. A policy that selects Pods also judges and patches the Pods
//! a Deployment, StatefulSet, DaemonSet, ReplicaSet, Job or CronJob will create, when the
//! workload is written: its rules see the template as a Pod, so that a Deployment whose Pods
//! would be denied is denied itself, rather than its ReplicaSet failing later where nobody looks.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, ReplaceOperation};
use kanon_api::Operation;
use serde_json::{Map, Value};

use crate::pointer::find;
use crate::policy::CompiledPolicy;
use crate::request::Request;

/// A kind of workload that keeps a pod template, and where.
#[derive(Debug, PartialEq, Eq)]
pub struct Workload {
    /// Its `apiVersion`.
    pub api_version: &'static str,
    /// Its `kind`.
    pub kind: &'static str,
    /// JSON pointer of the pod template (`/spec/template`).
    pub template: &'static str,
    /// The template as a field path, as messages name it (`spec.template`).
    pub field: &'static str,
}

/// The workload kinds whose pod templates Pod policies reach.
pub const WORKLOADS: [Workload; 6] = [
    Workload::templated("apps/v1", "Deployment"),
    Workload::templated("apps/v1", "StatefulSet"),
    Workload::templated("apps/v1", "DaemonSet"),
    Workload::templated("apps/v1", "ReplicaSet"),
    Workload::templated("batch/v1", "Job"),
    Workload {
        api_version: "batch/v1",
        kind: "CronJob",
        template: "/spec/jobTemplate/spec/template",
        field: "spec.jobTemplate.spec.template",
    },
];

impl Workload {
    const fn templated(api_version: &'static str, kind: &'static str) -> Self {
        Workload {
            api_version,
            kind,
            template: "/spec/template",
            field: "spec.template",
        }
    }

    /// The workload kind `api_version`/`kind`, if it is one.
    pub fn of(api_version: &str, kind: &str) -> Option<&'static Workload> {
        WORKLOADS
            .iter()
            .find(|w| w.api_version == api_version && w.kind == kind)
    }

    /// The workload whose template a Pod policy judges on this request: a workload kind
    /// created or updated (not a subresource such as `status` or `scale`, which do not write
    /// the template).
    pub(crate) fn of_request(request: &Request) -> Option<&'static Workload> {
        if !matches!(request.operation, Operation::Create | Operation::Update) {
            return None;
        }
        let subresource = request
            .info
            .get("subResource")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !subresource.is_empty() {
            return None;
        }
        Workload::of(&request.api_version, &request.kind)
    }

    /// Whether the request writes the pod template of `object` (the workload as the policies
    /// see it): a CREATE, or an UPDATE that changes the template. Updates that leave it as it
    /// was (scaling, labels, finalizers: the Deployment controller scales ReplicaSets so) are
    /// not judged again, as Kubernetes' Pod Security admission does not judge them, so that a
    /// workload admitted before a policy can still be scaled, rolled back or deleted.
    pub(crate) fn template_written(&self, request: &Request, object: &Value) -> bool {
        match (&request.operation, &request.old_object) {
            (Operation::Update, Some(old)) => {
                find(old, self.template) != find(object, self.template)
            }
            _ => true,
        }
    }

    /// The Pod the workload's template describes, as Pod policies see it: `apiVersion: v1`,
    /// `kind: Pod`, the template's `metadata` with the workload's namespace (and its name when
    /// the template has none), the template's `spec`. `None` when there is no template.
    pub fn pod(&self, workload: &Value, namespace: Option<&str>, name: &str) -> Option<Value> {
        let template = find(workload, self.template)?.as_object()?;
        let spec = template.get("spec")?;
        let mut metadata = match template.get("metadata") {
            Some(Value::Object(metadata)) => metadata.clone(),
            _ => Map::new(),
        };
        if let Some(namespace) = namespace {
            metadata
                .entry("namespace")
                .or_insert_with(|| Value::from(namespace));
        }
        if !name.is_empty() {
            metadata.entry("name").or_insert_with(|| Value::from(name));
        }
        let mut pod = Map::new();
        pod.insert("apiVersion".into(), Value::from("v1"));
        pod.insert("kind".into(), Value::from("Pod"));
        pod.insert("metadata".into(), Value::Object(metadata));
        pod.insert("spec".into(), spec.clone());
        Some(Value::Object(pod))
    }

    /// The request a Pod policy sees for this workload's template: the same request (its
    /// `request` fields, operation, deadline), for the Pods `object` and `old_object` describe.
    /// `None` when `object` has no template.
    pub(crate) fn pod_request(&self, request: &Request, object: &Value) -> Option<Request> {
        let namespace = request.namespace.as_deref();
        let pod = self.pod(object, namespace, &request.name)?;
        let old = request
            .old_object
            .as_ref()
            .and_then(|old| self.pod(old, namespace, &request.name));
        Some(request.for_pod_template(pod, old))
    }

    /// The operations that write a patched template Pod back into the workload: its `spec`
    /// and `metadata` when they changed, without the namespace and name the Pod was given.
    pub(crate) fn write_back(&self, workload: &Value, pod: &Value) -> Vec<PatchOperation> {
        let Some(template) = find(workload, self.template).and_then(Value::as_object) else {
            return Vec::new();
        };
        let mut ops = Vec::new();
        if let Some(spec) = pod.get("spec")
            && template.get("spec") != Some(spec)
        {
            ops.push(PatchOperation::Replace(ReplaceOperation {
                path: self.pointer("spec"),
                value: spec.clone(),
            }));
        }
        let before = template.get("metadata").and_then(Value::as_object);
        let mut metadata = match pod.get("metadata") {
            Some(Value::Object(metadata)) => metadata.clone(),
            _ => Map::new(),
        };
        // The namespace and name `pod` gave the rules are the workload's, not the template's.
        for key in ["namespace", "name"] {
            if before.is_none_or(|m| !m.contains_key(key)) {
                metadata.remove(key);
            }
        }
        if before != Some(&metadata) && !(before.is_none() && metadata.is_empty()) {
            let path = self.pointer("metadata");
            let value = Value::Object(metadata);
            ops.push(match before {
                Some(_) => PatchOperation::Replace(ReplaceOperation { path, value }),
                None => PatchOperation::Add(AddOperation { path, value }),
            });
        }
        ops
    }

    fn pointer(&self, field: &str) -> PointerBuf {
        let mut pointer = PointerBuf::parse(self.template).unwrap_or_default();
        pointer.push_back(field);
        pointer
    }
}

impl CompiledPolicy {
    /// Whether the policy judges the pod template of `workload` kinds: it selects Pods, does
    /// not select that workload kind itself (it would judge the workload, not its Pods), is not
    /// a Kubernetes admission policy (those never do), and has not turned it off.
    pub fn reaches_template_of(&self, workload: &Workload) -> bool {
        self.pod_templates
            && self.admission.is_none()
            && !self
                .selectors
                .iter()
                .any(|s| s.api_version == workload.api_version && s.kind == workload.kind)
    }
}
