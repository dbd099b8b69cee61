//! The seat map of one event: the seats from Postgres (one query) overlaid with the live
//! holds from Redis (one round trip for the whole event, whatever its size: the lease
//! group's holders hash).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use lease::Holding;

use super::per_event::PerEvent;
use super::queries::{self, MapSeat, Zone};
use crate::events::{self, EventSummary};
use crate::http::error::Result;
use crate::money::format_cents;
use crate::state::AppState;

/// What a buyer sees of one seat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeatState {
    /// Free to hold.
    Available,
    /// Another buyer holds it.
    Held,
    /// The viewer holds it.
    HeldByYou,
    /// Sold to someone else.
    Sold,
    /// Sold to the viewer.
    SoldToYou,
}

impl SeatState {
    /// CSS class and legend word.
    pub fn css(&self) -> &'static str {
        match self {
            SeatState::Available => "available",
            SeatState::Held => "held",
            SeatState::HeldByYou => "mine",
            SeatState::Sold => "sold",
            SeatState::SoldToYou => "bought",
        }
    }

    /// The state in words, last in a seat's accessible name (so colour is never the only
    /// sign of it); `web/app.js` writes the same words when the state changes live.
    pub fn words(&self) -> &'static str {
        match self {
            SeatState::Available => "available",
            SeatState::Held => "someone is buying it",
            SeatState::HeldByYou => "held by you",
            SeatState::Sold => "sold",
            SeatState::SoldToYou => "bought by you",
        }
    }
}

/// One seat on the map. Its section and row are the row's and its price the zone's in
/// the legend, not repeated per seat (the arena has 11,056 seats; the page's script
/// shows the section, row and seat in a tooltip).
pub struct SeatView {
    /// Its id.
    pub id: i64,
    /// The seat's number in its row.
    pub number: i32,
    /// An aisle runs just before this seat.
    pub aisle_before: bool,
    /// The seat's price zone.
    pub zone: String,
    /// The seat's price for this event, in cents.
    pub price_cents: i64,
    /// `wheelchair` (a wheelchair place), `companion` (beside one), or none.
    pub access: Option<String>,
    /// The seat's state for the viewer.
    pub state: SeatState,
}

impl SeatView {
    /// The seat's accessible name: "Stalls, row T, seat 1, wheelchair place, $95.00,
    /// available": section, row, number, what it is for (if an accessible place),
    /// price, and its state's words last (`web/app.js` rewrites those live).
    pub fn name(&self, section: &str, row: &str) -> String {
        let access = match self.access.as_deref() {
            Some("wheelchair") => ", wheelchair place",
            Some(_) => ", companion seat",
            None => "",
        };
        format!(
            "{section}, row {row}, seat {}{access}, {}, {}",
            self.number,
            format_cents(self.price_cents),
            self.state.words()
        )
    }
}

/// One row of a section.
pub struct RowView {
    /// The row's label ("C").
    pub label: String,
    /// The seats, in drawing order.
    pub seats: Vec<SeatView>,
}

impl RowView {
    /// The price zone of every seat of the row, if they share one (then the page names
    /// it once on the row instead of on each seat).
    pub fn zone(&self) -> Option<&str> {
        let first = &self.seats.first()?.zone;
        self.seats
            .iter()
            .all(|seat| seat.zone == *first)
            .then_some(first.as_str())
    }
}

/// One section.
pub struct SectionView {
    /// Its short code, unique within its venue.
    pub code: String,
    /// Its name, for a person.
    pub name: String,
    /// The rows, in drawing order.
    pub rows: Vec<RowView>,
}

/// A seat the viewer holds, with its countdown.
pub struct MyHold {
    /// `seats.id`.
    pub seat_id: i64,
    /// The seat, named for a person ("Main row C seat 14").
    pub title: String,
    /// Time left, in milliseconds, by the Redis clock.
    pub remaining_ms: u64,
    /// Expiry as "20:41:07 UTC" (the page's script shows local time).
    pub until: String,
    /// The fencing token of the lease that wrote it.
    pub fencing_token: u64,
    /// The seat's price for this event, in cents.
    pub price_cents: i64,
}

/// Everything the event page shows.
pub struct SeatMap {
    /// The event.
    pub event: EventSummary,
    /// The price zones, dearest first.
    pub zones: Vec<Zone>,
    /// The sections, in drawing order.
    pub sections: Vec<SectionView>,
    /// The viewer's live holds in this event.
    pub my_holds: Vec<MyHold>,
    /// Seats bought by the viewer: (seat title).
    pub my_seats: Vec<String>,
    /// How many seats are still unsold.
    pub available: usize,
    /// How many seats the event has.
    pub total: usize,
}

impl SeatMap {
    /// What the viewer's held seats cost together, formatted ("$200.00"; summed in
    /// cents).
    pub fn cart_total(&self) -> String {
        format_cents(self.my_holds.iter().map(|h| h.price_cents).sum())
    }

    /// The viewer's hold that lapses first: the cart's one countdown.
    pub fn first_to_lapse(&self) -> Option<&MyHold> {
        self.my_holds.iter().min_by_key(|h| h.remaining_ms)
    }

    /// The ids of the buyer's held seats, comma-separated: the cart form's `seats`, what
    /// "Buy all" buys ([`super::cart::checkout`]).
    pub fn my_seat_ids(&self) -> String {
        let ids: Vec<String> = self
            .my_holds
            .iter()
            .map(|h| h.seat_id.to_string())
            .collect();
        ids.join(",")
    }
}

/// How long one read of an event's seats is shared by every map view
/// ([`SharedSeats`]): a sale made through another server shows on a freshly loaded map
/// within this (and on open maps at once, by their stream).
pub const SHARED_SEATS_TTL: Duration = Duration::from_secs(1);

/// Each event's seats (layout, prices, sold or not), read once per [`SHARED_SEATS_TTL`]
/// and shared by every map view: what every viewer sees alike is not read per view. A
/// crowd opening the arena costs one read of its 11,056 seats a second, not one per
/// person. A sale made by this process is seen at once ([`SharedSeats::forget`]).
#[derive(Default)]
pub struct SharedSeats {
    /// Per event: when the seats were read, and the seats.
    events: PerEvent<(Instant, Arc<Vec<MapSeat>>)>,
}

impl SharedSeats {
    /// The event's seats: the shared read if it is younger than [`SHARED_SEATS_TTL`],
    /// else a new one (by one caller; the others wait for it and share it).
    async fn seats(&self, state: &AppState, event_id: i64) -> Result<Arc<Vec<MapSeat>>> {
        let slot = self.events.slot(event_id);
        let mut shared = slot.lock().await;
        if let Some((read_at, seats)) = &*shared
            && read_at.elapsed() < SHARED_SEATS_TTL
        {
            return Ok(seats.clone());
        }
        let read = queries::map_seats(&state.db, event_id);
        let seats = Arc::new(crate::telemetry::postgres("map_seats", read).await?);
        *shared = Some((Instant::now(), seats.clone()));
        Ok(seats)
    }

    /// Drops the event's shared read (a sale of it just committed here), so the next
    /// view reads the seats again.
    pub fn forget(&self, event_id: i64) {
        self.events.forget(event_id);
    }
}

/// Builds the map of `event_id` for `buyer_id`. Round trips: the event and its zones from
/// Postgres, its seats shared with every other view ([`SharedSeats`]), the seats sold to
/// the buyer (a small query, skipped for a buyer new on this request, who has none), and
/// one Redis round trip. `None` if the event does not exist.
pub async fn load(
    state: &AppState,
    event_id: i64,
    buyer_id: &str,
    new_buyer: bool,
) -> Result<Option<SeatMap>> {
    let group = super::event_group(&state.settings.lease_namespace, event_id);
    let sold_to_buyer = async {
        if new_buyer {
            return Ok(Vec::new());
        }
        queries::seats_sold_to(&state.db, event_id, buyer_id).await
    };
    let (event, seats, mine, zones, holds) = tokio::join!(
        events::find(&state.db, event_id),
        state.seat_maps.seats(state, event_id),
        sold_to_buyer,
        queries::zones(&state.db, event_id),
        state.leases.holders(&group),
    );
    let Some(event) = event? else { return Ok(None) };
    let holds = holds?;
    let held: HashMap<&str, &Holding> = holds
        .holdings
        .iter()
        .map(|h| (h.name.as_str(), h))
        .collect();
    let (seats, zones) = (seats?, zones?);
    let mine: HashSet<i64> = mine?.into_iter().collect();
    let total = seats.len();
    let mut map = SeatMap {
        event,
        zones,
        sections: Vec::new(),
        my_holds: Vec::new(),
        my_seats: Vec::new(),
        available: 0,
        total,
    };
    for seat in seats.iter() {
        let holding = held.get(seat.seat_id.to_string().as_str()).copied();
        let state = seat_state(seat, mine.contains(&seat.seat_id), holding, buyer_id);
        match state {
            SeatState::Available => map.available += 1,
            SeatState::HeldByYou => {
                let h = holding.expect("held seats have a holding");
                map.my_holds.push(MyHold {
                    seat_id: seat.seat_id,
                    title: title(seat),
                    remaining_ms: h.expires_at_ms.saturating_sub(holds.now_ms),
                    until: clock_time(h.expires_at_ms),
                    fencing_token: h.fencing_token.0,
                    price_cents: seat.price_cents,
                });
            }
            SeatState::SoldToYou => map.my_seats.push(title(seat)),
            SeatState::Held | SeatState::Sold => {}
        }
        push_seat(&mut map.sections, seat, state);
    }
    if !state.leases.one_clock() {
        own_countdowns(state, event_id, &mut map.my_holds).await?;
    }
    Ok(Some(map))
}

/// The buyer's own countdowns from the store itself, where a snapshot's expiries are not
/// on the store's clock ([`lease::LeaseStore::one_clock`]: etcd). Each expiry there is its
/// granting server's reckoning, and subtracting this server's clock from it would show
/// the two servers' skew as time left. etcd counts each lease down itself: one read of
/// the hold and one of its lease per seat the buyer holds (whole seconds).
async fn own_countdowns(state: &AppState, event_id: i64, holds: &mut [MyHold]) -> Result<()> {
    let namespace = &state.settings.lease_namespace;
    let asked = holds.iter().map(|hold| {
        let seat = super::SeatRef {
            event_id,
            seat_id: hold.seat_id,
        };
        let key = super::lease_key(namespace, seat);
        async move { state.leases.remaining(&key).await }
    });
    let remaining = futures_util::future::try_join_all(asked).await?;
    let now_ms = Utc::now().timestamp_millis().max(0) as u64;
    for (hold, left) in holds.iter_mut().zip(remaining) {
        let left_ms = left.unwrap_or_default().as_millis() as u64;
        hold.remaining_ms = left_ms;
        hold.until = clock_time(now_ms + left_ms);
    }
    Ok(())
}

fn seat_state(seat: &MapSeat, mine: bool, holding: Option<&Holding>, buyer_id: &str) -> SeatState {
    match (seat.sold, mine, holding) {
        (true, true, _) => SeatState::SoldToYou,
        (true, false, _) => SeatState::Sold,
        (false, _, Some(h)) if h.holder == buyer_id => SeatState::HeldByYou,
        (false, _, Some(_)) => SeatState::Held,
        (false, _, None) => SeatState::Available,
    }
}

fn title(seat: &MapSeat) -> String {
    format!(
        "{}, row {}, seat {} ({})",
        seat.section_name,
        seat.row_label,
        seat.number,
        format_cents(seat.price_cents)
    )
}

/// Appends a seat, opening a new section or row when it changes (seats arrive sorted).
fn push_seat(sections: &mut Vec<SectionView>, seat: &MapSeat, state: SeatState) {
    if sections.last().is_none_or(|s| s.code != seat.section_code) {
        sections.push(SectionView {
            code: seat.section_code.clone(),
            name: seat.section_name.clone(),
            rows: Vec::new(),
        });
    }
    let section = sections.last_mut().expect("just pushed");
    if section
        .rows
        .last()
        .is_none_or(|r| r.label != seat.row_label)
    {
        section.rows.push(RowView {
            label: seat.row_label.clone(),
            seats: Vec::new(),
        });
    }
    section
        .rows
        .last_mut()
        .expect("just pushed")
        .seats
        .push(SeatView {
            id: seat.seat_id,
            number: seat.number,
            aisle_before: seat.aisle_before,
            zone: seat.zone_code.clone(),
            price_cents: seat.price_cents,
            access: seat.access.clone(),
            state,
        });
}

/// Unix milliseconds as "HH:MM:SS UTC".
pub fn clock_time(unix_ms: u64) -> String {
    DateTime::<Utc>::from_timestamp_millis(unix_ms as i64)
        .map(|t| t.format("%H:%M:%S UTC").to_string())
        .unwrap_or_default()
}
