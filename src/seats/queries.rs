//! Every SQL statement of the seat picker.
//! The one that matters is [`sell`]: the fenced, conditional write that makes a purchase.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

use super::SeatRef;
use crate::live::NOTIFY_CHANNEL;
use crate::profile::BuyerProfile;

/// A seat's sale state for one event, read when a purchase is refused to say why.
#[derive(Debug, sqlx::FromRow)]
pub struct SeatStatus {
    /// Whether the seat is sold.
    pub sold: bool,
    /// Highest fencing token the row has accepted. 0 means never written.
    pub fence_token: i64,
    /// Whether the event has started. Sales close when it starts.
    pub started: bool,
    /// When the event's sale opens, if it has not yet (Postgres's clock): sales open then.
    pub opens_at: Option<DateTime<Utc>>,
}

/// The seat's state, or `None` if the event has no such seat.
pub async fn seat_status(db: &PgPool, seat: SeatRef) -> sqlx::Result<Option<SeatStatus>> {
    sqlx::query_as(
        "SELECT es.sold, es.fence_token, e.starts_at <= clock_timestamp() AS started,
                CASE WHEN e.on_sale_at > clock_timestamp() THEN e.on_sale_at END AS opens_at
           FROM event_seats es JOIN events e ON e.id = es.event_id
          WHERE es.event_id = $1 AND es.seat_id = $2",
    )
    .bind(seat.event_id)
    .bind(seat.seat_id)
    .fetch_optional(db)
    .await
}

/// An event as a hold sees it ([`event_seats`]).
#[derive(Debug, sqlx::FromRow)]
pub struct EventRow {
    /// `events.name`.
    pub name: String,
    /// `events.starts_at`: sales close then.
    pub starts_at: DateTime<Utc>,
    /// `events.on_sale_at` (migration 0010): nobody is admitted to its waiting room before.
    pub on_sale_at: Option<DateTime<Utc>>,
    /// `events.waiting_room_shoppers`: `None` leaves it to `--waiting-room-shoppers`.
    pub waiting_room_shoppers: Option<i32>,
    /// `events.queue_seed` (migration 0014): orders the waiting room's pre-queue.
    pub queue_seed: i64,
    /// `venues.time_zone` (migration 0012): the venue's IANA zone.
    pub time_zone: String,
    /// The ids of its seats.
    pub seat_ids: Vec<i64>,
    /// The codes of its venue's sections.
    pub section_codes: Vec<String>,
}

/// Event `event_id`'s start, on-sale time, waiting room, seat ids and section codes.
/// `None` if there is no such event.
/// It is what a hold checks, read once per process ([`super::catalog::Catalog`]).
pub async fn event_seats(db: &PgPool, event_id: i64) -> sqlx::Result<Option<EventRow>> {
    sqlx::query_as(
        "SELECT e.name, e.starts_at, e.on_sale_at, e.waiting_room_shoppers, e.queue_seed, v.time_zone,
                array(SELECT seat_id FROM event_seats WHERE event_id = e.id) AS seat_ids,
                array(SELECT code FROM sections WHERE venue_id = e.venue_id) AS section_codes
           FROM events e JOIN venues v ON v.id = e.venue_id WHERE e.id = $1",
    )
    .bind(event_id)
    .fetch_optional(db)
    .await
}

/// What [`sell`] did, for the caller's transaction to act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sale {
    /// The seat is sold, the order inserted and its payment captured: commit.
    Sold {
        /// The new order's id.
        order_id: i64,
    },
    /// The fenced write refused: sold, a higher token accepted, or the event started.
    /// Nothing was written.
    Refused,
    /// The write was accepted, but the capture found no authorized payment under the key.
    /// It was voided. The caller MUST roll back, so no order exists without its captured
    /// payment (migration 0009).
    Unpaid,
    /// The write was accepted, but the payment under the key was authorized for another
    /// amount than the order's price: the seat's price changed after the authorization.
    /// Nothing was captured. The caller MUST roll back; the next attempt authorizes the
    /// new price ([`authorize_payment`]).
    Repriced,
}

/// The fenced purchase, in ONE statement.
///
/// It marks the seat sold and records `fencing_token` as the row's highest accepted
/// token. It does so only if three things hold at the moment of the write:
/// * the seat is unsold;
/// * no higher token was accepted before: Kleppmann's fencing check;
/// * the event is on sale (`on_sale_at` passed) and has not started.
///
/// The same statement inserts the order and captures the payment authorized under
/// `payment_key`.
///
/// The capture takes only a payment authorized for the order's price: an authorization
/// binds its amount, and a price changed since then captures nothing.
///
/// Returns one of four:
/// * [`Sale::Sold`], with the new order id.
/// * [`Sale::Refused`] if a condition failed. Nothing was written.
/// * [`Sale::Unpaid`] if the capture found no authorized payment. The caller rolls back.
/// * [`Sale::Repriced`] if the payment was authorized for another amount. The caller
///   rolls back.
///
/// The capture takes the payment's row lock. So a void either landed before it, and the
/// sale is rolled back, or it waits for the commit and then finds the payment captured.
///
/// The same statement queues a `pg_notify` for live pages, delivered only on commit.
/// It also bounds how long its transaction may then sit idle, in whole milliseconds
/// (`idle_in_transaction_session_timeout`). A holder that stalls before committing is
/// cut off. Its transaction is rolled back, and its row lock freed.
///
/// It runs inside the caller's transaction. So the caller can check in Redis that the
/// hold is still its own before committing (see [`super::purchase::confirm`]).
///
/// An equal token is accepted (`<=`), from any holder, on purpose. With the lease
/// store's failover guard, a token names one grant. So an equal token is the same
/// holder's: a group hold sells four seats under one token. And a seat is written once
/// (`NOT sold`). So even a token repeated by a failover without the guard, in the lab
/// only, cannot sell it twice. See docs/failover.md.
pub async fn sell(
    tx: &mut PgConnection,
    seat: SeatRef,
    fencing_token: i64,
    buyer: &BuyerProfile,
    payment_key: &str,
    idle_bound: Duration,
) -> sqlx::Result<Sale> {
    let row: Option<(i64, bool, bool)> = sqlx::query_as(
        "-- The fenced, conditional write. Only an unsold seat, a token not lower than
         -- the row's, and an event on sale and not started yet.
         WITH sold AS (
             UPDATE event_seats SET sold = true, fence_token = $3
              WHERE event_id = $1 AND seat_id = $2 AND NOT sold AND fence_token <= $3
                AND (SELECT starts_at > clock_timestamp() AND coalesce(on_sale_at, '-infinity') <= clock_timestamp() FROM events WHERE id = $1)
          RETURNING event_id, seat_id, price_cents),
         -- The order, only if the seat was sold just now.
         ordered AS (
             INSERT INTO orders (event_id, seat_id, buyer_id, buyer_name, price_cents, fence_token)
             SELECT event_id, seat_id, $4, $5, price_cents, $3 FROM sold
          RETURNING id, event_id, seat_id, price_cents),
         -- The capture of the hold's payment, of exactly the order's price. A voided
         -- payment, or one authorized for another amount, captures nothing.
         captured AS (
             UPDATE payments SET status = 'captured', order_id = ordered.id
               FROM ordered
              WHERE payments.idempotency_key = $6 AND payments.status = 'authorized'
                AND payments.amount_cents = ordered.price_cents
          RETURNING payments.order_id)
         -- The order, whether it was paid, and whether the payment is of another amount.
         -- Also a note for live pages, sent on commit, and the bound on how long this
         -- transaction may sit idle.
         SELECT id, EXISTS (SELECT 1 FROM captured) AS captured,
                EXISTS (SELECT 1 FROM payments p
                         WHERE p.idempotency_key = $6 AND p.amount_cents <> ordered.price_cents)
                    AS repriced,
                pg_notify($8, json_build_object(
                    'topic', 'event:' || event_id, 'event', 'seat',
                    'data', json_build_object('seat', seat_id, 'state', 'sold'))::text),
                set_config('idle_in_transaction_session_timeout', $7, true)
           FROM ordered",
    )
    .bind(seat.event_id)
    .bind(seat.seat_id)
    .bind(fencing_token)
    .bind(&buyer.id)
    .bind(&buyer.name)
    .bind(payment_key)
    .bind(idle_bound.as_millis().max(1).to_string())
    .bind(NOTIFY_CHANNEL)
    .fetch_optional(tx)
    .await?;
    Ok(match row {
        Some((order_id, true, _)) => Sale::Sold { order_id },
        Some((_, false, true)) => Sale::Repriced,
        Some((_, false, false)) => Sale::Unpaid,
        None => Sale::Refused,
    })
}

/// Joins the attempt to the payment of one hold, `payment_key`, for `seat` at its price
/// (migration 0009).
/// The first attempt authorizes it. Each later one counts itself in: `open_attempts + 1`.
/// A payment voided before is authorized again. The authorization records its amount,
/// the seat's price now: if the price changed since the last authorization, the old one
/// is voided and the new price authorized in its place (the simulated provider's void and
/// new authorization, in one write), and only a sale at that price captures it ([`sell`]).
/// A captured payment is left as it is, so a retried confirm never pays twice.
/// Every attempt that joins either captures the payment with its sale, or leaves it
/// ([`leave_payment`]).
pub async fn authorize_payment(
    db: &PgPool,
    seat: SeatRef,
    payment_key: &str,
    buyer_id: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO payments (idempotency_key, event_id, seat_id, buyer_id, amount_cents, open_attempts)
         SELECT $3, event_id, seat_id, $4, price_cents, 1 FROM event_seats
          WHERE event_id = $1 AND seat_id = $2
         ON CONFLICT (idempotency_key) DO UPDATE
            SET status = 'authorized', open_attempts = payments.open_attempts + 1,
                amount_cents = EXCLUDED.amount_cents, authorized_at = now()
          WHERE payments.status <> 'captured'",
    )
    .bind(seat.event_id)
    .bind(seat.seat_id)
    .bind(payment_key)
    .bind(buyer_id)
    .execute(db)
    .await
    .map(drop)
}

/// An attempt that joined `payment_key` ([`authorize_payment`]) and did not buy leaves
/// it: `open_attempts - 1`.
/// The LAST attempt to leave voids it.
/// So one tab's failed attempt never voids the authorization another tab is about to
/// capture.
/// Returns whether this call voided it. A captured payment is never touched.
pub async fn leave_payment(db: &PgPool, payment_key: &str) -> sqlx::Result<bool> {
    let status: Option<String> = sqlx::query_scalar(
        "UPDATE payments
            SET open_attempts = open_attempts - 1,
                status = CASE WHEN open_attempts = 1 THEN 'voided' ELSE 'authorized' END
          WHERE idempotency_key = $1 AND status = 'authorized' AND open_attempts > 0
      RETURNING status",
    )
    .bind(payment_key)
    .fetch_optional(db)
    .await?;
    Ok(status.as_deref() == Some("voided"))
}

/// Voids every authorization nobody joined for longer than `older_than`. Returns how many.
/// It does so whatever the count of open attempts. Their servers were killed, their
/// deadlines passed, or their leave failed (see migrations 0008 and 0009).
/// The count is kept. An attempt counted before the sweep may leave after a later
/// attempt joined again. It then takes only its own place. So it cannot void the later
/// attempt's payment.
pub async fn void_stale_authorizations(db: &PgPool, older_than: Duration) -> sqlx::Result<u64> {
    sqlx::query(
        "UPDATE payments SET status = 'voided'
          WHERE status = 'authorized' AND authorized_at < now() - make_interval(secs => $1)",
    )
    .bind(older_than.as_secs_f64())
    .execute(db)
    .await
    .map(|done| done.rows_affected())
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

/// The seats `seat_ids` of the event named for a person, in seat order, and joined.
/// For example: "Orchestra row C seat 14, Orchestra row C seat 15".
pub async fn seat_names(db: &PgPool, event_id: i64, seat_ids: &[i64]) -> sqlx::Result<String> {
    sqlx::query_scalar(
        "SELECT coalesce(string_agg(sec.name || ' row ' || s.row_label || ' seat ' || s.number,
                                    ', ' ORDER BY sec.position, s.row_position, s.number), '')
           FROM event_seats es
           JOIN seats s ON s.id = es.seat_id
           JOIN sections sec ON sec.id = s.section_id
          WHERE es.event_id = $1 AND es.seat_id = ANY($2)",
    )
    .bind(event_id)
    .bind(seat_ids)
    .fetch_one(db)
    .await
}
