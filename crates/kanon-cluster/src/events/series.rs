//! Aggregation and limits, as client-go's events broadcaster does them: occurrences of the same
//! Event ([`EventKey`]) within a window become one Event whose `series` (count, last time) is
//! written at most every `series_interval`, not new objects; the end of the window writes the
//! last count and forgets the Event. New Events are limited per policy and all writes
//! together by token buckets, and wait in a bounded backlog. Pure: the time is given and the
//! writes are handed out ([`Series::next_write`]) and reported back ([`Series::finished`]) by
//! the writer task.
//!
//! - A denial or warning past its policy's share of new Events is counted into one combined
//!   Event of that policy (`related` unset, a fixed note), so `series.count` still tells how
//!   many there were.
//! - An audit finding past its policy's share is dropped and not remembered: the next audit
//!   tries again. An audit finding is remembered for `audit_window` since it was last found,
//!   so that an object found failing by every audit has one Event and a count update per
//!   audit; once its Event has expired from the apiserver (`--event-ttl`, one hour by
//!   default), it is not written again while the object keeps failing the same way.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::event::{Action, EventKey};
use super::limit::{Rate, TokenBucket};
use super::metrics::{Dropped, EventMetrics};

/// How the recorder aggregates and limits.
#[derive(Debug, Clone)]
pub struct SeriesConfig {
    /// All writes (creations and series updates) together.
    pub global: Rate,
    /// New Events of one policy.
    pub per_policy: Rate,
    /// The least time between two writes of one Event's series (client-go: on the second
    /// occurrence, then every 30 minutes; kanon: every 30 s while it grows).
    pub series_interval: Duration,
    /// How long an admission Event's series lasts after its last occurrence (client-go: 6
    /// minutes).
    pub series_window: Duration,
    /// How long an audit finding is remembered after the audit last found it.
    pub audit_window: Duration,
    /// The most writes waiting for the apiserver.
    pub backlog: usize,
    /// The most Events remembered at once.
    pub max_series: usize,
}

impl Default for SeriesConfig {
    fn default() -> Self {
        SeriesConfig {
            global: Rate {
                burst: 25,
                per_second: 5.0,
            },
            per_policy: Rate {
                burst: 10,
                per_second: 0.1,
            },
            series_interval: Duration::from_secs(30),
            series_window: Duration::from_secs(6 * 60),
            audit_window: Duration::from_secs(3 * 3600),
            backlog: 256,
            max_series: 4096,
        }
    }
}

/// One occurrence of an Event: a policy's denial or warning of a review, or an audit's finding.
#[derive(Debug, Clone)]
pub struct Occurrence {
    /// Which Event it is.
    pub key: EventKey,
    /// The policy whose share of new Events it takes.
    pub policy: Arc<str>,
    /// When it happened.
    pub at: SystemTime,
}

/// A write for the writer to make.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Create the Event.
    Create {
        /// Which.
        key: EventKey,
        /// First seen (`eventTime`).
        first: SystemTime,
        /// Seen so many times so far.
        count: u64,
        /// Last seen.
        last: SystemTime,
    },
    /// Bring a stored Event's series up to date.
    Patch {
        /// Which.
        key: EventKey,
        /// Where it is stored.
        namespace: String,
        /// Its name.
        name: String,
        /// Seen so many times so far.
        count: u64,
        /// Last seen.
        last: SystemTime,
    },
}

/// What became of a [`Write`].
#[derive(Debug, Clone, PartialEq)]
pub enum Done {
    /// The Event was created under `name`, with `count`.
    Created {
        /// Which.
        key: EventKey,
        /// Its name.
        name: String,
        /// The count written.
        count: u64,
    },
    /// Its series was written with `count`.
    Patched {
        /// Which.
        key: EventKey,
        /// The count written.
        count: u64,
    },
    /// The Event was not there any more (expired, deleted).
    Gone {
        /// Which.
        key: EventKey,
    },
    /// The write failed.
    Failed {
        /// Which.
        key: EventKey,
        /// Whether it was the creation.
        creating: bool,
    },
}

/// The note of a policy's combined Event, which counts what its share of new Events left out.
pub fn combined_note(action: Action) -> &'static str {
    match action {
        Action::Denied => {
            "(combined from similar events): the policy denied more requests than kanon writes \
             Events for one by one; series.count counts them"
        }
        Action::Warned => {
            "(combined from similar events): the policy warned of more requests than kanon \
             writes Events for one by one; series.count counts them"
        }
        Action::Audited => {
            "(combined from similar events): the audit found more objects failing the policy \
             than kanon writes Events for one by one; series.count counts them"
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Stored {
    /// Not created yet (or to be created again).
    Unwritten,
    /// Created under this name.
    At { namespace: String, name: String },
    /// Created, then gone from the apiserver; not written again.
    Gone,
}

#[derive(Debug)]
struct Entry {
    first: SystemTime,
    last_observed: SystemTime,
    /// Occurrences so far.
    count: u64,
    /// The count the apiserver holds (0: none).
    written: u64,
    stored: Stored,
    last_write: SystemTime,
    /// A write of it waits in the backlog.
    queued: bool,
    /// A write of it is being made.
    in_flight: bool,
    /// Its window has passed: it is forgotten once its last count is written.
    ending: bool,
}

impl Entry {
    fn dirty(&self) -> bool {
        matches!(self.stored, Stored::At { .. }) && self.count > self.written
    }
}

fn since(now: SystemTime, then: SystemTime) -> Duration {
    now.duration_since(then).unwrap_or(Duration::ZERO)
}

/// The Events remembered, the writes waiting, and the limits.
#[derive(Debug)]
pub struct Series {
    config: SeriesConfig,
    entries: HashMap<EventKey, Entry>,
    pending: VecDeque<EventKey>,
    global: TokenBucket,
    policies: HashMap<Arc<str>, TokenBucket>,
    metrics: EventMetrics,
}

impl Series {
    /// Nothing remembered, every bucket full at `now`.
    pub fn new(config: SeriesConfig, metrics: EventMetrics, now: SystemTime) -> Self {
        Series {
            global: TokenBucket::new(config.global, now),
            config,
            entries: HashMap::new(),
            pending: VecDeque::new(),
            policies: HashMap::new(),
            metrics,
        }
    }

    /// How many Events are remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Counts `occurrence`: into the Event it belongs to, or as a new Event within its
    /// policy's share, or into the policy's combined Event past it.
    pub fn observe(&mut self, occurrence: Occurrence) {
        let Occurrence { key, policy, at } = occurrence;
        if self.count_into(&key, at) {
            return;
        }
        if self.entries.len() >= self.config.max_series {
            self.metrics.dropped(Dropped::CacheFull, 1);
            return;
        }
        if self.pending.len() >= self.config.backlog {
            self.metrics.dropped(Dropped::BacklogFull, 1);
            return;
        }
        let rate = self.config.per_policy;
        let bucket = self
            .policies
            .entry(policy)
            .or_insert_with(|| TokenBucket::new(rate, at));
        if bucket.take(at) {
            self.insert(key, at);
            return;
        }
        match key.action {
            Action::Audited => self.metrics.dropped(Dropped::RateLimited, 1),
            action => {
                let combined = EventKey {
                    action,
                    regarding: key.regarding,
                    related: None,
                    note: combined_note(action).into(),
                };
                if !self.count_into(&combined, at) {
                    self.insert(combined, at);
                }
            }
        }
    }

    /// Counts an occurrence into the Event `key` if it is remembered.
    fn count_into(&mut self, key: &EventKey, at: SystemTime) -> bool {
        let Some(entry) = self.entries.get_mut(key) else {
            return false;
        };
        entry.count += 1;
        entry.last_observed = entry.last_observed.max(at);
        entry.ending = false;
        self.metrics.aggregated(key.action);
        true
    }

    fn insert(&mut self, key: EventKey, at: SystemTime) {
        self.entries.insert(
            key.clone(),
            Entry {
                first: at,
                last_observed: at,
                count: 1,
                written: 0,
                stored: Stored::Unwritten,
                last_write: at,
                queued: true,
                in_flight: false,
                ending: false,
            },
        );
        self.pending.push_back(key);
    }

    fn queue(&mut self, key: &EventKey) -> bool {
        if self.pending.len() >= self.config.backlog {
            return false;
        }
        if let Some(entry) = self.entries.get_mut(key) {
            entry.queued = true;
            self.pending.push_back(key.clone());
        }
        true
    }

    /// Queues the series updates due at `now`, ends the series whose window has passed and
    /// forgets them once their last count is written, and forgets idle policies' buckets.
    pub fn tick(&mut self, now: SystemTime) {
        let mut due = Vec::new();
        let mut forget = Vec::new();
        for (key, entry) in &mut self.entries {
            if entry.queued || entry.in_flight {
                continue;
            }
            let window = match key.action {
                Action::Audited => self.config.audit_window,
                Action::Denied | Action::Warned => self.config.series_window,
            };
            if since(now, entry.last_observed) >= window {
                entry.ending = true;
            }
            if entry.dirty() {
                if entry.ending || since(now, entry.last_write) >= self.config.series_interval {
                    due.push(key.clone());
                }
            } else if entry.ending {
                forget.push(key.clone());
            }
        }
        for key in forget {
            self.entries.remove(&key);
        }
        // The oldest writes first; a full backlog leaves the rest to a later tick.
        due.sort_by_key(|key| self.entries.get(key).map(|e| e.last_write));
        for key in due {
            if !self.queue(&key) {
                break;
            }
        }
        self.policies.retain(|_, bucket| !bucket.is_full(now));
    }

    /// The next write to make at `now`, if one waits and the global bucket allows it.
    pub fn next_write(&mut self, now: SystemTime) -> Option<Write> {
        loop {
            let key = self.pending.front()?;
            let ready = self
                .entries
                .get(key)
                .is_some_and(|entry| entry.queued && !entry.in_flight);
            if !ready {
                self.pending.pop_front();
                continue;
            }
            if !self.global.take(now) {
                return None;
            }
            let key = self.pending.pop_front()?;
            let entry = self.entries.get_mut(&key)?;
            entry.queued = false;
            let write = match &entry.stored {
                Stored::Unwritten => Write::Create {
                    first: entry.first,
                    count: entry.count,
                    last: entry.last_observed,
                    key,
                },
                Stored::At { namespace, name } => Write::Patch {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    count: entry.count,
                    last: entry.last_observed,
                    key,
                },
                Stored::Gone => continue,
            };
            entry.in_flight = true;
            return Some(write);
        }
    }

    /// How long after `now` the next waiting write may be made; `None` when none waits.
    pub fn token_wait(&self, now: SystemTime) -> Option<Duration> {
        (!self.pending.is_empty()).then(|| self.global.wait(now))
    }

    /// Takes in what became of a write.
    pub fn finished(&mut self, done: Done, now: SystemTime) {
        match done {
            Done::Created { key, name, count } => {
                let Some(entry) = self.entries.get_mut(&key) else {
                    return;
                };
                entry.in_flight = false;
                entry.stored = Stored::At {
                    namespace: key.namespace().to_string(),
                    name,
                };
                entry.written = count;
                entry.last_write = now;
                self.metrics.written(key.action);
            }
            Done::Patched { key, count } => {
                let Some(entry) = self.entries.get_mut(&key) else {
                    return;
                };
                entry.in_flight = false;
                entry.written = entry.written.max(count);
                entry.last_write = now;
                self.metrics.series_updated();
                if entry.ending && !entry.dirty() {
                    self.entries.remove(&key);
                }
            }
            Done::Gone { key } => {
                let Some(entry) = self.entries.get_mut(&key) else {
                    return;
                };
                entry.in_flight = false;
                entry.written = 0;
                match key.action {
                    // Gone means expired (an hour without updates): an object that keeps
                    // failing gets no new Event every audit.
                    Action::Audited => entry.stored = Stored::Gone,
                    // As client-go: a series whose Event was deleted is created again.
                    Action::Denied | Action::Warned => {
                        entry.stored = Stored::Unwritten;
                        let ending = entry.ending;
                        if ending || !self.queue(&key) {
                            self.entries.remove(&key);
                        }
                    }
                }
            }
            Done::Failed { key, creating } => {
                let Some(entry) = self.entries.get_mut(&key) else {
                    return;
                };
                if creating {
                    let lost = entry.count;
                    self.entries.remove(&key);
                    self.metrics.dropped(Dropped::Failed, lost);
                } else {
                    // Tried again after `series_interval`.
                    entry.in_flight = false;
                    entry.last_write = now;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::event::Reference;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + seconds)
    }

    fn config() -> SeriesConfig {
        SeriesConfig {
            global: Rate {
                burst: 100,
                per_second: 100.0,
            },
            ..SeriesConfig::default()
        }
    }

    fn pod(name: &str) -> Reference {
        Reference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some("shop".into()),
            name: name.into(),
            uid: None,
        }
    }

    fn denial(policy: &str, object: &str, seconds: u64) -> Occurrence {
        Occurrence {
            key: EventKey {
                action: Action::Denied,
                regarding: Reference::policy(policy).unwrap(),
                related: Some(pod(object)),
                note: format!("CREATE Pod shop/{object}: no").into(),
            },
            policy: policy.into(),
            at: at(seconds),
        }
    }

    fn finding(object: &str, seconds: u64) -> Occurrence {
        let policy = "ClusterValidatePolicy/p";
        Occurrence {
            key: EventKey {
                action: Action::Audited,
                regarding: Reference {
                    uid: Some(format!("uid-{object}")),
                    ..pod(object)
                },
                related: Reference::policy(policy),
                note: "ClusterValidatePolicy/p: no".into(),
            },
            policy: policy.into(),
            at: at(seconds),
        }
    }

    /// Makes every write waiting at `now`, each answered as `answer` says.
    fn write_all(
        series: &mut Series,
        now: SystemTime,
        mut answer: impl FnMut(&Write) -> Done,
    ) -> Vec<Write> {
        let mut made = Vec::new();
        while let Some(write) = series.next_write(now) {
            let done = answer(&write);
            series.finished(done, now);
            made.push(write);
        }
        made
    }

    fn stored(write: &Write) -> Done {
        match write {
            Write::Create { key, count, .. } => Done::Created {
                key: key.clone(),
                name: format!("{}.1", key.regarding.name),
                count: *count,
            },
            Write::Patch { key, count, .. } => Done::Patched {
                key: key.clone(),
                count: *count,
            },
        }
    }

    fn counts(writes: &[Write]) -> Vec<(&'static str, u64)> {
        writes
            .iter()
            .map(|w| match w {
                Write::Create { count, .. } => ("create", *count),
                Write::Patch { count, .. } => ("patch", *count),
            })
            .collect()
    }

    #[test]
    fn identical_denials_are_one_event_whose_series_is_written_every_interval() {
        let metrics = EventMetrics::new();
        let mut series = Series::new(config(), metrics.clone(), at(0));
        series.observe(denial("ClusterValidatePolicy/p", "web", 0));
        let made = write_all(&mut series, at(0), stored);
        assert_eq!(counts(&made), [("create", 1)]);
        for second in 1..100 {
            series.observe(denial("ClusterValidatePolicy/p", "web", second / 10));
        }
        assert_eq!(metrics.aggregated_count(Action::Denied), 99);
        // Not before the interval since the creation.
        series.tick(at(29));
        assert!(write_all(&mut series, at(29), stored).is_empty());
        series.tick(at(30));
        let made = write_all(&mut series, at(30), stored);
        assert_eq!(counts(&made), [("patch", 100)]);
        let Write::Patch {
            namespace,
            name,
            last,
            ..
        } = &made[0]
        else {
            unreachable!()
        };
        assert_eq!((namespace.as_str(), name.as_str()), ("default", "p.1"));
        assert_eq!(*last, at(9));
        // Nothing new: nothing written.
        series.tick(at(90));
        assert!(write_all(&mut series, at(90), stored).is_empty());
        assert_eq!(metrics.written_count(Action::Denied), 1);
        assert_eq!(metrics.series_count(), 1);
        assert_eq!(series.len(), 1);
    }

    #[test]
    fn the_end_of_the_window_forgets_the_event_after_its_last_count() {
        let mut series = Series::new(config(), EventMetrics::new(), at(0));
        series.observe(denial("ClusterValidatePolicy/p", "web", 0));
        write_all(&mut series, at(0), stored);
        series.observe(denial("ClusterValidatePolicy/p", "web", 10));
        series.tick(at(40));
        assert_eq!(
            counts(&write_all(&mut series, at(40), stored)),
            [("patch", 2)]
        );
        series.observe(denial("ClusterValidatePolicy/p", "web", 50));
        series.tick(at(69));
        assert!(write_all(&mut series, at(69), stored).is_empty());
        series.tick(at(70));
        assert_eq!(
            counts(&write_all(&mut series, at(70), stored)),
            [("patch", 3)]
        );
        // Six minutes after the last one the series ends and is forgotten.
        series.tick(at(50 + 359));
        assert_eq!(series.len(), 1);
        series.tick(at(50 + 360));
        assert!(series.is_empty());
        assert!(write_all(&mut series, at(50 + 360), stored).is_empty());
        // The same denial later is a new Event.
        series.observe(denial("ClusterValidatePolicy/p", "web", 500));
        assert_eq!(
            counts(&write_all(&mut series, at(500), stored)),
            [("create", 1)]
        );
    }

    #[test]
    fn a_count_not_written_yet_is_written_when_the_window_ends() {
        let mut series = Series::new(
            SeriesConfig {
                series_interval: Duration::from_secs(3600),
                ..config()
            },
            EventMetrics::new(),
            at(0),
        );
        series.observe(denial("ClusterValidatePolicy/p", "web", 0));
        write_all(&mut series, at(0), stored);
        series.observe(denial("ClusterValidatePolicy/p", "web", 10));
        series.tick(at(300));
        assert!(write_all(&mut series, at(300), stored).is_empty());
        series.tick(at(370));
        assert_eq!(
            counts(&write_all(&mut series, at(370), stored)),
            [("patch", 2)]
        );
        assert!(series.is_empty());
    }

    #[test]
    fn a_quiet_series_is_forgotten_without_a_write() {
        let mut series = Series::new(config(), EventMetrics::new(), at(0));
        series.observe(denial("ClusterValidatePolicy/p", "web", 0));
        write_all(&mut series, at(0), stored);
        series.tick(at(360));
        assert!(series.is_empty());
        assert!(write_all(&mut series, at(360), stored).is_empty());
    }

    #[test]
    fn denials_past_the_policys_share_are_counted_in_one_combined_event() {
        let metrics = EventMetrics::new();
        let mut series = Series::new(
            SeriesConfig {
                per_policy: Rate {
                    burst: 3,
                    per_second: 0.1,
                },
                ..config()
            },
            metrics.clone(),
            at(0),
        );
        for i in 0..1000 {
            series.observe(denial("ClusterValidatePolicy/p", &format!("web-{i}"), 0));
        }
        // Another policy has its own share.
        series.observe(denial("ClusterValidatePolicy/q", "web-0", 0));
        let made = write_all(&mut series, at(0), stored);
        assert_eq!(made.len(), 5, "{made:#?}");
        let combined: Vec<&Write> = made
            .iter()
            .filter(|w| matches!(w, Write::Create { key, .. } if key.related.is_none()))
            .collect();
        let [Write::Create { key, count, .. }] = combined.as_slice() else {
            panic!("one combined Event: {made:#?}")
        };
        assert_eq!(key.regarding.name, "p");
        assert_eq!(*count, 997);
        assert!(key.note.starts_with("(combined from similar events)"));
        assert_eq!(metrics.aggregated_count(Action::Denied), 996);
        // Ten seconds give the policy one more Event of its own.
        series.observe(denial("ClusterValidatePolicy/p", "web-1000", 10));
        series.observe(denial("ClusterValidatePolicy/p", "web-1001", 10));
        let made = write_all(&mut series, at(10), stored);
        assert_eq!(counts(&made), [("create", 1)]);
        series.tick(at(40));
        assert_eq!(
            counts(&write_all(&mut series, at(40), stored)),
            [("patch", 998)]
        );
    }

    #[test]
    fn writes_wait_for_the_global_bucket() {
        let mut series = Series::new(
            SeriesConfig {
                global: Rate {
                    burst: 2,
                    per_second: 1.0,
                },
                ..config()
            },
            EventMetrics::new(),
            at(0),
        );
        for policy in ["a", "b", "c", "d", "e"] {
            series.observe(denial(&format!("ClusterValidatePolicy/{policy}"), "web", 0));
        }
        assert_eq!(write_all(&mut series, at(0), stored).len(), 2);
        assert_eq!(series.token_wait(at(0)), Some(Duration::from_secs(1)));
        assert_eq!(write_all(&mut series, at(1), stored).len(), 1);
        assert_eq!(write_all(&mut series, at(3), stored).len(), 2);
        assert_eq!(series.token_wait(at(3)), None);
    }

    #[test]
    fn an_object_failing_every_audit_has_one_event_and_a_count_per_audit() {
        let metrics = EventMetrics::new();
        let mut series = Series::new(config(), metrics.clone(), at(0));
        series.observe(finding("bad", 0));
        assert_eq!(
            counts(&write_all(&mut series, at(0), stored)),
            [("create", 1)]
        );
        // The next audits, an hour apart: one series update each.
        for audit in 1..=3 {
            let now = audit * 3600;
            series.observe(finding("bad", now));
            series.tick(at(now + 1));
            let made = write_all(&mut series, at(now + 1), stored);
            assert_eq!(counts(&made), [("patch", audit + 1)]);
        }
        // The Event expired from the apiserver: the object keeps failing, no new Event.
        series.observe(finding("bad", 4 * 3600));
        series.tick(at(4 * 3600 + 1));
        let made = write_all(&mut series, at(4 * 3600 + 1), |write| Done::Gone {
            key: match write {
                Write::Create { key, .. } | Write::Patch { key, .. } => key.clone(),
            },
        });
        assert_eq!(counts(&made), [("patch", 5)]);
        series.observe(finding("bad", 5 * 3600));
        series.tick(at(5 * 3600 + 1));
        assert!(write_all(&mut series, at(5 * 3600 + 1), stored).is_empty());
        assert_eq!(metrics.written_count(Action::Audited), 1);
        // Fixed (no longer found) for the audit window: forgotten; failing again later is new.
        series.tick(at(5 * 3600 + 3 * 3600));
        assert!(series.is_empty());
        series.observe(finding("bad", 9 * 3600));
        assert_eq!(
            counts(&write_all(&mut series, at(9 * 3600), stored)),
            [("create", 1)]
        );
    }

    #[test]
    fn audit_findings_past_the_share_are_dropped_and_tried_by_the_next_audit() {
        let metrics = EventMetrics::new();
        let mut series = Series::new(
            SeriesConfig {
                per_policy: Rate {
                    burst: 2,
                    per_second: 0.0,
                },
                ..config()
            },
            metrics.clone(),
            at(0),
        );
        for object in ["a", "b", "c"] {
            series.observe(finding(object, 0));
        }
        assert_eq!(write_all(&mut series, at(0), stored).len(), 2);
        assert_eq!(metrics.dropped_count(Dropped::RateLimited), 1);
        assert_eq!(series.len(), 2, "the third is not remembered");
    }

    #[test]
    fn a_deleted_denial_event_is_created_again_with_its_count() {
        let mut series = Series::new(config(), EventMetrics::new(), at(0));
        series.observe(denial("ClusterValidatePolicy/p", "web", 0));
        write_all(&mut series, at(0), stored);
        series.observe(denial("ClusterValidatePolicy/p", "web", 5));
        series.tick(at(30));
        let mut gone = true;
        let made = write_all(&mut series, at(30), |write| {
            if std::mem::take(&mut gone) {
                Done::Gone {
                    key: match write {
                        Write::Create { key, .. } | Write::Patch { key, .. } => key.clone(),
                    },
                }
            } else {
                stored(write)
            }
        });
        assert_eq!(counts(&made), [("patch", 2), ("create", 2)]);
    }

    #[test]
    fn what_does_not_fit_is_dropped_and_counted() {
        let metrics = EventMetrics::new();
        let mut series = Series::new(
            SeriesConfig {
                backlog: 2,
                max_series: 3,
                ..config()
            },
            metrics.clone(),
            at(0),
        );
        for object in ["a", "b", "c"] {
            series.observe(denial("ClusterValidatePolicy/p", object, 0));
        }
        assert_eq!(metrics.dropped_count(Dropped::BacklogFull), 1);
        write_all(&mut series, at(0), stored);
        for object in ["c", "d", "e"] {
            series.observe(denial("ClusterValidatePolicy/p", object, 0));
        }
        assert_eq!(metrics.dropped_count(Dropped::CacheFull), 2);
        // A creation the apiserver refuses loses what it counted.
        series.observe(denial("ClusterValidatePolicy/p", "c", 0));
        let made = write_all(&mut series, at(0), |write| match write {
            Write::Create { key, .. } => Done::Failed {
                key: key.clone(),
                creating: true,
            },
            other => stored(other),
        });
        assert_eq!(counts(&made), [("create", 2)]);
        assert_eq!(metrics.dropped_count(Dropped::Failed), 2);
        assert_eq!(series.len(), 2);
        series.tick(at(360));
        assert!(series.is_empty(), "{series:#?}");
    }
}
