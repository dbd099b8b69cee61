//! What the failover guard costs per acquire: the acquire script's time inside Redis
//! (`INFO commandstats`, `cmdstat_evalsha` µs per call) and the caller's round trip,
//! guard off and on, on the same Redis in one run. The guard adds two `INFO` calls inside
//! the script and no round trip.
//!
//! Run with (a private Redis from the project's script, then the example):
//! `scripts/services.sh up && source .run/env && cargo run --release -p lease --example failover_guard_cost`
//! It resets the server's command statistics (`CONFIG RESETSTAT`): use a Redis of your own.

use std::time::{Duration, Instant};

use lease::{LeaseClient, LeaseKey, LeaseStore, MemoryLedger};

/// Grants measured per setting (sequential, one caller: latency, not throughput).
const GRANTS: u32 = 20_000;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").map_err(|_| "set REDIS_URL")?;
    println!("| failover guard | EVALSHA µs/call (Redis) | acquire round trip µs (client) |");
    println!("|---|---|---|");
    for guard in [false, true] {
        let client = LeaseClient::new(
            lease::connect(&url, Duration::from_secs(2))?,
            MemoryLedger::new(),
        )
        .with_failover_guard(guard);
        let group = format!("guard-cost:{:x}", rand::random::<u64>());
        // Warm up: loads the script and installs the group's first block.
        client
            .acquire(
                &LeaseKey::new(&group, "warm")?,
                "bench",
                Duration::from_secs(5),
            )
            .await?;
        let mut redis = client.redis();
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut redis)
            .await?;
        let started = Instant::now();
        for i in 0..GRANTS {
            let key = LeaseKey::new(&group, format!("s{i}"))?;
            client
                .acquire(&key, "bench", Duration::from_secs(5))
                .await?;
        }
        let round_trip_us = started.elapsed().as_secs_f64() * 1e6 / f64::from(GRANTS);
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut redis)
            .await?;
        let per_call = stats
            .lines()
            .find_map(|line| line.strip_prefix("cmdstat_evalsha:"))
            .and_then(|fields| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix("usec_per_call="))
            })
            .unwrap_or("?");
        let label = if guard { "on" } else { "off (lab)" };
        println!("| {label} | {per_call} | {round_trip_us:.1} |");
    }
    Ok(())
}
