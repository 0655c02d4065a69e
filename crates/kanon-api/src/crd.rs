//! The CRD manifests, generated from the types: the single source of `crds/` and the chart
//! (`crds/openreports/` and `charts/kanon/crds/openreports/` for the OpenReports kinds).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{
    ClusterOverridePolicy, ClusterReport, ClusterValidatePolicy, OverridePolicy, PolicyException,
    Report, ValidatePolicy,
};

/// The CRDs: the four policy kinds in [`crate::PolicyKind::ALL`] order, then PolicyException.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        ClusterOverridePolicy::crd(),
        OverridePolicy::crd(),
        ClusterValidatePolicy::crd(),
        ValidatePolicy::crd(),
        PolicyException::crd(),
    ]
}

/// The CRDs of the OpenReports kinds kanon writes audit results into: [`Report`], then
/// [`ClusterReport`]. Not kanon's own (not in [`crds`]): a cluster may already have them from
/// another producer (Kyverno, for one), and they are installed only where it does not; their
/// schema accepts what OpenReports' own CRDs accept.
pub fn report_crds() -> Vec<CustomResourceDefinition> {
    vec![Report::crd(), ClusterReport::crd()]
}

/// The file name a CRD is written to: `<group>_<plural>.yaml`, as controller-gen names them.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// One CRD as a YAML document, exactly as committed under `crds/`.
pub fn crds_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(crd)
}
