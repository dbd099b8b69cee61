//! # lease: Redis leases with owner tokens and fencing tokens
//!
//! A distributed lock is a record in a store that every contender can reach: "I hold
//! `seat 14C`", created by one process and refused to the others. This crate implements
//! the five steps of the article *Distributed locks and leases* (see the project README)
//! on a single Redis node:
//!
//! 1. **Create-if-absent**: a grant is `SET key owner NX` (the Redis `SET` documentation,
//!    "distributed locks" pattern). Only one caller's `SET` succeeds.
//! 2. **Lease**: the same `SET` carries `PX ttl_ms`, so a crashed holder blocks others for
//!    at most one TTL (leases: Gray and Cheriton, 1989). A long task renews
//!    ([`LeaseClient::renew`]), typically every TTL/3 ([`LeaseClient::watch`] starts a
//!    [`Watchdog`] that does it).
//! 3. **Owner-checked release**: the key's value is a random [`OwnerToken`] (128 bits);
//!    [`LeaseClient::release`] is a compare-and-delete and [`LeaseClient::renew`] a
//!    compare-and-pexpire, each one Lua script, so a slow holder can never delete or
//!    extend a lease that has passed to someone else, and never recreates an expired key.
//! 4. **Fencing token**: every grant also increments a counter in the same script and
//!    returns it as a [`FencingToken`] (Kleppmann, "How to do distributed locking", 2016;
//!    Chubby calls them *sequencers*). The protected resource must reject a write whose
//!    token is lower than the last one it accepted: that, not the lease, is what stops a
//!    holder that paused past its TTL.
//! 5. **A store that survives**: a single Redis can lose everything on restart. Leases
//!    are then simply lost (holders are told [`LeaseError::Lost`] when they next act), but
//!    fencing tokens must never go backwards. Tokens are therefore handed out from blocks
//!    reserved in a durable [`FenceLedger`] (the application backs it with Postgres): Redis
//!    may issue tokens only up to the reserved *ceiling*, and after Redis loses its data
//!    the next block starts above every token ever issued (the hi/lo allocation pattern).
//!    Only a block whose reservation began on the data Redis still has is installed (the
//!    acquire that asks for it leaves a marker in the group; the install needs it), so a
//!    block reserved before a loss can never re-seed the lost counter below tokens that a
//!    newer block issued meanwhile. A Redis that *kept* its data but not all of it (a
//!    replica promoted by Sentinel before it applied the last grants, a restart from an
//!    older snapshot) is caught by the failover guard: a block is stamped with the
//!    identity of the server that installed it, and no other server issues from it
//!    ([`LeaseClient::with_failover_guard`]). Tokens stay exact integers up to
//!    [`MAX_FENCING_TOKEN`] (2^53 − 1); beyond it acquires fail with
//!    [`LeaseError::TokensExhausted`].
//!
//! ## Example
//!
//! A lease, a fenced write, a contender refused, a holder that pauses past its TTL and
//! wakes up stale: its write is refused by the fence and its release (compare-and-delete)
//! deletes nothing. Runs against the Redis at `REDIS_URL`. The same flow, printed step by
//! step, is `lease/examples/hold_and_fence.rs`
//! (`REDIS_URL=redis://127.0.0.1:6379/ cargo run -p lease --example hold_and_fence`).
//!
//! ```
//! use std::time::Duration;
//!
//! use lease::{FencingToken, LeaseClient, LeaseError, LeaseKey, MemoryLedger};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let url = std::env::var("REDIS_URL")
//!     .expect("set REDIS_URL to a Redis server, e.g. redis://127.0.0.1:6379/");
//! let redis = lease::connect(&url, Duration::from_secs(2))?;
//! // MemoryLedger is not durable: fine for an example, never in production (step 5).
//! let client = LeaseClient::new(redis, MemoryLedger::new());
//! // A fresh group per run, so runs do not share fencing tokens.
//! let key = LeaseKey::new(format!("doc:{:x}", rand::random::<u64>()), "seat-14C")?;
//!
//! // The protected resource keeps the highest fencing token it accepted.
//! let mut highest = FencingToken(0);
//! let mut fenced_write = |token: FencingToken| {
//!     let accepted = token >= highest;
//!     highest = highest.max(token);
//!     accepted
//! };
//!
//! // Alice takes the lease for 300 ms and writes with her fencing token.
//! let alice = client.acquire(&key, "alice", Duration::from_millis(300)).await?;
//! assert!(fenced_write(alice.fencing_token()));
//!
//! // Bob is refused while Alice holds it.
//! let refused = client.acquire(&key, "bob", Duration::from_secs(5)).await;
//! assert!(matches!(refused, Err(LeaseError::Held { holder, .. }) if holder == "alice"));
//!
//! // Alice pauses past her TTL; Bob now gets the lease, with a larger token.
//! tokio::time::sleep(Duration::from_millis(400)).await;
//! let bob = client.acquire(&key, "bob", Duration::from_secs(5)).await?;
//! assert!(bob.fencing_token() > alice.fencing_token());
//! assert!(fenced_write(bob.fencing_token()));
//!
//! // Alice wakes up stale: the fence refuses her write, her release deletes nothing.
//! assert!(!fenced_write(alice.fencing_token()));
//! assert!(!client.release(&alice).await?);
//! assert!(client.release(&bob).await?);
//! # Ok(())
//! # }
//! ```
//!
//! ## Operations
//!
//! Every operation is a method of [`LeaseClient`]:
//!
//! | operation | what | Redis |
//! |---|---|---|
//! | [`acquire`](LeaseClient::acquire) | one try: a [`Lease`], or [`LeaseError::Held`] | one script |
//! | [`acquire_all`](LeaseClient::acquire_all) | one try at several resources of one group, all or none, one fencing token, optionally under a per-holder limit ([`LeaseError::OverLimit`]) | one script |
//! | [`acquire_with_backoff`](LeaseClient::acquire_with_backoff) | retries a busy lease with jittered exponential [`Backoff`], bounded in attempts and time | one script per attempt |
//! | [`renew`](LeaseClient::renew) | compare-and-pexpire: extends the lease by its TTL | one script |
//! | [`watch`](LeaseClient::watch) | starts a [`Watchdog`]: renews every TTL/3, reports [`WatchdogEvent::Lost`] | one script per renewal |
//! | [`release`](LeaseClient::release) | compare-and-delete | one script |
//! | [`retire`](LeaseClient::retire) | retires the resource for good (no acquire grants it again: [`LeaseError::Retired`]) and releases the caller's lease on it (compare-and-delete) | one script |
//! | [`holders`](LeaseClient::holders) | every live lease of a group ([`GroupSnapshot`]) | one pipeline |
//! | [`owned_by`](LeaseClient::owned_by) | the live lease held under a label, owner token included | one script |
//! | [`is_held`](LeaseClient::is_held), [`remaining`](LeaseClient::remaining) | one-instant checks | one command |
//!
//! [`events`] turns a group's pub/sub messages into [`events::LeaseEvent`]s.
//!
//! ## Keys
//! A [`LeaseKey`] names a resource inside a *group* (for seatlock: the seats of one
//! event). All keys of a group share the Redis Cluster hash tag `{group}`, so the scripts
//! touch one slot and the design survives sharding:
//!
//! | key | type | content |
//! |---|---|---|
//! | `lease:{group}:<name>` | string, with PX TTL | the holder's owner token |
//! | `lease:{group}:~fence` | hash | `counter` (last token issued), `ceiling` (highest token the ledger allows), `server` (identity of the Redis server that installed the block: the failover guard, [`LeaseClient::with_failover_guard`]) |
//! | `lease:{group}:~holders` | hash | `<name>` → `"<fencing token> <expires_at_ms> <holder label>"` |
//! | `lease:{group}:~retired` | set | names retired for good ([`LeaseClient::retire`]); no TTL |
//! | `lease:{group}:~held-by:<holder>` | set, PX the longest grant in it | names granted to `holder` under a limit ([`LeaseClient::acquire_all`]); a member counts while the holders hash gives it to `holder`, unexpired |
//!
//! Grants and releases are announced on the pub/sub channel `lease:{group}:~events` by the
//! scripts that make them; see [`events`] for watching a group.
//!
//! The holders hash lets a reader list every live lease of a group in one round trip
//! ([`LeaseClient::holders`]) instead of one `GET` per resource. Its entries carry their
//! own expiry (Redis clock) and are filtered on read; a lapsed entry is overwritten by the
//! next grant of that resource.
//!
//! ## Clocks
//! Every time in this crate is read from the Redis server (`TIME`, `PTTL`), never from
//! the caller's clock: `expires_at_ms` is Unix milliseconds on the Redis clock.
//!
//! ## Round trips
//! `acquire`, `release`, `retire`, `renew` and `holders` are one round trip each
//! ([`LeaseClient::acquire_with_backoff`]: one per attempt). `acquire` costs one
//! more Redis round trip and one ledger call once per [`LeaseClient::with_block_size`]
//! grants per group, and after Redis has lost its data.
//!
//! ## Metrics
//! Round-trip latency, renewals, watchdog losses and lock wait times are reported through
//! the `metrics` facade; see [`telemetry`] for the names.
//!
//! ## Sources
//!
//! * Redis, [`SET`](https://redis.io/docs/latest/commands/set/): `NX`, `PX` and the
//!   locking pattern with a random value released by a script.
//! * Martin Kleppmann, [How to do distributed locking](https://martin.kleppmann.com/2016/02/08/how-to-do-distributed-locking.html)
//!   (2016): fencing tokens.
//! * Mike Burrows, *The Chubby lock service for loosely-coupled distributed systems*
//!   (OSDI 2006): sequencers, the same idea.
//! * Cary G. Gray and David R. Cheriton, *Leases: an efficient fault-tolerant mechanism
//!   for distributed file cache consistency* (SOSP 1989): leases.
//! * Marc Brooker, *Exponential Backoff And Jitter* (AWS Architecture Blog, 2015): see
//!   [`Backoff`].

#![deny(missing_docs)]

mod backoff;
mod boundary;
pub mod etcd;
pub mod events;
mod keys;
mod memory;
mod redis_boundary;
mod scripts;
pub mod store;
pub mod telemetry;
mod watchdog;

use std::fmt;
use std::future::Future;
use std::time::Duration;

use rand::RngCore;
use redis::aio::ConnectionManager;

pub use backoff::Backoff;
pub use boundary::{LeaseChanges, LeaseStore, TtlLimits};
pub use keys::{InvalidKey, LeaseKey};
pub use memory::MemoryLedger;
pub use store::RedisStore;
pub use watchdog::{Watchdog, WatchdogEvent};

/// A random secret naming one grant of a lease: 128 bits from the OS-seeded thread RNG,
/// as 32 lowercase hex digits. Stored as the lease key's value; release and renew succeed
/// only when the caller presents it. Never show it to other users.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OwnerToken(String);

impl OwnerToken {
    /// A fresh random token (128 bits).
    pub fn random() -> Self {
        let mut bytes = [0u8; 16];
        rand::rng().fill_bytes(&mut bytes);
        OwnerToken(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// Wraps a token previously obtained from [`OwnerToken::as_str`] (for example, kept
    /// in a server-side session between two requests).
    pub fn from_string(token: String) -> Self {
        OwnerToken(token)
    }

    /// The token's text (32 hex digits).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for OwnerToken {
    /// Shows only the first 8 hex digits, so logs do not leak a usable secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerToken({}…)", &self.0[..self.0.len().min(8)])
    }
}

/// A fencing token: a number that strictly increases with every grant in a lease group
/// (Kleppmann's fencing tokens, Chubby's sequencers). The protected resource accepts a
/// write only if its token is not lower than the highest token it has already accepted.
/// Tokens never exceed [`MAX_FENCING_TOKEN`] (2^53 − 1), so they fit a Postgres `bigint`, a
/// JSON number and a Lua number (a double) exactly: a ledger ceiling above it is refused
/// with [`LeaseError::TokensExhausted`] before Redis sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(
    /// The token's number, larger for every later grant in the same group.
    pub u64,
);

impl FencingToken {
    /// The token as a Postgres `bigint` (what a fenced row stores): exact, since tokens
    /// never exceed [`MAX_FENCING_TOKEN`] (2^53 − 1).
    pub fn as_i64(self) -> i64 {
        self.0 as i64
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A granted lease: what the holder needs to act on it and to fence its writes.
///
/// Obtained from [`LeaseClient::acquire`] (or [`LeaseClient::acquire_with_backoff`],
/// [`LeaseClient::owned_by`]); only [`LeaseClient::renew`] and the [`Watchdog`] change
/// it (its expiry). A caller that must keep a lease between requests stores its parts
/// and rebuilds it with [`Lease::from_parts`].
#[derive(Clone, Debug)]
pub struct Lease {
    key: LeaseKey,
    owner: OwnerToken,
    fencing_token: FencingToken,
    ttl: Duration,
    expires_at_ms: u64,
    /// When the request that granted or last renewed it was sent, on this process's
    /// monotonic clock: the lease lasts at least `ttl` from then, whatever the clocks
    /// say (Redis started the TTL when it ran the script, which was later). `None` for a
    /// lease rebuilt with [`Lease::from_parts`].
    sent_at: Option<tokio::time::Instant>,
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
    /// example in a server-side session between two web requests: the owner token via
    /// [`OwnerToken::as_str`], the rest as numbers).
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
    /// lease to, from the renewal's time. For a lease from [`LeaseClient::owned_by`],
    /// its remaining time when read.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// When the lease ends, in Unix milliseconds on the Redis clock (updated by
    /// [`LeaseClient::renew`]).
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

/// Why a lease operation failed. Callers usually map `Held` to "try again later",
/// `Lost` to "your hold is gone", `Retired` to "gone for good" (seatlock: sold), and
/// `Unavailable`/`Ledger` to "service unavailable".
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Another holder has the lease. `holder` is the public label it gave (empty if the
    /// store no longer knows it), `remaining` the lease's remaining time (Redis `PTTL`).
    #[error("lease is held by {holder:?} for another {remaining:?}")]
    Held {
        /// Public label of the current holder.
        holder: String,
        /// Time left on the current holder's lease.
        remaining: Duration,
    },
    /// The caller's lease is gone: it expired, was released, or Redis lost it.
    #[error("lease is no longer held by this owner")]
    Lost,
    /// Redis did not answer or answered with an error: guarded work must stop.
    #[error("lease store unavailable: {0}")]
    Unavailable(#[from] redis::RedisError),
    /// The durable fence ledger could not reserve a block of tokens. Carries the
    /// ledger's own error ([`FenceLedger::Error`]) as the source.
    #[error("fence ledger unavailable: {0}")]
    Ledger(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The resource was retired for good ([`LeaseClient::retire`]): no lease on it is
    /// granted again. Nothing was written.
    #[error("the resource is retired: no lease on it is granted again")]
    Retired,
    /// A holder limit passed to [`LeaseClient::acquire_all`] would be exceeded: the
    /// holder has `held` live leases in the group, and the request's keys on top of them
    /// would make more than `limit`. Nothing was granted or written.
    #[error("the holder has {held} leases in this group; the limit is {limit}")]
    OverLimit {
        /// The holder's live leases in the group, counted by Redis in the refusing script.
        held: u64,
        /// The limit asked for.
        limit: u64,
    },
    /// [`LeaseClient::acquire_all`] was given no key, keys of several groups, or one
    /// name twice: a group hold is over distinct resources of one group (one Redis slot).
    /// Nothing was sent.
    #[error("a group hold needs at least one key, all of one group, no name twice")]
    NotOneGroup,
    /// The ledger's next ceiling is above [`MAX_FENCING_TOKEN`]: the group has used up
    /// the tokens a Lua number can count exactly. Nothing was granted or written.
    #[error("fencing tokens of this group are exhausted (ceiling {ceiling} > 2^53 - 1)")]
    TokensExhausted {
        /// The ceiling the ledger returned.
        ceiling: u64,
    },
    /// etcd did not answer, or answered with an error ([`etcd::EtcdStore`]): guarded work
    /// must stop.
    #[error("lease store unavailable (etcd): {0}")]
    Etcd(#[from] etcd_client::Error),
    /// The store cannot express `ttl` ([`LeaseStore::ttl_limits`]; etcd: whole seconds,
    /// at least 2 s). Nothing was sent.
    #[error(
        "{store} cannot hold a lease for {ttl:?}: its TTLs are whole multiples of {:?}, at least {:?}",
        limits.step,
        limits.min
    )]
    TtlNotExpressible {
        /// The store's name (`"etcd"`).
        store: &'static str,
        /// The TTL asked for.
        ttl: Duration,
        /// What the store can express.
        limits: TtlLimits,
    },
}

/// The largest fencing token ever issued: 2^53 − 1, the largest integer that Redis's Lua
/// (whose numbers are doubles) and JSON hold exactly.
pub const MAX_FENCING_TOKEN: u64 = (1 << 53) - 1;

/// Durable storage for fencing-token ceilings: the part of the fencing scheme that must
/// survive Redis losing its data (the article's step 5).
///
/// `raise_ceiling(group, block)` must atomically add `block` to the group's stored ceiling
/// (starting from 0) and return the new value, durably, before returning. Seatlock's
/// implementation is one Postgres `INSERT … ON CONFLICT DO UPDATE … RETURNING`. Any store
/// with an atomic durable increment works (etcd, ZooKeeper, a SQL sequence per group).
/// [`MemoryLedger`] is a non-durable one for examples and tests.
pub trait FenceLedger: Send + Sync {
    /// Why a reservation failed (for Postgres, `sqlx::Error`). [`LeaseClient::acquire`]
    /// returns it boxed inside [`LeaseError::Ledger`].
    type Error: std::error::Error + Send + Sync + 'static;

    /// Reserves the next `block` tokens of `group`; returns the new ceiling.
    fn raise_ceiling(
        &self,
        group: &str,
        block: u64,
    ) -> impl Future<Output = Result<u64, Self::Error>> + Send;
}

/// The lease client: one Redis connection (multiplexed, reconnecting) plus the fence
/// ledger. Cheap to share behind an `Arc`; every method is `&self`.
///
/// Take a lease with [`acquire`](LeaseClient::acquire) (one try) or
/// [`acquire_with_backoff`](LeaseClient::acquire_with_backoff) (retried while busy, see
/// [`Backoff`]); keep it with [`renew`](LeaseClient::renew) or hand it to
/// [`watch`](LeaseClient::watch), whose [`Watchdog`] renews it every TTL/3; give it back
/// with [`release`](LeaseClient::release) (compare-and-delete). The crate docs list every
/// operation with its round trips.
pub struct LeaseClient<L> {
    redis: RedisStore,
    ledger: L,
    block_size: u64,
    /// One block reservation at a time per client, so a burst of grants on a cold group
    /// reserves one block, not one per caller.
    reserving: tokio::sync::Mutex<()>,
    /// Reservations made so far (to tell whether another task reserved while we waited).
    reservations: std::sync::atomic::AtomicU64,
    /// Issue tokens only from a block installed on the Redis server running the script
    /// (see [`LeaseClient::with_failover_guard`]). Off only in the failover lab.
    failover_guard: bool,
}

/// Default number of fencing tokens reserved from the ledger at a time.
pub const DEFAULT_BLOCK_SIZE: u64 = 10_000;

impl<L: FenceLedger> LeaseClient<L> {
    /// A client over a Redis store (see [`connect`]) and a ledger.
    pub fn new(redis: RedisStore, ledger: L) -> Self {
        LeaseClient {
            redis,
            ledger,
            block_size: DEFAULT_BLOCK_SIZE,
            reserving: tokio::sync::Mutex::new(()),
            reservations: std::sync::atomic::AtomicU64::new(0),
            failover_guard: true,
        }
    }

    /// Turns the failover guard on (the default) or off. **Off is for the failover lab
    /// only** (`seatlock serve --lab-disable-failover-guard`, `make failover`): it lets a
    /// promoted replica that missed the last grants issue a fencing token again.
    ///
    /// With the guard, the group's fence hash is stamped with the identity of the Redis
    /// server that installed its block (`run_id` from `INFO server`, which changes on
    /// every start, and `master_replid` from `INFO replication`, which changes when a
    /// replica is promoted), and acquire issues a token only from a block stamped by the
    /// server running it; otherwise it reserves a fresh block in the durable ledger
    /// first, which lies above every token issued before. Costs two `INFO` calls inside
    /// the acquire script per grant (no extra round trip); see the README for the
    /// measured cost.
    pub fn with_failover_guard(mut self, enabled: bool) -> Self {
        self.failover_guard = enabled;
        self
    }

    /// Sets how many tokens one ledger call reserves (default [`DEFAULT_BLOCK_SIZE`]).
    /// Larger blocks mean fewer ledger writes and larger jumps after a Redis loss.
    pub fn with_block_size(mut self, block_size: u64) -> Self {
        self.block_size = block_size.max(1);
        self
    }

    /// The current Redis connection, for callers that want to run their own commands on
    /// it (a cheap handle).
    pub fn redis(&self) -> ConnectionManager {
        self.redis.connection()
    }

    /// The healing Redis store the leases use, for callers that keep data of their own in
    /// the same Redis and want each command repaired and timed like the leases' own
    /// ([`RedisStore::query`]; seatlock keeps its browser sessions there).
    pub fn store(&self) -> &RedisStore {
        &self.redis
    }

    /// Tries once to take the lease on `key` for `ttl`, labelled with the public `holder`
    /// string (shown to readers of [`LeaseClient::holders`]).
    ///
    /// One atomic Lua script: `SET key owner NX PX ttl_ms`, and only if that succeeded,
    /// increment the group's fencing counter and record the holding. Returns the
    /// [`Lease`], or [`LeaseError::Held`] with the current holder's label and remaining
    /// time, or [`LeaseError::Retired`] for a resource retired by [`LeaseClient::retire`]
    /// (checked first, in the same script). `ttl` is rounded down to whole milliseconds
    /// and must be at least 1 ms. The same as [`LeaseClient::acquire_all`] with one key
    /// and no limit.
    pub async fn acquire(
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

    /// Tries once to take leases on every one of `keys` (one group, no name twice) for
    /// `ttl`, all or none, labelled `holder`: a group hold, e.g. four seats together.
    ///
    /// One atomic Lua script (`scripts/acquire.lua`) over one Redis slot: it refuses the
    /// whole request if any key is retired ([`LeaseError::Retired`]) or held by another
    /// owner ([`LeaseError::Held`], that lease's holder and remaining time), or, with
    /// `limit = Some(n)`, if the holder's live leases in the group plus `keys.len()`
    /// would exceed `n` ([`LeaseError::OverLimit`], counted by Redis in the same script,
    /// in O(n): only this holder's own grants are read). Otherwise it sets every key with
    /// one new owner token and takes ONE fencing token for all of them (the returned
    /// leases, in the order of `keys`, share both), records each holding and publishes
    /// one message for the group ([`events`]). Nothing is locked key by key, so two
    /// callers asking for overlapping groups get all or nothing each and never deadlock.
    /// Leases granted without a limit are not counted against a later limit.
    ///
    /// Idempotent for its owner token: a request resent after a dropped connection gets
    /// the same grant. Errors: [`LeaseError::NotOneGroup`] for no keys, keys of several
    /// groups or a name given twice (nothing sent); the errors of
    /// [`LeaseClient::acquire`].
    pub async fn acquire_all(
        &self,
        keys: &[LeaseKey],
        holder: &str,
        ttl: Duration,
        limit: Option<u64>,
    ) -> Result<Vec<Lease>, LeaseError> {
        if !boundary::is_one_group(keys) {
            return Err(LeaseError::NotOneGroup);
        }
        let ttl_ms = (ttl.as_millis() as u64).max(1);
        let owner = OwnerToken::random();
        let reservation = format!("{:016x}", rand::random::<u64>());
        let limit = limit.map_or(0, |n| n.max(1));
        loop {
            let sent_at = tokio::time::Instant::now();
            let reply = scripts::acquire(
                &self.redis,
                keys,
                &owner,
                ttl_ms,
                holder,
                &reservation,
                limit,
                self.failover_guard,
            )
            .await?;
            match reply {
                scripts::AcquireReply::Granted {
                    fencing_token,
                    expires_at_ms,
                } => {
                    return Ok(keys
                        .iter()
                        .map(|key| Lease {
                            key: key.clone(),
                            owner: owner.clone(),
                            fencing_token: FencingToken(fencing_token),
                            ttl: Duration::from_millis(ttl_ms),
                            expires_at_ms,
                            sent_at: Some(sent_at),
                        })
                        .collect());
                }
                scripts::AcquireReply::Held {
                    holder,
                    remaining_ms,
                } => {
                    return Err(LeaseError::Held {
                        holder,
                        remaining: Duration::from_millis(remaining_ms),
                    });
                }
                scripts::AcquireReply::OverLimit { held, limit } => {
                    return Err(LeaseError::OverLimit { held, limit });
                }
                scripts::AcquireReply::Retired => return Err(LeaseError::Retired),
                scripts::AcquireReply::NeedsCeiling => {
                    use std::sync::atomic::Ordering::SeqCst;
                    let seen = self.reservations.load(SeqCst);
                    let _one_at_a_time = self.reserving.lock().await;
                    if self.reservations.load(SeqCst) == seen
                        && self.reserve_block(&keys[0], &reservation).await?
                    {
                        self.reservations.fetch_add(1, SeqCst);
                    }
                }
            }
        }
    }

    /// Reserves a new block of fencing tokens in the ledger and hands it to Redis, if the
    /// reservation's marker (left by the acquire that asked) is still there; returns
    /// whether it was installed. Refused when Redis lost its data meanwhile: the block
    /// may lie below tokens another process reserved, installed and issued in between
    /// (the hi/lo allocation must only move up). Errors: [`LeaseError::TokensExhausted`]
    /// for a ceiling above [`MAX_FENCING_TOKEN`].
    async fn reserve_block(&self, key: &LeaseKey, reservation: &str) -> Result<bool, LeaseError> {
        let ceiling = self
            .ledger
            .raise_ceiling(key.group(), self.block_size)
            .await
            .map_err(|err| LeaseError::Ledger(Box::new(err)))?;
        if ceiling > MAX_FENCING_TOKEN {
            return Err(LeaseError::TokensExhausted { ceiling });
        }
        let installed = scripts::raise_ceiling(
            &self.redis,
            key,
            reservation,
            ceiling,
            self.block_size,
            self.failover_guard,
        )
        .await?;
        if !installed {
            metrics::counter!(telemetry::STALE_RESERVATIONS_TOTAL).increment(1);
        }
        Ok(installed)
    }

    /// Releases `lease` if the caller still owns it (compare-and-delete). Returns `true` if
    /// this call deleted it, `false` if it had already expired or passed to another owner,
    /// in which case nothing is touched.
    pub async fn release(&self, lease: &Lease) -> Result<bool, LeaseError> {
        scripts::release(&self.redis, &lease.key, &lease.owner).await
    }

    /// Retires `lease`'s resource for good and releases `lease` if the caller still owns
    /// it, in one script: from then on every [`LeaseClient::acquire`] of the resource is
    /// refused with [`LeaseError::Retired`]. For a resource whose fenced write was final
    /// (seatlock: a sold seat), so that later contenders are turned away by the lock
    /// service instead of by the resource. Returns `true` if this call deleted the lease,
    /// `false` if it had already expired or passed to another owner (whose lease is left
    /// as it is, to lapse, be renewed or be released: only new grants are refused).
    ///
    /// The retirement is a hint, not a guarantee: it lives in Redis, which can lose it
    /// (step 5), and it is recorded after the resource's final write, so a contender can
    /// be granted a lease in between. The resource's own check (the fence, and for a sold
    /// seat its `NOT sold`) stays what refuses a late write. Idempotent.
    pub async fn retire(&self, lease: &Lease) -> Result<bool, LeaseError> {
        scripts::retire(&self.redis, &lease.key, &lease.owner).await
    }

    /// Extends `lease` to `lease.ttl()` from now if the caller still owns it
    /// (compare-and-pexpire) and updates its `expires_at_ms()`. Returns `false`, touching
    /// nothing, if the lease expired or passed to another owner: an expired key is never
    /// recreated.
    pub async fn renew(&self, lease: &mut Lease) -> Result<bool, LeaseError> {
        let ttl_ms = lease.ttl.as_millis() as u64;
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
            None => Ok(false),
        }
    }

    /// Every live lease in `group`, with the Redis time of the read: one round trip
    /// (`TIME` and `HGETALL` pipelined), whatever the number of resources.
    pub async fn holders(&self, group: &str) -> Result<GroupSnapshot, LeaseError> {
        Ok(scripts::holders(&self.redis, group).await?)
    }

    /// The live lease on `key` if its holder label is `holder`, owner token included: one
    /// script. For a holder that lost its own copy of the owner token (a web session
    /// saved concurrently by two requests, or not saved at all). Whoever can present the
    /// label can then act as the owner, so use it only where the label is itself
    /// authenticated (seatlock: the buyer id from the server-side session). The returned
    /// lease's `ttl` is its remaining time.
    pub async fn owned_by(
        &self,
        key: &LeaseKey,
        holder: &str,
    ) -> Result<Option<Lease>, LeaseError> {
        let sent_at = tokio::time::Instant::now();
        let current = scripts::current(&self.redis, key).await?;
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

    /// `PING`s Redis over the client's own connection, repaired like every other request
    /// (resent once after a dropped connection, replaced after a timeout): for health
    /// checks, which then see what the leases see. Errors: Redis unavailable.
    pub async fn ping(&self) -> Result<(), LeaseError> {
        let _: String = self.redis.query("ping", &redis::cmd("PING")).await?;
        Ok(())
    }

    /// Whether `lease` is still held by its owner (one `GET`, compared here). Only a
    /// check at one instant: the lease can expire right after it returns `true`, which
    /// is exactly why writes must carry the fencing token.
    pub async fn is_held(&self, lease: &Lease) -> Result<bool, LeaseError> {
        let get = redis::cmd("GET").arg(lease.key.lease_key()).clone();
        let owner: Option<String> = self.redis.query("is_held", &get).await?;
        Ok(owner.as_deref() == Some(lease.owner.as_str()))
    }

    /// Remaining time of the lease on `key` as Redis sees it (`PTTL`), or `None` if no
    /// lease exists.
    pub async fn remaining(&self, key: &LeaseKey) -> Result<Option<Duration>, LeaseError> {
        let pttl_cmd = redis::cmd("PTTL").arg(key.lease_key()).clone();
        let pttl: i64 = self.redis.query("remaining", &pttl_cmd).await?;
        Ok((pttl >= 0).then(|| Duration::from_millis(pttl as u64)))
    }
}

/// Opens a lazily connecting Redis store for `url` (`redis://host:port/db`) that heals
/// its connection ([`RedisStore`]). `timeout` bounds both connecting and each response, so
/// a lost Redis turns into [`LeaseError::Unavailable`] quickly instead of a hung request.
pub fn connect(url: &str, timeout: Duration) -> Result<RedisStore, redis::RedisError> {
    RedisStore::open(url, timeout)
}

/// [`connect`] for async code ([`RedisStore::open_async`]): with a Sentinel URL the
/// Sentinels are asked without blocking the thread, a hung one passed over, the whole
/// bounded by `timeout`.
pub async fn connect_async(url: &str, timeout: Duration) -> Result<RedisStore, redis::RedisError> {
    RedisStore::open_async(url, timeout).await
}
