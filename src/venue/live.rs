//! `GET /events/{id}/stream`: the seat map's live updates (server-sent events).
//!
//! The stream opens with a `snapshot` (`{"mine": [seat], "held": [seat], "sold": [seat]}`:
//! every held seat in `held`, the viewer's own also in `mine`), then sends one `seat` event
//! per change: `{"seat": 14, "state": "held"}` (someone else's hold), `{"seat": 14,
//! "state": "mine"}` (the viewer's), `{"seat": 14, "state": "available", "why": "released"
//! | "expired"}` or `{"seat": 14, "state": "sold"}`. After any gap (a lost Redis or
//! Postgres connection, a page too slow to keep up) it sends a fresh snapshot; a browser
//! that reconnects gets one too, so pages never need Last-Event-ID.
//!
//! * **The map names no one.** The server knows who holds each seat (the lease's holder
//!   label is the buyer's id); a page is told only held, sold, free, and which holds are
//!   the viewer's, decided by the server for the viewer of each stream (its signed
//!   cookie), so no buyer's id, name or token reaches another browser. The shared work
//!   stays shared: one read and one serialization per change for every viewer; per
//!   stream, only the comparison of a change's holder with the viewer (`for_viewer`)
//!   and the viewer's own seats added to the snapshot.
//! * **One snapshot per change, for every viewer.** The snapshot is built once per
//!   generation of the event's topic ([`crate::live::LiveHub::generation`], which moves
//!   with every message). It is shared ([`super::snapshots`]): ten thousand maps opening
//!   at once, or a resync of all of them, cost one read of the stores, not ten thousand.
//! * **Converges whatever was lost.** A message can be lost where no gap is seen: a sale
//!   committed while the Postgres feed was down, an expiry Redis reports late (it
//!   expires keys lazily and by sampling, and under many volatile keys a lapsed hold's
//!   notification can come long after). So the server keeps what its open maps of each
//!   event show, as they keep it: the shared snapshot with every message since applied
//!   to it, seat by seat ([`super::snapshots`], told of each message by the hub,
//!   [`crate::live::LiveHub::observe`]). Every [`CONVERGE_INTERVAL`] each event with open
//!   maps is read again (the holds filtered by their expiry against the Redis clock, the
//!   store's own record, not by the notification) and compared with that. A seat can
//!   differ for a moment because its message is still on its way, so a difference counts
//!   when the next step finds it again, the same: then the truth is sent to every open
//!   map as a snapshot ([`spawn_convergence`]). However busy the event, an open map is
//!   right again within two steps of a lost message.

use std::collections::HashMap;
use std::convert::Infallible;

use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, Sse};
use futures_util::Stream;

use super::queries;
use crate::events;
use crate::http::buyer::Buyer;
use crate::http::error::{Error, Result};
use crate::http::ids::EventId;
use crate::live::{
    EVENT_TOPIC_PREFIX, LiveMessage, Update, event_of_topic, event_topic, page_stream,
};
use crate::state::AppState;

/// How often an event with open maps is read again and, if the truth moved without a
/// message, sent to them ([`spawn_convergence`]): the bound on how long an open map can
/// stay wrong after a lost message.
pub const CONVERGE_INTERVAL: Duration = Duration::from_secs(3);

/// Every held and sold seat of the event, and which are `viewer`'s, as a `snapshot` event
/// (shared, [`super::snapshots`]); `None` if no such event.
async fn snapshot(state: &AppState, event_id: i64, viewer: &str) -> Result<Option<Event>> {
    let page = (state.snapshots)
        .get(&state.live, event_id, read(state, event_id))
        .await?;
    Ok(page.map(|page| {
        Event::default()
            .event("snapshot")
            .data(page.for_viewer(viewer))
    }))
}

/// Every held and sold seat of the event, read from the stores: `{"held": {seat: holder},
/// "sold": [seat]}` (the server's own: pages get [`super::snapshots::PageSnapshot`]);
/// `None` if no such event. Each hold is scheduled to be read at its
/// expiry ([`crate::live::LapseTouches`]).
async fn read(state: &AppState, event_id: i64) -> Result<Option<serde_json::Value>> {
    let group = crate::seats::event_group(&state.settings.lease_namespace, event_id);
    let (event, sold, holds) = tokio::join!(
        events::find(&state.db, event_id),
        queries::sold_seats(&state.db, event_id),
        state.leases.holders(&group),
    );
    if event?.is_none() {
        return Ok(None);
    }
    let holds = holds?;
    // Every hold the maps show is read at its expiry, so that its lapse reaches them on
    // time: this server may have started after the grant, and never heard it.
    state.lapses.schedule_group(&group, &holds);
    let held: HashMap<String, String> = holds
        .holdings
        .into_iter()
        .map(|h| (h.name, h.holder))
        .collect();
    Ok(Some(serde_json::json!({ "held": held, "sold": sold? })))
}

/// Every [`CONVERGE_INTERVAL`], one convergence step (`Snapshots::converge`) for each
/// event with open maps on this process (see the module docs). From now on the hub tells
/// the snapshots of every message (`Snapshots::observe`). A read that fails (a store
/// down) is tried at the next tick. Ends when the hub closes.
pub fn spawn_convergence(state: AppState) {
    // Every message sent to the maps is applied to what the server keeps of them.
    let snapshots = state.snapshots.clone();
    state.live.observe(Box::new(move |topic, message| {
        snapshots.observe(topic, message)
    }));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(CONVERGE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if state.live.is_closed() {
                return;
            }
            let open: Vec<i64> = (state.live.topics(EVENT_TOPIC_PREFIX).iter())
                .filter_map(|topic| event_of_topic(topic))
                .collect();
            // Events whose maps all closed are forgotten.
            state.snapshots.keep_only(&open);
            for event_id in open {
                let read = read(&state, event_id);
                if let Ok(true) = state.snapshots.converge(&state.live, event_id, read).await {
                    tracing::debug!(event_id, "open maps were behind: sent them a snapshot");
                }
            }
        }
    });
}

/// The page event for a hub message, for `viewer`: a seat change ([`for_viewer`]), or the
/// shared snapshot after a gap or a convergence step (which published the truth with its
/// holders, for the server's own use).
async fn update(state: &AppState, event_id: i64, viewer: &str, message: &LiveMessage) -> Update {
    if message.event != "seat" {
        return Update::from_snapshot(snapshot(state, event_id, viewer).await);
    }
    Update::Send(
        Event::default()
            .event("seat")
            .json_data(for_viewer(&message.data, viewer))
            .expect("JSON"),
    )
}

/// A seat change `{"seat", "state", "holder"?, "why"?}` as the page of `viewer` gets it:
/// without the holder, and a hold's state `mine` when `viewer` is its holder, else
/// `held`.
fn for_viewer(change: &serde_json::Value, viewer: &str) -> serde_json::Value {
    let mut change = change.clone();
    if let Some(fields) = change.as_object_mut()
        && let Some(holder) = fields.remove("holder")
    {
        let state = if holder.as_str() == Some(viewer) {
            "mine"
        } else {
            "held"
        };
        fields.insert("state".into(), state.into());
    }
    change
}

/// `GET /events/{id}/stream`, for the viewer `buyer` (one stream per browser: its tabs
/// share it, and share the cookie). 404 for an unknown event, 400 for a malformed id.
pub(super) async fn stream(
    State(state): State<AppState>,
    buyer: Buyer,
    EventId(event_id): EventId,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let viewer = buyer.id().to_owned();
    // Subscribe first, then read the snapshot: no change can fall between the two.
    let subscription = state
        .live
        .subscribe(&event_topic(event_id))
        .ok_or(Error::StreamsFull)?;
    let first = snapshot(&state, event_id, &viewer)
        .await?
        .ok_or_else(Error::no_such_event)?;
    Ok(page_stream(subscription, first, move |message| {
        let (state, viewer) = (state.clone(), viewer.clone());
        async move { update(&state, event_id, &viewer, &message).await }
    }))
}
