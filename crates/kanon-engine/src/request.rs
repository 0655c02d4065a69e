//! The engine's view of one admission request, built from an AdmissionReview or from files.

use std::borrow::Cow;

use kanon_api::Operation;
use serde_json::Value;

use crate::selector::ObjectView;

/// A request that cannot be evaluated, with what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The AdmissionReview is malformed.
    #[error("invalid AdmissionReview: {0}")]
    Review(String),
    /// The object lacks a field needed to identify it.
    #[error("the object has no {0}")]
    MissingField(&'static str),
    /// The operation needs an object that was not given.
    #[error("{operation} needs {what}")]
    MissingObject {
        /// The operation.
        operation: Operation,
        /// `an object` or `an old object`.
        what: &'static str,
    },
    /// `*` or an unknown string where a concrete operation is needed.
    #[error("unknown operation `{0}`; use CREATE, UPDATE, DELETE or CONNECT")]
    Operation(String),
}

/// One admission request as the engine sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The request uid (echoed in responses); empty offline.
    pub uid: String,
    /// The operation.
    pub operation: Operation,
    /// The object's `apiVersion` (from the object, else from the review's `kind`).
    pub api_version: String,
    /// The object's `kind`.
    pub kind: String,
    /// The object's namespace (from the object, else from the request); `None` when
    /// cluster-scoped.
    pub namespace: Option<String>,
    /// The object's name (empty when created with `generateName`).
    pub name: String,
    /// The object as sent (CREATE, UPDATE; CONNECT options); `None` on DELETE.
    pub object: Option<Value>,
    /// The previous object (UPDATE, DELETE).
    pub old_object: Option<Value>,
    /// Whether the request is a dry run.
    pub dry_run: bool,
    /// What programs see as `request`: uid, kind, resource, subResource, name, namespace,
    /// operation, userInfo, dryRun (from the AdmissionReview, or made up offline).
    pub info: Value,
    /// When the caller stops waiting (kube-apiserver's `?timeout=`); policies not yet run by
    /// then fail under their own failure policy. `None`: no deadline. Read by
    /// [`PolicySet::mutate`](crate::PolicySet::mutate) and its siblings, which evaluate over a
    /// lookup alone; their `_in` forms take the deadline of their
    /// [`Evaluation`](crate::Evaluation) instead.
    pub deadline: Option<Deadline>,
    /// The built-in kind's schema, looked up once for all the policies that need it.
    builtin: Derived<Option<Builtin>>,
    /// The resource as `info` names it, read once for all the admission policies that match
    /// on it.
    resource: Derived<ResourceNames>,
    /// The request is a workload's Pod template seen as a Pod ([`Request::for_pod_template`]):
    /// it is defaulted as the template it is, without what only a Pod gets.
    pod_template: bool,
    /// Whether the kind's defaulting runs after each mutation, as in kube-apiserver
    /// ([`Request::without_defaults`] turns it off).
    defaults: bool,
    /// Whether the object came already defaulted ([`Request::defaulted_on_arrival`]).
    arrived_defaulted: bool,
    /// What of the object and old object was decoded, when not all ([`Request::read_through`]).
    read: Option<std::sync::Arc<crate::projection::Projection>>,
}

/// A value found on first use from a request's other fields (its kind's schema, the resource
/// `info` names), so never a difference of its own.
#[derive(Debug, Clone, Default)]
struct Derived<T>(std::sync::OnceLock<T>);

impl<T> PartialEq for Derived<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// The group, version, resource and subresource a request is for.
#[derive(Debug, Clone, Default)]
pub(crate) struct ResourceNames {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) resource: String,
    pub(crate) sub_resource: String,
}

/// The schema and root type of a request's kind when it is a built-in one, with its Go facts
/// when they are known.
type Builtin = (
    &'static kanon_schema::Schema,
    &'static kanon_schema::Type,
    Option<crate::typed::Typed<'static>>,
);

/// A deadline the caller keeps: the engine asks whether it has passed, and never reads a clock
/// itself.
#[derive(Clone)]
pub struct Deadline(std::sync::Arc<dyn Fn() -> bool + Send + Sync>);

impl Deadline {
    /// A deadline that has passed when `passed` says so.
    pub fn new(passed: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        Deadline(std::sync::Arc::new(passed))
    }

    /// Whether the deadline has passed.
    pub fn passed(&self) -> bool {
        (self.0)()
    }
}

impl std::fmt::Debug for Deadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Deadline")
    }
}

impl PartialEq for Deadline {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Parses an operation name (`CREATE`, `UPDATE`, `DELETE`, `CONNECT`; any case).
pub fn parse_operation(text: &str) -> Result<Operation, RequestError> {
    match text.to_ascii_uppercase().as_str() {
        "CREATE" => Ok(Operation::Create),
        "UPDATE" => Ok(Operation::Update),
        "DELETE" => Ok(Operation::Delete),
        "CONNECT" => Ok(Operation::Connect),
        _ => Err(RequestError::Operation(text.to_string())),
    }
}

/// The `request` variable offline: what an AdmissionReview would carry, without a user.
fn offline_info(
    operation: Operation,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Value {
    let (group, version) = group_version(api_version);
    let resource = resource_of(api_version, kind);
    let mut info = serde_json::json!({
        "uid": "",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": name,
        "operation": operation.as_str(),
        "userInfo": {},
        "dryRun": false,
    });
    if let Some(ns) = namespace {
        info["namespace"] = Value::String(ns.to_string());
    }
    info
}

pub(crate) use kanon_schema::group_version;

/// The plural resource a kind is served as: from Kubernetes' schema for built-in kinds, else
/// guessed as the apiserver's own `UnsafeGuessKindToResource` does (`Policy` → `policies`).
fn resource_of(api_version: &str, kind: &str) -> String {
    // The embedded schema is loaded once, by kanon-schema.
    let known = kanon_schema::Schema::builtin()
        .ok()
        .and_then(|schema| schema.kind(api_version, kind))
        .map(|known| known.resource.clone());
    if let Some(resource) = known {
        return resource;
    }
    let lower = kind.to_ascii_lowercase();
    if lower.is_empty() {
        return lower;
    }
    if lower.ends_with('s') {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y') {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    }
}

fn text_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    crate::pointer::find(value, pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

impl Request {
    /// The embedded schema and the root type of the request's kind (`api_version`, `kind`, as
    /// they were when first asked), when it is a built-in kind.
    pub(crate) fn builtin_kind(
        &self,
    ) -> Option<(&'static kanon_schema::Schema, &'static kanon_schema::Type)> {
        self.builtin_facts().map(|(schema, root, _)| (schema, root))
    }

    /// The request's kind with its Go facts, when it is a built-in kind that has them: what
    /// the apiserver's decoding into the kind's Go type checks and writes back.
    pub(crate) fn typed(&self) -> Option<crate::typed::Typed<'static>> {
        self.builtin_facts().and_then(|(_, _, typed)| typed)
    }

    /// The resource the request is for, as `info` names it (from the kind where it does not):
    /// read once, so `info` is not to change after the first read.
    pub(crate) fn resource_names(&self) -> &ResourceNames {
        self.resource.0.get_or_init(|| {
            let text = |value: Option<&Value>, key: &str| {
                value
                    .and_then(|value| value.get(key))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            };
            let resource = self.info.get("resource");
            let (group, version) = group_version(&self.api_version);
            ResourceNames {
                group: text(resource, "group").unwrap_or_else(|| group.to_owned()),
                version: text(resource, "version").unwrap_or_else(|| version.to_owned()),
                resource: text(resource, "resource").unwrap_or_default(),
                sub_resource: text(Some(&self.info), "subResource").unwrap_or_default(),
            }
        })
    }

    /// Whether [`Request::default_object`] does anything: a built-in kind with Go facts, and
    /// defaults not turned off.
    pub(crate) fn defaults_objects(&self) -> bool {
        self.defaults && self.typed().is_some()
    }

    /// Defaults `object` (this request's kind) as the apiserver defaults the kind; a workload's
    /// template seen as a Pod gets only what a template gets. Nothing for kinds without Go facts.
    pub(crate) fn default_object(&self, object: &mut Value) {
        if !self.defaults {
            return;
        }
        if let Some(typed) = self.typed() {
            typed.default_object(object, self.pod_template);
        }
    }

    fn builtin_facts(&self) -> Option<Builtin> {
        *self.builtin.0.get_or_init(|| {
            let schema = kanon_schema::Schema::builtin().ok()?;
            let kind = schema.kind(&self.api_version, &self.kind)?;
            let typed = crate::typed::Typed::builtin(&self.api_version, &self.kind);
            Some((schema, schema.root_type(kind)?, typed))
        })
    }

    /// A request for `object` (CREATE, UPDATE, CONNECT) or `old_object` (DELETE), identified
    /// by the object's own `apiVersion`, `kind`, namespace and name.
    pub fn from_objects(
        operation: Operation,
        object: Option<Value>,
        old_object: Option<Value>,
    ) -> Result<Self, RequestError> {
        if operation == Operation::All {
            return Err(RequestError::Operation("*".into()));
        }
        let subject = match operation {
            Operation::Delete => {
                old_object
                    .as_ref()
                    .or(object.as_ref())
                    .ok_or(RequestError::MissingObject {
                        operation,
                        what: "the object being deleted",
                    })?
            }
            _ => object.as_ref().ok_or(RequestError::MissingObject {
                operation,
                what: "an object",
            })?,
        };
        if operation == Operation::Update && old_object.is_none() {
            return Err(RequestError::MissingObject {
                operation,
                what: "an old object",
            });
        }
        let api_version = text_at(subject, "/apiVersion")
            .ok_or(RequestError::MissingField("apiVersion"))?
            .to_string();
        let kind = text_at(subject, "/kind")
            .ok_or(RequestError::MissingField("kind"))?
            .to_string();
        let name = text_at(subject, "/metadata/name")
            .unwrap_or_default()
            .to_string();
        let namespace = text_at(subject, "/metadata/namespace").map(str::to_string);
        // On DELETE the object under test is the old object; CREATE and CONNECT have none, as
        // from kube-apiserver, even when one is at hand.
        let (object, old_object) = match operation {
            Operation::Delete => (None, old_object.or(object)),
            Operation::Update => (object, old_object),
            _ => (object, None),
        };
        let info = offline_info(operation, &api_version, &kind, namespace.as_deref(), &name);
        Ok(Request {
            uid: String::new(),
            operation,
            api_version,
            kind,
            namespace,
            name,
            object,
            old_object,
            dry_run: false,
            info,
            deadline: None,
            builtin: Derived::default(),
            resource: Derived::default(),
            pod_template: false,
            defaults: true,
            arrived_defaulted: false,
            read: None,
        })
    }

    /// Reads an `admission.k8s.io/v1` AdmissionReview's `request`. The object's type comes
    /// from the object, else from `request.kind`; its namespace from the object, else from
    /// `request.namespace`.
    pub fn from_admission_review(review: &Value) -> Result<Self, RequestError> {
        Self::from_admission_review_owned(review.clone())
    }

    /// As [`Request::from_admission_review`], moving the objects and the request's fields out
    /// of `review` instead of copying them (what a server does with a body it has just parsed).
    pub fn from_admission_review_owned(mut review: Value) -> Result<Self, RequestError> {
        let mut take = |key: &str| crate::pointer::find_mut(&mut review, key).map(Value::take);
        let (object, old_object) = (take("/request/object"), take("/request/oldObject"));
        Self::from_review_parts(review, object, old_object)
    }

    /// The fields of an AdmissionReview's request programs see as `request`, in the order of
    /// kube-apiserver's `AdmissionRequest` (its object and old object are the policy's own).
    const REQUEST_FIELDS: [&str; 13] = [
        "uid",
        "kind",
        "resource",
        "subResource",
        "requestKind",
        "requestResource",
        "requestSubResource",
        "name",
        "namespace",
        "operation",
        "userInfo",
        "dryRun",
        "options",
    ];

    fn from_review_parts(
        mut review: Value,
        object: Option<Value>,
        old_object: Option<Value>,
    ) -> Result<Self, RequestError> {
        let bad = |m: &str| RequestError::Review(m.to_string());
        let Some(map) = review.as_object() else {
            return Err(bad("the body is not a JSON object"));
        };
        match (
            map.get("apiVersion").and_then(Value::as_str),
            map.get("kind").and_then(Value::as_str),
        ) {
            (Some("admission.k8s.io/v1"), Some("AdmissionReview")) => {}
            (api_version, kind) => {
                return Err(RequestError::Review(format!(
                    "expected apiVersion admission.k8s.io/v1 and kind AdmissionReview, found {} and {}",
                    api_version.unwrap_or("no apiVersion"),
                    kind.unwrap_or("no kind")
                )));
            }
        }
        let request = map
            .get("request")
            .filter(|r| r.is_object())
            .ok_or_else(|| bad("`request` is missing"))?;
        let uid = text_at(request, "/uid")
            .ok_or_else(|| bad("`request.uid` is missing"))?
            .to_string();
        let operation = parse_operation(
            text_at(request, "/operation").ok_or_else(|| bad("`request.operation` is missing"))?,
        )
        .map_err(|e| RequestError::Review(format!("request.operation: {e}")))?;
        let object = object.filter(|v| !v.is_null());
        let old_object = old_object.filter(|v| !v.is_null());
        let subject = match operation {
            Operation::Delete => old_object.as_ref(),
            _ => object.as_ref(),
        };
        let subject = match (subject, operation) {
            (Some(s), _) => s,
            (None, Operation::Create | Operation::Update) => {
                return Err(RequestError::Review(format!(
                    "{operation} request has no `request.object`"
                )));
            }
            // DELETE with no old object (some apiservers omit it) or CONNECT: judge the request
            // by its identity alone.
            (None, _) => &Value::Null,
        };
        if !subject.is_null() && !subject.is_object() {
            return Err(bad("the object is not a JSON object"));
        }
        if operation == Operation::Update && old_object.is_none() {
            return Err(bad("UPDATE request has no `request.oldObject`"));
        }
        let group = text_at(request, "/kind/group").unwrap_or_default();
        let version = text_at(request, "/kind/version");
        let review_api_version = version.map(|v| {
            if group.is_empty() {
                v.to_string()
            } else {
                format!("{group}/{v}")
            }
        });
        let api_version = text_at(subject, "/apiVersion")
            .map(str::to_string)
            .or(review_api_version)
            .ok_or_else(|| bad("neither the object nor `request.kind` gives an apiVersion"))?;
        let kind = text_at(subject, "/kind")
            .or_else(|| text_at(request, "/kind/kind"))
            .ok_or_else(|| bad("neither the object nor `request.kind` gives a kind"))?
            .to_string();
        // A Namespace is cluster-scoped, although the apiserver (since Kubernetes 1.20) names
        // it as its own namespace in `request.namespace`.
        let is_namespace = api_version == "v1" && kind == "Namespace";
        let namespace = text_at(subject, "/metadata/namespace")
            .or_else(|| text_at(request, "/namespace").filter(|_| !is_namespace))
            .map(str::to_string);
        let name = text_at(subject, "/metadata/name")
            .or_else(|| text_at(request, "/name"))
            .unwrap_or_default()
            .to_string();
        let dry_run = request
            .get("dryRun")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        // What programs see as `request`, moved out of the review (read above, not needed again).
        let Some(request) = review.get_mut("request").and_then(Value::as_object_mut) else {
            return Err(bad("`request` is missing"));
        };
        // The request's own map is kept (its fields rehashed into a new map cost more than the
        // rest of this function); kube-apiserver writes them in `REQUEST_FIELDS`' order, which
        // a review written otherwise is put in.
        let mut info = std::mem::take(request);
        // One pass: each field kept is found once among the known, and its place checked.
        let (mut last, mut in_order) = (0, true);
        info.retain(|key, value| {
            let place = Self::REQUEST_FIELDS.iter().position(|field| field == key);
            match place.filter(|_| !value.is_null()) {
                Some(place) => {
                    in_order &= place >= last;
                    last = place;
                    true
                }
                None => false,
            }
        });
        if !in_order {
            let mut ordered = serde_json::Map::new();
            for field in Self::REQUEST_FIELDS {
                if let Some(value) = info.remove(field) {
                    ordered.insert(field.to_owned(), value);
                }
            }
            info = ordered;
        }
        let info = Value::Object(info);
        let (object, old_object) = match operation {
            Operation::Delete => (None, old_object),
            _ => (object, old_object),
        };
        Ok(Request {
            uid,
            operation,
            api_version,
            kind,
            namespace,
            name,
            object,
            old_object,
            dry_run,
            info,
            deadline: None,
            builtin: Derived::default(),
            resource: Derived::default(),
            pod_template: false,
            defaults: true,
            arrived_defaulted: false,
            read: None,
        })
    }

    /// This request as a Pod policy sees it for a workload's pod template: `pod` and `old` as
    /// the object and old object, of kind `v1` Pod, with the workload's namespace, name,
    /// operation, `request` fields and deadline.
    pub(crate) fn for_pod_template(&self, pod: Value, old: Option<Value>) -> Request {
        Request {
            uid: self.uid.clone(),
            operation: self.operation,
            api_version: "v1".to_string(),
            kind: "Pod".to_string(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            object: Some(pod),
            old_object: old,
            dry_run: self.dry_run,
            info: self.info.clone(),
            deadline: self.deadline.clone(),
            builtin: Derived::default(),
            resource: Derived::default(),
            pod_template: true,
            defaults: self.defaults,
            // A Pod made of a template is defaulted whole once, to be sure.
            arrived_defaulted: false,
            read: None,
        }
    }

    /// Marks the object as one kube-apiserver has defaulted, as every object a webhook
    /// receives is (the apiserver decodes it into its Go type, defaults and all, before
    /// admission and again after each mutation): a CEL mutation of a built-in kind that changes
    /// only labels or annotations then needs no defaulting after it, and an apply configuration
    /// is merged where it reaches. For reviews, not for bare objects from files, which may
    /// leave out what the apiserver would fill in.
    pub fn defaulted_on_arrival(mut self) -> Self {
        self.arrived_defaulted = true;
        self
    }

    /// Marks the object and old object as decoded only as far as `projection` keeps (what
    /// [`PolicySet::object_read`](crate::PolicySet::object_read) said the policies read): a
    /// mutation that reaches beyond it makes [`PolicySet::mutate_patch`](crate::PolicySet::mutate_patch)
    /// answer [`Decision::beyond_reading`](crate::Decision::beyond_reading), and the review must
    /// be read whole and decided again.
    pub fn read_through(
        mut self,
        projection: std::sync::Arc<crate::projection::Projection>,
    ) -> Self {
        self.read = Some(projection);
        self
    }

    /// What of the object was decoded, when not all of it ([`Request::read_through`]).
    pub fn projection(&self) -> Option<&std::sync::Arc<crate::projection::Projection>> {
        self.read.as_ref()
    }

    /// Whether the object came already defaulted ([`Request::defaulted_on_arrival`]).
    pub(crate) fn arrived_defaulted(&self) -> bool {
        self.arrived_defaulted
    }

    /// The request without kube-apiserver's defaulting after each mutation: objects are
    /// judged and mutated as written (`kanon apply --no-defaults`).
    pub fn without_defaults(mut self) -> Self {
        self.defaults = false;
        self
    }

    /// The object under test: the old object on DELETE, else the object.
    pub fn subject(&self) -> Option<&Value> {
        match self.operation {
            Operation::Delete => self.old_object.as_ref(),
            _ => self.object.as_ref(),
        }
    }

    /// The selectors' view of `object` (which may be the subject or a mutated copy of it).
    pub fn view<'a>(&'a self, object: &'a Value) -> ObjectView<'a> {
        ObjectView {
            api_version: &self.api_version,
            kind: &self.kind,
            namespace: self.namespace.as_deref(),
            name: &self.name,
            object,
        }
    }

    /// `object` with the `apiVersion`, `kind` and (when `namespaced`) namespace this request
    /// gives it, where the object itself leaves them out (kube-apiserver may send an object
    /// without them); borrowed when nothing is missing.
    pub fn with_identity<'a>(&self, object: &'a Value, namespaced: bool) -> Cow<'a, Value> {
        if self.identity_complete(object, namespaced) {
            return Cow::Borrowed(object);
        }
        Cow::Owned(self.identify(object.clone(), namespaced))
    }

    /// [`Request::with_identity`] of an object the caller owns.
    pub fn identify(&self, mut object: Value, namespaced: bool) -> Value {
        let namespace_missing = namespaced
            && self.namespace.is_some()
            && object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty);
        let Some(map) = object.as_object_mut() else {
            return object;
        };
        for (key, value) in [("apiVersion", &self.api_version), ("kind", &self.kind)] {
            if map
                .get(key)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                map.insert(key.to_string(), Value::String(value.clone()));
            }
        }
        if let (true, Some(namespace)) = (namespace_missing, &self.namespace) {
            let metadata = map
                .entry("metadata")
                .or_insert_with(|| Value::Object(Default::default()));
            if let Some(metadata) = metadata.as_object_mut() {
                metadata.insert("namespace".to_string(), Value::String(namespace.clone()));
            }
        }
        object
    }

    fn identity_complete(&self, object: &Value, namespaced: bool) -> bool {
        let present =
            |value: Option<&Value>| value.and_then(Value::as_str).is_some_and(|s| !s.is_empty());
        present(object.get("apiVersion"))
            && present(object.get("kind"))
            && !(namespaced
                && self.namespace.is_some()
                && !present(object.pointer("/metadata/namespace")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn review(object: Value, namespace: Option<&str>) -> Request {
        let mut request = json!({
            "uid": "u", "operation": "CREATE",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "settings", "object": object,
        });
        if let Some(namespace) = namespace {
            request["namespace"] = json!(namespace);
        }
        Request::from_admission_review(&json!({"apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview", "request": request}))
        .expect("a review")
    }

    #[test]
    fn an_object_gets_the_type_and_namespace_of_its_review_only_where_it_lacks_them() {
        let bare = json!({"metadata": {"name": "settings"}, "data": {"a": "1"}});
        let request = review(bare.clone(), Some("shop"));
        let filled = request.with_identity(&bare, true);
        assert!(matches!(filled, Cow::Owned(_)));
        assert_eq!(
            *filled,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "settings", "namespace": "shop"}, "data": {"a": "1"}})
        );
        // Cluster-scoped: no namespace added.
        assert_eq!(
            request.identify(bare.clone(), false),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "settings"}, "data": {"a": "1"}})
        );
        // Complete already: borrowed, as it was.
        let whole = json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "settings", "namespace": "other"}});
        assert!(matches!(
            request.with_identity(&whole, true),
            Cow::Borrowed(_)
        ));
        // Not an object: left alone.
        assert_eq!(request.identify(json!("text"), true), json!("text"));
    }

    /// `request` as programs see it: the request's known fields that are not null, in
    /// kube-apiserver's order whatever order the review wrote them in.
    #[test]
    fn programs_see_the_known_request_fields_in_the_apiservers_order() {
        let fields = |review: Value| -> Vec<String> {
            let request = Request::from_admission_review_owned(review).expect("a review");
            let info = request.info.as_object().expect("a map");
            info.keys().cloned().collect()
        };
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let in_order = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "name": "c", "namespace": null, "operation": "CREATE",
                "userInfo": {"username": "u"}, "object": object, "oldObject": null,
                "dryRun": false, "unknown": 1}});
        assert_eq!(
            fields(in_order),
            ["uid", "kind", "name", "operation", "userInfo", "dryRun"]
        );
        let shuffled = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"dryRun": true, "object": object, "operation": "CREATE", "uid": "u",
                "options": {"kind": "CreateOptions"}, "kind": {"group": "", "version": "v1",
                "kind": "ConfigMap"}}});
        assert_eq!(
            fields(shuffled.clone()),
            ["uid", "kind", "operation", "dryRun", "options"]
        );
        let request = Request::from_admission_review_owned(shuffled).expect("a review");
        assert_eq!(request.info["dryRun"], json!(true));
        assert_eq!(request.info["options"], json!({"kind": "CreateOptions"}));
    }
}
