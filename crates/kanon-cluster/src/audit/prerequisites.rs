//! What the audit needs before it can run: the namespace its Lease lives in, and the OpenReports
//! CRDs its reports are (the chart installs both; a cluster set up by hand may lack either).
//! Each one missing is named in one log line when it is found missing and when it is back, and
//! in `kanon_audit_blocked{missing}`, instead of every write failing in the apiserver's words.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::Api;

use crate::apiserver_error::{describe, is_not_found};

/// The OpenReports group version kanon writes.
pub const OPENREPORTS: &str = "openreports.io/v1alpha1";
/// The resources of [`OPENREPORTS`] the audit writes.
const REPORT_RESOURCES: [&str; 2] = ["reports", "clusterreports"];

/// The values of `kanon_audit_blocked`'s `missing` label, one per kind of [`Missing`].
pub const LABELS: [&str; 2] = ["lease_namespace", "openreports_crds"];

/// Something the audit needs that the cluster lacks.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Missing {
    /// The namespace of the audit Lease.
    LeaseNamespace(String),
    /// OpenReports' CRDs (the resources of [`OPENREPORTS`] not served).
    ReportCrds(Vec<&'static str>),
}

impl Missing {
    /// The value of the metric's `missing` label.
    pub fn label(&self) -> &'static str {
        match self {
            Missing::LeaseNamespace(_) => LABELS[0],
            Missing::ReportCrds(_) => LABELS[1],
        }
    }

    /// What is missing and what to do, in one line.
    pub fn explain(&self) -> String {
        match self {
            Missing::LeaseNamespace(namespace) => format!(
                "the namespace {namespace} of the audit Lease does not exist: create it \
                 (`kubectl create namespace {namespace}`) or give kanon another with --namespace; \
                 the audit waits until it exists"
            ),
            Missing::ReportCrds(resources) => {
                let names: Vec<String> = resources
                    .iter()
                    .map(|resource| format!("{resource}.openreports.io"))
                    .collect();
                format!(
                    "the OpenReports CRDs are not installed ({} not served at {OPENREPORTS}): the \
                     audit has nowhere to write its findings; install them (`kubectl apply -f \
                     crds/openreports/`, or the chart's `crds/`); the audit waits until they are \
                     served",
                    names.join(", ")
                )
            }
        }
    }
}

/// What the audit needs that the cluster lacks; an error when it cannot tell (the apiserver
/// unreachable). A namespace kanon may not read is taken to exist (the Lease's own errors say
/// the rest).
pub async fn missing(client: &Client, lease_namespace: &str) -> Result<BTreeSet<Missing>, String> {
    let mut missing = BTreeSet::new();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces.get(lease_namespace).await {
        Ok(_) => {}
        Err(error) if is_not_found(&error) => {
            missing.insert(Missing::LeaseNamespace(lease_namespace.to_owned()));
        }
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        Err(error) => {
            return Err(format!(
                "reading the namespace {lease_namespace}: {}",
                describe(&error)
            ));
        }
    }
    match client.list_api_group_resources(OPENREPORTS).await {
        Ok(list) => {
            let absent: Vec<&'static str> = REPORT_RESOURCES
                .into_iter()
                .filter(|wanted| !list.resources.iter().any(|r| r.name == *wanted))
                .collect();
            if !absent.is_empty() {
                missing.insert(Missing::ReportCrds(absent));
            }
        }
        Err(error) if is_not_found(&error) => {
            missing.insert(Missing::ReportCrds(REPORT_RESOURCES.to_vec()));
        }
        Err(error) => return Err(format!("discovering {OPENREPORTS}: {}", describe(&error))),
    }
    Ok(missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_missing_prerequisite_says_what_to_do() {
        let namespace = Missing::LeaseNamespace("kanon".into());
        assert_eq!(namespace.label(), "lease_namespace");
        assert!(
            namespace
                .explain()
                .contains("kubectl create namespace kanon")
        );
        let crds = Missing::ReportCrds(vec!["reports", "clusterreports"]);
        assert_eq!(crds.label(), "openreports_crds");
        assert!(
            crds.explain()
                .contains("reports.openreports.io, clusterreports.openreports.io not served"),
            "{}",
            crds.explain()
        );
    }
}
