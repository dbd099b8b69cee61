//! The on-sale's waiting room: at most N buyers shop an event at once, and the rest wait
//! in line, first come, first served. It stands beside the seats, not in their path: a
//! hold asks it one thing, the buyer's admission token ([`admission`]), and the hold's
//! own script checks that admission ([`lease::room`]).
//!
//! A waiting browser costs the stores nothing. The shape is that of the waiting rooms
//! people trust (Cloudflare's, Queue-it, AWS's):
//!
//! * **a signed ticket**: a new arrival joins once (one Redis script) and gets its place
//!   in a cookie signed with the server secret (`ticket.rs`);
//! * **one shared number**: the room's frontier, the highest place whose turn has come.
//!   Every server keeps it in memory, pushed on the event's channel after each tick
//!   ([`rooms::Rooms`]). A position is the place minus the frontier, with no store
//!   read;
//! * **one ticker**: one server at a time moves the frontier, under a lease, with its
//!   fencing token checked in the step's script (`ticker.rs`);
//! * **the origin serves only the admitted**: a visitor whose turn has not come is sent
//!   to the queue page before any map is read ([`gate`]).
//!
//! The rules, in one place:
//!
//! * an event has a room when its `waiting_room_shoppers` (migration 0010), else
//!   `--waiting-room-shoppers`, is above 0;
//! * a turn comes when the frontier passes the buyer's place. It waits
//!   `--arrival-window-ms` (two minutes) for the buyer to open the map. The first view
//!   takes the turn as an admission (`--admission-ttl-ms`), and each view renews it, up
//!   to twice the TTL from the admission;
//! * a hold needs a live admission, checked by Redis in the hold's own script (refused
//!   `not_admitted` otherwise). A hold already granted keeps its own TTL and fence: a
//!   buyer whose admission lapses can still buy what they hold, but not take more;
//! * a checkout, a confirm that leaves the buyer holding nothing more of the event, or
//!   the Leave button ends the admission at once, freeing the place;
//! * one place per buyer per event: a second tab or a reload keeps it. Another cookie
//!   jar is another buyer, with a place of its own at the back.

pub mod rooms;
mod routes;
mod ticker;
mod ticket;

pub use routes::{page, router};

use std::sync::Arc;
use std::time::Duration;

use lease::{Arrival, OwnerToken, Place, RoomTerms, RoomView};
use rooms::Seen;
use ticket::Ticket;

use crate::config::Settings;
use crate::http::buyer::Buyer;
use crate::http::error::{Error, Result};
use crate::seats::catalog::EventSeats;
use crate::state::{AppState, RoomStore};
use crate::telemetry;

/// The terms of `event`'s waiting room, or `None` if it has none.
pub fn terms(settings: &Settings, event: &EventSeats) -> Option<RoomTerms> {
    let shoppers = match event.waiting_room_shoppers {
        Some(n) => u64::try_from(n).unwrap_or(0),
        None => settings.waiting_room_shoppers,
    };
    (shoppers > 0).then(|| RoomTerms {
        shoppers,
        admission_ttl: settings.admission_ttl(),
        admission_cap: settings.admission_ttl() * 2,
        arrival_window: settings.arrival_window(),
        on_sale_at_ms: event.on_sale_at_ms().unwrap_or(0),
    })
}

/// The lease group the room of event `event_id` lives in: its seats' group.
fn group(state: &AppState, event_id: i64) -> String {
    crate::seats::event_group(&state.settings.lease_namespace, event_id)
}

/// The room of event `event_id` as this server knows it (`Rooms::seen`).
/// On first use it starts this server's ticker for the room.
async fn seen(state: &AppState, event_id: i64, terms: &RoomTerms) -> Result<Option<Seen>> {
    let start_ticker = || ticker::spawn(state.clone(), event_id, terms.clone());
    let read = read_room(state, event_id);
    (state.rooms)
        .seen(&state.live, event_id, start_ticker, read)
        .await
}

/// The room of event `event_id` read again, at most once a tick (`Rooms::refresh`).
async fn refresh(state: &AppState, event_id: i64) -> Result<Option<Seen>> {
    let read = read_room(state, event_id);
    state.rooms.refresh(&state.live, event_id, read).await
}

/// Reads the room of event `event_id` from Redis: one round trip.
async fn read_room(state: &AppState, event_id: i64) -> Result<Option<RoomView>> {
    Ok(store(state)?.room(&group(state, event_id)).await?)
}

/// The room's store, or a 503 naming why there is none (an event with a room of its own
/// while the leases are on etcd).
fn store(state: &AppState) -> Result<&RoomStore> {
    state.waiting_room.as_ref().ok_or(Error::Unavailable(
        "The waiting room (it needs the Redis lease store)",
    ))
}

/// The catalog's record of event `event_id`: 404 if there is none.
pub(crate) async fn event(state: &AppState, event_id: i64) -> Result<Arc<EventSeats>> {
    state
        .catalog
        .event(&state.db, event_id)
        .await?
        .ok_or_else(Error::no_such_event)
}

/// Whether event `event_id` has a waiting room. Errors: 404 no such event.
pub async fn has_room(state: &AppState, event_id: i64) -> Result<bool> {
    Ok(terms(&state.settings, &*event(state, event_id).await?).is_some())
}

/// Where a buyer stands in a room.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Standing {
    /// Before the on-sale, in the pre-queue: `waiting` joined it so far.
    PreQueue { waiting: u64, opens_in: Duration },
    /// In line: `position` 1 is next; `waiting` in line in all; `wait` estimated.
    InLine {
        position: u64,
        waiting: u64,
        wait: Duration,
    },
    /// The turn of the buyer's place has come (0: a ticket whose place the room never
    /// gave, which the arrival sends to the back): on to the map.
    Turn(u64),
}

/// The room `terms` of an event with `seed`, as a server sees it.
struct Room<'a> {
    state: &'a AppState,
    event_id: i64,
    seed: u64,
    terms: &'a RoomTerms,
}

impl Room<'_> {
    /// The place in line of `ticket` in the room `seen`: its own number, or for the
    /// pre-queue's k-th member the k-th of the order drawn from the seed. `None` before the
    /// on-sale (a pre-queue place is not drawn yet) or for a pre-queue number the room
    /// never gave.
    fn place(&self, ticket: &Ticket, seen: &Seen) -> Option<u64> {
        match ticket.place {
            Place::Line(n) => Some(n),
            Place::PreQueue(k) if seen.view.on_sale => {
                let order = (self.state.rooms).prequeue_order(self.event_id, self.seed, &seen.view);
                order.get(usize::try_from(k).ok()?.checked_sub(1)?).copied()
            }
            Place::PreQueue(_) => None,
        }
    }

    /// Where `ticket`'s holder stands in the room `seen`: no store is asked.
    fn standing(&self, ticket: &Ticket, seen: &Seen) -> Standing {
        let view = &seen.view;
        if !view.on_sale {
            let opens_in =
                (self.terms.on_sale_at_ms).saturating_sub(view.at_ms + seen.age.as_millis() as u64);
            return Standing::PreQueue {
                waiting: view.prequeue,
                opens_in: Duration::from_millis(opens_in),
            };
        }
        let Some(place) = self.place(ticket, seen) else {
            return Standing::Turn(0);
        };
        if place <= view.frontier {
            return Standing::Turn(place);
        }
        let position = place - view.frontier;
        // The wait at the pace the frontier moved lately; before it has moved, one
        // admission for each N ahead.
        let wait = match self.state.rooms.pace(self.event_id) {
            Some(per_s) => Duration::from_secs_f64(position as f64 / per_s),
            None => self.terms.admission_ttl * position.div_ceil(self.terms.shoppers) as u32,
        };
        Standing::InLine {
            position,
            waiting: view.waiting(),
            wait,
        }
    }
}

/// `buyer`'s ticket and standing in event `event_id`'s room (`terms`). From the ticket
/// and the room's state in memory, with no store round trip; a buyer without a valid
/// ticket (none, forged, another buyer's or event's, or from a room Redis lost) joins
/// first: one Redis script, and a new ticket on the response. Errors: 503 a store down.
async fn standing(
    state: &AppState,
    buyer: &Buyer,
    (event_id, event): (i64, &EventSeats),
    terms: &RoomTerms,
) -> Result<(Ticket, Standing)> {
    let room = Room {
        state,
        event_id,
        seed: event.queue_seed,
        terms,
    };
    let mut seen = seen(state, event_id, terms).await?;
    let mut ticket = Ticket::read(buyer, event_id);
    // A ticket of another epoch: either this server has not heard of a new room yet, or
    // the ticket is stale. One read (at most one per tick) tells.
    if let (Some(t), Some(s)) = (&ticket, &seen)
        && t.epoch != s.view.epoch
    {
        seen = refresh(state, event_id).await?.or(seen);
    }
    ticket = ticket.filter(|t| seen.as_ref().is_none_or(|s| s.view.epoch == t.epoch));
    let ticket = match ticket {
        Some(ticket) => ticket,
        None => {
            let joined = store(state)?
                .join(&group(state, event_id), buyer.id(), terms)
                .await?;
            let ticket = Ticket::new(joined, 0);
            ticket.give(buyer, event_id);
            ticket
        }
    };
    // Nothing heard of the room yet (its first visitor; no tick has run): nobody's turn
    // has come.
    let seen = seen
        .filter(|s| s.view.epoch == ticket.epoch)
        .unwrap_or_else(|| Seen::empty(&ticket.epoch, ticket.place));
    let standing = room.standing(&ticket, &seen);
    Ok((ticket, standing))
}

/// What an event's pages may show a buyer ([`gate`]).
#[derive(Debug)]
pub enum Gate {
    /// The map: the event has no room (`None`), or the buyer shops until this time
    /// (Unix ms, Redis clock).
    Open(Option<u64>),
    /// The queue: the buyer's turn has not come, or is over. Their place, for the
    /// queue page served in place of the map ([`page`]); `None`: send them to
    /// `GET /events/{id}/queue`, which works it out again (a room Redis lost).
    Queue(Option<Waiting>),
}

/// A buyer's place and standing in line, as [`gate`] found them.
#[derive(Debug)]
pub struct Waiting {
    ticket: Ticket,
    standing: Standing,
}

/// Whether `buyer` may see event `event_id`'s pages. Without a room: yes, nothing asked.
/// With one: a buyer whose turn has come takes it, or renews their admission (one Redis
/// script); anyone else goes to the queue, with at most one round trip (a new arrival's
/// join) and no Postgres read. Errors: 404 no such event, 503 a store down.
pub async fn gate(state: &AppState, buyer: &Buyer, event_id: i64) -> Result<Gate> {
    let event = event(state, event_id).await?;
    let Some(terms) = terms(&state.settings, &event) else {
        return Ok(Gate::Open(None));
    };
    let (ticket, standing) = standing(state, buyer, (event_id, &event), &terms).await?;
    let Standing::Turn(place) = standing else {
        return Ok(Gate::Queue(Some(Waiting { ticket, standing })));
    };
    let token = buyer.admission_token(event_id);
    let ticket_in = (ticket.place, place, ticket.epoch.as_str());
    let group = group(state, event_id);
    match store(state)?
        .arrive(&group, buyer.id(), &token, ticket_in, &terms)
        .await?
    {
        Arrival::Admitted {
            expires_at_ms,
            arrived,
        } => {
            if arrived {
                telemetry::admitted(ticket.waited());
            }
            Ok(Gate::Open(Some(expires_at_ms)))
        }
        Arrival::Waiting => Ok(Gate::Queue(None)),
        // The turn is over: back in line, at the back. The new ticket says how many
        // seats the buyer still holds from the turn (theirs to buy).
        Arrival::Spent { place } => {
            let held = crate::seats::held_seats(
                &*state.leases,
                &state.settings.lease_namespace,
                buyer,
                event_id,
            )
            .await?;
            let back = lease::Joined {
                epoch: ticket.epoch,
                place: Place::Line(place),
            };
            let ticket = Ticket::new(back, held.len());
            ticket.give(buyer, event_id);
            let room = Room {
                state,
                event_id,
                seed: event.queue_seed,
                terms: &terms,
            };
            let seen = (seen(state, event_id, &terms).await?)
                .unwrap_or_else(|| Seen::empty(&ticket.epoch, ticket.place));
            let standing = room.standing(&ticket, &seen);
            Ok(Gate::Queue(Some(Waiting { ticket, standing })))
        }
        Arrival::OtherEpoch => {
            Ticket::take_back(buyer, event_id);
            Ok(Gate::Queue(None))
        }
    }
}

/// The owner token of `buyer`'s admission to event `event_id`'s room, which a hold must
/// present ([`lease::Grant::admission`](lease::Grant)); `None` if the event has no room.
/// Nothing is read: the hold's own script checks it. Errors: 404 no such event.
pub async fn admission(
    state: &AppState,
    buyer: &Buyer,
    event_id: i64,
) -> Result<Option<OwnerToken>> {
    Ok(has_room(state, event_id)
        .await?
        .then(|| buyer.admission_token(event_id)))
}

/// `buyer` leaves event `event_id`'s room, if it has one: their admission, or their turn,
/// ends at once, or their place in line is given up; their ticket goes. Errors: 503 a
/// store down (an admission then lapses at its TTL).
pub async fn leave(state: &AppState, buyer: &Buyer, event_id: i64) -> Result<()> {
    let event = event(state, event_id).await?;
    let Some(terms) = terms(&state.settings, &event) else {
        return Ok(());
    };
    let room = Room {
        state,
        event_id,
        seed: event.queue_seed,
        terms: &terms,
    };
    let ticket = Ticket::read(buyer, event_id);
    let seen = seen(state, event_id, &terms).await?;
    let place = match (&ticket, &seen) {
        (Some(t), Some(s)) => room.place(t, s).unwrap_or(0),
        _ => 0,
    };
    let epoch = ticket.as_ref().map_or("", |t| t.epoch.as_str());
    let token = buyer.admission_token(event_id);
    store(state)?
        .leave(&group(state, event_id), buyer.id(), &token, (place, epoch))
        .await?;
    Ticket::take_back(buyer, event_id);
    Ok(())
}

/// After a purchase of `event_id`: the buyer's turn is over ([`leave`]) unless they still
/// hold seats of it (bought one by one, the rest stay theirs to buy). A failure is logged,
/// not returned: the purchase stands, and the admission lapses at its TTL.
pub async fn purchased(state: &AppState, buyer: &Buyer, event_id: i64) {
    // Without a room there is no turn to end (and no need to read the buyer's holds).
    if !matches!(has_room(state, event_id).await, Ok(true)) {
        return;
    }
    match crate::seats::held_seats(
        &*state.leases,
        &state.settings.lease_namespace,
        buyer,
        event_id,
    )
    .await
    {
        Ok(held) if held.is_empty() => {}
        _ => return,
    }
    if let Err(err) = leave(state, buyer, event_id).await {
        tracing::warn!(%err, event_id, "admission not ended after a purchase; it lapses at its TTL");
    }
}
