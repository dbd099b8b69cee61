//! The race lab's writes. Compare with [`seatlock::seats::queries::sell`].

use sqlx::PgPool;

use seatlock::seats::SeatRef;

/// The unsafe write: mark the seat sold whatever its state, and log the sale. Used by
/// `race-lab-naive` and `race-lab-unfenced-lease` after their own (racy) checks.
pub(super) async fn sell_unconditionally(
    db: &PgPool,
    seat: SeatRef,
    buyer_id: &str,
    fencing_token: Option<i64>,
    strategy: &str,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "WITH s AS (
             UPDATE event_seats SET sold = true WHERE event_id = $1 AND seat_id = $2
          RETURNING event_id, seat_id)
         INSERT INTO race_lab_sales (event_id, seat_id, buyer_id, fence_token, strategy)
         SELECT event_id, seat_id, $3, $4, $5 FROM s RETURNING id",
    )
    .bind(seat.event_id)
    .bind(seat.seat_id)
    .bind(buyer_id)
    .bind(fencing_token)
    .bind(strategy)
    .fetch_one(db)
    .await
}

/// The article's lock-free answer: `UPDATE … WHERE sold = false`, one statement, and the
/// sale logged in the same statement. `None` if the seat was already sold.
pub(super) async fn sell_if_unsold(
    db: &PgPool,
    seat: SeatRef,
    buyer_id: &str,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "WITH s AS (
             UPDATE event_seats SET sold = true
              WHERE event_id = $1 AND seat_id = $2 AND sold = false
          RETURNING event_id, seat_id)
         INSERT INTO race_lab_sales (event_id, seat_id, buyer_id, strategy)
         SELECT event_id, seat_id, $3, 'conditional' FROM s RETURNING id",
    )
    .bind(seat.event_id)
    .bind(seat.seat_id)
    .bind(buyer_id)
    .fetch_optional(db)
    .await
}
