//! The queue rows (`BENCH_ONLY=queue`): what a waiting browser costs Redis. An event with
//! a room of one, one buyer shopping, and then 400, then 4,000 more browsers queued, each
//! with its queue page's stream open (`GET /events/{id}/queue/stream`, one connection
//! each). Redis's own count of commands (`INFO stats` `total_commands_processed`, which
//! counts the commands scripts run too) is read over [`WINDOW`] before the streams open
//! and again with them open.
//!
//! | row | ours | baseline |
//! |---|---|---|
//! | `queue_redis_commands_per_browser_s_{400,4000}` | Redis commands per second per open queue stream: the rate with the streams open less the rate before, over the streams (target ≤ 0.02) | the rate with the streams open over the streams, the room's ticker included |

use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::StreamExt;
use seatlock_harness::HttpBuyer;
use seatlock_harness::http::EventStream;
use seatlock_harness::load::onsale::raise_fd_limit;

use super::Setup;
use super::report::{Row, Target};

/// The crowds of queued browsers measured, one after the other.
const CROWDS: [usize; 2] = [400, 4_000];
/// How long Redis's command count is read over, each time.
const WINDOW: Duration = Duration::from_secs(10);
/// Browsers joining at once (the rest wait their turn).
const JOINING_AT_ONCE: usize = 128;

/// The queue rows (see the module docs).
pub(crate) async fn rows(s: &Setup, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let files = raise_fd_limit(2 * CROWDS[1] as u64 + 512);
    anyhow::ensure!(
        files >= CROWDS[1] as u64 + 512,
        "this process may open only {files} files"
    );
    let event = room_event(s).await?;
    let server = s.server.address.clone();
    let map = format!("{server}/events/{event}");
    // One buyer takes the room's only place, so everyone after waits.
    let mut shopper = HttpBuyer::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while shopper.get(&map).await?.body.contains("id=\"queue\"") {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the first buyer's turn never came"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut redis = redis::Client::open(s.redis_url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let mut open: Vec<EventStream> = Vec::new();
    for crowd in CROWDS {
        let before = commands_per_s(&mut redis).await?;
        let joined = futures_util::stream::iter(open.len()..crowd)
            .map(|_| queued_stream(&map))
            .buffer_unordered(JOINING_AT_ONCE)
            .collect::<Vec<_>>()
            .await;
        for stream in joined {
            open.push(stream?);
        }
        // Each stream has had its opening event; let the joins' traffic settle.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let with = commands_per_s(&mut redis).await?;
        let streams = open.len() as f64;
        rows.push(
            Row::versus(
                &format!("queue_redis_commands_per_browser_s_{crowd}"),
                "Redis commands/s per open queue stream (vs absolute)",
                (with - before).max(0.0) / streams,
                with / streams,
            )
            .target(Target::AtMost(0.02)),
        );
    }
    drop(open);
    Ok(())
}

/// A new event on the 100-seat venue, with a room of one shopper, on sale now.
async fn room_event(s: &Setup) -> anyhow::Result<i64> {
    let (event, _) = s.event(&super::venues::slug(100)).await?;
    let room: i64 = sqlx::query_scalar(
        "INSERT INTO events (venue_id, name, starts_at, on_sale_at, waiting_room_shoppers)
         SELECT venue_id, 'Queue bench', starts_at, now() - interval '1 minute', 1
           FROM events WHERE id = $1 RETURNING id",
    )
    .bind(event)
    .fetch_one(&s.db)
    .await?;
    sqlx::query(
        "INSERT INTO event_seats (event_id, seat_id, price_cents)
         SELECT $1, seat_id, price_cents FROM event_seats WHERE event_id = $2",
    )
    .bind(room)
    .bind(event)
    .execute(&s.db)
    .await?;
    Ok(room)
}

/// A new browser joins the line at `map` and opens its queue page's stream; returned
/// once the stream's first event (the browser's position) has come.
async fn queued_stream(map: &str) -> anyhow::Result<EventStream> {
    let mut browser = HttpBuyer::new();
    let joined = browser.get(map).await?;
    // The map's URL answers a new arrival with the queue page itself, not a redirect.
    anyhow::ensure!(
        joined.status == reqwest::StatusCode::OK && joined.body.contains("id=\"queue\""),
        "not given the queue page"
    );
    let mut stream = EventStream::open_as(&browser, &format!("{map}/queue/stream"))
        .await
        .map_err(|status| anyhow::anyhow!("queue stream refused: {status}"))?;
    let (name, _) = stream.next().await;
    anyhow::ensure!(name == "position", "the first event was {name}");
    Ok(stream)
}

/// Redis's commands per second over [`WINDOW`] (`INFO stats`).
async fn commands_per_s(redis: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<f64> {
    let count = async |redis: &mut redis::aio::MultiplexedConnection| -> anyhow::Result<u64> {
        let info: String = redis::cmd("INFO").arg("stats").query_async(redis).await?;
        info.lines()
            .find_map(|line| line.strip_prefix("total_commands_processed:"))
            .and_then(|v| v.trim().parse().ok())
            .context("no total_commands_processed in INFO stats")
    };
    let (first, at) = (count(redis).await?, Instant::now());
    tokio::time::sleep(WINDOW).await;
    let last = count(redis).await?;
    // Less the two INFO calls of this reading itself.
    Ok(last.saturating_sub(first + 1) as f64 / at.elapsed().as_secs_f64())
}
