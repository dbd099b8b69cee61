//! The two listeners that feed a [`LiveHub`]: Redis pub/sub (lease events) and Postgres
//! LISTEN (sales, bids, closes). Both reconnect on their own and send `resync` after a
//! gap, since messages sent meanwhile are lost.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use lease::changes::{self, LeaseChange};
use sqlx::PgPool;
use sqlx::postgres::PgListener;

use super::changes::{cooling_message, seat_message};
use super::lapses::LapseTouches;
use super::{Feed, LiveHub, LiveMessage};

/// How often the Redis feed's connection is pinged (the Postgres feed's: after how long
/// without a message), and how long the answer may take before the connection counts as
/// dead (half-open) and is replaced.
const HEARTBEAT: Duration = Duration::from_secs(1);
const HEARTBEAT_DEADLINE: Duration = Duration::from_secs(2);

/// How often the server-wide Redis settings are checked again ([`check_store`]) while the
/// feed is up: another application may change them, a check refused by a busy Redis
/// should not be reported for good.
const STORE_RECHECK: Duration = Duration::from_secs(5);

/// The Postgres feed's heartbeat: a simple query whose text names it, so that round-trip
/// counts can leave it out.
pub const HEARTBEAT_QUERY: &str = "SELECT 'seatlock live heartbeat'";

/// The Postgres NOTIFY channel. Payload: `{"topic": "event:1", "event": "seat", "data": {…}}`.
pub const NOTIFY_CHANNEL: &str = "seatlock_live";

/// Starts both listeners for `hub` on the Tokio runtime: the lease feed (Redis pub/sub
/// when Redis is the lease store, else the store's own stream of changes,
/// `live::changes`) and Postgres LISTEN. `lease_store_url` is the lease store's
/// (`--lease-store-url`, else `--redis-url`); `namespace` is the lease namespace of this
/// deployment (only its event groups are watched); `lapses` is told of every grant heard.
pub fn spawn(
    hub: Arc<LiveHub>,
    leases: Arc<dyn lease::LeaseStore>,
    lapses: Arc<LapseTouches>,
    lease_store_url: String,
    db: PgPool,
    namespace: String,
) {
    if leases.name() == "redis" {
        tokio::spawn(listen_redis(
            hub.clone(),
            lapses,
            lease_store_url,
            namespace,
        ));
    } else {
        tokio::spawn(super::changes::listen(hub.clone(), leases, namespace));
    }
    tokio::spawn(listen_postgres(hub, db));
}

/// Redis: `PSUBSCRIBE` to the event groups' lease channels and the expiry notifications.
async fn listen_redis(
    hub: Arc<LiveHub>,
    lapses: Arc<LapseTouches>,
    redis_url: String,
    namespace: String,
) {
    let prefix = format!("{namespace}:event:");
    let mut first = true;
    loop {
        match redis_session(&hub, &lapses, &redis_url, &prefix, first).await {
            Ok(()) => tracing::warn!("redis pub/sub connection closed; reconnecting"),
            Err(err) => tracing::debug!(error = %err, "redis pub/sub unavailable; retrying"),
        }
        hub.set_feed(Feed::Redis, false);
        first = false;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One connection's worth of Redis messages; returns when the connection ends.
async fn redis_session(
    hub: &LiveHub,
    lapses: &LapseTouches,
    url: &str,
    prefix: &str,
    first: bool,
) -> redis::RedisResult<()> {
    // With Sentinels (`redis+sentinel://`), opening the store asks them for the primary:
    // after a failover the feed subscribes again, and sets the expiry notifications
    // (`check_store`; per server, not replicated), on the new primary.
    let store = lease::connect_async(url, Duration::from_secs(2)).await?;
    let mut manager = store.connection();
    check_store(hub, &mut manager).await;
    // One connection per server that sends events: on a Redis Cluster every node, since
    // each master sends only its own expiries (`RedisStore::pubsub_nodes`).
    let nodes = store.pubsub_nodes().await?;
    let listening = addresses(&nodes);
    let subscribed =
        changes::subscribe(nodes, &format!("{prefix}*"), Duration::from_secs(2)).await?;
    if !first {
        hub.resync_all();
    }
    hub.set_feed(Feed::Redis, true);
    let (mut sinks, streams): (Vec<_>, Vec<_>) = subscribed.into_iter().map(|p| p.split()).unzip();
    // Any node's stream ending ends the session: it subscribes again, everywhere.
    let mut messages = futures_util::stream::select_all(
        streams
            .into_iter()
            .map(|s| s.map(Some).chain(futures_util::stream::iter([None]))),
    );
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    let mut recheck =
        tokio::time::interval_at(tokio::time::Instant::now() + STORE_RECHECK, STORE_RECHECK);
    loop {
        let msg = tokio::select! {
            msg = messages.next() => match msg {
                Some(Some(msg)) => msg,
                _ => return Ok(()),
            },
            _ = recheck.tick() => {
                check_store(hub, &mut manager).await;
                continue;
            }
            _ = heartbeat.tick() => {
                // The servers to listen to changed: the store's Sentinel poll followed a
                // new primary (one the old, still answering, does not know of), or a
                // cluster node failed, was promoted or joined. Subscribe there.
                if let Ok(now) = store.pubsub_nodes().await
                    && addresses(&now) != listening
                {
                    tracing::warn!("the servers that send lease events changed; subscribing there");
                    return Ok(());
                }
                let pings = sinks
                    .iter_mut()
                    .map(|sink| tokio::time::timeout(HEARTBEAT_DEADLINE, sink.ping::<redis::Value>()));
                if !futures_util::future::join_all(pings).await.iter().all(|p| matches!(p, Ok(Ok(_)))) {
                    tracing::warn!("redis pub/sub connection stopped answering; replacing it");
                    return Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into());
                }
                continue;
            }
        };
        let payload: String = msg.get_payload().unwrap_or_default();
        // A waiting room's state after its ticker's step: kept, and sent to the queue
        // pages' streams.
        if let Some(event_id) = room_event(msg.get_channel_name(), &payload, prefix) {
            let data = serde_json::Value::String(payload);
            let room = LiveMessage {
                event: "room".into(),
                data,
            };
            hub.publish_retained(&super::queue_topic(event_id), room);
            continue;
        }
        // A group grant is one message naming every seat: each seat's change goes out.
        for event in changes::parse(msg.get_channel_name(), &payload) {
            let Some((topic, mut message)) = seat_message(&event, prefix) else {
                continue;
            };
            // A lapse under a confirm still paying: the seat cools, and stays taken on the
            // maps until that confirm ends (its end announces a release) or the cooling
            // runs out (the maps' convergence step). One read per lapse; if it fails, the
            // lapse is shown, and the convergence step corrects it.
            if let LeaseChange::Expired { key } = &event
                && changes::cooling_left(&mut manager, key)
                    .await
                    .is_ok_and(|left| !left.is_zero())
            {
                message = cooling_message(message);
            }
            // Its lapse is heard on time, whatever Redis's expiry cycle does.
            if let LeaseChange::Acquired {
                key, expires_at_ms, ..
            } = &event
            {
                lapses.schedule_grant(key.clone(), *expires_at_ms);
            }
            hub.publish(&topic, message);
        }
    }
}

/// The server-wide Redis settings the live pages and the leases depend on, checked at
/// every (re)connection and every [`STORE_RECHECK`], and kept as notes for `/healthz`: expiry notifications (added to
/// the flags other users set, never replacing them; off where `CONFIG` is refused, as on
/// managed Redis: lapsed holds then show when a page reloads or resyncs) and an eviction
/// policy that could drop holds before their TTL.
async fn check_store(hub: &LiveHub, redis: &mut lease::redis::Connection) {
    let notifications = changes::enable_expiry_notifications(redis)
        .await
        .err()
        .map(|err| format!("off, lapsed holds show on reload only (CONFIG refused: {err})"));
    hub.set_note("expiry notifications", notifications);
    let eviction = match changes::eviction_risk(redis).await {
        Ok(None) => None,
        Ok(Some(policy)) => Some(format!(
            "maxmemory-policy {policy} may evict holds before their TTL (use noeviction)"
        )),
        Err(_) => {
            Some("unknown (CONFIG refused): holds may be evicted under memory pressure".into())
        }
    };
    hub.set_note("eviction", eviction);
}

/// The event whose room `payload` (a `room …` message, [`lease::RoomView`]) on
/// `channel` describes, if it is one of this deployment's event groups (`prefix`).
fn room_event(channel: &str, payload: &str, prefix: &str) -> Option<i64> {
    lease::RoomView::parse(payload)?;
    let group = channel.strip_prefix("lease:{")?.strip_suffix("}:~events")?;
    group.strip_prefix(prefix)?.parse().ok()
}

/// The `host:port` of each server, to tell when the servers to listen to change.
fn addresses(nodes: &[redis::Client]) -> Vec<String> {
    nodes
        .iter()
        .map(|node| node.get_connection_info().addr().to_string())
        .collect()
}

/// Postgres: `LISTEN` on [`NOTIFY_CHANNEL`]; each payload names its topic. A connection that
/// brings nothing for [`HEARTBEAT`] is pinged on the spot (a simple query tagged
/// [`HEARTBEAT_QUERY`]); one that does not answer within [`HEARTBEAT_DEADLINE`] is
/// half-open, and is replaced like a closed one.
async fn listen_postgres(hub: Arc<LiveHub>, db: PgPool) {
    loop {
        let mut listener = match PgListener::connect_with(&db).await {
            Ok(listener) => listener,
            Err(err) => {
                tracing::debug!(error = %err, "postgres LISTEN unavailable; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        if listener.listen(NOTIFY_CHANNEL).await.is_err() {
            continue;
        }
        hub.set_feed(Feed::Postgres, true);
        loop {
            // Waiting for a message is dropped only between messages: sqlx keeps partial
            // reads in the connection's buffer.
            let received = match tokio::time::timeout(HEARTBEAT, listener.try_recv()).await {
                Ok(received) => received,
                Err(_) => {
                    if answers(&mut listener).await {
                        continue;
                    }
                    tracing::warn!("postgres LISTEN connection stopped answering; replacing it");
                    hub.set_feed(Feed::Postgres, false);
                    hub.resync_all();
                    break;
                }
            };
            match received {
                Ok(Some(notification)) => {
                    #[derive(serde::Deserialize)]
                    struct Payload {
                        topic: String,
                        #[serde(flatten)]
                        message: LiveMessage,
                    }
                    match serde_json::from_str::<Payload>(notification.payload()) {
                        Ok(p) => hub.publish(&p.topic, p.message),
                        Err(err) => tracing::warn!(error = %err, "malformed live notification"),
                    }
                }
                // The connection dropped; the listener reconnects on the next call, and
                // whatever was sent meanwhile is lost.
                Ok(None) => hub.resync_all(),
                Err(err) => {
                    tracing::debug!(error = %err, "postgres LISTEN failed; reconnecting");
                    hub.set_feed(Feed::Postgres, false);
                    hub.resync_all();
                    break;
                }
            }
        }
    }
}

/// Whether the listener's connection answers [`HEARTBEAT_QUERY`] (a query without
/// arguments: sent as a simple query) within [`HEARTBEAT_DEADLINE`].
async fn answers(listener: &mut PgListener) -> bool {
    let ping = sqlx::Executor::execute(listener, HEARTBEAT_QUERY);
    matches!(
        tokio::time::timeout(HEARTBEAT_DEADLINE, ping).await,
        Ok(Ok(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_events_of_other_groups_are_ignored() {
        let key = lease::LeaseKey::new("ns:event:3", "77").unwrap();
        let (topic, message) = seat_message(&LeaseChange::Expired { key }, "ns:event:").unwrap();
        assert_eq!(topic, "event:3");
        assert_eq!(message.data["state"], "available");
        let other = lease::LeaseKey::new("ns:auction:3", "lock").unwrap();
        assert!(seat_message(&LeaseChange::Released { key: other }, "ns:event:").is_none());
    }
}
