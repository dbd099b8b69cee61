//! Live updates: seat changes and auction bids pushed to open pages over server-sent
//! events, whichever server process made the change.
//!
//! Each change is announced by the store that makes it, in the same atomic step:
//!
//! * holds and releases: the lease scripts `PUBLISH` on the group's Redis channel
//!   ([`lease::changes`]); lapsed holds: Redis keyspace expiry notifications, on time
//!   because each key is read just after its expiry ([`LapseTouches`]) (with etcd as the
//!   lease store: a watch on the event groups' keys, [`lease::LeaseStore::changes`]);
//! * sales, bids and auction closes: `pg_notify` on [`NOTIFY_CHANNEL`] inside the statement
//!   that writes them, delivered by Postgres only if the transaction commits.
//!
//! Every server process runs one [`LiveHub`]: a Redis `PSUBSCRIBE` and a Postgres
//! `LISTEN`, fanned out to the page streams of that process through in-memory broadcast
//! channels, one per topic (`event:<id>`, `auction:<id>`). Pub/sub and NOTIFY are not
//! durable: after either connection drops the hub sends `resync`, and pages (and every
//! newly connected stream) get a fresh snapshot. The Redis connection is pinged every
//! second and replaced when an answer takes over two seconds (a half-open connection
//! never closes by itself); `/healthz` names a feed that is down, and a server is not
//! ready (nor announces its address) before both are subscribed, or a store timeout has
//! passed.

mod changes;
mod hub;
mod lapses;
mod listeners;
mod stream;

pub use hub::{Feed, LiveHub, LiveMessage, Observer, Subscription};
pub use lapses::LapseTouches;
pub use listeners::{HEARTBEAT_QUERY, NOTIFY_CHANNEL, spawn};
pub use stream::{Update, page_stream};

/// The prefix of every event map's topic, `event:<event id>` (also written by the sale's
/// `pg_notify` in `crate::seats::queries`).
pub const EVENT_TOPIC_PREFIX: &str = "event:";

/// The topic of event `event_id`'s maps.
pub fn event_topic(event_id: i64) -> String {
    format!("{EVENT_TOPIC_PREFIX}{event_id}")
}

/// The topic of event `event_id`'s waiting room: the room's state after each step of its
/// ticker (`room …` messages, [`lease::RoomView`]), for the queue pages' streams.
pub fn queue_topic(event_id: i64) -> String {
    format!("queue:{event_id}")
}

/// The event whose maps `topic` is for; `None` for another kind of topic.
pub fn event_of_topic(topic: &str) -> Option<i64> {
    topic.strip_prefix(EVENT_TOPIC_PREFIX)?.parse().ok()
}
