//! The static types kube-apiserver's admission plugins give `request` and `namespaceObject`
//! (its hand-written `kubernetes.AdmissionRequest` and `kubernetes.Namespace`, k8s.io/apiserver's
//! `BuildRequestType` and `BuildNamespaceType`): a field they do not have (`request.namee`,
//! `namespaceObject.metadata.uid`) is refused when an expression is compiled, as the apiserver
//! refuses it, and their fields' types choose overloads as cel-go's checker does.
//!
//! At run time both stay the JSON the request carries; only checking sees these types.

use std::sync::Arc;

use crate::env::{Env, ObjectTypes};
use crate::types::Type;

const REQUEST: &str = "kubernetes.AdmissionRequest";
const NAMESPACE: &str = "kubernetes.Namespace";

/// Where the fields of kube-apiserver's types for `request` and `namespaceObject` are found.
#[derive(Debug)]
struct VariableTypes;

fn object(name: &str) -> Type {
    Type::Object(Arc::from(name))
}

fn strings() -> Type {
    Type::list(Type::String)
}

/// The fields of one of the hand-written types, `None` for another type.
fn fields(type_name: &str) -> Option<Vec<(&'static str, Type)>> {
    let fields = match type_name {
        REQUEST => vec![
            ("kind", object("kubernetes.GroupVersionKind")),
            ("resource", object("kubernetes.GroupVersionResource")),
            ("subResource", Type::String),
            ("requestKind", object("kubernetes.GroupVersionKind")),
            ("requestResource", object("kubernetes.GroupVersionResource")),
            ("requestSubResource", Type::String),
            ("name", Type::String),
            ("namespace", Type::String),
            ("operation", Type::String),
            ("userInfo", object("kubernetes.UserInfo")),
            ("dryRun", Type::Bool),
            ("options", Type::Dyn),
        ],
        "kubernetes.GroupVersionKind" => vec![
            ("group", Type::String),
            ("version", Type::String),
            ("kind", Type::String),
        ],
        "kubernetes.GroupVersionResource" => vec![
            ("group", Type::String),
            ("version", Type::String),
            ("resource", Type::String),
        ],
        "kubernetes.UserInfo" => vec![
            ("username", Type::String),
            ("uid", Type::String),
            ("groups", strings()),
            ("extra", Type::map(Type::String, strings())),
        ],
        NAMESPACE => vec![
            ("metadata", object("kubernetes.NamespaceMetadata")),
            ("spec", object("kubernetes.NamespaceSpec")),
            ("status", object("kubernetes.NamespaceStatus")),
        ],
        "kubernetes.NamespaceSpec" => vec![("finalizers", strings())],
        "kubernetes.NamespaceCondition" => vec![
            ("status", Type::String),
            ("type", Type::String),
            ("lastTransitionTime", Type::Timestamp),
            ("message", Type::String),
            ("reason", Type::String),
        ],
        "kubernetes.NamespaceStatus" => vec![
            (
                "conditions",
                Type::list(object("kubernetes.NamespaceCondition")),
            ),
            ("phase", Type::String),
        ],
        "kubernetes.NamespaceMetadata" => vec![
            ("name", Type::String),
            ("generateName", Type::String),
            ("namespace", Type::String),
            ("labels", Type::map(Type::String, Type::String)),
            ("annotations", Type::map(Type::String, Type::String)),
            // Written so in kube-apiserver's type: `namespaceObject.metadata.uid` is refused.
            ("UID", Type::String),
            ("creationTimestamp", Type::Timestamp),
            ("deletionGracePeriodSeconds", Type::Int),
            ("deletionTimestamp", Type::Timestamp),
            ("generation", Type::Int),
            ("resourceVersion", Type::String),
            ("finalizers", strings()),
        ],
        _ => return None,
    };
    Some(fields)
}

impl ObjectTypes for VariableTypes {
    fn field(&self, type_name: &str, field: &str) -> Option<Option<Type>> {
        let fields = fields(type_name)?;
        Some(
            fields
                .into_iter()
                .find(|(name, _)| *name == field)
                .map(|(_, kind)| kind),
        )
    }
}

/// Declares `request` and `namespaceObject` with kube-apiserver's types.
pub fn declare_variables(env: &mut Env) {
    env.declare_variable("request", object(REQUEST));
    env.declare_variable("namespaceObject", object(NAMESPACE));
    env.add_object_types(Arc::new(VariableTypes));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Env {
        let mut env = Env::kubernetes();
        env.declare_variable("object", Type::Dyn);
        declare_variables(&mut env);
        env
    }

    #[test]
    fn a_field_the_request_does_not_have_is_refused_in_the_apiservers_words() {
        // kube-apiserver 1.35.8 refused a ValidatingAdmissionPolicy with these expressions.
        let error = env().compile("request.namee == 'a'").unwrap_err();
        assert_eq!(
            error.to_string(),
            "ERROR: <input>:1:8: undefined field 'namee'\n | request.namee == 'a'\n | .......^"
        );
        let error = env()
            .compile("namespaceObject.spec.finalizerz.size() > 0")
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "ERROR: <input>:1:21: undefined field 'finalizerz'\n | namespaceObject.spec.finalizerz.size() > 0\n | ....................^"
        );
        assert!(env().compile("namespaceObject.metadata.uid == ''").is_err());
    }

    #[test]
    fn the_fields_kube_apiserver_declares_are_typed() {
        for (source, result) in [
            ("request.userInfo.groups", Type::list(Type::String)),
            (
                "request.userInfo.extra",
                Type::map(Type::String, Type::list(Type::String)),
            ),
            ("request.dryRun", Type::Bool),
            ("request.options", Type::Dyn),
            ("request.kind.group", Type::String),
            ("namespaceObject.metadata.labels['a']", Type::String),
            (
                "namespaceObject.status.conditions[0].lastTransitionTime",
                Type::Timestamp,
            ),
            ("namespaceObject.metadata.UID", Type::String),
        ] {
            let program = env().compile(source).unwrap();
            assert_eq!(program.result_type(), &result, "{source}");
        }
        let error = env().compile("request.kind == 1").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("found no matching overload for '_==_' applied to '(kubernetes.GroupVersionKind, int)'"),
            "{error}"
        );
    }
}
