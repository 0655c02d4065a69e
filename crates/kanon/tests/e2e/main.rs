//! kanon against a real kube-apiserver: the end-to-end suite.
//!
//! One control plane (etcd, kube-apiserver and kube-controller-manager v1.35, built once per
//! machine from their Go modules; see `crates/kanon-control-plane`) and one `kanon serve`
//! process are started for the whole suite, and every scenario runs against them in turn, in its
//! own namespace. Scenarios that stop kanon or restart the apiserver run last.
//!
//! `cargo test -p kanon --test e2e` runs it (the first run builds the control plane: 5–15 min);
//! `cargo test -p kanon --test e2e -- NAME` runs the scenarios whose name contains NAME.

mod admission;
mod admission_policies;
mod audit;
mod audit_owned;
mod audit_reports;
mod cel;
mod chart;
mod custom_kinds;
mod defaults;
mod env;
mod events;
mod exceptions;
mod fairness;
mod faults;
mod library;
mod lifecycle;
mod limits;
mod map_random;
mod network;
mod random;
mod references;
mod schema;
mod security;
mod tenants;
mod traces;
mod type_checking;

use std::sync::Mutex;

use libtest_mimic::{Arguments, Failed, Trial};

use env::Env;

/// The suite's environment: started by the first scenario, stopped after the last.
enum Suite {
    NotStarted,
    Running(Box<Env>),
    /// Starting failed: every scenario fails with this message instead of trying again.
    Broken(String),
}

static SUITE: Mutex<Suite> = Mutex::new(Suite::NotStarted);

/// One scenario: a name and a function of the environment.
type Scenario = (&'static str, fn(&mut Env));

fn panic_text(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panicked".to_string())
}

fn trial((name, scenario): Scenario) -> Trial {
    Trial::test(name, move || {
        let mut suite = SUITE.lock().unwrap_or_else(|p| p.into_inner());
        if let Suite::NotStarted = *suite {
            *suite = match std::panic::catch_unwind(Env::start) {
                Ok(env) => Suite::Running(Box::new(env)),
                Err(panic) => {
                    Suite::Broken(format!("the suite could not start: {}", panic_text(panic)))
                }
            };
        }
        let env = match &mut *suite {
            Suite::Running(env) => env,
            Suite::Broken(message) => return Err(Failed::from(message.clone())),
            Suite::NotStarted => return Err(Failed::from("the suite did not start")),
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(env)))
            .map_err(|panic| Failed::from(panic_text(panic)))
    })
}

fn main() {
    let mut args = Arguments::from_args();
    // One cluster, one kanon: scenarios run one after another, on this thread.
    args.test_threads = Some(1);
    let scenarios: Vec<Scenario> = [
        admission::SCENARIOS,
        cel::SCENARIOS,
        admission_policies::SCENARIOS,
        map_random::SCENARIOS,
        defaults::SCENARIOS,
        type_checking::SCENARIOS,
        lifecycle::SCENARIOS,
        custom_kinds::SCENARIOS,
        references::SCENARIOS,
        security::SCENARIOS,
        tenants::SCENARIOS,
        network::SCENARIOS,
        library::SCENARIOS,
        exceptions::SCENARIOS,
        audit::SCENARIOS,
        audit_owned::SCENARIOS,
        audit_reports::SCENARIOS,
        events::SCENARIOS,
        limits::SCENARIOS,
        fairness::SCENARIOS,
        schema::SCENARIOS,
        chart::SCENARIOS,
        traces::SCENARIOS,
        faults::SCENARIOS,
    ]
    .concat();
    let conclusion = libtest_mimic::run(&args, scenarios.into_iter().map(trial).collect());
    // Statics are never dropped: stop kanon and the control plane now.
    let suite = std::mem::replace(
        &mut *SUITE.lock().unwrap_or_else(|p| p.into_inner()),
        Suite::NotStarted,
    );
    drop(suite);
    conclusion.exit();
}
