//! The kinds a check knows: the built-in ones, and in a cluster the custom ones its
//! CustomResourceDefinitions serve.

use std::sync::Arc;

use crate::suggest::suggest_among;
use crate::{Kind, KindSuggestion, LoadError, Resolution, Schema};

/// Where a [`KnownKind`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A built-in kind of the embedded schema.
    BuiltIn,
    /// A custom kind, served by a CustomResourceDefinition.
    Custom,
}

/// A kind found in [`Kinds`], with the schema that holds its types.
#[derive(Debug, Clone, Copy)]
pub struct KnownKind<'k> {
    /// The kind.
    pub kind: &'k Kind,
    /// The schema it belongs to; its types are resolved there.
    pub schema: &'k Schema,
    /// Built in or custom.
    pub origin: Origin,
}

impl PartialEq for KnownKind<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.origin == other.origin && self.kind == other.kind
    }
}

impl Eq for KnownKind<'_> {}

impl<'k> KnownKind<'k> {
    /// [`Schema::resolve`] in the kind's own schema.
    pub fn resolve<S: AsRef<str>>(&self, path: &[S]) -> Resolution<'k> {
        self.schema.resolve(self.kind, path)
    }
}

/// The built-in kinds, overlaid with custom ones (see
/// [`Schema::from_custom_resources`]). A group the built-in schema serves is never looked up
/// among the custom kinds, so custom kinds cannot shadow or add to a built-in group. Cheap to
/// clone: the custom schema is shared.
#[derive(Debug, Clone)]
pub struct Kinds {
    builtin: &'static Schema,
    custom: Option<Arc<Schema>>,
}

/// The group of an apiVersion, empty for the core group's `v1`.
fn group_of(api_version: &str) -> &str {
    crate::group_version(api_version).0
}

impl Kinds {
    /// The embedded built-in kinds alone; fails only as [`Schema::builtin`] does.
    pub fn builtin() -> Result<Kinds, LoadError> {
        Ok(Kinds::new(Schema::builtin()?))
    }

    /// The kinds of `builtin` alone.
    pub fn new(builtin: &'static Schema) -> Kinds {
        Kinds {
            builtin,
            custom: None,
        }
    }

    /// The kinds of `builtin`, and those of `custom` in the groups `builtin` does not serve.
    pub fn with_custom(builtin: &'static Schema, custom: Arc<Schema>) -> Kinds {
        Kinds {
            builtin,
            custom: Some(custom),
        }
    }

    /// The built-in schema.
    pub fn builtin_schema(&self) -> &'static Schema {
        self.builtin
    }

    /// The custom kinds' schema, if there is one.
    pub fn custom_schema(&self) -> Option<&Schema> {
        self.custom.as_deref()
    }

    /// Whether `api_version`'s group (`apps` of `apps/v1`, the core group of `v1`) is one the
    /// built-in schema serves (exactly: groups are lowercase).
    pub fn is_builtin_group(&self, api_version: &str) -> bool {
        self.builtin_serves(group_of(api_version))
    }

    /// Whether the built-in schema serves `group` (empty for the core group).
    fn builtin_serves(&self, group: &str) -> bool {
        self.builtin.serves_group(group)
    }

    /// Whether `api_version`'s group is served by a custom kind (and is not built in).
    pub fn is_custom_group(&self, api_version: &str) -> bool {
        let group = group_of(api_version);
        !self.is_builtin_group(api_version)
            && self
                .custom
                .as_deref()
                .is_some_and(|custom| custom.kinds().iter().any(|k| k.group() == group))
    }

    /// The kind `kind` at `api_version`, matched exactly: a built-in one, else a custom one
    /// in a group that is not built in.
    pub fn kind(&self, api_version: &str, kind: &str) -> Option<KnownKind<'_>> {
        if let Some(found) = self.builtin.kind(api_version, kind) {
            return Some(KnownKind {
                kind: found,
                schema: self.builtin,
                origin: Origin::BuiltIn,
            });
        }
        if self.is_builtin_group(api_version) {
            return None;
        }
        let custom = self.custom.as_deref()?;
        custom.kind(api_version, kind).map(|found| KnownKind {
            kind: found,
            schema: custom,
            origin: Origin::Custom,
        })
    }

    /// The versions that serve `resource` (plural, `horizontalpodautoscalers`) in `group`
    /// (empty for the core group): built-in ones, or in a group that is not built in, custom
    /// ones. kube-apiserver counts them as equivalent resources for `matchPolicy: Equivalent`.
    pub fn versions_of(&self, group: &str, resource: &str) -> Vec<&str> {
        let schema = if self.builtin_serves(group) {
            Some(self.builtin)
        } else {
            self.custom.as_deref()
        };
        schema
            .into_iter()
            .flat_map(|schema| schema.kinds_of_resource(group, resource))
            .map(Kind::version)
            .collect()
    }

    /// For an `api_version` and `kind` in a custom group ([`is_custom_group`](Self::is_custom_group))
    /// that [`kind`](Self::kind) does not find: the same kind at the group's other versions,
    /// else the group's kind nearest in spelling, ignoring case. Only kinds of the same group
    /// are suggested; `None` when nothing is near.
    pub fn suggest_custom_kind(&self, api_version: &str, kind: &str) -> Option<KindSuggestion<'_>> {
        if !self.is_custom_group(api_version) || self.kind(api_version, kind).is_some() {
            return None;
        }
        let custom = self.custom.as_deref()?;
        let group = group_of(api_version);
        let same_group = custom.kinds().iter().filter(|k| k.group() == group);
        suggest_among(same_group, api_version, kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_versions_serving_a_resource_are_every_version_of_its_group_and_no_other() {
        let kinds = Kinds::builtin().expect("the embedded schema");
        let mut hpa = kinds.versions_of("autoscaling", "horizontalpodautoscalers");
        hpa.sort_unstable();
        assert_eq!(hpa, ["v1", "v2"]);
        assert_eq!(kinds.versions_of("", "pods"), ["v1"]);
        assert_eq!(kinds.versions_of("apps", "pods"), Vec::<&str>::new());
        assert_eq!(kinds.versions_of("", "deployments"), Vec::<&str>::new());
        // The same as a walk over every kind finds.
        for kind in kinds.builtin_schema().kinds() {
            let mut walked: Vec<&str> = kinds
                .builtin_schema()
                .kinds()
                .iter()
                .filter(|k| k.group() == kind.group() && k.resource == kind.resource)
                .map(Kind::version)
                .collect();
            let mut indexed = kinds.versions_of(kind.group(), &kind.resource);
            walked.sort_unstable();
            indexed.sort_unstable();
            assert_eq!(indexed, walked, "{} {}", kind.api_version, kind.resource);
        }
        assert!(kinds.is_builtin_group("apps/v1") && kinds.is_builtin_group("v1"));
        assert!(!kinds.is_builtin_group("example.com/v1"));
    }
}
