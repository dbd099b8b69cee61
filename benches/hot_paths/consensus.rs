//! The etcd and ZooKeeper rows: the same lease pairs as the Redis row
//! ([`stores::lease_pairs`]) on a private etcd ([`EtcdCluster`]) or ZooKeeper
//! ([`ZooKeeperEnsemble`]) of one and of three members on loopback, beside Redis measured
//! in the same run. The article's reference for a consensus store: "1-2 ms per grant,
//! some thousands of grants a second".

use std::sync::Arc;
use std::time::Duration;

use lease::LeaseStore;
use seatlock_harness::{EtcdCluster, ZooKeeperEnsemble};
use sqlx::PgPool;

use crate::report::{Row, Target};
use crate::stores;

/// Callers of the throughput rows (as the Redis lease row).
const CALLERS: usize = 64;

/// The consensus store of a group of rows.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Consensus {
    /// `etcd{1,3}_*` (`BENCH_ONLY=etcd`).
    Etcd,
    /// `zk{1,3}_*` (`BENCH_ONLY=zookeeper`).
    ZooKeeper,
}

/// One row per cluster size for latency (one caller: mean ms per acquire + release) and
/// one for throughput (64 callers: pairs/s), each beside Redis.
pub(crate) async fn rows(
    redis_url: &str,
    db: &PgPool,
    seconds: Duration,
    consensus: Consensus,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    let redis = stores::redis_leases(redis_url, db, true)?;
    let redis_ms = 1_000.0 / stores::lease_pairs(redis.clone(), 1, seconds).await?.per_s;
    let redis_per_s = stores::lease_pairs(redis, CALLERS, seconds).await?.per_s;
    for members in [1, 3] {
        // The cluster's guard lives until its rows are measured.
        let (prefix, _cluster, store): (_, Box<dyn std::any::Any>, Arc<dyn LeaseStore>) =
            match consensus {
                Consensus::Etcd => {
                    let cluster = EtcdCluster::start(members).await?;
                    let store = Arc::new(cluster.store().await?);
                    ("etcd", Box::new(cluster), store)
                }
                Consensus::ZooKeeper => {
                    let ensemble = ZooKeeperEnsemble::start(members).await?;
                    let store = Arc::new(ensemble.store().await?);
                    ("zk", Box::new(ensemble), store)
                }
            };
        let ms = 1_000.0 / stores::lease_pairs(store.clone(), 1, seconds).await?.per_s;
        let per_s = stores::lease_pairs(store, CALLERS, seconds).await?.per_s;
        let latency = Row::versus(
            &format!("{prefix}{members}_pair_ms_vs_redis"),
            "ms per pair, 1 caller",
            ms,
            redis_ms,
        );
        // One etcd member: three committed writes a pair (lease grant, create txn, revoke).
        rows.push(match (consensus, members) {
            (Consensus::Etcd, 1) => latency.target(Target::AtMost(1.5)),
            _ => latency,
        });
        rows.push(Row::versus(
            &format!("{prefix}{members}_pairs_vs_redis_64"),
            "pairs/s, 64 callers",
            per_s,
            redis_per_s,
        ));
    }
    Ok(())
}
