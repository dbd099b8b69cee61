//! The on-sale's waiting room: at most N buyers shop an event at once; the rest wait in a
//! first-come, first-served queue shared by every server (Ticketmaster's Smart Queue,
//! Queue-it, Cloudflare's and AWS's waiting rooms all have this shape). The room, its
//! admissions (each one a lease) and the check at every hold are the lease library's
//! ([`lease::room`]); this module decides which events have one and with what terms,
//! keeps each buyer's admission token in their session, and serves the queue page
//! (`routes`).
//!
//! The rules, in one place:
//! * an event has a room when its `waiting_room_shoppers` (migration 0010), else
//!   `--waiting-room-shoppers`, is above 0;
//! * the map page (`GET /events/{id}`) is shown only to an admitted buyer, and each view
//!   renews the admission (`--admission-ttl-ms`, up to twice that from the admission);
//!   anyone else is sent to the queue page, whose polls keep their place; a new admission
//!   is an [`ARRIVAL_WINDOW`] until the buyer opens a page with the session they queued
//!   with;
//! * a hold needs a live admission, checked by Redis in the hold's own script (refused
//!   `not_admitted` otherwise); a hold already granted keeps its own TTL and fence, so a
//!   buyer whose admission lapses can still buy what they hold, but not take more;
//! * a checkout, a confirm that leaves the buyer holding nothing more of the event, or
//!   the Leave button ends the admission at once, freeing the place for the next buyer;
//! * the per-buyer limit (`--max-seats-per-buyer`) is still counted per buyer, and a
//!   new buyer (a fresh cookie jar) has no admission: they join the back of the queue.

mod routes;

pub use routes::router;

use std::time::Duration;

use lease::{Entry, Lease, LeaseError, LeaseKey, OwnerToken, RoomTerms};

use super::catalog::EventSeats;
use crate::config::Settings;
use crate::http::buyer::Buyer;
use crate::http::error::{Error, Result};
use crate::state::{AppState, RoomStore};
use crate::telemetry;

/// A queued buyer whose page has not asked for this long has left (closed the tab):
/// their place goes. The queue page asks every [`POLL_INTERVAL`] while it streams, and
/// reloads every 10 s without JavaScript.
pub const QUEUE_GRACE: Duration = Duration::from_secs(15);

/// A new admission lasts this long until the buyer is here: opens the map (or any page
/// of the event) with the session they queued with. So a buyer admitted while away (a
/// closed tab, a frozen page), or a visitor that never comes back (a crawler, a link
/// preview, a bot without cookies), holds a place for a minute, not a whole admission.
pub const ARRIVAL_WINDOW: Duration = Duration::from_secs(60);

/// How often an open queue page asks the room where its buyer stands.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

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
        on_sale_at_ms: event.on_sale_at_ms().unwrap_or(0),
        grace: QUEUE_GRACE,
        arrival_window: ARRIVAL_WINDOW,
    })
}

/// The room's store, or a 503 naming why there is none (an event with a room of its own
/// while the leases are on etcd).
fn store(state: &AppState) -> Result<&RoomStore> {
    state.waiting_room.as_ref().ok_or(Error::Unavailable(
        "The waiting room (it needs the Redis lease store)",
    ))
}

/// The catalog's record of event `event_id`: 404 if there is none.
pub(crate) async fn event(state: &AppState, event_id: i64) -> Result<std::sync::Arc<EventSeats>> {
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

/// One step of `buyer` into event `event_id`'s room ([`lease::LeaseClient::enter`], one
/// Redis round trip): queues the buyer once and keeps their place, or, on a `visit` (a
/// map view) by a buyer whose session existed before this request, makes or renews
/// their full admission; a poll, or a brand-new session's first view, renews nothing.
/// `None` if the event has no room. Errors: 404 no such event, 503 a store down.
pub async fn enter(
    state: &AppState,
    buyer: &Buyer,
    event_id: i64,
    visit: bool,
) -> Result<Option<Entry>> {
    let event = event(state, event_id).await?;
    let Some(terms) = terms(&state.settings, &event) else {
        return Ok(None);
    };
    let group = super::event_group(&state.settings.lease_namespace, event_id);
    let token = buyer.admission_token(event_id);
    let here = visit && !buyer.is_new();
    let entered = store(state)?.enter(&group, &token, &terms, here).await?;
    telemetry::room_entered(event_id, &entered);
    Ok(Some(entered.entry))
}

/// `buyer` leaves event `event_id`'s room, if it has one and they are in it: their
/// admission ends at once (after a purchase, or the Leave button). Errors: 503 a store
/// down (the admission then lapses at its TTL).
pub async fn leave(state: &AppState, buyer: &Buyer, event_id: i64) -> Result<()> {
    let event = event(state, event_id).await?;
    if terms(&state.settings, &event).is_none() {
        return Ok(());
    }
    let group = super::event_group(&state.settings.lease_namespace, event_id);
    let token = buyer.admission_token(event_id);
    store(state)?.leave(&group, &token).await?;
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
    match crate::seats::cart::held_seats(state, buyer, event_id).await {
        Ok(held) if held.is_empty() => {}
        _ => return,
    }
    if let Err(err) = leave(state, buyer, event_id).await {
        tracing::warn!(%err, event_id, "admission not ended after a purchase; it lapses at its TTL");
    }
}

/// Takes leases on `keys` (seats of event `event_id`, one group) for `buyer`: behind the event's
/// room when it has one ([`lease::LeaseClient::acquire_admitted`]: refused
/// [`LeaseError::NotAdmitted`] without a live admission), else
/// [`lease::LeaseStore::acquire_all`]. The outer error: 404 no such event, the buyer's
/// session, or a 503 for a room without its store; the inner one: the lease store's
/// answer.
pub async fn acquire_seats(
    state: &AppState,
    buyer: &Buyer,
    event_id: i64,
    keys: &[LeaseKey],
    ttl: Duration,
) -> Result<std::result::Result<Vec<Lease>, LeaseError>> {
    let limit = Some(state.settings.max_seats_per_buyer);
    if terms(&state.settings, &*event(state, event_id).await?).is_none() {
        return Ok(state.leases.acquire_all(keys, buyer.id(), ttl, limit).await);
    }
    let admission: OwnerToken = buyer.admission_token(event_id);
    Ok(store(state)?
        .acquire_admitted(keys, buyer.id(), ttl, limit, &admission)
        .await)
}
