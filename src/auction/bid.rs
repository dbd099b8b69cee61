//! The bid path, along the article's steps:
//!
//! 1. [`lock_item`]: the item's bid lock, a short lease (`--bid-lock-ttl-ms`, default
//!    2 s) from the `lease` crate: `SET … NX PX` plus a fencing token, one Redis round
//!    trip. A busy lock is retried with full-jitter exponential backoff, bounded in
//!    attempts and time ([`lock_backoff`]), then refused with 409 "busy, try again".
//! 2. [`bid_under_lease`]: in one Postgres transaction, read the item, check the rules
//!    ([`super::rules`]), then ONE statement writes the bid and the new high bid, checking
//!    the fencing token, the high bid and the end again ([`queries::place_bid`]). The end
//!    is checked by the Postgres clock at the moment of that statement
//!    (`clock_timestamp()`), not at the transaction's start: a bidder that stalls between
//!    its read and its write past the end is refused "ended" even if no newer holder
//!    wrote (a newer holder told "ended" writes nothing, so the fence alone cannot stop
//!    it).
//! 3. Release, owner-checked (compare-and-delete), one Redis round trip.
//!
//! The lease alone does not make this safe: a bidder that stalls past the lease (a GC
//! pause, a slow network) still holds a lock in its own eyes. The fencing token is what
//! makes Postgres refuse its late write once a newer grant has written.
//!
//! [`bid_conditionally`] is the lock-free alternative (`--bid-strategy conditional`): the
//! same statement without a token, one round trip.

use std::time::Duration;

use lease::{Backoff, Lease, LeaseError};

use super::{Bid, queries, rules};
use crate::config::BidStrategy;
use crate::failpoint::{self, PausePoint};
use crate::http::error::{Error, Refusal, Result};
use crate::state::AppState;

/// Retries of a busy bid lock: delays drawn from `[0, 5 ms · 2^n]`, capped at 200 ms, at
/// most 10 attempts and at most `min(lock ttl, 1 s)` of waiting (about 0.45 s on average
/// before giving up). A bid holds the lock for a few milliseconds, so a contender
/// normally gets it on the first or second retry; the bounds only matter when the holder
/// crashed (its lease then lapses within one TTL) or the item is swamped.
pub fn lock_backoff(ttl: Duration) -> Backoff {
    Backoff {
        first: Duration::from_millis(5),
        cap: Duration::from_millis(200),
        attempts: 10,
        budget: ttl.min(Duration::from_secs(1)),
    }
}

/// A bid that was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceptedBid {
    /// `bids.id`.
    pub bid_id: i64,
    /// The amount, in cents.
    pub amount_cents: i64,
    /// The bid lock's fencing token; `None` under the conditional strategy.
    pub fencing_token: Option<u64>,
}

/// Places `bid` with the server's strategy.
///
/// Round trips, lease strategy: lock (1 Redis script, more only while busy) + 1 Postgres
/// transaction (BEGIN, read, the fenced write, COMMIT) + release (1 Redis script); the
/// first bid on an item in this process also reads whether it exists ([`super::known_items::KnownItems`]),
/// so an unknown id takes no lock.
/// Conditional strategy: 1 Postgres statement. A refused write costs one more read, to
/// say why.
///
/// Errors: 404 no such item; 409 ended, not open yet, too low, bid lock busy, or stale
/// fencing token; 503 Redis or Postgres unavailable.
///
/// Traced as span `bid` with the item, bidder, amount and (under the lease strategy) the
/// bid lock's fencing token.
#[tracing::instrument(name = "bid", skip_all, fields(item = bid.item_id, bidder = %bid.bidder.id, amount_cents = bid.amount_cents, fencing_token = tracing::field::Empty))]
pub async fn place_bid(state: &AppState, bid: &Bid<'_>) -> Result<AcceptedBid> {
    match state.settings.bid_strategy {
        BidStrategy::Lease => {
            // An unknown id must not take a lock: each distinct id would leave a fence
            // ceiling row in Postgres and a fence hash in Redis behind.
            if !state.known_items.exists(&state.db, bid.item_id).await? {
                return Err(Error::no_such_auction());
            }
            // 1. The bid lock, 2. the fenced write under it, 3. the owner-checked
            // release, whatever the write's outcome.
            let lease = lock_item(state, bid.item_id, &bid.bidder.id).await?;
            let outcome = bid_under_lease(state, &lease, bid).await;
            release(state, &lease).await;
            outcome
        }
        BidStrategy::Conditional => bid_conditionally(state, bid).await,
    }
}

/// Takes item `item_id`'s bid lock for the configured TTL, labelled with the bidder's
/// public id, retrying while busy ([`lock_backoff`]). Errors: 409 [`Refusal::BidLockBusy`] when
/// the retries are used up, 503 Redis (or the fence ledger) unavailable.
pub async fn lock_item(state: &AppState, item_id: i64, bidder_id: &str) -> Result<Lease> {
    let ttl = state.settings.bid_lock_ttl();
    state
        .leases
        .acquire_with_backoff(
            &super::bid_lock_key(&state.settings.lease_namespace, item_id),
            bidder_id,
            ttl,
            lock_backoff(ttl),
        )
        .await
        .map_err(|err| match err {
            LeaseError::Held { .. } => Refusal::BidLockBusy.into(),
            other => other.into(),
        })
}

/// Releases a bid lock, owner-checked. Never fails the bid: the bid is already decided,
/// and a lock that cannot be released (Redis down, or it lapsed) expires within its TTL.
async fn release(state: &AppState, lease: &Lease) {
    match state.leases.release(lease).await {
        Ok(true) => {}
        Ok(false) => tracing::warn!(
            lease = ?lease.key(),
            fencing_token = lease.fencing_token().as_i64(),
            "bid lock had lapsed before its release"
        ),
        Err(err) => tracing::warn!(lease = ?lease.key(), error = %err, "bid lock release failed"),
    }
}

/// `bid` under a held bid lock: in one transaction, read the item, check the rules, then
/// [`queries::place_bid`] with the lease's fencing token. Commits only a write that
/// Postgres accepted. The pause seam ([`PausePoint::BeforeWrite`]) stalls between
/// the rules check and the write. Errors as [`place_bid`]; a write refused although the rules passed is explained
/// from a fresh read: 409 [`crate::http::error::BidRefusal::Ended`] if the end passed
/// meanwhile (the write checks the end at its own moment), 409
/// [`Refusal::StaleBidLock`] if a newer token was accepted.
pub async fn bid_under_lease(
    state: &AppState,
    lease: &Lease,
    bid: &Bid<'_>,
) -> Result<AcceptedBid> {
    // Read and check the rules inside the transaction that will write: a cheap refusal
    // for a bid that cannot win, before the write that decides.
    let mut tx = state.db.begin().await?;
    let item = queries::item(&mut *tx, bid.item_id)
        .await?
        .ok_or_else(Error::no_such_auction)?;
    rules::check_bid(&item, bid.amount_cents).map_err(Refusal::from)?;
    failpoint::point(PausePoint::BeforeWrite).await;
    // The fenced write: the token, the high bid and the end are checked again by the
    // statement itself, so a bidder that stalled since its read cannot win on stale facts.
    let token = Some(lease.fencing_token().as_i64());
    tracing::Span::current().record("fencing_token", lease.fencing_token().as_i64());
    let Some(placed) = queries::place_bid(&mut *tx, bid, token).await? else {
        tx.rollback().await?;
        return Err(bid_refused(state, bid, token).await);
    };
    tx.commit().await?;
    Ok(accepted(bid, placed, token))
}

/// The lock-free `bid`: [`queries::place_bid`] without a token, one statement. Errors as
/// [`place_bid`] (never busy, never stale).
pub async fn bid_conditionally(state: &AppState, bid: &Bid<'_>) -> Result<AcceptedBid> {
    failpoint::point(PausePoint::BeforeWrite).await;
    // No lock and no token: the one statement's conditions are the whole guard.
    match queries::place_bid(&state.db, bid, None).await? {
        Some(placed) => Ok(accepted(bid, placed, None)),
        None => Err(bid_refused(state, bid, None).await),
    }
}

fn accepted(bid: &Bid<'_>, placed: queries::PlacedBid, fencing_token: Option<i64>) -> AcceptedBid {
    tracing::info!(
        item = bid.item_id,
        bidder = bid.bidder.id,
        amount_cents = bid.amount_cents,
        fencing_token,
        ends_at = %placed.ends_at,
        "bid accepted"
    );
    AcceptedBid {
        bid_id: placed.bid_id,
        amount_cents: bid.amount_cents,
        fencing_token: fencing_token.map(|t| t as u64),
    }
}

/// Explains a bid that [`queries::place_bid`] refused, from a fresh read: no such item,
/// a rule (ended, too low: another bid got in first), or, with a token, a stale token.
async fn bid_refused(state: &AppState, bid: &Bid<'_>, token: Option<i64>) -> Error {
    let item = match queries::item(&state.db, bid.item_id).await {
        Ok(Some(item)) => item,
        Ok(None) => return Error::no_such_auction(),
        Err(err) => return err.into(),
    };
    // The rules first: a bid that lost to another one (or to the clock) says so.
    if let Err(refusal) = rules::check_bid(&item, bid.amount_cents) {
        return Refusal::from(refusal).into();
    }
    // The rules pass now, so the write was refused by its fence, or by a change since.
    match token {
        Some(token) if item.fence_token > token => {
            tracing::warn!(
                item = bid.item_id,
                fencing_token = token,
                accepted = item.fence_token,
                "bid refused: stale fencing token"
            );
            Refusal::StaleBidLock.into()
        }
        // The row changed between the write and this read (say a soft-close bid moved
        // the end); the rules decide on the next try.
        _ => Refusal::AuctionChanged.into(),
    }
}
