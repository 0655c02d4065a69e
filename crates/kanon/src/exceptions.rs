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
    let (set, left) = set.honouring(namespaces);
    for exception in &left {
        eprintln!("warning: {}", not_honoured(exception));
    }
    // What its status would say in a cluster: a typo that exempts nothing.
    for exception in set.exceptions() {
        for (_, missing) in set.exception_problems(exception) {
            eprintln!("warning: {}: {missing}", exception.label);
        }
    }
    set
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
