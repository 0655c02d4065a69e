//! OpenReports reports (`openreports.io/v1alpha1`): where kanon writes the results of its audits.
//!
//! Two kinds, of the same shape: [`Report`] (namespaced, the results for objects of its
//! namespace) and [`ClusterReport`] (cluster-scoped, for cluster-scoped objects). The API is
//! OpenReports' (<https://github.com/openreports/reports-api>), shared with other producers
//! (Kyverno, scanners), so these types follow its wire format exactly:
//!
//! - there is no `spec`: `source`, `scope`, `scopeSelector`, `configuration`, `summary` and
//!   `results` sit beside `metadata`;
//! - the CRDs generated from these types ([`crate::report_crds`]) accept every object that
//!   OpenReports' own CRDs accept and the other way round (only `results[].policy` and the
//!   `seconds`/`nanos` of a timestamp are required), so kanon may write into CRDs another
//!   producer installed, and they into kanon's.
//!
//! Reading other producers' reports works too: every field is optional on the way in, and
//! what Go writes for "unset" (`source: ""`, `summary` with zeros) reads as unset.
//!
//! The objects serialize with their `apiVersion` and `kind`, and implement [`kube::Resource`],
//! so `kube::Api<Report>` and server-side apply work with them directly.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceValidation,
    JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::core::dynamic::ApiResource;
use kube::core::{ClusterResourceScope, NamespaceResourceScope};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize, Serializer};

/// API group of the OpenReports kinds.
pub const REPORT_GROUP: &str = "openreports.io";
/// The served (and stored) version of the OpenReports kinds.
pub const REPORT_VERSION: &str = "v1alpha1";
/// `apiVersion` of [`Report`] and [`ClusterReport`] objects.
pub const REPORT_API_VERSION: &str = "openreports.io/v1alpha1";
/// `kind` of a [`Report`].
pub const REPORT_KIND: &str = "Report";
/// `kind` of a [`ClusterReport`].
pub const CLUSTER_REPORT_KIND: &str = "ClusterReport";

/// `ALL`, `as_str`, `Display` and `FromStr` of an enum that reports write as lower-case words;
/// parsing takes any case and ignores surrounding blanks (annotations are written by hand).
macro_rules! report_words {
    ($name:ident, $what:literal, $all:literal, $($variant:ident => $word:literal),+ $(,)?) => {
        impl $name {
            #[doc = $all]
            pub const ALL: [$name; [$($word),+].len()] = [$($name::$variant),+];

            /// The word a report writes (`fail`, `high`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word),+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = ParseReportEnumError;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                let trimmed = text.trim();
                Self::ALL
                    .into_iter()
                    .find(|s| s.as_str().eq_ignore_ascii_case(trimmed))
                    .ok_or_else(|| ParseReportEnumError {
                        what: $what,
                        accepted: &[$($word),+],
                        value: text.to_string(),
                    })
            }
        }
    };
}

/// The outcome of one policy (or rule) for the objects a [`ReportResult`] names.
///
/// Also the values of [`ReportLimits::status_filter`]. Written in lower case (`pass`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
#[schemars(
    description = "The outcome of a policy: pass, fail, warn (not met, not scored), error (not evaluated) or skip (not applied)."
)]
pub enum ResultStatus {
    /// The policy's requirements are met.
    Pass,
    /// The policy's requirements are not met.
    Fail,
    /// The requirements are not met and the policy is not scored (kanon: an audit-only or
    /// warning rule that does not pass).
    Warn,
    /// The policy could not be evaluated.
    Error,
    /// The policy was not applied (not selected, or exempted).
    Skip,
}

report_words! {
    ResultStatus, "result status",
    "Every status, in the order of [`ReportSummary`]'s counters.",
    Pass => "pass", Fail => "fail", Warn => "warn", Error => "error", Skip => "skip",
}

impl ResultStatus {
    /// Every status, most urgent first: what needs attention before what does not.
    pub const BY_URGENCY: [ResultStatus; 5] = [
        ResultStatus::Error,
        ResultStatus::Fail,
        ResultStatus::Warn,
        ResultStatus::Skip,
        ResultStatus::Pass,
    ];

    /// The place of this status in [`ResultStatus::BY_URGENCY`] (0: the most urgent).
    pub fn urgency(self) -> usize {
        match self {
            ResultStatus::Error => 0,
            ResultStatus::Fail => 1,
            ResultStatus::Warn => 2,
            ResultStatus::Skip => 3,
            ResultStatus::Pass => 4,
        }
    }
}

/// How severe a failing result is. Ordered: `Info < Low < Medium < High < Critical`, so
/// `max()` over results gives the most severe and `>=` compares against a threshold.
///
/// Written in lower case (`high`); [`str::parse`] reads any case, so that a severity written
/// in a policy's annotation as `High` or `high` parses the same.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
#[schemars(description = "How severe a failure is: critical, high, medium, low or info.")]
pub enum Severity {
    /// Informational.
    Info,
    /// Low.
    Low,
    /// Medium.
    Medium,
    /// High.
    High,
    /// Critical.
    Critical,
}

report_words! {
    Severity, "severity",
    "Every severity, least severe first.",
    Info => "info", Low => "low", Medium => "medium", High => "high", Critical => "critical",
}

/// A string that is not a [`ResultStatus`] or a [`Severity`]; its message names the value and
/// the accepted ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseReportEnumError {
    what: &'static str,
    accepted: &'static [&'static str],
    value: String,
}

impl std::fmt::Display for ParseReportEnumError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` is not a {}: expected ", self.value, self.what)?;
        for (at, word) in self.accepted.iter().enumerate() {
            let before = match at {
                0 => "",
                _ if at + 1 == self.accepted.len() => " or ",
                _ => ", ",
            };
            write!(f, "{before}{word}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ParseReportEnumError {}

/// A point in time as protobuf (and Kubernetes' `metav1.Timestamp`) write it: seconds since the
/// Unix epoch and nanoseconds within that second. Both are always written (OpenReports' schema
/// requires both).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
pub struct Timestamp {
    /// Seconds since 1970-01-01T00:00:00Z.
    pub seconds: i64,
    /// Nanoseconds within the second, 0 to 999,999,999, counting forward also for times before
    /// the epoch.
    pub nanos: i32,
}

impl Timestamp {
    /// The current time.
    pub fn now() -> Self {
        Self::from(SystemTime::now())
    }
}

impl From<SystemTime> for Timestamp {
    fn from(time: SystemTime) -> Self {
        match time.duration_since(UNIX_EPOCH) {
            Ok(after) => Timestamp {
                seconds: i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
                nanos: after.subsec_nanos() as i32,
            },
            Err(before) => {
                // Before the epoch: whole seconds down, nanoseconds forward from there.
                let before = before.duration();
                let mut seconds = -i64::try_from(before.as_secs()).unwrap_or(i64::MAX);
                let mut nanos = before.subsec_nanos() as i32;
                if nanos > 0 {
                    seconds -= 1;
                    nanos = 1_000_000_000 - nanos;
                }
                Timestamp { seconds, nanos }
            }
        }
    }
}

/// A contract between a report's producer and its consumers on what the report holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReportConfiguration {
    /// The limits the producer applied.
    pub limits: ReportLimits,
}

/// Limits a producer applied to a report's results.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReportLimits {
    /// The most results the report holds; absent (or 0, as Go producers write it): no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_results: Option<i64>,
    /// The report holds only results of these statuses; empty: of every status.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub status_filter: Vec<ResultStatus>,
}

/// How many results of a report have each status. Always written, zeros included (the report's
/// printer columns read it); [`ReportSummary::of`] counts it from the results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct ReportSummary {
    /// Results whose policy's requirements are met.
    #[serde(default)]
    pub pass: i64,
    /// Results whose policy's requirements are not met.
    #[serde(default)]
    pub fail: i64,
    /// Results not met of policies that are not scored.
    #[serde(default)]
    pub warn: i64,
    /// Results of policies that could not be evaluated.
    #[serde(default)]
    pub error: i64,
    /// Results of policies that were not applied.
    #[serde(default)]
    pub skip: i64,
}

impl ReportSummary {
    /// The summary of `results` (a result without `result` counts nowhere).
    pub fn of(results: &[ReportResult]) -> Self {
        let mut summary = ReportSummary::default();
        for status in results.iter().filter_map(|r| r.result) {
            summary.add(status);
        }
        summary
    }

    /// Counts one more result of `status`.
    pub fn add(&mut self, status: ResultStatus) {
        *self.count_mut(status) += 1;
    }

    /// The count of `status`.
    pub fn count(&self, status: ResultStatus) -> i64 {
        match status {
            ResultStatus::Pass => self.pass,
            ResultStatus::Fail => self.fail,
            ResultStatus::Warn => self.warn,
            ResultStatus::Error => self.error,
            ResultStatus::Skip => self.skip,
        }
    }

    fn count_mut(&mut self, status: ResultStatus) -> &mut i64 {
        match status {
            ResultStatus::Pass => &mut self.pass,
            ResultStatus::Fail => &mut self.fail,
            ResultStatus::Warn => &mut self.warn,
            ResultStatus::Error => &mut self.error,
            ResultStatus::Skip => &mut self.skip,
        }
    }
}

/// The outcome of one policy (or one of its rules) for the objects it names.
///
/// Only `policy` is required; a producer sets `result` on every result it writes (a result
/// without one counts nowhere in [`ReportSummary::of`]). Empty strings, `false` and empty
/// lists are not written, as OpenReports' Go types omit them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "The outcome of one policy (or one of its rules) for the objects it names."
)]
pub struct ReportResult {
    /// The producer of this result (kanon writes `kanon`); overrides the report's `source`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// The policy's name or identifier (kanon: `Kind/name` or `Kind/namespace/name`).
    pub policy: String,
    /// The rule's name or identifier within the policy.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rule: String,
    /// The policy's category.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub category: String,
    /// How severe a failure is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<Severity>,
    /// When the result was found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Timestamp>,
    /// The outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ResultStatus>,
    /// Whether the result is scored (counts towards a compliance score).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub scored: bool,
    /// The objects the result is about; empty (and no `resourceSelector`): the report's scope.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "atomic_object_references")]
    pub resources: Vec<ObjectReference>,
    /// Selects the objects the result is about, instead of `resources`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-map-type" = "atomic"))]
    pub resource_selector: Option<LabelSelector>,
    /// A short message for people: why the result is what it is.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// More information, as text keys and values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, String>,
}

/// The schema of `resources`: a list of object references, each replaced as a whole by server-side
/// apply (`x-kubernetes-map-type: atomic`), as in OpenReports' CRDs.
fn atomic_object_references(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Vec<ObjectReference>>();
    if let Some(items) = schema.get_mut("items").and_then(|i| i.as_object_mut()) {
        items.insert("x-kubernetes-map-type".into(), "atomic".into());
    }
    schema
}

/// Removes every `default` (what `#[serde(default)]` puts there): OpenReports' CRDs default
/// nothing, and a default would be written by the apiserver into every report, other
/// producers' included.
fn remove_defaults(schema: &mut schemars::Schema) {
    schema.remove("default");
    schemars::transform::transform_subschemas(&mut remove_defaults, schema);
}

/// The settings kube's `#[derive(CustomResource)]` generates CRD schemas with (inlined, without
/// `$schema`, `Option` as `nullable`, rewritten to a structural schema), and no defaults.
fn crd_schema<T: JsonSchema>() -> JSONSchemaProps {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(kube::core::schema::StructuralSchemaRewriter)
        .with_transform(kube::core::schema::OptionalEnum)
        .with_transform(kube::core::schema::OptionalIntOrString)
        .with_transform(remove_defaults)
        .into_generator();
    serde_json::to_value(generator.into_root_schema_for::<T>())
        .and_then(serde_json::from_value)
        .expect("a schemars schema is valid JSONSchemaProps")
}

/// The printer columns of both kinds, as OpenReports defines them.
fn printer_columns() -> Vec<CustomResourceColumnDefinition> {
    let column = |name: &str, type_: &str, json_path: &str, priority: Option<i32>| {
        CustomResourceColumnDefinition {
            name: name.to_string(),
            type_: type_.to_string(),
            json_path: json_path.to_string(),
            priority,
            ..Default::default()
        }
    };
    vec![
        column("Kind", "string", ".scope.kind", Some(1)),
        column("Name", "string", ".scope.name", Some(1)),
        column("Pass", "integer", ".summary.pass", None),
        column("Fail", "integer", ".summary.fail", None),
        column("Warn", "integer", ".summary.warn", None),
        column("Error", "integer", ".summary.error", None),
        column("Skip", "integer", ".summary.skip", None),
        column("Age", "date", ".metadata.creationTimestamp", None),
    ]
}

/// The CRD of one report kind.
fn report_crd<T: JsonSchema>(
    kind: &str,
    plural: &str,
    short_name: &str,
    scope: &str,
) -> CustomResourceDefinition {
    CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(format!("{plural}.{REPORT_GROUP}")),
            ..Default::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: REPORT_GROUP.to_string(),
            names: CustomResourceDefinitionNames {
                kind: kind.to_string(),
                list_kind: Some(format!("{kind}List")),
                plural: plural.to_string(),
                short_names: Some(vec![short_name.to_string()]),
                singular: Some(kind.to_lowercase()),
                ..Default::default()
            },
            scope: scope.to_string(),
            versions: vec![CustomResourceDefinitionVersion {
                additional_printer_columns: Some(printer_columns()),
                name: REPORT_VERSION.to_string(),
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(crd_schema::<T>()),
                }),
                served: true,
                storage: true,
                ..Default::default()
            }],
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The wire form of both kinds: `apiVersion` and `kind`, then the object's fields.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Wire<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: &'a ObjectMeta,
    #[serde(skip_serializing_if = "str::is_empty")]
    source: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    scope: Option<&'a ObjectReference>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scope_selector: Option<&'a LabelSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    configuration: Option<&'a ReportConfiguration>,
    summary: &'a ReportSummary,
    #[serde(skip_serializing_if = "<[ReportResult]>::is_empty")]
    results: &'a [ReportResult],
}

/// Defines a report kind: the struct (its fields documented once, here, for both kinds), its
/// serialization with `apiVersion` and `kind`, [`kube::Resource`] and
/// [`kube::CustomResourceExt`] (its CRD).
macro_rules! report_kind {
    (
        $(#[$doc:meta])*
        $name:ident, kind = $kind:expr, plural = $plural:literal, short = $short:literal,
        scope = $scope:ty, scope_name = $scope_name:literal, description = $description:literal
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
        #[serde(rename_all = "camelCase")]
        #[schemars(description = $description)]
        pub struct $name {
            /// The object's metadata.
            #[serde(default)]
            #[schemars(skip)]
            pub metadata: ObjectMeta,
            /// The producer of the results (kanon writes `kanon`), when one produced them all;
            /// a result's own `source` overrides it. Empty: not written.
            #[serde(default)]
            pub source: String,
            /// The object the report is about (a Deployment, a Namespace, a Node), if one.
            #[serde(default)]
            #[schemars(extend("x-kubernetes-map-type" = "atomic"))]
            pub scope: Option<ObjectReference>,
            /// Selects the objects the report is about, instead of `scope` (never both).
            #[serde(default)]
            #[schemars(extend("x-kubernetes-map-type" = "atomic"))]
            pub scope_selector: Option<LabelSelector>,
            /// What the producer promises about the results (limits, status filter).
            #[serde(default)]
            pub configuration: Option<ReportConfiguration>,
            /// How many results have each status (`ReportSummary::of(&results)`). Always
            /// written.
            #[serde(default)]
            pub summary: ReportSummary,
            /// The results. Not written when empty.
            #[serde(default)]
            pub results: Vec<ReportResult>,
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                Wire {
                    api_version: REPORT_API_VERSION,
                    kind: $kind,
                    metadata: &self.metadata,
                    source: &self.source,
                    scope: self.scope.as_ref(),
                    scope_selector: self.scope_selector.as_ref(),
                    configuration: self.configuration.as_ref(),
                    summary: &self.summary,
                    results: &self.results,
                }
                .serialize(serializer)
            }
        }

        impl kube::Resource for $name {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> Cow<'_, str> {
                $kind.into()
            }

            fn group(_: &()) -> Cow<'_, str> {
                REPORT_GROUP.into()
            }

            fn version(_: &()) -> Cow<'_, str> {
                REPORT_VERSION.into()
            }

            fn api_version(_: &()) -> Cow<'_, str> {
                REPORT_API_VERSION.into()
            }

            fn plural(_: &()) -> Cow<'_, str> {
                $plural.into()
            }

            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }

        impl kube::CustomResourceExt for $name {
            fn crd() -> CustomResourceDefinition {
                report_crd::<Self>($kind, $plural, $short, $scope_name)
            }

            fn crd_name() -> &'static str {
                concat!($plural, ".openreports.io")
            }

            fn api_resource() -> ApiResource {
                ApiResource::erase::<Self>(&())
            }

            fn shortnames() -> &'static [&'static str] {
                &[$short]
            }
        }
    };
}

report_kind! {
    /// An OpenReports report of a namespace: results for objects of that namespace.
    ///
    /// kanon fills `source`, `results` and `summary` (with [`ReportSummary::of`]); `scope`
    /// names the object when the report is about one object.
    Report,
    kind = REPORT_KIND,
    plural = "reports",
    short = "reps",
    scope = NamespaceResourceScope,
    scope_name = "Namespaced",
    description = "Report holds the results of policies for objects of its namespace (OpenReports)."
}

report_kind! {
    /// An OpenReports report of cluster-scoped objects (Namespaces, Nodes, ClusterRoles, ...),
    /// the same fields as a [`Report`].
    ClusterReport,
    kind = CLUSTER_REPORT_KIND,
    plural = "clusterreports",
    short = "creps",
    scope = ClusterResourceScope,
    scope_name = "Cluster",
    description = "ClusterReport holds the results of policies for cluster-scoped objects (OpenReports)."
}
