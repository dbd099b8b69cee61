//! The Redis Cluster rows: lease pairs from 64 callers over 64 events at once
//! ([`stores::lease_pairs_over`]) on a private cluster of three masters and three
//! replicas ([`ClusterTopology`]), against the same on one private Redis server started
//! with the same settings but without cluster mode; and the same 64 callers on ONE event
//! of the cluster, which stays on one shard by design (one group, one slot). What bounds
//! each and why: `docs/cluster.md`.

use std::sync::Arc;
use std::time::Duration;

use lease::{LeaseClient, LeaseStore};
use seatlock::ledger::PgFenceLedger;
use seatlock_harness::RedisServer;
use seatlock_harness::cluster::ClusterTopology;
use sqlx::PgPool;

use crate::report::Row;
use crate::stores;

/// Callers of every row, and the events they spread over.
const CALLERS: usize = 64;

/// The lease store on the Redis (or cluster) at `url`, with the Postgres fence ledger.
fn leases(url: &str, db: &PgPool) -> anyhow::Result<Arc<dyn LeaseStore>> {
    let redis = lease::connect(url, Duration::from_secs(2))?;
    Ok(Arc::new(LeaseClient::new(redis, PgFenceLedger(db.clone()))))
}

/// `cluster3_pairs_vs_one_master_64` (many events, three masters against one server) and
/// `cluster3_one_event_pairs_vs_many_64` (one event on the cluster against many).
pub(crate) async fn rows(
    db: &PgPool,
    seconds: Duration,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    let single = RedisServer::start().await?;
    let one = stores::lease_pairs_over(leases(&single.url(), db)?, CALLERS, CALLERS, seconds)
        .await?
        .per_s;
    drop(single);
    let cluster = ClusterTopology::start().await?;
    let store = leases(&cluster.url(), db)?;
    let many = stores::lease_pairs_over(store.clone(), CALLERS, CALLERS, seconds)
        .await?
        .per_s;
    let hot = stores::lease_pairs_over(store, CALLERS, 1, seconds)
        .await?
        .per_s;
    rows.push(Row::versus(
        "cluster3_pairs_vs_one_master_64",
        "pairs/s, 64 callers over 64 events",
        many,
        one,
    ));
    rows.push(Row::versus(
        "cluster3_one_event_pairs_vs_many_64",
        "pairs/s, 64 callers on one event",
        hot,
        many,
    ));
    Ok(())
}
