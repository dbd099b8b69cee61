//! One value per event (or auction item), each behind its own async lock: the shared
//! reads of the seat maps ([`super::board::Boards`]), of their streams' snapshots
//! ([`super::snapshots::Snapshots`]) and of the auction's item pages
//! ([`crate::auction::SharedReads`]). Holding an event's lock while reading the stores makes
//! the read single-flight: of a crowd arriving at once, one caller reads and the others
//! wait for it and share what it read; other events are not held up.

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
