//! `load-test queue`: a crowd arrives at an on-sale through the waiting room, across
//! several server processes, and the run measures what the room promises: never more
//! than N shopping (Redis's own count, sampled), admission in arrival order (every pair
//! of buyers where one's join was answered before the other's was sent), the pre-queue
//! admitted ahead of later arrivals, holds refused to buyers never admitted (bots with
//! fresh cookie jars), and the costs: join, poll and hold latency, queue wait.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use futures_util::future::join_all;
use indicatif::{ProgressBar, ProgressStyle};
use rand::Rng;
use reqwest::StatusCode;
use seatlock::http::error::Refusal;
use serde::Serialize;
use sqlx::postgres::PgPoolOptions;

use super::report::Latency;
use super::throughput::{histogram, latency_ms};
use crate::http::HttpBuyer;
use crate::{DEMO_VENUES, ServerProcess, TestApp, event_seats};

/// What to run.
#[derive(Debug, Clone)]
pub struct QueueConfig {
    /// Virtual buyers, each a browser that queues, shops and leaves.
    pub buyers: usize,
    /// The room's size: at most this many shop at once.
    pub shoppers: u64,
    /// Server processes; buyer `i` uses server `i % servers`.
    pub servers: usize,
    /// Buyers arrive spread over this long…
    pub arrive_over: Duration,
    /// …and the on-sale is this far into it (earlier arrivals join the pre-queue).
    pub on_sale_after: Duration,
    /// How long an admitted buyer shops (holds a seat, then buys or leaves).
    pub shop_for: Duration,
    /// How often a queued buyer asks (the queue page's stream asks every 2 s).
    pub poll_every: Duration,
    /// Bots: fresh cookie jars that try to hold without waiting their turn.
    pub bots: usize,
}

/// What a run measured (the JSON of `load-test queue --json`).
#[derive(Debug, Serialize)]
pub struct QueueReport {
    /// Buyers in the run.
    pub buyers: usize,
    /// How many may shop at once: the room's N.
    pub shoppers: u64,
    /// Servers behind the proxy.
    pub servers: usize,
    /// Buyers admitted (all of them, unless some failed).
    pub admitted: u64,
    /// The most admitted at once, sampled from Redis every 10 ms: never above `shoppers`.
    pub max_shopping: u64,
    /// Pairs (a, b): a's join answered before b's was sent, both after the on-sale, yet b
    /// provably admitted first (found admitted before a request found a still queued).
    /// 0 for a FIFO queue.
    pub order_inversions: u64,
    /// Pre-queue buyers provably admitted after a buyer who arrived after the on-sale. 0.
    pub pre_queue_behind_later: u64,
    /// Buyers in the pre-queue (arrived before the on-sale).
    pub pre_queue: u64,
    /// Holds refused `not_admitted` to buyers the room had admitted. 0.
    pub admitted_refused: u64,
    /// Bot holds, and how many the room refused `not_admitted` (all of them).
    pub bot_holds: u64,
    /// Bot holds the room refused `not_admitted`.
    pub bot_holds_refused: u64,
    /// Requests answered with something else than the flow expects, or not at all.
    pub failures: u64,
    /// From the on-sale until the last buyer was admitted, s.
    pub drain_s: f64,
    /// Queue wait from join (or the on-sale, for the pre-queue) to admission, s.
    pub queue_wait_s: Latency,
    /// The first `GET /events/{id}` (the join), ms.
    pub join_ms: Latency,
    /// Each queue poll (`GET /events/{id}/queue`), ms.
    pub poll_ms: Latency,
    /// An admitted buyer's hold (the gate is inside the hold's script), ms.
    pub hold_ms: Latency,
}

/// One buyer's story.
#[derive(Default)]
struct Story {
    join_sent: Option<Instant>,
    join_answered: Option<Instant>,
    /// When the last request that found the buyer still queued was sent: Redis had not
    /// admitted it before then.
    queued_until: Option<Instant>,
    /// When the request that found the buyer admitted was answered: Redis had admitted
    /// it by then.
    admitted_at: Option<Instant>,
    failures: u64,
    refused: u64,
}

/// Runs the crowd against `servers` fresh `seatlock serve` processes (binary
/// `server_bin`) over a fresh database on the Postgres of `admin_url`, seeded with the
/// demo venues, the room on the demo's waiting-room event.
pub async fn run(
    server_bin: &Path,
    admin_url: &str,
    redis_url: &str,
    config: &QueueConfig,
) -> anyhow::Result<QueueReport> {
    let settings = TestApp::builder()
        .venues(DEMO_VENUES)
        .postgres(admin_url.into())
        .redis(redis_url.into())
        .settings()
        .await?;
    let db = PgPoolOptions::new()
        .max_connections(1)
        .connect(&settings.database_url)
        .await?;
    let event: i64 = sqlx::query_scalar("SELECT id FROM events WHERE waiting_room_shoppers > 0")
        .fetch_one(&db)
        .await
        .context("the demo venues have a waiting-room event")?;
    let seats = event_seats(&db, event).await?;
    ensure!(seats.len() >= config.buyers, "more buyers than seats");
    let start = Instant::now();
    let on_sale = start + config.on_sale_after;
    schedule_on_sale(&db, event, config.shoppers, config.on_sale_after).await?;
    let servers = start_servers(server_bin, &settings, config.servers).await?;
    let bases: Arc<Vec<String>> = Arc::new(servers.iter().map(|s| s.address.clone()).collect());

    // Redis's own count of who shops, sampled while the crowd runs.
    let group = seatlock::seats::event_group(&settings.lease_namespace, event);
    let admitted_key = lease::room::admitted_key(&group);
    let done = Arc::new(AtomicBool::new(false));
    let max_shopping = Arc::new(AtomicU64::new(0));
    let monitor = {
        let (done, max) = (done.clone(), max_shopping.clone());
        let mut redis = redis::Client::open(redis_url)?
            .get_multiplexed_async_connection()
            .await?;
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                let n: u64 = redis::cmd("ZCARD")
                    .arg(&admitted_key)
                    .query_async(&mut redis)
                    .await
                    .unwrap_or(0);
                max.fetch_max(n, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };

    let progress = ProgressBar::new(config.buyers as u64);
    progress.set_style(
        ProgressStyle::with_template("admitted {pos}/{len} [{bar:40}] {elapsed}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    let (joins, polls, holds) = (
        Arc::new(std::sync::Mutex::new(histogram())),
        Arc::new(std::sync::Mutex::new(histogram())),
        Arc::new(std::sync::Mutex::new(histogram())),
    );
    let mut rng = rand::rng();
    let arrivals: Vec<Duration> = (0..config.buyers)
        .map(|_| config.arrive_over.mul_f64(rng.random::<f64>()))
        .collect();
    let buyers = arrivals.into_iter().enumerate().map(|(i, arrival)| {
        let (bases, progress) = (bases.clone(), progress.clone());
        let (joins, polls, holds) = (joins.clone(), polls.clone(), holds.clone());
        let (config, seat) = (config.clone(), seats[i]);
        tokio::spawn(async move {
            let base = &bases[i % bases.len()];
            let map = format!("{base}/events/{event}");
            let queue = format!("{map}/queue");
            let mut story = Story::default();
            let mut buyer = HttpBuyer::new();
            tokio::time::sleep_until((start + arrival).into()).await;
            let sent = Instant::now();
            story.join_sent = Some(sent);
            let joined = buyer.get(&map).await;
            story.join_answered = Some(Instant::now());
            record(&joins, sent);
            let mut admitted = match &joined {
                Ok(r) if r.status == StatusCode::OK && !r.body.contains("id=\"queue\"") => true,
                Ok(r) if r.status == StatusCode::OK || r.status == StatusCode::SEE_OTHER => {
                    story.queued_until = Some(sent);
                    false
                }
                _ => {
                    story.failures += 1;
                    false
                }
            };
            while !admitted {
                tokio::time::sleep(config.poll_every).await;
                let sent = Instant::now();
                match buyer.get(&queue).await {
                    Ok(r) if r.status == StatusCode::SEE_OTHER => admitted = true,
                    Ok(r) if r.status == StatusCode::OK => story.queued_until = Some(sent),
                    _ => story.failures += 1,
                }
                record(&polls, sent);
            }
            story.admitted_at = Some(Instant::now());
            progress.inc(1);
            // Shop: the map (a visit renews the admission), one hold, then buy or leave.
            let shown = buyer.get(&map).await;
            if !matches!(shown, Ok(r) if r.status == StatusCode::OK && !r.body.contains("id=\"queue\"")) {
                story.failures += 1;
            }
            let sent = Instant::now();
            match buyer.post(&format!("{map}/seats/{seat}/hold"), &[]).await {
                Ok(r) if r.status == StatusCode::SEE_OTHER => {}
                Ok(r) if r.is_refused(&Refusal::NotAdmitted) => story.refused += 1,
                _ => story.failures += 1,
            }
            record(&holds, sent);
            tokio::time::sleep(config.shop_for).await;
            let done = if i % 4 == 0 {
                buyer
                    .post(&format!("{map}/seats/{seat}/confirm"), &[])
                    .await
            } else {
                buyer.post(&format!("{queue}/leave"), &[]).await
            };
            if !matches!(done, Ok(r) if r.status == StatusCode::SEE_OTHER) {
                story.failures += 1;
            }
            story
        })
    });
    // Bots: fresh cookie jars that hold without waiting (one page for the form token).
    let bots = (0..config.bots).map(|i| {
        let (bases, seat) = (bases.clone(), seats[seats.len() - 1 - i]);
        tokio::spawn(async move {
            let base = &bases[i % bases.len()];
            tokio::time::sleep_until((on_sale + Duration::from_millis(200)).into()).await;
            let mut bot = HttpBuyer::new();
            let _ = bot.get(&format!("{base}/events/{event}/queue")).await;
            let hold = bot
                .post(&format!("{base}/events/{event}/seats/{seat}/hold"), &[])
                .await;
            matches!(hold, Ok(r) if r.is_refused(&Refusal::NotAdmitted))
        })
    });
    let (stories, bots) = tokio::join!(join_all(buyers), join_all(bots));
    done.store(true, Ordering::Relaxed);
    monitor.await?;
    progress.finish();
    let stories: Vec<Story> = stories.into_iter().collect::<Result<_, _>>()?;
    let bots: Vec<bool> = bots.into_iter().collect::<Result<_, _>>()?;
    Ok(report(
        config,
        &stories,
        &bots,
        on_sale,
        max_shopping.load(Ordering::Relaxed),
        [&joins, &polls, &holds],
    ))
}

/// Gives `event` a waiting room of `shoppers` (0: none) and puts its on-sale `after`
/// from now on Postgres's clock (the room opens then); returns the on-sale time.
pub(super) async fn schedule_on_sale(
    db: &sqlx::PgPool,
    event: i64,
    shoppers: u64,
    after: Duration,
) -> sqlx::Result<chrono::DateTime<chrono::Utc>> {
    sqlx::query_scalar(
        "UPDATE events SET waiting_room_shoppers = $1,
                on_sale_at = now() + make_interval(secs => $2) WHERE id = $3
         RETURNING on_sale_at",
    )
    .bind(shoppers as i32)
    .bind(after.as_secs_f64())
    .bind(event)
    .fetch_one(db)
    .await
}

/// `count` `seatlock serve` processes of `binary` with `settings`, started together.
pub(super) async fn start_servers(
    binary: &Path,
    settings: &seatlock::config::Settings,
    count: usize,
) -> anyhow::Result<Vec<ServerProcess>> {
    join_all((0..count).map(|_| ServerProcess::start(binary, settings)))
        .await
        .into_iter()
        .collect()
}

fn record(histogram: &std::sync::Mutex<hdrhistogram::Histogram<u64>>, sent: Instant) {
    let us = sent.elapsed().as_micros().max(1) as u64;
    let _ = histogram
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .record(us);
}

fn report(
    config: &QueueConfig,
    stories: &[Story],
    bots: &[bool],
    on_sale: Instant,
    max_shopping: u64,
    [joins, polls, holds]: [&std::sync::Mutex<hdrhistogram::Histogram<u64>>; 3],
) -> QueueReport {
    let latency = |h: &std::sync::Mutex<hdrhistogram::Histogram<u64>>| {
        latency_ms(&h.lock().unwrap_or_else(|e| e.into_inner()))
    };
    let early = |s: &Story| s.join_answered.is_some_and(|t| t < on_sale);
    let late = |s: &Story| s.join_sent.is_some_and(|t| t > on_sale);
    // b provably admitted before a: b was found admitted before a request found a still
    // queued (the client sees each admission only within an interval).
    let before = |b: &Story, a: &Story| match (b.admitted_at, a.queued_until) {
        (Some(b_in), Some(a_waiting)) => b_in < a_waiting,
        _ => false,
    };
    let (mut order_inversions, mut pre_queue_behind_later) = (0, 0);
    for a in stories {
        for b in stories {
            let a_first = a.join_answered.zip(b.join_sent).is_some_and(|(a, b)| a < b);
            if late(a) && late(b) && a_first && before(b, a) {
                order_inversions += 1;
            }
            if early(a) && late(b) && before(b, a) {
                pre_queue_behind_later += 1;
            }
        }
    }
    let mut waits = histogram();
    for s in stories {
        if let (Some(joined), Some(admitted)) = (s.join_answered, s.admitted_at) {
            let from = joined.max(on_sale);
            let _ =
                waits.record(admitted.saturating_duration_since(from).as_micros().max(1) as u64);
        }
    }
    let wait_s = |q: f64| waits.value_at_quantile(q) as f64 / 1e6;
    let last = stories.iter().filter_map(|s| s.admitted_at).max();
    QueueReport {
        buyers: config.buyers,
        shoppers: config.shoppers,
        servers: config.servers,
        admitted: stories.iter().filter(|s| s.admitted_at.is_some()).count() as u64,
        max_shopping,
        order_inversions,
        pre_queue_behind_later,
        pre_queue: stories.iter().filter(|s| early(s)).count() as u64,
        admitted_refused: stories.iter().map(|s| s.refused).sum(),
        bot_holds: bots.len() as u64,
        bot_holds_refused: bots.iter().filter(|b| **b).count() as u64,
        failures: stories.iter().map(|s| s.failures).sum(),
        drain_s: last.map_or(0.0, |t| t.saturating_duration_since(on_sale).as_secs_f64()),
        queue_wait_s: Latency {
            p50: wait_s(0.5),
            p95: wait_s(0.95),
            p99: wait_s(0.99),
        },
        join_ms: latency(joins),
        poll_ms: latency(polls),
        hold_ms: latency(holds),
    }
}

impl QueueReport {
    /// Whether the room kept its promises in this run.
    pub fn kept(&self, config: &QueueConfig) -> bool {
        self.max_shopping <= config.shoppers
            && self.order_inversions == 0
            && self.pre_queue_behind_later == 0
            && self.admitted_refused == 0
            && self.bot_holds_refused == self.bot_holds
            && self.admitted == self.buyers as u64
    }
}
