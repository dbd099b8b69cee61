//! What a hold needs to know about an event without asking Postgres: which seats it has,
//! when it starts, and its waiting room (when it goes on sale, how many shop at once).
//! All are fixed once the event is seeded (nothing in seatlock
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

/// One event's seats, start and waiting room, as seeded.
#[derive(Debug)]
pub struct EventSeats {
    /// `events.name`.
    pub name: String,
    starts_at: DateTime<Utc>,
    /// `events.on_sale_at`: `None` on sale since it was created.
    pub on_sale_at: Option<DateTime<Utc>>,
    /// `events.waiting_room_shoppers`: `None` leaves it to `--waiting-room-shoppers`.
    pub waiting_room_shoppers: Option<i32>,
    /// `events.queue_seed`: the seed that orders the waiting room's pre-queue.
    pub queue_seed: u64,
    /// The venue's IANA zone, for times shown to buyers.
    pub time_zone: String,
    seat_ids: HashSet<i64>,
    section_codes: HashSet<String>,
}

impl EventSeats {
    /// Whether the event has seat `seat_id` (`seats.id`).
    pub fn has_seat(&self, seat_id: i64) -> bool {
        self.seat_ids.contains(&seat_id)
    }

    /// Whether the event's venue has a section of code `code` (`sections.code`).
    pub fn has_section(&self, code: &str) -> bool {
        self.section_codes.contains(code)
    }

    /// How many seats the event has.
    pub fn seat_count(&self) -> usize {
        self.seat_ids.len()
    }

    /// The on-sale time in Unix ms (compared with the lease store's clock), if any.
    pub fn on_sale_at_ms(&self) -> Option<u64> {
        self.on_sale_at
            .map(|at| u64::try_from(at.timestamp_millis()).unwrap_or(0))
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
    /// Event `event_id`'s seats, start and waiting room: from memory, else one Postgres read (timed as
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
        let Some(row) = telemetry::postgres("event_seats", read).await? else {
            return Ok(None);
        };
        let event = Arc::new(EventSeats {
            name: row.name,
            starts_at: row.starts_at,
            on_sale_at: row.on_sale_at,
            waiting_room_shoppers: row.waiting_room_shoppers,
            queue_seed: row.queue_seed as u64,
            time_zone: row.time_zone,
            seat_ids: row.seat_ids.into_iter().collect(),
            section_codes: row.section_codes.into_iter().collect(),
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
