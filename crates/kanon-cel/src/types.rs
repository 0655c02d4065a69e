//! CEL types: what the checker infers and what `type(x)` returns at run time.

use std::fmt;
use std::sync::Arc;

/// A CEL type. `Dyn` is the type of anything whose type is known only at run time; `Param` is a
/// type parameter of a generic overload (`list(A)`), bound during checking.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Type {
    Dyn,
    Null,
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Duration,
    Timestamp,
    List(Arc<Type>),
    Map(Arc<Type>, Arc<Type>),
    /// The type of a type value; `type(int)` is `Type(Some(Int))`, the bare `type` is `Type(None)`.
    Type(Option<Arc<Type>>),
    Optional(Arc<Type>),
    /// A named object type: `Object`, `Object.spec`, `JSONPatch`, a Kubernetes schema type, ….
    Object(Arc<str>),
    Param(Arc<str>),
    /// Produced by the checker for an expression it could not type; never seen at run time.
    Error,
}

impl Type {
    pub fn list(element: Type) -> Type {
        Type::List(Arc::new(element))
    }

    pub fn map(key: Type, value: Type) -> Type {
        Type::Map(Arc::new(key), Arc::new(value))
    }

    pub fn optional(inner: Type) -> Type {
        Type::Optional(Arc::new(inner))
    }

    pub fn type_of(inner: Type) -> Type {
        Type::Type(Some(Arc::new(inner)))
    }

    /// The type a built-in type name denotes where an expression uses it as a value (`int`,
    /// `list`, `google.protobuf.Duration`): the checker and the planner read one table.
    pub fn denoted(name: &str) -> Option<Type> {
        Some(match name {
            "bool" => Type::Bool,
            "int" => Type::Int,
            "uint" => Type::Uint,
            "double" => Type::Double,
            "string" => Type::String,
            "bytes" => Type::Bytes,
            "list" => Type::list(Type::Dyn),
            "map" => Type::map(Type::Dyn, Type::Dyn),
            "null_type" => Type::Null,
            "type" => Type::Type(None),
            "optional_type" => Type::optional(Type::Dyn),
            "google.protobuf.Duration" => Type::Duration,
            "google.protobuf.Timestamp" => Type::Timestamp,
            _ => return None,
        })
    }

    /// The name `type(x)` reports for a value of this type at run time (`list`, not `list(int)`).
    pub fn runtime_name(&self) -> &str {
        match self {
            Type::Dyn => "dyn",
            Type::Null => "null_type",
            Type::Bool => "bool",
            Type::Int => "int",
            Type::Uint => "uint",
            Type::Double => "double",
            Type::String => "string",
            Type::Bytes => "bytes",
            Type::Duration => "google.protobuf.Duration",
            Type::Timestamp => "google.protobuf.Timestamp",
            Type::List(_) => "list",
            Type::Map(_, _) => "map",
            Type::Type(_) => "type",
            Type::Optional(_) => "optional_type",
            Type::Object(name) => name,
            Type::Param(name) => name,
            Type::Error => "*error*",
        }
    }
}

impl Type {
    /// The type as cel-go's run-time messages name it (`null_type`, `google.protobuf.Duration`).
    pub fn runtime_text(&self) -> String {
        match self {
            Type::List(element) => format!("list({})", element.runtime_text()),
            Type::Map(key, value) => {
                format!("map({}, {})", key.runtime_text(), value.runtime_text())
            }
            Type::Type(Some(inner)) => format!("type({})", inner.runtime_text()),
            Type::Optional(inner) => format!("optional_type({})", inner.runtime_text()),
            other => other.runtime_name().to_owned(),
        }
    }
}

/// The type as cel-go's checker names it in messages (`null`, `duration`, `timestamp`).
impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::List(element) => write!(f, "list({element})"),
            Type::Map(key, value) => write!(f, "map({key}, {value})"),
            Type::Type(Some(inner)) => write!(f, "type({inner})"),
            Type::Optional(inner) => write!(f, "optional_type({inner})"),
            Type::Null => f.write_str("null"),
            Type::Duration => f.write_str("duration"),
            Type::Timestamp => f.write_str("timestamp"),
            // As cel-go's checker spells a type it could not infer.
            Type::Error => f.write_str("!error!"),
            other => f.write_str(other.runtime_name()),
        }
    }
}
