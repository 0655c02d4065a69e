//! Which PolicyExceptions the offline commands honour, and at what time: as `kanon serve` does,
//! only exceptions in the namespaces named with `--exception-namespace` apply (none by
//! default), and `expiresAt` is judged at the clock's time or the one given with `--now`.

use std::time::SystemTime;

use std::sync::Arc;

use clap::Args;
use kanon_engine::CompiledException;
use kanon_engine::{PolicyPublisher, PolicySet};

/// The exception flags of `kanon apply`.
#[derive(Debug, Clone, Args)]
pub struct ExceptionArgs {
    /// A namespace whose PolicyExceptions are honoured (repeatable). Exceptions in other
    /// namespaces are reported and left out, as `kanon serve` leaves them out.
    #[arg(long = "exception-namespace", value_name = "NAMESPACE")]
    pub namespaces: Vec<String>,
    /// The time at which exceptions' `expiresAt` is judged (RFC 3339); default: now.
    #[arg(long, value_name = "TIME", value_parser = kanon_engine::parse_exception_time)]
    pub now: Option<i64>,
}

/// The clock's time, in Unix seconds.
pub fn clock() -> i64 {
    kanon_engine::unix_seconds(SystemTime::now())
}

/// `set` with only the exceptions of `namespaces`; each left out is reported on standard
/// error, so that an exception nobody honours is not mistaken for one in force.
pub fn honoured(set: PolicySet, namespaces: &[String]) -> PolicySet {
    let (set, warnings) = honoured_with_warnings(set, namespaces);
    for warning in warnings {
        eprintln!("warning: {}", warning.text());
    }
    set
}

/// A warning about one exception: left out, or selecting nothing.
pub struct ExceptionWarning {
    /// The exception (`PolicyException/namespace/name`).
    pub exception: Arc<CompiledException>,
    /// What is wrong, without the exception's name when `named` is false.
    pub message: String,
    /// Whether `message` names the exception itself.
    pub named: bool,
}

impl ExceptionWarning {
    /// The warning as one line, naming the exception.
    pub fn text(&self) -> String {
        if self.named {
            self.message.clone()
        } else {
            format!("{}: {}", self.exception.label, self.message)
        }
    }
}

/// [`honoured`], the warnings returned instead of printed.
pub fn honoured_with_warnings(
    set: PolicySet,
    namespaces: &[String],
) -> (PolicySet, Vec<ExceptionWarning>) {
    let (set, left) = set.honouring(namespaces);
    let mut warnings: Vec<ExceptionWarning> = left
        .iter()
        .map(|exception| ExceptionWarning {
            exception: exception.clone(),
            message: not_honoured(exception),
            named: true,
        })
        .collect();
    // What its status would say in a cluster: a typo that exempts nothing.
    for exception in set.exceptions() {
        for (_, missing) in set.exception_problems(exception) {
            warnings.push(ExceptionWarning {
                exception: exception.clone(),
                message: missing.to_string(),
                named: false,
            });
        }
    }
    (set, warnings)
}

/// Why an exception is left out.
pub fn not_honoured(exception: &CompiledException) -> String {
    format!(
        "{} is not honoured: namespace {} is not an exception namespace (--exception-namespace)",
        exception.label, exception.namespace
    )
}

/// A publisher that puts in force only the exceptions of the operator's exception
/// namespaces, logging the others: what `kanon serve` publishes through.
pub struct HonouringPublisher {
    /// Where the sets go.
    pub inner: Arc<dyn PolicyPublisher>,
    /// The exception namespaces.
    pub namespaces: Vec<String>,
}

impl PolicyPublisher for HonouringPublisher {
    fn publish(&self, set: PolicySet, change: &str) {
        let (set, left) = set.honouring(&self.namespaces);
        for exception in &left {
            tracing::warn!(exception = %exception.label, "{}", not_honoured(exception));
        }
        self.inner.publish(set, change);
    }

    fn reject(&self, problems: &[String]) {
        self.inner.reject(problems);
    }
}
