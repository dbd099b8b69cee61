//! Step 5, *a store that survives*: fencing tokens come from blocks reserved in a durable
//! [`FenceLedger`], installed in Redis by `scripts/raise_ceiling.lua` and issued by
//! `scripts/acquire.lua`. The why is on [`FenceLedger`]; the client's side of it (one
//! reservation at a time, a block refused when Redis lost its data) is [`Fence`].

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

use tokio::sync::Mutex;

use crate::error::LeaseError;
use crate::keys::LeaseKey;
use crate::redis::RedisStore;
use crate::token::MAX_FENCING_TOKEN;
use crate::{scripts, telemetry};

/// Durable storage for fencing-token ceilings: the part of the fencing scheme that must
/// survive Redis losing its data (the article's step 5). This is the one place the crate
/// explains step 5.
///
/// **Blocks.** A single Redis can lose everything on restart. Leases are then simply lost
/// (holders are told [`LeaseError::Lost`] when they next act), but fencing tokens must
/// never go backwards. So Redis may issue tokens only up to a *ceiling* reserved here,
/// [`LeaseClient::with_block_size`](crate::LeaseClient::with_block_size) tokens at a time
/// (the hi/lo allocation pattern): one ledger write per block, not per grant, and after
/// Redis loses its data the next block starts above every token ever issued. Tokens stay
/// exact integers up to [`MAX_FENCING_TOKEN`] (2^53 − 1); beyond it acquires fail with
/// [`LeaseError::TokensExhausted`].
///
/// **The reservation marker.** Only a block whose reservation began on the data Redis
/// still has is installed: the acquire that asks for it leaves a marker in the group
/// (`lease:{group}:~reserving:<nonce>`) and the install needs it. So a block reserved
/// before a loss can never re-seed the lost counter below tokens that a newer block
/// issued meanwhile.
///
/// **The failover guard.** A Redis that *kept* its data but not all of it (a replica
/// promoted by Sentinel before it applied the last grants, a restart from an older
/// snapshot) has a counter, only one behind tokens already issued. So a block is stamped
/// with the identity of the server that installed it, `<run_id>:<master_replid>`
/// (`run_id` from `INFO server` changes on every start, `master_replid` from
/// `INFO replication` when a replica is promoted), the reservation marker names the server
/// it was written on, and acquire issues a token only from a block stamped by the server
/// running it; otherwise it asks for a fresh block, which the ledger puts above every
/// token issued before. It costs two `INFO` calls inside the acquire script per grant, no
/// extra round trip. [`LeaseClient::with_failover_guard`](crate::LeaseClient::with_failover_guard)
/// turns it off, for the failover lab only. On a Redis Cluster the guard is per shard
/// with no change: a group's fence hash lives in its slot, the script runs on that slot's
/// master, and the stamp is that master's identity; a promoted replica, or the new
/// master after a slot migration, has another and takes a fresh block.
///
/// **The contract.** `raise_ceiling(group, block)` must atomically add `block` to the
/// group's stored ceiling (starting from 0) and return the new value, durably, before
/// returning. Seatlock's implementation is one Postgres `INSERT … ON CONFLICT DO UPDATE …
/// RETURNING`. Any store with an atomic durable increment works (etcd, ZooKeeper, a SQL
/// sequence per group). [`MemoryLedger`](crate::MemoryLedger) is a non-durable one for
/// examples and tests.
pub trait FenceLedger: Send + Sync {
    /// Why a reservation failed (for Postgres, `sqlx::Error`). An acquire returns it
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

/// A [`crate::LeaseClient`]'s side of step 5: its ledger, how many tokens it reserves at
/// a time, whether the failover guard is on, and one reservation at a time.
pub(crate) struct Fence<L> {
    ledger: L,
    pub(crate) block_size: u64,
    /// Issue tokens only from a block installed on the Redis server running the script.
    /// Off only in the failover lab.
    pub(crate) failover_guard: bool,
    /// One block reservation at a time per client, so a burst of grants on a cold group
    /// reserves one block, not one per caller.
    reserving: Mutex<()>,
    /// Reservations made so far (to tell whether another task reserved while we waited).
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

    /// Answers acquire's "needs a block" for `key`'s group: reserves a block in the ledger
    /// and installs it under `reservation` (the marker that acquire left), unless another
    /// task installed one while this one waited its turn. Either way the caller then runs
    /// acquire again, which asks again if the block is used up or was refused.
    pub(crate) async fn replenish(
        &self,
        redis: &RedisStore,
        key: &LeaseKey,
        reservation: &str,
    ) -> Result<(), LeaseError> {
        // A cold group sends every concurrent acquire here at once; one reserves, the
        // others queue behind it rather than each spending a ledger write.
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

    /// Reserves a new block of fencing tokens in the ledger and hands it to Redis, if the
    /// reservation's marker (left by the acquire that asked) is still there; returns
    /// whether it was installed. Refused when Redis lost its data meanwhile: the block
    /// may lie below tokens another process reserved, installed and issued in between
    /// (the hi/lo allocation must only move up). Errors: [`LeaseError::TokensExhausted`]
    /// for a ceiling above [`MAX_FENCING_TOKEN`].
    async fn reserve_block(
        &self,
        redis: &RedisStore,
        key: &LeaseKey,
        reservation: &str,
    ) -> Result<bool, LeaseError> {
        // The durable write comes first: once the ledger has answered, no token at or
        // below the previous ceiling can be issued from this block, whatever Redis forgets.
        let ceiling = self
            .ledger
            .raise_ceiling(key.group(), self.block_size)
            .await
            .map_err(|err| LeaseError::Ledger(Box::new(err)))?;
        // Lua counts in doubles: past 2^53 - 1 tokens would stop being exact.
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
        // A refused install costs nothing but this block's tokens: acquire asks again and
        // the next reservation lies above it.
        if !installed {
            metrics::counter!(telemetry::STALE_RESERVATIONS_TOTAL).increment(1);
        }
        Ok(installed)
    }
}
