//! "Need more time?": a buyer extends every hold they have in an event, at once.
//!
//! A hold is a lease that nobody renews: the page counts down and the seats go. From a
//! minute before the first hold lapses, the cart says so and offers one button
//! (`templates/cart.html`). WCAG 2.2 success criterion 2.2.1 (Timing Adjustable) asks for
//! that warning and that extension. Each press sets every hold's expiry to the hold TTL
//! from now, in one lease script ([`lease::LeaseStore::extend_all`]). The holds stay the
//! same leases: the same fencing tokens, so a purchase in flight is not fenced out by its
//! own extension. A hold is extended at most [`lease::MAX_EXTENSIONS`] times, and never
//! past [`crate::config::Settings::max_hold_life`] from its grant: a hold still ends.

use lease::{Extended, Extension};

use super::cart;
use crate::http::buyer::Buyer;
use crate::http::error::{Error, Refusal, Result};
use crate::state::AppState;
use crate::waiting_room;

/// Extends every hold `buyer` has in `event_id` to the hold TTL from now, all or none.
/// Behind a waiting room, only while the buyer's admission is live.
///
/// Round trips: Redis, one read of the buyer's holds, one script per hold for its
/// owner token ([`lease::LeaseStore::owned_by`]), then the extension's one script
/// (`extend.lua`). Postgres: none, except the event's first read in this process.
///
/// Errors:
/// * 404: no such event.
/// * 403: the buyer holds nothing here and never did, as far as their browser remembers.
/// * 409: `expired` (every hold lapsed, or one lapsed meanwhile: nothing extended),
///   `extension_limit`, `hold_life_limit`, `not_admitted`, `event_started`.
/// * 503: Redis unavailable.
///
/// Traced as span `extend`, with the event and buyer.
#[tracing::instrument(name = "extend", skip_all, fields(event = event_id, buyer = buyer.id()))]
pub async fn extend(state: &AppState, buyer: &Buyer, event_id: i64) -> Result<Extended> {
    let event = state.catalog.event(&state.db, event_id).await?;
    let event = event.ok_or_else(Error::no_such_event)?;
    if event.started() {
        return Err(Refusal::EventStarted.into());
    }
    let holds = cart::held_leases(state, buyer, event_id, None, false).await?;
    if holds.is_empty() {
        // Nothing left to extend: lapsed, if the browser remembers a hold here.
        return Err(if buyer.had_hold_in(event_id) {
            Refusal::HoldExpired.into()
        } else {
            cart::no_holds_here()
        });
    }
    let leases: Vec<_> = holds.into_iter().map(|(_, lease)| lease).collect();
    let extension = Extension {
        max_life: state.settings.max_hold_life(),
        admission: waiting_room::admission(state, buyer, event_id).await?,
        ..Extension::new(buyer.id(), state.settings.hold_ttl())
    };
    let extended = state.leases.extend_all(&leases, &extension).await?;
    tracing::info!(extensions = extended.extensions, "holds extended");
    Ok(extended)
}
