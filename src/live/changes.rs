//! The lease feed from a lease store's own stream of changes
//! ([`lease::LeaseStore::changes`]): for etcd, a watch on the event groups' keys. Like
//! the Redis feed it resubscribes after the stream ends and sends `resync`, since changes
//! made meanwhile are not replayed. Both feeds turn a lease change on a seat into the
//! same page message ([`seat_message`]).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use lease::changes::LeaseChange;

use super::{Feed, LiveHub, LiveMessage};

/// Watches the groups `<namespace>:event:*` for as long as the server runs.
pub(super) async fn listen(
    hub: Arc<LiveHub>,
    leases: Arc<dyn lease::LeaseStore>,
    namespace: String,
) {
    let prefix = format!("{namespace}:event:");
    let mut first = true;
    loop {
        match leases.changes(&prefix).await {
            Ok(mut changes) => {
                if !first {
                    hub.resync_all();
                }
                hub.set_feed(Feed::Redis, true);
                while let Some(change) = changes.next().await {
                    if let Some((topic, message)) = seat_message(&change, &prefix) {
                        hub.publish(&topic, message);
                    }
                }
                tracing::warn!(
                    store = leases.name(),
                    "lease change stream ended; resubscribing"
                );
            }
            Err(err) => tracing::debug!(error = %err, "lease change stream unavailable; retrying"),
        }
        hub.set_feed(Feed::Redis, false);
        first = false;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The page message for a seat whose lease lapsed while its confirm still pays, in place
/// of `expired`'s (`message`): the seat cools, so it is shown taken, by no one
/// (docs/time-to-pay.md). The confirm's end announces it released.
pub(super) fn cooling_message(message: LiveMessage) -> LiveMessage {
    let seat = message.data["seat"].clone();
    LiveMessage {
        event: message.event,
        data: serde_json::json!({"seat": seat, "state": "held", "holder": ""}),
    }
}

/// The page message for a lease event on a seat of an event group `<prefix><event id>`.
pub(super) fn seat_message(event: &LeaseChange, prefix: &str) -> Option<(String, LiveMessage)> {
    let key = event.key();
    let event_id: i64 = key.group().strip_prefix(prefix)?.parse().ok()?;
    let seat: i64 = key.name().parse().ok()?;
    let data = match event {
        LeaseChange::Acquired { holder, .. } => {
            serde_json::json!({"seat": seat, "state": "held", "holder": holder})
        }
        LeaseChange::Released { .. } => {
            serde_json::json!({"seat": seat, "state": "available", "why": "released"})
        }
        LeaseChange::Expired { .. } => {
            serde_json::json!({"seat": seat, "state": "available", "why": "expired"})
        }
    };
    Some((
        super::event_topic(event_id),
        LiveMessage {
            event: "seat".into(),
            data,
        },
    ))
}
