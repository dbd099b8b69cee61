//! A lease, from request to answer.
//!
//! A [`Grant`] asks for leases. A [`Lease`] is what the holder gets back. A [`Holding`]
//! is what anyone reading a group sees of it. [`TtlLimits`] says which TTLs a store can
//! grant.

use std::time::Duration;

use crate::keys::LeaseKey;
use crate::token::{FencingToken, OwnerToken};

/// A request for leases, all or none: what
/// [`LeaseStore::acquire_all`](crate::LeaseStore::acquire_all) grants.
///
/// Build one with [`Grant::new`], then add a limit or an admission if needed:
///
/// ```
/// # use std::time::Duration;
/// # use lease::{Grant, LeaseKey};
/// let seats = [LeaseKey::new("show", "14C")?, LeaseKey::new("show", "14D")?];
/// let grant = Grant::new(seats, "alice", Duration::from_secs(60)).limit(8);
/// assert_eq!(grant.limit, Some(8));
/// # Ok::<(), lease::InvalidKey>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The resources: at least one, all of one group, no name twice.
    pub keys: Vec<LeaseKey>,
    /// The holder's public label. Others see it; it proves nothing.
    pub holder: String,
    /// How long the leases last unless renewed.
    pub ttl: Duration,
    /// The most live leases the holder may have in the group, these included.
    /// `None`: no limit.
    pub limit: Option<u64>,
    /// The holder's admission to the group's waiting room ([`crate::room`]). The grant
    /// then succeeds only while that admission is live. `None`: no waiting room.
    pub admission: Option<OwnerToken>,
    /// Unix milliseconds before which nothing is granted (an event's on-sale), judged in
    /// the grant's atomic step on the store's clock: Redis's `TIME` in the script; on etcd
    /// a compare on the group's opening key, which the first process whose own clock has
    /// passed this time writes (`docs/stores.md`). Refused with [`LeaseError::NotYet`].
    /// `None`: no such time.
    ///
    /// [`LeaseError::NotYet`]: crate::LeaseError::NotYet
    pub not_before_ms: Option<u64>,
}

impl Grant {
    /// A request for leases on `keys`, labelled `holder`, for `ttl`. No limit, no
    /// admission.
    pub fn new(keys: impl AsRef<[LeaseKey]>, holder: impl Into<String>, ttl: Duration) -> Grant {
        Grant {
            keys: keys.as_ref().to_vec(),
            holder: holder.into(),
            ttl,
            limit: None,
            admission: None,
            not_before_ms: None,
        }
    }

    /// The same request, refused if the holder would have more than `limit` live leases
    /// in the group.
    pub fn limit(mut self, limit: u64) -> Grant {
        self.limit = Some(limit);
        self
    }

    /// The same request, granted only while `admission` is live in the group's waiting
    /// room.
    pub fn admission(mut self, admission: OwnerToken) -> Grant {
        self.admission = Some(admission);
        self
    }

    /// The same request, refused before `not_before_ms` (Unix ms, the store's clock:
    /// [`Grant::not_before_ms`]).
    pub fn not_before(mut self, not_before_ms: u64) -> Grant {
        self.not_before_ms = Some(not_before_ms);
        self
    }
}

/// The TTLs a store can express: at least `min`, and a whole multiple of `step`.
///
/// Redis counts milliseconds: `min` and `step` are 1 ms. etcd counts whole seconds from
/// 2 s. It raises a shorter lease to its minimum, 1.5 × the election timeout rounded up.
/// With the default 1 s election timeout that is 2 s, so a shorter TTL would silently
/// last longer than asked. [`TtlLimits::check`] is in `store.rs`, beside the trait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TtlLimits {
    /// The shortest TTL the store keeps as asked.
    pub min: Duration,
    /// The granularity: every TTL must be a whole multiple of it.
    pub step: Duration,
}

/// A granted lease: what the holder needs to act on it and to fence its writes.
///
/// Obtained from [`LeaseStore::acquire`](crate::LeaseStore::acquire) (or [`LeaseStore::acquire_with_backoff`](crate::LeaseStore::acquire_with_backoff),
/// [`LeaseStore::owned_by`](crate::LeaseStore::owned_by)); only [`LeaseStore::renew`](crate::LeaseStore::renew) and the [`Watchdog`](crate::Watchdog) change
/// it (its expiry). A caller that must keep a lease between requests stores its parts
/// and rebuilds it with [`Lease::from_parts`].
#[derive(Clone, Debug)]
pub struct Lease {
    pub(crate) key: LeaseKey,
    pub(crate) owner: OwnerToken,
    pub(crate) fencing_token: FencingToken,
    pub(crate) ttl: Duration,
    pub(crate) expires_at_ms: u64,
    /// When the request that granted or last renewed it was sent, on this process's
    /// monotonic clock: the lease lasts at least `ttl` from then, whatever the clocks
    /// say (Redis started the TTL when it ran the script, which was later). `None` for a
    /// lease rebuilt with [`Lease::from_parts`].
    pub(crate) sent_at: Option<tokio::time::Instant>,
}

impl PartialEq for Lease {
    /// The same grant: key, owner token, fencing token, TTL and expiry (not when the
    /// request was sent).
    fn eq(&self, other: &Self) -> bool {
        (
            &self.key,
            &self.owner,
            self.fencing_token,
            self.ttl,
            self.expires_at_ms,
        ) == (
            &other.key,
            &other.owner,
            other.fencing_token,
            other.ttl,
            other.expires_at_ms,
        )
    }
}

impl Eq for Lease {}

impl Lease {
    /// Rebuilds a lease this caller was granted earlier, from the parts it kept (for
    /// example between two web requests: the owner token via [`OwnerToken::as_str`], the
    /// rest as numbers).
    ///
    /// This grants nothing: the lease is only as good as Redis says. Release and renew
    /// check the owner token (compare-and-delete, compare-and-pexpire), so a rebuilt
    /// lease that expired or passed to another owner does nothing harmful, and writes
    /// are still fenced by `fencing_token`. `expires_at_ms` is Unix milliseconds on the
    /// Redis clock; `ttl` is the length each renewal extends the lease to.
    pub fn from_parts(
        key: LeaseKey,
        owner: OwnerToken,
        fencing_token: FencingToken,
        ttl: Duration,
        expires_at_ms: u64,
    ) -> Self {
        Lease {
            key,
            owner,
            fencing_token,
            ttl,
            expires_at_ms,
            sent_at: None,
        }
    }

    /// The resource this lease is on.
    pub fn key(&self) -> &LeaseKey {
        &self.key
    }

    /// The secret that proves ownership to `release` and `renew`. Never show it to
    /// other users.
    pub fn owner(&self) -> &OwnerToken {
        &self.owner
    }

    /// The grant's fencing token; send it with every write to the protected resource.
    pub fn fencing_token(&self) -> FencingToken {
        self.fencing_token
    }

    /// The lease length asked for (whole milliseconds): what each renewal extends the
    /// lease to, from the renewal's time. For a lease from [`LeaseStore::owned_by`](crate::LeaseStore::owned_by),
    /// its remaining time when read.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// When the lease ends, in Unix milliseconds on the Redis clock (updated by
    /// [`LeaseStore::renew`](crate::LeaseStore::renew)).
    pub fn expires_at_ms(&self) -> u64 {
        self.expires_at_ms
    }

    /// The latest instant, on this process's monotonic clock, until which the lease is
    /// certainly still held: `ttl` after the request that granted or last renewed it was
    /// sent (Redis started the TTL later than that). `None` for a lease rebuilt with
    /// [`Lease::from_parts`], whose request this process did not time. Clock rate drift
    /// between this host and Redis is not covered: keep a margin.
    pub fn held_until(&self) -> Option<tokio::time::Instant> {
        self.sent_at.map(|sent| sent + self.ttl)
    }
}

/// A live lease as seen by anyone reading the group: who holds it, not the secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    /// The resource name inside the group.
    pub name: String,
    /// The public label the holder gave to `acquire` (for seatlock, a buyer id).
    pub holder: String,
    /// The fencing token of the grant.
    pub fencing_token: FencingToken,
    /// When the lease ends, Unix milliseconds on the Redis clock.
    pub expires_at_ms: u64,
}

/// The live leases of one group, read in one round trip with the Redis clock.
#[derive(Clone, Debug, Default)]
pub struct GroupSnapshot {
    /// Redis server time when the snapshot was taken, Unix milliseconds.
    pub now_ms: u64,
    /// Every lease whose expiry is after `now_ms`, in no particular order.
    pub holdings: Vec<Holding>,
}

/// The most extensions of one lease by default ([`Extension::new`]): a person asks for
/// more time at most this many times.
pub const MAX_EXTENSIONS: u32 = 10;

/// A request to extend a holder's leases: "Need more time?"
/// ([`LeaseStore::extend_all`](crate::LeaseStore::extend_all)).
///
/// A lease nobody renews can still be given more time, when a person asks for it. Each
/// extension sets the lease's expiry to `ttl` from now. It is bounded twice: at most
/// `max_extensions` times per lease, and never later than `max_life` after its grant.
/// So a lease that a person keeps extending still ends. WCAG 2.2 success criterion 2.2.1
/// (Timing Adjustable) asks for the warning and the extension; seats.io caps a hold at
/// two hours.
///
/// ```
/// # use std::time::Duration;
/// # use lease::Extension;
/// let more = Extension::new("alice", Duration::from_secs(600));
/// assert_eq!(more.max_extensions, 10);
/// assert_eq!(more.max_life, Duration::from_secs(6000));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extension {
    /// The holder label every lease must be recorded under.
    pub holder: String,
    /// Each extension sets the expiry to this from now: the grant's TTL.
    pub ttl: Duration,
    /// The most extensions of one lease ([`LeaseError::ExtensionLimit`]).
    ///
    /// [`LeaseError::ExtensionLimit`]: crate::LeaseError::ExtensionLimit
    pub max_extensions: u32,
    /// The longest a lease may last from its grant. An extension ends no later
    /// ([`LeaseError::LifeLimit`] once nothing is left to add).
    ///
    /// [`LeaseError::LifeLimit`]: crate::LeaseError::LifeLimit
    pub max_life: Duration,
    /// The holder's admission to the group's waiting room: the extension is refused
    /// ([`LeaseError::NotAdmitted`]) once it has ended. `None`: no waiting room.
    ///
    /// [`LeaseError::NotAdmitted`]: crate::LeaseError::NotAdmitted
    pub admission: Option<OwnerToken>,
}

impl Extension {
    /// Extensions of `holder`'s leases by `ttl`: at most [`MAX_EXTENSIONS`] per lease,
    /// and at most `MAX_EXTENSIONS × ttl` from the grant. No admission.
    pub fn new(holder: impl Into<String>, ttl: Duration) -> Extension {
        Extension {
            holder: holder.into(),
            ttl,
            max_extensions: MAX_EXTENSIONS,
            max_life: ttl * MAX_EXTENSIONS,
            admission: None,
        }
    }

    /// The same request, refused unless `admission` is live in the group's waiting room.
    pub fn admission(mut self, admission: OwnerToken) -> Extension {
        self.admission = Some(admission);
        self
    }
}

/// What an extension did ([`LeaseStore::extend_all`](crate::LeaseStore::extend_all)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extended {
    /// The leases, in the order given, with their new expiries. Owner and fencing tokens
    /// are unchanged: they are the same leases.
    pub leases: Vec<Lease>,
    /// The most extensions any of them has had, this one included. So
    /// `max_extensions - extensions` more are left to all of them.
    pub extensions: u32,
}

/// `leases` with the expiries an extension gave them (Unix ms, in the same order), and
/// `extension.ttl` as their TTL. Their `sent_at` is dropped: an expiry capped by
/// [`Extension::max_life`] may come sooner than a TTL from the request.
pub(crate) fn extended(leases: &[Lease], extension: &Extension, expiries: &[u64]) -> Vec<Lease> {
    leases
        .iter()
        .zip(expiries)
        .map(|(lease, &expires_at_ms)| Lease {
            ttl: extension.ttl,
            expires_at_ms,
            sent_at: None,
            ..lease.clone()
        })
        .collect()
}

/// The leases of one grant of `keys`, in their order: one owner token, one fencing token,
/// one TTL and expiry (the consensus stores' grants).
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
pub(crate) fn granted(
    keys: &[LeaseKey],
    owner: &OwnerToken,
    fencing_token: FencingToken,
    ttl: Duration,
    expires_at_ms: u64,
    sent_at: tokio::time::Instant,
) -> Vec<Lease> {
    keys.iter()
        .map(|key| Lease {
            key: key.clone(),
            owner: owner.clone(),
            fencing_token,
            ttl,
            expires_at_ms,
            sent_at: Some(sent_at),
        })
        .collect()
}
