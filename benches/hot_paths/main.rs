//! `make bench`: the hot paths measured side by side with their baselines, in ONE run
//! against the same Redis and Postgres (the private ones `scripts/services.sh` starts),
//! release build. Writes `target/bench/report.json` and prints a Markdown table.
//!
//! | row | ours | baseline |
//! |---|---|---|
//! | `lease_pairs_vs_redis_benchmark` | lease acquire + release pairs/s, 64 tasks on one `LeaseClient` | `redis-benchmark -t set -c 64` SET/s |
//! | `lease_pairs_vs_rslock` | the same | `rslock` lock + unlock pairs/s, 64 tasks on one `LockManager` |
//! | `http_hold_vs_raw_setnx_{1,16,64}` | HTTP holds/s, N buyers (hold, then release, on own seat) | raw `SET NX PX` from redis-rs, N tasks |
//! | `hold_p99_ms_{1,16,64}` | p99 of those holds | |
//! | `confirm_vs_pgbench_{1,16,64}` | HTTP confirms/s, N buyers ([`seatlock_harness::load::throughput::confirms`]) | `pgbench -c N` running the fenced single-row UPDATE |
//! | `hold_p50_ms_{100..100000}_seats` | p50 of one buyer's holds on a venue of that size | the 100-seat figure (ratio = growth) |
//! | `seat_map_ms_{100..100000}_seats` | `GET /events/{id}` (criterion median) | the 100-seat figure |
//! | `server_rss_mb_64` | the server's peak RSS (`VmHWM`) after the 64-buyer rows | |
//!
//! `BENCH_SECONDS` (default 5) sets each throughput row's measuring time; `BENCH_ONLY`
//! (a comma-separated list of `lease`, `http`, `sizes`, `map`) runs only those groups,
//! to re-measure one quickly (the report then has only their rows). Run by
//! `cargo bench` only: under `cargo test` (no `--bench` argument) it does nothing.

mod breakdown;
mod report;
mod stores;
mod venues;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use criterion::Criterion;
use report::{Report, Row, Target};
use seatlock_harness::load::throughput as holds;
use seatlock_harness::{self as harness, ServerProcess};
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

/// Lease pairs against redis-benchmark and rslock.
async fn lease_rows(s: &Setup, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let set_per_s = bounded("redis-benchmark -t set -c 64", async {
        stores::redis_benchmark_set(&s.redis_url, LEASE_CALLERS, 300_000)
    })
    .await?;
    let pairs_per_s = bounded(
        "lease pairs",
        stores::lease_pairs(&s.redis_url, &s.db, LEASE_CALLERS, s.seconds),
    )
    .await?;
    let rslock_per_s = bounded(
        "rslock pairs",
        stores::rslock_pairs(&s.redis_url, LEASE_CALLERS, s.seconds),
    )
    .await?;
    rows.push(
        Row::versus(
            "lease_pairs_vs_redis_benchmark",
            "pairs/s vs SET/s",
            pairs_per_s,
            set_per_s,
        )
        .target(Target::RatioAtLeast(0.5)),
    );
    rows.push(
        Row::versus(
            "lease_pairs_vs_rslock",
            "pairs/s",
            pairs_per_s,
            rslock_per_s,
        )
        .target(Target::RatioAtLeast(1.0)),
    );
    Ok(())
}

/// For 1, 16 and 64 buyers: HTTP holds vs raw SET NX, hold p99, confirms vs pgbench;
/// then the server's peak RSS. `breakdowns` gets, per level, where the CPU time of the
/// holds (each with its release) and of the confirm rounds (holds included) went, and
/// the server's store round trips ([`breakdown::between`]).
async fn http_rows(
    s: &Setup,
    rows: &mut Vec<Row>,
    breakdowns: &mut serde_json::Map<String, serde_json::Value>,
) -> anyhow::Result<()> {
    let (arena, arena_seats) = s.event("harbour-arena").await?;
    let (hall, hall_seats) = s.event("grand-hall").await?;
    let (big, big_seats) = s.event(&venues::slug(100_000)).await?;
    // Confirms sell seats: each level gets its own slice of the 100,000-seat event's
    // second half (the first half stays for the size rows).
    let slices = [(50_000, 60_000), (60_000, 80_000), (80_000, 100_000)];
    let pgbench_range = (hall_seats[0], hall_seats[hall_seats.len() - 1]);
    let server = &s.server.address;
    let form_page = s.form_page().await?;
    let pid = s.server.pid().context("the server has exited")?;
    let processes = breakdown::Processes::find(pid, &s.redis_url, &s.db).await?;
    for (buyers, (from, to)) in BUYERS.into_iter().zip(slices) {
        let set_per_s = bounded(
            &format!("raw SET NX PX, {buyers} callers"),
            stores::raw_set_nx(&s.redis_url, buyers, s.seconds),
        )
        .await?;
        let start = processes.snapshot(&s.server.metrics_url).await?;
        let hold = bounded(
            &format!("HTTP holds, {buyers} buyers"),
            holds::run(server, &form_page, arena, &arena_seats, buyers, s.seconds),
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
                &big_seats[from..to],
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
        let mut p99 = Row::alone(&format!("hold_p99_ms_{buyers}"), "ms", hold.latency_ms.p99);
        let mut confirm_row = Row::versus(
            &format!("confirm_vs_pgbench_{buyers}"),
            "confirms/s vs tps",
            confirm.per_s,
            tps,
        );
        if buyers == 64 {
            hold_row = hold_row.target(Target::RatioAtLeast(0.25));
            p99 = p99.target(Target::AtMost(10.0));
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
    }
    rows.push(Row::alone(
        "server_rss_mb_64",
        "MB (VmHWM)",
        peak_rss_mb(pid)?,
    ));
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
        rt.block_on(lease_rows(&setup, &mut rows))?;
    }
    if wanted("http") {
        rt.block_on(http_rows(&setup, &mut rows, &mut breakdowns))?;
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
