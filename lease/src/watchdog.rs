//! The watchdog: renews a lease every TTL/3 while the holder works, and tells the holder
//! at once if the lease is lost, so it can abort before writing on the strength of a
//! lease it no longer has. (The article: "a long task renews the lease periodically";
//! renewal interval = lease / 3.)

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::{FenceLedger, Lease, LeaseClient, LeaseError};

/// What the watchdog last saw of its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchdogEvent {
    /// The lease is held until `expires_at_ms` (Unix ms, Redis clock).
    Held {
        /// Expiry after the last successful renewal.
        expires_at_ms: u64,
    },
    /// A renewal found the lease gone (expired or owned by someone else). The watchdog
    /// has stopped; the holder must not write any more.
    Lost,
}

/// A running renewal loop for one [`Lease`]. Dropping it stops renewing (the lease then
/// lapses after its TTL); [`Watchdog::release`] stops renewing and releases at once.
///
/// A renewal that cannot reach Redis is retried at the next tick; if the store stays
/// unreachable until the lease's expiry the watchdog reports [`WatchdogEvent::Lost`].
pub struct Watchdog {
    lease: Lease,
    events: watch::Receiver<WatchdogEvent>,
    task: JoinHandle<()>,
}

impl<L: FenceLedger + 'static> LeaseClient<L> {
    /// Starts renewing `lease` every `lease.ttl() / 3` on the Tokio runtime.
    pub fn watch(self: &Arc<Self>, lease: Lease) -> Watchdog {
        let (tx, events) = watch::channel(WatchdogEvent::Held {
            expires_at_ms: lease.expires_at_ms,
        });
        let client = Arc::clone(self);
        let mut renewed = lease.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(renewed.ttl / 3);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await; // the first tick is immediate: the lease is fresh
            let mut failed_renewals = 0;
            loop {
                tick.tick().await;
                let lost = match client.renew(&mut renewed).await {
                    Ok(true) => {
                        failed_renewals = 0;
                        let _ = tx.send(WatchdogEvent::Held {
                            expires_at_ms: renewed.expires_at_ms,
                        });
                        false
                    }
                    Ok(false) => true,
                    // Unreachable store: the lease may still be alive. Without a reply we
                    // cannot read Redis's clock, so count failed ticks: three renewal
                    // intervals since the last success cover the whole TTL.
                    Err(_) => {
                        failed_renewals += 1;
                        failed_renewals >= 3
                    }
                };
                if lost {
                    metrics::counter!(crate::telemetry::WATCHDOG_LOSSES_TOTAL).increment(1);
                    let _ = tx.send(WatchdogEvent::Lost);
                    return;
                }
            }
        });
        Watchdog {
            lease,
            events,
            task,
        }
    }
}

impl Watchdog {
    /// The lease being renewed (its `expires_at_ms` is the one at grant time).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The latest event (never blocks).
    pub fn status(&self) -> WatchdogEvent {
        *self.events.borrow()
    }

    /// Waits until the watchdog reports the lease lost. Use in `tokio::select!` beside
    /// the guarded work to abort it.
    pub async fn lost(&mut self) {
        while *self.events.borrow_and_update() != WatchdogEvent::Lost {
            if self.events.changed().await.is_err() {
                return;
            }
        }
    }

    /// Stops renewing at once, then releases the lease (compare-and-delete). Returns
    /// whether this call deleted it.
    pub async fn release<L: FenceLedger>(
        mut self,
        client: &LeaseClient<L>,
    ) -> Result<bool, LeaseError> {
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
