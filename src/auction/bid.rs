//! The bid path, along the article's steps:
//!
//! 1. [`lock_item`]: the item's bid lock, a short lease from the `lease` crate.
//!    Its TTL is `--bid-lock-ttl-ms`, 2 s by default. It is `SET … NX PX` plus a fencing
//!    token, in one Redis round trip. A busy lock is retried with full-jitter
//!    exponential backoff, bounded in attempts and time ([`lock_backoff`]). Then it is
//!    refused with 409 "busy, try again".
//! 2. [`bid_under_lease`]: one Postgres transaction. It reads the item and checks the
//!    rules ([`super::rules`]). Then ONE statement writes the bid and the new high bid
//!    ([`queries::place_bid`]). That statement checks the fencing token, the high bid and
//!    the end again. The end is checked by the Postgres clock at the moment of that
//!    statement (`clock_timestamp()`), not at the transaction's start. So a bidder that
//!    stalls past the end, between its read and its write, is refused "ended". That holds
//!    even if no newer holder wrote. A newer holder told "ended" writes nothing, so the
//!    fence alone cannot stop the stalled one.
//! 3. Release, owner-checked: a compare-and-delete, in one Redis round trip.
//!
//! The lease alone does not make this safe. A bidder may stall past the lease, in a GC
//! pause or on a slow network. It still holds a lock in its own eyes. The fencing token
//! makes Postgres refuse its late write once a newer grant has written.
//!
//! [`bid_conditionally`] is the lock-free alternative (`--bid-strategy conditional`).
//! It is the same statement without a token, in one round trip.

use std::time::Duration;

use lease::{Backoff, Lease, LeaseError};

use super::{Bid, queries, rules};
use crate::config::{BidStrategy, Settings};
use crate::failpoint::{self, PausePoint};
use crate::http::error::{Error, Refusal, Result};
use crate::state::AppState;

/// Retries of a busy bid lock.
/// Each delay is drawn from `[0, 5 ms · 2^n]`, capped at 200 ms.
/// There are at most 10 attempts, and at most `min(lock ttl, 1 s)` of waiting.
/// That is about 0.45 s on average before giving up.
/// A bid holds the lock for a few milliseconds.
/// So a contender normally gets it on the first or second retry.
/// The bounds matter only when the item is swamped, or when the holder crashed.
/// A crashed holder's lease lapses within one TTL.
pub fn lock_backoff(ttl: Duration) -> Backoff {
    Backoff {
        first: Duration::from_millis(5),
        cap: Duration::from_millis(200),
        attempts: 10,
        budget: ttl.min(Duration::from_secs(1)),
    }
}

/// How long after an item's end a bid that ARRIVED before it may still take its turn at
/// the item's lock and write: the longest a bid that is not stalled waits for the lock
/// ([`lock_backoff`]'s budget) plus the lease it then writes under (`--bid-lock-ttl-ms`).
/// The closer waits as long past the end before it closes ([`super::close`]); a bid whose
/// turn comes later still is refused "ended" (docs/auction.md, "Judged at arrival").
pub fn arrival_grace(settings: &Settings) -> Duration {
    let ttl = settings.bid_lock_ttl();
    lock_backoff(ttl).budget + ttl
}

/// A bid that was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceptedBid {
    /// `bids.id` of the bidder's own history row.
    pub bid_id: i64,
    /// The maximum stated, in cents.
    pub max_cents: i64,
    /// The price after the bid, in cents.
    pub price_cents: i64,
    /// Whether the bidder leads after it.
    pub leading: bool,
    /// The bid lock's fencing token; `None` under the conditional strategy.
    pub fencing_token: Option<u64>,
}

/// Places `bid` with the server's strategy.
///
/// Round trips under the lease strategy:
/// * the lock: 1 Redis script, more only while busy;
/// * 1 Postgres transaction: BEGIN, read, the fenced write, COMMIT;
/// * the release: 1 Redis script.
///
/// The first bid on an item in this process also reads whether the item exists
/// ([`super::known_items::KnownItems`]). So an unknown id takes no lock.
///
/// Under the conditional strategy: 1 Postgres statement. A refused write costs one more
/// read, to say why.
///
/// Errors: 404 no such item. 409 ended, not open yet, too low, bid lock busy, or stale
/// fencing token. 503 Redis or Postgres unavailable.
///
/// Traced as span `bid` with the item, bidder and amount.
/// Under the lease strategy, the span also has the bid lock's fencing token.
#[tracing::instrument(name = "bid", skip_all, fields(item = bid.item_id, bidder = %bid.bidder.id, max_cents = bid.max_cents, fencing_token = tracing::field::Empty))]
pub async fn place_bid(state: &AppState, bid: &Bid<'_>) -> Result<AcceptedBid> {
    match state.settings.bid_strategy {
        BidStrategy::Lease => {
            // An unknown id must not take a lock.
            // Each distinct id would leave a fence ceiling row in Postgres behind.
            // It would leave a fence hash in Redis too.
            if !state.known_items.exists(&state.db, bid.item_id).await? {
                return Err(Error::no_such_auction());
            }
            // 1. The bid lock. 2. The fenced write under it.
            // 3. The owner-checked release, whatever the write's outcome.
            let lease = lock_item(state, bid.item_id, &bid.bidder.id).await?;
            let outcome = bid_under_lease(state, &lease, bid).await;
            release(state, &lease).await;
            outcome
        }
        BidStrategy::Conditional => bid_conditionally(state, bid).await,
    }
}

/// Takes item `item_id`'s bid lock for the configured TTL.
/// The lock is labelled with the bidder's public id.
/// It retries while the lock is busy ([`lock_backoff`]).
/// Errors: 409 [`Refusal::BidLockBusy`] when the retries are used up.
/// 503 when Redis or the fence ledger is unavailable.
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

/// Releases a bid lock, owner-checked.
/// It never fails the bid: the bid is already decided.
/// A lock that cannot be released expires within its TTL.
/// That happens when Redis is down, or when the lock lapsed.
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

/// `bid` under a held bid lock.
///
/// In one transaction it reads the item and checks the rules.
/// Then it runs [`queries::place_bid`] with the lease's fencing token.
/// It commits only a write that Postgres accepted.
/// The pause seam ([`PausePoint::BeforeWrite`]) stalls between the rules check
/// and the write.
///
/// Errors as [`place_bid`]. The rules may pass and the write still be refused.
/// A fresh read then explains it:
/// * 409 [`crate::http::error::BidRefusal::Ended`] if the end passed meanwhile. The
///   write checks the end at its own moment.
/// * 409 [`Refusal::StaleBidLock`] if a newer token was accepted.
pub async fn bid_under_lease(
    state: &AppState,
    lease: &Lease,
    bid: &Bid<'_>,
) -> Result<AcceptedBid> {
    // Read and check the rules inside the transaction that will write.
    // A bid that cannot win is refused cheaply, before the write that decides.
    let mut tx = state.db.begin().await?;
    let item = queries::item(&mut *tx, bid.item_id)
        .await?
        .ok_or_else(Error::no_such_auction)?;
    check(state, &item, bid)?;
    failpoint::point(PausePoint::BeforeWrite).await;
    // The fenced write. The statement itself checks the token, the price and the end
    // again, and resolves the maxima on the row as it then is. So a bidder that stalled
    // since its read cannot win on stale facts.
    let token = Some(lease.fencing_token().as_i64());
    tracing::Span::current().record("fencing_token", lease.fencing_token().as_i64());
    let grace = arrival_grace(&state.settings);
    let Some(placed) = queries::place_bid(&mut *tx, bid, token, grace).await? else {
        tx.rollback().await?;
        return Err(bid_refused(state, bid, token).await);
    };
    tx.commit().await?;
    Ok(accepted(bid, placed, token))
}

/// The lock-free `bid`: [`queries::place_bid`] without a token, in one statement.
/// Errors as [`place_bid`], but never busy and never stale.
pub async fn bid_conditionally(state: &AppState, bid: &Bid<'_>) -> Result<AcceptedBid> {
    failpoint::point(PausePoint::BeforeWrite).await;
    // No lock and no token. The one statement's conditions are the whole guard.
    match queries::place_bid(&state.db, bid, None, arrival_grace(&state.settings)).await? {
        Some(placed) => Ok(accepted(bid, placed, None)),
        None => Err(bid_refused(state, bid, None).await),
    }
}

/// [`rules::check_bid`] for `bid` on `item`, with this server's arrival grace.
fn check(state: &AppState, item: &queries::Item, bid: &Bid<'_>) -> Result<()> {
    let offer = rules::Offer {
        bidder_id: &bid.bidder.id,
        max_cents: bid.max_cents,
        arrived_at: bid.arrived_at,
    };
    let grace = chrono::TimeDelta::from_std(arrival_grace(&state.settings))
        .unwrap_or(chrono::TimeDelta::MAX);
    rules::check_bid(item, &offer, grace).map_err(|refusal| Refusal::from(refusal).into())
}

fn accepted(bid: &Bid<'_>, placed: queries::PlacedBid, fencing_token: Option<i64>) -> AcceptedBid {
    tracing::info!(
        item = bid.item_id,
        bidder = bid.bidder.id,
        max_cents = bid.max_cents,
        price_cents = placed.price_cents,
        leader = placed.leader_id,
        fencing_token,
        ends_at = %placed.ends_at,
        "bid accepted"
    );
    AcceptedBid {
        bid_id: placed.bid_id,
        max_cents: bid.max_cents,
        price_cents: placed.price_cents,
        leading: placed.leader_id == bid.bidder.id,
        fencing_token: fencing_token.map(|t| t as u64),
    }
}

/// Explains a bid that [`queries::place_bid`] refused, from a fresh read.
/// It may be no such item. It may be a rule: ended, or too low because another bid got
/// in first. With a token, it may be a stale token.
async fn bid_refused(state: &AppState, bid: &Bid<'_>, token: Option<i64>) -> Error {
    let item = match queries::item(&state.db, bid.item_id).await {
        Ok(Some(item)) => item,
        Ok(None) => return Error::no_such_auction(),
        Err(err) => return err.into(),
    };
    // The rules first. A bid that lost to another one, or to the clock, says so.
    if let Err(refusal) = check(state, &item, bid) {
        return refusal;
    }
    // The rules pass now. So the write was refused by its fence, or by a change since.
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
        // The row changed between the write and this read.
        // Say a soft-close bid moved the end. The rules decide on the next try.
        _ => Refusal::AuctionChanged.into(),
    }
}
