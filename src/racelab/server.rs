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
/// Header moving the pause of a (fenced) confirm elsewhere: a [`PausePoint`] name.
pub const PAUSE_AT_HEADER: &str = "x-race-lab-pause-at";
/// Longest pause honoured.
const MAX_PAUSE: Duration = Duration::from_secs(60);

/// The value of race-lab header `name` parsed by `parse`, when the server runs with
/// `--enable-race-lab`; `None` otherwise (the header is ignored) or when absent. 400 if
/// malformed, with `expected` in the message.
fn race_lab_header<T>(
    parts: &Parts,
    state: &AppState,
    name: &str,
    expected: &str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<Option<T>> {
    let Some(value) = parts
        .headers
        .get(name)
        .filter(|_| state.settings.enable_race_lab)
    else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(parse)
        .map(Some)
        .ok_or_else(|| Error::BadRequest(format!("{name} must be {expected}")))
}

/// The requested pause: the `x-race-lab-pause-ms` header when the server runs with
/// `--enable-race-lab`, zero otherwise (the header is ignored). 400 if malformed.
pub struct RaceLabPause(pub Duration);

impl FromRequestParts<AppState> for RaceLabPause {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let ms = race_lab_header(parts, state, PAUSE_HEADER, "milliseconds", |v| {
            v.parse::<u64>().ok()
        })?;
        Ok(RaceLabPause(
            Duration::from_millis(ms.unwrap_or(0)).min(MAX_PAUSE),
        ))
    }
}

/// Where in a fenced confirm ([`purchase::confirm`]) the race-lab pause happens. The
/// fault tests park a server at one of these points and kill it there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PausePoint {
    /// After the payment, before the fenced write: a holder that stalls (the default).
    #[default]
    BeforeWrite,
    /// After the fenced write, inside the open transaction, before the Redis release.
    BeforeRelease,
    /// After the Redis release, before `COMMIT`.
    BeforeCommit,
    /// After `COMMIT`, before the reply (and before the session forgets the hold).
    AfterCommit,
}

impl PausePoint {
    /// The header value naming this point (`before-write`, `before-release`, …).
    pub fn header_value(self) -> &'static str {
        match self {
            PausePoint::BeforeWrite => "before-write",
            PausePoint::BeforeRelease => "before-release",
            PausePoint::BeforeCommit => "before-commit",
            PausePoint::AfterCommit => "after-commit",
        }
    }

    fn parse(value: &str) -> Option<Self> {
        [
            PausePoint::BeforeWrite,
            PausePoint::BeforeRelease,
            PausePoint::BeforeCommit,
            PausePoint::AfterCommit,
        ]
        .into_iter()
        .find(|p| p.header_value() == value)
    }
}

/// A race-lab pause and where it happens: the `x-race-lab-pause-ms` and
/// `x-race-lab-pause-at` headers (both ignored without `--enable-race-lab`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pause {
    /// How long.
    pub duration: Duration,
    /// Where.
    pub at: PausePoint,
}

impl Pause {
    /// No pause at all (outside the race lab).
    pub const NONE: Pause = Pause {
        duration: Duration::ZERO,
        at: PausePoint::BeforeWrite,
    };

    /// The pause's length if it happens at `point`, else zero.
    pub fn at(&self, point: PausePoint) -> Duration {
        if self.at == point {
            self.duration
        } else {
            Duration::ZERO
        }
    }

    /// Sleeps for the pause if it happens at `point`.
    pub async fn sleep_at(&self, point: PausePoint) {
        let duration = self.at(point);
        if !duration.is_zero() {
            tracing::warn!(?point, ?duration, "race lab: pausing");
            tokio::time::sleep(duration).await;
        }
    }
}

impl FromRequestParts<AppState> for Pause {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let RaceLabPause(duration) = RaceLabPause::from_request_parts(parts, state).await?;
        let at = race_lab_header(
            parts,
            state,
            PAUSE_AT_HEADER,
            "before-write, before-release, before-commit or after-commit",
            PausePoint::parse,
        )?;
        Ok(Pause {
            duration,
            at: at.unwrap_or_default(),
        })
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
pub async fn confirm(state: &AppState, buyer: &Buyer, seat: SeatRef, pause: Pause) -> Result<i64> {
    let delay = state.settings.payment_delay() + pause.at(PausePoint::BeforeWrite);
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
            let token = Some(lease.fencing_token().0 as i64);
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
