//! `make bench`: the hot paths measured side by side with their baselines, in ONE run
//! against the same Redis and Postgres (the private ones `scripts/services.sh` starts),
//! release build. Writes `target/bench/report.json` and prints a Markdown table.
//!
//! | row | ours | baseline |
//! |---|---|---|
//! | `lease_pairs_vs_redis_benchmark` | lease acquire + release pairs/s, 64 tasks on one `LeaseClient` | `redis-benchmark -t set -c 64` SET/s |
//! | `lease_pairs_vs_rslock` | the same | `rslock` lock + unlock pairs/s, 64 tasks on one `LockManager` |
//! | `etcd{1,3}_pair_ms_vs_redis` | mean ms per lease acquire + release, one caller, on a private etcd of 1 or 3 members ([`consensus`]) | the same on Redis |
//! | `etcd{1,3}_pairs_vs_redis_64` | lease acquire + release pairs/s, 64 tasks on one etcd client | the same on Redis |
//! | `zk{1,3}_pair_ms_vs_redis`, `zk{1,3}_pairs_vs_redis_64` | the same on a private ZooKeeper of 1 or 3 members ([`consensus`]) | the same on Redis |
//! | `cluster3_pairs_vs_one_master_64` | lease pairs/s, 64 tasks over 64 events, on a private Redis Cluster of three masters ([`cluster`]) | the same on one private Redis server |
//! | `cluster3_one_event_pairs_vs_many_64` | the same 64 tasks on one event of that cluster (one slot, one master) | the 64-event figure |
//! | `lease_redis_cpu_us_per_pair` | Redis CPU per lease pair (`INFO cpu` deltas over the row) | the same per rslock pair |
//! | `grant_redis_us_guard_on_vs_off`, `release_redis_us` | µs Redis spends inside one grant (`FCALL`), one release (`EVALSHA`), during the lease pairs (`INFO commandstats`) | the grant with the failover guard off |
//! | `http_hold_vs_raw_setnx_{1,16,64}` | HTTP holds/s, N buyers (hold, then release, on own seat) | raw `SET NX PX` from redis-rs, N tasks |
//! | `hold_p99_ms_{1,16,64}` | p99 of those holds | |
//! | `confirm_vs_pgbench_{1,16,64}` | HTTP confirms/s, N buyers ([`seatlock_harness::load::throughput::confirms`]) | `pgbench -c N` running the fenced single-row UPDATE |
//! | `http_hold_vs_floor_64` | HTTP holds/s, 64 buyers | the same against the [`floor`] server (bare axum, cookie, the lease scripts) |
//! | `hold_open_loop_p99_ms` | p99 of holds sent at half the 64-buyer peak rate, timed from their scheduled send ([`seatlock_harness::load::open_loop`]) | |
//! | `confirm_vs_floor_64` | HTTP confirms/s, 64 buyers | the same against the [`floor`] server (fenced UPDATE + order in one transaction, release) |
//! | `{hold,release}_postgres_round_trips` | Postgres round trips per hold, per release, counted on the wire ([`seatlock_harness::pgwire`]) | |
//! | `hold_p50_ms_{100..100000}_seats` | p50 of one buyer's holds on a venue of that size | the 100-seat figure (ratio = growth) |
//! | `seat_map_{100..100000}_seats_ms` | `GET /events/{id}` (criterion median) | the 100-seat figure |
//! | `server_rss_mb_64` | the server's peak RSS (`VmHWM`) after the 64-buyer rows | |
//! | `arena_view_vs_healthz_64`, `*_bytes_per_*` | what lookers cost ([`crowd`]) | |
//! | `open_maps_*`, `hold_ms_with_open_maps` | 10,000 open maps of the arena: snapshots, a hold's fan-out to all, a hold's latency beside them ([`maps`]) | |
//! | `queue_redis_commands_per_browser_s_{400,4000}` | Redis commands per second per open queue stream ([`queue`]) | the absolute rate per stream |
//!
//! `BENCH_SECONDS` (default 5) sets each throughput row's measuring time; `BENCH_ONLY`
//! (a comma-separated list of `lease`, `etcd`, `zookeeper`, `cluster`, `http`, `floor`, `trips`, `sizes`,
//! `map`, `crowd`, `maps`, `queue`) runs
//! only those groups, to re-measure one quickly (the report then has only their rows).
//! `http` is every concurrency level and the floor rows; `floor` is the 64-buyer level
//! and the floor rows alone; `trips` is the round-trip rows. Run by `cargo bench` only:
//! under `cargo test` (no `--bench` argument) it does nothing.

// The server's allocator (src/main.rs), so the floor server, which runs in this
// process, is on the same stack as the product.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod breakdown;
mod cluster;
mod consensus;
mod crowd;
mod floor;
mod maps;
mod queue;
mod report;
mod stores;
mod venues;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use criterion::Criterion;
use report::{Report, Row, Target};
use seatlock_harness::load::open_loop;
use seatlock_harness::load::throughput::{self as holds, RunReport};
use seatlock_harness::pgwire::{PgCost, PgWire};
use seatlock_harness::{self as harness, HttpBuyer, ServerProcess};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

/// Venue sizes of the growth rows.
const SIZES: [usize; 4] = [100, 1_000, 10_000, 100_000];
/// Concurrency levels of the HTTP rows.
const BUYERS: [usize; 3] = [1, 16, 64];
/// Callers of the lease-pair rows.
const LEASE_CALLERS: usize = 64;
/// Seats each buyer holds, then confirms, per round of a confirms run.
const CONFIRM_BATCH: usize = 8;
/// Buyers of the floor rows (and the open loop's connections).
const FLOOR_BUYERS: usize = 64;
/// Holds (and releases) whose Postgres round trips are counted.
const ROUND_TRIP_SAMPLES: usize = 10;
/// Longest any one row may take before the bench gives up.
const ROW_TIMEOUT: Duration = Duration::from_secs(180);

/// The stores, the bench database and the server under test.
struct Setup {
    database_url: String,
    redis_url: String,
    db: PgPool,
    server: ServerProcess,
    seconds: Duration,
}

impl Setup {
    async fn start(seconds: Duration) -> anyhow::Result<Setup> {
        let (admin, redis_url) = harness::store_urls()?;
        let database_url = harness::fresh_database(&admin).await?;
        harness::seed(&database_url, harness::DEMO_VENUES).await?;
        let generated = venues::write(&SIZES)?;
        harness::seed(&database_url, generated.to_str().context("temp dir path")?).await?;
        std::fs::remove_dir_all(&generated)?;
        let db = PgPoolOptions::new()
            .max_connections(2)
            .connect(&database_url)
            .await?;
        let settings = harness::test_settings(&database_url, &redis_url);
        let server = ServerProcess::start(env!("CARGO_BIN_EXE_seatlock").as_ref(), &settings)
            .await
            .context("starting the server (release build)")?;
        let setup = Setup {
            database_url,
            redis_url,
            db,
            server,
            seconds,
        };
        setup.vacuum().await?;
        Ok(setup)
    }

    /// `VACUUM ANALYZE` now, so that autovacuum does not wake up in the middle of a later
    /// row after seeding, the confirms and pgbench (they write tens of thousands of rows).
    async fn vacuum(&self) -> anyhow::Result<()> {
        sqlx::query("VACUUM ANALYZE").execute(&self.db).await?;
        Ok(())
    }

    /// Stops the server and drops the bench database (about 50 MB).
    async fn finish(self) -> anyhow::Result<()> {
        let Setup {
            database_url,
            db,
            server,
            ..
        } = self;
        drop(server);
        db.close().await;
        let (admin, _) = harness::store_urls()?;
        let name = database_url
            .rsplit('/')
            .next()
            .context("no database name")?;
        let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(&admin).await?;
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut admin)
            .await?;
        Ok(())
    }

    /// A cheap page with a form, where buyers pick up their session and CSRF token: the
    /// 100-seat event's map (the index page counts every seat of every event).
    async fn form_page(&self) -> anyhow::Result<String> {
        let (event, _) = self.event(&venues::slug(SIZES[0])).await?;
        Ok(format!("/events/{event}"))
    }

    /// The event on the venue `slug` and its seat ids in id order.
    async fn event(&self, slug: &str) -> anyhow::Result<(i64, Vec<i64>)> {
        let event: i64 = sqlx::query_scalar(
            "SELECT e.id FROM events e JOIN venues v ON v.id = e.venue_id WHERE v.slug = $1",
        )
        .bind(slug)
        .fetch_one(&self.db)
        .await
        .with_context(|| format!("no event on {slug}"))?;
        let seats = sqlx::query_scalar(
            "SELECT seat_id FROM event_seats WHERE event_id = $1 ORDER BY seat_id",
        )
        .bind(event)
        .fetch_all(&self.db)
        .await?;
        Ok((event, seats))
    }
}

/// Awaits one row's measurement, bounded by [`ROW_TIMEOUT`].
async fn bounded<T>(
    what: &str,
    measurement: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    eprintln!("measuring {what} ...");
    tokio::time::timeout(ROW_TIMEOUT, measurement)
        .await
        .with_context(|| format!("{what} took longer than {ROW_TIMEOUT:?}"))?
        .with_context(|| format!("measuring {what}"))
}

/// Lease pairs against redis-benchmark and rslock, and the Redis CPU of each kind of pair.
/// `breakdowns` gets where the CPU time of each kind of pair went (`lease_pairs`,
/// `rslock_pairs`: this process is the client, the server idles).
async fn lease_rows(
    s: &Setup,
    rows: &mut Vec<Row>,
    breakdowns: &mut serde_json::Map<String, serde_json::Value>,
) -> anyhow::Result<()> {
    let set_per_s = bounded("redis-benchmark -t set -c 64", async {
        stores::redis_benchmark_set(&s.redis_url, LEASE_CALLERS, 300_000)
    })
    .await?;
    let pid = s.server.pid().context("the server has exited")?;
    let processes = breakdown::Processes::find(pid, &s.redis_url, &s.db).await?;
    let server = &s.server.address;
    let before = processes.snapshot(server).await?;
    let ((pairs, pair_cpu_us), [grant_us, release_us]) = bounded(
        "lease pairs",
        stores::with_command_us(
            &s.redis_url,
            ["fcall", "evalsha"],
            stores::with_redis_cpu(
                &s.redis_url,
                stores::lease_pairs(
                    stores::redis_leases(&s.redis_url, &s.db, true)?,
                    LEASE_CALLERS,
                    s.seconds,
                ),
            ),
        ),
    )
    .await?;
    let between = processes.snapshot(server).await?;
    // The same pairs with the failover guard off (as in the failover lab): what knowing
    // the server costs a grant.
    let (_, [unguarded_grant_us]) = bounded(
        "lease pairs, guard off",
        stores::with_command_us(
            &s.redis_url,
            ["fcall"],
            stores::lease_pairs(
                stores::redis_leases(&s.redis_url, &s.db, false)?,
                LEASE_CALLERS,
                s.seconds,
            ),
        ),
    )
    .await?;
    let rslock_from = processes.snapshot(server).await?;
    let (rslock, rslock_cpu_us) = bounded(
        "rslock pairs",
        stores::with_redis_cpu(
            &s.redis_url,
            stores::rslock_pairs(&s.redis_url, LEASE_CALLERS, s.seconds),
        ),
    )
    .await?;
    let after = processes.snapshot(server).await?;
    for (name, from, to, rate) in [
        ("lease_pairs", &before, &between, pairs),
        ("rslock_pairs", &rslock_from, &after, rslock),
    ] {
        breakdowns.insert(name.into(), breakdown::between(from, to, rate.all as f64));
    }
    rows.push(
        Row::versus(
            "lease_pairs_vs_redis_benchmark",
            "pairs/s vs SET/s",
            pairs.per_s,
            set_per_s,
        )
        .target(Target::RatioAtLeast(0.6)),
    );
    rows.push(
        Row::versus(
            "lease_pairs_vs_rslock",
            "pairs/s",
            pairs.per_s,
            rslock.per_s,
        )
        .target(Target::RatioAtLeast(0.6)),
    );
    rows.push(
        Row::versus(
            "lease_redis_cpu_us_per_pair",
            "µs Redis CPU/pair vs rslock's",
            pair_cpu_us,
            rslock_cpu_us,
        )
        .target(Target::RatioAtMost(2.0)),
    );
    rows.push(Row::versus(
        "grant_redis_us_guard_on_vs_off",
        "µs in Redis per grant (FCALL)",
        grant_us,
        unguarded_grant_us,
    ));
    rows.push(Row::alone(
        "release_redis_us",
        "µs in Redis per release (EVALSHA)",
        release_us,
    ));
    Ok(())
}

/// The events the HTTP rows run on, with their seat ids in id order.
struct Events {
    /// The 11,056-seat arena: holds (each released).
    arena: (i64, Vec<i64>),
    /// The 1,642-seat hall: pgbench's UPDATEs.
    hall: (i64, Vec<i64>),
    /// The 100,000-seat event: confirms sell seats of [`confirm_seats`]; the size rows
    /// hold its first seat.
    big: (i64, Vec<i64>),
}

/// The seats of the 100,000-seat event that a confirms run sells, each run its own: a
/// slice per concurrency level, and one for the floor server.
fn confirm_seats(run: ConfirmRun) -> std::ops::Range<usize> {
    match run {
        ConfirmRun::Product(1) => 50_000..60_000,
        ConfirmRun::Product(16) => 60_000..80_000,
        ConfirmRun::Product(_) => 80_000..100_000,
        ConfirmRun::Floor => 10_000..50_000,
    }
}

/// Whose confirms a run measures.
#[derive(Clone, Copy)]
enum ConfirmRun {
    /// The product's, at this many buyers.
    Product(usize),
    /// The floor server's, at [`FLOOR_BUYERS`].
    Floor,
}

/// For each of `levels` (buyers): HTTP holds vs raw SET NX, hold p99, confirms vs
/// pgbench; at 64 buyers also the floor rows ([`floor_rows`]); then the server's peak
/// RSS. `breakdowns` gets, per level, where the CPU time of the holds (each with its
/// release) and of the confirm rounds (holds included) went, and the server's store
/// round trips ([`breakdown::between`]).
async fn http_rows(
    s: &Setup,
    levels: &[usize],
    rows: &mut Vec<Row>,
    breakdowns: &mut serde_json::Map<String, serde_json::Value>,
) -> anyhow::Result<()> {
    let events = Events {
        arena: s.event("harbour-arena").await?,
        hall: s.event("grand-hall").await?,
        big: s.event(&venues::slug(100_000)).await?,
    };
    let (arena, arena_seats) = (events.arena.0, &events.arena.1);
    let (hall, hall_seats) = (events.hall.0, &events.hall.1);
    let (big, big_seats) = (events.big.0, &events.big.1);
    let pgbench_range = (hall_seats[0], hall_seats[hall_seats.len() - 1]);
    let server = &s.server.address;
    let form_page = s.form_page().await?;
    let pid = s.server.pid().context("the server has exited")?;
    let processes = breakdown::Processes::find(pid, &s.redis_url, &s.db).await?;
    for &buyers in levels {
        let set_per_s = bounded(
            &format!("raw SET NX PX, {buyers} callers"),
            stores::raw_set_nx(&s.redis_url, buyers, s.seconds),
        )
        .await?;
        let start = processes.snapshot(&s.server.metrics_url).await?;
        let hold = bounded(
            &format!("HTTP holds, {buyers} buyers"),
            holds::run(server, &form_page, arena, arena_seats, buyers, s.seconds),
        )
        .await?;
        warn_failures("holds", hold.failures);
        let held = processes.snapshot(&s.server.metrics_url).await?;
        let confirm = bounded(
            &format!("HTTP confirms, {buyers} buyers"),
            holds::confirms(
                server,
                &form_page,
                big,
                &big_seats[confirm_seats(ConfirmRun::Product(buyers))],
                buyers,
                CONFIRM_BATCH,
                s.seconds,
            ),
        )
        .await?;
        warn_failures("holds or confirms", confirm.failures);
        let confirmed = processes.snapshot(&s.server.metrics_url).await?;
        let per_hold = breakdown::between(&start, &held, hold.requests as f64);
        eprintln!("  per hold (with its release): {per_hold}");
        breakdowns.insert(format!("holds_{buyers}"), per_hold);
        let per_confirm = breakdown::between(&held, &confirmed, confirm.requests as f64);
        breakdowns.insert(format!("confirm_rounds_{buyers}"), per_confirm);
        let tps = bounded(&format!("pgbench -c {buyers}"), async {
            stores::pgbench_fenced_update(
                &s.database_url,
                hall,
                pgbench_range,
                buyers,
                s.seconds.as_secs(),
            )
        })
        .await?;
        s.vacuum().await?;
        let mut hold_row = Row::versus(
            &format!("http_hold_vs_raw_setnx_{buyers}"),
            "holds/s vs SET/s",
            hold.per_s,
            set_per_s,
        );
        let p99 = Row::alone(&format!("hold_p99_ms_{buyers}"), "ms", hold.latency_ms.p99);
        let mut confirm_row = Row::versus(
            &format!("confirm_vs_pgbench_{buyers}"),
            "confirms/s vs tps",
            confirm.per_s,
            tps,
        );
        if buyers == FLOOR_BUYERS {
            hold_row = hold_row.target(Target::RatioAtLeast(0.25));
            confirm_row = confirm_row.target(Target::RatioAtLeast(0.5));
        }
        rows.extend([hold_row, p99, confirm_row]);
        eprintln!(
            "  {buyers} buyers: holds p50 {:.2} ms p95 {:.2} ms; confirms p50 {:.2} ms p99 {:.2} ms",
            hold.latency_ms.p50,
            hold.latency_ms.p95,
            confirm.latency_ms.p50,
            confirm.latency_ms.p99
        );
        if buyers == FLOOR_BUYERS {
            let peak = Peak {
                holds: &hold,
                confirms: &confirm,
            };
            floor_rows(s, &events, &form_page, peak, &processes, rows, breakdowns).await?;
        }
    }
    rows.push(Row::alone(
        "server_rss_mb_64",
        "MB (VmHWM)",
        peak_rss_mb(pid)?,
    ));
    Ok(())
}

/// The product's 64-buyer runs of the same bench run, which the floor rows compare with.
struct Peak<'a> {
    holds: &'a RunReport,
    confirms: &'a RunReport,
}

/// The 64-buyer rows against the floor server ([`floor`]), and the product's holds in
/// open loop at half its 64-buyer peak (`peak.holds`). `breakdowns` gets the open loop's
/// CPU per hold (`open_loop_holds`: where the time goes when the machine is not
/// saturated) and the rate used (`open_loop_rate_per_s`).
async fn floor_rows(
    s: &Setup,
    events: &Events,
    form_page: &str,
    peak: Peak<'_>,
    processes: &breakdown::Processes,
    rows: &mut Vec<Row>,
    breakdowns: &mut serde_json::Map<String, serde_json::Value>,
) -> anyhow::Result<()> {
    let (arena, arena_seats) = (events.arena.0, &events.arena.1);
    let (big, big_seats) = (events.big.0, &events.big.1);
    let server = &s.server.address;
    let floor = floor::FloorServer::start(&s.database_url, &s.redis_url)?;
    let floor_holds = bounded(
        "floor holds, 64 buyers",
        holds::run(
            &floor.address,
            form_page,
            arena,
            arena_seats,
            FLOOR_BUYERS,
            s.seconds,
        ),
    )
    .await?;
    warn_failures("floor holds", floor_holds.failures);
    let rate = peak.holds.per_s / 2.0;
    let before = processes.snapshot(server).await?;
    let open = bounded(
        &format!("HTTP holds in open loop, {rate:.0}/s"),
        open_loop::holds(
            server,
            form_page,
            arena,
            arena_seats,
            FLOOR_BUYERS,
            rate,
            s.seconds,
        ),
    )
    .await?;
    warn_failures("open-loop holds", open.failures);
    let after = processes.snapshot(server).await?;
    breakdowns.insert(
        "open_loop_holds".into(),
        breakdown::between(&before, &after, open.requests as f64),
    );
    breakdowns.insert("open_loop_rate_per_s".into(), rate.into());
    let floor_confirms = bounded(
        "floor confirms, 64 buyers",
        holds::confirms(
            &floor.address,
            form_page,
            big,
            &big_seats[confirm_seats(ConfirmRun::Floor)],
            FLOOR_BUYERS,
            CONFIRM_BATCH,
            s.seconds,
        ),
    )
    .await?;
    warn_failures("floor holds or confirms", floor_confirms.failures);
    drop(floor);
    s.vacuum().await?;
    eprintln!(
        "  floor: holds {:.0}/s p99 {:.2} ms, confirms {:.0}/s; open loop at {rate:.0}/s: \
         {:.0}/s answered, p50 {:.2} ms p99 {:.2} ms",
        floor_holds.per_s,
        floor_holds.latency_ms.p99,
        floor_confirms.per_s,
        open.per_s,
        open.latency_ms.p50,
        open.latency_ms.p99
    );
    rows.push(
        Row::versus(
            "http_hold_vs_floor_64",
            "holds/s vs floor's",
            peak.holds.per_s,
            floor_holds.per_s,
        )
        .target(Target::RatioAtLeast(0.6)),
    );
    rows.push(
        Row::alone(
            "hold_open_loop_p99_ms",
            &format!("ms at {rate:.0} holds/s"),
            open.latency_ms.p99,
        )
        .target(Target::AtMost(10.0)),
    );
    rows.push(
        Row::versus(
            "confirm_vs_floor_64",
            "confirms/s vs floor's",
            peak.confirms.per_s,
            floor_confirms.per_s,
        )
        .target(Target::RatioAtLeast(0.5)),
    );
    Ok(())
}

/// Postgres round trips per hold and per release: a second server whose Postgres traffic
/// goes through a [`PgWire`], one buyer holding and releasing one seat
/// [`ROUND_TRIP_SAMPLES`] times (after one warm-up pair), each request counted from its
/// send until Postgres has heard nothing for 100 ms (sqlx pings a connection after it is
/// returned to the pool, in the background). Pings included.
async fn round_trip_rows(s: &Setup, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let (wire, proxied) = PgWire::in_front_of(&s.database_url).await?;
    let mut settings = harness::test_settings(&proxied, &s.redis_url);
    settings.close_interval_ms = 0; // no auction closer polling Postgres meanwhile
    let server = ServerProcess::start(env!("CARGO_BIN_EXE_seatlock").as_ref(), &settings)
        .await
        .context("starting the server behind the Postgres proxy")?;
    let (event, seats) = s.event("harbour-arena").await?;
    let seat = seats[seats.len() - 1];
    let mut buyer = HttpBuyer::new();
    buyer
        .get(&format!("{}{}", server.address, s.form_page().await?))
        .await?;
    let mut per_action = [0usize; 2];
    for round in 0..=ROUND_TRIP_SAMPLES {
        for (total, action) in per_action.iter_mut().zip(["hold", "release"]) {
            wire.settle().await;
            let from = wire.len();
            let reply = buyer
                .seat_action(&server.address, event, seat, action)
                .await?;
            anyhow::ensure!(
                reply.status == reqwest::StatusCode::SEE_OTHER,
                "{action} answered {}",
                reply.status
            );
            wire.settle().await;
            if round > 0 {
                *total += PgCost::of(&wire.since(from)).round_trips;
            }
        }
    }
    for (total, action) in per_action.into_iter().zip(["hold", "release"]) {
        rows.push(
            Row::alone(
                &format!("{action}_postgres_round_trips"),
                &format!("per {action} (pings included)"),
                total as f64 / ROUND_TRIP_SAMPLES as f64,
            )
            .target(Target::AtMost(0.0)),
        );
    }
    Ok(())
}

/// Requests that did not answer 303 make a row suspect: say so (the server's log has why).
fn warn_failures(what: &str, failures: u64) {
    if failures > 0 {
        eprintln!("  WARNING: {failures} {what} did not answer 303 (see the server's log)");
    }
}

/// A process's peak resident set size (`VmHWM` in /proc/<pid>/status), in MB.
fn peak_rss_mb(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next())
        .context("no VmHWM line")?
        .parse()?;
    Ok(kb / 1024.0)
}

/// A size row: `ms` compared with the smallest venue's figure (`smallest`, set by the
/// first call), so the ratio is the growth factor.
fn growth(name: &str, ms: f64, smallest: &mut Option<f64>) -> Row {
    let base = *smallest.get_or_insert(ms);
    Row::versus(name, "ms (vs 100 seats)", ms, base)
}

/// One buyer's hold latency on each venue size (flat: one script whatever the size).
async fn hold_size_rows(s: &Setup, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let mut smallest = None;
    let form_page = s.form_page().await?;
    for seats in SIZES {
        let (event, ids) = s.event(&venues::slug(seats)).await?;
        let duration = Duration::from_secs(2);
        let hold = bounded(
            &format!("holds on {seats} seats"),
            holds::run(&s.server.address, &form_page, event, &ids, 1, duration),
        )
        .await?;
        let name = format!("hold_p50_ms_{seats}_seats");
        rows.push(growth(&name, hold.latency_ms.p50, &mut smallest));
    }
    Ok(())
}

/// `GET /events/{id}` on each venue size, measured by criterion (median of 10 samples):
/// one Postgres query and one Redis round trip whatever the size, then rendering.
fn seat_map_rows(
    rt: &tokio::runtime::Runtime,
    s: &Setup,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    let mut criterion = Criterion::default()
        .sample_size(10)
        .nresamples(10_000)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .without_plots();
    let client = reqwest::Client::builder().cookie_store(true).build()?;
    let mut smallest = None;
    for seats in SIZES {
        let (event, _) = rt.block_on(s.event(&venues::slug(seats)))?;
        let url = format!("{}/events/{event}", s.server.address);
        rt.block_on(client.get(&url).send())?.error_for_status()?; // the session
        let id = format!("seat_map_{seats}_seats");
        criterion.bench_function(&id, |b| {
            b.iter_custom(|iterations| {
                rt.block_on(async {
                    let started = Instant::now();
                    for _ in 0..iterations {
                        let page = client.get(&url).send().await.expect("GET the seat map");
                        assert!(page.status().is_success());
                        page.bytes().await.expect("the seat map page");
                    }
                    started.elapsed()
                })
            })
        });
        rows.push(growth(
            &format!("{id}_ms"),
            criterion_median_ms(&id)?,
            &mut smallest,
        ));
    }
    Ok(())
}

/// The target directory (`CARGO_TARGET_DIR` or `./target` of the workspace).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
}

/// The median criterion saved for benchmark `id`, in ms.
fn criterion_median_ms(id: &str) -> anyhow::Result<f64> {
    let path = target_dir()
        .join("criterion")
        .join(id)
        .join("new/estimates.json");
    let estimates: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?,
    )?;
    let ns = estimates["median"]["point_estimate"]
        .as_f64()
        .context("no median in criterion's estimates")?;
    Ok(ns / 1e6)
}

/// `uptime`'s output, to show how busy the machine was.
fn uptime() -> String {
    std::process::Command::new("uptime")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn main() -> anyhow::Result<()> {
    if !std::env::args().any(|a| a == "--bench") {
        println!("hot_paths measures only under `cargo bench` (see `make bench`)");
        return Ok(());
    }
    let seconds = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let load_before = uptime();
    eprintln!("bench: {load_before}");
    let started = Instant::now();
    let rt = tokio::runtime::Runtime::new()?;
    let setup = rt.block_on(Setup::start(Duration::from_secs(seconds)))?;
    let mut rows = Vec::new();
    let mut breakdowns = serde_json::Map::new();
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let wanted = |group: &str| only.is_empty() || only.split(',').any(|g| g.trim() == group);
    if wanted("lease") {
        rt.block_on(lease_rows(&setup, &mut rows, &mut breakdowns))?;
    }
    for (group, store) in [
        ("etcd", consensus::Consensus::Etcd),
        ("zookeeper", consensus::Consensus::ZooKeeper),
    ] {
        if wanted(group) {
            rt.block_on(consensus::rows(
                &setup.redis_url,
                &setup.db,
                setup.seconds,
                store,
                &mut rows,
            ))?;
        }
    }
    if wanted("cluster") {
        rt.block_on(cluster::rows(&setup.db, setup.seconds, &mut rows))?;
    }
    if wanted("http") {
        rt.block_on(http_rows(&setup, &BUYERS, &mut rows, &mut breakdowns))?;
    } else if wanted("floor") {
        rt.block_on(http_rows(
            &setup,
            &[FLOOR_BUYERS],
            &mut rows,
            &mut breakdowns,
        ))?;
    }
    if wanted("crowd") {
        rt.block_on(crowd::rows(&setup, &mut rows))?;
    }
    if wanted("maps") {
        rt.block_on(maps::rows(&setup, &mut rows))?;
    }
    if wanted("queue") {
        rt.block_on(queue::rows(&setup, &mut rows))?;
    }
    if wanted("trips") {
        rt.block_on(round_trip_rows(&setup, &mut rows))?;
    }
    if wanted("sizes") {
        rt.block_on(hold_size_rows(&setup, &mut rows))?;
    }
    if wanted("map") {
        seat_map_rows(&rt, &setup, &mut rows)?;
    }
    let meta = serde_json::json!({
        "command": "make bench",
        "seconds_per_row": seconds,
        "only": only,
        "breakdown": breakdowns,
        "took_s": started.elapsed().as_secs_f64(),
        "uptime_before": load_before,
        "uptime_after": uptime(),
    });
    let report = Report { rows, meta };
    let dir = target_dir().join("bench");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("report.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("\n{}", report::markdown(&report.rows));
    println!(
        "wrote {} in {:.0} s ({})",
        path.display(),
        started.elapsed().as_secs_f64(),
        report.meta["uptime_after"]
    );
    rt.block_on(setup.finish())
}
