//! `kanon render`: print the rule programs that a policy's templates render to, and what a Pod
//! policy becomes for workloads: the kinds whose pod templates it reaches and, for workloads
//! given with `--resource`, the Pod their template is judged as.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use kanon_engine::CompiledPolicy;
use kanon_engine::{WORKLOADS, Workload};
use serde_json::Value;

use crate::apply::{BadInput, load_policies};
use crate::inputs::read_documents;

/// Arguments of `kanon render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// Policy files or directories; `-` reads standard input.
    #[arg(long = "policy", short = 'p', required = true, value_name = "PATH")]
    policies: Vec<PathBuf>,
    /// Workloads (Deployments, CronJobs, ...) to show as the Pod each Pod policy judges in
    /// their template.
    #[arg(long = "resource", short = 'r', value_name = "PATH")]
    resources: Vec<PathBuf>,
}

/// Runs `kanon render`: each template's program, headed by the policy and field it comes
/// from; for a Pod policy, the workloads it reaches. Exit status 2 on bad input (with every
/// error), 0 otherwise.
pub fn run(args: &RenderArgs) -> ExitCode {
    match render(args) {
        Ok(out) => {
            print!("{}", out.trim_end());
            println!();
            ExitCode::SUCCESS
        }
        Err(BadInput(problems)) => {
            for p in problems {
                eprintln!("error: {p}");
            }
            ExitCode::from(2)
        }
    }
}

fn render(args: &RenderArgs) -> Result<String, BadInput> {
    let policies = load_policies(&args.policies)?;
    let resources = read_documents(&args.resources).map_err(|e| BadInput::from(e.to_string()))?;
    let mut out = String::new();
    for policy in policies.policies() {
        if policy.rendered.is_empty() {
            let _ = writeln!(out, "# {}: no templates\n", policy.id);
        }
        for rendered in &policy.rendered {
            let _ = writeln!(
                out,
                "# {} {}\n{}\n",
                policy.id,
                rendered.field,
                rendered.source.trim_end()
            );
        }
        pod_templates(policy, &resources, &mut out)?;
    }
    Ok(out)
}

/// What a Pod policy becomes for workloads: the kinds it reaches, and the Pod each given
/// workload's template is judged as.
fn pod_templates(
    policy: &CompiledPolicy,
    resources: &[crate::inputs::Document],
    out: &mut String,
) -> Result<(), BadInput> {
    let reached: Vec<&Workload> = WORKLOADS
        .iter()
        .filter(|w| policy.reaches_template_of(w))
        .collect();
    if reached.is_empty() {
        return Ok(());
    }
    let _ = writeln!(
        out,
        "# {} pod templates (on CREATE and UPDATE; `podTemplates: false` turns this off)",
        policy.id
    );
    for workload in &reached {
        let _ = writeln!(
            out,
            "#   {} {}: {}",
            workload.api_version, workload.kind, workload.field
        );
    }
    let _ = writeln!(
        out,
        "# The rules see each template as a v1 Pod: the template's metadata with the workload's\n\
         # namespace and name, the template's spec; denials name the template.\n"
    );
    for doc in resources {
        let text = |p: &str| doc.value.pointer(p).and_then(Value::as_str).unwrap_or("");
        let Some(workload) = reached
            .iter()
            .find(|w| w.api_version == text("/apiVersion") && w.kind == text("/kind"))
        else {
            continue;
        };
        let namespace = Some(text("/metadata/namespace")).filter(|n| !n.is_empty());
        let Some(pod) = workload.pod(&doc.value, namespace, text("/metadata/name")) else {
            return Err(BadInput::from(format!(
                "{}: {} has no pod template at {}",
                doc.origin(),
                workload.kind,
                workload.field
            )));
        };
        let yaml = serde_saphyr::to_string(&pod).map_err(|e| BadInput::from(e.to_string()))?;
        let _ = writeln!(
            out,
            "# {} on {} {}: the Pod its rules judge\n{}",
            policy.id,
            workload.kind,
            text("/metadata/name"),
            yaml.trim_end()
        );
        out.push('\n');
    }
    Ok(())
}
