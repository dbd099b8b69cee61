//! What a hold needs to know about an event without asking Postgres: which seats it has
//! and when it starts. Both are fixed once the event is seeded (nothing in seatlock
//! changes them), so each process reads an event's once, on the first hold of it, and
//! keeps it for good. Every process reads the same rows, so two processes never disagree.
//!
//! What does change, whether a seat is sold, is not kept here: the lease script refuses a
//! sold seat (a sale retires its lease, see [`super::purchase`]), and the fenced write in
//! Postgres stays what decides a sale, on Postgres's clock and its `sold` column.
//!
//! An event rescheduled in Postgres while servers run is not seen by them until they
//! restart: their holds close on the old start, and the fenced write refuses any purchase
//! after the new one (`event_started`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::queries;
use crate::telemetry;

/// One event's seats and start, as seeded.
#[derive(Debug)]
pub struct EventSeats {
    starts_at: DateTime<Utc>,
    seat_ids: HashSet<i64>,
}

impl EventSeats {
    /// Whether the event has seat `seat_id` (`seats.id`).
    pub fn has_seat(&self, seat_id: i64) -> bool {
        self.seat_ids.contains(&seat_id)
    }

    /// Whether the event has started by this process's clock (sales close when it
    /// starts). The purchase's fenced write checks again on Postgres's clock, so a hold
    /// granted by a clock running late is refused at confirm (`event_started`).
    pub fn started(&self) -> bool {
        Utc::now() >= self.starts_at
    }
}

/// The events this process has held seats of: see the module docs. Only events found in
/// Postgres are remembered, so unknown ids cannot grow it.
#[derive(Debug, Default)]
pub struct Catalog {
    events: RwLock<HashMap<i64, Arc<EventSeats>>>,
    /// One read at a time, so a crowd's first holds of an event read it once.
    loading: tokio::sync::Mutex<()>,
}

impl Catalog {
    /// Event `event_id`'s seats and start: from memory, else one Postgres read (timed as
    /// `event_seats`). `None` if there is no such event (asked again next time: an event
    /// seeded later is found). Errors: Postgres's, on that read only.
    pub async fn event(&self, db: &PgPool, event_id: i64) -> sqlx::Result<Option<Arc<EventSeats>>> {
        if let Some(event) = self.known(event_id) {
            return Ok(Some(event));
        }
        let _one_at_a_time = self.loading.lock().await;
        if let Some(event) = self.known(event_id) {
            return Ok(Some(event)); // read by the task this one waited for
        }
        let read = queries::event_seats(db, event_id);
        let Some((starts_at, seat_ids)) = telemetry::postgres("event_seats", read).await? else {
            return Ok(None);
        };
        let event = Arc::new(EventSeats {
            starts_at,
            seat_ids: seat_ids.into_iter().collect(),
        });
        self.events
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(event_id, event.clone());
        Ok(Some(event))
    }

    fn known(&self, event_id: i64) -> Option<Arc<EventSeats>> {
        let events = self.events.read().unwrap_or_else(|e| e.into_inner());
        events.get(&event_id).cloned()
    }
}
