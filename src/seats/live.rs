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
//!   with every message) and shared ([`Snapshots`]): ten thousand maps opening at once, or
//!   a resync of all of them, cost one read of the stores, not ten thousand.
//! * **Converges whatever was lost.** A message can be lost where no gap is seen: a sale
//!   committed while the Postgres feed was down, an expiry Redis reports late (it
//!   expires keys lazily and by sampling, and under many volatile keys a lapsed hold's
//!   notification can come long after). So every [`CONVERGE_INTERVAL`] each event with
//!   open maps is read again (the holds filtered by their expiry against the Redis clock,
//!   the store's own record, not by the notification), and if that differs from what the
//!   maps show, it is sent to them all as a snapshot ([`spawn_convergence`]). What they
//!   show is known when no message was sent since their shared snapshot; while changes
//!   keep coming, the check waits for the first quiet interval.

use std::collections::HashMap;
use std::convert::Infallible;

use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::sse::{Event, Sse};
use futures_util::Stream;

use super::per_event::PerEvent;
use super::{parse_id, queries};
use crate::events;
use crate::http::error::{Error, Result};
use crate::live::{LiveMessage, Update, page_stream};
use crate::state::AppState;

/// How often an event with open maps is read again and, if the truth moved without a
/// message, sent to them ([`spawn_convergence`]): the bound on how long an open map can
/// stay wrong after a lost message.
pub const CONVERGE_INTERVAL: Duration = Duration::from_secs(3);

/// The topic of event `event_id`'s maps.
fn topic(event_id: i64) -> String {
    format!("event:{event_id}")
}

/// The opening snapshot of each event's maps, shared by every viewer while it is
/// current (see the module docs).
#[derive(Default)]
pub struct Snapshots {
    /// Per event: the topic's generation the snapshot was read at, and its data.
    events: PerEvent<(u64, serde_json::Value)>,
}

impl Snapshots {
    /// The event's snapshot data: the shared one if nothing was sent on its topic since it
    /// was read, else read now (by one caller; the others wait for it and share it).
    /// `None` if no such event.
    async fn get(&self, state: &AppState, event_id: i64) -> Result<Option<serde_json::Value>> {
        let slot = self.events.slot(event_id);
        let mut cached = slot.lock().await;
        let Some(generation) = state.live.generation(&topic(event_id)) else {
            return read(state, event_id).await;
        };
        if let Some((at, data)) = &*cached
            && *at == generation
        {
            return Ok(Some(data.clone()));
        }
        // Read at `generation`: a message sent during the read moves the generation on,
        // so the next caller reads again rather than share a view that missed it.
        let fresh = read(state, event_id).await?;
        *cached = fresh.clone().map(|data| (generation, data));
        Ok(fresh)
    }

    /// One convergence step for the event's maps: reads the stores and, if nothing was
    /// sent to the maps since their shared snapshot (so what they show is that snapshot)
    /// and the truth differs from it, sends the truth to them as a snapshot and shares it.
    /// Whether it sent one. If messages were sent since, what the maps show is the
    /// snapshot and those messages, unknown here: the shared snapshot is read again
    /// instead, to compare at the next quiet step.
    async fn converge(&self, state: &AppState, event_id: i64) -> Result<bool> {
        let slot = self.events.slot(event_id);
        let mut cached = slot.lock().await;
        let Some(generation) = state.live.generation(&topic(event_id)) else {
            return Ok(false);
        };
        let Some(data) = read(state, event_id).await? else {
            return Ok(false);
        };
        let shown = cached.as_ref().filter(|(at, _)| *at == generation);
        match shown {
            Some((_, old)) if *old == data => return Ok(false),
            Some(_) => {}
            None => {
                *cached = Some((generation, data));
                return Ok(false);
            }
        }
        let message = LiveMessage {
            event: "snapshot".into(),
            data: data.clone(),
        };
        state.live.publish(&topic(event_id), message);
        // Current as of the message just sent.
        *cached = state
            .live
            .generation(&topic(event_id))
            .map(|generation| (generation, data));
        Ok(true)
    }
}

/// Every held and sold seat of the event, as a `snapshot` event (shared,
/// [`Snapshots`]); `None` if no such event.
async fn snapshot(state: &AppState, event_id: i64) -> Result<Option<Event>> {
    let data = state.snapshots.get(state, event_id).await?;
    Ok(data.map(|data| {
        Event::default()
            .event("snapshot")
            .json_data(data)
            .expect("JSON")
    }))
}

/// Every held and sold seat of the event, read from the stores: `{"held": {seat: holder},
/// "sold": [seat]}`; `None` if no such event.
async fn read(state: &AppState, event_id: i64) -> Result<Option<serde_json::Value>> {
    let group = super::event_group(&state.settings.lease_namespace, event_id);
    let (event, sold, holds) = tokio::join!(
        events::find(&state.db, event_id),
        queries::sold_seats(&state.db, event_id),
        state.leases.holders(&group),
    );
    if event?.is_none() {
        return Ok(None);
    }
    let held: HashMap<String, String> = holds?
        .holdings
        .into_iter()
        .map(|h| (h.name, h.holder))
        .collect();
    Ok(Some(serde_json::json!({ "held": held, "sold": sold? })))
}

/// Every [`CONVERGE_INTERVAL`], one convergence step (`Snapshots::converge`) for each event with open
/// maps on this process (see the module docs). A read that fails (a store down) is tried
/// at the next tick. Ends when the hub closes.
pub fn spawn_convergence(state: AppState) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(CONVERGE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if state.live.is_closed() {
                return;
            }
            for topic in state.live.topics("event:") {
                let Some(event_id) = topic.strip_prefix("event:").and_then(|id| id.parse().ok())
                else {
                    continue;
                };
                if let Ok(true) = state.snapshots.converge(&state, event_id).await {
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
    Path(event): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let event_id = parse_id(&event, "event")?;
    // Subscribe first, then read the snapshot: no change can fall between the two.
    let subscription = state
        .live
        .subscribe(&topic(event_id))
        .ok_or(Error::StreamsFull)?;
    let first = snapshot(&state, event_id)
        .await?
        .ok_or_else(|| Error::NotFound("There is no such event.".into()))?;
    Ok(page_stream(subscription, first, move |message| {
        let state = state.clone();
        async move { update(&state, event_id, &message).await }
    }))
}
