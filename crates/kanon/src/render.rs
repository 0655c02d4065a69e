//! `kanon render`: print the rule programs that a policy's templates render to.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::apply::{BadInput, load_policies};

/// Arguments of `kanon render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// Policy files or directories; `-` reads standard input.
    #[arg(long = "policy", short = 'p', required = true, value_name = "PATH")]
    policies: Vec<PathBuf>,
}

/// Runs `kanon render`: each template's program, headed by the policy and field it comes
/// from. Exit status 2 on bad input (with every error), 0 otherwise.
pub fn run(args: &RenderArgs) -> ExitCode {
    let policies = match load_policies(&args.policies) {
        Ok(p) => p,
        Err(BadInput(problems)) => {
            for p in problems {
                eprintln!("error: {p}");
            }
            return ExitCode::from(2);
        }
    };
    let mut out = String::new();
    for policy in policies.policies() {
        if policy.rendered.is_empty() {
            out.push_str(&format!("# {}: no templates\n\n", policy.id));
            continue;
        }
        for rendered in &policy.rendered {
            out.push_str(&format!(
                "# {} {}\n{}\n",
                policy.id,
                rendered.field,
                rendered.source.trim_end()
            ));
            out.push('\n');
        }
    }
    print!("{}", out.trim_end());
    println!();
    ExitCode::SUCCESS
}
