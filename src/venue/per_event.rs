//! One value per event (or auction item), each behind its own async lock: the shared
//! reads of the seat maps ([`super::board::Boards`]), of their streams' snapshots
//! ([`super::snapshots::Snapshots`]) and of the auction's item pages
//! ([`crate::auction::SharedReads`]). Holding an event's lock while reading the stores makes
//! the read single-flight: of a crowd arriving at once, one caller reads and the others
//! wait for it and share what it read; other events are not held up. A read is shared
//! for as long as its live topic's generation stays the one it was read at
//! ([`PerEvent::read_at`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One event's slot: empty until the first read.
pub(crate) type Slot<T> = Arc<tokio::sync::Mutex<Option<T>>>;

/// The slots, by event id.
pub(crate) struct PerEvent<T> {
    events: Mutex<HashMap<i64, Slot<T>>>,
}

impl<T> Default for PerEvent<T> {
    fn default() -> Self {
        PerEvent {
            events: Mutex::default(),
        }
    }
}

impl<T> PerEvent<T> {
    /// Event `event_id`'s slot, made empty on first use.
    pub(crate) fn slot(&self, event_id: i64) -> Slot<T> {
        let mut events = self.events.lock().expect("per-event lock");
        events.entry(event_id).or_default().clone()
    }

    /// Empties event `event_id`'s slot: its next use reads again.
    pub(crate) fn forget(&self, event_id: i64) {
        self.events
            .lock()
            .expect("per-event lock")
            .remove(&event_id);
    }
}

impl<V: Clone> PerEvent<(u64, V)> {
    /// Event `event_id`'s value as of its live topic's `generation`
    /// ([`crate::live::LiveHub::generation`]): the one kept if it was read at that
    /// generation, else what `read` reads now, kept for the callers after. `read` is a
    /// future: it does nothing unless it is awaited, and of a crowd asking at once one
    /// caller awaits it while the others wait for it and share its value.
    ///
    /// `generation` is `None` when nobody listens on the topic: nothing tells then that
    /// a kept value went stale, so each caller reads and nothing is kept. `read`'s
    /// `Ok(None)` (no such event) and its errors are passed on and keep nothing.
    pub(crate) async fn read_at<E>(
        &self,
        event_id: i64,
        generation: Option<u64>,
        read: impl Future<Output = Result<Option<V>, E>>,
    ) -> Result<Option<V>, E> {
        let slot = self.slot(event_id);
        let mut kept = slot.lock().await;
        if let (Some(now), Some((at, value))) = (generation, &*kept)
            && *at == now
        {
            return Ok(Some(value.clone()));
        }
        // Read at `generation`: a message sent during the read moves the generation on,
        // so the next caller reads again rather than share a read that missed it.
        *kept = None;
        let value = read.await?;
        *kept = generation.zip(value.clone());
        Ok(value)
    }
}
