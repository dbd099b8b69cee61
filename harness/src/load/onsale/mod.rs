//! `load-test onsale` (`make onsale`): the opening minute of an on-sale. A crowd arrives
//! in a burst at the on-sale time, most of it to look (the arena's map and its live
//! stream), a share to buy (1-4 seats with best available, then the checkout), some
//! hanging up, some retrying, a few bots with fresh cookie jars ([`crowd`]); against
//! `make scale`'s servers (N `seatlock serve` processes behind HAProxy configured by
//! `scripts/scale.sh config`), through the waiting room when the event has one. It
//! checks what Postgres accepted (no seat sold twice, no buyer over the limit) and
//! measures what the crowd saw, sampled over time for the plots ([`report`]).
//!
//! The client is one process on the same machine: it raises its own open-file limit
//! ([`raise_fd_limit`]) so that every person can hold a connection, and it reports what
//! the servers (and the proxy before them) leave unanswered rather than hiding it.

pub mod crowd;
pub mod report;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, Utc};
use futures_util::future::join_all;
use indicatif::ProgressBar;
use rand::Rng;
use serde::Serialize;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use super::queue::{schedule_on_sale, start_servers};
use crate::{DEMO_VENUES, HaProxy, ServerProcess, TestApp, check};
use crowd::{Person, Role, Sale, Story, Tally};
use report::Sample;

/// What to run (the flags of `load-test onsale`).
#[derive(Debug, Clone)]
pub struct OnsaleConfig {
    /// People in the crowd (lookers and buyers; the bots come on top).
    pub buyers: usize,
    /// The share of them who buy (the rest look).
    pub buy_share: f64,
    /// The share who hang up: a looker closes the tab after a few seconds, a buyer once
    /// their seats are held (those holds lapse at the hold TTL).
    pub hang_up_share: f64,
    /// The share who try again after a refusal or no answer…
    pub retry_share: f64,
    /// …and how many times.
    pub retries: u32,
    /// Bots, each trying [`crowd::BOT_JARS`] fresh cookie jars.
    pub bots: usize,
    /// Server processes behind the proxy.
    pub servers: usize,
    /// The servers' `--max-seats-per-buyer` (a buyer wants 1 to this, at most 4).
    pub max_seats_per_buyer: u64,
    /// The servers' hold TTL.
    pub hold_ttl: Duration,
    /// The arena event's waiting room: at most this many shopping (0: no room).
    pub waiting_room_shoppers: u64,
    /// The servers' `--admission-ttl-ms`: how long an admitted visitor's turn lasts.
    pub admission_ttl: Duration,
    /// How long a queued visitor waits to ask the queue page again when it names no
    /// refresh.
    pub poll_every: Duration,
    /// The crowd arrives spread over this long…
    pub arrive_over: Duration,
    /// …and the on-sale is this far into it (earlier buyers wait on the map, or in the
    /// pre-queue, and press the button at the on-sale).
    pub on_sale_after: Duration,
    /// How long a looker watches.
    pub look_for: Duration,
    /// The run ends after this long even if buyers are still queued or retrying.
    pub max_run: Duration,
    /// One person in this many records the fan-out on their stream.
    pub probe_every: usize,
}

/// What a run found: the JSON of `load-test onsale --json`, exactly these fields.
/// Latencies are of the requests answered within [`crowd::ANSWER_WITHIN`]; `None`
/// (JSON `null`) where nothing was measured.
#[derive(Debug, Clone, Serialize)]
pub struct OnsaleReport {
    /// People in the crowd (bots not counted).
    pub buyers: u64,
    /// Seats sold (orders in Postgres).
    pub sold: u64,
    /// From the on-sale to the last seat's order, s; `None` if seats were left.
    pub sold_out_s: Option<f64>,
    /// Seats with more than one accepted sale (Postgres, as the race lab checks). 0.
    pub double_sales: u64,
    /// Buyers with more orders than `--max-seats-per-buyer`. 0.
    pub over_limit: u64,
    /// `POST /events/{id}/best-available`, ms.
    pub hold_p99_ms: Option<f64>,
    /// `POST /events/{id}/checkout`, ms.
    pub confirm_p99_ms: Option<f64>,
    /// `GET /events/{id}` and its checkout page, ms.
    pub page_p99_ms: Option<f64>,
    /// Requests sent, of every kind (streams counted once each).
    pub requests: u64,
    /// Requests with no answer within 10 s (a failed connection counts), and streams
    /// whose opening snapshot did not come within 10 s.
    pub unanswered: u64,
    /// The most streams open at once (their snapshot arrived).
    pub streams_peak: u64,
    /// From a buyer's hold being answered to its first `held` update reaching an open
    /// stream (the probes'), ms; an update that beat the buyer's own answer counts 0.
    pub fanout_p99_ms: Option<f64>,
    /// Queue wait, from joining (or the on-sale, for the pre-queue) to admission, s.
    pub queue_wait_p50_s: Option<f64>,
    /// Queue wait at the 99th percentile, s.
    pub queue_wait_p99_s: Option<f64>,
    /// The queue page (`GET /events/{id}/queue`, each poll), ms.
    pub queue_p99_ms: Option<f64>,
    /// The seed the event's pre-queue was drawn from (`events.queue_seed`), with a room.
    pub queue_seed: Option<i64>,
    /// Redis's `total_commands_processed` per second (scripts' own calls included), the
    /// most between two samples.
    pub redis_commands_per_s_peak: f64,
    /// Redis's `used_memory`, the most sampled, MB.
    pub redis_peak_mb: f64,
    /// The servers' resident memory together (VmRSS), the most sampled, MB.
    pub server_rss_mb: f64,
}

/// A report and what its HTML page shows beside the numbers.
pub struct OnsaleRun {
    /// The numbers, as in `report.json`.
    pub report: OnsaleReport,
    /// What the run was asked for.
    pub config: OnsaleConfig,
    /// Seats on sale.
    pub capacity: u64,
    /// The crowd's timeline, one sample every [`SAMPLE_EVERY`].
    pub samples: Vec<Sample>,
    /// Each kind of request: answered, latency, unanswered.
    pub requests: Vec<report::RequestRow>,
    /// Bots' best-available requests granted, and refused `not_admitted`.
    pub bot_holds: u64,
    /// Bots' best-available requests refused `not_admitted`.
    pub bot_refused: u64,
}

/// How often the sampler reads the counters, Postgres, Redis and the servers' memory.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// Raises this process's open-file limit to at least `wanted` (a crowd holds a
/// connection per person, and more while a page loads beside a stream): the soft limit
/// up to the hard one, and the hard one too where allowed (root). Returns the limit now
/// in force. Child processes (the servers) inherit it.
pub fn raise_fd_limit(wanted: u64) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur >= wanted {
            return limit.rlim_cur;
        }
        let raised = libc::rlimit {
            rlim_cur: wanted,
            rlim_max: limit.rlim_max.max(wanted),
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
            return wanted;
        }
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
            limit.rlim_cur
        } else {
            0
        }
    }
}

/// Runs the on-sale: a fresh database on the Postgres of `admin_url` seeded with the
/// demo venues, `config.servers` processes of `server_bin` on `redis_url` behind
/// HAProxy, the crowd on the arena's event; `progress` shows it going.
pub async fn run(
    server_bin: &Path,
    admin_url: &str,
    redis_url: &str,
    config: &OnsaleConfig,
    progress: &ProgressBar,
) -> anyhow::Result<OnsaleRun> {
    let cfg = config.clone();
    let settings = TestApp::builder()
        .venues(DEMO_VENUES)
        .postgres(admin_url.into())
        .redis(redis_url.into())
        .with(move |s| {
            s.max_seats_per_buyer = cfg.max_seats_per_buyer;
            s.hold_ttl_ms = cfg.hold_ttl.as_millis() as u64;
            s.admission_ttl_ms = cfg.admission_ttl.as_millis() as u64;
        })
        .settings()
        .await?;
    let db = PgPoolOptions::new()
        .max_connections(2)
        .connect(&settings.database_url)
        .await?;
    let event: i64 = sqlx::query_scalar(
        "SELECT e.id FROM events e JOIN venues v ON v.id = e.venue_id WHERE v.slug = 'harbour-arena'",
    )
    .fetch_one(&db)
    .await
    .context("the demo venues have the arena")?;
    let capacity: i64 = sqlx::query_scalar("SELECT count(*) FROM event_seats WHERE event_id = $1")
        .bind(event)
        .fetch_one(&db)
        .await?;
    // The on-sale, on Postgres's clock (the waiting room opens then) and on ours.
    let start = Instant::now();
    let on_sale = start + config.on_sale_after;
    let on_sale_at = schedule_on_sale(
        &db,
        event,
        config.waiting_room_shoppers,
        config.on_sale_after,
    )
    .await?;
    let servers = start_servers(server_bin, &settings, config.servers).await?;
    let backends: Vec<&str> = servers.iter().map(|s| s.address.as_str()).collect();
    let proxy = HaProxy::start(&backends).await?;
    let pids: Vec<u32> = servers.iter().filter_map(ServerProcess::pid).collect();

    let (close, closing) = tokio::sync::watch::channel(false);
    let (sell_out, sold_out) = tokio::sync::watch::channel(false);
    let sale = Arc::new(Sale {
        base: proxy.address.clone(),
        event,
        on_sale,
        room: config.waiting_room_shoppers > 0,
        poll_every: config.poll_every,
        look_for: config.look_for,
        max_seats: config.max_seats_per_buyer,
        streams: reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()?,
        browsers: crowd::browsers(),
        tally: Tally::new(),
        closing,
        sold_out,
    });
    let crowd = draw_crowd(config);
    progress.set_length(crowd.len() as u64);
    let sampler = tokio::spawn(sample(
        sale.clone(),
        db.clone(),
        redis::Client::open(redis_url)?
            .get_multiplexed_async_connection()
            .await?,
        pids,
        (start, capacity as u64),
        (progress.clone(), sell_out),
    ));

    // Everyone arrives; when every buyer and bot is done (or the run's time is up), a
    // moment for the last updates to reach the streams, then the lookers go home.
    let (mut buying, mut looking) = (Vec::new(), Vec::new());
    for person in crowd {
        let (sale, progress) = (sale.clone(), progress.clone());
        let looker = person.role == Role::Looker;
        let task = tokio::spawn(async move {
            let story = crowd::live(&sale, person, start).await;
            progress.inc(1);
            story
        });
        if looker {
            looking.push(task);
        } else {
            buying.push(task);
        }
    }
    let buyers_done = join_all(buying);
    tokio::pin!(buyers_done);
    let mut stories = tokio::select! {
        stories = &mut buyers_done => stories,
        _ = tokio::time::sleep(config.max_run) => {
            let _ = close.send(true);
            buyers_done.await
        }
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _ = close.send(true);
    stories.extend(join_all(looking).await);
    let stories: Vec<Story> = stories.into_iter().collect::<Result<_, _>>()?;
    let (samples, redis_peak_bytes, rss_peak_kb, commands_peak) = sampler.await??;
    drop(proxy);
    drop(servers);

    let report = judge(
        &db,
        event,
        config,
        &sale.tally,
        &stories,
        (on_sale_at, capacity as u64),
        (redis_peak_bytes, rss_peak_kb, commands_peak),
    )
    .await?;
    Ok(OnsaleRun {
        report,
        config: config.clone(),
        capacity: capacity as u64,
        samples,
        requests: requests(&sale.tally),
        bot_holds: sale.tally.bot_holds.load(Ordering::Relaxed),
        bot_refused: sale.tally.bot_refused.load(Ordering::Relaxed),
    })
}

/// The crowd, drawn at random from `config`: arrivals uniform over `arrive_over`, buyers
/// (with 1 to 4 seats each, within the limit) and lookers by `buy_share`, hang-ups and
/// retriers by their shares, every `probe_every`-th person a probe, then the bots.
fn draw_crowd(config: &OnsaleConfig) -> Vec<Person> {
    let mut rng = rand::rng();
    let most = config.max_seats_per_buyer.clamp(1, 4);
    let mut crowd: Vec<Person> = (0..config.buyers)
        .map(|i| {
            let role = if rng.random::<f64>() < config.buy_share {
                Role::Buyer {
                    quantity: rng.random_range(1..=most),
                }
            } else {
                Role::Looker
            };
            Person {
                role,
                arrival: config.arrive_over.mul_f64(rng.random()),
                hangs_up_after: (rng.random::<f64>() < config.hang_up_share)
                    .then(|| Duration::from_millis(rng.random_range(1_000..10_000))),
                retries: if rng.random::<f64>() < config.retry_share {
                    config.retries
                } else {
                    0
                },
                probe: i % config.probe_every.max(1) == 0,
            }
        })
        .collect();
    crowd.extend((0..config.bots).map(|_| Person {
        role: Role::Bot,
        arrival: config.on_sale_after,
        hangs_up_after: None,
        retries: 0,
        probe: false,
    }));
    crowd
}

/// Samples the crowd every [`SAMPLE_EVERY`] until the run closes: seats sold (Postgres),
/// seats held per second, open streams, queue length, the window's latencies, Redis's
/// memory and command rate, and the servers' memory (`/proc/PID/status`). Returns the
/// samples and the peaks of Redis's memory (bytes), the servers' RSS (kB, summed) and
/// Redis's commands per second. Says `sell_out` once every seat is sold.
async fn sample(
    sale: Arc<Sale>,
    db: PgPool,
    mut redis: redis::aio::MultiplexedConnection,
    pids: Vec<u32>,
    (start, capacity): (Instant, u64),
    (progress, sell_out): (ProgressBar, tokio::sync::watch::Sender<bool>),
) -> anyhow::Result<(Vec<Sample>, u64, u64, f64)> {
    let tally = &sale.tally;
    let (mut samples, mut redis_peak, mut rss_peak) = (Vec::new(), 0u64, 0u64);
    let mut closing = sale.closing.clone();
    let mut last_held = (Instant::now(), 0u64);
    let mut last_commands: Option<(Instant, u64)> = None;
    let mut commands_peak = 0f64;
    loop {
        let stop = tokio::select! {
            _ = tokio::time::sleep(SAMPLE_EVERY) => false,
            _ = closing.wait_for(|c| *c) => true,
        };
        let sold: i64 = sqlx::query_scalar("SELECT count(*) FROM orders WHERE event_id = $1")
            .bind(sale.event)
            .fetch_one(&db)
            .await
            .unwrap_or(0);
        if sold as u64 >= capacity {
            sell_out.send_if_modified(|s| !std::mem::replace(s, true));
        }
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut redis)
            .await
            .unwrap_or_default();
        redis_peak = redis_peak.max(info_field(&info, "used_memory").unwrap_or(0));
        let stats: String = redis::cmd("INFO")
            .arg("stats")
            .query_async(&mut redis)
            .await
            .unwrap_or_default();
        if let Some(commands) = info_field(&stats, "total_commands_processed") {
            let at = Instant::now();
            if let Some((then, before)) = last_commands {
                let per_s = commands.saturating_sub(before) as f64
                    / at.duration_since(then).as_secs_f64().max(1e-3);
                commands_peak = commands_peak.max(per_s);
            }
            last_commands = Some((at, commands));
        }
        rss_peak = rss_peak.max(pids.iter().filter_map(|&pid| rss_kb(pid)).sum());
        let now = Instant::now();
        let held = tally.seats_held.load(Ordering::Relaxed);
        let per_s = (held - last_held.1) as f64 / (now - last_held.0).as_secs_f64().max(1e-3);
        last_held = (now, held);
        let ms = |h: &hdrhistogram::Histogram<u64>, q: f64| {
            (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1e3)
        };
        let (hold, page, confirm, queue) = (
            tally.hold.take_window(),
            tally.page.take_window(),
            tally.confirm.take_window(),
            tally.queue.take_window(),
        );
        let streams = tally.streams_open.load(Ordering::Relaxed).max(0) as u64;
        let queued = tally.queued.load(Ordering::Relaxed).max(0) as u64;
        let unanswered = tally.unanswered();
        progress.set_message(format!(
            "sold {sold}/{capacity} · streams {streams} · queued {queued} · unanswered {unanswered}"
        ));
        samples.push(Sample {
            at_s: now.duration_since(start).as_secs_f64()
                - sale.on_sale.duration_since(start).as_secs_f64(),
            sold: sold as u64,
            holds_per_s: per_s,
            streams,
            queued,
            hold_p50_ms: ms(&hold, 0.5),
            hold_p99_ms: ms(&hold, 0.99),
            page_p99_ms: ms(&page, 0.99),
            confirm_p99_ms: ms(&confirm, 0.99),
            queue_p99_ms: ms(&queue, 0.99),
        });
        if stop {
            return Ok((samples, redis_peak, rss_peak, commands_peak));
        }
    }
}

/// Each kind of request's row of the report.
fn requests(tally: &Tally) -> Vec<report::RequestRow> {
    tally
        .kinds()
        .iter()
        .map(|(kind, timings)| {
            let all = timings.all();
            let ms = |q: f64| all.value_at_quantile(q) as f64 / 1e3;
            report::RequestRow {
                kind,
                answered: all.len(),
                p50_ms: ms(0.5),
                p99_ms: ms(0.99),
                unanswered: timings.unanswered.load(Ordering::Relaxed),
                client_out_of_files: timings.client_out_of_files.load(Ordering::Relaxed),
                statuses: timings
                    .statuses()
                    .iter()
                    .map(|(status, n)| format!("{status}×{n}"))
                    .collect::<Vec<_>>()
                    .join(" "),
            }
        })
        .collect()
}

/// The value of `field` in Redis's `INFO` text (`field:value` lines).
fn info_field(info: &str, field: &str) -> Option<u64> {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

/// Process `pid`'s resident memory (`VmRSS` of `/proc/PID/status`), kB.
fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The report: what Postgres accepted (sales, seats sold twice, buyers over the limit,
/// when the last seat sold), the crowd's latencies and counters, the fan-out (each
/// probe's first `held` update of each buyer against that buyer's answered hold).
async fn judge(
    db: &PgPool,
    event: i64,
    config: &OnsaleConfig,
    tally: &Tally,
    stories: &[Story],
    (on_sale_at, capacity): (DateTime<Utc>, u64),
    (redis_peak_bytes, rss_peak_kb, commands_peak): (u64, u64, f64),
) -> anyhow::Result<OnsaleReport> {
    let checked = check::check(db, event).await?;
    let (sold, last_sale): (i64, Option<DateTime<Utc>>) =
        sqlx::query_as("SELECT count(*), max(created_at) FROM orders WHERE event_id = $1")
            .bind(event)
            .fetch_one(db)
            .await?;
    let over_limit: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT buyer_id FROM orders WHERE event_id = $1
                                GROUP BY buyer_id HAVING count(*) > $2) over",
    )
    .bind(event)
    .bind(config.max_seats_per_buyer as i64)
    .fetch_one(db)
    .await?;
    // A seat can be held more than once (a hung-up buyer's hold lapses, and a buyer who
    // waited takes it), a hold TTL apart. An update on a stream belongs to the hold of
    // its seat answered nearest to it: the fan-out takes milliseconds, not a TTL.
    let mut held: std::collections::HashMap<&str, Vec<Instant>> = Default::default();
    for (seat, at) in stories.iter().filter_map(|s| s.held.as_ref()) {
        held.entry(seat.as_str()).or_default().push(*at);
    }
    let mut fanout = super::throughput::histogram();
    for (seat, arrived) in stories.iter().flat_map(|s| &s.arrivals) {
        let nearest = held.get(seat.as_str()).and_then(|answers| {
            answers.iter().min_by_key(|answered| {
                arrived
                    .saturating_duration_since(**answered)
                    .max(answered.saturating_duration_since(*arrived))
            })
        });
        if let Some(answered) = nearest {
            let us = arrived.saturating_duration_since(*answered).as_micros();
            let _ = fanout.record(us.clamp(1, 60_000_000) as u64);
        }
    }
    let quantile = |h: &hdrhistogram::Histogram<u64>, q: f64, unit: f64| {
        (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / unit)
    };
    let waits = tally
        .queue_wait
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let queue_seed: Option<i64> = if config.waiting_room_shoppers > 0 {
        sqlx::query_scalar("SELECT queue_seed FROM events WHERE id = $1")
            .bind(event)
            .fetch_optional(db)
            .await?
    } else {
        None
    };
    let sold_out_s = (sold as u64 >= capacity)
        .then_some(last_sale)
        .flatten()
        .map(|last| (last - on_sale_at).as_seconds_f64());
    Ok(OnsaleReport {
        buyers: config.buyers as u64,
        sold: sold as u64,
        sold_out_s,
        double_sales: checked.double_sold_seats as u64,
        over_limit: over_limit as u64,
        hold_p99_ms: quantile(&tally.hold.all(), 0.99, 1e3),
        confirm_p99_ms: quantile(&tally.confirm.all(), 0.99, 1e3),
        page_p99_ms: quantile(&tally.page.all(), 0.99, 1e3),
        requests: tally.sent(),
        unanswered: tally.unanswered(),
        streams_peak: tally.streams_peak.load(Ordering::Relaxed).max(0) as u64,
        fanout_p99_ms: quantile(&fanout, 0.99, 1e3),
        queue_wait_p50_s: quantile(&waits, 0.5, 1e6),
        queue_wait_p99_s: quantile(&waits, 0.99, 1e6),
        queue_p99_ms: quantile(&tally.queue.all(), 0.99, 1e3),
        queue_seed,
        redis_commands_per_s_peak: commands_peak,
        redis_peak_mb: redis_peak_bytes as f64 / 1e6,
        server_rss_mb: rss_peak_kb as f64 / 1024.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_info_fields_are_read_by_name() {
        let info = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n";
        assert_eq!(info_field(info, "used_memory"), Some(1_048_576));
        assert_eq!(info_field(info, "used_memory_peak"), None);
    }
}
