//! The event's board: the part of its pages that every viewer shares, read from the
//! stores and built once, then served to every view for [`BOARD_TTL`].
//!
//! An on-sale is a crowd looking at one map. What each of them sees alike (the event,
//! its zones, its 11,056 seats and which are sold or held, the venue drawn with each
//! section's counts) does not depend on who looks, so it is read and rendered once per
//! event a second, by one caller while the others wait for it (`PerEvent`), and a view
//! adds only what is the buyer's own: their holds (one Redis script, [`map::load`]) and
//! tickets (one small query), both skipped for a buyer new on this request.
//!
//! A board can be up to [`BOARD_TTL`] behind the stores. That is what a page shows as it
//! loads, never what decides a hold or a sale (Redis and Postgres do, each time), and a
//! page's stream opens with a snapshot of the moment ([`super::live`]) that corrects it.
//! A sale committed by this process drops the event's board at once ([`Boards::forget`]).
//!
//! [`map::load`]: super::map::load

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use askama::Template;
use lease::LeaseStore;
use sqlx::PgPool;

use super::best_available::FreeSeat;
use super::overview::Overview;
use super::per_event::PerEvent;
use super::queries::{self, MapSeat, Zone};
use crate::config::LeaseNamespace;
use crate::events::{self, EventSummary};
use crate::http::error::Result;

/// How long one board is served before the next view reads the stores again: a sale or
/// hold made through another server shows on a freshly loaded page within this (and on
/// open pages at once, by their stream).
pub const BOARD_TTL: Duration = Duration::from_secs(1);

/// The least time between two reads of an event's holds made after collisions
/// ([`Boards::held_since`]): a crowd asking best available in the same instant collides
/// in the same instant, and thousands of reads of a hash of thousands of holds would
/// fill Redis's output buffers and stall every other call behind them.
pub const HOLDS_SPACING: Duration = Duration::from_millis(100);

/// What every viewer of an event's pages shares (see the module docs).
pub struct Board {
    /// The event.
    pub event: EventSummary,
    /// Its price zones, dearest first.
    pub zones: Vec<Zone>,
    /// Every seat, in drawing order (section, row, number), sold or not as read.
    pub seats: Vec<MapSeat>,
    /// Seats neither sold nor held, as read.
    pub available: usize,
    /// The unsold seats as best available picks among them: dearest first, then in
    /// drawing order ([`super::best_available::pick_block`]).
    pub free: Vec<FreeSeat>,
    /// The venue drawn with each section's counts (held seats count as taken, whoever
    /// holds them).
    pub overview: Overview,
    /// `overview` rendered (`templates/overview.html`): the same bytes for every view.
    pub overview_html: String,
    /// Where each seat id is in `seats`.
    index: HashMap<i64, usize>,
    /// The holder of each held seat, by seat id, as read.
    held: HashMap<i64, String>,
}

impl Board {
    /// Seat `seat_id` of the event, if it has one.
    pub fn seat(&self, seat_id: i64) -> Option<&MapSeat> {
        self.index.get(&seat_id).map(|&i| &self.seats[i])
    }

    /// Where seat `seat_id` is drawn among the event's seats (for sorting a buyer's).
    pub fn position(&self, seat_id: i64) -> usize {
        self.index.get(&seat_id).copied().unwrap_or(usize::MAX)
    }

    /// Who held seat `seat_id` when the board was read.
    pub fn holder(&self, seat_id: i64) -> Option<&str> {
        self.held.get(&seat_id).map(String::as_str)
    }

    /// The seats held when the board was read.
    pub fn held_seats(&self) -> impl Iterator<Item = i64> + '_ {
        self.held.keys().copied()
    }

    /// The seats `holder` held when the board was read.
    pub fn held_by<'a>(&'a self, holder: &'a str) -> impl Iterator<Item = i64> + 'a {
        (self.held.iter())
            .filter(move |(_, by)| by.as_str() == holder)
            .map(|(&seat_id, _)| seat_id)
    }
}

/// The unsold of `seats` (in drawing order) as best available picks among them: dearest
/// first, each price in drawing order, each seat knowing whether an aisle or its row's end
/// comes right after it.
fn free_seats(seats: &[MapSeat]) -> Vec<FreeSeat> {
    let mut free: Vec<FreeSeat> = (seats.iter().enumerate())
        .filter(|(_, seat)| !seat.sold)
        .map(|(i, seat)| {
            let next = seats.get(i + 1).filter(|next| {
                next.section_id == seat.section_id
                    && next.row_label == seat.row_label
                    && next.number == seat.number + 1
            });
            FreeSeat {
                seat_id: seat.seat_id,
                section_id: seat.section_id,
                section_code: seat.section_code.clone(),
                row_label: seat.row_label.clone(),
                number: seat.number,
                aisle_before: seat.aisle_before,
                aisle_after: next.is_none_or(|next| next.aisle_before),
                access: seat.access.clone(),
                price_cents: seat.price_cents,
            }
        })
        .collect();
    // Stable: within a price the drawing order stays.
    free.sort_by_key(|seat| std::cmp::Reverse(seat.price_cents));
    free
}

/// The boards of the events being viewed, each rebuilt at most once a [`BOARD_TTL`],
/// and the holds read after collisions, at most once a [`HOLDS_SPACING`].
#[derive(Default)]
pub struct Boards {
    /// Per event: when it was read, and its board (`None`: there is no such event).
    events: PerEvent<(Instant, Option<Arc<Board>>)>,
    /// Per event: when its holds were read, and the seats held.
    holds: PerEvent<(Instant, Arc<HashSet<i64>>)>,
}

impl Boards {
    /// Event `event_id`'s board: the shared one if it is younger than [`BOARD_TTL`], else
    /// a new one (read by one caller; the others wait for it and share it). `None` if
    /// there is no such event (also kept for [`BOARD_TTL`], so a crowd asking for one
    /// costs one read). It reads Postgres through `db`, and the holds from `leases` in
    /// the group under `namespace`. Errors: a store that does not answer.
    pub async fn get(
        &self,
        db: &PgPool,
        leases: &dyn LeaseStore,
        namespace: &LeaseNamespace,
        event_id: i64,
    ) -> Result<Option<Arc<Board>>> {
        let slot = self.events.slot(event_id);
        let mut shared = slot.lock().await;
        if let Some((read_at, board)) = &*shared
            && read_at.elapsed() < BOARD_TTL
        {
            return Ok(board.clone());
        }
        let board = build(db, leases, namespace, event_id).await?.map(Arc::new);
        *shared = Some((Instant::now(), board.clone()));
        Ok(board)
    }

    /// The seats of event `event_id` held, as read by a read that started after `since`
    /// (a pick's collision, so the holds that refused it are in it). One Redis round
    /// trip (the event's holders), shared: a caller takes the last read if it started
    /// after `since`, else waits for the next, which starts no sooner than
    /// [`HOLDS_SPACING`] after the last and serves every caller that collided before it.
    /// For picking again after a collision (best available, [`crate::seats::cart`]): a hint,
    /// never a judge (the hold script is). Errors: Redis does not answer.
    pub async fn held_since(
        &self,
        leases: &dyn LeaseStore,
        namespace: &LeaseNamespace,
        event_id: i64,
        since: Instant,
    ) -> Result<Arc<HashSet<i64>>> {
        let slot = self.holds.slot(event_id);
        let mut last = slot.lock().await;
        if let Some((started, held)) = &*last {
            if *started >= since {
                return Ok(held.clone());
            }
            // Callers colliding meanwhile queue on the lock and share the next read.
            tokio::time::sleep_until((*started + HOLDS_SPACING).into()).await;
        }
        let started = Instant::now();
        let group = crate::seats::event_group(namespace, event_id);
        let holders = leases.holders(&group).await?;
        let held: Arc<HashSet<i64>> = (holders.holdings.iter())
            .filter_map(crate::seats::seat_of)
            .collect::<HashSet<_>>()
            .into();
        *last = Some((started, held.clone()));
        Ok(held)
    }

    /// Drops the event's board (a sale of it just committed here), so the next view
    /// reads the stores again.
    pub fn forget(&self, event_id: i64) {
        self.events.forget(event_id);
    }
}

/// The overview as HTML, rendered once per board.
#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewHtml<'a> {
    event: &'a EventSummary,
    overview: &'a Overview,
}

/// Reads the event from the stores and builds its board: five Postgres queries and one
/// Redis round trip, run together; `None` if no such event.
async fn build(
    db: &PgPool,
    leases: &dyn LeaseStore,
    namespace: &LeaseNamespace,
    event_id: i64,
) -> Result<Option<Board>> {
    let group = crate::seats::event_group(namespace, event_id);
    let seats = crate::telemetry::postgres("map_seats", queries::map_seats(db, event_id));
    let (event, seats, zones, plan, shapes, holds) = tokio::join!(
        events::find(db, event_id),
        seats,
        queries::zones(db, event_id),
        queries::venue_plan(db, event_id),
        queries::section_shapes(db, event_id),
        leases.holders(&group),
    );
    let Some(event) = event? else {
        return Ok(None);
    };
    let seats = seats?;
    let held: HashMap<i64, String> = holds?
        .holdings
        .into_iter()
        .filter_map(|h| Some((crate::seats::seat_of(&h)?, h.holder)))
        .collect();
    let taken = |seat: &MapSeat| seat.sold || held.contains_key(&seat.seat_id);
    let overview = Overview::new(plan?.unwrap_or_default(), &shapes?, &seats, taken);
    let available = seats.iter().filter(|seat| !taken(seat)).count();
    // Rendering writes only strings checked at seeding and numbers: it cannot fail.
    let overview_html = OverviewHtml {
        event: &event,
        overview: &overview,
    }
    .render()
    .unwrap_or_default();
    let free = free_seats(&seats);
    let index = seats
        .iter()
        .enumerate()
        .map(|(i, seat)| (seat.seat_id, i))
        .collect();
    Ok(Some(Board {
        event,
        zones: zones?,
        seats,
        available,
        free,
        overview,
        overview_html,
        index,
        held,
    }))
}
