//! What the lease library reports through the [`metrics`] facade. Nothing is recorded
//! unless the application installs a recorder (seatlock installs a Prometheus one and
//! serves it at `GET /metrics`); without one each call is a no-op.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | [`REDIS_ROUND_TRIP_SECONDS`] | histogram, seconds | `op` | one Redis round trip of this crate, request to reply |
//! | [`RENEWALS_TOTAL`] | counter | `result` = `renewed` / `not_owner` | [`LeaseStore::renew`](crate::LeaseStore::renew) calls that reached Redis |
//! | [`WATCHDOG_LOSSES_TOTAL`] | counter | | watchdogs that reported [`crate::WatchdogEvent::Lost`] |
//! | [`REDIS_REPAIRS_TOTAL`] | counter | `repair` = `resent` / `replaced` / `new_primary` / `new_primary_polled` | requests sent again after a dropped connection; connections replaced after a timeout; moves to a new primary |
//! | [`STALE_RESERVATIONS_TOTAL`] | counter | | fence blocks refused at install because Redis lost its data after they were reserved (reserved again) |
//! | [`LOCK_WAIT_SECONDS`] | histogram, seconds | `outcome` = `granted` / `busy` / `failed` | time [`LeaseStore::acquire_with_backoff`](crate::LeaseStore::acquire_with_backoff) spent from its first try to its answer |
//!
//! `op` is one of `acquire`, `release`, `retire`, `renew`, `holders`, `raise_ceiling`,
//! `is_held`, `remaining`, `current`, `ping`, or the name an application gives a command
//! of its own run through [`crate::RedisStore::query`] (seatlock: `session_load`,
//! `session_save`, `session_create`, `session_delete`).

use std::future::Future;
use std::time::Instant;

/// Histogram (seconds), label `op`: latency of one Redis round trip made by this crate.
pub const REDIS_ROUND_TRIP_SECONDS: &str = "lease_redis_round_trip_seconds";
/// Counter, label `result` (`renewed`, `not_owner`): renewals answered by Redis.
pub const RENEWALS_TOTAL: &str = "lease_renewals_total";
/// Counter: watchdogs that found their lease gone (or Redis unreachable for a whole TTL).
pub const WATCHDOG_LOSSES_TOTAL: &str = "lease_watchdog_losses_total";
/// Counter, label `repair`: `resent`, a request sent again after its connection was
/// dropped; `replaced`, a connection replaced after a timeout; `new_primary` and
/// `new_primary_polled`, a move to the primary the Sentinels name, after an error or by
/// the poll. See [`crate::redis`].
pub const REDIS_REPAIRS_TOTAL: &str = "lease_redis_repairs_total";
/// Counter: fence blocks refused at install because Redis lost its data after the
/// reservation began (the reservation marker was gone); the acquire reserved again.
pub const STALE_RESERVATIONS_TOTAL: &str = "lease_stale_reservations_total";
/// Histogram (seconds), label `outcome` (`granted`, `busy`, or `failed` when Redis or the
/// ledger failed): time from the first try of `acquire_with_backoff` to its answer,
/// retries and backoff sleeps included.
pub const LOCK_WAIT_SECONDS: &str = "lease_lock_wait_seconds";

/// Awaits `round_trip` (one Redis request) and records its latency under `op`, whether it
/// succeeded or not.
pub(crate) async fn redis_round_trip<T>(
    op: &'static str,
    round_trip: impl Future<Output = T>,
) -> T {
    let started = Instant::now();
    let reply = round_trip.await;
    metrics::histogram!(REDIS_ROUND_TRIP_SECONDS, "op" => op).record(started.elapsed());
    reply
}
