//! What this server knows of each event's room, in memory: the state the ticker last
//! published (kept by the live hub, [`crate::live::LiveHub::retained`]), the pace the
//! frontier moves at, and the pre-queue's drawn order.
//!
//! A queued browser's page, poll or stream tick reads only this. The ticker publishes
//! once a tick; a server that has not heard from it for a few ticks (its pub/sub
//! connection was replaced, the ticker moved) reads the room once, for every caller
//! at once, at most once a tick.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lease::{Place, RoomView};

use crate::http::error::Result;
use crate::live::{LiveHub, LiveMessage, queue_topic};

/// How often the ticker steps each room, and so how often the frontier can move.
pub(super) const TICK: Duration = Duration::from_secs(1);

/// State older than this is read again: the ticker has missed a few ticks.
const STALE: Duration = Duration::from_secs(3);

/// How far back the frontier's pace is measured.
const PACE_OVER_MS: u64 = 60_000;

/// The room's state as this server knows it, and how long ago it was heard or read.
#[derive(Clone, Debug)]
pub(super) struct Seen {
    pub view: RoomView,
    pub age: Duration,
}

impl Seen {
    /// The room as a ticket's join left it, before any tick: nobody's turn has come.
    /// The ticket is of room `epoch`, at `place`.
    pub(super) fn empty(epoch: &str, place: Place) -> Seen {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let (on_sale, number) = match place {
            Place::Line(n) => (true, n),
            Place::PreQueue(k) => (false, k),
        };
        Seen {
            view: RoomView {
                epoch: epoch.to_owned(),
                frontier: 0,
                issued: number,
                prequeue: if on_sale { 0 } else { number },
                on_sale,
                shopping: 0,
                at_ms: now_ms,
            },
            age: Duration::ZERO,
        }
    }
}

/// One event's room on this server.
#[derive(Default)]
struct EventRoom {
    /// When this server last read the room from Redis: one read at a time, at most one
    /// a tick.
    read: tokio::sync::Mutex<Option<Instant>>,
    /// Whether this server runs a ticker for the room (it contends for the lease).
    ticking: std::sync::OnceLock<()>,
    /// The pre-queue's order once drawn, and the pre-queue's size it was drawn for.
    order: Mutex<Option<(u64, Arc<Vec<u64>>)>>,
    /// (Redis time, frontier) of the states seen lately, oldest first.
    pace: Mutex<VecDeque<(u64, u64)>>,
}

/// Every event's room on this server (see the module docs).
#[derive(Default)]
pub struct Rooms {
    events: Mutex<HashMap<i64, Arc<EventRoom>>>,
}

/// The hub message that carries `view` to the queue streams.
pub(super) fn message(view: &RoomView) -> LiveMessage {
    LiveMessage {
        event: "room".into(),
        data: serde_json::Value::String(view.message()),
    }
}

/// The room state a hub message carries, if it is one.
pub(super) fn view_of(message: &LiveMessage) -> Option<RoomView> {
    (message.event == "room")
        .then(|| RoomView::parse(message.data.as_str()?))
        .flatten()
}

impl Rooms {
    fn room(&self, event_id: i64) -> Arc<EventRoom> {
        let mut events = self.events.lock().expect("rooms lock");
        events.entry(event_id).or_default().clone()
    }

    /// The state last heard of event `event_id`'s room, kept by the `live` hub.
    /// No store is asked.
    pub(super) fn heard(&self, live: &LiveHub, event_id: i64) -> Option<Seen> {
        let (at, message) = live.retained(&queue_topic(event_id))?;
        let view = view_of(&message)?;
        self.note_pace(event_id, &view);
        Some(Seen {
            view,
            age: at.elapsed(),
        })
    }

    /// The room of event `event_id` as this server knows it.
    /// It is what the ticker last published, heard through `live`.
    /// If that is older than a few ticks, `read_room` reads it now.
    /// That read is one round trip, shared, at most one a tick.
    /// `start_ticker` starts this server's ticker for the room, on first use only.
    /// `None` if the room has no state yet. Errors: 503 Redis down, on a read.
    pub(super) async fn seen(
        &self,
        live: &LiveHub,
        event_id: i64,
        start_ticker: impl FnOnce(),
        read_room: impl Future<Output = Result<Option<RoomView>>>,
    ) -> Result<Option<Seen>> {
        let room = self.room(event_id);
        room.ticking.get_or_init(start_ticker);
        match self.heard(live, event_id) {
            Some(seen) if seen.age < STALE => Ok(Some(seen)),
            _ => self.read(live, event_id, &room, read_room).await,
        }
    }

    /// The room of event `event_id` read now by `read_room`, unless it was read within
    /// the tick. Then it is what was heard. For a ticket of an epoch this server has not
    /// heard of.
    pub(super) async fn refresh(
        &self,
        live: &LiveHub,
        event_id: i64,
        read_room: impl Future<Output = Result<Option<RoomView>>>,
    ) -> Result<Option<Seen>> {
        self.read(live, event_id, &self.room(event_id), read_room)
            .await
    }

    /// Runs `read_room` and publishes what it read on `live`, unless another caller just
    /// did. A future does nothing until awaited, so a skipped read costs nothing.
    async fn read(
        &self,
        live: &LiveHub,
        event_id: i64,
        room: &EventRoom,
        read_room: impl Future<Output = Result<Option<RoomView>>>,
    ) -> Result<Option<Seen>> {
        let mut last = room.read.lock().await;
        // Another caller read, or the ticker was heard, while this one waited.
        if last.is_some_and(|at| at.elapsed() < TICK) {
            return Ok(self.heard(live, event_id));
        }
        *last = Some(Instant::now());
        let Some(view) = read_room.await? else {
            return Ok(None);
        };
        live.publish_retained(&queue_topic(event_id), message(&view));
        Ok(self.heard(live, event_id))
    }

    /// The pre-queue's places in join order, drawn from `seed` once the sale opened:
    /// `order[k - 1]` is the k-th member's place ([`lease::room::prequeue_order`]).
    pub(super) fn prequeue_order(
        &self,
        event_id: i64,
        seed: u64,
        view: &RoomView,
    ) -> Arc<Vec<u64>> {
        let room = self.room(event_id);
        let mut order = room.order.lock().expect("order lock");
        match &*order {
            Some((size, drawn)) if *size == view.prequeue => drawn.clone(),
            _ => {
                let drawn = Arc::new(lease::room::prequeue_order(seed, view.prequeue));
                *order = Some((view.prequeue, drawn.clone()));
                drawn
            }
        }
    }

    /// Records where the frontier was at `view`'s time, for [`Rooms::pace`].
    fn note_pace(&self, event_id: i64, view: &RoomView) {
        let room = self.room(event_id);
        let mut pace = room.pace.lock().expect("pace lock");
        if pace.back().is_some_and(|(at, _)| *at >= view.at_ms) {
            return;
        }
        pace.push_back((view.at_ms, view.frontier));
        while pace
            .front()
            .is_some_and(|(at, _)| at + PACE_OVER_MS < view.at_ms)
        {
            pace.pop_front();
        }
    }

    /// Turns given per second over the last minute, if the frontier moved in it.
    pub(super) fn pace(&self, event_id: i64) -> Option<f64> {
        let room = self.room(event_id);
        let pace = room.pace.lock().expect("pace lock");
        let (&(from_ms, from), &(to_ms, to)) = (pace.front()?, pace.back()?);
        (to > from && to_ms > from_ms)
            .then(|| (to - from) as f64 * 1_000.0 / (to_ms - from_ms) as f64)
    }
}
