//! References (`dataRef`, `valueRef`): where a value comes from, compiled once and resolved per
//! request through the [`Lookup`] trait.

use std::sync::Arc;

use jsonpath_rust::parser::model::JpQuery;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kanon_api::{ObjectRefer, RefSource, ResourceRefer};
use serde_json::Value;

use crate::error::FieldError;
use crate::lookup::{HttpCall, HttpToken, Lookup, ObjectQuery};
use crate::program::{Program, ProgramKind, ProgramLimits};
use crate::selector::{LabelMatcher, labels_of};

/// Where inside the source the value is.
#[derive(Clone, Debug)]
enum RefPath {
    /// The whole source.
    Whole,
    /// A JSON pointer.
    Pointer(String),
    /// A JSONPath; `single` when it can only ever select one node (no wildcard, filter,
    /// slice, union or descent), so its value is that node rather than a list.
    JsonPath {
        text: String,
        query: Option<Arc<JpQuery>>,
        single: bool,
        /// How a path that selects several nodes reads them as items, when it can.
        items: Option<Items>,
    },
}

/// A JSONPath that selects items and then reads the same field of each
/// (`$.spec.containers[*].resources.limits.memory`): the query up to its last segment that
/// selects several nodes, and the plain steps after it. Such a path gives one value per
/// item, null where the item lacks the field: a standard JSONPath would drop those items, and
/// a condition that every container has a memory limit would never see the container that
/// has none.
#[derive(Clone, Debug)]
struct Items {
    query: Arc<JpQuery>,
    tail: Vec<TailStep>,
}

#[derive(Clone, Debug)]
enum TailStep {
    Key(String),
    Index(usize),
}

impl Items {
    /// The items of `query` and the field each is read at, if the path reads a plain field
    /// (names and non-negative indexes) after its last segment that selects several nodes.
    fn of(query: &JpQuery) -> Option<Items> {
        use jsonpath_rust::parser::model::{Segment, Selector};
        let many = |segment: &Segment| match segment {
            Segment::Descendant(_) => true,
            Segment::Selectors(selectors) => {
                selectors.len() != 1
                    || matches!(
                        selectors[0],
                        Selector::Wildcard | Selector::Slice(..) | Selector::Filter(_)
                    )
            }
            Segment::Selector(s) => {
                matches!(
                    s,
                    Selector::Wildcard | Selector::Slice(..) | Selector::Filter(_)
                )
            }
        };
        let last = query.segments.iter().rposition(many)?;
        let mut tail = Vec::new();
        for segment in &query.segments[last + 1..] {
            let selector = match segment {
                Segment::Selector(s) => s,
                Segment::Selectors(list) if list.len() == 1 => &list[0],
                _ => return None,
            };
            tail.push(match selector {
                Selector::Name(name) => TailStep::Key(name.clone()),
                Selector::Index(i) => TailStep::Index(usize::try_from(*i).ok()?),
                _ => return None,
            });
        }
        Some(Items {
            query: Arc::new(JpQuery::new(query.segments[..=last].to_vec())),
            tail,
        })
    }

    /// The selected items of `source`.
    fn select<'s>(&self, source: &'s Value) -> Result<Vec<&'s Value>, String> {
        Ok(jsonpath_rust::query::js_path_process(&self.query, source)
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|r| r.val())
            .collect())
    }

    /// The field of `item` the path reads, if the item has it.
    fn field<'s>(&self, item: &'s Value) -> Option<&'s Value> {
        self.tail.iter().try_fold(item, |node, step| match step {
            TailStep::Key(k) => node.get(k.as_str()),
            TailStep::Index(i) => node.get(*i),
        })
    }
}

/// A string that may hold `{{ expression }}` placeholders.
#[derive(Clone, Debug)]
enum Text {
    Plain(String),
    Template(Program),
}

/// The most `+` and `*` operators a reference's placeholders may hold. Placeholders run in
/// the evaluating thread (programs may run in a worker process, see [`crate::host`]); the one
/// unbounded operation known in the program runtime needs a list concatenated 33 levels deep,
/// which an expression without statements reaches only with 33 operators.
pub const MAX_PLACEHOLDER_OPERATORS: usize = 16;

/// Why `text` is not a valid run of `{{ expression }}` placeholders, if it is not.
fn placeholder_problem(text: &str) -> Option<String> {
    if text.contains("{%") {
        return Some(
            "statements (`{% ... %}`) are not allowed in a reference; a placeholder is one \
             `{{ expression }}` (compute more in the rule's program)"
                .to_string(),
        );
    }
    let mut operators = 0;
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let inside = &rest[start + 2..];
        let end = inside.find("}}").unwrap_or(inside.len());
        let mut quote: Option<char> = None;
        let mut escaped = false;
        for c in inside[..end].chars() {
            match quote {
                Some(q) => {
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == q {
                        quote = None;
                    }
                }
                None if c == '"' || c == '\'' => quote = Some(c),
                None if c == '+' || c == '*' => operators += 1,
                None => {}
            }
        }
        rest = &inside[end..];
    }
    (operators > MAX_PLACEHOLDER_OPERATORS).then(|| {
        format!(
            "the placeholders hold {operators} `+` and `*` operators; the limit is \
             {MAX_PLACEHOLDER_OPERATORS} (compute more in the rule's program)"
        )
    })
}

impl Text {
    fn compile(text: &str, field: String, errors: &mut Vec<FieldError>) -> Text {
        if !text.contains("{{") && !text.contains("{%") {
            return Text::Plain(text.to_string());
        }
        if let Some(problem) = placeholder_problem(text) {
            errors.push(FieldError::new(field, format!("placeholder: {problem}")));
            return Text::Plain(text.to_string());
        }
        match Program::compile(text, ProgramKind::Validate, ProgramLimits::default()) {
            Ok(p) => Text::Template(p),
            Err(e) => {
                errors.push(FieldError::new(
                    field,
                    format!("placeholder: {}", e.message),
                ));
                Text::Plain(text.to_string())
            }
        }
    }

    fn render(&self, context: &minijinja::Value) -> Result<String, String> {
        match self {
            Text::Plain(s) => Ok(s.clone()),
            Text::Template(p) => p
                .render(context)
                .map(|s| s.trim().to_string())
                .map_err(|e| e.message),
        }
    }
}

/// A label selector whose values may hold `{{ }}` placeholders: compiled once when it has
/// none, else rendered and compiled per request.
#[derive(Clone, Debug)]
enum SelectorTarget {
    Fixed(LabelMatcher),
    Templated {
        match_labels: Vec<(String, Text)>,
        match_expressions: Vec<(String, String, Vec<Text>)>,
    },
}

/// A compiled `k8s` reference target.
#[derive(Clone, Debug)]
struct ObjectTarget {
    api_version: Text,
    kind: Text,
    namespace: Option<Text>,
    name: Option<Text>,
    selector: Option<SelectorTarget>,
}

/// A JSON body of an `http` reference: a constant, or a string with placeholders whose
/// rendering is parsed as JSON (`"{{ object | tojson }}"`).
#[derive(Clone, Debug)]
enum HttpBody {
    Json(Value),
    Template(Text),
}

/// A compiled `http` reference target.
#[derive(Clone, Debug)]
struct HttpTarget {
    method: kanon_api::HttpMethod,
    url: Text,
    params: Vec<(String, Text)>,
    headers: Vec<(String, Text)>,
    body: Option<HttpBody>,
    token: Option<HttpToken>,
    timeout: Option<std::time::Duration>,
}

/// What a `k8s` or `http` reference reads.
#[derive(Clone, Debug)]
enum Target {
    Object(ObjectTarget),
    Http(HttpTarget),
}

/// A compiled reference.
#[derive(Clone, Debug)]
pub struct CompiledRef {
    source: RefSource,
    path: RefPath,
    target: Option<Target>,
    field: String,
    /// The namespace of a namespaced policy, whose `k8s` references may read objects only in
    /// that namespace (and cluster-scoped ones).
    own_namespace: Option<String>,
    /// A JSONPath through items gives one value per item, null where the item lacks the field
    /// (see [`Items`]): for the value a condition tests, whose quantifier must see every item.
    per_item: bool,
}

/// What a reference is resolved against.
pub struct RefScope<'a> {
    /// The object under test.
    pub object: &'a Value,
    /// The previous object, if any.
    pub old_object: Option<&'a Value>,
    /// The object's namespace.
    pub namespace: Option<&'a str>,
    /// Cluster objects and HTTP services.
    pub lookup: &'a dyn Lookup,
    /// The policy the reference belongs to (`Kind/name`), on whose behalf lookups are made.
    pub policy: &'a str,
    /// The program context, for `{{ }}` placeholders; needed only when some reference
    /// [`CompiledRef::needs_context`].
    pub context: Option<&'a minijinja::Value>,
}

impl RefScope<'_> {
    /// `text` with its placeholders rendered against the program context; an error names the
    /// field `at.what`.
    fn render(&self, text: &Text, at: &str, what: &str) -> Result<String, String> {
        let empty = minijinja::Value::UNDEFINED;
        text.render(self.context.unwrap_or(&empty))
            .map_err(|e| format!("{at}.{what}: {e}"))
    }
}

pub use crate::jsonpath::{MAX_JSONPATH_BYTES, MAX_JSONPATH_NESTING, parse_jsonpath};

/// Whether a reference `path` is a JSONPath that may select several nodes (a wildcard,
/// filter, slice, union or descent): its value is then the list of the nodes it selects.
pub fn selects_many(path: Option<&str>) -> bool {
    path.is_some_and(|p| {
        p.starts_with('$') && (p.contains(['*', '?', ':', ',']) || p.contains(".."))
    })
}

fn compile_path(path: Option<&str>, field: &str, errors: &mut Vec<FieldError>) -> RefPath {
    let Some(path) = path.filter(|p| !p.is_empty()) else {
        return RefPath::Whole;
    };
    if path.starts_with('$') {
        // Parsed once, here; a path that does not parse makes the policy invalid.
        let query = match parse_jsonpath(path) {
            Ok(q) => Some(Arc::new(q)),
            Err(e) => {
                errors.push(FieldError::new(
                    format!("{field}.path"),
                    format!("`{path}` is not a JSONPath: {e}"),
                ));
                None
            }
        };
        let single = !selects_many(Some(path));
        let items = query.as_deref().filter(|_| !single).and_then(Items::of);
        return RefPath::JsonPath {
            text: path.to_string(),
            query,
            single,
            items,
        };
    }
    if let Err(e) = crate::pointer::check(path) {
        errors.push(FieldError::new(
            format!("{field}.path"),
            format!("{e} (or a JSONPath starting with `$`)"),
        ));
    }
    RefPath::Pointer(path.to_string())
}

impl CompiledRef {
    /// Compiles a reference of a policy (`own_namespace`: the namespace of a namespaced
    /// policy); problems go to `errors` under `field`.
    pub fn compile(
        r: &ResourceRefer,
        field: &str,
        own_namespace: Option<&str>,
        errors: &mut Vec<FieldError>,
    ) -> CompiledRef {
        let path = compile_path(r.path.as_deref(), field, errors);
        let mut target = None;
        match r.from {
            RefSource::K8s => match &r.k8s {
                Some(k) => {
                    target = Some(Target::Object(compile_target(
                        k,
                        &format!("{field}.k8s"),
                        own_namespace,
                        errors,
                    )))
                }
                None => errors.push(FieldError::new(
                    format!("{field}.k8s"),
                    "is required for from: k8s",
                )),
            },
            RefSource::Http => match &r.http {
                Some(h) if h.url.is_empty() => errors.push(FieldError::new(
                    format!("{field}.http.url"),
                    "must not be empty",
                )),
                Some(h) => {
                    target = Some(Target::Http(compile_http(
                        h,
                        &format!("{field}.http"),
                        own_namespace,
                        errors,
                    )))
                }
                None => errors.push(FieldError::new(
                    format!("{field}.http"),
                    "is required for from: http",
                )),
            },
            _ => {}
        }
        if r.from != RefSource::K8s && r.k8s.is_some() {
            errors.push(FieldError::new(
                format!("{field}.k8s"),
                "is only used with from: k8s",
            ));
        }
        if r.from != RefSource::Http && r.http.is_some() {
            errors.push(FieldError::new(
                format!("{field}.http"),
                "is only used with from: http",
            ));
        }
        CompiledRef {
            source: r.from,
            path,
            target,
            field: field.to_string(),
            own_namespace: own_namespace.map(str::to_string),
            per_item: false,
        }
    }

    /// The reference, resolving a JSONPath through items (`$.spec.containers[*].image`) to one
    /// value per item, null where an item lacks the field, instead of dropping that item.
    pub fn per_item(mut self) -> Self {
        self.per_item = true;
        self
    }

    /// Whether resolving needs the program context (for `{{ }}` placeholders).
    pub fn needs_context(&self) -> bool {
        matches!(self.source, RefSource::K8s | RefSource::Http)
    }

    /// Resolves the value: `Ok(None)` when the source or the path holds nothing (a missing
    /// owner reference, an absent field, a label selector or a JSONPath that selects nothing);
    /// an error when a lookup fails or an object named by a reference does not exist.
    pub async fn resolve(&self, scope: &RefScope<'_>) -> Result<Option<Value>, String> {
        let at = &self.field;
        // The object and its old version are read in place; looked-up objects are shared.
        let looked_up: Arc<Value>;
        let source: &Value = match self.source {
            RefSource::Current => scope.object,
            RefSource::Old => match scope.old_object {
                Some(o) => o,
                None => return Ok(None),
            },
            RefSource::Owner | RefSource::K8s | RefSource::Http => {
                let found = match self.source {
                    RefSource::Owner => self.owner(scope).await?,
                    RefSource::K8s => self.k8s(scope).await?,
                    _ => Some(self.http(scope).await?),
                };
                match found {
                    Some(o) => {
                        looked_up = o;
                        &looked_up
                    }
                    None => return Ok(None),
                }
            }
        };
        Ok(match &self.path {
            RefPath::Whole => Some(source.clone()),
            RefPath::Pointer(p) => crate::pointer::get(source, p).cloned(),
            RefPath::JsonPath {
                text,
                query,
                single,
                items,
            } => {
                let Some(query) = query else {
                    return Err(format!("{at}.path: `{text}` is not a JSONPath"));
                };
                if let Some(items) = items.as_ref().filter(|_| self.per_item) {
                    let selected = items
                        .select(source)
                        .map_err(|e| format!("{at}.path: {e}"))?;
                    if selected.is_empty() {
                        return Ok(None);
                    }
                    return Ok(Some(Value::Array(
                        selected
                            .into_iter()
                            .map(|item| items.field(item).cloned().unwrap_or(Value::Null))
                            .collect(),
                    )));
                }
                let found: Vec<&Value> = jsonpath_rust::query::js_path_process(query, source)
                    .map_err(|e| format!("{at}.path: {e}"))?
                    .into_iter()
                    .map(|r| r.val())
                    .collect();
                match (single, found.len()) {
                    (_, 0) => None,
                    (true, 1) => Some(found[0].clone()),
                    _ => Some(Value::Array(found.into_iter().cloned().collect())),
                }
            }
        })
    }

    /// The item at `index` of what the reference selects, for a JSONPath that selects items
    /// (see [`Items`]; for `$.spec.containers[*].image` the container, not its image) in the
    /// object or its old version; `None` for other paths and sources.
    pub fn item_at(
        &self,
        object: &Value,
        old_object: Option<&Value>,
        index: usize,
    ) -> Option<Value> {
        let RefPath::JsonPath {
            items: Some(items), ..
        } = &self.path
        else {
            return None;
        };
        let source = match self.source {
            RefSource::Current => object,
            RefSource::Old => old_object?,
            _ => return None,
        };
        items
            .select(source)
            .ok()?
            .get(index)
            .map(|item| (*item).clone())
    }

    /// The query for objects of a type, on behalf of the policy in `scope`.
    fn query<'q>(
        &'q self,
        scope: &RefScope<'q>,
        api_version: &'q str,
        kind: &'q str,
        namespace: Option<&'q str>,
    ) -> ObjectQuery<'q> {
        ObjectQuery {
            api_version,
            kind,
            namespace,
            policy: scope.policy,
            confined_to: self.own_namespace.as_deref(),
        }
    }

    async fn owner(&self, scope: &RefScope<'_>) -> Result<Option<Arc<Value>>, String> {
        let refs = scope
            .object
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array);
        let Some(refs) = refs.filter(|r| !r.is_empty()) else {
            return Ok(None);
        };
        let owner = refs
            .iter()
            .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
            .unwrap_or(&refs[0]);
        let text = |k: &str| owner.get(k).and_then(Value::as_str).unwrap_or_default();
        let (api_version, kind, name) = (text("apiVersion"), text("kind"), text("name"));
        let found = scope
            .lookup
            .get(self.query(scope, api_version, kind, scope.namespace), name)
            .await
            .map_err(|e| format!("{}: {e}", self.field))?;
        // Owners of namespaced objects may be cluster-scoped (e.g. a Node).
        let found = match found {
            Some(o) => Some(o),
            None if scope.namespace.is_some() => scope
                .lookup
                .get(self.query(scope, api_version, kind, None), name)
                .await
                .map_err(|e| format!("{}: {e}", self.field))?,
            None => None,
        };
        match found {
            Some(o) => Ok(Some(o)),
            None => Err(format!(
                "{}: the owner {api_version} {kind} {}{name} was not found",
                self.field,
                scope.namespace.map(|n| format!("{n}/")).unwrap_or_default()
            )),
        }
    }

    /// The referenced object (by name), or the list of objects its label selector matches
    /// (`None` when none does: nothing is there to test).
    async fn k8s(&self, scope: &RefScope<'_>) -> Result<Option<Arc<Value>>, String> {
        let at = format!("{}.k8s", self.field);
        let Some(Target::Object(t)) = &self.target else {
            return Err(format!("{at}: missing"));
        };
        let render = |text: &Text, what: &str| scope.render(text, &at, what);
        let api_version = render(&t.api_version, "apiVersion")?;
        let kind = render(&t.kind, "kind")?;
        let namespace = match &t.namespace {
            Some(n) => Some(render(n, "namespace")?).filter(|n| !n.is_empty()),
            None => None,
        };
        if let (Some(own), Some(ns)) = (&self.own_namespace, &namespace)
            && own != ns
        {
            return Err(format!(
                "{at}.namespace: a namespaced policy reads objects only in its own namespace `{own}`, not `{ns}`"
            ));
        }
        if let Some(name) = &t.name {
            let name = render(name, "name")?;
            let found = scope
                .lookup
                .get(
                    self.query(scope, &api_version, &kind, namespace.as_deref()),
                    &name,
                )
                .await
                .map_err(|e| format!("{at}: {e}"))?;
            return match found {
                Some(object) => Ok(Some(object)),
                None => Err(match &namespace {
                    Some(ns) => format!("{at}: {api_version} {kind} {ns}/{name} was not found"),
                    None => format!(
                        "{at}: {api_version} {kind} {name} was not found (no namespace given: looked up as a cluster-scoped object)"
                    ),
                }),
            };
        }
        let selector = match &t.selector {
            None => LabelMatcher::default(),
            Some(SelectorTarget::Fixed(m)) => m.clone(),
            Some(SelectorTarget::Templated {
                match_labels,
                match_expressions,
            }) => {
                let what = "labelSelector";
                let mut labels = std::collections::BTreeMap::new();
                for (key, value) in match_labels {
                    labels.insert(key.clone(), render(value, what)?);
                }
                let mut expressions = Vec::new();
                for (key, operator, values) in match_expressions {
                    let values = values
                        .iter()
                        .map(|v| render(v, what))
                        .collect::<Result<Vec<_>, _>>()?;
                    expressions.push(LabelSelectorRequirement {
                        key: key.clone(),
                        operator: operator.clone(),
                        values: Some(values),
                    });
                }
                let selector = LabelSelector {
                    match_labels: Some(labels),
                    match_expressions: Some(expressions),
                };
                let mut errors = Vec::new();
                let matcher =
                    LabelMatcher::compile(&selector, &format!("{at}.{what}"), &mut errors);
                if let Some(e) = errors.first() {
                    return Err(e.to_string());
                }
                matcher
            }
        };
        let listed = scope
            .lookup
            .list(self.query(scope, &api_version, &kind, namespace.as_deref()))
            .await
            .map_err(|e| format!("{at}: {e}"))?;
        let items: Vec<Value> = listed
            .into_iter()
            .filter(|o| selector.matches(labels_of(o)))
            // A namespaced policy listing without a namespace sees cluster-scoped objects
            // and those of its own namespace, never another namespace's.
            .filter(|o| match &self.own_namespace {
                None => true,
                Some(own) => o
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .is_none_or(|ns| ns.is_empty() || ns == own),
            })
            .map(|o| (*o).clone())
            .collect();
        Ok((!items.is_empty()).then(|| Arc::new(Value::Array(items))))
    }

    /// The answer of the HTTP service as `{status, header, body}`; a status outside 2xx, or
    /// a body that is not JSON, is an error.
    async fn http(&self, scope: &RefScope<'_>) -> Result<Arc<Value>, String> {
        let at = format!("{}.http", self.field);
        let Some(Target::Http(t)) = &self.target else {
            return Err(format!("{at}: missing"));
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
                Some(serde_json::from_str(&rendered).map_err(|e| {
                    format!("{at}.body: the rendered body is not JSON ({e}): {rendered}")
                })?)
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
            .map_err(|e| format!("{at}: {e}"))?;
        if !(200..300).contains(&answer.status) {
            let text = String::from_utf8_lossy(&answer.body);
            let shown: String = text.chars().take(200).collect();
            return Err(format!(
                "{at}: {} answered HTTP {}: {shown}",
                call.url, answer.status
            ));
        }
        let body: Value = if answer.body.iter().all(u8::is_ascii_whitespace) {
            Value::Null
        } else {
            serde_json::from_slice(&answer.body).map_err(|e| {
                format!(
                    "{at}: {} answered with a body that is not JSON: {e}",
                    call.url
                )
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

fn compile_http(
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

fn compile_target(
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
