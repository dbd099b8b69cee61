//! Every SQL statement of the auction. The two that matter are [`place_bid`], the fenced
//! proxy bid (resolution and all), and [`close_item`], the fenced close. Each is ONE
//! statement, so its checks and its write are atomic.
//!
//! # The clocks: the arrival, then `clock_timestamp()` for the grace
//!
//! A bid is judged open or ended at its ARRIVAL ([`Bid::arrived_at`], the receiving
//! server's clock when the request came in): one received before the end is on time even
//! if its turn at the item's lock came after it (docs/auction.md, "Judged at arrival").
//! What bounds that turn is the Postgres clock at the write: the statement refuses a bid
//! written later than the arrival grace after the end, and the closer closes only after
//! it, by the same clock ([`due_items`], [`close_item`]).
//!
//! That clock is `clock_timestamp()`, the server's time when the expression is
//! evaluated. Not `now()`: that is the start of the *transaction*, so a bid whose
//! transaction began before the grace ran out and then stalled (a GC pause, its bid lock
//! lapsing) would be judged as if it wrote at the start. Not `statement_timestamp()`
//! either: it is the moment the statement *arrived*, and a write that then waits for the
//! item's row lock (another bid's transaction, the closer) keeps that earlier time.
//! Postgres re-checks the WHERE clause of a waiting UPDATE on the new row version once
//! the lock is free (READ COMMITTED); `clock_timestamp()`, being volatile, is read again
//! there, `statement_timestamp()` is not. (Measured on Postgres 15: an UPDATE sent
//! before the end and blocked past it by another transaction's row lock was accepted
//! 1.07 s after the end with `statement_timestamp()`, and refused with
//! `clock_timestamp()`.) A volatile value cannot bound an index scan, so the closer's
//! scan reads it once, as `(SELECT clock_timestamp())`.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use sqlx::{PgExecutor, PgPool};

use super::Bid;
use crate::live::NOTIFY_CHANNEL;

/// The columns of [`Item`], with the Postgres clock as `now`: `clock_timestamp()`, the
/// moment of the read, even inside a transaction (the bid path reads the item for the rules
/// inside its transaction; see the module docs).
const ITEM_COLUMNS: &str = "id, title, description, starting_price_cents,
    reserve_price_cents, starts_at, ends_at, hard_stop_at, soft_close_secs, status,
    high_bid_cents, high_bidder_id, high_bidder_name, leader_max_cents, runner_up_max_cents,
    bid_count, fence_token, result, winner_id, winner_name, closed_at,
    clock_timestamp() AS now";

/// What the seller sets for an item: what it is and the money terms. Money in cents.
/// Shared by the seed file (`data/auctions.json`), new items and stored items.
#[derive(Clone, Debug, Deserialize, sqlx::FromRow)]
pub struct ItemTerms {
    /// The item's title.
    pub title: String,
    /// The item's description.
    pub description: String,
    /// The least maximum of the first bid, and the price while one bidder has bid. The
    /// increments come from the published table ([`super::increments::INCREMENT_TABLE`]).
    pub starting_price_cents: i64,
    /// The least high bid that sells the item; 0 = no reserve.
    pub reserve_price_cents: i64,
    /// Soft-close window, in seconds: a bid arriving at `t` sets the end to the later of
    /// the end and `t` plus this, never past the hard stop; 0 = soft close off.
    pub soft_close_secs: i32,
}

/// An auction item as stored (migrations/0004, 0016), read at `now`. Money in cents.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Item {
    /// Its id.
    pub id: i64,
    #[sqlx(flatten)]
    /// The item's bidding terms (start price, increment).
    pub terms: ItemTerms,
    /// When bidding opens.
    pub starts_at: DateTime<Utc>,
    /// When bidding ends (moved later by soft close, never past `hard_stop_at`).
    pub ends_at: DateTime<Utc>,
    /// The hard stop: the latest the soft close may move the end to.
    pub hard_stop_at: DateTime<Utc>,
    /// `open` or `closed`.
    pub status: String,
    /// The price, the leader's standing bid: `None` until the first bid.
    pub high_bid_cents: Option<i64>,
    /// The leader's public buyer id, if any bid.
    pub high_bidder_id: Option<String>,
    /// The leader's display name, if any bid.
    pub high_bidder_name: Option<String>,
    /// The leader's hidden maximum (shown to the leader only).
    pub leader_max_cents: Option<i64>,
    /// The runner-up's maximum (hidden too; the price is at most this plus its band's
    /// increment).
    pub runner_up_max_cents: Option<i64>,
    /// How many bids were accepted: each bid's place in the item's own order, the order
    /// that breaks a tie between equal maxima.
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

/// A row of the bid history: a bid as its bidder stands after it, or an automatic bid
/// the site placed for the leader (migrations/0016).
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct BidRow {
    /// The bidder's public buyer id.
    pub bidder_id: String,
    /// The bidder's display name.
    pub bidder_name: String,
    /// The visible amount, in cents: the price if the bidder led after it, else the
    /// bidder's (beaten) maximum; the new price on an automatic row.
    pub amount_cents: i64,
    /// The maximum this bid set, shown to its own bidder only; `None` on automatic rows.
    pub max_cents: Option<i64>,
    /// Whether the site placed it for the leader (proxy bidding).
    pub automatic: bool,
    /// The bid lock's fencing token; `None` under the conditional strategy.
    pub fence_token: Option<i64>,
    /// When it was written.
    pub created_at: DateTime<Utc>,
}

/// The `limit` latest rows of an item's bid history, latest first.
pub async fn bids(db: &PgPool, item_id: i64, limit: i64) -> sqlx::Result<Vec<BidRow>> {
    sqlx::query_as(
        "SELECT bidder_id, bidder_name, amount_cents, max_cents, automatic, fence_token,
                created_at
           FROM bids WHERE item_id = $1 ORDER BY id DESC LIMIT $2",
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
    /// The hard stop: soft close never moves the end past it (at least `ends_at`).
    pub hard_stop_at: DateTime<Utc>,
}

/// Inserts an open item; returns its id, or `None` if an open item already has this slug
/// (so seeding twice adds nothing). Constraint violations (a bad price or end time) are
/// errors.
pub async fn insert_item(db: impl PgExecutor<'_>, item: &NewItem) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "INSERT INTO auction_items (slug, title, description, starting_price_cents,
                reserve_price_cents, starts_at, ends_at, soft_close_secs, hard_stop_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (slug) WHERE status = 'open' DO NOTHING
         RETURNING id",
    )
    .bind(&item.slug)
    .bind(&item.terms.title)
    .bind(&item.terms.description)
    .bind(item.terms.starting_price_cents)
    .bind(item.terms.reserve_price_cents)
    .bind(item.starts_at)
    .bind(item.ends_at)
    .bind(item.terms.soft_close_secs)
    .bind(item.hard_stop_at)
    .fetch_optional(db)
    .await
}

/// A bid that [`place_bid`] wrote, and the item after it.
#[derive(Debug, sqlx::FromRow)]
pub struct PlacedBid {
    /// `bids.id` of the bidder's own row.
    pub bid_id: i64,
    /// The item's end after the bid (later than before if the bid triggered soft close).
    pub ends_at: DateTime<Utc>,
    /// The price after the bid, in cents.
    pub price_cents: i64,
    /// The leader after the bid (public buyer id).
    pub leader_id: String,
}

/// The bid write, ONE statement: resolve `bid`'s maximum against the item's leader and
/// runner-up (`auction_resolve`, migrations/0016: the top two maxima, equal maxima in the
/// item's own order `bid_count`; the price the lower of the top maximum and the
/// runner-up's plus its band's increment, kept when the leader stays the leader (no
/// self-outbid), raised to a reserve the top maximum meets),
/// write the new leader, price and end, and the history rows, only if
/// * the bid arrived while the auction was open, `starts_at <= arrived_at < ends_at` (the
///   receiving server's clock, [`Bid::arrived_at`]: a bid that came in before the end is
///   on time although its turn came after it), and its turn came within `grace` after the
///   end by the Postgres clock at the write (`clock_timestamp()`; see the module docs):
///   the closer waits as long before it closes ([`due_items`]);
/// * the maximum is allowed: from a bidder who does not lead, at least the price plus
///   its band's increment (the starting price for the first bid); from the leader, not
///   below the price; never above [`crate::money::MAX_AMOUNT_CENTS`], and nothing once
///   the price is at it;
/// * with `fencing_token = Some(t)`: `fence_token <= t`, and the row then records `t`
///   (Kleppmann's fencing check: a bidder whose bid lock lapsed, and was granted to a
///   newer bidder who wrote first, is refused).
///   An equal token is refused by the `bids` table instead (`bids_one_per_fencing_token`:
///   one bid per grant), whoever sends it: that, and the lease store's failover guard
///   (a token is never granted twice), is why no holder is compared here (see
///   docs/failover.md).
///
/// The resolution reads only the item row, in the SET list of the UPDATE: if the row was
/// locked by another bid, Postgres evaluates the WHERE clause and the SET list again on
/// the newest version (READ COMMITTED), so two concurrent maxima are ranked one after the
/// other. With `fencing_token = None` (the lock-free strategy) that row lock alone
/// serialises the bids.
///
/// Soft close: the end becomes the later of the end and the arrival plus
/// `soft_close_secs`, never past `hard_stop_at`. History: one row for the bidder (the
/// price if they lead after it, else their maximum), and one automatic row for the
/// leader at the new price when someone else leads. Returns the bid, or `None` if any
/// condition failed (nothing written). The callers check the rules first
/// ([`super::rules`]) for a precise message; this statement is the authority. It also
/// queues a `pg_notify` for live pages (event `bid` on topic `auction:<id>`), which
/// Postgres delivers only if the bid commits.
pub async fn place_bid(
    db: impl PgExecutor<'_>,
    bid: &Bid<'_>,
    fencing_token: Option<i64>,
    grace: std::time::Duration,
) -> sqlx::Result<Option<PlacedBid>> {
    let (band_from, band_increment) = super::increments::increment_arrays();
    sqlx::query_as(
        "WITH placed AS (
             UPDATE auction_items AS item
                SET (high_bidder_id, high_bidder_name, leader_max_cents, leader_seq,
                     runner_up_id, runner_up_name, runner_up_max_cents, runner_up_seq,
                     high_bid_cents)
                  = (SELECT * FROM auction_resolve(
                        item.high_bidder_id, item.high_bidder_name, item.leader_max_cents,
                        item.leader_seq, item.runner_up_id, item.runner_up_name,
                        item.runner_up_max_cents, item.runner_up_seq,
                        $2, $3, $4, item.bid_count + 1, item.high_bid_cents,
                        item.starting_price_cents, item.reserve_price_cents, $9, $10)),
                    bid_count = bid_count + 1,
                    fence_token = coalesce($5, fence_token),
                    ends_at = CASE WHEN soft_close_secs > 0
                        THEN least(hard_stop_at,
                                   greatest(ends_at, $7 + make_interval(secs => soft_close_secs)))
                        ELSE ends_at END
              WHERE id = $1 AND status = 'open'
                AND starts_at <= $7 AND $7 < ends_at
                AND clock_timestamp() < ends_at + $8 * interval '1 millisecond'
                AND ($5::bigint IS NULL OR fence_token <= $5)
                AND $4 <= $6 AND high_bid_cents IS DISTINCT FROM $6
                AND CASE WHEN high_bidder_id = $2 THEN $4 >= high_bid_cents
                         ELSE $4 >= least($6, coalesce(
                             high_bid_cents + auction_increment(high_bid_cents, $9, $10),
                             starting_price_cents)) END
          RETURNING id, ends_at, high_bid_cents, high_bidder_id, high_bidder_name),
         own AS (
             INSERT INTO bids (item_id, bidder_id, bidder_name, amount_cents, max_cents,
                               fence_token, arrived_at, price_cents)
             SELECT id, $2, $3, CASE WHEN high_bidder_id = $2 THEN high_bid_cents ELSE $4 END,
                    $4, $5, $7, high_bid_cents
               FROM placed
          RETURNING id, item_id),
         automatic AS (
             INSERT INTO bids (item_id, bidder_id, bidder_name, amount_cents, fence_token,
                               automatic)
             SELECT id, high_bidder_id, high_bidder_name, high_bid_cents, $5, true
               FROM placed WHERE high_bidder_id <> $2)
         SELECT own.id AS bid_id, placed.ends_at, placed.high_bid_cents AS price_cents,
                placed.high_bidder_id AS leader_id,
                pg_notify($11, json_build_object(
                    'topic', 'auction:' || placed.id, 'event', 'bid',
                    'data', json_build_object('item', placed.id,
                                              'price_cents', placed.high_bid_cents))::text)
           FROM placed, own",
    )
    .bind(bid.item_id)
    .bind(&bid.bidder.id)
    .bind(&bid.bidder.name)
    .bind(bid.max_cents)
    .bind(fencing_token)
    .bind(crate::money::MAX_AMOUNT_CENTS)
    .bind(bid.arrived_at)
    .bind(millis(grace))
    .bind(band_from)
    .bind(band_increment)
    .bind(NOTIFY_CHANNEL)
    .fetch_optional(db)
    .await
}

/// `duration` in whole milliseconds, as Postgres takes it (`$n * interval '1 millisecond'`).
fn millis(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Ids of open items whose end has passed `grace` ago (the closer's work), earliest
/// first, at most `limit`. The grace is the bids' ([`place_bid`]): a bid that arrived
/// before the end may take its turn until then. "Passed" by `clock_timestamp()`, read
/// once for the scan so that it can bound the index (`auction_items_open_by_end`);
/// [`close_item`] checks again as it writes.
pub async fn due_items(
    db: &PgPool,
    limit: i64,
    grace: std::time::Duration,
) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar(
        "SELECT id FROM auction_items
          WHERE status = 'open'
            AND ends_at <= (SELECT clock_timestamp() - $2 * interval '1 millisecond')
          ORDER BY ends_at, id LIMIT $1",
    )
    .bind(limit)
    .bind(millis(grace))
    .fetch_all(db)
    .await
}

/// The close, ONE statement: mark the item closed and write the result computed from
/// the row as it is at this instant (`sold` to the high bidder if the high bid meets the
/// reserve, else `reserve_not_met`, or `no_bids`), only if it is still open, its end has
/// passed `grace` ago at the moment of the write (`clock_timestamp()`, the bids' clock;
/// a soft-close bid may have moved the end; [`place_bid`] takes no bid after that), and
/// no higher fencing token than
/// `fencing_token` was accepted (the closing job's lease is current). Records the token,
/// and queues a `pg_notify` for live pages (event `closed` on topic `auction:<id>`),
/// delivered on commit. Returns the result written, or `None` (nothing written).
pub async fn close_item(
    db: impl PgExecutor<'_>,
    item_id: i64,
    fencing_token: i64,
    grace: std::time::Duration,
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
          WHERE id = $1 AND status = 'open'
            AND ends_at + $4 * interval '1 millisecond' <= clock_timestamp()
            AND fence_token <= $2
      RETURNING result,
                pg_notify($3, json_build_object(
                    'topic', 'auction:' || id, 'event', 'closed',
                    'data', json_build_object('item', id, 'result', result))::text)",
    )
    .bind(item_id)
    .bind(fencing_token)
    .bind(NOTIFY_CHANNEL)
    .bind(millis(grace))
    .fetch_optional(db)
    .await
}
