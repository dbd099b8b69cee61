//! Authorizations nobody will capture are voided.
//!
//! A purchase authorizes its payment, then sells and captures it within its request
//! deadline, or voids it ([`super::purchase`]). Two ways leave one open for good: the
//! server is killed mid-purchase and the buyer never retries, or the authorization
//! reached Postgres after the purchase gave up (a half-open connection that woke up).
//! Every [`SWEEP_INTERVAL`], each server voids the authorizations open for longer than
//! [`stale_after`]: by then the hold they were made for has lapsed and its purchase has
//! passed its deadline, so none of them can still be captured. Idempotent, so several
//! servers sweeping at once do no harm.

use std::time::Duration;

use crate::config::Settings;
use crate::state::AppState;

use super::queries;

/// How often open authorizations are swept.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// How long an authorization may stay open: the longest a hold may last, with every
/// extension ([`Settings::max_hold_life`]), plus the request deadline. A hold's TTL alone
/// is not enough: an extended hold outlives it, and its purchase may still capture.
pub fn stale_after(settings: &Settings) -> Duration {
    settings.max_hold_life() + settings.request_deadline()
}

/// Sweeps every [`SWEEP_INTERVAL`], forever (a failed sweep is logged; the next runs on
/// time). The first sweep runs one interval after the start.
pub async fn sweep_forever(state: AppState) {
    let first = tokio::time::Instant::now() + SWEEP_INTERVAL;
    let mut every = tokio::time::interval_at(first, SWEEP_INTERVAL);
    loop {
        every.tick().await;
        let older_than = stale_after(&state.settings);
        let sweep = queries::void_stale_authorizations(&state.db, older_than);
        let swept = crate::http::deadline::within(state.settings.request_deadline(), sweep)
            .await
            .and_then(|voided| voided.map_err(crate::http::error::Error::from));
        match swept {
            Ok(0) => {}
            Ok(voided) => tracing::warn!(voided, "voided authorizations left open"),
            Err(err) => tracing::warn!(error = %err, "open authorizations not swept"),
        }
    }
}
