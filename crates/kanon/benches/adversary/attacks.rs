//! The attacks: connections held open in their several shapes, and what each attack does and
//! reports in its table row.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, sleep_until, timeout, timeout_at};

use crate::ctx::{Ctx, secs};
use crate::http::{Response, Stream, answer_text, exchange, get, tcp_connect, tls_handshake};
use crate::kanon::stderr_lines;
use crate::percentile::percentile;
use crate::sampler::kanon_side_open;
use crate::{Attack, FD_LIMIT, MAX_BODY, STALLED_SENT};

/// A connection held open by an attack.
struct HoldSpec {
    tls: bool,
    receive_buffer: Option<u32>,
    /// Written at once after the handshake.
    first: Arc<[u8]>,
    /// Then written a byte at a time, one per interval.
    drip: Option<(Arc<[u8]>, Duration)>,
    /// Watch for kanon's answer or close; without it nothing is ever read.
    read: bool,
    /// The local ports of the connections, for [`kanon_side_open`].
    ports: Mutex<HashSet<u16>>,
}

#[derive(Debug)]
enum End {
    /// Could not connect, or the handshake failed.
    Failed(String),
    /// Still open at the deadline (as far as this side can tell).
    Open,
    /// kanon answered or closed it, this long after the connection was made.
    Closed {
        after: Duration,
        status: Option<u16>,
    },
}

struct Held {
    end: End,
    /// When the TCP connection was made.
    established: Option<Instant>,
    sent_first: bool,
}

/// The status of an HTTP response that starts `bytes`, if they are one.
fn status_of(bytes: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(bytes.get(..12)?).ok()?;
    text.strip_prefix("HTTP/1.")?.get(2..5)?.parse().ok()
}

async fn hold(ctx: Arc<Ctx>, spec: Arc<HoldSpec>, setup: Arc<Semaphore>) -> Held {
    let failed = |e: String| Held {
        end: End::Failed(e),
        established: None,
        sent_first: false,
    };
    // The setup (connect and handshake) is limited in concurrency; what follows is not.
    let Ok(Ok(permit)) = timeout_at(ctx.deadline, setup.acquire()).await else {
        return failed("no turn to connect before the deadline".into());
    };
    let tcp = match tcp_connect(ctx.webhook.addr, spec.receive_buffer).await {
        Ok(tcp) => tcp,
        Err(e) => return failed(format!("{e:#}")),
    };
    if let Ok(local) = tcp.local_addr() {
        spec.ports
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(local.port());
    }
    let established = Instant::now();
    let stream: Stream = if spec.tls {
        match tls_handshake(tcp, ctx.webhook.addr, &ctx.tls).await {
            Ok(stream) => stream,
            Err(e) => return failed(format!("{e:#}")),
        }
    } else {
        Box::new(tcp)
    };
    drop(permit);
    let (mut reader, mut writer) = tokio::io::split(stream);
    let sent_first = AtomicBool::new(false);
    let write = async {
        writer.write_all(&spec.first).await?;
        writer.flush().await?;
        sent_first.store(true, Ordering::Relaxed);
        if let Some((bytes, every)) = &spec.drip {
            for byte in bytes.iter() {
                sleep(*every).await;
                writer.write_all(&[*byte]).await?;
                writer.flush().await?;
            }
        }
        std::future::pending::<std::io::Result<()>>().await
    };
    let read = async {
        if !spec.read {
            return std::future::pending().await;
        }
        let mut buf = [0u8; 512];
        match reader.read(&mut buf).await {
            Ok(n) => status_of(&buf[..n]),
            Err(_) => None,
        }
    };
    let end = tokio::select! {
        status = read => End::Closed { after: established.elapsed(), status },
        // The write side fails only when kanon has closed (or reset) the connection.
        _ = write => End::Closed { after: established.elapsed(), status: None },
        () = sleep_until(ctx.deadline) => End::Open,
    };
    Held {
        end,
        established: Some(established),
        sent_first: sent_first.load(Ordering::Relaxed),
    }
}

/// `n` connections of `spec`, at most `concurrency` connecting at once, each held until the
/// deadline or until kanon closes it; all dropped on return.
async fn hold_many(
    ctx: &Arc<Ctx>,
    n: usize,
    concurrency: usize,
    spec: &Arc<HoldSpec>,
) -> Vec<Held> {
    let setup = Arc::new(Semaphore::new(concurrency));
    let mut set = JoinSet::new();
    for _ in 0..n {
        set.spawn(hold(ctx.clone(), spec.clone(), setup.clone()));
    }
    let mut held = Vec::with_capacity(n);
    while let Some(result) = set.join_next().await {
        if let Ok(h) = result {
            held.push(h);
        }
    }
    held
}

fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// "opened n/N in t s; closed by kanon: k (after a–b s, median m; HTTP 408 ×k); open at the
/// end: o".
fn summarize(held: &[Held], n: usize, started: Instant) -> String {
    let failures: Vec<&str> = held
        .iter()
        .filter_map(|h| match &h.end {
            End::Failed(e) => Some(e.as_str()),
            _ => None,
        })
        .collect();
    let mut closed: Vec<Duration> = Vec::new();
    let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
    for h in held {
        if let End::Closed { after, status } = h.end {
            closed.push(after);
            let key = status.map_or("no answer".to_string(), |s| format!("HTTP {s}"));
            *statuses.entry(key).or_default() += 1;
        }
    }
    closed.sort();
    let open = held.iter().filter(|h| matches!(h.end, End::Open)).count();
    let mut out = format!("opened {}/{n}", n - failures.len());
    if let Some(last) = held.iter().filter_map(|h| h.established).max() {
        out += &format!(" in {}", secs(last - started));
    }
    if let Some(first) = failures.first() {
        out += &format!(" (failed: {}, e.g. {first})", failures.len());
    }
    out += &format!("; closed by kanon: {}", closed.len());
    if !closed.is_empty() {
        let statuses: Vec<String> = statuses.iter().map(|(s, k)| format!("{s} ×{k}")).collect();
        out += &format!(
            " (after {}–{}, median {}; {})",
            secs(closed[0]),
            secs(closed[closed.len() - 1]),
            secs(percentile(&closed, 0.5)),
            statuses.join(", ")
        );
    }
    out + &format!("; open at the end: {open}")
}

/// One review on a new connection.
async fn one_review(ctx: &Ctx, path: &str, body: &[u8]) -> Result<Response> {
    let mut conn = None;
    let request = ctx.webhook.request("POST", path, Some(body));
    exchange(&mut conn, &ctx.webhook, &ctx.tls, &request).await
}

async fn big_array(ctx: Arc<Ctx>) -> Result<String> {
    let body = &ctx.bodies.big_array;
    let start = Instant::now();
    let answer = timeout_at(
        ctx.deadline,
        one_review(&ctx, "/validate?timeout=10s", body),
    )
    .await;
    let took = start.elapsed();
    // Then watch memory until the end.
    sleep_until(ctx.deadline).await;
    Ok(format!(
        "one review of {} (`spec.junk`: ~{}M zeros): {} after {}",
        mib(body.len()),
        body.len() / 2 / 1_000_000,
        answer_text(answer),
        secs(took)
    ))
}

async fn dribble(ctx: Arc<Ctx>) -> Result<String> {
    let every = Duration::from_millis(100);
    let bytes = (ctx.deadline - ctx.started).as_millis() as usize / 100 + 10;
    let mut drip = vec![b' '; bytes];
    drip[0] = b'{';
    let spec = Arc::new(HoldSpec {
        tls: true,
        receive_buffer: None,
        first: ctx
            .webhook
            .head("POST", "/validate?timeout=1000h", Some(MAX_BODY))
            .into(),
        drip: Some((drip.into(), every)),
        read: true,
        ports: Mutex::default(),
    });
    let held = hold_many(&ctx, 1, 1, &spec).await;
    let observed = secs(ctx.deadline - ctx.started);
    Ok(match held.first().map(|h| &h.end) {
        Some(End::Closed { after, status }) => format!(
            "declared {}, 1 byte / 100 ms: kanon closed it after {}{}",
            mib(MAX_BODY),
            secs(*after),
            status.map_or(String::new(), |s| format!(" (HTTP {s})"))
        ),
        Some(End::Open) => format!(
            "declared {}, 1 byte / 100 ms: still open after {observed}",
            mib(MAX_BODY)
        ),
        Some(End::Failed(e)) => format!("could not connect: {e}"),
        None => "the connection task failed".to_string(),
    })
}

async fn stalled(ctx: Arc<Ctx>, path: &str) -> Result<String> {
    let n = 50;
    let mut first = ctx.webhook.head("POST", path, Some(MAX_BODY));
    first.extend_from_slice(&ctx.bodies.big_array[..STALLED_SENT]);
    let spec = Arc::new(HoldSpec {
        tls: true,
        receive_buffer: None,
        first: first.into(),
        drip: None,
        read: true,
        ports: Mutex::default(),
    });
    let held = hold_many(&ctx, n, 16, &spec).await;
    let sent = held.iter().filter(|h| h.sent_first).count();
    Ok(format!(
        "`{path}`, {} of {} each: sent by {sent}/{n}; {}",
        mib(STALLED_SENT),
        mib(MAX_BODY),
        summarize(&held, n, ctx.started)
    ))
}

async fn flood(ctx: Arc<Ctx>, n: usize, spec: HoldSpec, what: &str) -> Result<String> {
    let lines = stderr_lines(&ctx.stderr);
    let concurrency = if spec.tls { 16 } else { 64 };
    let held = hold_many(&ctx, n, concurrency, &Arc::new(spec)).await;
    Ok(format!(
        "{n} {what}: {}; kanon's stderr +{} lines",
        summarize(&held, n, ctx.started),
        stderr_lines(&ctx.stderr).saturating_sub(lines)
    ))
}

fn idle_spec(first: &[u8]) -> HoldSpec {
    HoldSpec {
        tls: false,
        receive_buffer: None,
        first: first.into(),
        drip: None,
        read: true,
        ports: Mutex::default(),
    }
}

/// The first 43 bytes of a ClientHello: record header (claiming 512 bytes), handshake header,
/// version and random; the rest never comes.
fn partial_client_hello() -> Vec<u8> {
    let mut hello = vec![
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ];
    hello.extend_from_slice(&[0x5a; 32]);
    hello
}

async fn slowloris(ctx: Arc<Ctx>) -> Result<String> {
    let mut head = ctx.webhook.head("GET", "/healthz", None);
    // Never completes: the padding field outlasts the attack.
    head.truncate(head.len() - 2);
    head.extend_from_slice(b"X-Padding: ");
    head.extend(std::iter::repeat_n(b'a', 200));
    let spec = HoldSpec {
        tls: true,
        receive_buffer: None,
        first: Arc::from(Vec::new()),
        drip: Some((head.into(), Duration::from_secs(1))),
        read: true,
        ports: Mutex::default(),
    };
    flood(ctx, 200, spec, "TLS connections, head at 1 byte/s").await
}

async fn huge_timeout(ctx: Arc<Ctx>) -> Result<String> {
    let mut answers: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..3 {
        let answer = timeout(
            Duration::from_secs(5),
            one_review(
                &ctx,
                "/validate?timeout=15000000000000000000s",
                &ctx.bodies.pod,
            ),
        )
        .await;
        *answers.entry(answer_text(answer)).or_default() += 1;
        sleep(Duration::from_secs(1)).await;
    }
    sleep_until(ctx.deadline).await;
    let text = std::fs::read_to_string(&ctx.stderr).unwrap_or_default();
    let not_json: Vec<&str> = text
        .lines()
        .filter(|l| !matches!(serde_json::from_str::<Value>(l), Ok(Value::Object(_))))
        .collect();
    // The first two lines with text: a panic's location, then its message.
    let first: Vec<String> = not_json
        .iter()
        .filter(|l| !l.trim().is_empty())
        .take(2)
        .map(|l| l.chars().take(70).collect::<String>())
        .collect();
    let answers: Vec<String> = answers.iter().map(|(a, k)| format!("{a} ×{k}")).collect();
    let mut out = format!(
        "3 reviews with `?timeout=15000000000000000000s`: {}; stderr (`--log-format json`): {} of {} lines not JSON",
        answers.join(", "),
        not_json.len(),
        text.lines().count()
    );
    if !first.is_empty() {
        let first = first.join(" ⏎ ").replace('`', "'").replace('|', "\\|");
        out += &format!(", the first: `{first}`");
    }
    Ok(out)
}

async fn unread_responses(ctx: Arc<Ctx>) -> Result<String> {
    let n = 30;
    let spec = Arc::new(HoldSpec {
        tls: true,
        // Small, so that kanon's answer of ~8 MiB cannot drain into this side's buffers.
        receive_buffer: Some(4096),
        first: ctx
            .webhook
            .request("POST", "/validate?timeout=10s", Some(&ctx.bodies.big_uid))
            .into(),
        drip: None,
        read: false,
        ports: Mutex::default(),
    });
    // kanon's ends of these connections, polled while they are held: open, and with an
    // answer still waiting in kanon's send queue.
    let watch = async {
        let mut series: Vec<(Instant, (usize, usize))> = Vec::new();
        while Instant::now() < ctx.deadline {
            let peers = spec
                .ports
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            series.push((Instant::now(), kanon_side_open(ctx.port, &peers)));
            sleep(Duration::from_millis(100)).await;
        }
        series
    };
    let (held, series) = tokio::join!(hold_many(&ctx, n, 8, &spec), watch);
    let sent = held.iter().filter(|h| h.sent_first).count();
    let peak = series.iter().map(|&(_, (k, _))| k).max().unwrap_or(0);
    let pending_peak = series.iter().map(|&(_, (_, p))| p).max().unwrap_or(0);
    let (at_end, pending_at_end) = series.last().map_or((0, 0), |&(_, k)| k);
    let peak_at = series
        .iter()
        .position(|&(_, (k, _))| k == peak)
        .unwrap_or(0);
    let released = series[peak_at..]
        .iter()
        .find(|&&(_, (k, _))| k == 0)
        .map(|&(at, _)| at - ctx.started);
    let held_text = match (peak, released) {
        (0, _) => "kanon held none".to_string(),
        (_, Some(at)) => format!("kanon held up to {peak}, all closed by +{}", secs(at)),
        (_, None) => format!(
            "kanon held up to {peak}, still {at_end} at the end (+{})",
            secs(ctx.deadline - ctx.started)
        ),
    };
    let held_text = format!(
        "{held_text}; with an answer unread in kanon's send queue: up to {pending_peak}, {pending_at_end} at the end"
    );
    Ok(format!(
        "{n} reviews of {} (uid of ~8 MiB, echoed), answers never read (SO_RCVBUF 4 KiB): sent by {sent}/{n}; {held_text}",
        mib(ctx.bodies.big_uid.len())
    ))
}

async fn junk_kinds(ctx: Arc<Ctx>) -> Result<String> {
    let mut conn = None;
    let mut answers: BTreeMap<String, usize> = BTreeMap::new();
    let mut send = async |body: &[u8]| {
        let request = ctx
            .webhook
            .request("POST", "/validate?timeout=10s", Some(body));
        let answer = timeout_at(
            ctx.deadline,
            exchange(&mut conn, &ctx.webhook, &ctx.tls, &request),
        )
        .await;
        *answers.entry(answer_text(answer)).or_default() += 1;
    };
    for i in 0..400 {
        send(&ctx.bodies.of_kind(&format!("Junk{i}"))).await;
    }
    for _ in 0..20 {
        send(&ctx.bodies.deployment).await;
    }
    let metrics = timeout(
        Duration::from_secs(5),
        get(&ctx.metrics, &ctx.tls, "/metrics"),
    )
    .await
    .context("/metrics did not answer in 5 s")?
    .context("/metrics")?;
    let text = String::from_utf8_lossy(&metrics.body);
    let kinds: HashSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("kanon_admission_requests_total{"))
        .filter_map(|l| l.split("kind=\"").nth(1)?.split('"').next())
        .collect();
    let verdict = if kinds.contains("Deployment") {
        "`kind=\"Deployment\"` has its own series"
    } else if kinds.contains("other") {
        "Deployment was counted as `kind=\"other\"`"
    } else {
        "no Deployment series and no `other`"
    };
    let answers: Vec<String> = answers.iter().map(|(a, k)| format!("{a} ×{k}")).collect();
    Ok(format!(
        "400 made-up kinds then 20 Deployments ({}): {verdict}; {} distinct `kind` labels",
        answers.join(", "),
        kinds.len()
    ))
}

async fn big_bodies(ctx: Arc<Ctx>) -> Result<String> {
    let clients = 32;
    let request: Arc<[u8]> = ctx
        .webhook
        .request("POST", "/validate?timeout=10s", Some(&ctx.bodies.big_array))
        .into();
    let answers = Arc::new(Mutex::new(BTreeMap::<String, usize>::new()));
    let mut set = JoinSet::new();
    for _ in 0..clients {
        let (ctx, request, answers) = (ctx.clone(), request.clone(), answers.clone());
        set.spawn(async move {
            let mut conn = None;
            while Instant::now() < ctx.deadline {
                let answer = timeout_at(
                    ctx.deadline,
                    exchange(&mut conn, &ctx.webhook, &ctx.tls, &request),
                )
                .await;
                let key = match answer {
                    Ok(Ok(r)) => format!("HTTP {}", r.status),
                    Ok(Err(_)) => "errors".to_string(),
                    Err(_) => "cut at the end".to_string(),
                };
                *answers
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(key)
                    .or_default() += 1;
            }
        });
    }
    while set.join_next().await.is_some() {}
    let answers: Vec<String> = answers
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|(a, k)| format!("{a} ×{k}"))
        .collect();
    Ok(format!(
        "{clients} clients sending reviews of {} back to back: {}",
        mib(ctx.bodies.big_array.len()),
        answers.join(", ")
    ))
}

pub(crate) async fn attack(attack: Attack, ctx: Arc<Ctx>) -> Result<String> {
    match attack {
        Attack::BigArray => big_array(ctx).await,
        Attack::DribbleLongTimeout => dribble(ctx).await,
        Attack::StalledBodies => stalled(ctx, "/validate?timeout=1000h").await,
        Attack::StalledBodiesDefault => stalled(ctx, "/validate").await,
        Attack::FdExhaustion => {
            let spec = idle_spec(&[]);
            let text = flood(ctx, 1100, spec, "idle TCP connections").await?;
            Ok(format!(
                "soft RLIMIT_NOFILE {FD_LIMIT}, reviews on new connections; {text}"
            ))
        }
        Attack::HugeTimeout => huge_timeout(ctx).await,
        Attack::UnreadResponses => unread_responses(ctx).await,
        Attack::JunkKinds => junk_kinds(ctx).await,
        Attack::BigBodiesProbes => big_bodies(ctx).await,
        Attack::IdleFlood => flood(ctx, 2000, idle_spec(&[]), "idle TCP connections").await,
        Attack::HalfHandshake => {
            let spec = idle_spec(&partial_client_hello());
            flood(ctx, 500, spec, "partial ClientHellos").await
        }
        Attack::Slowloris => slowloris(ctx).await,
        Attack::CelHarmless => crate::cel::run(ctx, false).await,
        Attack::CelHostile => crate::cel::run(ctx, true).await,
    }
}
