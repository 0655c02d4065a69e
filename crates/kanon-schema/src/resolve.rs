//! Walking a path (JSON pointer segments) through a kind's types.

use crate::distance::nearest;
use crate::{Kind, ListType, Schema, Shape, Type};

/// A place in a kind's types that a path reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site<'s> {
    /// The type as written at this place (a field's, a list's items', a map's values'). For a
    /// reference it carries what the referring field adds, such as its patch strategy.
    pub ty: &'s Type,
    /// `ty` with references followed: the shape a value here must have.
    pub target: &'s Type,
    /// The named type `ty` refers to (`io.k8s.apimachinery.pkg.api.resource.Quantity`), or
    /// `None` for a type written inline.
    pub type_name: Option<&'s str>,
}

/// Where [`Schema::resolve`] got to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution<'s> {
    /// The whole path exists; this is the type at its end.
    Found(Site<'s>),
    /// After `depth` segments the path entered a value the schema leaves free-form (no type, an
    /// object without fields such as `RawExtension`, preserved unknown fields): what lies below
    /// is neither known nor wrong.
    Open {
        /// The free-form place.
        at: Site<'s>,
        /// How many segments led there.
        depth: usize,
    },
    /// Segment number `depth` (from 0) names no field of the object at `at`.
    NoSuchField {
        /// The object.
        at: Site<'s>,
        /// The index of the unknown segment in the path.
        depth: usize,
        /// The object's field nearest in spelling, if one is near (`replicas` for `replica`).
        nearest: Option<&'s str>,
        /// Every field of the object, sorted, for a longer message.
        fields: Vec<&'s str>,
    },
    /// Segment number `depth` is not an index (`0`, `1`, ..., or `-` for "after the last") of
    /// the list at `at`.
    NotAnIndex {
        /// The list.
        at: Site<'s>,
        /// The index of the segment in the path.
        depth: usize,
    },
    /// The value at `at` is a scalar (or a reference the schema cannot follow): segment number
    /// `depth` cannot go into it.
    NotAContainer {
        /// The scalar.
        at: Site<'s>,
        /// The index of the segment in the path.
        depth: usize,
    },
}

impl<'s> Resolution<'s> {
    /// The type at the end of the path, if the whole path exists.
    pub fn found(&self) -> Option<Site<'s>> {
        match self {
            Resolution::Found(site) => Some(*site),
            _ => None,
        }
    }

    /// For [`NoSuchField`](Resolution::NoSuchField) with a near field: `path` as a JSON pointer
    /// with the unknown segment replaced by that field (`/spec/replicas` for `/spec/replica`),
    /// keeping the segments after it.
    pub fn suggested_pointer<S: AsRef<str>>(&self, path: &[S]) -> Option<String> {
        let Resolution::NoSuchField {
            depth,
            nearest: Some(nearest),
            ..
        } = self
        else {
            return None;
        };
        let segments = path.iter().enumerate().map(|(index, segment)| {
            if index == *depth {
                *nearest
            } else {
                segment.as_ref()
            }
        });
        Some(pointer(segments))
    }
}

/// A JSON pointer (RFC 6901) of these segments: `~` and `/` escaped, `/` before each.
pub fn pointer<'a>(segments: impl IntoIterator<Item = &'a str>) -> String {
    segments
        .into_iter()
        .fold(String::new(), |mut text, segment| {
            text.push('/');
            text.push_str(&segment.replace('~', "~0").replace('/', "~1"));
            text
        })
}

/// The segments of a JSON pointer (RFC 6901), unescaped: `/spec/containers/0` gives `spec`,
/// `containers`, `0`; the empty pointer gives none. `None` if the text is not a pointer (it
/// does not start with `/`, or has a `~` not followed by `0` or `1`).
pub fn parse_pointer(text: &str) -> Option<Vec<String>> {
    if text.is_empty() {
        return Some(Vec::new());
    }
    let rest = text.strip_prefix('/')?;
    rest.split('/')
        .map(|segment| {
            let mut out = String::with_capacity(segment.len());
            let mut chars = segment.chars();
            while let Some(c) = chars.next() {
                if c == '~' {
                    match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => return None,
                    }
                } else {
                    out.push(c);
                }
            }
            Some(out)
        })
        .collect()
}

/// Whether `segment` is a list index as a JSON pointer writes one: `0`, or digits without a
/// leading zero, or `-` (the place after the last item, in a JSON patch).
fn is_index(segment: &str) -> bool {
    segment == "-"
        || segment == "0"
        || (!segment.starts_with('0')
            && !segment.is_empty()
            && segment.bytes().all(|b| b.is_ascii_digit()))
}

impl Schema {
    /// Walks `path` (unescaped JSON pointer segments, see [`parse_pointer`]) from the root type
    /// of `kind`: object fields by name, list items by index, map values by any key. Says the
    /// type at the end, or where and why the walk stopped, with the nearest real field name
    /// when a field is unknown.
    ///
    /// ```
    /// # let schema = kanon_schema::Schema::builtin()?;
    /// # let pod = schema.kind("v1", "Pod").ok_or("no Pod")?;
    /// let limit = schema.resolve(pod, &["spec", "containers", "0", "resources", "limits", "memory"]);
    /// let site = limit.found().ok_or("not found")?;
    /// assert_eq!(site.type_name, Some("io.k8s.apimachinery.pkg.api.resource.Quantity"));
    /// assert!(site.target.accepts_string());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resolve<'s, S: AsRef<str>>(&'s self, kind: &Kind, path: &[S]) -> Resolution<'s> {
        let Some((name, root)) = self.file.types.get_key_value(&kind.type_name) else {
            // A kind from another schema whose root type this one lacks: nothing is known.
            let site = Site {
                ty: &ANY,
                target: &ANY,
                type_name: None,
            };
            return Resolution::Open { at: site, depth: 0 };
        };
        let mut site = Site {
            ty: root,
            target: root,
            type_name: Some(name.as_str()),
        };
        for (depth, segment) in path.iter().enumerate() {
            let segment = segment.as_ref();
            let next: &Type = match &site.target.shape {
                Shape::Object(object) => {
                    if let Some(field) = object.fields.get(segment) {
                        field
                    } else if object.fields.is_empty() || site.target.preserve_unknown_fields {
                        return Resolution::Open { at: site, depth };
                    } else {
                        let fields: Vec<&str> = object.fields.keys().map(String::as_str).collect();
                        return Resolution::NoSuchField {
                            at: site,
                            depth,
                            nearest: nearest(segment, fields.iter().copied()),
                            fields,
                        };
                    }
                }
                Shape::Map(values) => values,
                Shape::List(list) => {
                    if !is_index(segment) {
                        return Resolution::NotAnIndex { at: site, depth };
                    }
                    &list.items
                }
                Shape::Any => return Resolution::Open { at: site, depth },
                _ if site.target.preserve_unknown_fields => {
                    return Resolution::Open { at: site, depth };
                }
                _ => return Resolution::NotAContainer { at: site, depth },
            };
            site = match self.deref(next) {
                Some((target, type_name)) => Site {
                    ty: next,
                    target,
                    type_name,
                },
                // Unreachable for a loaded schema (loading checks every reference); a dead end
                // is the honest answer if it ever happens.
                None => {
                    let at = Site {
                        ty: next,
                        target: next,
                        type_name: None,
                    };
                    return Resolution::NotAContainer {
                        at,
                        depth: depth + 1,
                    };
                }
            };
        }
        Resolution::Found(site)
    }

    /// [`resolve`](Self::resolve) for a JSON pointer (`/spec/containers/0/image`). `None` if
    /// `pointer` is not one (see [`parse_pointer`]).
    pub fn resolve_pointer<'s>(&'s self, kind: &Kind, pointer: &str) -> Option<Resolution<'s>> {
        let segments = parse_pointer(pointer)?;
        Some(self.resolve(kind, &segments))
    }
}

impl ListType {
    /// The key fields of a list-map, empty for other list types.
    pub fn map_keys(&self) -> &[String] {
        match self {
            ListType::Map(keys) => keys,
            _ => &[],
        }
    }
}

/// A free-form type, for the site of a kind whose root type the schema lacks.
static ANY: Type = Type::new(Shape::Any);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_round_trip() {
        assert_eq!(parse_pointer(""), Some(vec![]));
        assert_eq!(
            parse_pointer("/metadata/labels/app.kubernetes.io~1name"),
            Some(vec![
                "metadata".to_string(),
                "labels".to_string(),
                "app.kubernetes.io/name".to_string()
            ])
        );
        assert_eq!(parse_pointer("/a~0b"), Some(vec!["a~b".to_string()]));
        assert_eq!(parse_pointer("spec"), None);
        assert_eq!(parse_pointer("/a~2"), None);
        assert_eq!(pointer(["a/b", "c~d"]), "/a~1b/c~0d");
    }

    #[test]
    fn indexes() {
        for good in ["0", "1", "42", "-"] {
            assert!(is_index(good), "{good}");
        }
        for bad in ["", "01", "-1", "name", "1a"] {
            assert!(!is_index(bad), "{bad}");
        }
    }
}
