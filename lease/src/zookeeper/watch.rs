//! Lease changes on ZooKeeper: a persistent recursive watch on the store's root, on a
//! session of the stream's own. A hold znode created and found the lowest under its seat
//! is a grant (a race's loser, never the lowest, is not reported); its data rewritten, a
//! renewal (not reported, but its new expiry kept); deleted, a release or a lapse, told
//! apart by the expiry it recorded (ZooKeeper deletes a lapsed hold's znode itself when
//! its session expires, at or after that time). A watch event carries no data: each
//! reported grant costs two reads.

use std::collections::HashMap;

use futures_util::stream;
use zookeeper_client::{AddWatchMode, Client, EventType, PersistentWatcher, SessionState};

use super::{HoldData, ROOT, ZooKeeperStore, component, lowest, now_ms, uncomponent};
use crate::changes::LeaseChange;
use crate::error::LeaseError;
use crate::keys::LeaseKey;
use crate::store::LeaseChanges;
use crate::token::FencingToken;

/// A delete this close to the hold's recorded expiry (or later) is reported as a lapse.
const LAPSE_SLACK_MS: u64 = 500;

/// The stream's state: its session, its watch, and the holds it reported (path: key and
/// recorded expiry).
struct Watching {
    client: Client,
    watcher: PersistentWatcher,
    /// `/seatlock/lease/<escaped group prefix>`: the paths of the groups watched.
    prefix: String,
    held: HashMap<String, (LeaseKey, u64)>,
}

/// [`crate::LeaseStore::changes`] on ZooKeeper: returns once the server confirmed the
/// watch. The stream ends when its session is disconnected (events are not replayed
/// after a reconnection, ZOOKEEPER-4698).
pub(super) async fn changes(
    store: &ZooKeeperStore,
    group_prefix: &str,
) -> Result<LeaseChanges, LeaseError> {
    let client = super::own_session(&store.inner.hosts, store.inner.timeout).await?;
    let watcher = store
        .within(client.watch(ROOT, AddWatchMode::PersistentRecursive))
        .await?;
    let watching = Watching {
        client,
        watcher,
        prefix: format!("{ROOT}/{}", component(group_prefix)),
        held: HashMap::new(),
    };
    Ok(Box::pin(stream::unfold(watching, next)))
}

/// The next change, or `None` once the session is no longer connected.
async fn next(mut watching: Watching) -> Option<(LeaseChange, Watching)> {
    loop {
        let event = watching.watcher.changed().await;
        if event.event_type == EventType::Session {
            if event.session_state == SessionState::SyncConnected {
                continue;
            }
            return None;
        }
        if !event.path.starts_with(&watching.prefix) {
            continue;
        }
        let Some(key) = hold_key(&event.path) else {
            continue;
        };
        let change = match event.event_type {
            EventType::NodeCreated => watching.granted(&event.path, key).await,
            EventType::NodeDataChanged => {
                watching.renewed(&event.path).await;
                None
            }
            EventType::NodeDeleted => watching.held.remove(&event.path).map(|(key, expiry)| {
                if now_ms() + LAPSE_SLACK_MS >= expiry {
                    LeaseChange::Expired { key }
                } else {
                    LeaseChange::Released { key }
                }
            }),
            _ => None,
        };
        if let Some(change) = change {
            return Some((change, watching));
        }
    }
}

impl Watching {
    /// The grant of the hold znode at `path` if it is the lowest under its seat (read
    /// now: a loser's znode lives only until its grant reads the seat).
    async fn granted(&mut self, path: &str, key: LeaseKey) -> Option<LeaseChange> {
        let (seat, child) = path.rsplit_once('/')?;
        let children = self.client.list_children(seat).await.ok()?;
        if lowest(&children).map(String::as_str) != Some(child) {
            return None;
        }
        let (data, stat) = self.client.get_data(path).await.ok()?;
        let data = HoldData::parse(&data)?;
        self.held
            .insert(path.to_owned(), (key.clone(), data.expires_at_ms));
        Some(LeaseChange::Acquired {
            key,
            holder: data.holder,
            fencing_token: FencingToken(stat.czxid as u64),
            expires_at_ms: data.expires_at_ms,
        })
    }

    /// Keeps the new expiry of a reported hold whose data was rewritten.
    async fn renewed(&mut self, path: &str) {
        if !self.held.contains_key(path) {
            return;
        }
        if let Ok((data, _)) = self.client.get_data(path).await
            && let Some(data) = HoldData::parse(&data)
            && let Some(entry) = self.held.get_mut(path)
        {
            entry.1 = data.expires_at_ms;
        }
    }
}

/// The resource of a hold znode's path, `/seatlock/lease/<group>/<name>/h-…`, or `None`
/// for another znode.
fn hold_key(path: &str) -> Option<LeaseKey> {
    let rest = path.strip_prefix(ROOT)?.strip_prefix('/')?;
    let mut parts = rest.split('/');
    let (group, name, child) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !child.starts_with("h-") || group.is_empty() {
        return None;
    }
    LeaseKey::new(uncomponent(group), uncomponent(name)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hold_znodes_name_a_key() {
        let key = hold_key("/seatlock/lease/g:1/14C/h-ab-0000000001").unwrap();
        assert_eq!((key.group(), key.name()), ("g:1", "14C"));
        assert!(hold_key("/seatlock/lease/g:1/14C").is_none());
        assert!(hold_key("/seatlock/lease/g:1/~held-by/61/14C-ab").is_none());
    }
}
