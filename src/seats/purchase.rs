//! The seat picker's rules, along the article's steps:
//!
//! * [`hold`]: step 1 and 2: create-if-absent with a lease (`SET … NX PX`), one Redis
//!   round trip, plus the grant's fencing token (step 4).
//! * [`release`]: step 3: compare-and-delete with the owner token kept in the session.
//! * [`confirm`]: step 4: the fenced, conditional write in Postgres, and the hold's
//!   release before commit, so a purchase whose hold lapsed is rolled back.

use lease::{Lease, LeaseError, LeaseKey};
use tracing::Span;
use tracing::field::Empty;

use super::{SeatRef, queries};
use crate::buyer::{Buyer, HeldSeat};
use crate::error::{Error, Refusal, Result};
use crate::pause::{Pause, PausePoint};
use crate::state::AppState;
use crate::telemetry::{self, ConfirmOutcome};

/// What a hold request ended in.
#[derive(Debug)]
pub enum HoldOutcome {
    /// A new lease: the seat is held for the buyer until `lease.expires_at_ms()`.
    Granted(Lease),
    /// The buyer already held this seat; nothing changed.
    AlreadyYours,
}

/// Holds `seat` for `buyer` for the configured TTL.
///
/// Round trips: one Postgres read (the seat exists and is unsold), one Redis script
/// (the lease), one session write. Errors: 404 unknown seat, 409 sold or "someone is
/// buying this seat", 503 store unavailable.
///
/// Traced as span `hold` with the event, seat, buyer and (once granted) fencing token;
/// counted in [`telemetry::HOLDS_GRANTED_TOTAL`] / [`telemetry::HOLDS_REFUSED_TOTAL`].
#[tracing::instrument(name = "hold", skip_all, fields(event = seat.event_id, seat = seat.seat_id, buyer = buyer.id(), fencing_token = Empty))]
pub async fn hold(state: &AppState, buyer: &Buyer, seat: SeatRef) -> Result<HoldOutcome> {
    let status = telemetry::postgres("seat_status", queries::seat_status(&state.db, seat))
        .await?
        .ok_or_else(|| Error::NotFound("This event has no such seat.".into()))?;
    if status.sold {
        telemetry::hold_refused(&Refusal::AlreadySold);
        return Err(Refusal::AlreadySold.into());
    }
    let key = super::lease_key(&state.settings.lease_namespace, seat);
    match state
        .leases
        .acquire(&key, buyer.id(), state.settings.hold_ttl())
        .await
    {
        Ok(lease) => {
            Span::current().record("fencing_token", lease.fencing_token().0);
            telemetry::hold_granted();
            buyer
                .remember_hold(seat.event_id, seat.seat_id, HeldSeat::from_lease(&lease))
                .await?;
            tracing::info!(
                event = seat.event_id,
                seat = seat.seat_id,
                buyer = buyer.id(),
                fencing_token = lease.fencing_token().0,
                "hold granted"
            );
            Ok(HoldOutcome::Granted(lease))
        }
        Err(LeaseError::Held { holder, .. }) if holder == buyer.id() => {
            // Make sure the session knows this hold (it may have lost it).
            held_lease(state, buyer, seat).await?;
            Ok(HoldOutcome::AlreadyYours)
        }
        Err(err) => {
            if matches!(err, LeaseError::Held { .. }) {
                telemetry::hold_refused(&Refusal::SomeoneIsBuying);
            }
            Err(err.into())
        }
    }
}

/// The buyer's hold on `seat`, from the session, as a lease (`None` if the session has
/// none; it may have lapsed in Redis).
pub(crate) async fn held_lease(
    state: &AppState,
    buyer: &Buyer,
    seat: SeatRef,
) -> Result<Option<Lease>> {
    let key = super::lease_key(&state.settings.lease_namespace, seat);
    if let Some(held) = buyer.hold(seat.event_id, seat.seat_id).await? {
        return Ok(Some(held.lease(key)));
    }
    recover_hold(state, buyer, seat, &key).await
}

/// The buyer's live hold from Redis when the session lost its record of it (two
/// concurrent requests of one session each saved their own copy of the holds; or the
/// session save after a grant failed), written back to the session. One Redis script;
/// `None` if Redis has no live hold of this buyer on the seat.
async fn recover_hold(
    state: &AppState,
    buyer: &Buyer,
    seat: SeatRef,
    key: &LeaseKey,
) -> Result<Option<Lease>> {
    let Some(lease) = state.leases.owned_by(key, buyer.id()).await? else {
        return Ok(None);
    };
    buyer
        .remember_hold(seat.event_id, seat.seat_id, HeldSeat::from_lease(&lease))
        .await?;
    Ok(Some(lease))
}

/// 403: the buyer has no hold on this seat.
pub(crate) fn not_your_hold() -> Error {
    Error::Forbidden("You do not hold this seat. Pick it on the seat map first.".into())
}

/// Releases the buyer's hold on `seat` (owner-checked). A hold that already lapsed is
/// simply forgotten. Errors: 403 if the buyer has no hold on it, 503 Redis unavailable.
/// Traced as span `release` (event, seat, buyer, fencing token).
#[tracing::instrument(name = "release", skip_all, fields(event = seat.event_id, seat = seat.seat_id, buyer = buyer.id(), fencing_token = Empty))]
pub async fn release(state: &AppState, buyer: &Buyer, seat: SeatRef) -> Result<()> {
    let lease = held_lease(state, buyer, seat)
        .await?
        .ok_or_else(not_your_hold)?;
    Span::current().record("fencing_token", lease.fencing_token().0);
    state.leases.release(&lease).await?;
    buyer.forget_hold(seat.event_id, seat.seat_id).await
}

/// Buys `seat` for `buyer` with the fencing token of the buyer's hold; returns the
/// order id.
///
/// 1. Simulated payment (the configured delay; no provider is called).
/// 2. In one Postgres transaction: [`queries::sell`], the conditional fenced write.
/// 3. Before committing: release the hold in Redis (compare-and-delete). If the hold had
///    lapsed, roll back: a confirm after the buyer's own hold lapsed is refused even if
///    nobody else bought the seat.
///
/// `pause` is the race lab's "holder that pauses" (a GC pause, a stalled VM): by default
/// added to the payment delay, between taking the hold and writing; the fault tests move
/// it to the other [`PausePoint`]s to kill a server there. [`Pause::NONE`] outside the
/// race lab.
///
/// Round trips: one Redis script, one Postgres transaction (BEGIN, the statement,
/// COMMIT). Confirming twice returns the same order (the second finds the seat sold to
/// this buyer). Errors: 403 no hold, 409 sold or hold lapsed or token stale, 503.
///
/// Traced as span `confirm` (event, seat, buyer, fencing token); outcomes counted in
/// [`telemetry::CONFIRMS_TOTAL`], a sale stopped by `orders_one_per_seat` in
/// [`telemetry::DOUBLE_SALES_DETECTED_TOTAL`].
#[tracing::instrument(name = "confirm", skip_all, fields(event = seat.event_id, seat = seat.seat_id, buyer = buyer.id(), fencing_token = Empty))]
pub async fn confirm(state: &AppState, buyer: &Buyer, seat: SeatRef, pause: Pause) -> Result<i64> {
    let Some(lease) = held_lease(state, buyer, seat).await? else {
        // A second submit after the first completed: the session no longer has the hold.
        return match queries::order_of(&state.db, seat, buyer.id()).await? {
            Some(order_id) => Ok(order_id),
            None => Err(not_your_hold()),
        };
    };
    tokio::time::sleep(state.settings.payment_delay()).await;
    pause.sleep_at(PausePoint::BeforeWrite).await;

    let mut tx = state.db.begin().await?;
    let token = lease.fencing_token().0 as i64;
    Span::current().record("fencing_token", token);
    let sell = queries::sell(&mut tx, seat, token, buyer.id(), &buyer.profile.name);
    let sold = telemetry::postgres("sell", sell)
        .await
        .inspect_err(detect_double_sale)?;
    let Some(order_id) = sold else {
        tx.rollback().await?;
        return refused(state, buyer, seat, &lease).await;
    };
    pause.sleep_at(PausePoint::BeforeRelease).await;
    if !state.leases.release(&lease).await? {
        tx.rollback().await?;
        buyer.forget_hold(seat.event_id, seat.seat_id).await?;
        telemetry::confirm(ConfirmOutcome::Rejected(&Refusal::HoldExpired));
        tracing::info!(
            event = seat.event_id,
            seat = seat.seat_id,
            buyer = buyer.id(),
            fencing_token = token,
            "confirm refused: hold lapsed"
        );
        return Err(Refusal::HoldExpired.into());
    }
    pause.sleep_at(PausePoint::BeforeCommit).await;
    telemetry::postgres("commit", tx.commit()).await?;
    telemetry::confirm(ConfirmOutcome::Accepted);
    pause.sleep_at(PausePoint::AfterCommit).await;
    buyer.forget_hold(seat.event_id, seat.seat_id).await?;
    tracing::info!(
        event = seat.event_id,
        seat = seat.seat_id,
        buyer = buyer.id(),
        fencing_token = token,
        order = order_id,
        "seat sold"
    );
    Ok(order_id)
}

/// Explains a refused [`queries::sell`]: already bought by this buyer (a double submit:
/// returns the order), a stale fencing token (the row accepted a higher one), or sold.
async fn refused(state: &AppState, buyer: &Buyer, seat: SeatRef, lease: &Lease) -> Result<i64> {
    if let Some(order_id) = queries::order_of(&state.db, seat, buyer.id()).await? {
        return Ok(order_id);
    }
    // The hold is worthless now; free it if it is still ours (owner-checked).
    let _ = state.leases.release(lease).await;
    buyer.forget_hold(seat.event_id, seat.seat_id).await?;
    let status = queries::seat_status(&state.db, seat).await?;
    match status {
        Some(s) if s.fence_token > lease.fencing_token().0 as i64 => {
            tracing::warn!(
                event = seat.event_id,
                seat = seat.seat_id,
                buyer = buyer.id(),
                fencing_token = lease.fencing_token().0,
                accepted = s.fence_token,
                "confirm refused: stale fencing token"
            );
            telemetry::confirm(ConfirmOutcome::Rejected(&Refusal::StaleToken));
            Err(Refusal::StaleToken.into())
        }
        _ => {
            telemetry::confirm(ConfirmOutcome::Rejected(&Refusal::AlreadySold));
            Err(Refusal::AlreadySold.into())
        }
    }
}

/// Counts a sale refused by the `orders_one_per_seat` constraint: the fenced write let a
/// second sale of the seat through and only the constraint stopped it (a bug).
fn detect_double_sale(err: &sqlx::Error) {
    if let sqlx::Error::Database(db) = err
        && db.constraint() == Some("orders_one_per_seat")
    {
        telemetry::double_sale_detected();
    }
}
