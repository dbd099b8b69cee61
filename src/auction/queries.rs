//! Every SQL statement of the auction. The two that matter are [`place_bid`], the fenced
//! conditional bid write, and [`close_item`], the fenced close. Each is ONE statement, so
//! its checks and its write are atomic.
//!
//! # The clock: `clock_timestamp()`, the moment of the check
//!
//! Every time comes from the Postgres clock, one clock for every server process, and
//! every decision "open, ended, inside the soft-close window" uses the same reading of
//! it: `clock_timestamp()`, the server's time when the expression is evaluated. Not
//! `now()`: that is the start of the *transaction*, so a bid whose transaction began
//! before the end and then stalled (a GC pause, its bid lock lapsing) was judged as if it
//! wrote at the start, and accepted after the end, after a newer bidder had been told
//! "ended". Not `statement_timestamp()` either: it is the moment the statement
//! *arrived*, and a write that then waits for the item's row lock (another bid's
//! transaction, the closer) keeps that earlier time. Postgres re-checks the WHERE clause
//! of a waiting UPDATE on the new row version once the lock is free (READ COMMITTED);
//! `clock_timestamp()`, being volatile, is read again there, `statement_timestamp()` is
//! not. (Measured on Postgres 15: an UPDATE sent before the end and blocked past it by
//! another transaction's row lock was accepted 1.07 s after the end with
//! `statement_timestamp()`, and refused with `clock_timestamp()`.)
//!
//! What that costs: each call reads the clock, so within one statement the WHERE clause
//! and the SET list may read instants a few microseconds apart (only ever later: a bid
//! accepted at `t < ends_at` whose soft-close test reads `t' >= t` can only be more
//! inside the window); and a volatile value cannot bound an index scan, so the closer's
//! scan ([`due_items`]) reads it once, as `(SELECT clock_timestamp())`. A bid is "in
//! time" if its statement's check ran before the end; its transaction commits one round
//! trip later (the lease strategy) or at once (the conditional strategy).

use chrono::{DateTime, Utc};
use serde::Deserialize;
use sqlx::{PgExecutor, PgPool};

use super::Bid;
use crate::live::NOTIFY_CHANNEL;

/// The columns of [`Item`], with the Postgres clock as `now`: `clock_timestamp()`, the
/// moment of the read, even inside a transaction (the bid path reads the item for the rules
/// inside its transaction; see the module docs).
const ITEM_COLUMNS: &str = "id, title, description, starting_price_cents, min_increment_cents,
    reserve_price_cents, starts_at, ends_at, soft_close_secs, status, high_bid_cents,
    high_bidder_id, high_bidder_name, bid_count, fence_token, result, winner_id, winner_name,
    closed_at, clock_timestamp() AS now";

/// What the seller sets for an item: what it is and the money terms. Money in cents.
/// Shared by the seed file (`data/auctions.json`), new items and stored items.
#[derive(Clone, Debug, Deserialize, sqlx::FromRow)]
pub struct ItemTerms {
    /// The item's title.
    pub title: String,
    /// The item's description.
    pub description: String,
    /// The least amount of the first bid.
    pub starting_price_cents: i64,
    /// How much a bid must beat the high bid by (at least 1 cent: an equal bid loses).
    pub min_increment_cents: i64,
    /// The least high bid that sells the item; 0 = no reserve.
    pub reserve_price_cents: i64,
    /// Soft-close window and extension, in seconds; 0 = soft close off.
    pub soft_close_secs: i32,
}

/// An auction item as stored (migrations/0004), read at `now`. Money in cents.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Item {
    /// Its id.
    pub id: i64,
    #[sqlx(flatten)]
    /// The item's bidding terms (start price, increment).
    pub terms: ItemTerms,
    /// When bidding opens.
    pub starts_at: DateTime<Utc>,
    /// When bidding ends.
    pub ends_at: DateTime<Utc>,
    /// `open` or `closed`.
    pub status: String,
    /// `None` until the first bid.
    pub high_bid_cents: Option<i64>,
    /// The high bidder's public buyer id, if any bid.
    pub high_bidder_id: Option<String>,
    /// The high bidder's display name, if any bid.
    pub high_bidder_name: Option<String>,
    /// How many bids the item has.
    pub bid_count: i32,
    /// Highest fencing token the row has accepted.
    pub fence_token: i64,
    /// `sold`, `reserve_not_met` or `no_bids` once closed.
    pub result: Option<String>,
    /// The winner's public buyer id, once closed.
    pub winner_id: Option<String>,
    /// The winner's display name, once closed.
    pub winner_name: Option<String>,
    /// When the item was closed, if it was.
    pub closed_at: Option<DateTime<Utc>>,
    /// The Postgres clock when the row was read (`clock_timestamp()`: the moment of the
    /// read, not the start of its transaction).
    pub now: DateTime<Utc>,
}

/// One item, or `None`. Takes a pool or a transaction.
pub async fn item(db: impl PgExecutor<'_>, item_id: i64) -> sqlx::Result<Option<Item>> {
    sqlx::query_as(&format!(
        "SELECT {ITEM_COLUMNS} FROM auction_items WHERE id = $1"
    ))
    .bind(item_id)
    .fetch_optional(db)
    .await
}

/// Whether an item with this id exists (one primary-key probe).
pub async fn item_exists(db: &PgPool, item_id: i64) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM auction_items WHERE id = $1)")
        .bind(item_id)
        .fetch_one(db)
        .await
}

/// Open items, ending soonest first (including ones past their end that the closer has
/// not reached yet).
pub async fn open_items(db: &PgPool) -> sqlx::Result<Vec<Item>> {
    sqlx::query_as(&format!(
        "SELECT {ITEM_COLUMNS} FROM auction_items WHERE status = 'open' ORDER BY ends_at, id"
    ))
    .fetch_all(db)
    .await
}

/// The `limit` most recently closed items.
pub async fn closed_items(db: &PgPool, limit: i64) -> sqlx::Result<Vec<Item>> {
    sqlx::query_as(&format!(
        "SELECT {ITEM_COLUMNS} FROM auction_items WHERE status = 'closed'
          ORDER BY closed_at DESC, id DESC LIMIT $1"
    ))
    .bind(limit)
    .fetch_all(db)
    .await
}

/// An accepted bid, for the history.
#[derive(Debug, sqlx::FromRow)]
pub struct BidRow {
    /// The bidder's public buyer id.
    pub bidder_id: String,
    /// The bidder's display name.
    pub bidder_name: String,
    /// The bid's amount, in cents.
    pub amount_cents: i64,
    /// The bid lock's fencing token; `None` under the conditional strategy.
    pub fence_token: Option<i64>,
    /// When it was written.
    pub created_at: DateTime<Utc>,
}

/// The `limit` highest bids on an item, highest (latest) first.
pub async fn bids(db: &PgPool, item_id: i64, limit: i64) -> sqlx::Result<Vec<BidRow>> {
    sqlx::query_as(
        "SELECT bidder_id, bidder_name, amount_cents, fence_token, created_at
           FROM bids WHERE item_id = $1 ORDER BY amount_cents DESC LIMIT $2",
    )
    .bind(item_id)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// A new auction item (seed file, tests), open from `starts_at` to `ends_at`.
#[derive(Clone, Debug)]
pub struct NewItem {
    /// Stable name; at most one open item per slug.
    pub slug: String,
    /// The item's bidding terms (start price, increment).
    pub terms: ItemTerms,
    /// When bidding opens.
    pub starts_at: DateTime<Utc>,
    /// When bidding ends.
    pub ends_at: DateTime<Utc>,
}

/// Inserts an open item; returns its id, or `None` if an open item already has this slug
/// (so seeding twice adds nothing). Constraint violations (a bad price or end time) are
/// errors.
pub async fn insert_item(db: impl PgExecutor<'_>, item: &NewItem) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "INSERT INTO auction_items (slug, title, description, starting_price_cents,
                min_increment_cents, reserve_price_cents, starts_at, ends_at, soft_close_secs)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (slug) WHERE status = 'open' DO NOTHING
         RETURNING id",
    )
    .bind(&item.slug)
    .bind(&item.terms.title)
    .bind(&item.terms.description)
    .bind(item.terms.starting_price_cents)
    .bind(item.terms.min_increment_cents)
    .bind(item.terms.reserve_price_cents)
    .bind(item.starts_at)
    .bind(item.ends_at)
    .bind(item.terms.soft_close_secs)
    .fetch_optional(db)
    .await
}

/// A bid that [`place_bid`] wrote.
#[derive(Debug, sqlx::FromRow)]
pub struct PlacedBid {
    /// `bids.id`.
    pub bid_id: i64,
    /// The item's end after the bid (later than before if the bid triggered soft close).
    pub ends_at: DateTime<Utc>,
}

/// The bid write, ONE statement: set `bid` as the new high bid and insert it, only if
/// * the auction is open at the moment of the write: `status = 'open' AND starts_at <=
///   clock_timestamp() < ends_at` (not `now()`, the transaction's start: a bidder that
///   stalled inside its transaction past the end is refused; see the module docs);
/// * the amount is high enough: at least the starting price for the first bid, else at
///   least the high bid plus the minimum increment (so an equal bid loses);
/// * with `fencing_token = Some(t)`: `fence_token <= t`, and the row then records `t`
///   (Kleppmann's fencing check: a bidder whose bid lock lapsed, and was granted to a
///   newer bidder who wrote first, is refused).
///   An equal token is refused by the `bids` table instead (`bids_one_per_fencing_token`:
///   one bid per grant), whoever sends it: that, and the lease store's failover guard
///   (a token is never granted twice), is why no holder is compared here (see
///   docs/failover.md).
///
/// With `fencing_token = None` this is the lock-free strategy's conditional UPDATE: the
/// row lock Postgres takes for the UPDATE, and its re-check of the WHERE clause on the
/// latest row version (READ COMMITTED), serialise concurrent bids by themselves.
///
/// Soft close: a bid in the last `soft_close_secs` seconds (by the same clock, at the
/// write) moves `ends_at` later by `soft_close_secs`. Returns the bid, or `None` if any condition failed (nothing
/// written). The callers check the rules first ([`super::rules`]) for a precise message;
/// this statement is the authority. It also queues a `pg_notify` for live pages (event
/// `bid` on topic `auction:<id>`), which Postgres delivers only if the bid commits.
pub async fn place_bid(
    db: impl PgExecutor<'_>,
    bid: &Bid<'_>,
    fencing_token: Option<i64>,
) -> sqlx::Result<Option<PlacedBid>> {
    sqlx::query_as(
        "WITH high AS (
             UPDATE auction_items
                SET high_bid_cents = $4, high_bidder_id = $2, high_bidder_name = $3,
                    bid_count = bid_count + 1,
                    fence_token = coalesce($5, fence_token),
                    ends_at = CASE
                        WHEN soft_close_secs > 0
                         AND clock_timestamp() >= ends_at - make_interval(secs => soft_close_secs)
                        THEN ends_at + make_interval(secs => soft_close_secs)
                        ELSE ends_at END
              WHERE id = $1 AND status = 'open'
                AND starts_at <= clock_timestamp() AND clock_timestamp() < ends_at
                AND ($5::bigint IS NULL OR fence_token <= $5)
                AND $4 >= least(coalesce(high_bid_cents + min_increment_cents, starting_price_cents), $6)
                AND $4 > coalesce(high_bid_cents, -1) AND $4 <= $6
          RETURNING id, ends_at)
         INSERT INTO bids (item_id, bidder_id, bidder_name, amount_cents, fence_token)
         SELECT id, $2, $3, $4, $5 FROM high
         RETURNING id AS bid_id, (SELECT ends_at FROM high),
                   pg_notify($7, json_build_object(
                       'topic', 'auction:' || item_id, 'event', 'bid',
                       'data', json_build_object('item', item_id, 'amount_cents', amount_cents))::text)",
    )
    .bind(bid.item_id)
    .bind(&bid.bidder.id)
    .bind(&bid.bidder.name)
    .bind(bid.amount_cents)
    .bind(fencing_token)
    .bind(crate::money::MAX_AMOUNT_CENTS)
    .bind(NOTIFY_CHANNEL)
    .fetch_optional(db)
    .await
}

/// Ids of open items whose end has passed (the closer's work), earliest first, at most
/// `limit`. "Passed" by `clock_timestamp()`, read once for the scan so that it can bound
/// the index (`auction_items_open_by_end`); [`close_item`] checks again as it writes.
pub async fn due_items(db: &PgPool, limit: i64) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar(
        "SELECT id FROM auction_items
          WHERE status = 'open' AND ends_at <= (SELECT clock_timestamp())
          ORDER BY ends_at, id LIMIT $1",
    )
    .bind(limit)
    .fetch_all(db)
    .await
}

/// The close, ONE statement: mark the item closed and write the result computed from
/// the row as it is at this instant (`sold` to the high bidder if the high bid meets the
/// reserve, else `reserve_not_met`, or `no_bids`), only if it is still open, its end has
/// passed at the moment of the write (`clock_timestamp()`, the bids' clock; a soft-close
/// bid may have moved the end), and no higher fencing token than
/// `fencing_token` was accepted (the closing job's lease is current). Records the token,
/// and queues a `pg_notify` for live pages (event `closed` on topic `auction:<id>`),
/// delivered on commit. Returns the result written, or `None` (nothing written).
pub async fn close_item(
    db: impl PgExecutor<'_>,
    item_id: i64,
    fencing_token: i64,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar(
        "UPDATE auction_items
            SET status = 'closed', closed_at = clock_timestamp(), fence_token = $2,
                result = CASE WHEN high_bid_cents IS NULL THEN 'no_bids'
                              WHEN high_bid_cents >= reserve_price_cents THEN 'sold'
                              ELSE 'reserve_not_met' END,
                winner_id = CASE WHEN high_bid_cents >= reserve_price_cents
                                 THEN high_bidder_id END,
                winner_name = CASE WHEN high_bid_cents >= reserve_price_cents
                                   THEN high_bidder_name END
          WHERE id = $1 AND status = 'open' AND ends_at <= clock_timestamp()
            AND fence_token <= $2
      RETURNING result,
                pg_notify($3, json_build_object(
                    'topic', 'auction:' || id, 'event', 'closed',
                    'data', json_build_object('item', id, 'result', result))::text)",
    )
    .bind(item_id)
    .bind(fencing_token)
    .bind(NOTIFY_CHANNEL)
    .fetch_optional(db)
    .await
}
