//! The invariant checker: reads what the resource (Postgres) accepted and checks the
//! article's invariant, "writes accepted by the resource come from at most one holder at
//! a time, in token order". For a seat that means: at most one accepted sale, and where
//! sales carry fencing tokens, tokens never go down in the order the writes landed.
//!
//! And the money that goes with a sale, in both directions (migration 0009): every order
//! has exactly one captured payment, of its seat and price, and every captured payment
//! has its order, of its seat and amount.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

/// One write the seat's row accepted: an order (product path) or a race-lab sale.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct AcceptedWrite {
    /// The seat the write sold.
    pub seat_id: i64,
    /// The buyer the write sold it to.
    pub buyer_id: String,
    /// The fencing token the write carried; `None` for a lab sale without one.
    pub fence_token: Option<i64>,
    /// When the write committed.
    pub accepted_at: DateTime<Utc>,
}

/// A broken promise, with the writes involved.
#[derive(Debug, Clone, Serialize)]
pub struct Violation {
    /// `double_sale`, `token_order`, `unpaid_order` (an order without exactly one
    /// captured payment of its seat and price) or `capture_without_order` (a captured
    /// payment whose order is missing, is another seat's, or is of another price than the
    /// amount captured).
    pub kind: &'static str,
    /// The seat whose writes broke it.
    pub seat_id: i64,
    /// The accepted writes of that seat, in the order they landed.
    pub writes: Vec<AcceptedWrite>,
}

/// What the checker found for one event.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckReport {
    /// Seats with more than one accepted sale.
    pub double_sold_seats: usize,
    /// Every violation (a seat can have both kinds).
    pub violations: Vec<Violation>,
    /// Every accepted write, by seat, in the order they landed (for the race report's
    /// timeline). Not in the JSON.
    #[serde(skip)]
    pub writes: Vec<AcceptedWrite>,
}

/// Checks every seat of `event_id`: one query over `orders` and `race_lab_sales`.
pub async fn check(db: &PgPool, event_id: i64) -> sqlx::Result<CheckReport> {
    let writes: Vec<AcceptedWrite> = sqlx::query_as(
        "SELECT seat_id, buyer_id, fence_token, accepted_at FROM (
             SELECT seat_id, buyer_id, fence_token, created_at AS accepted_at, id, 0 AS source
               FROM orders WHERE event_id = $1
             UNION ALL
             SELECT seat_id, buyer_id, fence_token, accepted_at, id, 1
               FROM race_lab_sales WHERE event_id = $1) w
          ORDER BY seat_id, accepted_at, source, id",
    )
    .bind(event_id)
    .fetch_all(db)
    .await?;
    let mut report = check_writes(writes);
    for (kind, seat_id) in payment_violations(db, event_id).await? {
        let writes = report
            .writes
            .iter()
            .filter(|w| w.seat_id == seat_id)
            .cloned()
            .collect();
        report.violations.push(Violation {
            kind,
            seat_id,
            writes,
        });
    }
    Ok(report)
}

/// The seats of `event_id` whose money disagrees with their sale, both directions: one
/// query over `orders` and `payments`.
async fn payment_violations(db: &PgPool, event_id: i64) -> sqlx::Result<Vec<(&'static str, i64)>> {
    let rows: Vec<(bool, i64)> = sqlx::query_as(
        "SELECT true, o.seat_id FROM orders o
          WHERE o.event_id = $1
            AND (SELECT count(*) FROM payments p
                  WHERE p.order_id = o.id AND p.status = 'captured'
                    AND p.event_id = o.event_id AND p.seat_id = o.seat_id
                    AND p.amount_cents = o.price_cents) <> 1
         UNION ALL
         SELECT false, p.seat_id FROM payments p
           LEFT JOIN orders o ON o.id = p.order_id
          WHERE p.event_id = $1 AND p.status = 'captured'
            AND (o.id IS NULL OR o.event_id <> p.event_id OR o.seat_id <> p.seat_id
                 OR o.price_cents <> p.amount_cents)
          ORDER BY 2",
    )
    .bind(event_id)
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(unpaid, seat)| {
            let kind = if unpaid {
                "unpaid_order"
            } else {
                "capture_without_order"
            };
            (kind, seat)
        })
        .collect())
}

/// The invariant over writes sorted by seat, then by the order they landed.
pub fn check_writes(writes: Vec<AcceptedWrite>) -> CheckReport {
    let mut report = CheckReport::default();
    for seat_writes in writes.chunk_by(|a, b| a.seat_id == b.seat_id) {
        let seat_id = seat_writes[0].seat_id;
        if seat_writes.len() > 1 {
            report.double_sold_seats += 1;
            report.violations.push(Violation {
                kind: "double_sale",
                seat_id,
                writes: seat_writes.to_vec(),
            });
        }
        let tokens: Vec<i64> = seat_writes.iter().filter_map(|w| w.fence_token).collect();
        if tokens.windows(2).any(|t| t[1] < t[0]) {
            report.violations.push(Violation {
                kind: "token_order",
                seat_id,
                writes: seat_writes.to_vec(),
            });
        }
    }
    report.writes = writes;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(seat_id: i64, buyer: &str, token: Option<i64>, ms: i64) -> AcceptedWrite {
        AcceptedWrite {
            seat_id,
            buyer_id: buyer.into(),
            fence_token: token,
            accepted_at: DateTime::from_timestamp_millis(ms).unwrap(),
        }
    }

    #[test]
    fn one_write_per_seat_in_token_order_is_clean() {
        let report = check_writes(vec![write(1, "a", Some(41), 0), write(2, "b", Some(42), 1)]);
        assert_eq!(report.double_sold_seats, 0);
        assert!(report.violations.is_empty());
    }

    #[test]
    fn a_late_lower_token_is_a_double_sale_and_out_of_order() {
        let report = check_writes(vec![write(1, "b", Some(42), 0), write(1, "a", Some(41), 5)]);
        assert_eq!(report.double_sold_seats, 1);
        let kinds: Vec<_> = report.violations.iter().map(|v| v.kind).collect();
        assert_eq!(kinds, ["double_sale", "token_order"]);
    }

    #[test]
    fn unfenced_double_sales_are_counted() {
        let report = check_writes(vec![
            write(3, "a", None, 0),
            write(3, "b", None, 1),
            write(3, "c", None, 2),
        ]);
        assert_eq!(report.double_sold_seats, 1);
        assert_eq!(report.violations.len(), 1);
    }
}
