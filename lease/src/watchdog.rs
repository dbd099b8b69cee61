//! The watchdog renews a lease every TTL/3 while the holder works.
//!
//! The article says: "a long task renews the lease periodically", every lease / 3. The
//! watchdog also tells the holder when the lease is lost. The holder can then stop before
//! it writes on the strength of a lease it no longer has.
//!
//! Time decides "lost", not a count of failures. The watchdog keeps a local deadline:
//! [`Lease::held_until`] of the last grant or renewal, minus a margin. It reports
//! [`WatchdogEvent::Lost`] when the deadline passes. It does so even while a renewal still
//! waits for a stalled store, because each attempt is bounded by the time left. So the
//! holder hears of the loss before the lease can have expired.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::client::LeaseClient;
use crate::error::LeaseError;
use crate::fence::FenceLedger;
use crate::lease::Lease;
use crate::store::LeaseStore;
use crate::telemetry;

/// What the watchdog last saw of its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchdogEvent {
    /// The lease is held until `expires_at_ms`, in Unix ms on the Redis clock.
    Held {
        /// Expiry after the last successful renewal.
        expires_at_ms: u64,
    },
    /// The lease is gone, or may be. A renewal found it gone, or the last good renewal's
    /// expiry passed on this host's clock. The watchdog has stopped. The holder must not
    /// write any more.
    Lost,
}

/// The margin kept before a lease's certain end: `ttl / 10`. It covers clock drift
/// between this host and Redis. It also covers the time the holder needs to stop.
const SAFETY_MARGIN_DIVISOR: u32 = 10;

/// A running renewal loop for one [`Lease`].
///
/// Dropping it stops renewing, and the lease lapses after its TTL.
/// [`Watchdog::release`] stops renewing and releases at once.
///
/// A renewal that cannot reach Redis is retried at the next tick. If none succeeds before
/// the local deadline, the watchdog reports [`WatchdogEvent::Lost`]. It reports at the
/// deadline, not when the store answers.
pub struct Watchdog {
    lease: Lease,
    events: watch::Receiver<WatchdogEvent>,
    task: JoinHandle<()>,
}

impl<L: FenceLedger + 'static> LeaseClient<L> {
    /// Starts renewing `lease` every `lease.ttl() / 3` on the Tokio runtime. See
    /// [`Watchdog::start`].
    pub fn watch(self: &Arc<Self>, lease: Lease) -> Watchdog {
        Watchdog::start(self.clone(), lease)
    }
}

impl Watchdog {
    /// Starts renewing `lease` in `store` every `lease.ttl() / 3` on the Tokio runtime.
    /// It reports the lease lost when a renewal finds it gone. It also reports it lost
    /// when no renewal succeeds before the local deadline. Any [`LeaseStore`] works:
    /// Redis ([`LeaseClient::watch`]) or etcd.
    pub fn start(store: Arc<dyn LeaseStore>, lease: Lease) -> Watchdog {
        let (tx, events) = watch::channel(WatchdogEvent::Held {
            expires_at_ms: lease.expires_at_ms,
        });
        let mut renewed = lease.clone();
        let task = tokio::spawn(async move {
            // "Lost" is a local deadline, a margin short of the lease's certain end.
            // The holder must hear of the loss before the lease can have expired.
            let margin = renewed.ttl / SAFETY_MARGIN_DIVISOR;
            let deadline_of = |lease: &Lease| lease.held_until().map(|until| until - margin);
            // A lease rebuilt from parts has no timed request. Renew at once to get one.
            let mut deadline = deadline_of(&renewed);
            // The article's renewal interval, lease / 3. One renewal can fail in a store
            // blip, and the next still lands before the deadline.
            let mut tick = tokio::time::interval(renewed.ttl / 3);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            if deadline.is_some() {
                // The first tick is immediate, and the lease is fresh: skip it.
                tick.tick().await;
            }
            loop {
                let now = tokio::time::Instant::now();
                let until = deadline.unwrap_or(now + renewed.ttl - margin);
                // Wait for the next renewal, but never past the deadline.
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = tokio::time::sleep_until(until) => break,
                }
                // A renewal stuck on a stalled store is abandoned at the deadline too.
                match tokio::time::timeout_at(until, store.renew(&mut renewed)).await {
                    Ok(Ok(true)) => {
                        deadline = deadline_of(&renewed);
                        let _ = tx.send(WatchdogEvent::Held {
                            expires_at_ms: renewed.expires_at_ms,
                        });
                    }
                    // It lapsed, or someone else owns it. Renewing again cannot help.
                    Ok(Ok(false)) => break,
                    // The store did not answer. The lease may still be alive. Try again
                    // at the next tick, while the deadline allows.
                    Ok(Err(_)) if deadline.is_some() => {}
                    Ok(Err(_)) | Err(_) => break,
                }
            }
            metrics::counter!(telemetry::WATCHDOG_LOSSES_TOTAL).increment(1);
            let _ = tx.send(WatchdogEvent::Lost);
        });
        Watchdog {
            lease,
            events,
            task,
        }
    }
}

impl Watchdog {
    /// The lease being renewed. Its `expires_at_ms` is the one at grant time.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The latest event. Never blocks.
    pub fn status(&self) -> WatchdogEvent {
        *self.events.borrow()
    }

    /// Waits until the watchdog reports the lease lost. Use it in `tokio::select!`
    /// beside the guarded work, to abort that work.
    pub async fn lost(&mut self) {
        while *self.events.borrow_and_update() != WatchdogEvent::Lost {
            if self.events.changed().await.is_err() {
                return;
            }
        }
    }

    /// Stops renewing at once, then releases the lease with a compare-and-delete.
    /// Returns whether this call deleted it.
    pub async fn release<S: LeaseStore + ?Sized>(mut self, client: &S) -> Result<bool, LeaseError> {
        self.task.abort();
        let _ = (&mut self.task).await;
        client.release(&self.lease).await
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.task.abort();
    }
}
