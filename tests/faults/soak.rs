//! Mixed load with random faults: the invariant holds throughout.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use rand::Rng;
use seatlock::config::Settings;
use seatlock_harness::{RedisServer, eventually, store_urls};

use crate::deployment::*;
use crate::traffic::*;

#[tokio::test]
async fn soak_mixed_load_with_random_faults_keeps_the_invariant() {
    let secs: u64 = std::env::var("SEATLOCK_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let seed: u64 = rand::rng().random();
    println!("soak: {secs} s, seed {seed}");
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
    let mut redis = RedisServer::start().await.unwrap();
    let (admin, _) = store_urls().unwrap();
    let d = Deployment::new(&admin, &redis.url(), seatlock_harness::DEMO_VENUES).await;
    let payment = |s: &mut Settings| s.payment_delay_ms = 50;
    let mut servers = [d.server(payment).await, d.server(payment).await];
    let addresses = Arc::new(RwLock::new(
        servers
            .iter()
            .map(|s| s.address.clone())
            .collect::<Vec<_>>(),
    ));
    let traffic = Traffic::start(&d, addresses.clone(), d.seats.clone(), 8);

    let mut faults: BTreeMap<&str, u64> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(secs);
    // The three kinds take turns from a random start, so a run of three faults or more
    // has each kind.
    let mut kind = rng.random_range(0..3);
    while Instant::now() < deadline {
        kind = (kind + 1) % 3;
        tokio::time::sleep(Duration::from_millis(rng.random_range(2_000..5_000))).await;
        let victim = rng.random_range(0..servers.len());
        let down = Duration::from_millis(rng.random_range(200..3_000));
        let fault = match kind {
            0 => {
                redis.kill();
                tokio::time::sleep(down).await;
                redis.restart_empty().await.unwrap();
                "Redis killed, restarted empty"
            }
            1 => {
                servers[victim].signal("STOP").unwrap();
                tokio::time::sleep(down).await;
                servers[victim].signal("CONT").unwrap();
                "server SIGSTOP, then SIGCONT"
            }
            _ => {
                servers[victim].kill().await.unwrap();
                tokio::time::sleep(down).await;
                servers[victim] = d.server(payment).await;
                addresses.write().unwrap()[victim] = servers[victim].address.clone();
                "server SIGKILL, then a new one"
            }
        };
        *faults.entry(fault).or_default() += 1;
    }
    let tally = traffic.stop().await;

    // With the load gone, every hold lapses within its TTL: none is stuck.
    let pattern = format!("{}:*", d.key(0).lease_key().rsplit_once(':').unwrap().0);
    eventually(Duration::from_secs(10), "every hold to lapse", || async {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(&pattern)
            .query_async(&mut d.leases.redis().clone())
            .await
            .unwrap_or_default();
        keys.iter().all(|k| k.contains(":~"))
    })
    .await;

    let sold = d.order_count().await;
    let outcomes = tally.outcomes.lock().unwrap().clone();
    println!(
        "soak: {} requests, {} faults, {sold} seats sold",
        tally.requests(),
        faults.values().sum::<u64>()
    );
    println!("faults: {faults:#?}");
    println!("outcomes: {outcomes:#?}");
    assert!(sold > 0 && !faults.is_empty(), "the soak really ran");
    assert_only_503s(&tally);
    assert_no_acknowledged_sale_lost(&d, &tally).await;
    d.assert_invariant().await;
}
