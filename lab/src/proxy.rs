//! The race lab's row "proxy resolution without the fence" (docs/race-lab.md): a proxy
//! bid resolved the way a first attempt would, against a READ of the item, then written
//! with a plain `UPDATE` that checks nothing (no bid lock, no fencing token, no
//! re-evaluation on the newest row). The resolution itself is the product's
//! (`auction_resolve`, migrations/0016); only its place is wrong: two maxima whose reads
//! overlap are each resolved against the same leader and runner-up, each is told it
//! leads, and the item keeps whichever was written last. The product resolves in the one
//! fenced `UPDATE` ([`seatlock::auction::queries::place_bid`]), whose SET list Postgres
//! evaluates again on the newest row: there the second maximum is ranked against the first.

use std::future::Future;

use seatlock::auction::Bid;
use seatlock::auction::increments::increment_arrays;
use sqlx::PgPool;

/// What a bidder was told: who leads after their bid, at which price.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct Told {
    /// The leader's public buyer id.
    pub leader_id: String,
    /// The price, in cents.
    pub price_cents: i64,
}

/// `bid` resolved against a read of its item, `between` awaited after the read (a GC
/// pause, or a test's barrier so that two reads come before either write), then written
/// whatever happened meanwhile. Returns what the bidder is told. Errors: sqlx's. Checks
/// no rule (the lab shows the race, not the refusals).
pub async fn bid_unfenced(
    db: &PgPool,
    bid: &Bid<'_>,
    between: impl Future<Output = ()>,
) -> sqlx::Result<Told> {
    let (band_from, band_increment) = increment_arrays();
    // The read: the product's ranking, against the item as this bidder saw it.
    let resolved: Resolved = sqlx::query_as(
        "SELECT r.* FROM auction_items AS item, auction_resolve(
                item.high_bidder_id, item.high_bidder_name, item.leader_max_cents,
                item.leader_seq, item.runner_up_id, item.runner_up_name,
                item.runner_up_max_cents, item.runner_up_seq,
                $2, $3, $4, item.bid_count + 1, item.high_bid_cents,
                item.starting_price_cents, item.reserve_price_cents, $5, $6) AS r
          WHERE item.id = $1",
    )
    .bind(bid.item_id)
    .bind(&bid.bidder.id)
    .bind(&bid.bidder.name)
    .bind(bid.max_cents)
    .bind(band_from)
    .bind(band_increment)
    .fetch_one(db)
    .await?;
    between.await;
    // The write: the result, over whatever the row holds now.
    sqlx::query(
        "UPDATE auction_items
            SET high_bidder_id = $2, high_bidder_name = $3, leader_max_cents = $4,
                leader_seq = $5, runner_up_id = $6, runner_up_name = $7,
                runner_up_max_cents = $8, runner_up_seq = $9, high_bid_cents = $10,
                bid_count = bid_count + 1
          WHERE id = $1",
    )
    .bind(bid.item_id)
    .bind(&resolved.new_leader_id)
    .bind(&resolved.new_leader_name)
    .bind(resolved.new_leader_max)
    .bind(resolved.new_leader_seq)
    .bind(&resolved.new_runner_up_id)
    .bind(&resolved.new_runner_up_name)
    .bind(resolved.new_runner_up_max)
    .bind(resolved.new_runner_up_seq)
    .bind(resolved.new_price)
    .execute(db)
    .await?;
    Ok(Told {
        leader_id: resolved.new_leader_id,
        price_cents: resolved.new_price,
    })
}

/// `auction_resolve`'s result.
#[derive(sqlx::FromRow)]
struct Resolved {
    new_leader_id: String,
    new_leader_name: String,
    new_leader_max: i64,
    new_leader_seq: i64,
    new_runner_up_id: Option<String>,
    new_runner_up_name: Option<String>,
    new_runner_up_max: Option<i64>,
    new_runner_up_seq: Option<i64>,
    new_price: i64,
}
