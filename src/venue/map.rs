//! The seat map of one event for one buyer: the event's [`Board`] that every viewer
//! shares (its seats from Postgres, the holds from Redis, read at most once a second),
//! overlaid with the buyer's own holds and tickets as they are now.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use lease::GroupSnapshot;

use super::board::Board;
use super::queries::{self, MapSeat, Zone};
use crate::events::EventSummary;
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

/// Everything the event's pages show a buyer: the event's [`Board`], shared by every
/// viewer, and the buyer's own part beside it.
pub struct SeatMap {
    /// The event.
    pub event: EventSummary,
    /// The price zones, dearest first.
    pub zones: Vec<Zone>,
    /// What every viewer shares: the seats, the overview, as read at most [`BOARD_TTL`]
    /// ago.
    ///
    /// [`BOARD_TTL`]: super::board::BOARD_TTL
    pub board: Arc<Board>,
    /// The viewer's live holds in this event, in drawing order.
    pub my_holds: Vec<MyHold>,
    /// Seats bought by the viewer: (seat title).
    pub my_seats: Vec<String>,
    /// How many seats are neither sold nor held (the board's count, with the viewer's own
    /// holds as they are now).
    pub available: usize,
    /// How many seats the event has.
    pub total: usize,
    /// The viewer's buyer id.
    buyer_id: String,
    /// The ids of the seats sold to the viewer.
    sold_to_viewer: HashSet<i64>,
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
    /// "Buy all" buys ([`crate::seats::cart::checkout`]).
    pub fn my_seat_ids(&self) -> String {
        let ids: Vec<String> = self
            .my_holds
            .iter()
            .map(|h| h.seat_id.to_string())
            .collect();
        ids.join(",")
    }

    /// The seats drawn for the viewer, section by section: every section, or only
    /// section `only`. The states are the board's but for the viewer's own seats (held
    /// now, bought), which are as they are now.
    pub fn sections(&self, only: Option<&str>) -> Vec<SectionView> {
        let mut sections = Vec::new();
        let seats = self.board.seats.iter();
        for seat in seats.filter(|seat| only.is_none_or(|code| seat.section_code == code)) {
            push_seat(&mut sections, seat, self.seat_state(seat));
        }
        sections
    }

    /// Seat `seat`'s state for the viewer.
    fn seat_state(&self, seat: &MapSeat) -> SeatState {
        let bought = self.sold_to_viewer.contains(&seat.seat_id);
        let mine = self.my_holds.iter().any(|h| h.seat_id == seat.seat_id);
        match (seat.sold || bought, bought, mine) {
            (true, true, _) => SeatState::SoldToYou,
            (true, false, _) => SeatState::Sold,
            (false, _, true) => SeatState::HeldByYou,
            (false, _, false) => match self.board.holder(seat.seat_id) {
                Some(holder) if holder != self.buyer_id => SeatState::Held,
                _ => SeatState::Available,
            },
        }
    }

    /// How many seats `in_scope` are available as the viewer sees them now: the board's
    /// `available` count of them, less the unsold ones the viewer has held since the
    /// board was read, plus those it has let go of. Looks only at the viewer's own
    /// seats, never at every seat of the venue.
    pub fn available_of(&self, in_scope: impl Fn(&MapSeat) -> bool, available: usize) -> usize {
        let counts = |seat_id: i64| {
            (self.board.seat(seat_id)).is_some_and(|seat| !seat.sold && in_scope(seat))
        };
        let mine = |seat_id: i64| self.my_holds.iter().any(|h| h.seat_id == seat_id);
        let held_since = (self.my_holds.iter())
            .filter(|h| self.board.holder(h.seat_id).is_none() && counts(h.seat_id))
            .count();
        let let_go = (self.board.held_by(&self.buyer_id))
            .filter(|&seat_id| !mine(seat_id) && counts(seat_id))
            .count();
        (available + let_go).saturating_sub(held_since)
    }
}

/// Builds the map of `event_id` for `buyer_id`: the event's shared [`Board`]
/// ([`super::board::Boards`]: no store read most of the time), and the buyer's own part,
/// as it is now: their holds (one Redis script, [`lease::LeaseStore::held_by`]) and the
/// seats sold to them (one small query), both skipped for a buyer new on this request,
/// who has none. `None` if the event does not exist.
pub async fn load(
    state: &AppState,
    event_id: i64,
    buyer_id: &str,
    new_buyer: bool,
) -> Result<Option<SeatMap>> {
    let group = crate::seats::event_group(&state.settings.lease_namespace, event_id);
    let buyers_own = async {
        if new_buyer {
            return Ok((Vec::new(), GroupSnapshot::default()));
        }
        let (sold, held) = tokio::join!(
            queries::seats_sold_to(&state.db, event_id, buyer_id),
            state.leases.held_by(&group, buyer_id),
        );
        Ok::<_, crate::http::error::Error>((sold?, held?))
    };
    let namespace = &state.settings.lease_namespace;
    let board = state
        .boards
        .get(&state.db, &*state.leases, namespace, event_id);
    let (board, buyers_own) = tokio::join!(board, buyers_own);
    let Some(board) = board? else { return Ok(None) };
    let (sold, held) = buyers_own?;
    let mut my_holds: Vec<MyHold> = held
        .holdings
        .iter()
        .filter_map(|h| {
            let seat = board.seat(crate::seats::seat_of(h)?)?;
            Some(MyHold {
                seat_id: seat.seat_id,
                title: title(seat),
                remaining_ms: h.expires_at_ms.saturating_sub(held.now_ms),
                until: clock_time(h.expires_at_ms),
                fencing_token: h.fencing_token.0,
                price_cents: seat.price_cents,
            })
        })
        .collect();
    my_holds.sort_by_key(|h| board.position(h.seat_id));
    let mut sold_to_viewer: Vec<i64> = sold;
    sold_to_viewer.sort_by_key(|&id| board.position(id));
    let my_seats = sold_to_viewer
        .iter()
        .filter_map(|&id| board.seat(id).map(title))
        .collect();
    if !state.leases.one_clock() {
        own_countdowns(state, event_id, &mut my_holds).await?;
    }
    let mut map = SeatMap {
        event: board.event.clone(),
        zones: board.zones.clone(),
        total: board.seats.len(),
        available: 0,
        board: board.clone(),
        my_holds,
        my_seats,
        buyer_id: buyer_id.to_owned(),
        sold_to_viewer: sold_to_viewer.into_iter().collect(),
    };
    map.available = map.available_of(|_| true, board.available);
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
        let seat = crate::seats::SeatRef {
            event_id,
            seat_id: hold.seat_id,
        };
        let key = crate::seats::lease_key(namespace, seat);
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
