//! The lease feed from a lease store's own stream of changes
//! ([`lease::LeaseStore::changes`]): for etcd, a watch on the event groups' keys. Like
//! the Redis feed it resubscribes after the stream ends and sends `resync`, since changes
//! made meanwhile are not replayed.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use super::listeners::seat_message;
use super::{Feed, LiveHub};

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
