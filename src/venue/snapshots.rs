//! What each event's open seat maps show, kept by the server, and the snapshot they open
//! on, shared ([`Snapshots`]). The stream that uses them is [`super::live`], whose module
//! docs say why.
//!
//! The server reads who holds each seat (it needs it to tell each viewer which holds are
//! theirs, and to keep what the maps show); a page is never told: its snapshot is the
//! shared part, which seats are held and sold, and the viewer's own holds
//! ([`PageSnapshot::for_viewer`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use super::per_event::PerEvent;
use crate::http::error::Result;
use crate::live::{LiveHub, LiveMessage, event_of_topic, event_topic};

/// The opening snapshot of each event's maps, shared by every viewer while it is
/// current, and what the open maps show (see the module docs).
#[derive(Default)]
pub struct Snapshots {
    /// Per event: the topic's generation the snapshot was read at, and the snapshot, its
    /// shared part serialized once for every stream that opens on it.
    events: PerEvent<(u64, Arc<PageSnapshot>)>,
    /// Per event with open maps: what they show. Kept by [`Snapshots::observe`] under the
    /// hub's lock, so never lock the hub while holding it.
    shown: Mutex<HashMap<i64, Shown>>,
}

/// One seat's state on a map, where it is not available: `held <holder>` or `sold`.
type SeatStates = BTreeMap<String, String>;

/// A snapshot as pages get it: `{"mine": [seat], "held": [seat], "sold": [seat]}`, every
/// held seat in `held` and the viewer's own also in `mine`. The shared part is serialized
/// once (the arena's is some 100 kB) and only `mine` is the viewer's: no holder is named.
pub struct PageSnapshot {
    /// `"held": […], "sold": […]}`: the JSON after `{"mine": […],`.
    shared: String,
    /// The seats of each holder, as JSON numbers.
    by_holder: HashMap<String, Vec<String>>,
}

impl PageSnapshot {
    /// The page snapshot of a snapshot's data `{"held": {seat: holder}, "sold": [seat]}`.
    fn new(data: &serde_json::Value) -> PageSnapshot {
        let mut held = Vec::new();
        let mut by_holder: HashMap<String, Vec<String>> = HashMap::new();
        for (seat, holder) in data["held"].as_object().into_iter().flatten() {
            let Ok(seat) = seat.parse::<i64>() else {
                continue;
            };
            held.push(seat);
            let holder = holder.as_str().unwrap_or_default().to_owned();
            by_holder.entry(holder).or_default().push(seat.to_string());
        }
        let shared = serde_json::json!({ "held": held, "sold": data["sold"] }).to_string();
        PageSnapshot {
            // `{"held":…}` less its opening brace, which `for_viewer` writes.
            shared: shared[1..].to_owned(),
            by_holder,
        }
    }

    /// The snapshot's JSON for the viewer whose buyer id is `viewer`: the shared part, and
    /// in `mine` the seats `viewer` holds.
    pub fn for_viewer(&self, viewer: &str) -> String {
        let mine = self.by_holder.get(viewer).map_or(&[][..], Vec::as_slice);
        format!("{{\"mine\":[{}],{}", mine.join(","), self.shared)
    }
}

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
    /// Forgets the events not in `open`: their maps all closed.
    pub(super) fn keep_only(&self, open: &[i64]) {
        (self.shown.lock().expect("shown lock")).retain(|id, _| open.contains(id));
    }

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
        live: &LiveHub,
        event_id: i64,
        generation: u64,
        data: &serde_json::Value,
    ) {
        if live.generation(&event_topic(event_id)) != Some(generation) {
            return;
        }
        let mut shown = self.shown.lock().expect("shown lock");
        shown
            .entry(event_id)
            .or_insert_with(|| Shown::new(seat_states(data)));
    }

    /// The event's snapshot for pages.
    /// It is the shared one if nothing was sent on its topic, in `live`, since it was read.
    /// Else `read` reads it now: one caller reads, and the others wait for it and share it.
    /// `read` is a future, so it does nothing unless it is awaited.
    /// `None` if no such event.
    pub(super) async fn get(
        &self,
        live: &LiveHub,
        event_id: i64,
        read: impl Future<Output = Result<Option<serde_json::Value>>>,
    ) -> Result<Option<Arc<PageSnapshot>>> {
        let generation = live.generation(&event_topic(event_id));
        let page = async {
            let Some(data) = read.await? else {
                return Ok(None);
            };
            if let Some(generation) = generation {
                self.start_showing(live, event_id, generation, &data);
            }
            Ok(Some(Arc::new(PageSnapshot::new(&data))))
        };
        self.events.read_at(event_id, generation, page).await
    }

    /// One convergence step for the event's maps. Returns whether it sent a snapshot.
    /// `read` reads the stores, and the truth is compared with what the maps show.
    /// A seat may differ as it did at the last step. Then the truth goes to the maps
    /// through `live`, as a snapshot (each stream sends its page the shared one, with the
    /// viewer's own holds), and is shared.
    pub(super) async fn converge(
        &self,
        live: &LiveHub,
        event_id: i64,
        read: impl Future<Output = Result<Option<serde_json::Value>>>,
    ) -> Result<bool> {
        let Some(generation) = live.generation(&event_topic(event_id)) else {
            self.shown.lock().expect("shown lock").remove(&event_id);
            return Ok(false);
        };
        let Some(data) = read.await? else {
            return Ok(false);
        };
        let truth = seat_states(&data);
        let behind = {
            let mut shown = self.shown.lock().expect("shown lock");
            let Some(maps) = shown.get_mut(&event_id) else {
                drop(shown);
                self.start_showing(live, event_id, generation, &data);
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
        live.publish(&event_topic(event_id), message);
        // Current as of the message just sent.
        *cached = live
            .generation(&event_topic(event_id))
            .map(|generation| (generation, Arc::new(PageSnapshot::new(&data))));
        Ok(true)
    }
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
