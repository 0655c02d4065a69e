//! Finding 1: a tenant's condition message. Before, a `message` doubling a list 40 times was
//! accepted (`Ready=True`) and one matching Pod made `kanon serve` abort on a failed allocation
//! after ~26 s at 810 MiB, cutting every namespace's writes off. Now that text is refused when
//! it is written, and a message within the language of texts that asks for 800 MB of JSON when
//! it renders (4,000 copies of a 200 KB Pod) is ended by its read budget: the Pod is denied with
//! the rule's own reason.

use anyhow::{Result, ensure};
use kanon_control_plane::kanon::Cluster;
use serde_json::{Value, json};

use crate::world::{Figures, Run, flood, review};

/// The tenant's namespace.
const NAMESPACE: &str = "tenant-messages";
/// The text of finding 1.
const LIST_DOUBLING: &str = "{% set l = namespace(v=[1]) %}{% for i in range(40) %}{% set l.v = l.v + l.v %}{% endfor %}{{ l.v | length }}";

/// A ValidatePolicy of the tenant denying its Pods with `message`.
fn policy(name: &str, message: &str) -> Value {
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ValidatePolicy",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod"}],
            "validateRules": [{"template": {"type": "condition", "condition": {
                "cond": "Exist", "dataRef": {"from": "current", "path": "/metadata/name"},
                "message": message}}}],
        },
    })
}

/// What the phase found: whether the list-doubling text was refused when written, and the
/// flood of Pods whose message reads too much.
pub(crate) struct MessageFigures {
    /// What kanon said of the list-doubling message when it was written.
    pub(crate) refused_at_write: String,
    /// The flood of the reading message.
    pub(crate) flood: Figures,
}

/// Checks the list-doubling message, then floods the reading one.
pub(crate) fn tenant_messages(
    cluster: &Cluster,
    run: &Run,
    reviews: usize,
) -> Result<MessageFigures> {
    cluster.apply(&json!({"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": NAMESPACE}}))?;
    let refused_at_write = refusal(cluster, run, &policy("doubling", LIST_DOUBLING))?;
    let copies = vec!["object"; 4_000].join(", ");
    let reader = policy("reader", &format!("{{{{ [{copies}] | tojson }}}}"));
    let mut review = review(NAMESPACE)?;
    review["request"]["object"]["metadata"]["annotations"] = json!({"big": "x".repeat(200_000)});
    let flood = flood(cluster, run, &reader, &vec![review; reviews])?;
    Ok(MessageFigures {
        refused_at_write,
        flood,
    })
}

/// What kanon's policy compiler says of `policy` (`kanon apply`, offline: the same check the
/// cluster's kanon makes when the policy is written): the line naming the message's field, or
/// `accepted`.
fn refusal(cluster: &Cluster, run: &Run, policy: &Value) -> Result<String> {
    let dir = cluster.dir().join("tenant-messages");
    std::fs::create_dir_all(&dir)?;
    let (policy_file, pod_file) = (dir.join("policy.json"), dir.join("pod.json"));
    std::fs::write(&policy_file, serde_json::to_vec(policy)?)?;
    std::fs::write(
        &pod_file,
        serde_json::to_vec(&review(NAMESPACE)?["request"]["object"])?,
    )?;
    let out = std::process::Command::new(&run.binary)
        .arg("apply")
        .arg("--policy")
        .arg(&policy_file)
        .arg("--resource")
        .arg(&pod_file)
        .output()?;
    let said = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.code().is_some(),
        "kanon apply did not exit by itself: {}",
        out.status
    );
    Ok(if out.status.success() {
        "accepted".to_string()
    } else {
        said.lines()
            .find(|l| l.contains("condition.message"))
            .unwrap_or("refused")
            .trim()
            .to_string()
    })
}
