//! # lease: Redis leases with owner tokens and fencing tokens
//!
//! A distributed lock is a record in a store that every contender can reach: "I hold
//! `seat 14C`". One process creates it, and the store refuses it to the others. This
//! crate implements the five steps of the article *Distributed locks and leases* (see
//! the project README) on Redis: one server, a Sentinel-watched primary, or a Cluster.
//! This page explains the steps once. Each step links to the one place it is done.
//!
//! ## Layout
//!
//! The five steps are in these files. Read them first:
//!
//! * `lib.rs`: this page, the steps and where each one is done.
//! * `token.rs`: the two tokens of a grant, [`OwnerToken`] and [`FencingToken`].
//! * `keys.rs`: [`LeaseKey`], a resource in a group, and the Redis keys it uses.
//! * `lease.rs`: a [`Grant`] asks for leases; a [`Lease`] is what the holder gets.
//! * `store.rs`: the [`LeaseStore`] trait, what the application asks of a lease store.
//! * `client.rs`: [`LeaseClient`], the Redis lease store. Each operation is one round trip.
//! * `scripts.rs` and `scripts/`: the Lua scripts. `acquire.lua` holds the `SET … NX PX`.
//! * `fence.rs`: the fence ledger that keeps fencing tokens rising across a Redis loss.
//! * `watchdog.rs`: the [`Watchdog`], which renews a lease while its holder works.
//! * `error.rs`: [`LeaseError`], why an operation failed.
//!
//! The rest are extensions:
//!
//! * `redis/`: the connection to Redis ([`RedisStore`]), its repairs, Sentinel and Cluster.
//! * `room/`: a waiting room in front of a group, checked by the grant's own script.
//! * `etcd/`: a [`LeaseStore`] on etcd, behind the `etcd` feature.
//! * `zookeeper/`: a [`LeaseStore`] on ZooKeeper (its lock recipe), behind the `zookeeper`
//!   feature.
//! * `changes.rs`: each grant, release and lapse of a group, as a [`changes::LeaseChange`].
//! * `backoff.rs`: retrying a busy lease with jittered [`Backoff`].
//! * `telemetry.rs`: the metrics the crate reports.
//! * `memory.rs`: [`MemoryLedger`], a fence ledger in memory for examples and tests.
//!
//! ## The five steps
//!
//! 1. **Create-if-absent**: a grant is `SET key owner NX`. It runs inside one script that
//!    first finds every key absent. Redis runs one script at a time. So only the first
//!    of two callers creates the key, and its `SET … NX` cannot fail. The line is in
//!    `scripts/acquire.lua`, run by [`LeaseStore::acquire_all`] on a [`LeaseClient`]
//!    ([`LeaseStore::acquire`] for one resource).
//! 2. **Lease**: the same `SET` carries `PX ttl_ms`. So a crashed holder blocks others for
//!    at most one TTL (Gray and Cheriton, 1989). A long task renews the lease
//!    ([`LeaseStore::renew`], `renew.lua`) every TTL/3. A [`Watchdog`] does it.
//! 3. **Owner-checked release**: the key's value is a random [`OwnerToken`] of 128 bits.
//!    [`LeaseStore::release`] is a compare-and-delete (`release.lua`). Renew is a
//!    compare-and-pexpire. Each is one Lua script. So a slow holder never deletes or
//!    extends a lease that passed to someone else, and never recreates an expired key.
//! 4. **Fencing token**: every grant also increments the group's counter, in the same
//!    script, and returns it as a [`FencingToken`] (Kleppmann, 2016; Chubby calls them
//!    *sequencers*). The protected resource rejects a write whose token is lower than the
//!    last one it accepted. That, not the lease, stops a paused holder once a newer holder
//!    has written. Before the newer holder writes, the old token still passes. So a
//!    resource written once, like a seat, also checks that the lease is still held, with
//!    its row locked, before it commits.
//! 5. **A store that survives**: a Redis that loses its data loses the leases. Holders
//!    learn it when they next act: a renew, release or owner check answers `false`. But Redis must never hand out a fencing token
//!    again. Tokens come from blocks reserved in a durable [`FenceLedger`] (Postgres in
//!    seatlock). Its docs explain the blocks, the reservation marker and the failover
//!    guard against a promoted replica. [`connect`] follows a Sentinel failover, or a
//!    Redis Cluster's slots and failovers ([`RedisStore`]). With the `etcd` feature,
//!    `etcd::EtcdStore` is a consensus-backed [`LeaseStore`] instead; with the
//!    `zookeeper` feature, `zookeeper::ZooKeeperStore`.
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
//! use lease::{FencingToken, LeaseClient, LeaseError, LeaseKey, LeaseStore, MemoryLedger};
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
//! Every operation is a method of the [`LeaseStore`] trait, implemented by
//! [`LeaseClient`] (Redis) and, with the `etcd` feature, by `etcd::EtcdStore` (with the
//! `zookeeper` feature, by `zookeeper::ZooKeeperStore`: `docs/stores.md`):
//!
//! | operation | what | Redis |
//! |---|---|---|
//! | [`acquire`](LeaseStore::acquire) | one try: a [`Lease`], or [`LeaseError::Held`] | one script |
//! | [`acquire_all`](LeaseStore::acquire_all) | one try at a [`Grant`]: several resources of one group, all or none, one fencing token; optionally under a per-holder limit ([`LeaseError::OverLimit`]) or behind a waiting room's admission ([`LeaseError::NotAdmitted`]) | one script |
//! | [`acquire_with_backoff`](LeaseStore::acquire_with_backoff) | retries a busy lease with jittered exponential [`Backoff`], bounded in attempts and time | one script per attempt |
//! | [`renew`](LeaseStore::renew) | compare-and-pexpire: extends the lease by its TTL | one script |
//! | [`extend_all`](LeaseStore::extend_all) | "Need more time?": an [`Extension`] of one holder's leases, all or none, owner-checked, same fencing token, a lapsed lease never recreated ([`LeaseError::Expired`]); at most 10 times ([`LeaseError::ExtensionLimit`]) and 10 × TTL from the grant ([`LeaseError::LifeLimit`]) | one script (`extend.lua`) |
//! | [`watch`](LeaseClient::watch) | starts a [`Watchdog`]: renews every TTL/3, reports [`WatchdogEvent::Lost`] | one script per renewal |
//! | [`release`](LeaseStore::release) | compare-and-delete | one script |
//! | [`retire`](LeaseStore::retire) | retires the resource for good (no acquire grants it again: [`LeaseError::Retired`]) and releases the caller's lease on it (compare-and-delete) | one script |
//! | [`holders`](LeaseStore::holders) | every live lease of a group ([`GroupSnapshot`]) | one pipeline |
//! | [`held_by`](LeaseStore::held_by) | one holder's live leases in a group (a buyer's cart) | one script |
//! | [`owned_by`](LeaseStore::owned_by) | the live lease held under a label, owner token included | one script |
//! | [`owned_by_paying`](LeaseStore::owned_by_paying), [`end_paying`](LeaseStore::end_paying) | `owned_by` that marks the lease as paying: lapsed meanwhile, it *cools* ([`LeaseError::Cooling`]) until the write ends or the cooling time passes; and that end | one script each (Redis only; etcd: `owned_by`, no cooling) |
//! | [`is_held`](LeaseStore::is_held), [`remaining`](LeaseStore::remaining) | one-instant checks | one command |
//!
//! [`changes`] turns a group's pub/sub messages into [`changes::LeaseChange`]s.
//!
//! ## Keys
//! A [`LeaseKey`] names a resource inside a *group* (for seatlock: the seats of one
//! event). All keys of a group share the Redis Cluster hash tag `{group}`, so the scripts
//! touch one slot and the design survives sharding:
//!
//! | key | type | content |
//! |---|---|---|
//! | `lease:{group}:<name>` | string, with PX TTL | the holder's owner token |
//! | `lease:{group}:~fence` | hash | `counter` (last token issued), `ceiling` (highest token the ledger allows), `server` (identity of the Redis server that installed the block: the failover guard, [`FenceLedger`]) |
//! | `lease:{group}:~reserving:<nonce>` | string, PX 30 s | a block reservation's marker: the server it was asked on ([`FenceLedger`]) |
//! | `lease:{group}:~holders` | hash | `<name>` → `"<fencing token> <expires_at_ms> <holder label>"`; and `~paying:<name>` → `"<fencing token> <until_ms>"`, the cooling marker ([`LeaseStore::owned_by_paying`]) |
//! | `lease:{group}:~retired` | set | names retired for good ([`LeaseStore::retire`]); no TTL |
//! | `lease:{group}:~extended:<name>` | string, PX the lease's | the lease's extension record: `"<fencing token> <granted_at_ms> <extensions>"` ([`LeaseStore::extend_all`]) |
//! | `lease:{group}:~held-by:<holder>` | set, PX the longest lease in it | names granted to `holder` ([`LeaseStore::acquire_all`] counts them under a limit, [`LeaseStore::held_by`] reads them); a member counts while the holders hash gives it to `holder`, unexpired |
//!
//! Grants and releases are announced on the pub/sub channel `lease:{group}:~events` by the
//! scripts that make them; see [`changes`] for watching a group. A waiting room keeps a
//! few more keys in the group's slot: see [`room`].
//!
//! The holders hash lets a reader list every live lease of a group in one round trip
//! ([`LeaseStore::holders`]) instead of one `GET` per resource. Its entries carry their
//! own expiry (Redis clock) and are filtered on read; a lapsed entry is overwritten by the
//! next grant of that resource.
//!
//! ## Clocks
//! Every time in this crate is read from the Redis server (`TIME`, `PTTL`), never from
//! the caller's clock: `expires_at_ms` is Unix milliseconds on the Redis clock.
//!
//! ## Round trips
//! `acquire`, `release`, `retire`, `renew` and `holders` are one round trip each
//! ([`LeaseStore::acquire_with_backoff`]: one per attempt). `acquire` costs one
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

mod backoff;
pub mod changes;
mod client;
mod error;
#[cfg(feature = "etcd")]
pub mod etcd;
mod fence;
mod keys;
mod lease;
mod memory;
pub mod redis;
pub mod room;
mod scripts;
mod store;
pub mod telemetry;
mod token;
mod watchdog;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

pub use crate::backoff::Backoff;
pub use crate::client::{LeaseClient, connect, connect_async};
pub use crate::error::LeaseError;
pub use crate::fence::{DEFAULT_BLOCK_SIZE, FenceLedger};
pub use crate::keys::{InvalidKey, LeaseKey};
pub use crate::lease::{
    Extended, Extension, Grant, GroupSnapshot, Holding, Lease, MAX_EXTENSIONS, TtlLimits,
};
pub use crate::memory::MemoryLedger;
pub use crate::redis::RedisStore;
pub use crate::room::{Arrival, Joined, Place, RoomTerms, RoomView, Tick};
pub use crate::store::{LeaseChanges, LeaseStore};
pub use crate::token::{FencingToken, MAX_FENCING_TOKEN, OwnerToken};
pub use crate::watchdog::{Watchdog, WatchdogEvent};

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    /// The names `lib.rs`'s Layout section gives, as `file.rs` or `folder/`.
    fn named_in_layout() -> BTreeSet<String> {
        let lib = include_str!("lib.rs");
        let layout = lib
            .split("//! ## Layout")
            .nth(1)
            .and_then(|rest| rest.split("//! ## ").next())
            .expect("lib.rs has a Layout section");
        layout
            .lines()
            .filter_map(|line| line.strip_prefix("//! * `"))
            .flat_map(|line| {
                let names = line.split(':').next().unwrap_or_default();
                names
                    .split('`')
                    .filter(|n| n.ends_with(".rs") || n.ends_with('/'))
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn the_layout_names_every_file_and_folder_of_src_and_nothing_else() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let on_disk: BTreeSet<String> = std::fs::read_dir(&src)
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                let name = entry.file_name().into_string().unwrap();
                if entry.file_type().unwrap().is_dir() {
                    format!("{name}/")
                } else {
                    name
                }
            })
            .collect();
        assert_eq!(named_in_layout(), on_disk);
    }
}
