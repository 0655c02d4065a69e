//! The `kanon` command line.

mod allocator;
mod apply;
mod audit;
mod auditor;
mod certificate_files;
mod cluster;
mod convert;
mod events;
mod exceptions;
mod glob;
mod inputs;
mod namespaces;
mod objects;
mod policy_dir;
mod poll;
mod programs;
mod render;
mod serve;
mod suite;
mod traces;

use std::process::ExitCode;

/// mimalloc: the request path allocates and frees many small values per review (the parsed
/// object, the answer), which glibc's allocator serves markedly slower (BENCHMARKS.md). Built
/// without transparent huge pages: with them every arena page touched costs 2 MiB of resident
/// memory (10,000 policies peaked at 66 MiB instead of 49 MiB). `kanon serve` gives freed
/// memory back to the OS on a schedule of its own ([`allocator`]).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

/// kanon: Kubernetes admission policies as custom resources.
#[derive(Debug, Parser)]
#[command(name = "kanon", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Evaluate policies against resources offline and print each verdict and patch.
    ///
    /// Exit status: 0 when every resource is allowed, 1 when any is denied, 2 on bad input.
    Apply(apply::ApplyArgs),
    /// Serve the admission webhooks over HTTPS: policies from the cluster, or from files
    /// (`--policies DIR`).
    Serve(Box<serve::ServeArgs>),
    /// Judge the objects that already exist in a cluster with its validate policies, as the
    /// background audit of `kanon serve` does, and print what they find; writes nothing.
    ///
    /// Each object is judged as the CREATE that made it would be today: the same policies,
    /// exceptions (`--exception-namespace`) and lookups as admission. `--policy`,
    /// `--namespace`, `--kind` and `--result` narrow what every output prints (text, json,
    /// reports), and the exit status follows what they leave.
    ///
    /// Exit status: 0 when no finding left is a failure, 1 when one is (or a policy cannot
    /// judge an object, or a kind cannot be read), 2 when the cluster cannot be read.
    Audit(Box<audit::AuditCommandArgs>),
    /// Run policy test suites (`kanon-test.yaml` files) and report each case, as text, JSON,
    /// JUnit XML or GitHub annotations.
    ///
    /// Exit status: 0 when every case passes; 1 when a case fails (or, with `--strict`, a policy
    /// has a warning); 2 when an input cannot be read or no case is selected.
    Test(suite::TestArgs),
    /// Print the rule programs that the policies' templates render to.
    Render(render::RenderArgs),
    /// Print the CustomResourceDefinitions of the four policy kinds.
    Crds,
    /// Convert ValidatingAdmissionPolicies and MutatingAdmissionPolicies with their bindings
    /// into kanon cluster policies.
    ///
    /// Each (policy, binding) pair becomes one ClusterValidatePolicy (a
    /// ValidatingAdmissionPolicy's) or ClusterOverridePolicy (a MutatingAdmissionPolicy's),
    /// named `<policy>-<binding>` (`<policy>` when the binding has the policy's name), with the
    /// policy's CEL copied as written and its matching translated: resource rules to resource
    /// selectors of the built-in kinds and target operations, the namespace selectors of the
    /// policy and the binding to one namespace selector, and what selectors cannot say exactly
    /// (subresources, wildcards, scope, resource names, excluded rules, the binding's resource
    /// rules, an object selector on UPDATE) to match conditions named `kanon-convert-...`,
    /// before the policy's own.
    ///
    /// The converted policies decide the same requests the same way, but word their messages
    /// as kanon does: `ClusterValidatePolicy/<name>: <message>` where kube-apiserver says
    /// `ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request:
    /// <message>` (warnings and audit annotation keys likewise), and under `failurePolicy:
    /// Ignore` kanon warns about an error it ignores, where kube-apiserver says nothing; the
    /// YAML output says so in a comment at its top.
    ///
    /// Refused, with the field named: `paramKind` and `paramRef` (kanon's rules have no params;
    /// they read other objects through `references`), a policy without a binding, a binding
    /// whose policy is not given.
    ///
    /// Exit status: 0 when every pair is converted, 2 on bad input or what cannot be converted.
    Convert(convert::ConvertArgs),
    /// Run hand-written programs for `kanon serve`, `kanon apply` and `kanon test` (started by
    /// them, over standard input and output).
    #[command(hide = true)]
    ProgramWorker,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve(_) | Command::ProgramWorker) {
        end_quietly_on_a_closed_pipe();
    }
    match cli.command {
        Command::Apply(args) => apply::run(&args),
        Command::Audit(args) => audit::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Test(args) => suite::run(&args),
        Command::Render(args) => render::run(&args),
        Command::Convert(args) => convert::run(&args),
        Command::ProgramWorker => serve::run_worker(),
        Command::Crds => match print_crds() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(2)
            }
        },
    }
}

/// Makes a command whose reader goes away (`kanon apply ... | head`) end quietly, as other
/// command-line tools do, instead of panicking on a failed print: it exits with the status a
/// shell gives a process SIGPIPE ended (141). SIGPIPE itself stays ignored (Rust's default):
/// restoring its default action would let a write to a program worker that has just died (of
/// its memory limit, say) kill `kanon apply`, `test` or `audit` outright.
fn end_quietly_on_a_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let text = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if text.starts_with("failed printing to stdout") && text.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

fn print_crds() -> anyhow::Result<()> {
    let docs = kanon_api::crds()
        .iter()
        .map(kanon_api::crds_yaml)
        .collect::<Result<Vec<_>, _>>()?;
    print!("{}", docs.join("---\n"));
    Ok(())
}
