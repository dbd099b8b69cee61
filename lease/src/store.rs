//! The [`LeaseStore`] trait: what the application asks of a lease store.
//!
//! Three stores implement it. [`LeaseClient`](crate::LeaseClient) is Redis plus a durable
//! fence ledger; the ledger is the Redis side of step 5. With the `etcd` feature,
//! `etcd::EtcdStore` is etcd. There a majority of the cluster commits each grant before
//! etcd acknowledges it. Its fencing token is the key's create revision, durable by
//! construction. With the `zookeeper` feature, `zookeeper::ZooKeeperStore` is
//! ZooKeeper's lock recipe: the hold is an ephemeral sequential znode, its lease the
//! session, its fencing token the znode's creation zxid.
//!
//! All keep the same contract. `lease/tests/contract.rs` checks it against a real Redis,
//! a real etcd and a real ZooKeeper:
//!
//! * A grant is create-if-absent, and all or none for a group hold.
//! * A grant is labelled with a public holder label and a secret
//!   [`OwnerToken`](crate::OwnerToken).
//! * Release, renew and retire check the owner. A stale holder never touches a lease
//!   that lapsed or passed to another owner.
//! * Fencing tokens strictly increase from one grant to the next within a group.
//! * [`LeaseStore::changes`] reports the grants, releases and lapses of a set of groups.
//!
//! Where the stores differ, they say so:
//!
//! * TTLs: Redis counts milliseconds, etcd whole seconds from a minimum ([`TtlLimits`]),
//!   ZooKeeper milliseconds within its server's session timeouts.
//! * Clocks: Redis reports its own clock. etcd and ZooKeeper have no clock to ask, so
//!   their expiries are this process's clock at grant or renewal.
//! * Admissions: only Redis checks a waiting room's admission (`Grant::admission`).
//! * Renewals: on ZooKeeper only the process that granted a hold renews it
//!   ([`LeaseError::SessionElsewhere`]).
//! * What a failover can lose: `docs/stores.md`.

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::Stream;

use crate::backoff::{self, Backoff};
use crate::changes::LeaseChange;
use crate::error::LeaseError;
use crate::keys::LeaseKey;
use crate::lease::{Extended, Extension, Grant, GroupSnapshot, Lease, TtlLimits};

/// A stream of lease changes ([`LeaseStore::changes`]). Each item is one grant, release or
/// lapse. The stream ends (`None`) when the store's connection is lost. Changes made
/// meanwhile are not replayed. So a consumer re-reads the state ([`LeaseStore::holders`])
/// and asks for a new stream.
pub type LeaseChanges = Pin<Box<dyn Stream<Item = LeaseChange> + Send>>;

impl TtlLimits {
    /// `Ok(())` if the store can express `ttl`. Else [`LeaseError::TtlNotExpressible`],
    /// naming the store's limits. `store` names the store in the message (`"etcd"`).
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

/// A lease store.
///
/// It grants leases create-if-absent, with a TTL and a fencing token. It releases, renews
/// and retires them after checking the owner. It lists a group's live leases, and streams
/// their changes.
///
/// The trait is object safe. The application keeps an `Arc<dyn LeaseStore>`, chosen at
/// start by `--lease-store-url`. When the store does not answer, every method fails with
/// [`LeaseError::Unavailable`] (Redis), `LeaseError::Etcd` (feature `etcd`) or
/// `LeaseError::ZooKeeper` (feature `zookeeper`). Each method lists its other errors.
///
/// **Reading on from here.** On Redis, each method is implemented by
/// [`LeaseClient`](crate::LeaseClient) in `client.rs`. It runs one Lua script from
/// `scripts/`, named after the method: `acquire_all` runs `acquire.lua`, `release`
/// runs `release.lua`, `release_held_by` runs `release_held_by.lua` then `release.lua`.
/// A default body below runs only on a store that does not override it.
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// The store's name, for messages and `/healthz`: `"redis"`, `"etcd"` or
    /// `"zookeeper"`.
    fn name(&self) -> &'static str;

    /// The TTLs this store can express. A grant with any other TTL is refused with
    /// [`LeaseError::TtlNotExpressible`], before anything is sent.
    fn ttl_limits(&self) -> TtlLimits;

    /// Checks that a lease of `ttl` lasts `ttl`, before any lease is asked for.
    ///
    /// The TTL must be within [`LeaseStore::ttl_limits`]. Some stores lengthen a lease
    /// silently: etcd raises one below its own minimum (etcd#6025). There the check also
    /// asks the store what it grants. A store that does not answer is not judged: `Ok`.
    /// Each grant checks again. Errors: [`LeaseError::TtlNotExpressible`], with the
    /// store's limits.
    async fn check_ttl(&self, ttl: Duration) -> Result<(), LeaseError> {
        self.ttl_limits().check(self.name(), ttl)
    }

    /// Whether a [`GroupSnapshot`]'s `now_ms` and its expiries are read on one clock.
    ///
    /// Redis reads both on its own clock: `TIME`, and the expiries it keeps. Their
    /// difference is then a lease's remaining time. etcd has no clock to ask. Each expiry
    /// there is the granting server's reckoning, so etcd says `false`. Ask
    /// [`LeaseStore::remaining`] for a countdown instead.
    fn one_clock(&self) -> bool {
        true
    }

    /// The most resources one grant may name, or `None` for no limit of the store's own.
    /// A larger grant is refused with [`LeaseError::TooManyKeys`].
    fn max_keys_per_hold(&self) -> Option<usize> {
        None
    }

    /// Tries once to take every lease `grant` asks for: all or none.
    ///
    /// The leases share one owner token and one fencing token. They come back in the
    /// order of `grant.keys`. With a limit, the store refuses when the holder's live
    /// leases in the group plus these would exceed it. With an admission, the store
    /// refuses unless the admission is live.
    ///
    /// Errors: [`LeaseError::Held`], [`LeaseError::Retired`], [`LeaseError::OverLimit`],
    /// [`LeaseError::NotAdmitted`], [`LeaseError::NotYet`], [`LeaseError::NotOneGroup`],
    /// [`LeaseError::TtlNotExpressible`], and [`LeaseError::AdmissionUnchecked`] from a
    /// store that cannot check an admission.
    async fn acquire_all(&self, grant: &Grant) -> Result<Vec<Lease>, LeaseError>;

    /// Tries once to take the lease on `key` for `ttl`. It is
    /// [`LeaseStore::acquire_all`] with one key, no limit and no admission.
    async fn acquire(
        &self,
        key: &LeaseKey,
        holder: &str,
        ttl: Duration,
    ) -> Result<Lease, LeaseError> {
        let grant = Grant::new([key.clone()], holder, ttl);
        let mut leases = self.acquire_all(&grant).await?;
        Ok(leases.remove(0))
    }

    /// [`LeaseStore::acquire`], retried while the lease is held. The waits follow a
    /// jittered exponential [`Backoff`], bounded in attempts and time. At the bound it
    /// gives up with the last [`LeaseError::Held`].
    async fn acquire_with_backoff(
        &self,
        key: &LeaseKey,
        holder: &str,
        ttl: Duration,
        backoff: Backoff,
    ) -> Result<Lease, LeaseError> {
        backoff::retry_while_held(|| self.acquire(key, holder, ttl), backoff).await
    }

    /// Releases `lease` if the caller still owns it: a compare-and-delete. `true` if this
    /// call deleted it. `false`, touching nothing, if it lapsed or passed to another owner.
    async fn release(&self, lease: &Lease) -> Result<bool, LeaseError>;

    /// Extends `lease` by its TTL from now, if the caller still owns it, and updates its
    /// expiry: `true`. `false` if it is gone: nothing is touched or recreated.
    async fn renew(&self, lease: &mut Lease) -> Result<bool, LeaseError>;

    /// Extends `leases`, all held by `extension.holder` in one group, all or none: each
    /// to `extension.ttl` from now ("Need more time?", [`Extension`]).
    ///
    /// It is a renew a person asks for, owner-checked by each lease's owner token. The
    /// leases stay the same leases: the same owner and fencing tokens. A lease that lapsed
    /// is never recreated. The per-holder count a grant's limit uses lives as long as the
    /// longest of them. Each lease is extended at most `extension.max_extensions` times,
    /// and never past its grant plus `extension.max_life`.
    ///
    /// Errors, each leaving every lease as it was: [`LeaseError::Expired`] (a lease
    /// lapsed, was released, or passed to another owner), [`LeaseError::ExtensionLimit`],
    /// [`LeaseError::LifeLimit`], [`LeaseError::NotAdmitted`] (the admission named has
    /// ended), [`LeaseError::NotOneGroup`], and [`LeaseError::AdmissionUnchecked`] from a
    /// store that cannot check an admission.
    async fn extend_all(
        &self,
        leases: &[Lease],
        extension: &Extension,
    ) -> Result<Extended, LeaseError>;

    /// Retires `lease`'s resource for good: later grants fail with
    /// [`LeaseError::Retired`]. Also releases `lease` if the caller still owns it. Returns
    /// whether this call deleted it.
    async fn retire(&self, lease: &Lease) -> Result<bool, LeaseError>;

    /// Every live lease of `group`, with the time of the read in Unix ms. The time is on
    /// the Redis clock, or on this process's clock for etcd.
    async fn holders(&self, group: &str) -> Result<GroupSnapshot, LeaseError>;

    /// The live leases of `holder` in `group`, with the time of the read. In seatlock,
    /// these are one buyer's holds, read on every page view. The default reads the whole
    /// group and keeps `holder`'s. Redis reads only the holder's set, in one script
    /// (`scripts/held_by.lua`), whatever the group's size.
    async fn held_by(&self, group: &str, holder: &str) -> Result<GroupSnapshot, LeaseError> {
        let mut snapshot = self.holders(group).await?;
        snapshot.holdings.retain(|h| h.holder == holder);
        Ok(snapshot)
    }

    /// The live lease on `key` if its holder label is `holder`, owner token included.
    /// This is recover-by-holder, for a holder without a copy of its owner token. The
    /// lease's `ttl` is its remaining time.
    async fn owned_by(&self, key: &LeaseKey, holder: &str) -> Result<Option<Lease>, LeaseError>;

    /// [`LeaseStore::owned_by`] for a holder about to make its protected write (seatlock:
    /// a confirm that pays for the hold), which also marks the lease as *paying* for
    /// `cooling`. Should the lease lapse before [`LeaseStore::end_paying`] or `cooling`
    /// runs out, its resource *cools*: every acquire is refused with
    /// [`LeaseError::Cooling`], so the write in flight finishes or fails before anyone
    /// else is granted the resource. A release or a retire ends the cooling too; a lapse
    /// with no marker adds nothing.
    ///
    /// The default is `owned_by` and no marker: a store without cooling (etcd,
    /// `docs/stores.md` says why). Redis writes the marker in `owned_by`'s own script, so
    /// it costs no round trip.
    async fn owned_by_paying(
        &self,
        key: &LeaseKey,
        holder: &str,
        cooling: Duration,
    ) -> Result<Option<Lease>, LeaseError> {
        let _ = cooling;
        self.owned_by(key, holder).await
    }

    /// Ends the cooling [`LeaseStore::owned_by_paying`] began for `lease`, when the write
    /// ended without retiring it (refused, failed, or the lease lapsed): `true` if there
    /// was a marker of `lease`'s fencing token to remove. A marker of a later grant is
    /// left. A store without cooling answers `false`.
    async fn end_paying(&self, lease: &Lease) -> Result<bool, LeaseError> {
        let _ = lease;
        Ok(false)
    }

    /// Releases the live lease on `key` if its holder label is `holder`, whatever its
    /// owner token. `true` if this call deleted it. `false`, touching nothing, if
    /// `holder` had no live lease on `key`.
    ///
    /// This is recover-by-holder ([`LeaseStore::owned_by`]) and compare-and-delete
    /// ([`LeaseStore::release`]) together. It is for a holder that keeps no copy of its
    /// owner token. Seatlock's buyers are such holders: the token never leaves the server,
    /// and the server does not store it. Here the holder label is the check, so the label
    /// must be authenticated.
    ///
    /// The default makes those two calls, two round trips. The lease may lapse between
    /// them and pass to another holder. The compare-and-delete then finds another owner
    /// token and touches nothing. Redis does both in one script
    /// (`scripts/release_held_by.lua`).
    async fn release_held_by(&self, key: &LeaseKey, holder: &str) -> Result<bool, LeaseError> {
        match self.owned_by(key, holder).await? {
            Some(lease) => self.release(&lease).await,
            None => Ok(false),
        }
    }

    /// Whether `lease` is still held by its owner, at one instant.
    async fn is_held(&self, lease: &Lease) -> Result<bool, LeaseError>;

    /// The remaining time of the lease on `key`, or `None` if there is none. etcd counts
    /// it in whole seconds, rounded down.
    async fn remaining(&self, key: &LeaseKey) -> Result<Option<Duration>, LeaseError>;

    /// One round trip to the store, for health checks.
    async fn ping(&self) -> Result<(), LeaseError>;

    /// Subscribes to the grants, releases and lapses of every group whose name starts
    /// with `group_prefix`. In seatlock the prefix is `<namespace>:event:`. It returns
    /// once subscribed. So a change made after it returns is in the stream. A group grant
    /// is one [`LeaseChange::Acquired`] per resource. Renewals are not reported.
    async fn changes(&self, group_prefix: &str) -> Result<LeaseChanges, LeaseError>;
}

/// `Ok(())` if `keys` can be one grant: at least one key, all of one group, no name
/// twice. Else [`LeaseError::NotOneGroup`].
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

#[cfg(any(feature = "etcd", feature = "zookeeper"))]
/// What a store without a waiting room checks of every grant before anything is sent:
/// no admission ([`LeaseError::AdmissionUnchecked`], naming `store`), one group
/// ([`check_one_group`]), a TTL within `limits` ([`LeaseError::TtlNotExpressible`]).
pub(crate) fn check_grant_without_room(
    grant: &crate::lease::Grant,
    store: &'static str,
    limits: TtlLimits,
) -> Result<(), LeaseError> {
    if grant.admission.is_some() {
        return Err(LeaseError::AdmissionUnchecked { store });
    }
    check_one_group(&grant.keys)?;
    limits.check(store, grant.ttl)
}

#[cfg(any(feature = "etcd", feature = "zookeeper"))]
/// Records a renewal's outcome on `lease` (its new expiry, and when it was sent) and in
/// the renewals counter; returns `renewed`.
pub(crate) fn record_renewal(
    lease: &mut Lease,
    renewed: bool,
    expires_at_ms: u64,
    sent_at: tokio::time::Instant,
) -> bool {
    if renewed {
        lease.expires_at_ms = expires_at_ms;
        lease.sent_at = Some(sent_at);
    }
    let result = if renewed { "renewed" } else { "not_owner" };
    metrics::counter!(crate::telemetry::RENEWALS_TOTAL, "result" => result).increment(1);
    renewed
}
