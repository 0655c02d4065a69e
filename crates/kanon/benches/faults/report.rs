//! A phase's report: its creates, notes and checks, printed as a Markdown table.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::load::{Category, Create, Expect, Sort};
use crate::{LABEL_NAME, ms, offset, percentile};

pub(crate) struct Check {
    pub(crate) what: String,
    pub(crate) ok: bool,
}

pub(crate) struct Report {
    pub(crate) title: String,
    /// When the phase's load began (offsets are printed from it).
    pub(crate) began: Instant,
    pub(crate) creates: Vec<Create>,
    pub(crate) expect: Expect,
    pub(crate) notes: Vec<String>,
    pub(crate) checks: Vec<Check>,
}

impl Report {
    pub(crate) fn new(title: &str, began: Instant, creates: Vec<Create>, expect: Expect) -> Report {
        Report {
            title: title.into(),
            began,
            creates,
            expect,
            notes: Vec::new(),
            checks: Vec::new(),
        }
    }

    pub(crate) fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    pub(crate) fn check(&mut self, what: impl Into<String>, ok: bool) {
        self.checks.push(Check {
            what: what.into(),
            ok,
        });
    }

    pub(crate) fn admitted_as_expected(&self, create: &Create) -> bool {
        create.category == Category::Admitted && self.expect.holds(create)
    }

    /// Forbidden Pods admitted (must be none, whatever the fault).
    pub(crate) fn forbidden_admitted(&self) -> usize {
        self.creates
            .iter()
            .filter(|c| c.sort == Sort::Forbidden && c.category == Category::Admitted)
            .count()
    }

    /// Admitted without kanon's labels at all: the webhook was bypassed.
    pub(crate) fn admitted_unmutated(&self) -> usize {
        self.creates
            .iter()
            .filter(|c| c.category == Category::Admitted && !c.labels.contains_key(LABEL_NAME))
            .count()
    }

    /// Creates that did not end as they should.
    pub(crate) fn wrong(&self) -> Vec<&Create> {
        self.creates
            .iter()
            .filter(|c| !self.as_it_should(c))
            .collect()
    }

    /// Creates scheduled from `from` on that did not end as they should (normal and hang
    /// Pods admitted as expected, forbidden ones denied by the policy).
    pub(crate) fn wrong_from(&self, from: Instant) -> Vec<&Create> {
        self.creates
            .iter()
            .filter(|c| c.scheduled >= from)
            .filter(|c| !self.as_it_should(c))
            .collect()
    }

    pub(crate) fn as_it_should(&self, create: &Create) -> bool {
        match create.sort {
            Sort::Forbidden => {
                create.category == Category::Denied
                    && create.message.contains("is marked forbidden")
            }
            _ => self.admitted_as_expected(create),
        }
    }

    /// The checks every phase makes.
    pub(crate) fn common_checks(&mut self) {
        let forbidden = self.forbidden_admitted();
        self.check(
            format!("no forbidden Pod admitted ({forbidden})"),
            forbidden == 0,
        );
        let unmutated = self.admitted_unmutated();
        self.check(
            format!("no Pod admitted without kanon's labels ({unmutated})"),
            unmutated == 0,
        );
    }

    pub(crate) fn print(&self) {
        println!("## {}", self.title);
        println!();
        for note in &self.notes {
            println!("- {note}");
        }
        if !self.notes.is_empty() {
            println!();
        }
        let sent = self.creates.len();
        let mut all: Vec<Duration> = self.creates.iter().map(|c| c.latency).collect();
        all.sort();
        let admitted = self
            .creates
            .iter()
            .filter(|c| c.category == Category::Admitted)
            .count();
        let expected = self
            .creates
            .iter()
            .filter(|c| self.admitted_as_expected(c))
            .count();
        let rejected = sent - admitted;
        println!(
            "Sent {sent}; admitted {admitted} (mutated as expected: {expected}); rejected or failed {rejected}; all creates p50 {}, p99 {}, max {}.",
            ms(percentile(&all, 0.5)),
            ms(percentile(&all, 0.99)),
            ms(percentile(&all, 1.0))
        );
        println!();
        println!("| Pods | outcome | count | p50 | p99 | max | first message |");
        println!("|---|---|---|---|---|---|---|");
        let mut groups: BTreeMap<(Sort, Category, bool), Vec<&Create>> = BTreeMap::new();
        for create in &self.creates {
            let as_expected = create.category != Category::Admitted || self.expect.holds(create);
            groups
                .entry((create.sort, create.category, as_expected))
                .or_default()
                .push(create);
        }
        for ((sort, category, as_expected), creates) in &groups {
            let mut latencies: Vec<Duration> = creates.iter().map(|c| c.latency).collect();
            latencies.sort();
            let outcome = match (category, as_expected) {
                (Category::Admitted, true) => "admitted, mutated as expected".to_string(),
                (Category::Admitted, false) => "admitted, NOT as expected".to_string(),
                (other, _) => other.label().to_string(),
            };
            let first = creates
                .iter()
                .min_by_key(|c| c.scheduled)
                .map(|c| {
                    if c.category == Category::Admitted {
                        if *as_expected {
                            String::new()
                        } else {
                            format!("labels {:?}", c.labels)
                        }
                    } else {
                        c.message.clone()
                    }
                })
                .unwrap_or_default();
            println!(
                "| {} | {outcome} | {} | {} | {} | {} | {} |",
                sort.label(),
                creates.len(),
                ms(percentile(&latencies, 0.5)),
                ms(percentile(&latencies, 0.99)),
                ms(percentile(&latencies, 1.0)),
                shorten(&first, 160)
            );
        }
        println!();
        let odd: Vec<&Create> = self
            .creates
            .iter()
            .filter(|c| c.category == Category::Admitted && !self.expect.holds(c))
            .collect();
        for c in odd.iter().take(5) {
            println!(
                "Admitted but not as expected: `{}` ({}), scheduled at {}, answered at {}, labels {:?}",
                c.name,
                c.sort.label(),
                offset(self.began, c.scheduled),
                offset(self.began, c.done()),
                c.labels
            );
        }
        if !odd.is_empty() {
            println!();
        }
        for check in &self.checks {
            println!(
                "- {} {}",
                if check.ok { "PASS" } else { "**FAIL**" },
                check.what
            );
        }
        println!();
    }
}

pub(crate) fn shorten(text: &str, max: usize) -> String {
    let text = text.replace('|', "\\|").replace('\n', " ");
    if text.chars().count() <= max {
        text
    } else {
        format!("{}…", text.chars().take(max).collect::<String>())
    }
}

/// The first admitted create (by when its answer came) among those scheduled from `from` on.
pub(crate) fn first_admitted_after(creates: &[Create], from: Instant) -> Option<&Create> {
    creates
        .iter()
        .filter(|c| c.scheduled >= from && c.category == Category::Admitted)
        .min_by_key(|c| c.done())
}

/// The span of the creates of a category: first scheduled, last answered.
pub(crate) fn span(creates: &[Create], category: Category) -> Option<(Instant, Instant, usize)> {
    let of: Vec<&Create> = creates.iter().filter(|c| c.category == category).collect();
    let first = of.iter().map(|c| c.scheduled).min()?;
    let last = of.iter().map(|c| c.done()).max()?;
    Some((first, last, of.len()))
}
