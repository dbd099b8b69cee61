//! [`LeaseClient`]: the five steps on Redis, as a [`LeaseStore`].
//!
//! Each operation is one Lua script or one command. So each is one round trip, and
//! atomic on the server. The scripts are in `scripts/`; `scripts.rs` runs them.

use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;

use crate::changes;
use crate::error::LeaseError;
use crate::fence::{Fence, FenceLedger};
use crate::keys::LeaseKey;
use crate::lease::{Extended, Extension, Grant, GroupSnapshot, Lease, TtlLimits, extended};
use crate::redis::{Connection, RedisStore};
use crate::scripts::{self, AcquireReply};
use crate::store::{LeaseChanges, LeaseStore, check_one_group};
use crate::telemetry;
use crate::token::{FencingToken, OwnerToken};

/// Redis counts TTLs in milliseconds (`PX`), from 1 ms.
const REDIS_TTL_LIMITS: TtlLimits = TtlLimits {
    min: Duration::from_millis(1),
    step: Duration::from_millis(1),
};

/// The lease client: one Redis connection plus the fence ledger.
///
/// The connection is multiplexed and repairs itself. The client is cheap to share behind
/// an `Arc`. Every method takes `&self`.
///
/// Its operations are those of [`LeaseStore`], so bring the trait into scope:
/// `use lease::LeaseStore`.
///
/// * Take a lease with [`acquire`](LeaseStore::acquire), one try.
/// * Or take it with [`acquire_with_backoff`](LeaseStore::acquire_with_backoff), retried
///   while busy ([`Backoff`](crate::Backoff)).
/// * Keep it with [`renew`](LeaseStore::renew). Or hand it to
///   [`watch`](LeaseClient::watch): a [`Watchdog`](crate::Watchdog) renews it every TTL/3.
/// * Give it back with [`release`](LeaseStore::release), a compare-and-delete.
///
/// The crate docs list every operation with its round trips.
pub struct LeaseClient<L> {
    redis: RedisStore,
    fence: Fence<L>,
    /// Whether [`LeaseStore::owned_by_paying`] marks the lease (on by default).
    cooling: bool,
}

impl<L: FenceLedger> LeaseClient<L> {
    /// A client over a Redis store and a ledger. [`connect`] opens the store.
    pub fn new(redis: RedisStore, ledger: L) -> Self {
        LeaseClient {
            redis,
            fence: Fence::new(ledger),
            cooling: true,
        }
    }

    /// Turns cooling on or off. It is on by default.
    ///
    /// **Off is for the race lab only** (`seatlock-lab serve --lab-disable-cooling`):
    /// [`LeaseStore::owned_by_paying`] is then [`LeaseStore::owned_by`], and a lease that
    /// lapses while its holder writes is granted to the next caller at once, as on a
    /// store without cooling; only the fence stands between the two writes.
    pub fn with_cooling(mut self, enabled: bool) -> Self {
        self.cooling = enabled;
        self
    }

    /// Turns the failover guard on or off. It is on by default.
    ///
    /// **Off is for the failover lab only**: `seatlock-lab serve
    /// --lab-disable-failover-guard`, `make failover`. Off, a promoted replica that
    /// missed the last grants can issue a fencing token again. [`FenceLedger`] says what
    /// the guard does and costs.
    pub fn with_failover_guard(mut self, enabled: bool) -> Self {
        self.fence.failover_guard = enabled;
        self
    }

    /// Sets how many tokens one ledger call reserves. The default is
    /// [`DEFAULT_BLOCK_SIZE`](crate::DEFAULT_BLOCK_SIZE). Larger blocks mean fewer ledger
    /// writes, and larger jumps after a Redis loss.
    pub fn with_block_size(mut self, block_size: u64) -> Self {
        self.fence.block_size = block_size.max(1);
        self
    }

    /// The current Redis connection, a cheap handle. It is for callers that run their
    /// own commands.
    pub fn redis(&self) -> Connection {
        self.redis.connection()
    }

    /// The Redis store the leases use. It is for callers that keep their own data in the
    /// same Redis. [`RedisStore::query`] repairs and times their commands like the
    /// leases' own. Seatlock keeps its browser sessions there.
    pub fn store(&self) -> &RedisStore {
        &self.redis
    }

    /// `holder`'s live lease on `key` (`scripts/current.lua`); with `cooling`, the same
    /// script marks it as paying for that long.
    async fn current_of(
        &self,
        key: &LeaseKey,
        holder: &str,
        cooling: Option<Duration>,
    ) -> Result<Option<Lease>, LeaseError> {
        let sent_at = tokio::time::Instant::now();
        let paying = cooling.map(|cooling| (holder, cooling));
        let current = scripts::current(&self.redis, key, paying).await?;
        Ok(current
            .filter(|(_, holding, _)| holding.holder == holder)
            .map(|(owner, holding, now_ms)| Lease {
                key: key.clone(),
                owner,
                fencing_token: holding.fencing_token,
                ttl: Duration::from_millis(holding.expires_at_ms - now_ms),
                expires_at_ms: holding.expires_at_ms,
                sent_at: Some(sent_at),
            }))
    }
}

#[async_trait]
impl<L: FenceLedger + 'static> LeaseStore for LeaseClient<L> {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn ttl_limits(&self) -> TtlLimits {
        REDIS_TTL_LIMITS
    }

    /// Steps 1, 2 and 4 in one Lua script, `scripts/acquire.lua`.
    ///
    /// The script creates each key only if it is absent: `SET key owner NX PX ttl_ms`.
    /// All keys get ONE new owner token and ONE fencing token. The script records each
    /// holding and publishes one message for the group ([`changes`]).
    ///
    /// The script refuses the whole grant, writing nothing, when:
    ///
    /// * Redis's clock is before the grant's `not_before_ms`: [`LeaseError::NotYet`],
    ///   checked first;
    /// * the grant's admission is not live: [`LeaseError::NotAdmitted`];
    /// * a key is retired: [`LeaseError::Retired`];
    /// * another owner holds a key: [`LeaseError::Held`], with that holder and its time left;
    /// * the holder would pass the grant's limit: [`LeaseError::OverLimit`].
    ///
    /// The limit is counted by Redis, in the same script. It reads only this holder's
    /// grants. Leases granted without a limit do not count against a later limit.
    ///
    /// Nothing is locked key by key. So two callers asking for overlapping keys each get
    /// all or nothing, and never deadlock.
    ///
    /// The TTL is rounded down to whole milliseconds, at least 1 ms. A grant sent twice
    /// after a dropped connection gets the same answer: the owner token makes it
    /// idempotent. When the group's block of fencing tokens runs out, one more round trip
    /// and one ledger call reserve the next block (step 5, [`FenceLedger`]).
    async fn acquire_all(&self, grant: &Grant) -> Result<Vec<Lease>, LeaseError> {
        // One script runs on one slot, so a grant is over distinct names of one group.
        check_one_group(&grant.keys)?;
        // Step 3 starts here. A fresh random owner token means no other caller can
        // release or renew what this grant creates. Nor can an older run of this one.
        let owner = OwnerToken::random();
        let attempt = scripts::Attempt {
            owner: &owner,
            // Names the block reservation this grant may make (step 5).
            reservation: &format!("{:016x}", rand::random::<u64>()),
            failover_guard: self.fence.failover_guard,
        };
        // This loops only while the group needs a new block of fencing tokens.
        // Every other answer is final.
        loop {
            // Timed before sending. Redis starts the TTL later, so `held_until` errs early.
            let sent_at = tokio::time::Instant::now();
            match scripts::acquire(&self.redis, grant, &attempt).await? {
                AcquireReply::Granted {
                    fencing_token,
                    expires_at_ms,
                } => {
                    return Ok(grant
                        .keys
                        .iter()
                        .map(|key| Lease {
                            key: key.clone(),
                            owner: owner.clone(),
                            fencing_token: FencingToken(fencing_token),
                            ttl: Duration::from_millis(scripts::ttl_ms(grant)),
                            expires_at_ms,
                            sent_at: Some(sent_at),
                        })
                        .collect());
                }
                AcquireReply::Held {
                    holder,
                    remaining_ms,
                } => {
                    return Err(LeaseError::Held {
                        holder,
                        remaining: Duration::from_millis(remaining_ms),
                    });
                }
                AcquireReply::OverLimit { held, limit } => {
                    return Err(LeaseError::OverLimit { held, limit });
                }
                AcquireReply::Retired => return Err(LeaseError::Retired),
                AcquireReply::Cooling { name, remaining_ms } => {
                    return Err(LeaseError::Cooling {
                        name,
                        remaining: Duration::from_millis(remaining_ms),
                    });
                }
                AcquireReply::NotAdmitted => return Err(LeaseError::NotAdmitted),
                AcquireReply::NotYet { not_before_ms } => {
                    return Err(LeaseError::NotYet { not_before_ms });
                }
                // Step 5. Redis may not issue past the ledger's ceiling. After a failover
                // it may not issue from a block another server installed. So reserve a
                // block, then ask again with the same owner token and marker.
                AcquireReply::NeedsBlock => {
                    self.fence
                        .replenish(&self.redis, &grant.keys[0], attempt.reservation)
                        .await?;
                }
            }
        }
    }

    /// Step 3, compare-and-delete, in `scripts/release.lua`. It deletes the lease only
    /// while the key still holds this caller's owner token. So a holder that paused past
    /// its TTL cannot delete the lease of whoever took it next. One round trip.
    async fn release(&self, lease: &Lease) -> Result<bool, LeaseError> {
        scripts::release(&self.redis, &lease.key, &lease.owner).await
    }

    /// Recover-by-holder and compare-and-delete in one script, one round trip.
    /// `scripts/release_held_by.lua` finds the owner token; `scripts/release.lua` ends it.
    async fn release_held_by(&self, key: &LeaseKey, holder: &str) -> Result<bool, LeaseError> {
        scripts::release_held_by(&self.redis, key, holder).await
    }

    /// Extends `lease` to `lease.ttl()` from now, if the caller still owns it. Then it
    /// updates `expires_at_ms()`. This is a compare-and-pexpire, in `scripts/renew.lua`.
    /// An expired key is never recreated. One round trip.
    async fn renew(&self, lease: &mut Lease) -> Result<bool, LeaseError> {
        let ttl_ms = lease.ttl.as_millis() as u64;
        // The new lease runs from when Redis ran the script, which is after this instant.
        let sent_at = tokio::time::Instant::now();
        let renewed = scripts::renew(&self.redis, &lease.key, &lease.owner, ttl_ms).await?;
        let result = if renewed.is_some() {
            "renewed"
        } else {
            "not_owner"
        };
        metrics::counter!(telemetry::RENEWALS_TOTAL, "result" => result).increment(1);
        match renewed {
            Some(expires_at_ms) => {
                lease.expires_at_ms = expires_at_ms;
                lease.sent_at = Some(sent_at);
                Ok(true)
            }
            // Not ours any more. Leave the lease as it was: the caller must stop writing.
            None => Ok(false),
        }
    }

    /// One script, `scripts/extend.lua`, whatever the number of leases. It checks every
    /// lease's owner token and budget, then extends them all, their holdings, their
    /// extension records and the holder's set. On Sentinel and Cluster it is the same
    /// script: every key is in the group's slot.
    async fn extend_all(
        &self,
        leases: &[Lease],
        extension: &Extension,
    ) -> Result<Extended, LeaseError> {
        let keys: Vec<LeaseKey> = leases.iter().map(|l| l.key.clone()).collect();
        check_one_group(&keys)?;
        let (expiries, extensions) = scripts::extend(&self.redis, leases, extension).await?;
        Ok(Extended {
            leases: extended(leases, extension, &expiries),
            extensions,
        })
    }

    /// Retires the resource and releases `lease`, in one script: `scripts/retire.lua`.
    /// From then on every acquire of the resource is refused with [`LeaseError::Retired`].
    ///
    /// It is for a resource whose fenced write was final, like a sold seat. Later
    /// contenders are then turned away by the lock service, not by the resource. Another
    /// owner's lease is left as it is. It may lapse, be renewed or be released. Only new
    /// grants are refused.
    ///
    /// The retirement is a hint, not a guarantee. It lives in Redis, which can lose it
    /// (step 5). It is recorded after the resource's final write, so a contender can be
    /// granted a lease in between. The resource's own check still refuses a late write:
    /// the fence, and for a sold seat its `NOT sold`. Idempotent.
    async fn retire(&self, lease: &Lease) -> Result<bool, LeaseError> {
        scripts::retire(&self.redis, &lease.key, &lease.owner).await
    }

    /// One round trip, whatever the number of resources: `TIME` and `HGETALL` of the
    /// holders hash, pipelined.
    async fn holders(&self, group: &str) -> Result<GroupSnapshot, LeaseError> {
        Ok(scripts::holders(&self.redis, group).await?)
    }

    /// One script, `scripts/held_by.lua`. It reads the holder's set, and checks each name
    /// against the holders hash.
    async fn held_by(&self, group: &str, holder: &str) -> Result<GroupSnapshot, LeaseError> {
        Ok(scripts::held_by(&self.redis, group, holder).await?)
    }

    /// One script (`scripts/current.lua`). Whoever presents the label can then act as the
    /// owner. So use it only where the label is itself authenticated. In seatlock the
    /// label is the buyer id, from a cookie the server signed.
    async fn owned_by(&self, key: &LeaseKey, holder: &str) -> Result<Option<Lease>, LeaseError> {
        self.current_of(key, holder, None).await
    }

    /// [`LeaseStore::owned_by`] and the paying marker in one script, `scripts/current.lua`:
    /// one round trip, as `owned_by`'s.
    async fn owned_by_paying(
        &self,
        key: &LeaseKey,
        holder: &str,
        cooling: Duration,
    ) -> Result<Option<Lease>, LeaseError> {
        self.current_of(key, holder, self.cooling.then_some(cooling))
            .await
    }

    /// One script, `scripts/end_paying.lua`: removes the marker if it carries `lease`'s
    /// fencing token, and announces the resource free if its lease lapsed meanwhile.
    async fn end_paying(&self, lease: &Lease) -> Result<bool, LeaseError> {
        scripts::end_paying(&self.redis, lease).await
    }

    /// One `GET`, compared here. It checks one instant only. The lease can expire right
    /// after it returns `true`. That is exactly why writes must carry the fencing token.
    async fn is_held(&self, lease: &Lease) -> Result<bool, LeaseError> {
        let get = redis::cmd("GET").arg(lease.key.lease_key()).clone();
        let owner: Option<String> = self.redis.query("is_held", &get).await?;
        Ok(owner.as_deref() == Some(lease.owner.as_str()))
    }

    /// `PTTL`: the remaining time as Redis sees it.
    async fn remaining(&self, key: &LeaseKey) -> Result<Option<Duration>, LeaseError> {
        let pttl_cmd = redis::cmd("PTTL").arg(key.lease_key()).clone();
        let pttl: i64 = self.redis.query("remaining", &pttl_cmd).await?;
        Ok((pttl >= 0).then(|| Duration::from_millis(pttl as u64)))
    }

    /// `PING` over the client's own connection. It is repaired like every other request.
    /// So health checks see what the leases see.
    async fn ping(&self) -> Result<(), LeaseError> {
        let _: String = self.redis.query("ping", &redis::cmd("PING")).await?;
        Ok(())
    }

    /// `PSUBSCRIBE` to the groups' event channels and to the expiry notifications
    /// ([`changes::patterns`]). On a cluster it subscribes at every node
    /// ([`changes::subscribe`]).
    ///
    /// It first turns expiry notifications on
    /// ([`changes::enable_expiry_notifications`]). A Redis that refuses `CONFIG` refuses
    /// that, and lapses are then not reported. Redis finds lapsed keys by sampling. So a
    /// lapse is reported up to about a second late, unless someone reads the key.
    async fn changes(&self, group_prefix: &str) -> Result<LeaseChanges, LeaseError> {
        // A managed Redis may refuse this. The stream then reports grants and releases
        // only. The application's live feed checks and reports this itself.
        let _ = changes::enable_expiry_notifications(&mut self.redis()).await;
        // On a cluster, one connection per node: keyspace notifications are per node.
        let timeout = std::time::Duration::from_secs(2);
        let nodes = self.store().pubsub_nodes().await?;
        let nodes = changes::subscribe(nodes, &format!("{group_prefix}*"), timeout).await?;
        let pubsub =
            futures_util::stream::select_all(nodes.into_iter().map(|n| n.into_on_message()));
        // Expiry notifications name every key of the server. Keep the groups asked for.
        let prefix = group_prefix.to_owned();
        Ok(Box::pin(pubsub.flat_map(move |msg| {
            let payload: String = msg.get_payload().unwrap_or_default();
            let mut changes = changes::parse(msg.get_channel_name(), &payload);
            changes.retain(|change| change.key().group().starts_with(&prefix));
            futures_util::stream::iter(changes)
        })))
    }
}

/// Opens a [`RedisStore`] for `url`, such as `redis://host:port/db`. It connects lazily,
/// and repairs its connection. `timeout` bounds connecting and each response. So a lost
/// Redis turns into [`LeaseError::Unavailable`] quickly, not a hung request.
pub fn connect(url: &str, timeout: Duration) -> Result<RedisStore, redis::RedisError> {
    RedisStore::open(url, timeout)
}

/// [`connect`] for async code ([`RedisStore::open_async`]). With a Sentinel URL, it asks
/// the Sentinels without blocking the thread. It passes over a hung one. `timeout`
/// bounds the whole.
pub async fn connect_async(url: &str, timeout: Duration) -> Result<RedisStore, redis::RedisError> {
    RedisStore::open_async(url, timeout).await
}
