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
//!   notification can come long after). So the server keeps what its open maps of each
//!   event show, as they keep it: the shared snapshot with every message since applied
//!   to it, seat by seat ([`Snapshots`], told of each message by the hub,
//!   [`crate::live::LiveHub::observe`]). Every [`CONVERGE_INTERVAL`] each event with open
//!   maps is read again (the holds filtered by their expiry against the Redis clock, the
//!   store's own record, not by the notification) and compared with that. A seat can
//!   differ for a moment because its message is still on its way, so a difference counts
//!   when the next step finds it again, the same: then the truth is sent to every open
//!   map as a snapshot ([`spawn_convergence`]). However busy the event, an open map is
//!   right again within two steps of a lost message.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, Sse};
use futures_util::Stream;

use super::per_event::PerEvent;
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

/// The opening snapshot of each event's maps, shared by every viewer while it is
/// current, and what the open maps show (see the module docs).
#[derive(Default)]
pub struct Snapshots {
    /// Per event: the topic's generation the snapshot was read at, and its data as JSON,
    /// serialized once for every stream that opens on it (the arena's is some 300 kB).
    events: PerEvent<(u64, Arc<str>)>,
    /// Per event with open maps: what they show. Kept by [`Snapshots::observe`] under the
    /// hub's lock, so never lock the hub while holding it.
    shown: Mutex<HashMap<i64, Shown>>,
}

/// One seat's state on a map, where it is not available: `held <holder>` or `sold`.
type SeatStates = BTreeMap<String, String>;

/// What an event's open maps show, and the differences from the truth that the last
/// convergence step found (seat → (truth, shown); `None`: available).
struct Shown {
    seats: SeatStates,
    suspects: BTreeMap<String, (Option<String>, Option<String>)>,
}

impl Shown {
    fn new(seats: SeatStates) -> Shown {
        Shown {
            seats,
            suspects: BTreeMap::new(),
        }
    }
}

/// A snapshot's data `{"held": {seat: holder}, "sold": [seat]}` seat by seat.
fn seat_states(data: &serde_json::Value) -> SeatStates {
    let mut seats = SeatStates::new();
    if let Some(held) = data["held"].as_object() {
        for (seat, holder) in held {
            let holder = holder.as_str().unwrap_or_default();
            seats.insert(seat.clone(), format!("held {holder}"));
        }
    }
    for seat in data["sold"].as_array().into_iter().flatten() {
        seats.insert(seat.to_string(), "sold".into());
    }
    seats
}

impl Snapshots {
    /// Applies `message`, just sent on `topic`, to what that event's open maps show, as
    /// their pages do (`web/app.js`): a seat change to its seat, a snapshot in place of
    /// everything; after a resync what they show is not known until the next stable read.
    pub fn observe(&self, topic: &str, message: &LiveMessage) {
        let Some(event_id) = event_of_topic(topic) else {
            return;
        };
        let mut shown = self.shown.lock().expect("shown lock");
        match message.event.as_str() {
            "snapshot" => {
                shown.insert(event_id, Shown::new(seat_states(&message.data)));
            }
            "seat" => {
                let Some(maps) = shown.get_mut(&event_id) else {
                    return;
                };
                let seat = message.data["seat"].to_string();
                match message.data["state"].as_str() {
                    Some("held") => {
                        let holder = message.data["holder"].as_str().unwrap_or_default();
                        maps.seats.insert(seat, format!("held {holder}"))
                    }
                    Some("sold") => maps.seats.insert(seat, "sold".into()),
                    _ => maps.seats.remove(&seat),
                };
            }
            _ => {
                shown.remove(&event_id);
            }
        }
    }

    /// Starts keeping what the event's maps show from `data`, read at `generation`, if
    /// nothing is kept yet and no message was sent since (so the maps opened on it show
    /// exactly it).
    fn start_showing(
        &self,
        state: &AppState,
        event_id: i64,
        generation: u64,
        data: &serde_json::Value,
    ) {
        if state.live.generation(&event_topic(event_id)) != Some(generation) {
            return;
        }
        let mut shown = self.shown.lock().expect("shown lock");
        shown
            .entry(event_id)
            .or_insert_with(|| Shown::new(seat_states(data)));
    }

    /// The event's snapshot data as JSON: the shared one if nothing was sent on its topic
    /// since it was read, else read now (by one caller; the others wait for it and share
    /// it). `None` if no such event.
    async fn get(&self, state: &AppState, event_id: i64) -> Result<Option<Arc<str>>> {
        let slot = self.events.slot(event_id);
        let mut cached = slot.lock().await;
        let Some(generation) = state.live.generation(&event_topic(event_id)) else {
            return Ok(read(state, event_id).await?.map(|data| json(&data)));
        };
        if let Some((at, data)) = &*cached
            && *at == generation
        {
            return Ok(Some(data.clone()));
        }
        // Read at `generation`: a message sent during the read moves the generation on,
        // so the next caller reads again rather than share a view that missed it.
        let Some(data) = read(state, event_id).await? else {
            *cached = None;
            return Ok(None);
        };
        self.start_showing(state, event_id, generation, &data);
        let data = json(&data);
        *cached = Some((generation, data.clone()));
        Ok(Some(data))
    }

    /// One convergence step for the event's maps: reads the stores, compares the truth
    /// with what the maps show, and if a seat differs as it did at the last step, sends
    /// the truth to them as a snapshot and shares it. Whether it sent one.
    async fn converge(&self, state: &AppState, event_id: i64) -> Result<bool> {
        let Some(generation) = state.live.generation(&event_topic(event_id)) else {
            self.shown.lock().expect("shown lock").remove(&event_id);
            return Ok(false);
        };
        let Some(data) = read(state, event_id).await? else {
            return Ok(false);
        };
        let truth = seat_states(&data);
        let behind = {
            let mut shown = self.shown.lock().expect("shown lock");
            let Some(maps) = shown.get_mut(&event_id) else {
                drop(shown);
                self.start_showing(state, event_id, generation, &data);
                return Ok(false);
            };
            let differs = differences(&truth, &maps.seats);
            let behind = differs
                .iter()
                .any(|(seat, pair)| maps.suspects.get(seat) == Some(pair));
            maps.suspects = differs;
            behind
        };
        if !behind {
            return Ok(false);
        }
        let slot = self.events.slot(event_id);
        let mut cached = slot.lock().await;
        let message = LiveMessage {
            event: "snapshot".into(),
            data: data.clone(),
        };
        state.live.publish(&event_topic(event_id), message);
        // Current as of the message just sent.
        *cached = state
            .live
            .generation(&event_topic(event_id))
            .map(|generation| (generation, json(&data)));
        Ok(true)
    }
}

/// `data` as JSON text, once, for every stream that opens on it.
fn json(data: &serde_json::Value) -> Arc<str> {
    data.to_string().into()
}

/// The seats whose state differs between `truth` and `shown`: seat → (truth, shown).
fn differences(
    truth: &SeatStates,
    shown: &SeatStates,
) -> BTreeMap<String, (Option<String>, Option<String>)> {
    let seats = truth.keys().chain(shown.keys());
    seats
        .filter(|seat| truth.get(*seat) != shown.get(*seat))
        .map(|seat| {
            (
                seat.clone(),
                (truth.get(seat).cloned(), shown.get(seat).cloned()),
            )
        })
        .collect()
}

/// Every held and sold seat of the event, as a `snapshot` event (shared,
/// [`Snapshots`]); `None` if no such event.
async fn snapshot(state: &AppState, event_id: i64) -> Result<Option<Event>> {
    let data = state.snapshots.get(state, event_id).await?;
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

/// Every [`CONVERGE_INTERVAL`], one convergence step (`Snapshots::converge`) for each event with open
/// maps on this process (see the module docs); from now on the hub tells the snapshots
/// of every message ([`Snapshots::observe`]). A read that fails (a store down) is tried
/// at the next tick. Ends when the hub closes.
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
            (state.snapshots.shown.lock().expect("shown lock")).retain(|id, _| open.contains(id));
            for event_id in open {
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
