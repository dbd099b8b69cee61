//! The in-process fan-out: one broadcast channel per topic.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, watch};

/// Messages a slow page may fall behind by before it is sent a fresh snapshot instead.
const BACKLOG: usize = 256;

/// One message for the pages of a topic: the SSE event name and its JSON data.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LiveMessage {
    /// SSE event name: `seat`, `bid`, `closed`, or `resync` (re-read everything).
    pub event: String,
    /// The event's JSON payload.
    pub data: serde_json::Value,
}

impl LiveMessage {
    /// "Your view may be stale: take a fresh snapshot."
    pub fn resync() -> Self {
        LiveMessage {
            event: "resync".into(),
            data: serde_json::Value::Null,
        }
    }
}

/// The topics of one server process, and its budget of open streams.
pub struct LiveHub {
    /// One permit per open stream (`--max-streams`): lookers are budgeted apart from the
    /// connections requests are served on.
    streams: Arc<Semaphore>,
    topics: Mutex<Topics>,
    /// Set by [`LiveHub::close`]: no more subscriptions.
    closed: AtomicBool,
    /// Whether each feed is subscribed and answering: `[redis, postgres]`.
    feeds: watch::Sender<[bool; 2]>,
    /// What works less well than it should, by subject (e.g. `expiry notifications`):
    /// shown by `/healthz`, logged once when it appears.
    notes: Mutex<std::collections::BTreeMap<&'static str, String>>,
    /// Told of every message sent on a topic with subscribers, in the order they get it
    /// ([`LiveHub::observe`]).
    observer: std::sync::OnceLock<Observer>,
    /// The last message [`LiveHub::publish_retained`] sent on each topic, and when.
    retained: Mutex<HashMap<String, (Instant, Arc<LiveMessage>)>>,
}

/// Called with each topic and message as it is sent ([`LiveHub::observe`]).
pub type Observer = Box<dyn Fn(&str, &LiveMessage) + Send + Sync>;

/// The topics with subscribers, and the counter their generations come from.
#[derive(Default)]
struct Topics {
    by_name: HashMap<String, Topic>,
    /// The next generation handed out: hub-wide, so a topic forgotten and made again
    /// never repeats a generation it had.
    next_generation: u64,
}

/// One topic: its channel, and its generation, which changes with every message sent
/// on it (and is new when the topic is), so a view built at one generation is known to
/// be current while the generation stays the same ([`LiveHub::generation`]).
struct Topic {
    sender: broadcast::Sender<Arc<LiveMessage>>,
    generation: u64,
}

impl Topics {
    fn next(&mut self) -> u64 {
        self.next_generation += 1;
        self.next_generation
    }
}

/// The two feeds of a hub.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feed {
    /// The lease feed: holds granted, released, lapsed (Redis pub/sub, or the etcd watch
    /// when etcd is the lease store; `/healthz` calls it `live-redis` either way).
    Redis = 0,
    /// Postgres LISTEN: sales, bids, closes.
    Postgres = 1,
}

impl Feed {
    /// The name `/healthz` gives a dead feed: `live-redis`, `live-postgres`.
    pub fn name(self) -> &'static str {
        match self {
            Feed::Redis => "live-redis",
            Feed::Postgres => "live-postgres",
        }
    }
}

/// A page's subscription to one topic.
pub struct Subscription {
    receiver: broadcast::Receiver<Arc<LiveMessage>>,
    /// This stream's place in the budget, given back when the stream ends.
    _permit: Option<OwnedSemaphorePermit>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self._permit.is_some() {
            crate::telemetry::stream_closed();
        }
    }
}

impl Subscription {
    /// The next message ([`broadcast::Receiver::recv`]): `Lagged` if this page fell
    /// behind, `Closed` once the hub closed the topic.
    pub async fn recv(&mut self) -> Result<Arc<LiveMessage>, RecvError> {
        self.receiver.recv().await
    }
}

impl LiveHub {
    /// A hub that serves at most `max_streams` open streams at once.
    pub fn new(max_streams: usize) -> Self {
        LiveHub {
            streams: Arc::new(Semaphore::new(max_streams)),
            topics: Mutex::default(),
            closed: AtomicBool::default(),
            feeds: watch::Sender::default(),
            notes: Mutex::default(),
            observer: std::sync::OnceLock::new(),
            retained: Mutex::default(),
        }
    }

    /// Subscribes to `topic` (e.g. `event:12`); messages published after this call are
    /// received, so subscribe before reading the snapshot. `None` when every stream of
    /// the budget is taken: the caller answers at once (503), and the page tries later.
    pub fn subscribe(&self, topic: &str) -> Option<Subscription> {
        let Ok(permit) = self.streams.clone().try_acquire_owned() else {
            crate::telemetry::stream_refused();
            return None;
        };
        crate::telemetry::stream_opened();
        let mut topics = self.topics.lock().expect("hub lock");
        if self.closed.load(Ordering::SeqCst) {
            // Already closed: ends at once.
            return Some(Subscription {
                receiver: broadcast::channel(1).1,
                _permit: None,
            });
        }
        // Forget topics whose pages have all gone (including streams refused with 404
        // right after subscribing), so abandoned topics cannot pile up.
        topics.by_name.retain(|_, t| t.sender.receiver_count() > 0);
        let receiver = match topics.by_name.get(topic) {
            Some(t) => t.sender.subscribe(),
            None => {
                let (sender, receiver) = broadcast::channel(BACKLOG);
                let generation = topics.next();
                topics
                    .by_name
                    .insert(topic.to_owned(), Topic { sender, generation });
                receiver
            }
        };
        Some(Subscription {
            receiver,
            _permit: Some(permit),
        })
    }

    /// Delivers `message` to the current subscribers of `topic`, if any; forgets topics
    /// nobody listens to any more.
    pub fn publish(&self, topic: &str, message: LiveMessage) {
        let mut topics = self.topics.lock().expect("hub lock");
        let generation = topics.next();
        if let Some(t) = topics.by_name.get_mut(topic) {
            t.generation = generation;
            if let Some(observe) = self.observer.get() {
                observe(topic, &message);
            }
            if t.sender.send(Arc::new(message)).is_err() {
                topics.by_name.remove(topic);
            }
        }
    }

    /// [`LiveHub::publish`], and keeps `message` as the topic's latest, for readers that
    /// want the current state without subscribing ([`LiveHub::retained`]): the waiting
    /// rooms' state, one small message per event.
    pub fn publish_retained(&self, topic: &str, message: LiveMessage) {
        let kept = (Instant::now(), Arc::new(message.clone()));
        (self.retained.lock().expect("retained lock")).insert(topic.to_owned(), kept);
        self.publish(topic, message);
    }

    /// The last message [`LiveHub::publish_retained`] sent on `topic`, and when it was
    /// sent (this process's clock).
    pub fn retained(&self, topic: &str) -> Option<(Instant, Arc<LiveMessage>)> {
        (self.retained.lock().expect("retained lock"))
            .get(topic)
            .cloned()
    }

    /// The generation of `topic`: it changes with every message sent on it, so what was
    /// built for its pages at one generation is still current while this returns the
    /// same. `None` if nobody subscribes to it.
    pub fn generation(&self, topic: &str) -> Option<u64> {
        let topics = self.topics.lock().expect("hub lock");
        topics.by_name.get(topic).map(|t| t.generation)
    }

    /// The topics whose names start with `prefix` that have subscribers.
    pub fn topics(&self, prefix: &str) -> Vec<String> {
        let topics = self.topics.lock().expect("hub lock");
        topics
            .by_name
            .iter()
            .filter(|(name, t)| name.starts_with(prefix) && t.sender.receiver_count() > 0)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Ends every page stream, now and from now on (server shutdown: a graceful shutdown
    /// waits for open responses, and these never end by themselves).
    pub fn close(&self) {
        let mut topics = self.topics.lock().expect("hub lock");
        self.closed.store(true, Ordering::SeqCst);
        topics.by_name.clear();
    }

    /// Whether [`LiveHub::close`] was called (the server is stopping).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Records whether `feed` is subscribed and answering.
    pub fn set_feed(&self, feed: Feed, up: bool) {
        self.feeds.send_if_modified(|feeds| {
            let changed = feeds[feed as usize] != up;
            feeds[feed as usize] = up;
            changed
        });
    }

    /// Records (`Some`) or clears (`None`) a note about `subject`; a new or changed note
    /// is logged once as a warning.
    pub fn set_note(&self, subject: &'static str, note: Option<String>) {
        let mut notes = self.notes.lock().expect("notes lock");
        match note {
            Some(note) if notes.get(subject) != Some(&note) => {
                tracing::warn!(subject, note, "degraded");
                notes.insert(subject, note);
            }
            Some(_) => {}
            None => {
                notes.remove(subject);
            }
        }
    }

    /// The current notes, as `subject: note` lines.
    pub fn notes(&self) -> Vec<String> {
        let notes = self.notes.lock().expect("notes lock");
        notes.iter().map(|(s, n)| format!("{s}: {n}")).collect()
    }

    /// The feeds that are down now (for `/healthz`).
    pub fn feeds_down(&self) -> Vec<Feed> {
        let feeds = *self.feeds.borrow();
        [Feed::Redis, Feed::Postgres]
            .into_iter()
            .filter(|f| !feeds[*f as usize])
            .collect()
    }

    /// Waits until both feeds are up, at most `limit`; returns whether they are.
    pub async fn wait_until_live(&self, limit: std::time::Duration) -> bool {
        let mut feeds = self.feeds.subscribe();
        tokio::time::timeout(limit, feeds.wait_for(|f| f.iter().all(|up| *up)))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Tells every subscriber of every topic to take a fresh snapshot.
    pub fn resync_all(&self) {
        let message = Arc::new(LiveMessage::resync());
        let mut topics = self.topics.lock().expect("hub lock");
        let generation = topics.next();
        topics.by_name.retain(|name, t| {
            t.generation = generation;
            if let Some(observe) = self.observer.get() {
                observe(name, &message);
            }
            t.sender.send(message.clone()).is_ok()
        });
    }

    /// Has `observer` told of every message sent from now on, with its topic, while the
    /// hub's lock is held: in the order subscribers get them, before any is read (one
    /// observer per hub; a second is ignored). It must be quick and must not call the
    /// hub. [`crate::venue::snapshots::Snapshots`] keeps what each event's open maps show
    /// with it.
    pub fn observe(&self, observer: Observer) {
        let _ = self.observer.set(observer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn delivers_to_subscribers_of_the_topic_only() {
        let hub = LiveHub::new(8);
        let mut one = hub.subscribe("event:1").unwrap();
        let mut two = hub.subscribe("event:2").unwrap();
        hub.publish(
            "event:1",
            LiveMessage {
                event: "seat".into(),
                data: serde_json::json!({"seat": 5}),
            },
        );
        assert_eq!(one.recv().await.unwrap().data["seat"], 5);
        assert!(two.receiver.try_recv().is_err());
        hub.resync_all();
        assert_eq!(two.recv().await.unwrap().event, "resync");
    }

    #[tokio::test]
    async fn close_ends_every_subscription_now_and_later() {
        let hub = LiveHub::new(8);
        let mut before = hub.subscribe("event:1").unwrap();
        hub.close();
        assert!(matches!(
            before.recv().await,
            Err(broadcast::error::RecvError::Closed)
        ));
        let mut after = hub.subscribe("event:1").unwrap();
        assert!(matches!(
            after.recv().await,
            Err(broadcast::error::RecvError::Closed)
        ));
    }

    #[test]
    fn forgets_topics_without_subscribers() {
        let hub = LiveHub::new(8);
        drop(hub.subscribe("event:1"));
        hub.publish("event:1", LiveMessage::resync());
        assert!(hub.topics.lock().unwrap().by_name.is_empty());
    }

    #[test]
    fn abandoned_topics_do_not_pile_up() {
        let hub = LiveHub::new(8);
        let _watched = hub.subscribe("event:1").unwrap();
        for id in 2..10_000 {
            drop(hub.subscribe(&format!("event:{id}"))); // e.g. a 404 for an unknown event
        }
        assert!(
            hub.topics.lock().unwrap().by_name.len() <= 2,
            "only live topics are kept"
        );
    }

    #[test]
    fn streams_past_the_budget_are_refused_until_one_ends() {
        let hub = LiveHub::new(2);
        let one = hub.subscribe("event:1").expect("the first");
        let _two = hub.subscribe("event:2").expect("the second");
        assert!(
            hub.subscribe("event:1").is_none(),
            "the third is past the budget"
        );
        drop(one);
        assert!(hub.subscribe("event:1").is_some(), "a place is free again");
    }

    #[test]
    fn the_observer_is_told_of_each_message_sent_to_subscribers_in_order() {
        let hub = LiveHub::new(8);
        let told = Arc::new(Mutex::new(Vec::new()));
        let log = told.clone();
        hub.observe(Box::new(move |topic, message| {
            log.lock()
                .unwrap()
                .push(format!("{topic} {}", message.event));
        }));
        let _page = hub.subscribe("event:1").unwrap();
        let seat = |n| LiveMessage {
            event: "seat".into(),
            data: serde_json::json!({ "seat": n }),
        };
        hub.publish("event:1", seat(1));
        hub.publish("event:2", seat(2)); // nobody listens: nothing sent, nothing told
        hub.resync_all();
        assert_eq!(*told.lock().unwrap(), ["event:1 seat", "event:1 resync"]);
    }

    #[test]
    fn a_topics_generation_changes_with_each_message_and_never_repeats() {
        let hub = LiveHub::new(8);
        assert_eq!(hub.generation("event:1"), None, "nobody listens");
        let page = hub.subscribe("event:1").unwrap();
        let first = hub.generation("event:1").unwrap();
        hub.publish("event:1", LiveMessage::resync());
        let second = hub.generation("event:1").unwrap();
        assert_ne!(first, second);
        hub.publish("event:2", LiveMessage::resync()); // nobody there: no change here
        assert_eq!(hub.generation("event:1"), Some(second));
        assert_eq!(hub.topics("event:"), ["event:1"]);
        drop(page);
        let again = hub.subscribe("event:1").unwrap();
        let made_again = hub.generation("event:1").unwrap();
        assert!(
            made_again > second,
            "a topic made again has a new generation"
        );
        drop(again);
    }
}
