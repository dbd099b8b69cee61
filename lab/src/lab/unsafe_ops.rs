//! The lab's Redis operations outside the lease library: the unsafe variants a step
//! switched off puts in place of the library's (each the first thing one would write),
//! the fault that makes Redis lose its data, the observation read after every row, and
//! a fence ledger kept in the Redis it is meant to outlive. Never used outside the lab.

use std::sync::Arc;

use lease::{FenceLedger, LeaseKey, RedisStore};
use redis::{AsyncCommands, RedisResult, Script};

use super::check::Lapse;

/// What the lab reads of the lock right after an operation, for the table's columns.
#[derive(Clone, Debug, Default)]
pub(super) struct Observed {
    /// The lease key's value (an owner token), if the key exists.
    pub owner: Option<String>,
    /// The key's `PTTL`: milliseconds left, -1 for a key without expiry, -2 absent.
    pub pttl_ms: i64,
    /// The group's fencing counter (`~fence` hash, field `counter`), if Redis has one.
    pub counter: Option<i64>,
}

/// One pipeline, `GET`, `PTTL` and `HGET counter`: the lock as it stands now.
pub(super) async fn observe(redis: &RedisStore, key: &LeaseKey) -> RedisResult<Observed> {
    let mut conn = redis.connection();
    let (owner, pttl_ms, counter): (Option<String>, i64, Option<i64>) = redis::pipe()
        .get(key.lease_key())
        .pttl(key.lease_key())
        .hget(key.fence_key(), "counter")
        .query_async(&mut conn)
        .await?;
    Ok(Observed {
        owner,
        pttl_ms,
        counter,
    })
}

/// Step 3 off (and step 1 off's overwrite): a plain `DEL` of the lease key, whoever holds
/// it (`delete_unchecked.lua`). Returns the owner token it deleted, if any.
pub(super) async fn delete_unchecked(
    redis: &RedisStore,
    key: &LeaseKey,
) -> RedisResult<Option<String>> {
    let script = Script::new(include_str!("delete_unchecked.lua"));
    script
        .key(key.lease_key())
        .invoke_async(&mut redis.connection())
        .await
}

/// The holder's lease runs out now (`lapse.lua`): given 1 ms left, and Redis expires it
/// as it would any key; `owner` is the holder's owner token. Only its own key, and only
/// one with a TTL (a key made without `PX` never lapses).
pub(super) async fn lapse(redis: &RedisStore, key: &LeaseKey, owner: &str) -> RedisResult<Lapse> {
    let lapsed: i64 = Script::new(include_str!("lapse.lua"))
        .key(key.lease_key())
        .arg(owner)
        .invoke_async(&mut redis.connection())
        .await?;
    Ok(match lapsed {
        1 => {
            // Redis expires a key once its PTTL passes: 1 ms, and a little more.
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            Lapse::Expired
        }
        -1 => Lapse::NoExpiry,
        _ => Lapse::NotHeld,
    })
}

/// Step 2 off: `PERSIST` removes the TTL the grant set, so the key never expires.
pub(super) async fn persist(redis: &RedisStore, key: &LeaseKey) -> RedisResult<()> {
    let _: bool = redis.connection().persist(key.lease_key()).await?;
    Ok(())
}

/// The fault "Redis restarts empty", for one run's lock: deletes every key of its group
/// by name (the lease, the fence counter and ceiling, the holders hash, the retired set,
/// each server's held-by set and the lab's own in-Redis ledger), as a restart without persistence loses them. By
/// name, not by a scan, so that it costs one round trip however many keys other apps
/// keep in the same Redis, and touches nothing of theirs. (A block reservation's marker,
/// `~reserving:<nonce>`, is left: it lives 30 s and is only read by its own install.)
/// Returns how many keys were lost. Also the cleanup after a run.
pub(super) async fn delete_lock_keys(redis: &RedisStore, key: &LeaseKey) -> RedisResult<usize> {
    let mut keys = vec![
        key.lease_key(),
        key.fence_key(),
        key.holders_key(),
        key.retired_key(),
        ledger_key(key.group()),
    ];
    keys.extend(super::SERVERS.map(|server| key.held_by_key(server)));
    redis.connection().del(&keys).await
}

/// Where [`LedgerInRedis`] keeps a group's ceiling.
fn ledger_key(group: &str) -> String {
    format!("lease:{{{group}}}:~lab-ledger")
}

/// Step 5 off: a [`FenceLedger`] whose ceilings live in the same Redis as the counter
/// (`lease:{group}:~lab-ledger`), the mistake step 5 exists to prevent. When Redis loses
/// the group, it loses the ledger too, and the next block starts again at token 1.
pub(super) struct LedgerInRedis(pub Arc<RedisStore>);

impl FenceLedger for LedgerInRedis {
    type Error = redis::RedisError;

    async fn raise_ceiling(&self, group: &str, block: u64) -> RedisResult<u64> {
        self.0
            .connection()
            .hincr(ledger_key(group), "ceiling", block)
            .await
    }
}
