//! Server side of the race lab: the unsafe strategies' hold and confirm, and
//! `GET /race-lab`.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use seatlock::failpoint::{self, PausePoint};
use seatlock::http::buyer::Buyer;
use seatlock::http::error::{Error, Refusal, Result};
use seatlock::seats::{SeatPost, SeatRef, purchase, queries as seat_queries};
use seatlock::state::AppState;

use super::queries;
use crate::{LabSettings, PurchaseStrategy};

/// Hold and confirm under `strategy`, in place of the product's
/// ([`seatlock::seats::purchase_routes`]); chosen once, by [`seatlock::app::router`].
/// `lock_delay` is `race-lab-lock-delay`'s (`--lab-lock-delay-ms`).
pub(crate) fn purchase_routes(
    strategy: PurchaseStrategy,
    lock_delay: Duration,
) -> Router<AppState> {
    Router::new()
        .route("/events/{event}/seats/{seat}/hold", post(hold_route))
        .route("/events/{event}/seats/{seat}/confirm", post(confirm_route))
        .layer(Extension(strategy))
        .layer(Extension(LockDelay(lock_delay)))
}

/// `race-lab-lock-delay`'s delay after a lapse, for its confirm.
#[derive(Clone, Copy)]
struct LockDelay(Duration);

async fn hold_route(
    State(state): State<AppState>,
    Extension(strategy): Extension<PurchaseStrategy>,
    buyer: Buyer,
    SeatPost(seat, page): SeatPost,
) -> Result<Redirect> {
    hold(&state, strategy, &buyer, seat).await?;
    Ok(page.back(seat))
}

async fn confirm_route(
    State(state): State<AppState>,
    Extension(strategy): Extension<PurchaseStrategy>,
    Extension(LockDelay(lock_delay)): Extension<LockDelay>,
    buyer: Buyer,
    SeatPost(seat, page): SeatPost,
) -> Result<Redirect> {
    confirm(&state, strategy, lock_delay, &buyer, seat).await?;
    Ok(page.back(seat))
}

/// A hold under the server's race-lab strategy. `race-lab-unfenced-lease` takes the
/// product's lease; the lock-free ones only check that the seat exists and is unsold
/// (there is nothing to hold).
async fn hold(
    state: &AppState,
    strategy: PurchaseStrategy,
    buyer: &Buyer,
    seat: SeatRef,
) -> Result<()> {
    if strategy.uses_lease() {
        return purchase::hold(state, buyer, seat).await.map(drop);
    }
    match seat_queries::seat_status(&state.db, seat).await? {
        None => Err(Error::no_such_seat()),
        Some(status) if status.sold => Err(Refusal::AlreadySold.into()),
        Some(_) => Ok(()),
    }
}

/// A purchase under the server's race-lab strategy; returns the `race_lab_sales.id`
/// (the product's `fenced` path is [`purchase::confirm`], never routed here).
async fn confirm(
    state: &AppState,
    strategy: PurchaseStrategy,
    lock_delay: Duration,
    buyer: &Buyer,
    seat: SeatRef,
) -> Result<i64> {
    // The payment, then the race lab's pause: the holder that stalls before its write.
    let delay = async {
        tokio::time::sleep(state.settings.payment_delay()).await;
        failpoint::point(PausePoint::BeforeWrite).await;
    };
    match strategy {
        // Never routed here (the product's routes serve it); delegating keeps it safe.
        PurchaseStrategy::Fenced => purchase::confirm(state, buyer, seat).await,
        PurchaseStrategy::RaceLabNaive => {
            // Read, think, write: the classic check-then-act race.
            let status = seat_queries::seat_status(&state.db, seat).await?;
            if status.is_none_or(|s| s.sold) {
                return Err(Refusal::AlreadySold.into());
            }
            delay.await;
            Ok(queries::sell_unconditionally(
                &state.db,
                seat,
                buyer.id(),
                None,
                strategy.short_name(),
            )
            .await?)
        }
        PurchaseStrategy::RaceLabUnfencedLease | PurchaseStrategy::RaceLabLockDelay => {
            let lease = purchase::held_lease(state, buyer, seat)
                .await?
                .ok_or_else(|| purchase::no_live_hold(buyer, seat))?;
            // Chubby's lock-delay: should this lease lapse, nobody is granted the seat
            // until `lock_delay` after its end. It is the cooling marker, set to last
            // that long past the lease (docs/time-to-pay.md); the release and the sale's
            // retire below clear it, as Chubby frees a lock released cleanly at once.
            if strategy == PurchaseStrategy::RaceLabLockDelay {
                let key = lease.key().clone();
                let until_delay_ends = lease.ttl() + lock_delay;
                state
                    .leases
                    .owned_by_paying(&key, buyer.id(), until_delay_ends)
                    .await?;
            }
            // The lock check...
            if !state.leases.is_held(&lease).await? {
                return Err(Refusal::HoldExpired.into());
            }
            // ...a pause that can outlast the lease, and a write nobody fences.
            delay.await;
            let token = Some(lease.fencing_token().as_i64());
            let sale = queries::sell_unconditionally(
                &state.db,
                seat,
                buyer.id(),
                token,
                strategy.short_name(),
            )
            .await?;
            // Sold: retire the seat as the product does, so later holds are refused as
            // sold by the lease script; owner-checked release (false if it lapsed).
            state.leases.retire(&lease).await?;
            Ok(sale)
        }
        PurchaseStrategy::RaceLabConditional => {
            delay.await;
            queries::sell_if_unsold(&state.db, seat, buyer.id())
                .await?
                .ok_or_else(|| Refusal::AlreadySold.into())
        }
    }
}

/// `GET /race-lab`: `{"strategy": "race-lab-naive"}`, so `load-test --target` can check
/// what it is racing.
async fn describe(Extension(strategy): Extension<PurchaseStrategy>) -> Json<serde_json::Value> {
    Json(serde_json::json!({ "strategy": strategy.flag_value() }))
}

/// `GET /race-lab`, `POST /race-lab/events/{event}/hold-group` and the lab's pages under
/// `/lab` ([`super::lab`]). Without `--enable-race-lab` each answers 404 and says how to
/// start the lab.
pub(crate) fn router(lab: &LabSettings) -> Router<AppState> {
    let routes = Router::new()
        .route("/race-lab", get(describe))
        .route(
            "/race-lab/events/{event}/hold-group",
            post(super::group::hold_group_route),
        )
        .merge(super::lab::router(lab.lab_clock_server.as_deref()))
        .layer(Extension(lab.purchase_strategy))
        // The lab's own settings, for the pages that start servers of their own.
        .layer(Extension(lab.clone()));
    // Decided once, here: a handler never asks whether the lab is on.
    if lab.enable_race_lab {
        routes
    } else {
        routes.route_layer(axum::middleware::from_fn(not_enabled))
    }
}

/// Middleware: 404 for every route of the lab while it is off.
async fn not_enabled(_req: Request, _next: Next) -> Response {
    Error::NotFound(
        "The race lab is not enabled on this server: start it with `make lab` (or \
         `seatlock-lab serve --enable-race-lab`)."
            .into(),
    )
    .into_response()
}
