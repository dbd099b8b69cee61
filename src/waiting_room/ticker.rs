//! The ticker: one server at a time steps each room ([`lease::LeaseClient::tick`]), once
//! a [`TICK`]. It is the article's lock once more. Every server that has served the
//! room contends for a lease on its ticking; the holder renews it with a watchdog
//! (step 2), releases it owner-checked when it stops (step 3), and sends its fencing
//! token with every step, which the room's script checks (step 4). So a ticker that
//! paused past its lease and wakes late is refused, and gives the room up.

use std::time::Duration;

use lease::{LeaseError, LeaseStore, RoomTerms, Tick};
use rand::Rng;

use super::group;
use super::rooms::TICK;
use crate::state::AppState;
use crate::telemetry;

/// The ticker's lease: a ticker that dies is replaced within this long.
const LEASE_TTL: Duration = Duration::from_secs(5);

/// Starts this server's ticker for event `event_id`'s room, for as long as the server
/// runs: it takes the lease when it is free, and ticks while it holds it.
pub(super) fn spawn(state: AppState, event_id: i64, terms: RoomTerms) {
    let label = format!("ticker-{:08x}", rand::rng().random::<u32>());
    tokio::spawn(async move {
        while !state.live.is_closed() {
            if let Err(err) = hold_and_tick(&state, event_id, &terms, &label).await {
                tracing::debug!(event_id, error = %err, "waiting room ticker: lease not taken");
            }
            // Another server ticks, or the store is down: try again within half a lease,
            // at a random moment so that contenders do not ask together.
            let wait = LEASE_TTL.mul_f64(rand::rng().random_range(0.25..0.5));
            tokio::time::sleep(wait).await;
        }
    });
}

/// Takes the room's ticker lease and ticks until the lease is lost, a tick is fenced,
/// or the server stops; then releases the lease. Errors: the lease is held elsewhere,
/// or Redis is down.
async fn hold_and_tick(
    state: &AppState,
    event_id: i64,
    terms: &RoomTerms,
    label: &str,
) -> Result<(), LeaseError> {
    let Some(store) = state.waiting_room.clone() else {
        return Ok(());
    };
    let key = state
        .settings
        .lease_namespace
        .key("room", event_id, "ticker");
    let lease = store.acquire(&key, label, LEASE_TTL).await?;
    let token = lease.fencing_token();
    let mut watchdog = store.watch(lease);
    let group = group(state, event_id);
    let mut every = tokio::time::interval(TICK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = watchdog.lost() => break,
            _ = every.tick() => {}
        }
        if state.live.is_closed() {
            break;
        }
        match store.tick(&group, token, terms).await {
            Ok(Tick::Ticked(view)) => telemetry::queue_seen(event_id, view.waiting()),
            Ok(Tick::Fenced { highest }) => {
                telemetry::tick_fenced();
                tracing::warn!(
                    event_id,
                    token = token.0,
                    highest = highest.0,
                    "waiting room ticker fenced: a newer ticker has stepped the room"
                );
                break;
            }
            // A store blip: the next tick tries again, while the lease lasts.
            Err(err) => tracing::debug!(event_id, error = %err, "waiting room tick failed"),
        }
    }
    watchdog.release(&*store).await?;
    Ok(())
}
