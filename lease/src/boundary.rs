//! The lease-store boundary: what the application asks of a lease store, whichever store
//! backs it. Two implementations: [`crate::LeaseClient`] (Redis plus a durable fence
//! ledger; the Redis side of the article's step 5 is the ledger) and, with the `etcd`
//! feature, `etcd::EtcdStore` (etcd: every grant is committed to a majority of the
//! cluster before it is acknowledged, and the fencing token is the key's create revision,
//! durable by construction).
//!
//! The same contract holds for both (checked by `lease/tests/contract.rs` against a real
//! Redis and a real etcd):
//!
//! * a grant is create-if-absent, all or none for a group hold, labelled with a public
//!   holder label and a secret [`crate::OwnerToken`];
//! * release, renew and retire are owner-checked: a stale holder never touches a lease
//!   that lapsed or passed to another owner;
//! * fencing tokens strictly increase from one grant to the next within a group;
//! * [`LeaseStore::changes`] reports grants, releases and lapses of a set of groups.
//!
//! Where the stores differ, they say so: TTLs ([`TtlLimits`]: Redis counts milliseconds,
//! etcd whole seconds from a minimum), clocks (Redis reports its own clock; etcd has no
//! clock API, so etcd expiries are this process's clock at grant or renewal), and what a
//! failover can lose (README, "Which store backs the lock").

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::Stream;

use crate::events::LeaseEvent;
use crate::{Backoff, GroupSnapshot, Lease, LeaseError, LeaseKey};

/// A stream of lease changes ([`LeaseStore::changes`]): each item is one grant, release or
/// lapse. It ends (`None`) when the store's connection is lost: changes made meanwhile are
/// not replayed, so a consumer re-reads the state ([`LeaseStore::holders`]) and asks for a
/// new stream.
pub type LeaseChanges = Pin<Box<dyn Stream<Item = LeaseEvent> + Send>>;

/// The TTLs a store can express: a TTL must be at least `min` and a multiple of `step`.
/// Redis: `min` = `step` = 1 ms. etcd: `step` = 1 s, `min` = 2 s (etcd raises any shorter
/// lease to its minimum, 1.5 × the election timeout rounded up: 2 s with the default
/// 1 s election timeout, so a shorter TTL would silently last longer than asked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TtlLimits {
    /// The shortest TTL the store keeps as asked.
    pub min: Duration,
    /// The granularity: every TTL must be a whole multiple of it.
    pub step: Duration,
}

impl TtlLimits {
    /// `Ok(())` if `ttl` can be expressed, else [`LeaseError::TtlNotExpressible`] naming the
    /// store's limits. `store` names the store in the message (`"etcd"`).
    pub fn check(&self, store: &'static str, ttl: Duration) -> Result<(), LeaseError> {
        if ttl >= self.min && ttl.as_nanos().is_multiple_of(self.step.as_nanos()) {
            Ok(())
        } else {
            Err(LeaseError::TtlNotExpressible {
                store,
                ttl,
                limits: *self,
            })
        }
    }
}

/// A lease store: create-if-absent grants with a TTL, owner-checked release, renew and
/// retire, fencing tokens, the live leases of a group and a stream of changes. Object
/// safe: the application keeps an `Arc<dyn LeaseStore>` chosen at start
/// (`--lease-store-url`). Every method's errors: [`LeaseError::Unavailable`] (Redis) or
/// `LeaseError::Etcd` (feature `etcd`) when the store does not answer, plus those listed.
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// The store's name for messages and `/healthz` (`"redis"`, `"etcd"`).
    fn name(&self) -> &'static str;

    /// The TTLs this store can express ([`TtlLimits`]); acquiring with any other TTL is
    /// refused with [`LeaseError::TtlNotExpressible`] before anything is sent.
    fn ttl_limits(&self) -> TtlLimits;

    /// Checks, before any lease is asked for, that a lease of `ttl` lasts `ttl`: within
    /// [`LeaseStore::ttl_limits`], and, where the store may lengthen a lease silently
    /// (etcd raises one below its own minimum, etcd#6025), as the store grants it. A
    /// store that does not answer is not judged (`Ok`): each grant checks again.
    /// Errors: [`LeaseError::TtlNotExpressible`] with the limits the store has.
    async fn check_ttl(&self, ttl: std::time::Duration) -> Result<(), LeaseError> {
        self.ttl_limits().check(self.name(), ttl)
    }

    /// Whether a [`GroupSnapshot`]'s `now_ms` and its holdings' expiries are read on one
    /// clock, the store's (Redis: `TIME` and the expiries it keeps), so that their
    /// difference is a lease's remaining time. `false` (etcd, which has no clock to ask:
    /// each expiry is its granting server's reckoning): ask [`LeaseStore::remaining`]
    /// for a countdown instead.
    fn one_clock(&self) -> bool {
        true
    }

    /// The most resources one group hold may name ([`LeaseError::TooManyKeys`] beyond
    /// it), or `None` for no limit of the store's own.
    fn max_keys_per_hold(&self) -> Option<usize> {
        None
    }

    /// Tries once to take leases on every one of `keys` (one group, no name twice) for
    /// `ttl`, all or none, labelled `holder`, with one owner token and one fencing token
    /// shared by the returned leases (in the order of `keys`). With `limit = Some(n)`,
    /// refuses when the holder's live leases in the group plus `keys.len()` exceed `n`.
    /// Errors: [`LeaseError::Held`], [`LeaseError::Retired`], [`LeaseError::OverLimit`],
    /// [`LeaseError::NotOneGroup`], [`LeaseError::TtlNotExpressible`].
    async fn acquire_all(
        &self,
        keys: &[LeaseKey],
        holder: &str,
        ttl: Duration,
        limit: Option<u64>,
    ) -> Result<Vec<Lease>, LeaseError>;

    /// Tries once to take the lease on `key` for `ttl`: [`LeaseStore::acquire_all`] with one
    /// key and no limit.
    async fn acquire(
        &self,
        key: &LeaseKey,
        holder: &str,
        ttl: Duration,
    ) -> Result<Lease, LeaseError> {
        let mut leases = self
            .acquire_all(std::slice::from_ref(key), holder, ttl, None)
            .await?;
        Ok(leases.remove(0))
    }

    /// [`LeaseStore::acquire`] retried while the lease is held, with jittered exponential
    /// [`Backoff`] bounded in attempts and time; gives up with the last
    /// [`LeaseError::Held`].
    async fn acquire_with_backoff(
        &self,
        key: &LeaseKey,
        holder: &str,
        ttl: Duration,
        backoff: Backoff,
    ) -> Result<Lease, LeaseError> {
        crate::backoff::retry_while_held(|| self.acquire(key, holder, ttl), backoff).await
    }

    /// Releases `lease` if the caller still owns it (compare-and-delete): `true` if this
    /// call deleted it, `false` (nothing touched) if it lapsed or passed to another owner.
    async fn release(&self, lease: &Lease) -> Result<bool, LeaseError>;

    /// Extends `lease` by its TTL from now if the caller still owns it and updates its
    /// expiry: `true`, or `false` (nothing touched, nothing recreated) if it is gone.
    async fn renew(&self, lease: &mut Lease) -> Result<bool, LeaseError>;

    /// Retires `lease`'s resource for good (later grants: [`LeaseError::Retired`]) and
    /// releases `lease` if the caller still owns it; returns whether this call deleted it.
    async fn retire(&self, lease: &Lease) -> Result<bool, LeaseError>;

    /// Every live lease of `group`, with the time of the read (Unix ms: the Redis clock,
    /// or this process's clock for etcd).
    async fn holders(&self, group: &str) -> Result<GroupSnapshot, LeaseError>;

    /// The live leases of `holder` in `group` (seatlock: one buyer's holds, on every page
    /// view), with the time of the read as in [`LeaseStore::holders`]. The default reads
    /// the whole group and keeps `holder`'s; Redis reads only the holder's set
    /// (`scripts/held_by.lua`): one script, whatever the group's size.
    async fn held_by(&self, group: &str, holder: &str) -> Result<GroupSnapshot, LeaseError> {
        let mut snapshot = self.holders(group).await?;
        snapshot.holdings.retain(|h| h.holder == holder);
        Ok(snapshot)
    }

    /// The live lease on `key` if its holder label is `holder`, owner token included
    /// (recover-by-holder: for a holder that lost its copy of the owner token). Its `ttl`
    /// is its remaining time.
    async fn owned_by(&self, key: &LeaseKey, holder: &str) -> Result<Option<Lease>, LeaseError>;

    /// Releases the live lease on `key` if its holder label is `holder`, whatever its
    /// owner token: recover-by-holder ([`LeaseStore::owned_by`]) and compare-and-delete
    /// ([`LeaseStore::release`]) together, for a holder that keeps no copy of its owner
    /// token (seatlock's buyers: the token never leaves the server, and the server keeps no
    /// session copy of it). `true` if this call deleted it, `false` (nothing touched) if
    /// there was no live lease of `holder` on `key`. The default is those two calls, two
    /// round trips, between which the lease may lapse and pass to another holder: then
    /// the compare-and-delete finds another owner token and touches nothing. Redis does it
    /// in one script (`scripts/release_held_by.lua`).
    async fn release_held_by(&self, key: &LeaseKey, holder: &str) -> Result<bool, LeaseError> {
        match self.owned_by(key, holder).await? {
            Some(lease) => self.release(&lease).await,
            None => Ok(false),
        }
    }

    /// Whether `lease` is still held by its owner, at one instant.
    async fn is_held(&self, lease: &Lease) -> Result<bool, LeaseError>;

    /// The remaining time of the lease on `key`, or `None` if there is none (etcd: whole
    /// seconds, rounded down by the server).
    async fn remaining(&self, key: &LeaseKey) -> Result<Option<Duration>, LeaseError>;

    /// One round trip to the store, for health checks.
    async fn ping(&self) -> Result<(), LeaseError>;

    /// Subscribes to the grants, releases and lapses of every group whose name starts
    /// with `group_prefix` (seatlock: `<namespace>:event:`). Returns once subscribed, so
    /// a change made after it returns is in the stream. A group grant is one
    /// [`LeaseEvent::Acquired`] per resource; renewals are not reported.
    async fn changes(&self, group_prefix: &str) -> Result<LeaseChanges, LeaseError>;
}

/// `Ok(())` if `keys` can be one group hold: at least one key, all of one group, no name
/// twice; else [`LeaseError::NotOneGroup`].
pub(crate) fn check_one_group(keys: &[LeaseKey]) -> Result<(), LeaseError> {
    let one_group = keys.first().is_some_and(|first| {
        keys.iter().all(|k| k.group() == first.group())
            && keys
                .iter()
                .map(LeaseKey::name)
                .collect::<std::collections::HashSet<_>>()
                .len()
                == keys.len()
    });
    if one_group {
        Ok(())
    } else {
        Err(LeaseError::NotOneGroup)
    }
}
