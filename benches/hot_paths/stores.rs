//! The store-level rows: lease pairs against `redis-benchmark` and the `rslock` crate,
//! raw `SET NX PX` from redis-rs (the HTTP rows' baseline), and `pgbench` running the
//! fenced single-row UPDATE (the confirm rows' baseline).

use std::future::Future;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use lease::LeaseStore;
use seatlock::ledger::PgFenceLedger;
use sqlx::PgPool;

/// What [`per_second`] measured.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rate {
    /// Operations completed per second in the measured part.
    pub per_s: f64,
    /// Every operation completed, the warm-up's included (for per-operation costs taken
    /// over the whole run, such as [`redis_cpu_s`] deltas).
    pub all: u64,
}

/// Runs `callers` tasks, each repeating the operation `op(caller)` makes, for a short
/// warm-up and then `duration`.
pub(crate) async fn per_second<F, Fut>(
    callers: usize,
    duration: Duration,
    op: F,
) -> anyhow::Result<Rate>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let op = Arc::new(op);
    let warm_up = Duration::from_millis(500);
    let started = Instant::now();
    let (measure_from, deadline) = (started + warm_up, started + warm_up + duration);
    let done = Arc::new(AtomicU64::new(0));
    let all = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..callers)
        .map(|caller| {
            let (op, done, all) = (op.clone(), done.clone(), all.clone());
            tokio::spawn(async move {
                loop {
                    let now = Instant::now();
                    if now >= deadline {
                        return anyhow::Ok(());
                    }
                    op(caller).await?;
                    all.fetch_add(1, Ordering::Relaxed);
                    if now >= measure_from {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    Ok(Rate {
        per_s: done.load(Ordering::Relaxed) as f64 / duration.as_secs_f64(),
        all: all.load(Ordering::Relaxed),
    })
}

/// CPU seconds the Redis server at `redis_url` has used since it started (`INFO cpu`:
/// `used_cpu_sys + used_cpu_user`, its main thread and any others).
pub(crate) async fn redis_cpu_s(redis_url: &str) -> anyhow::Result<f64> {
    let mut redis = lease::connect(redis_url, Duration::from_secs(2))?.connection();
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(&mut redis)
        .await?;
    let field = |name: &str| -> anyhow::Result<f64> {
        let value = info
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .with_context(|| format!("no {name} in INFO cpu"))?;
        Ok(value.trim().parse()?)
    };
    Ok(field("used_cpu_sys")? + field("used_cpu_user")?)
}

/// Runs `measurement` (a [`per_second`] on the Redis at `redis_url`) and returns its rate
/// and the Redis CPU time per operation, in µs ([`redis_cpu_s`] before and after, over
/// every operation of the run).
pub(crate) async fn with_redis_cpu(
    redis_url: &str,
    measurement: impl Future<Output = anyhow::Result<Rate>>,
) -> anyhow::Result<(Rate, f64)> {
    let before = redis_cpu_s(redis_url).await?;
    let rate = measurement.await?;
    let spent = redis_cpu_s(redis_url).await? - before;
    Ok((rate, spent * 1e6 / rate.all.max(1) as f64))
}

/// Runs `measurement` and returns it with the mean µs Redis spent inside each call of
/// each of `commands` during it (`INFO commandstats` deltas: `usec` / `calls`; a
/// script's or a function's own inner commands included), e.g. `fcall` (a grant) and
/// `evalsha` (a release).
pub(crate) async fn with_command_us<T, const N: usize>(
    redis_url: &str,
    commands: [&str; N],
    measurement: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<(T, [f64; N])> {
    let mut before = [(0, 0); N];
    for (i, command) in commands.iter().enumerate() {
        before[i] = command_stats(redis_url, command).await?;
    }
    let measured = measurement.await?;
    let mut us = [0.0; N];
    for (i, command) in commands.iter().enumerate() {
        let after = command_stats(redis_url, command).await?;
        let calls = after.0.saturating_sub(before[i].0).max(1);
        us[i] = after.1.saturating_sub(before[i].1) as f64 / calls as f64;
    }
    Ok((measured, us))
}

/// `(calls, usec)` of `command` in `INFO commandstats` (zeros before its first call).
async fn command_stats(redis_url: &str, command: &str) -> anyhow::Result<(u64, u64)> {
    let mut redis = lease::connect(redis_url, Duration::from_secs(2))?.connection();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut redis)
        .await?;
    let prefix = format!("cmdstat_{command}:");
    let Some(line) = info.lines().find_map(|line| line.strip_prefix(&prefix)) else {
        return Ok((0, 0));
    };
    let field = |name: &str| -> anyhow::Result<u64> {
        let value = line
            .split(',')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .with_context(|| format!("no {name} in {line}"))?;
        Ok(value.parse()?)
    };
    Ok((field("calls")?, field("usec")?))
}

/// The application's Redis lease store over `redis_url`: the [`lease::LeaseClient`] with
/// the Postgres fence ledger of `db`, its failover guard on or off.
pub(crate) fn redis_leases(
    redis_url: &str,
    db: &PgPool,
    failover_guard: bool,
) -> anyhow::Result<Arc<dyn LeaseStore>> {
    let redis = lease::connect(redis_url, Duration::from_secs(2))?;
    Ok(Arc::new(
        lease::LeaseClient::new(redis, PgFenceLedger(db.clone()))
            .with_failover_guard(failover_guard),
    ))
}

/// Lease acquire + release pairs per second from `callers` tasks sharing one lease
/// store (for Redis one multiplexed connection, as the server has; for etcd one client),
/// each on its own key of one group, with a 10 s TTL.
pub(crate) async fn lease_pairs(
    store: Arc<dyn LeaseStore>,
    callers: usize,
    duration: Duration,
) -> anyhow::Result<Rate> {
    lease_pairs_over(store, callers, 1, duration).await
}

/// [`lease_pairs`] with the callers spread over `groups` groups (caller `i` in group
/// `i % groups`): many events at once, which a Redis Cluster spreads over its masters.
pub(crate) async fn lease_pairs_over(
    store: Arc<dyn LeaseStore>,
    callers: usize,
    groups: usize,
    duration: Duration,
) -> anyhow::Result<Rate> {
    let group = seatlock_harness::unique_name("bench-lease");
    per_second(callers, duration, move |caller| {
        let store = store.clone();
        let key = lease::LeaseKey::new(format!("{group}-{}", caller % groups), caller.to_string());
        async move {
            let lease = store
                .acquire(&key?, "bench", Duration::from_secs(10))
                .await?;
            anyhow::ensure!(store.release(&lease).await?, "release found the lease gone");
            Ok(())
        }
    })
    .await
}

/// `rslock` lock + unlock pairs per second on the same Redis, `callers` tasks sharing
/// one `LockManager`, each on its own resource.
pub(crate) async fn rslock_pairs(
    redis_url: &str,
    callers: usize,
    duration: Duration,
) -> anyhow::Result<Rate> {
    let manager = Arc::new(rslock::LockManager::new(vec![redis_url.to_owned()]));
    let prefix = seatlock_harness::unique_name("bench-rslock");
    per_second(callers, duration, move |caller| {
        let manager = manager.clone();
        let resource = format!("{prefix}:{caller}");
        async move {
            let lock = manager
                .lock(resource.as_bytes(), Duration::from_secs(10))
                .await
                .map_err(|e| anyhow::anyhow!("rslock: {e:?}"))?;
            manager.unlock(&lock).await;
            Ok(())
        }
    })
    .await
}

/// Raw `SET key 1 NX PX 600000` per second from redis-rs, `callers` tasks sharing one
/// connection manager (as the server's lease client does), every key fresh so each SET
/// succeeds. The keys are deleted afterwards rather than left to expire: every expiry is a
/// keyspace notification that each seatlock server's live hub (subscribed to expiries)
/// would have to read during the rows that follow.
pub(crate) async fn raw_set_nx(
    redis_url: &str,
    callers: usize,
    duration: Duration,
) -> anyhow::Result<f64> {
    let redis = lease::connect(redis_url, Duration::from_secs(2))?.connection();
    let prefix = seatlock_harness::unique_name("bench-setnx");
    let counter = Arc::new(AtomicU64::new(0));
    let (keys, mut cleanup) = (counter.clone(), redis.clone());
    let key_name = move |n: u64| format!("{prefix}:{n}");
    let name = key_name.clone();
    let rate = per_second(callers, duration, move |_| {
        let mut redis = redis.clone();
        let key = name(counter.fetch_add(1, Ordering::Relaxed));
        async move {
            let set: Option<String> = redis::cmd("SET")
                .arg(key)
                .arg(1)
                .arg("NX")
                .arg("PX")
                .arg(600_000)
                .query_async(&mut redis)
                .await?;
            anyhow::ensure!(set.is_some(), "SET NX refused a fresh key");
            Ok(())
        }
    })
    .await?;
    let written = keys.load(Ordering::Relaxed);
    for from in (0..written).step_by(1000) {
        let batch: Vec<String> = (from..written.min(from + 1000)).map(&key_name).collect();
        let _: u64 = redis::cmd("UNLINK")
            .arg(batch)
            .query_async(&mut cleanup)
            .await?;
    }
    Ok(rate.per_s)
}

/// Host and port of a `redis://host:port/` URL.
fn redis_host_port(redis_url: &str) -> anyhow::Result<(String, u16)> {
    let url = reqwest::Url::parse(redis_url)?;
    let host = url.host_str().context("REDIS_URL has no host")?.to_owned();
    Ok((host, url.port().unwrap_or(6379)))
}

/// Runs a command and returns its standard output; fails with its standard error.
fn output(command: &mut Command) -> anyhow::Result<String> {
    let out = command
        .output()
        .with_context(|| format!("running {command:?}"))?;
    if !out.status.success() {
        bail!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `redis-benchmark -t set -c <clients> -n <requests> --csv` against `redis_url`:
/// SET requests per second. Leaves one key, `key:__rand_int__`, which it deletes.
pub(crate) fn redis_benchmark_set(
    redis_url: &str,
    clients: usize,
    requests: u64,
) -> anyhow::Result<f64> {
    let (host, port) = redis_host_port(redis_url)?;
    let csv = output(
        Command::new("redis-benchmark")
            .args(["-h", &host, "-p", &port.to_string(), "-t", "set"])
            .args([
                "-c",
                &clients.to_string(),
                "-n",
                &requests.to_string(),
                "--csv",
            ]),
    )?;
    // "test","rps",...  then  "SET","65189.77",...
    let rps = csv
        .lines()
        .find_map(|line| line.strip_prefix("\"SET\",\""))
        .and_then(|rest| rest.split('"').next())
        .with_context(|| format!("no SET line in redis-benchmark's output: {csv}"))?;
    let _ = output(Command::new("redis-cli").args([
        "-h",
        &host,
        "-p",
        &port.to_string(),
        "DEL",
        "key:__rand_int__",
    ]));
    Ok(rps.parse()?)
}

/// The pgbench script: the confirm's fenced write reduced to one single-row UPDATE that
/// always writes (it flips `sold` and bumps the token, under the same fencing
/// condition), on a random seat of `:event` between `:first` and `:last`.
pub(crate) const PGBENCH_SCRIPT: &str = "\\set seat random(:first, :last)
UPDATE event_seats SET sold = NOT sold, fence_token = fence_token + 1
 WHERE event_id = :event AND seat_id = :seat AND fence_token <= 9007199254740991;
";

/// `pgbench -n -M prepared -c <clients> -j 2 -T <seconds> -f <script>` on
/// `database_url`, the UPDATE of [`PGBENCH_SCRIPT`] over the seats `first..=last` of
/// `event`: transactions per second (without connection time).
pub(crate) fn pgbench_fenced_update(
    database_url: &str,
    event: i64,
    (first, last): (i64, i64),
    clients: usize,
    seconds: u64,
) -> anyhow::Result<f64> {
    let script = std::env::temp_dir().join(seatlock_harness::unique_name("pgbench-fenced.sql"));
    std::fs::write(&script, PGBENCH_SCRIPT)?;
    let threads = clients.min(2);
    let text = output(
        Command::new("pgbench")
            .args(["-n", "-M", "prepared", "-c", &clients.to_string()])
            .args(["-j", &threads.to_string(), "-T", &seconds.to_string()])
            .args(["-D", &format!("event={event}")])
            .args([
                "-D",
                &format!("first={first}"),
                "-D",
                &format!("last={last}"),
            ])
            .arg("-f")
            .arg(&script)
            .arg(database_url),
    );
    let _ = std::fs::remove_file(&script);
    let text = text?;
    let tps = text
        .lines()
        .find_map(|line| line.strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next())
        .with_context(|| format!("no tps line in pgbench's output: {text}"))?;
    Ok(tps.parse()?)
}
