//! Server side of the race lab: the unsafe strategies' hold and confirm, the pause header
//! and `GET /race-lab`.

use std::time::Duration;

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::routing::get;
use axum::{Json, Router};

use super::{PurchaseStrategy, queries};
use crate::buyer::Buyer;
use crate::error::{Error, HOLD_EXPIRED, Result};
use crate::seats::purchase::{self, ALREADY_SOLD};
use crate::seats::{SeatRef, queries as seat_queries};
use crate::state::AppState;

/// Header naming a pause, in milliseconds, between the lock check and the write.
pub const PAUSE_HEADER: &str = "x-race-lab-pause-ms";
/// Longest pause honoured.
const MAX_PAUSE: Duration = Duration::from_secs(60);

/// The requested pause: the `x-race-lab-pause-ms` header when the server runs with
/// `--enable-race-lab`, zero otherwise (the header is ignored). 400 if malformed.
pub struct RaceLabPause(pub Duration);

impl FromRequestParts<AppState> for RaceLabPause {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let Some(value) = parts
            .headers
            .get(PAUSE_HEADER)
            .filter(|_| state.settings.enable_race_lab)
        else {
            return Ok(RaceLabPause(Duration::ZERO));
        };
        let ms: u64 = value
            .to_str()
            .ok()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| Error::BadRequest(format!("{PAUSE_HEADER} must be milliseconds")))?;
        Ok(RaceLabPause(Duration::from_millis(ms).min(MAX_PAUSE)))
    }
}

/// A hold under the server's race-lab strategy. `race-lab-unfenced-lease` takes the
/// product's lease; the lock-free ones only check that the seat exists and is unsold
/// (there is nothing to hold).
pub async fn hold(state: &AppState, buyer: &Buyer, seat: SeatRef) -> Result<()> {
    if state.settings.purchase_strategy.uses_lease() {
        return purchase::hold(state, buyer, seat).await.map(drop);
    }
    match seat_queries::seat_status(&state.db, seat).await? {
        None => Err(Error::NotFound("This event has no such seat.".into())),
        Some(status) if status.sold => Err(Error::Conflict(ALREADY_SOLD.into())),
        Some(_) => Ok(()),
    }
}

/// A purchase under the server's race-lab strategy; returns the `race_lab_sales.id`
/// (the product's `fenced` path is [`purchase::confirm`], delegated to here too).
pub async fn confirm(
    state: &AppState,
    buyer: &Buyer,
    seat: SeatRef,
    pause: Duration,
) -> Result<i64> {
    let delay = state.settings.payment_delay() + pause;
    let strategy = state.settings.purchase_strategy;
    match strategy {
        PurchaseStrategy::Fenced => purchase::confirm(state, buyer, seat, pause).await,
        PurchaseStrategy::RaceLabNaive => {
            // Read, think, write: the classic check-then-act race.
            let status = seat_queries::seat_status(&state.db, seat).await?;
            if status.is_none_or(|s| s.sold) {
                return Err(Error::Conflict(ALREADY_SOLD.into()));
            }
            tokio::time::sleep(delay).await;
            Ok(queries::sell_unconditionally(
                &state.db,
                seat,
                buyer.id(),
                None,
                strategy.short_name(),
            )
            .await?)
        }
        PurchaseStrategy::RaceLabUnfencedLease => {
            let lease = purchase::held_lease(state, buyer, seat)
                .await?
                .ok_or_else(purchase::not_your_hold)?;
            // The lock check...
            if !state.leases.is_held(&lease).await? {
                buyer.forget_hold(seat.event_id, seat.seat_id).await?;
                return Err(Error::Conflict(HOLD_EXPIRED.into()));
            }
            // ...a pause that can outlast the lease, and a write nobody fences.
            tokio::time::sleep(delay).await;
            let token = Some(lease.fencing_token.0 as i64);
            let sale = queries::sell_unconditionally(
                &state.db,
                seat,
                buyer.id(),
                token,
                strategy.short_name(),
            )
            .await?;
            state.leases.release(&lease).await?; // owner-checked: false if it lapsed
            buyer.forget_hold(seat.event_id, seat.seat_id).await?;
            Ok(sale)
        }
        PurchaseStrategy::RaceLabConditional => {
            tokio::time::sleep(delay).await;
            queries::sell_if_unsold(&state.db, seat, buyer.id())
                .await?
                .ok_or_else(|| Error::Conflict(ALREADY_SOLD.into()))
        }
    }
}

/// `GET /race-lab`: `{"strategy": "race-lab-naive"}`, so `load-test --target` can check
/// what it is racing; 404 unless the server runs with `--enable-race-lab`.
async fn describe(State(state): State<AppState>) -> Result<Json<serde_json::Value>> {
    if !state.settings.enable_race_lab {
        return Err(Error::NotFound(
            "The race lab is not enabled on this server.".into(),
        ));
    }
    Ok(Json(
        serde_json::json!({ "strategy": state.settings.purchase_strategy.flag_value() }),
    ))
}

/// `GET /race-lab`.
pub fn router() -> Router<AppState> {
    Router::new().route("/race-lab", get(describe))
}
