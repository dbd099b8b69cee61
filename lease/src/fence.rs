//! Step 5, *a store that survives*: where fencing tokens come from.
//!
//! Tokens come from blocks reserved in a durable [`FenceLedger`].
//! `scripts/raise_ceiling.lua` installs a block in Redis. `scripts/acquire.lua` issues
//! tokens from it. The why is on [`FenceLedger`]. [`Fence`] is the client's side: one
//! reservation at a time, and a block refused when Redis lost its data.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

use tokio::sync::Mutex;

use crate::error::LeaseError;
use crate::keys::LeaseKey;
use crate::redis::RedisStore;
use crate::token::MAX_FENCING_TOKEN;
use crate::{scripts, telemetry};

/// Durable storage for fencing-token ceilings. This is the one place the crate explains
/// step 5.
///
/// **Blocks.** A single Redis can lose everything on restart. The leases are then lost,
/// and holders learn it when they next act: a renew, release or owner check answers
/// `false`. But fencing tokens
/// must never go backwards. So Redis issues tokens only up to a *ceiling* reserved here.
/// Each reservation is a block of
/// [`LeaseClient::with_block_size`](crate::LeaseClient::with_block_size) tokens. This is
/// the hi/lo allocation pattern. It costs one ledger write per block, not per grant.
/// After Redis loses its data, the next block starts above every token ever issued.
/// Tokens stay exact integers up to [`MAX_FENCING_TOKEN`], 2^53 − 1. Past it, acquires
/// fail with [`LeaseError::TokensExhausted`].
///
/// **The reservation marker.** The acquire that asks for a block leaves a marker in the
/// group: `lease:{group}:~reserving:<nonce>`. The install needs that marker. So only a
/// block whose reservation began on the data Redis still has is installed. A block
/// reserved before a loss can never re-seed the lost counter. Its tokens could lie below
/// tokens that a newer block issued meanwhile.
///
/// **The failover guard.** Some Redis servers keep their data, but not all of it. A
/// replica promoted by Sentinel may miss the last grants. A restart may load an older
/// snapshot. Such a server has a counter, only behind tokens already issued. So each
/// block is stamped with the identity of the server that installed it:
/// `<run_id>:<master_replid>`. `run_id` changes on every start. `master_replid` changes
/// when a replica is promoted. The reservation marker names the server it was written
/// on. Acquire issues a token only from a block stamped by the server running it.
/// Otherwise it asks for a fresh block, which the ledger puts above every token issued
/// before. The guard costs no extra round trip, and one `INFO replication` inside each
/// grant: the `run_id` (`INFO server`, the costlier) is read once per Redis process, by
/// the function library the grant runs in (`redis/library.rs`).
/// [`LeaseClient::with_failover_guard`](crate::LeaseClient::with_failover_guard) turns
/// it off, for the failover lab only.
///
/// On a Redis Cluster the guard works per shard, unchanged. A group's fence hash lives in
/// its slot. The script runs on that slot's master, and the stamp is that master's
/// identity. A promoted replica has another identity, and takes a fresh block. So does a
/// new master after a slot migration.
///
/// **The contract.** `raise_ceiling(group, block)` adds `block` to the group's stored
/// ceiling, which starts at 0. It does so atomically and durably, then returns the new
/// ceiling. Seatlock's ledger is one Postgres `INSERT … ON CONFLICT DO UPDATE …
/// RETURNING`. Any store with an atomic durable increment works: etcd, ZooKeeper, a SQL
/// sequence per group. [`MemoryLedger`](crate::MemoryLedger) is not durable. It is for
/// examples and tests.
pub trait FenceLedger: Send + Sync {
    /// Why a reservation failed: for Postgres, `sqlx::Error`. An acquire returns it
    /// boxed inside [`LeaseError::Ledger`].
    type Error: std::error::Error + Send + Sync + 'static;

    /// Reserves the next `block` tokens of `group`; returns the new ceiling.
    fn raise_ceiling(
        &self,
        group: &str,
        block: u64,
    ) -> impl Future<Output = Result<u64, Self::Error>> + Send;
}

/// Default number of fencing tokens reserved from the ledger at a time.
pub const DEFAULT_BLOCK_SIZE: u64 = 10_000;

/// A [`crate::LeaseClient`]'s side of step 5. It holds the ledger and the block size. It
/// knows whether the failover guard is on. It makes one reservation at a time.
pub(crate) struct Fence<L> {
    ledger: L,
    pub(crate) block_size: u64,
    /// Issue tokens only from a block installed on the Redis server running the script.
    /// It is off only in the failover lab.
    pub(crate) failover_guard: bool,
    /// One block reservation at a time per client. So a burst of grants on a cold group
    /// reserves one block, not one per caller.
    reserving: Mutex<()>,
    /// Reservations made so far. They tell whether another task reserved while we waited.
    reservations: AtomicU64,
}

impl<L: FenceLedger> Fence<L> {
    pub(crate) fn new(ledger: L) -> Self {
        Fence {
            ledger,
            block_size: DEFAULT_BLOCK_SIZE,
            failover_guard: true,
            reserving: Mutex::new(()),
            reservations: AtomicU64::new(0),
        }
    }

    /// Answers acquire's "needs a block" for `key`'s group. It reserves a block in the
    /// ledger and installs it under `reservation`, the marker acquire left. It does
    /// nothing if another task installed a block while this one waited its turn. Either
    /// way the caller then runs acquire again. Acquire asks again if the block is used up
    /// or was refused.
    pub(crate) async fn replenish(
        &self,
        redis: &RedisStore,
        key: &LeaseKey,
        reservation: &str,
    ) -> Result<(), LeaseError> {
        // A cold group sends every concurrent acquire here at once. One reserves. The
        // others queue behind it, rather than each spending a ledger write.
        let seen = self.reservations.load(SeqCst);
        let _one_at_a_time = self.reserving.lock().await;
        // Someone installed a block while we waited: acquire will find it.
        if self.reservations.load(SeqCst) != seen {
            return Ok(());
        }
        if self.reserve_block(redis, key, reservation).await? {
            self.reservations.fetch_add(1, SeqCst);
        }
        Ok(())
    }

    /// Reserves a new block of fencing tokens in the ledger and hands it to Redis.
    /// Returns whether Redis installed it. Redis refuses it when the reservation's marker
    /// is gone. Then Redis lost its data meanwhile. The block may lie below tokens that
    /// another process reserved, installed and issued in between. Hi/lo allocation must
    /// only move up. Errors: [`LeaseError::TokensExhausted`] for a ceiling above
    /// [`MAX_FENCING_TOKEN`].
    async fn reserve_block(
        &self,
        redis: &RedisStore,
        key: &LeaseKey,
        reservation: &str,
    ) -> Result<bool, LeaseError> {
        // The durable write comes first. Once the ledger has answered, this block starts
        // above the previous ceiling, whatever Redis forgets.
        let ceiling = self
            .ledger
            .raise_ceiling(key.group(), self.block_size)
            .await
            .map_err(|err| LeaseError::Ledger(Box::new(err)))?;
        // Lua counts in doubles. Past 2^53 - 1, tokens would stop being exact.
        if ceiling > MAX_FENCING_TOKEN {
            return Err(LeaseError::TokensExhausted { ceiling });
        }
        let installed = scripts::raise_ceiling(
            redis,
            key,
            reservation,
            ceiling,
            self.block_size,
            self.failover_guard,
        )
        .await?;
        // A refused install costs only this block's tokens. Acquire asks again, and the
        // next reservation lies above this one.
        if !installed {
            metrics::counter!(telemetry::STALE_RESERVATIONS_TOTAL).increment(1);
        }
        Ok(installed)
    }
}
