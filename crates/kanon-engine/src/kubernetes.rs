//! What kanon knows of Kubernetes' built-in kinds (the schema in `kanon-schema`), applied to
//! a policy as it is written.
//!
//! A selector or a `k8s` reference that names a built-in kind wrongly (`pod`, `Pod` at
//! `apps/v1`, `Deploymnet`) would select or read nothing, and the policy would admit everything
//! without a word: an error, with what was meant. A path that cannot exist in any kind the
//! policy selects (`/spec/replica`) is a warning naming the nearest real field — a warning,
//! since custom resources and later Kubernetes versions have fields this schema does not know.
//! So is a validate rule without `targetOperations`, which judges DELETE too.
//!
//! In a cluster the check also knows the custom kinds its CustomResourceDefinitions serve
//! ([`Kinds`]): paths in them are checked the same way, and a kind named wrongly in a group a
//! CRD serves (`widget`, `Widget` at a version no CRD serves) is a warning, never an error: a
//! CRD may be installed after the policy, and its versions change. Kinds of groups no CRD
//! serves are not judged. Custom kinds never add errors, so a policy's errors do not depend on
//! them (see [`crate::kinds_warnings`]).

use crate::language::cel;
use crate::language::cel::compile::{RuleEnv, Site};
use jsonpath_rust::parser::model::{Segment, Selector};
use kanon_api::{OverrideRule, RefSource, ResourceRefer, ResourceSelector, ValidateRule};
use kanon_schema::{KindSuggestion, Kinds, KnownKind, Resolution};

use crate::error::FieldError;

/// Most paths one JSONPath union expands to for checking (`['a','b'][*]['c','d']` is four).
const MAX_ALTERNATIVES: usize = 16;

/// What the check reads of a policy: its selectors and rules.
pub(crate) struct Written<'a> {
    /// `spec.resourceSelectors`.
    pub selectors: &'a [ResourceSelector],
    /// `spec.overrideRules` (none for a validate policy).
    pub override_rules: &'a [OverrideRule],
    /// `spec.validateRules` (none for an override policy).
    pub validate_rules: &'a [ValidateRule],
}

/// Checks a policy as `written` against `kinds`: problems that make it select or read nothing
/// go to `errors` (built-in kinds only), likely mistakes to `warnings`.
pub(crate) fn check(
    written: Written<'_>,
    kinds: &Kinds,
    errors: &mut Vec<FieldError>,
    warnings: &mut Vec<FieldError>,
) {
    let checker = Checker { kinds };
    let Written {
        selectors,
        override_rules,
        validate_rules,
    } = written;
    let selected = checker.selectors(selectors, errors, warnings);
    for (i, rule) in override_rules.iter().enumerate() {
        if let Some(cel) = &rule.overriders.cel {
            let sources = cel::schema::Sources::mutation(
                cel,
                &format!("spec.overrideRules[{i}].overriders.cel"),
            );
            cel::schema::warnings(
                &sources,
                || RuleEnv::mutation(Site::KanonRule),
                &selected.kinds,
                kinds,
                warnings,
            );
        }
        for (j, op) in rule.overriders.plaintext.iter().enumerate() {
            let at = format!("spec.overrideRules[{i}].overriders.plaintext[{j}]");
            checker.path(&selected, &op.path, &format!("{at}.path"), warnings);
            if let Some(from) = &op.from {
                checker.path(&selected, from, &format!("{at}.from"), warnings);
            }
        }
    }
    for (i, rule) in validate_rules.iter().enumerate() {
        let at = format!("spec.validateRules[{i}]");
        if rule.target_operations.is_empty() {
            warnings.push(FieldError::new(
                format!("{at}.targetOperations"),
                "is not set, so the rule judges DELETE too (a denial blocks deleting the \
                 object): write [CREATE, UPDATE], or list DELETE if that is meant",
            ));
        }
        if let Some(cel) = &rule.cel {
            let sources = cel::schema::Sources::validation(cel, &format!("{at}.cel"));
            cel::schema::warnings(
                &sources,
                || RuleEnv::validation(Site::KanonRule),
                &selected.kinds,
                kinds,
                warnings,
            );
        }
        let Some(condition) = rule.template.as_ref().and_then(|t| t.condition.as_ref()) else {
            continue;
        };
        let at = format!("{at}.template.condition");
        checker.reference(
            &selected,
            &condition.data_ref,
            &format!("{at}.dataRef"),
            errors,
            warnings,
        );
        if let Some(value_ref) = &condition.value_ref {
            checker.reference(
                &selected,
                value_ref,
                &format!("{at}.valueRef"),
                errors,
                warnings,
            );
        }
    }
}

/// The kinds a policy selects, as far as the known kinds go.
struct Selected<'k> {
    kinds: Vec<KnownKind<'k>>,
    /// Some selected kind is not known (or the policy selects every kind): a path cannot be
    /// judged, since it may belong to that kind.
    open: bool,
}

struct Checker<'k> {
    kinds: &'k Kinds,
}

/// `api_version` with its group lowercased (`Apps/v1` is still the `apps` group to the
/// apiserver's discovery, but no kind of it is served under that spelling).
fn lowercase_group(api_version: &str) -> String {
    match kanon_schema::group_version(api_version) {
        ("", _) => api_version.to_string(),
        (group, version) => format!("{}/{version}", group.to_lowercase()),
    }
}

impl<'k> Checker<'k> {
    /// The known kind `api_version`/`kind` names. A name that is wrong for a built-in group
    /// is an error at `field` with what was meant; one that is wrong for a custom group (a
    /// CRD serves the group, and a kind of it is near) is a warning; any other unknown name
    /// gives `None`.
    fn kind(
        &self,
        api_version: &str,
        kind: &str,
        field: &str,
        errors: &mut Vec<FieldError>,
        warnings: &mut Vec<FieldError>,
    ) -> Option<KnownKind<'k>> {
        if let Some(found) = self.kinds.kind(api_version, kind) {
            return Some(found);
        }
        // An empty name is reported where the selector is compiled.
        if api_version.is_empty() || kind.is_empty() {
            return None;
        }
        let grouped = lowercase_group(api_version);
        if self.kinds.is_custom_group(&grouped) {
            self.custom_kind_warning(api_version, kind, field, warnings);
            return None;
        }
        if !self.kinds.is_builtin_group(&grouped) {
            return None;
        }
        let schema = self.kinds.builtin_schema();
        let version = schema.kubernetes_version();
        let suggestion = schema.suggest_kind(api_version, kind);
        let core_version = api_version.starts_with('v')
            && api_version[1..].starts_with(|c: char| c.is_ascii_digit());
        if !api_version.contains('/') && !core_version && suggestion.is_none() {
            errors.push(FieldError::new(
                field,
                format!(
                    "`{api_version}` is not an apiVersion: write `<group>/<version>` (`apps/v1`), or `v1` for the core group"
                ),
            ));
            return None;
        }
        let message = match suggestion {
            Some(suggestion @ KindSuggestion::ServedAt(_)) => {
                format!("Kubernetes {version} serves no `{kind}` at `{api_version}`: {suggestion}")
            }
            Some(suggestion @ KindSuggestion::DidYouMean(_)) => format!(
                "Kubernetes {version} serves no kind `{kind}` at `{api_version}` (kinds are case-sensitive); {suggestion}"
            ),
            None => {
                let served: Vec<&str> = schema
                    .kinds()
                    .iter()
                    .filter(|k| k.api_version == api_version)
                    .map(|k| k.kind.as_str())
                    .collect();
                if served.is_empty() {
                    format!("Kubernetes {version} serves no `{api_version}`")
                } else {
                    format!(
                        "Kubernetes {version} serves no kind `{kind}` at `{api_version}` (it serves {})",
                        served.join(", ")
                    )
                }
            }
        };
        errors.push(FieldError::new(field, message));
        None
    }

    /// Warns at `field` when `api_version`/`kind`, in a group a CRD serves, is near a kind of
    /// that group: probably a misspelling, or a version the CRD does not serve (yet).
    fn custom_kind_warning(
        &self,
        api_version: &str,
        kind: &str,
        field: &str,
        warnings: &mut Vec<FieldError>,
    ) {
        let grouped = lowercase_group(api_version);
        let suggestion = self.kinds.suggest_custom_kind(&grouped, kind).or_else(|| {
            // Served exactly as named but for the group's case.
            let found = self.kinds.kind(&grouped, kind)?;
            Some(KindSuggestion::ServedAt(vec![found.kind]))
        });
        let message = match suggestion {
            Some(suggestion @ KindSuggestion::ServedAt(_)) => format!(
                "no CustomResourceDefinition serves `{kind}` at `{api_version}`: {suggestion}"
            ),
            Some(suggestion @ KindSuggestion::DidYouMean(_)) => format!(
                "no CustomResourceDefinition serves a kind `{kind}` at `{api_version}` (kinds are case-sensitive); {suggestion}"
            ),
            None => return,
        };
        warnings.push(FieldError::new(field, message));
    }

    /// Checks the selectors' kinds and field selectors; the kinds they select.
    fn selectors(
        &self,
        selectors: &[ResourceSelector],
        errors: &mut Vec<FieldError>,
        warnings: &mut Vec<FieldError>,
    ) -> Selected<'k> {
        let mut selected = Selected {
            kinds: Vec::new(),
            open: selectors.is_empty(),
        };
        for (i, s) in selectors.iter().enumerate() {
            let at = format!("spec.resourceSelectors[{i}]");
            let Some(kind) = self.kind(
                &s.api_version,
                &s.kind,
                &format!("{at}.kind"),
                errors,
                warnings,
            ) else {
                selected.open = true;
                continue;
            };
            if !selected.kinds.contains(&kind) {
                selected.kinds.push(kind);
            }
            // A field selector reads the kind its own selector names.
            let only = Selected {
                kinds: vec![kind],
                open: false,
            };
            if let Some(fields) = &s.field_selector {
                for pointer in fields.match_fields.keys() {
                    self.path(
                        &only,
                        pointer,
                        &format!("{at}.fieldSelector.matchFields[{pointer}]"),
                        warnings,
                    );
                }
                for (j, r) in fields.match_expressions.iter().enumerate() {
                    self.path(
                        &only,
                        &r.field,
                        &format!("{at}.fieldSelector.matchExpressions[{j}].field"),
                        warnings,
                    );
                }
            }
        }
        selected
    }

    /// Checks a reference's path against what it reads: the selected kinds (`current`, `old`)
    /// or the kind a `k8s` reference names.
    fn reference(
        &self,
        selected: &Selected<'k>,
        reference: &ResourceRefer,
        field: &str,
        errors: &mut Vec<FieldError>,
        warnings: &mut Vec<FieldError>,
    ) {
        let Some(path) = reference.path.as_deref().filter(|p| !p.is_empty()) else {
            return;
        };
        match reference.from {
            RefSource::Current | RefSource::Old => {
                self.path(selected, path, &format!("{field}.path"), warnings);
            }
            RefSource::K8s => {
                let Some(target) = &reference.k8s else { return };
                // Placeholders are resolved per request: nothing to check before.
                if target.api_version.contains("{{") || target.kind.contains("{{") {
                    return;
                }
                let kind = self.kind(
                    &target.api_version,
                    &target.kind,
                    &format!("{field}.k8s.kind"),
                    errors,
                    warnings,
                );
                // A label selector gives a list of objects; the path then reads that list.
                if let Some(kind) = kind.filter(|_| target.label_selector.is_none()) {
                    let only = Selected {
                        kinds: vec![kind],
                        open: false,
                    };
                    self.path(&only, path, &format!("{field}.path"), warnings);
                }
            }
            RefSource::Owner | RefSource::Http => {}
        }
    }

    /// Warns at `field` when `path` (a JSON pointer or a JSONPath) exists in none of the
    /// selected kinds, naming the nearest real field. Paths that do not parse are errors
    /// reported where they are compiled.
    fn path(
        &self,
        selected: &Selected<'k>,
        path: &str,
        field: &str,
        warnings: &mut Vec<FieldError>,
    ) {
        if selected.open || selected.kinds.is_empty() {
            return;
        }
        let Some(alternatives) = segments(path) else {
            return;
        };
        // The first alternative (of a union) that exists in no selected kind.
        for segments in &alternatives {
            let mut misses = Vec::new();
            for kind in &selected.kinds {
                match kind.resolve(&segments.names) {
                    Resolution::NoSuchField { depth, .. } if segments.wild.contains(&depth) => {
                        // A wildcard over an object's fields: any field will do.
                        return;
                    }
                    r @ (Resolution::NoSuchField { .. }
                    | Resolution::NotAnIndex { .. }
                    | Resolution::NotAContainer { .. }) => misses.push((kind, r)),
                    Resolution::Found(_) | Resolution::Open { .. } => {}
                }
            }
            if misses.len() < selected.kinds.len() {
                continue;
            }
            let Some((kind, resolution)) = misses.into_iter().next() else {
                continue;
            };
            let kinds: Vec<String> = selected
                .kinds
                .iter()
                .map(|k| format!("{} {}", k.kind.api_version, k.kind.kind))
                .collect();
            let shown = kanon_schema::pointer(segments.names.iter().map(String::as_str));
            let mut message = format!(
                "`{shown}` does not exist in {}",
                if kinds.len() == 1 {
                    kinds[0].clone()
                } else {
                    format!("any selected kind ({})", kinds.join(", "))
                }
            );
            match &resolution {
                Resolution::NoSuchField {
                    depth,
                    nearest,
                    fields,
                    ..
                } => {
                    let at =
                        kanon_schema::pointer(segments.names[..*depth].iter().map(String::as_str));
                    let at = if at.is_empty() { "/".to_string() } else { at };
                    match (nearest, resolution.suggested_pointer(&segments.names)) {
                        (Some(_), Some(better)) => {
                            message.push_str(&format!("; did you mean `{better}`?"));
                        }
                        _ => message.push_str(&format!(
                            " ({} {}: {at} has {})",
                            kind.kind.api_version,
                            kind.kind.kind,
                            fields
                                .iter()
                                .take(24)
                                .map(|f| format!("`{f}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )),
                    }
                }
                Resolution::NotAnIndex { depth, .. } => message.push_str(&format!(
                    ": `{}` is a list, indexed by number",
                    kanon_schema::pointer(segments.names[..*depth].iter().map(String::as_str))
                )),
                Resolution::NotAContainer { depth, .. } => message.push_str(&format!(
                    ": `{}` holds a single value, with no fields",
                    kanon_schema::pointer(segments.names[..*depth].iter().map(String::as_str))
                )),
                _ => {}
            }
            warnings.push(FieldError::new(field, message));
            return;
        }
    }
}

/// A path as pointer segments; `wild` holds the positions that stand for any item or key.
struct Segments {
    names: Vec<String>,
    wild: Vec<usize>,
}

/// The segments of a JSON pointer, or of a JSONPath as far as it can be followed (names,
/// indexes, wildcards, filters and slices; unions give one path per alternative; a
/// descendant segment ends it). `None` when the text is neither.
fn segments(path: &str) -> Option<Vec<Segments>> {
    if !path.starts_with('$') {
        let names = kanon_schema::parse_pointer(path)?;
        return Some(vec![Segments {
            names,
            wild: Vec::new(),
        }]);
    }
    let query = crate::jsonpath::parse_jsonpath(path).ok()?;
    let mut out = vec![Segments {
        names: Vec::new(),
        wild: Vec::new(),
    }];
    for segment in &query.segments {
        let selectors: Vec<&Selector> = match segment {
            Segment::Selector(s) => vec![s],
            Segment::Selectors(list) => list.iter().collect(),
            // Any depth below: nothing more to follow.
            Segment::Descendant(_) => break,
        };
        let mut next = Vec::new();
        for prefix in &out {
            for selector in &selectors {
                let mut path = Segments {
                    names: prefix.names.clone(),
                    wild: prefix.wild.clone(),
                };
                match selector {
                    Selector::Name(name) => path.names.push(name.clone()),
                    Selector::Index(i) if *i >= 0 => path.names.push(i.to_string()),
                    Selector::Index(_)
                    | Selector::Wildcard
                    | Selector::Slice(..)
                    | Selector::Filter(_) => {
                        // Any item of a list (or value of a map): `0` stands for it.
                        path.wild.push(path.names.len());
                        path.names.push("0".to_string());
                    }
                }
                next.push(path);
            }
        }
        if next.len() > MAX_ALTERNATIVES {
            break;
        }
        out = next;
    }
    Some(out)
}
