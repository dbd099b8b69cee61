//! Lapses heard on time. Redis expires a key when something reads it, or when its expiry
//! cycle samples it (a few keys at a time, ten times a second): with many other keys with
//! a TTL the cycle takes minutes to find a lapsed hold, and only then sends its `expired`
//! notification. So each server reads every lease key it knows of just after the key's
//! expiry: the read expires it at once, and Redis notifies the feed of every server.
//!
//! The keys come from the grants the Redis feed hears and from every read of a group's
//! holders for the open maps (a snapshot or a convergence step): a server started after a
//! grant never heard it, but its maps read the hold. Each hold is read once per server
//! however many of them name it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease::{GroupSnapshot, LeaseKey, LeaseStore};
use tokio::time::Instant;

/// How long after its expiry a lease key is read: Redis counts whole milliseconds and
/// expires a key only once its time is past.
const AFTER_EXPIRY: Duration = Duration::from_millis(20);

/// How much earlier than the pending read of a hold a new schedule must put it to replace
/// that read: more than the jitter of the round trips the times are read over.
const EARLIER_BY: Duration = Duration::from_millis(100);

/// One hold: its lease and when it ends (Unix ms, Redis clock). A renewal or a new grant
/// of the same lease is another hold.
type Hold = (LeaseKey, u64);

/// Reads each Redis lease key once, just after its expiry (see the module docs). Cheap
/// to call for every hold of every read: a hold already waiting for its read is skipped.
pub struct LapseTouches {
    /// The store the keys are read through; `None` unless it is Redis (etcd's watch
    /// reports expiries by itself).
    leases: Option<Arc<dyn LeaseStore>>,
    /// The holds whose read is pending, with when it is due; each is forgotten as it is
    /// read.
    pending: Arc<Mutex<HashMap<Hold, Instant>>>,
}

impl LapseTouches {
    /// Reads through `leases` if it is Redis ([`LeaseStore::name`] `"redis"`); with any
    /// other store every call does nothing.
    pub fn new(leases: Arc<dyn LeaseStore>) -> LapseTouches {
        LapseTouches {
            leases: (leases.name() == "redis").then_some(leases),
            pending: Arc::default(),
        }
    }

    /// Every holding of `group` in `snapshot`. The waits count from the snapshot's
    /// `now_ms`, the Redis clock, so this host's clock does not matter.
    pub fn schedule_group(&self, group: &str, snapshot: &GroupSnapshot) {
        for holding in &snapshot.holdings {
            if let Ok(key) = LeaseKey::new(group, holding.name.as_str()) {
                self.schedule(key, holding.expires_at_ms, snapshot.now_ms);
            }
        }
    }

    /// A grant the feed heard on `key`, until `expires_at_ms` (Unix ms, Redis clock). The
    /// message carries no Redis time, so the wait counts from this host's clock, assumed
    /// close; a snapshot that names the hold puts a read due late on time.
    pub fn schedule_grant(&self, key: LeaseKey, expires_at_ms: u64) {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.schedule(key, expires_at_ms, now_ms);
    }

    /// Reads `key` [`AFTER_EXPIRY`] past `expires_at_ms`, counted from `now_ms` on the
    /// same clock, unless that hold's read is pending already and not due later.
    fn schedule(&self, key: LeaseKey, expires_at_ms: u64, now_ms: u64) {
        let Some(leases) = &self.leases else {
            return;
        };
        let left = Duration::from_millis(expires_at_ms.saturating_sub(now_ms));
        let due = Instant::now() + left + AFTER_EXPIRY;
        let hold = (key, expires_at_ms);
        // One read per hold, at the earliest time a grant or snapshot gave: a read that
        // comes early is harmless (the next snapshot schedules it again), one that comes
        // late shows the lapse late (a grant timed on a clock behind Redis's).
        {
            let mut pending = self.pending.lock().expect("pending lock");
            if pending.get(&hold).is_some_and(|at| due + EARLIER_BY >= *at) {
                return;
            }
            pending.insert(hold.clone(), due);
        }
        let (leases, pending) = (leases.clone(), self.pending.clone());
        tokio::spawn(async move {
            tokio::time::sleep_until(due).await;
            // Only the read still due at this time is made (not one replaced by an earlier
            // one), and the hold is forgotten.
            {
                let mut pending = pending.lock().expect("pending lock");
                if pending.get(&hold) != Some(&due) {
                    return;
                }
                pending.remove(&hold);
            }
            // A PTTL: released or renewed, the key is read harmlessly. If it fails (a
            // store down), the next snapshot of the group schedules the hold again.
            if let Err(err) = leases.remaining(&hold.0).await {
                tracing::debug!(key = ?hold.0, error = %err, "could not touch a lapsing lease");
            }
        });
    }
}
