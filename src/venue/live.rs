//! `GET /events/{id}/stream`: the seat map's live updates (server-sent events).
//!
//! The stream opens with a `snapshot` (every held and sold seat), then sends one `seat`
//! event per change: `{"seat": 14, "state": "held", "holder": "<buyer id>"}`,
//! `{"seat": 14, "state": "available", "why": "released" | "expired"}` or
//! `{"seat": 14, "state": "sold"}`. After any gap (a lost Redis or Postgres connection,
//! a page too slow to keep up) it sends a fresh snapshot; a browser that reconnects gets
//! one too, so pages never need Last-Event-ID.
//!
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

/// Every held and sold seat of the event, as a `snapshot` event (shared,
/// [`super::snapshots`]); `None` if no such event.
async fn snapshot(state: &AppState, event_id: i64) -> Result<Option<Event>> {
    let data = (state.snapshots)
        .get(&state.live, event_id, read(state, event_id))
        .await?;
    Ok(data.map(|data| Event::default().event("snapshot").data(&*data)))
}

/// Every held and sold seat of the event, read from the stores: `{"held": {seat: holder},
/// "sold": [seat]}`; `None` if no such event. Each hold is scheduled to be read at its
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

/// The page event for a hub message: a seat change as it is, or a fresh snapshot after
/// a gap.
async fn update(state: &AppState, event_id: i64, message: &LiveMessage) -> Update {
    if message.event == "resync" {
        return Update::from_snapshot(snapshot(state, event_id).await);
    }
    Update::Send(
        Event::default()
            .event(&message.event)
            .json_data(&message.data)
            .expect("JSON"),
    )
}

/// `GET /events/{id}/stream`. 404 for an unknown event, 400 for a malformed id.
pub(super) async fn stream(
    State(state): State<AppState>,
    EventId(event_id): EventId,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    // Subscribe first, then read the snapshot: no change can fall between the two.
    let subscription = state
        .live
        .subscribe(&event_topic(event_id))
        .ok_or(Error::StreamsFull)?;
    let first = snapshot(&state, event_id)
        .await?
        .ok_or_else(Error::no_such_event)?;
    Ok(page_stream(subscription, first, move |message| {
        let state = state.clone();
        async move { update(&state, event_id, &message).await }
    }))
}
