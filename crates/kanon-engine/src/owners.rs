//! The objects that own a request's object through its controller `ownerReferences`, for
//! PolicyExceptions that select a workload: an exception selecting a Deployment reaches the
//! ReplicaSets and Pods its controllers create from it, one selecting a CronJob its Jobs and
//! their Pods.
//!
//! An owner is followed by uid (a reference to an owner deleted and made again under the same
//! name leads nowhere), and at admission only for objects written by the controllers that own
//! them ([`OwnerTrust`]): anyone may write an `ownerReference`, so a Pod a user writes with one
//! copied from the Deployment's Pods is judged as itself. The audit, which judges objects that
//! exist, follows the chain whoever wrote them.

use std::sync::Arc;

use serde_json::Value;

use crate::lookup::{Lookup, ObjectQuery};
use crate::request::Request;
use crate::workload::Workload;

/// The users kube-controller-manager's workload controllers write as, each with its own
/// service account (`--use-service-account-credentials`, as kubeadm and most distributions
/// run it), and the controller-manager's own user for those that do not.
pub const DEFAULT_CONTROLLERS: [&str; 8] = [
    "system:serviceaccount:kube-system:replicaset-controller",
    "system:serviceaccount:kube-system:deployment-controller",
    "system:serviceaccount:kube-system:job-controller",
    "system:serviceaccount:kube-system:cronjob-controller",
    "system:serviceaccount:kube-system:statefulset-controller",
    "system:serviceaccount:kube-system:daemon-set-controller",
    "system:serviceaccount:kube-system:replication-controller",
    "system:kube-controller-manager",
];

/// Whose objects an exception selecting their owner reaches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnerTrust {
    /// Objects written by one of these users (the request's `userInfo.username`).
    WrittenBy(Arc<[String]>),
    /// Every object (the audit: what exists is judged, whoever wrote it).
    Always,
}

impl Default for OwnerTrust {
    /// [`DEFAULT_CONTROLLERS`].
    fn default() -> Self {
        OwnerTrust::WrittenBy(DEFAULT_CONTROLLERS.iter().map(|u| u.to_string()).collect())
    }
}

/// A kind: `(apiVersion, kind)`.
type Kind = (&'static str, &'static str);

/// Which kinds own which through their controllers: `(owner, owned)`.
const OWNS: [(Kind, Kind); 7] = [
    (("apps/v1", "Deployment"), ("apps/v1", "ReplicaSet")),
    (("apps/v1", "ReplicaSet"), ("v1", "Pod")),
    (("apps/v1", "StatefulSet"), ("v1", "Pod")),
    (("apps/v1", "DaemonSet"), ("v1", "Pod")),
    (("batch/v1", "CronJob"), ("batch/v1", "Job")),
    (("batch/v1", "Job"), ("v1", "Pod")),
    (("v1", "ReplicationController"), ("v1", "Pod")),
];

/// Whether objects of kind `owner` own, through their controllers, objects of kind `owned`,
/// directly or further down (a Deployment owns Pods through its ReplicaSets).
pub(crate) fn owns(owner: (&str, &str), owned: (&str, &str)) -> bool {
    OWNS.iter()
        .any(|(by, of)| *by == owner && (*of == owned || owns(*of, owned)))
}

/// The most owners followed up from an object: a Pod's ReplicaSet's Deployment, a Pod's Job's
/// CronJob.
const DEPTH: usize = 3;

/// The owners of `object` (the request's object), nearest first, as far as the lookups find
/// them; empty when the request's writer is not trusted, or the object has no controller
/// owner. A lookup that fails ends the chain: the exceptions that would have reached through
/// it do not apply.
pub(crate) async fn chain(
    request: &Request,
    object: &Value,
    lookup: &dyn Lookup,
    trust: &OwnerTrust,
) -> Vec<Arc<Value>> {
    let mut owners = Vec::new();
    if controller_of(object).is_none() {
        return owners;
    }
    if let OwnerTrust::WrittenBy(users) = trust {
        let user = request
            .info
            .pointer("/userInfo/username")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !users.iter().any(|trusted| trusted == user) {
            return owners;
        }
    }
    let namespace = request.namespace.as_deref();
    let mut current: Option<Arc<Value>> = None;
    for _ in 0..DEPTH {
        let of = current.as_deref().unwrap_or(object);
        let Some(owner) = controller_of(of) else {
            break;
        };
        let query = ObjectQuery {
            api_version: owner.api_version,
            kind: owner.kind,
            namespace,
            policy: "",
            confined_to: None,
            label_selector: None,
        };
        let found = match lookup.get(query, owner.name).await {
            Ok(Some(found)) => found,
            Ok(None) | Err(_) => break,
        };
        if found.pointer("/metadata/uid").and_then(Value::as_str) != Some(owner.uid) {
            break;
        }
        owners.push(found.clone());
        current = Some(found);
    }
    owners
}

/// The workload whose controller made `object` from its pod template, as its controller
/// `ownerReference` names it: a ReplicaSet's Deployment, a Job's CronJob, a Pod's ReplicaSet,
/// StatefulSet, DaemonSet or Job. The workload's kind, and its name and uid. `None` for an
/// object no workload makes (a ReplicationController's Pods among them: kanon does not judge
/// its template), or without a controller.
pub fn made_from(object: &Value) -> Option<(&'static Workload, &str, &str)> {
    let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
    let made = (text("/apiVersion")?, text("/kind")?);
    let owner = controller_of(object)?;
    let workload = Workload::of(owner.api_version, owner.kind)?;
    OWNS.iter()
        .any(|(by, of)| *by == (workload.api_version, workload.kind) && *of == made)
        .then_some((workload, owner.name, owner.uid))
}

/// An object's controller `ownerReference`.
struct Owner<'v> {
    api_version: &'v str,
    kind: &'v str,
    name: &'v str,
    uid: &'v str,
}

fn controller_of(object: &Value) -> Option<Owner<'_>> {
    let references = object.pointer("/metadata/ownerReferences")?.as_array()?;
    let reference = references
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?;
    let text = |field: &str| reference.get(field).and_then(Value::as_str);
    Some(Owner {
        api_version: text("apiVersion")?,
        kind: text("kind")?,
        name: text("name")?,
        uid: text("uid")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn owned(api_version: &str, kind: &str, owner: (&str, &str), controller: bool) -> Value {
        json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": {"name": "child", "ownerReferences": [{
                "apiVersion": owner.0, "kind": owner.1, "name": "parent", "uid": "u-1",
                "controller": controller,
            }]},
        })
    }

    #[test]
    fn objects_are_made_from_the_workloads_whose_controllers_make_their_kind() {
        for (owner, made) in [
            (("apps/v1", "Deployment"), ("apps/v1", "ReplicaSet")),
            (("apps/v1", "ReplicaSet"), ("v1", "Pod")),
            (("apps/v1", "StatefulSet"), ("v1", "Pod")),
            (("apps/v1", "DaemonSet"), ("v1", "Pod")),
            (("batch/v1", "Job"), ("v1", "Pod")),
            (("batch/v1", "CronJob"), ("batch/v1", "Job")),
        ] {
            let object = owned(made.0, made.1, owner, true);
            let (workload, name, uid) = made_from(&object).expect("made by its controller");
            assert_eq!((workload.api_version, workload.kind), owner);
            assert_eq!((name, uid), ("parent", "u-1"));
        }
        // Not the controller; a kind that controller does not make; a kind whose template
        // kanon does not judge.
        assert!(made_from(&owned("v1", "Pod", ("apps/v1", "ReplicaSet"), false)).is_none());
        assert!(made_from(&owned("v1", "Pod", ("apps/v1", "Deployment"), true)).is_none());
        assert!(made_from(&owned("v1", "Pod", ("v1", "ReplicationController"), true)).is_none());
        assert!(made_from(&json!({"apiVersion": "v1", "kind": "Pod"})).is_none());
    }
}
