//! The crowd rows (`BENCH_ONLY=crowd`): what lookers cost. An on-sale is mostly people
//! looking, so a page view must be cheap for the server and free for the stores.
//!
//! | row | ours | baseline |
//! |---|---|---|
//! | `arena_view_vs_healthz_64` | views/s of the arena's `GET /events/{id}`, 64 returning viewers, gzip | `GET /healthz`/s, the same viewers, the same run |
//! | `redis_keys_per_anonymous_view` | Redis keys written per first view of the arena by a cookieless visitor (`DBSIZE` growth): 0 | |
//! | `redis_keys_per_open_map` | the same per open live stream of the arena: 0 | |
//! | `redis_bytes_per_anonymous_view`, `redis_bytes_per_open_map` | Redis `used_memory` growth per view, per open map (the allocator's and the connections' buffers move it a little either way) | |
//! | `redis_bytes_per_shopper` | the same per buyer holding one seat | |

use anyhow::Context;
use seatlock_harness::HttpBuyer;
use seatlock_harness::load::throughput;

use super::report::{Row, Target};
use super::{FLOOR_BUYERS, Setup};

/// Visitors, open maps and shoppers per bytes row: enough to rise above the
/// allocator's noise.
const CROWD: usize = 500;

/// The crowd rows (see the module docs).
pub(crate) async fn rows(s: &Setup, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let server = &s.server.address;
    let (arena, seats) = s.event("harbour-arena").await?;
    let map = format!("/events/{arena}");
    let views = throughput::page_views(server, &map, FLOOR_BUYERS, s.seconds).await?;
    let health = throughput::page_views(server, "/healthz", FLOOR_BUYERS, s.seconds).await?;
    eprintln!(
        "  arena views {:.0}/s (p99 {:.1} ms), /healthz {:.0}/s",
        views.per_s, views.latency_ms.p99, health.per_s
    );
    rows.push(
        Row::versus(
            "arena_view_vs_healthz_64",
            "arena views/s vs /healthz/s",
            views.per_s,
            health.per_s,
        )
        .target(Target::RatioAtLeast(0.2)),
    );

    let mut redis = redis::Client::open(s.redis_url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    // Anonymous first views: each a fresh client without cookies.
    let (before, keys_before) = (used_memory(&mut redis).await?, dbsize(&mut redis).await?);
    for _ in 0..CROWD {
        let page = reqwest::get(format!("{server}{map}")).await?;
        anyhow::ensure!(
            page.status().is_success(),
            "a view answered {}",
            page.status()
        );
        page.bytes().await?;
    }
    let per_view = per(used_memory(&mut redis).await? - before);
    let keys_per_view = per(dbsize(&mut redis).await? - keys_before);
    rows.push(
        Row::alone("redis_keys_per_anonymous_view", "keys", keys_per_view)
            .target(Target::AtMost(0.0)),
    );
    rows.push(Row::alone(
        "redis_bytes_per_anonymous_view",
        "bytes",
        per_view,
    ));

    // Open maps: each a live stream, held open while measured.
    let redis_before = used_memory(&mut redis).await?;
    let keys_before = dbsize(&mut redis).await?;
    let mut streams = Vec::with_capacity(CROWD);
    for _ in 0..CROWD {
        let mut stream = reqwest::get(format!("{server}{map}/stream")).await?;
        anyhow::ensure!(
            stream.status().is_success(),
            "a stream answered {}",
            stream.status()
        );
        stream.chunk().await?; // its snapshot
        streams.push(stream);
    }
    let redis_per_map = per(used_memory(&mut redis).await? - redis_before);
    let keys_per_map = per(dbsize(&mut redis).await? - keys_before);
    drop(streams);
    rows.push(
        Row::alone("redis_keys_per_open_map", "keys", keys_per_map).target(Target::AtMost(0.0)),
    );
    rows.push(Row::alone(
        "redis_bytes_per_open_map",
        "bytes",
        redis_per_map,
    ));

    // Shoppers: each holds one seat (a lease, its holding, the buyer's set).
    let before = used_memory(&mut redis).await?;
    let mut shoppers = Vec::with_capacity(CROWD);
    for &seat in seats.iter().rev().take(CROWD) {
        let mut buyer = HttpBuyer::new();
        buyer.get(&format!("{server}/")).await?;
        let held = buyer.seat_action(server, arena, seat, "hold").await?;
        anyhow::ensure!(
            held.status.is_redirection(),
            "a hold answered {}",
            held.status
        );
        shoppers.push((buyer, seat));
    }
    let per_shopper = per(used_memory(&mut redis).await? - before);
    for (mut buyer, seat) in shoppers {
        buyer.seat_action(server, arena, seat, "release").await?;
    }
    rows.push(Row::alone("redis_bytes_per_shopper", "bytes", per_shopper));
    eprintln!(
        "  bytes: {per_view:.0} per anonymous view, {redis_per_map:.0} per open map, \
         {per_shopper:.0} per shopper"
    );
    Ok(())
}

/// How many keys Redis holds (`DBSIZE`).
async fn dbsize(redis: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<f64> {
    let keys: u64 = redis::cmd("DBSIZE").query_async(redis).await?;
    Ok(keys as f64)
}

/// Redis's `used_memory`, in bytes.
async fn used_memory(redis: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<f64> {
    let info: String = redis::cmd("INFO").arg("memory").query_async(redis).await?;
    info.lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .context("no used_memory in INFO memory")?
        .trim()
        .parse()
        .context("used_memory")
}

/// A growth in bytes over the crowd, per member; never below 0 (Redis may free what
/// something else held meanwhile).
fn per(growth: f64) -> f64 {
    (growth / CROWD as f64).max(0.0)
}
