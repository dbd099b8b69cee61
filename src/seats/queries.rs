//! Every SQL statement of the seat picker. The one that matters is [`sell`]: the fenced,
//! conditional write that makes a purchase.

use sqlx::{PgConnection, PgPool};

use super::SeatRef;

/// A seat's sale state for one event.
#[derive(Debug, sqlx::FromRow)]
pub struct SeatStatus {
    /// Whether the seat is sold.
    pub sold: bool,
    /// Highest fencing token the row has accepted (0 = never written).
    pub fence_token: i64,
}

/// The seat's state, or `None` if the event has no such seat.
pub async fn seat_status(db: &PgPool, seat: SeatRef) -> sqlx::Result<Option<SeatStatus>> {
    sqlx::query_as("SELECT sold, fence_token FROM event_seats WHERE event_id = $1 AND seat_id = $2")
        .bind(seat.event_id)
        .bind(seat.seat_id)
        .fetch_optional(db)
        .await
}

/// The fenced purchase, ONE statement: mark the seat sold and record `fencing_token` as
/// the row's highest accepted token, only if the seat is unsold AND no higher token was
/// accepted before (Kleppmann's fencing check); in the same statement insert the order.
/// Returns the new order id, or `None` if either condition failed (nothing written).
/// The same statement queues a `pg_notify` for live pages, delivered only on commit.
///
/// Runs inside the caller's transaction so that the caller can release the hold
/// (compare-and-delete in Redis) before committing: if the hold has lapsed the caller
/// rolls back.
pub async fn sell(
    tx: &mut PgConnection,
    seat: SeatRef,
    fencing_token: i64,
    buyer_id: &str,
    buyer_name: &str,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "WITH sold AS (
             UPDATE event_seats SET sold = true, fence_token = $3
              WHERE event_id = $1 AND seat_id = $2 AND NOT sold AND fence_token <= $3
          RETURNING event_id, seat_id, price_cents),
         ordered AS (
             INSERT INTO orders (event_id, seat_id, buyer_id, buyer_name, price_cents, fence_token)
             SELECT event_id, seat_id, $4, $5, price_cents, $3 FROM sold
          RETURNING id, event_id, seat_id)
         SELECT id, pg_notify('seatlock_live', json_build_object(
                    'topic', 'event:' || event_id, 'event', 'seat',
                    'data', json_build_object('seat', seat_id, 'state', 'sold'))::text)
           FROM ordered",
    )
    .bind(seat.event_id)
    .bind(seat.seat_id)
    .bind(fencing_token)
    .bind(buyer_id)
    .bind(buyer_name)
    .fetch_optional(tx)
    .await
}

/// The order id if `buyer_id` bought this seat.
pub async fn order_of(db: &PgPool, seat: SeatRef, buyer_id: &str) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "SELECT id FROM orders WHERE event_id = $1 AND seat_id = $2 AND buyer_id = $3",
    )
    .bind(seat.event_id)
    .bind(seat.seat_id)
    .bind(buyer_id)
    .fetch_optional(db)
    .await
}

/// One seat of the map, in drawing order.
#[derive(Debug, sqlx::FromRow)]
pub struct MapSeat {
    pub seat_id: i64,
    pub section_code: String,
    pub section_name: String,
    pub row_label: String,
    pub number: i32,
    pub aisle_before: bool,
    pub zone_code: String,
    pub price_cents: i64,
    pub sold: bool,
    /// Sold to the buyer looking at the map.
    pub mine: bool,
}

/// Every seat of the event, ordered by section, row and number: one query.
pub async fn map_seats(db: &PgPool, event_id: i64, buyer_id: &str) -> sqlx::Result<Vec<MapSeat>> {
    sqlx::query_as(
        "SELECT s.id AS seat_id, sec.code AS section_code, sec.name AS section_name,
                s.row_label, s.number, s.aisle_before, z.code AS zone_code,
                es.price_cents, es.sold, coalesce(o.buyer_id = $2, false) AS mine
           FROM event_seats es
           JOIN seats s ON s.id = es.seat_id
           JOIN sections sec ON sec.id = s.section_id
           JOIN price_zones z ON z.id = s.zone_id
           LEFT JOIN orders o ON o.event_id = es.event_id AND o.seat_id = es.seat_id
          WHERE es.event_id = $1
          ORDER BY sec.position, s.row_position, s.number",
    )
    .bind(event_id)
    .bind(buyer_id)
    .fetch_all(db)
    .await
}

/// A price zone of the event's venue, for the legend.
#[derive(Debug, sqlx::FromRow)]
pub struct Zone {
    pub code: String,
    pub name: String,
    pub price_cents: i64,
    pub colour: String,
}

/// The zones of the event's venue, cheapest last.
pub async fn zones(db: &PgPool, event_id: i64) -> sqlx::Result<Vec<Zone>> {
    sqlx::query_as(
        "SELECT z.code, z.name, z.price_cents, z.colour
           FROM price_zones z JOIN events e ON e.venue_id = z.venue_id
          WHERE e.id = $1 ORDER BY z.price_cents DESC",
    )
    .bind(event_id)
    .fetch_all(db)
    .await
}

/// The ids of the event's sold seats (for live snapshots).
pub async fn sold_seats(db: &PgPool, event_id: i64) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar("SELECT seat_id FROM event_seats WHERE event_id = $1 AND sold")
        .bind(event_id)
        .fetch_all(db)
        .await
}
