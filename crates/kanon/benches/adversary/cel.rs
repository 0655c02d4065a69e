//! `cel-hostile` and `cel-harmless`: kanon's memory while its CEL rules are hostile, next to the
//! same rules made small, under the same load.
//!
//! Each phase adds six ClusterValidatePolicies (failurePolicy Fail, one CEL rule each) that
//! select Pods labelled `kanon-adversary: cel`, and [`CLIENTS`] keep-alive clients POST
//! `pod-create.json` with that label to `/validate?timeout=10s` back to back until the phase
//! ends. The legitimate client's pod carries no such label: its latency is that of a review
//! the hostile rules do not select, waiting for the evaluation slots they hold.
//!
//! | policy | hostile | harmless |
//! |---|---|---|
//! | `cel-nested-lists` | three nested `map`s over `[1,…,50]`: a list of 125,000 products | over `[1,2,3]` |
//! | `cel-string-doubling` | `['abcdefgh']` doubled by 40 chained `.map(s, s + s)` (8 TiB if it ran) | 3 times |
//! | `cel-regex-long-string` | `'ab'` doubled 19 times (1 MiB), then `!s.matches('^(ab)*a$')` 10 times | 3 times |
//! | `cel-huge-regex` | a pattern built from the object, `^(<name>\|[a-z]{1000}){1,100}$` (past RE2's size) | `{10}){1,10}` |
//! | `cel-deep` | a list literal nested 240 deep (245 is the most the parser accepts there) in three loops of 10 | 3 deep, loops of 3 |
//! | `cel-budget` | 12 variables `lists.range(900000)` (about 27 MiB each), a validation reading each | `lists.range(8)` |
//!
//! The hostile rules end at their bounds: kube-apiserver's per-call cost limit (`operation
//! cancelled: actual cost limit exceeded`; the cost is charged before the call that would pass
//! it, so the string that would pass it is never made), the regular expression's compiled size
//! (`error parsing regexp: expression too large`), and the rule's budget of 10,000,000 units
//! (`validation failed due to running out of cost budget`), which 11 of the 12 variables fit in.
//! Kept until the rule ends, they would hold some 300 MiB per review (a list element costs one
//! unit and takes about 32 bytes: of what the meter counts, the most memory per unit; strings
//! take 10 bytes per unit); kanon's bound on what one rule's variables hold together (2,000,000
//! values) refuses the third, and those after it are dropped as they are made, so the rule
//! holds two while it runs out of budget.
//! `cel-hostile` also measures that: one review through `kanon apply` with the hostile rules and
//! with the harmless ones, the difference of their peak RSS (`wait4`) being what one review can
//! hold, to set against the evaluation slots (`--max-concurrent-reviews`) times it.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout_at};

use crate::ctx::{Ctx, secs};
use crate::http::exchange;
use crate::percentile::percentile;
use crate::{Attack, ms};

/// Concurrent clients sending the labelled review: four times the default slots on 2 CPUs.
const CLIENTS: usize = 16;
/// The label the CEL policies select, set on the load's pod only.
const LABEL: &str = "kanon-adversary";

/// What ends a rule's evaluation, as its denial words it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum End {
    CostLimit,
    RegexSize,
    CostBudget,
    /// kanon's bound on what one rule's variables hold together.
    VariablesHeld,
    Deadline,
    Other,
    /// The denial does not name the policy.
    Absent,
}

impl End {
    fn of(text: &str) -> End {
        if text.contains("actual cost limit exceeded") {
            End::CostLimit
        } else if text.contains("expression too large") {
            End::RegexSize
        } else if text.contains("running out of cost budget") {
            End::CostBudget
        } else if text.contains("the rule's variables hold more than") {
            End::VariablesHeld
        } else if text.contains("operation interrupted") || text.contains("deadline") {
            End::Deadline
        } else {
            End::Other
        }
    }

    fn text(self) -> &'static str {
        match self {
            End::CostLimit => "cost limit",
            End::RegexSize => "regex size",
            End::CostBudget => "cost budget",
            End::VariablesHeld => "variables held",
            End::Deadline => "deadline",
            End::Other => "other",
            End::Absent => "not named",
        }
    }
}

struct Rule {
    name: &'static str,
    /// Where the hostile rule ends.
    bound: End,
    variables: Vec<(String, String)>,
    validations: Vec<String>,
}

/// `[1,2,…,n]`.
fn ints(n: usize) -> String {
    let items: Vec<String> = (1..=n).map(|i| i.to_string()).collect();
    format!("[{}]", items.join(","))
}

/// `[seed]` with its string doubled `times` times (a one-element list).
fn doubled(seed: &str, times: usize) -> String {
    format!("['{seed}']{}", ".map(s, s + s)".repeat(times))
}

fn rule(name: &'static str, bound: End, validation: String) -> Rule {
    Rule {
        name,
        bound,
        variables: Vec::new(),
        validations: vec![validation],
    }
}

/// The six rules, hostile or harmless (the same shapes, small).
fn rules(hostile: bool) -> Vec<Rule> {
    let pick =
        |hostile_value: usize, harmless: usize| if hostile { hostile_value } else { harmless };
    let list = ints(pick(50, 3));
    let loop_list = ints(pick(10, 3));
    let depth = pick(240, 3);
    let variables = 12;
    let range = format!("lists.range({})", pick(900_000, 8));
    vec![
        rule(
            "cel-nested-lists",
            End::CostLimit,
            format!("{list}.map(a, {list}.map(b, {list}.map(c, a * b * c))).size() > 0"),
        ),
        rule(
            "cel-string-doubling",
            End::CostLimit,
            format!("{}[0].size() > 0", doubled("abcdefgh", pick(40, 3))),
        ),
        rule(
            "cel-regex-long-string",
            End::CostLimit,
            format!(
                "{}.all(s, {}.all(i, !s.matches('^(ab)*a$')))",
                doubled("ab", pick(19, 3)),
                ints(10)
            ),
        ),
        rule(
            "cel-huge-regex",
            End::RegexSize,
            format!(
                "object.metadata.name.matches('^(' + object.metadata.name + '|[a-z]{{{}}}){{1,{}}}$')",
                pick(1000, 10),
                pick(100, 10)
            ),
        ),
        rule(
            "cel-deep",
            End::CostLimit,
            format!(
                "{loop_list}.all(a, {loop_list}.all(b, {loop_list}.all(c, {}a + b + c{} != [])))",
                "[".repeat(depth),
                "]".repeat(depth)
            ),
        ),
        Rule {
            name: "cel-budget",
            bound: End::CostBudget,
            variables: (0..variables)
                .map(|i| (format!("r{i}"), range.clone()))
                .collect(),
            validations: (0..variables)
                .map(|i| format!("variables.r{i}.size() > 0"))
                .collect(),
        },
    ]
}

fn policy(rule: &Rule) -> Value {
    let mut cel = json!({
        "validations": rule.validations.iter()
            .map(|e| json!({"expression": e, "message": format!("{} does not hold", rule.name)}))
            .collect::<Vec<_>>(),
    });
    if !rule.variables.is_empty() {
        cel["variables"] = rule
            .variables
            .iter()
            .map(|(name, e)| json!({"name": name, "expression": e}))
            .collect();
    }
    json!({
        "apiVersion": "policy.kanon.dev/v1alpha1",
        "kind": "ClusterValidatePolicy",
        "metadata": {"name": rule.name},
        "spec": {
            "failurePolicy": "Fail",
            "resourceSelectors": [{
                "apiVersion": "v1",
                "kind": "Pod",
                "labelSelector": {"matchLabels": {LABEL: "cel"}},
            }],
            "validateRules": [{"targetOperations": ["CREATE", "UPDATE"], "cel": cel}],
        },
    })
}

fn write_policies(dir: &Path, hostile: bool) -> Result<()> {
    for rule in rules(hostile) {
        let path = dir.join(format!("{}.json", rule.name));
        std::fs::write(&path, serde_json::to_vec_pretty(&policy(&rule))?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Writes the phase's policies beside kanon's own (nothing for the other attacks).
pub(crate) fn add_policies(attack: Attack, dir: &Path) -> Result<()> {
    match attack {
        Attack::CelHostile => write_policies(dir, true),
        Attack::CelHarmless => write_policies(dir, false),
        _ => Ok(()),
    }
}

/// The pod review with the label the CEL policies select.
fn labelled_review(pod: &[u8]) -> Result<Vec<u8>> {
    let mut review: Value = serde_json::from_slice(pod)?;
    let metadata = review
        .pointer_mut("/request/object/metadata")
        .and_then(Value::as_object_mut)
        .context("pod-create.json has request.object.metadata")?;
    let labels = metadata
        .entry("labels")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .context("the pod's labels are an object")?;
    labels.insert(LABEL.into(), "cel".into());
    Ok(serde_json::to_vec(&review)?)
}

/// What one review's denial says of each rule.
fn ends(message: &str, rules: &[Rule]) -> Vec<End> {
    rules
        .iter()
        .map(|rule| {
            let marker = format!("ClusterValidatePolicy/{}:", rule.name);
            let Some(at) = message.find(&marker) else {
                return End::Absent;
            };
            let rest = &message[at..];
            let end = rest[1..]
                .find("; ClusterValidatePolicy/")
                .map_or(rest.len(), |i| i + 1);
            End::of(&rest[..end])
        })
        .collect()
}

#[derive(Default)]
struct Tally {
    reviews: BTreeMap<String, usize>,
    /// (rule index, end) → reviews.
    rules: BTreeMap<(usize, End), usize>,
    latencies: Vec<Duration>,
    /// The first denial that names no bound, cut short.
    other: Option<String>,
}

fn record(tally: &mut Tally, rules: &[Rule], hostile: bool, answer: Option<&[u8]>, status: u16) {
    let key = match answer {
        None => format!("HTTP {status}"),
        Some(body) => {
            let review: Value = serde_json::from_slice(body).unwrap_or_default();
            let response = &review["response"];
            if response["allowed"] == Value::Bool(true) {
                "allowed".to_string()
            } else {
                let message = response["status"]["message"].as_str().unwrap_or_default();
                let ends = ends(message, rules);
                for (i, &end) in ends.iter().enumerate() {
                    *tally.rules.entry((i, end)).or_default() += 1;
                }
                let at_bounds = hostile && ends.iter().zip(rules).all(|(&e, r)| e == r.bound);
                if !at_bounds && tally.other.is_none() {
                    tally.other = Some(message.chars().take(160).collect());
                }
                if at_bounds {
                    "denied, every rule at its bound".to_string()
                } else {
                    "denied otherwise".to_string()
                }
            }
        }
    };
    *tally.reviews.entry(key).or_default() += 1;
}

/// `kanon apply` of one review with the phase's policies: its peak RSS (KiB, from `wait4`) and
/// its output.
fn apply_once(bin: &Path, dir: &Path, hostile: bool, review: &Path) -> Result<(u64, Value)> {
    let which = if hostile { "hostile" } else { "harmless" };
    let policies = dir.join(which);
    std::fs::create_dir_all(&policies)?;
    write_policies(&policies, hostile)?;
    let (out, err) = (
        dir.join(format!("{which}.out")),
        dir.join(format!("{which}.err")),
    );
    let child = Command::new(bin)
        .arg("apply")
        .arg("--policy")
        .arg(&policies)
        .arg("--resource")
        .arg(review)
        .args(["--output", "json", "--program-workers", "0"])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out)?)
        .stderr(std::fs::File::create(&err)?)
        .spawn()
        .with_context(|| format!("starting {} apply", bin.display()))?;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid one; wait4 reaps our own child, which std's `Child`
    // never waits for once dropped.
    let (waited, usage) = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        let waited = libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage);
        (waited, usage)
    };
    if waited < 0 {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    // 0: allowed, 1: denied; anything else is a policy kanon refused (or a crash).
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    if !matches!(code, Some(0 | 1)) {
        bail!(
            "kanon apply with the {} rules: exit {code:?} (status {status}): {}",
            which,
            std::fs::read_to_string(&err).unwrap_or_default().trim()
        );
    }
    let output: Value =
        serde_json::from_slice(&std::fs::read(&out)?).context("kanon apply's JSON output")?;
    Ok((usage.ru_maxrss.max(0) as u64, output))
}

/// One review's worst case: what `kanon apply` peaks at with the hostile rules over the
/// harmless ones, and whether its verdict ends every rule at its bound.
fn per_review(ctx: &Ctx, review: &[u8]) -> Result<(u64, bool)> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("review.json");
    std::fs::write(&path, review)?;
    let (harmless_kb, harmless) = apply_once(&ctx.bin, dir.path(), false, &path)?;
    if harmless.pointer("/0/allowed") != Some(&Value::Bool(true)) {
        bail!("kanon apply denied the review under the harmless rules: {harmless}");
    }
    let (hostile_kb, output) = apply_once(&ctx.bin, dir.path(), true, &path)?;
    let rules = rules(true);
    let messages: Vec<&str> = output
        .pointer("/0/messages")
        .and_then(Value::as_array)
        .map(|m| m.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let at_bounds = rules.iter().all(|rule| {
        messages.iter().any(|m| {
            m.starts_with(&format!("ClusterValidatePolicy/{}:", rule.name))
                && End::of(m) == rule.bound
        })
    });
    Ok((hostile_kb.saturating_sub(harmless_kb), at_bounds))
}

fn mib_of_kb(kb: u64) -> String {
    format!("{:.1} MiB", kb as f64 / 1024.0)
}

/// The phase: [`CLIENTS`] clients sending the labelled review back to back until the
/// deadline; the answers by outcome, and what each denial says of each rule.
pub(crate) async fn run(ctx: Arc<Ctx>, hostile: bool) -> Result<String> {
    let review = labelled_review(&ctx.bodies.pod)?;
    // Before the load, while kanon is idle: one review's worst case, through `kanon apply`.
    let bound = if hostile {
        let (ctx2, review2) = (ctx.clone(), review.clone());
        let (kb, at_bounds) =
            tokio::task::spawn_blocking(move || per_review(&ctx2, &review2)).await??;
        format!(
            "; one review (`kanon apply`) peaks {} above the harmless rules{}, × {} slots = {}",
            mib_of_kb(kb),
            if at_bounds {
                ""
            } else {
                " (**not every rule at its bound there**)"
            },
            ctx.evaluation_slots,
            mib_of_kb(kb * ctx.evaluation_slots as u64)
        )
    } else {
        String::new()
    };
    let request: Arc<[u8]> = ctx
        .webhook
        .request("POST", "/validate?timeout=10s", Some(&review))
        .into();
    let rules = Arc::new(rules(hostile));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let load_started = Instant::now();
    let mut set = JoinSet::new();
    for _ in 0..CLIENTS {
        let (ctx, request, rules, tally) =
            (ctx.clone(), request.clone(), rules.clone(), tally.clone());
        set.spawn(async move {
            let mut conn = None;
            while Instant::now() < ctx.deadline {
                let at = Instant::now();
                let answer = timeout_at(
                    ctx.deadline,
                    exchange(&mut conn, &ctx.webhook, &ctx.tls, &request),
                )
                .await;
                let mut tally = tally.lock().unwrap_or_else(PoisonError::into_inner);
                match answer {
                    Ok(Ok(r)) => {
                        tally.latencies.push(at.elapsed());
                        let body = (r.status == 200).then_some(r.body.as_slice());
                        record(&mut tally, &rules, hostile, body, r.status);
                    }
                    Ok(Err(_)) => *tally.reviews.entry("no answer".into()).or_default() += 1,
                    Err(_) => *tally.reviews.entry("cut at the end".into()).or_default() += 1,
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
    let took = load_started.elapsed();
    let mut tally = std::mem::take(&mut *tally.lock().unwrap_or_else(PoisonError::into_inner));
    tally.latencies.sort();
    let answered = tally.latencies.len();
    let reviews: Vec<String> = tally
        .reviews
        .iter()
        .map(|(k, n)| format!("{k} ×{n}"))
        .collect();
    let mut out = format!(
        "{} rules ({}), {CLIENTS} clients, {} slots: {answered} answered in {} ({:.0}/s; {} / {} / {} ms): {}",
        if hostile { "hostile" } else { "harmless" },
        rules.len(),
        ctx.evaluation_slots,
        secs(took),
        answered as f64 / took.as_secs_f64().max(1e-3),
        ms(percentile(&tally.latencies, 0.5)),
        ms(percentile(&tally.latencies, 0.99)),
        ms(tally.latencies.last().copied().unwrap_or_default()),
        reviews.join(", ")
    );
    if !tally.rules.is_empty() {
        let per_rule: Vec<String> = rules
            .iter()
            .enumerate()
            .map(|(i, rule)| {
                let ends: Vec<String> = tally
                    .rules
                    .range((i, End::CostLimit)..=(i, End::Absent))
                    .map(|(&(_, end), n)| format!("{} ×{n}", end.text()))
                    .collect();
                format!("`{}` {}", rule.name, ends.join(", "))
            })
            .collect();
        out += &format!("; per rule: {}", per_rule.join("; "));
    }
    if let Some(other) = &tally.other {
        out += &format!("; first other denial: `{}`", other.replace('`', "'"));
    }
    Ok(out.replace('|', "\\|") + &bound)
}
