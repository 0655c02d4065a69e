//! Kubernetes Events of `kanon serve` in a cluster: the flags ([`EventsArgs`]), the recorder
//! they start (`kanon_cluster::events`), and the glue that hands the webhook's decisions to it
//! ([`AdmissionEvents`]: kanon-webhook and kanon-cluster do not know each other).

use std::time::Duration;

use clap::{Args, ValueEnum};
use kanon_cluster::events::limit::Rate;
use kanon_cluster::events::{EventKinds, EventMetrics, Events, EventsConfig, SeriesConfig};
use kanon_webhook::observer::{Decided, DecisionObserver};

/// What Events are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EventKind {
    /// On the policy, when it denies a review.
    Deny,
    /// On the policy, when it admits a review with a warning.
    Warn,
    /// On an existing object the background audit finds failing.
    Audit,
}

/// The Events flags of `kanon serve` (cluster mode).
#[derive(Debug, Clone, Args)]
pub struct EventsArgs {
    /// Write Kubernetes Events (events.k8s.io/v1, reason PolicyViolation): `deny` on the
    /// policy when it denies a review, `warn` on the policy when it warns, `audit` on an
    /// existing object the background audit finds failing; comma-separated. `--events` alone
    /// is `deny,audit`. Off by default. Repeated Events are counted in one Event's series and
    /// new ones rate-limited (see --events-qps). Cluster mode only.
    #[arg(
        long,
        value_name = "KINDS",
        num_args = 0..=1,
        require_equals = true,
        value_delimiter = ',',
        default_missing_value = "deny,audit",
        conflicts_with = "policies"
    )]
    events: Vec<EventKind>,
    /// The most Event writes (creations and series updates) per second, all policies together;
    /// more wait, and past a backlog are dropped (counted). Each policy also has a share of
    /// new Events: 10 at once, then one every 10 s; past it a policy's denials are counted in
    /// one combined Event of the policy.
    #[arg(long, value_name = "QPS", default_value_t = 5.0, value_parser = positive_rate)]
    events_qps: f64,
    /// Event writes made at once after a quiet time.
    #[arg(long, value_name = "N", default_value_t = 25, value_parser = clap::value_parser!(u32).range(1..))]
    events_burst: u32,
    /// The least time between two writes of a repeated Event's count (`series.count`), as a
    /// duration.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::auditor::go_duration)]
    events_series_interval: Duration,
}

fn positive_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate > 0.0 && rate.is_finite() => Ok(rate),
        _ => Err(format!(
            "`{text}` is not a rate (a number of writes per second above 0, e.g. 5)"
        )),
    }
}

impl EventsArgs {
    /// What the flags ask to record.
    pub fn kinds(&self) -> EventKinds {
        EventKinds {
            deny: self.events.contains(&EventKind::Deny),
            warn: self.events.contains(&EventKind::Warn),
            audit: self.events.contains(&EventKind::Audit),
        }
    }

    /// Starts the recorder on the current runtime when Events are asked for; audit findings
    /// are remembered for three audit intervals (a day when audits run only on policy
    /// changes), so that an object failing every audit has one Event.
    pub fn start(
        &self,
        client: &kube::Client,
        audit_interval: Option<Duration>,
        metrics: EventMetrics,
    ) -> Option<Events> {
        let kinds = self.kinds();
        if !kinds.any() {
            return None;
        }
        let instance = ["POD_NAME", "HOSTNAME"]
            .into_iter()
            .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
            .unwrap_or_else(|| "kanon".to_string());
        let defaults = SeriesConfig::default();
        let audit_window = match audit_interval {
            Some(interval) => (interval * 3).max(Duration::from_secs(3600)),
            None => Duration::from_secs(24 * 3600),
        };
        let config = EventsConfig {
            kinds,
            instance,
            series: SeriesConfig {
                global: Rate {
                    burst: self.events_burst,
                    per_second: self.events_qps,
                },
                series_interval: self.events_series_interval.max(Duration::from_millis(100)),
                audit_window,
                ..defaults
            },
            ..EventsConfig::default()
        };
        tracing::info!(
            deny = kinds.deny,
            warn = kinds.warn,
            audit = kinds.audit,
            "writing Kubernetes Events"
        );
        Some(Events::start(client.clone(), config, metrics))
    }
}

/// The webhook's decisions handed to the Events recorder.
pub struct AdmissionEvents(pub Events);

impl DecisionObserver for AdmissionEvents {
    fn decided(&self, decided: &Decided<'_>) {
        self.0.admission(decided.request, decided.decision);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// The flags as `kanon serve` has them, beside the one they conflict with.
    #[derive(Debug, Parser)]
    struct Serve {
        #[arg(long)]
        policies: Option<String>,
        #[command(flatten)]
        events: EventsArgs,
    }

    fn parse(args: &[&str]) -> Result<Serve, clap::Error> {
        Serve::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
    }

    fn kinds(args: &[&str]) -> EventKinds {
        parse(args).unwrap().events.kinds()
    }

    #[test]
    fn events_are_off_unless_asked_for_and_the_flag_alone_means_deny_and_audit() {
        assert_eq!(kinds(&[]), EventKinds::default());
        let (deny, warn, audit) = (true, true, true);
        assert_eq!(
            kinds(&["--events"]),
            EventKinds {
                deny,
                warn: false,
                audit
            }
        );
        assert_eq!(
            kinds(&["--events=warn"]),
            EventKinds {
                deny: false,
                warn,
                audit: false
            }
        );
        assert_eq!(
            kinds(&["--events=deny,warn,audit"]),
            EventKinds { deny, warn, audit }
        );
        let parsed = parse(&["--events", "--events-qps", "2.5", "--events-burst", "3"]).unwrap();
        assert_eq!(parsed.events.events_qps, 2.5);
        assert_eq!(parsed.events.events_burst, 3);
        assert_eq!(
            parsed.events.events_series_interval,
            Duration::from_secs(30)
        );
        for bad in [
            &["--events=block"][..],
            &["--events-qps", "0"],
            &["--events-burst", "0"],
            &["--events-series-interval", "soon"],
            &["--policies", "dir", "--events"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
