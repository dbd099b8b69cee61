//! Where the time of a measured row goes: CPU seconds of each process taking part (from
//! `/proc/<pid>/stat`) and the server's own view of its store round trips (its
//! `GET /metrics` histograms), as deltas over the row.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Context;

/// The processes of one row: the server, Redis, Postgres (the postmaster and its
/// children) and this process (the load generator).
pub(crate) struct Processes {
    server: u32,
    redis: Option<u32>,
    postmaster: Option<u32>,
    ticks_per_s: f64,
}

/// CPU seconds per process group, the machine's busy and idle CPU seconds, and the
/// server's metrics, at one instant.
pub(crate) struct Snapshot {
    at: Instant,
    cpu_s: BTreeMap<&'static str, f64>,
    /// All CPUs' (busy, idle) seconds since boot (`/proc/stat`).
    machine_s: (f64, f64),
    metrics: BTreeMap<String, f64>,
}

/// The first line of `/proc/stat`: ticks busy (user, nice, system, irq, softirq, steal)
/// and idle (idle, iowait), summed over all CPUs.
fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let at = |i: usize| fields.get(i).copied().unwrap_or(0);
    (at(0) + at(1) + at(2) + at(5) + at(6) + at(7), at(3) + at(4))
}

/// `utime + stime` of `pid`, in clock ticks.
fn ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// The parent of `pid`.
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Every process id.
fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

impl Processes {
    /// Finds Redis (its `INFO server` process id) and the Postgres postmaster (the
    /// `postmaster.pid` of the data directory Postgres reports).
    pub(crate) async fn find(
        server: u32,
        redis_url: &str,
        db: &sqlx::PgPool,
    ) -> anyhow::Result<Self> {
        let mut redis = lease::connect(redis_url, std::time::Duration::from_secs(2))?.connection();
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut redis)
            .await?;
        let redis = info
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|p| p.trim().parse().ok());
        let data_dir: Option<String> = sqlx::query_scalar("SHOW data_directory")
            .fetch_one(db)
            .await
            .ok();
        let postmaster = data_dir
            .and_then(|dir| std::fs::read_to_string(format!("{dir}/postmaster.pid")).ok())
            .and_then(|pid| pid.lines().next()?.trim().parse().ok());
        let out = std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .context("getconf CLK_TCK")?;
        let ticks_per_s = String::from_utf8_lossy(&out.stdout).trim().parse()?;
        Ok(Processes {
            server,
            redis,
            postmaster,
            ticks_per_s,
        })
    }

    /// CPU seconds used so far by each group, and the server's metrics page (at
    /// `metrics_url`).
    pub(crate) async fn snapshot(&self, metrics_url: &str) -> anyhow::Result<Snapshot> {
        let seconds = |t: Option<u64>| t.unwrap_or(0) as f64 / self.ticks_per_s;
        let mut cpu_s = BTreeMap::new();
        cpu_s.insert("server", seconds(ticks(self.server)));
        cpu_s.insert("redis", seconds(self.redis.and_then(ticks)));
        cpu_s.insert("client (this bench)", seconds(ticks(std::process::id())));
        if let Some(postmaster) = self.postmaster {
            let backends: u64 = pids()
                .into_iter()
                .filter(|&p| p == postmaster || parent(p) == Some(postmaster))
                .filter_map(ticks)
                .sum();
            cpu_s.insert("postgres", seconds(Some(backends)));
        }
        let (busy, idle) = machine_ticks();
        let machine_s = (seconds(Some(busy)), seconds(Some(idle)));
        Ok(Snapshot {
            at: Instant::now(),
            cpu_s,
            machine_s,
            metrics: metrics(metrics_url).await?,
        })
    }
}

/// The server's metrics page at `metrics_url`, each sample by its name (labels
/// included, as the page writes them).
pub(crate) async fn metrics(metrics_url: &str) -> anyhow::Result<BTreeMap<String, f64>> {
    let page = reqwest::get(metrics_url).await?.text().await?;
    Ok(page
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect())
}

/// Per `per` operations between two snapshots: CPU milliseconds of each group, of the
/// rest of the machine's busy time (other developers' builds and tests share it, and the
/// kernel's network interrupts are charged to no process) and idle,
/// and each store round trip's count and mean latency as the server measured them.
pub(crate) fn between(before: &Snapshot, after: &Snapshot, per: f64) -> serde_json::Value {
    let wall_s = (after.at - before.at).as_secs_f64();
    let mut cpu = serde_json::Map::new();
    let mut used = 0.0;
    for (group, end) in &after.cpu_s {
        let spent = end - before.cpu_s.get(group).copied().unwrap_or(0.0);
        used += spent;
        cpu.insert((*group).into(), round(spent * 1e3 / per).into());
    }
    let busy = after.machine_s.0 - before.machine_s.0;
    let idle = after.machine_s.1 - before.machine_s.1;
    cpu.insert(
        "other processes and interrupts".into(),
        round((busy - used).max(0.0) * 1e3 / per).into(),
    );
    cpu.insert("idle".into(), round(idle * 1e3 / per).into());
    let delta = |name: &str| {
        after.metrics.get(name).copied().unwrap_or(0.0)
            - before.metrics.get(name).copied().unwrap_or(0.0)
    };
    let mut round_trips = serde_json::Map::new();
    for name in after.metrics.keys() {
        let Some(labels) = name
            .strip_suffix("}")
            .and_then(|n| n.split_once("_seconds_count{"))
        else {
            continue;
        };
        let calls = delta(name);
        if calls > 0.0 {
            let sum = delta(&format!("{}_seconds_sum{{{}}}", labels.0, labels.1));
            round_trips.insert(
                format!("{}{{{}}}", labels.0, labels.1),
                serde_json::json!({
                    "per_op": round(calls / per),
                    "mean_ms": round(sum / calls * 1e3),
                }),
            );
        }
    }
    serde_json::json!({
        "cpu_ms_per_op": cpu,
        "round_trips": round_trips,
        "wall_s": round(wall_s),
    })
}

/// Three decimals.
fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
