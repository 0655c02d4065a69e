//! `kanon audit`: the objects that already exist in a cluster judged on demand, as the background
//! audit of `kanon serve` judges them ([`crate::auditor`]), what the policies find printed and
//! nothing written.

mod filter;
mod printer;
mod table;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use kanon_api::PolicyKind;
use kanon_cluster::ClusterMetrics;
use kanon_cluster::audit::AuditError;
use kanon_cluster::audit::pace::CpuBudget;
use kanon_cluster::audit::reach::Reach;
use kanon_cluster::audit::scan::{self, AuditKind, Judge, Lister};
use kanon_cluster::reflector::Reflector;
use kanon_engine::ProgramHost;
use kanon_engine::{PolicyPublisher, PolicySet};
use tokio::sync::watch;

use crate::auditor::{AuditPrograms, ReadingArgs};
use crate::cluster::{ConnectionArgs, LookupArgs};
use crate::exceptions::{ExceptionArgs, HonouringPublisher};
use filter::Filter;
use printer::Printer;

/// What `kanon audit` prints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum AuditOutput {
    /// A table of the findings that need attention, then one of the counts per policy.
    #[default]
    Text,
    /// Every finding the filters keep (passes included), as JSON lines: the object, then its
    /// findings.
    Json,
    /// The reports the background audit would write, as YAML.
    Reports,
}

/// Arguments of `kanon audit`.
#[derive(Debug, Args)]
pub struct AuditCommandArgs {
    #[command(flatten)]
    connection: ConnectionArgs,
    #[command(flatten)]
    lookups: LookupArgs,
    #[command(flatten)]
    exceptions: ExceptionArgs,
    /// What to print.
    #[arg(short, long, value_enum, default_value_t = AuditOutput::Text)]
    output: AuditOutput,
    #[command(flatten)]
    filter: Filter,
    #[command(flatten)]
    reading: ReadingArgs,
    /// Judge only what kanon's ValidatingWebhookConfiguration of this name sends it (its
    /// namespaceSelector and objectSelector), as the background audit does when kanon keeps
    /// that configuration (`kanon serve --webhook-configuration`). Default: every object.
    #[arg(long, value_name = "NAME")]
    webhook_configuration: Option<String>,
    /// How long to wait for the policies to be read from the cluster, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    sync_timeout_seconds: u64,
    #[command(flatten)]
    programs: crate::programs::ProgramArgs,
}

/// Takes the first set the reflector publishes.
struct FirstSet(watch::Sender<Option<Arc<PolicySet>>>);

impl PolicyPublisher for FirstSet {
    fn publish(&self, set: PolicySet, _change: &str) {
        self.0.send_replace(Some(Arc::new(set)));
    }

    fn reject(&self, problems: &[String]) {
        for problem in problems {
            eprintln!("warning: {problem}");
        }
    }
}

/// Runs `kanon audit`. Exit status: 0 when nothing the filters keep fails, 1 when a policy finds
/// an object failing (or cannot judge it, or a kind cannot be read), 2 when the cluster cannot
/// be read.
pub fn run(args: &AuditCommandArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(audit(args)) {
        Ok(clean) if clean => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Names on standard error the PolicyExceptions of namespaces this audit does not honour: a
/// kanon serving with those exception namespaces honours them, so what they exempt is a
/// failure here and a skip in its reports. Says nothing when there are none or they cannot be
/// listed because their kind is not installed.
async fn warn_of_unhonoured_exceptions(client: &kube::Client, honoured: &[String]) {
    let api: kube::Api<kanon_api::PolicyException> = kube::Api::all(client.clone());
    let exceptions = match api.list(&kube::api::ListParams::default()).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(status)) if status.code == 404 => return,
        Err(error) => {
            eprintln!(
                "warning: cannot list PolicyExceptions to tell which this audit leaves out: {}",
                match &error {
                    kube::Error::Api(status) => format!("{} ({})", status.message, status.reason),
                    other => other.to_string(),
                }
            );
            return;
        }
    };
    let mut left: std::collections::BTreeMap<String, usize> = Default::default();
    for exception in &exceptions {
        let namespace = exception.metadata.namespace.clone().unwrap_or_default();
        if !honoured.contains(&namespace) {
            *left.entry(namespace).or_default() += 1;
        }
    }
    if left.is_empty() {
        return;
    }
    let count: usize = left.values().sum();
    let namespaces: Vec<&str> = left.keys().map(String::as_str).collect();
    let flags: Vec<String> = namespaces
        .iter()
        .map(|ns| format!("--exception-namespace {ns}"))
        .collect();
    let why = if honoured.is_empty() {
        "no --exception-namespace was given".to_owned()
    } else {
        format!("the exception namespaces are {}", honoured.join(", "))
    };
    eprintln!(
        "warning: {count} PolicyException{} in {} {} not honoured by this audit ({why}): what \
         they exempt is reported as a failure here, while a kanon that honours them reports it \
         as skipped; give {} to honour them as the serving kanon does",
        if count == 1 { "" } else { "s" },
        if namespaces.len() == 1 {
            "namespace"
        } else {
            "namespaces"
        },
        if count == 1 { "is" } else { "are" },
        flags.join(" "),
    );
}

/// Audits the cluster once; whether nothing failed.
async fn audit(args: &AuditCommandArgs) -> Result<bool, String> {
    let sandbox = args.programs.sandbox_config()?;
    let client = crate::cluster::client(&args.connection)
        .await
        .map_err(|e| e.to_string())?;
    warn_of_unhonoured_exceptions(&client, &args.exceptions.namespaces).await;
    let metrics = ClusterMetrics::new();
    let lookups = crate::cluster::lookups(&client, &args.lookups, metrics.clone())
        .map_err(|e| e.to_string())?;
    let set = read_policies(args, &client, &lookups, metrics).await?;
    let programs = sandbox.map(|config| AuditPrograms::new(config, Duration::from_secs(10)));
    let judging = Judging {
        set: set.clone(),
        judge: Judge {
            lookup: lookups.lookup.as_ref(),
            programs: programs.as_ref().map(|p| p as &dyn ProgramHost),
            now: args.exceptions.now.unwrap_or_else(crate::exceptions::clock),
            timeout: scan::OBJECT_TIMEOUT,
        },
        reach: match &args.webhook_configuration {
            Some(name) => Reach::of(&client, name).await.map_err(|e| e.to_string())?,
            None => Reach::everything(),
        },
        filter: &args.filter,
    };
    let kinds = kinds_to_read(&client, &set, &args.filter).await;
    let reading = &args.reading;
    // On demand, the audit is the only work: it is paced by `--audit-qps` alone.
    let mut lister = Lister::new(
        client.clone(),
        reading.audit_page_size,
        reading.page_bytes(),
        reading.audit_qps,
        CpuBudget::unlimited(),
    );
    let mut printer = Printer::new(args.output, reading.max_results(), &args.filter);
    for kind in &kinds {
        judging.kind(kind, &mut lister, &mut printer).await;
    }
    printer.finish()
}

/// The policies in the cluster, as the reflector first reads them.
async fn read_policies(
    args: &AuditCommandArgs,
    client: &kube::Client,
    lookups: &crate::cluster::Lookups,
    metrics: ClusterMetrics,
) -> Result<Arc<PolicySet>, String> {
    let (sender, mut policies) = watch::channel(None);
    let publisher = HonouringPublisher {
        inner: Arc::new(FirstSet(sender)),
        namespaces: args.exceptions.namespaces.clone(),
    };
    let reflector = tokio::spawn(
        Reflector {
            client: client.clone(),
            publisher: Arc::new(publisher),
            namespaces: lookups.namespaces.clone(),
            status: None,
            targets: None,
            kinds: Some(lookups.kinds.clone()),
            metrics,
            exception_namespaces: args.exceptions.namespaces.clone(),
        }
        .run(),
    );
    let timeout = Duration::from_secs(args.sync_timeout_seconds.max(1));
    let set = tokio::time::timeout(timeout, policies.wait_for(Option::is_some))
        .await
        .map_err(|_| format!("the policies were not read from the cluster within {timeout:?}"))?
        .map_err(|_| "the policy reflector stopped".to_string())?
        .clone()
        .ok_or("no policy set");
    reflector.abort();
    Ok(set?)
}

/// The kinds the validate policies of `set` judge that `filter` keeps, with a warning for
/// each kind that cannot be read and each filter that matches nothing.
async fn kinds_to_read(client: &kube::Client, set: &PolicySet, filter: &Filter) -> Vec<AuditKind> {
    let (mut kinds, problems) = scan::kinds(client, set).await;
    for problem in &problems {
        eprintln!("warning: {problem}");
    }
    let policies: Vec<&str> = set
        .policies()
        .iter()
        .filter(|p| {
            matches!(
                p.id.kind,
                PolicyKind::ClusterValidatePolicy | PolicyKind::ValidatePolicy
            )
        })
        .map(|p| &*p.label)
        .collect();
    let judged: Vec<_> = kinds.iter().map(|k| &k.key).collect();
    for warning in filter.unmatched(&policies, &judged) {
        eprintln!("warning: {warning}");
    }
    kinds.retain(|kind| filter.reads_kind(&kind.key, kind.namespaced));
    kinds
}

/// How the objects read are judged, and which.
struct Judging<'a> {
    set: Arc<PolicySet>,
    judge: Judge<'a>,
    reach: Reach,
    filter: &'a Filter,
}

impl Judging<'_> {
    /// Reads every object of `kind` and hands what the policies find to `printer`.
    async fn kind(&self, kind: &AuditKind, lister: &mut Lister, printer: &mut Printer) {
        let mut token: Option<String> = None;
        let mut scan = printer.book.scan(kind.key.clone());
        loop {
            let page = match lister.page(kind, token.as_deref()).await {
                Ok(page) => page,
                Err(error @ AuditError::Expired { .. }) => {
                    eprintln!("warning: {error}; reading it again");
                    scan = printer.book.scan(kind.key.clone());
                    printer.forget(&kind.key);
                    token = None;
                    continue;
                }
                Err(error) => {
                    eprintln!("warning: {error}");
                    printer.unread = true;
                    break;
                }
            };
            let found = kanon_api::Timestamp {
                seconds: self.judge.now,
                nanos: 0,
            };
            let objects = page
                .objects
                .into_iter()
                .filter(|o| self.reach.reaches(o) && self.filter.judges(o))
                .collect();
            // Placed among workloads as the background audit places them, so that the reports
            // printed are the ones it would write (what a controller made from a workload,
            // found as the workload was, counted and not listed).
            self.judge
                .page_judged(&self.set, objects, |subject, lineage, findings| {
                    let findings = self.filter.findings(findings);
                    let folded = scan.add_judged(&printer.book, subject, lineage, &findings, found);
                    printer.object(subject, findings, folded);
                })
                .await;
            match page.next {
                Some(next) => token = Some(next),
                None => break,
            }
        }
        printer.book.finish(scan);
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    #[derive(Debug, Parser)]
    struct Command {
        #[command(flatten)]
        args: super::AuditCommandArgs,
    }

    /// clap's own checks of `kanon audit`'s arguments (unique names among the flattened ones).
    #[test]
    fn the_arguments_are_well_formed() {
        Command::command().debug_assert();
        let parsed = Command::try_parse_from([
            "audit",
            "--exception-namespace",
            "policies",
            "-n",
            "shop",
            "--policy",
            "no-debug",
        ]);
        assert!(parsed.is_ok(), "{parsed:?}");
    }
}
