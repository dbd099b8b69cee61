//! The seat picker's rules, along the article's steps (a purchase's own phases are
//! lettered (a) to (e) below, on `pay_and_sell`, so the two never mix):
//!
//! * [`hold`]: step 1 and 2: create-if-absent with a lease (`SET … NX PX`), one Redis
//!   round trip, plus the grant's fencing token (step 4). No Postgres: the seat and the
//!   event's start come from the process's [`super::catalog`], and a sold seat is refused
//!   by the lease script (a sale retires the seat's lease).
//! * [`release`]: step 3: compare-and-delete, the owner token found by the buyer's id in
//!   the same script ([`lease::LeaseStore::release_held_by`]).
//! * [`confirm`]: step 4: the fenced, conditional write in Postgres, then the owner check
//!   with the row locked, the commit, and only then the release, which also retires the
//!   seat: whatever fails, the buyer keeps the order or the hold.
//!
//! Redis is the record of who holds what, and the only one: a buyer's holds are found
//! there by the buyer's id (the holder label of each grant), so their owner tokens never
//! leave Redis and the server, and no session keeps a copy that could go stale.

use lease::{Grant, Lease, LeaseError};
use tracing::Span;
use tracing::field::Empty;

use super::SeatRef;
use super::queries::{self, Sale};
use crate::failpoint::{self, PausePoint};
use crate::http::buyer::Buyer;
use crate::http::error::{Error, Refusal, Result};
use crate::state::AppState;
use crate::telemetry::{self, ConfirmOutcome};
use crate::waiting_room;

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
/// Checks, without Postgres: the seat belongs to the event and the event has not started
/// (the [`super::catalog`], read from Postgres once per event and process, the start on
/// this process's clock); the seat is not sold (the acquire script refuses a seat retired
/// by its sale, [`lease::LeaseStore::retire`]). A sold seat can still be granted while
/// Redis does not know it is retired (Redis lost its data, or the server that sold it
/// died between its commit and the retire): that hold is refused at confirm by the fenced
/// write, as `sold`, and the confirm retires the seat then. The fenced write is the
/// guarantee; these checks only spare buyers a hold that cannot be bought.
///
/// Round trips: one Redis script (the lease), nothing else (the buyer is known from their
/// signed cookie); Postgres none, except one read on the event's first hold in this
/// process. Errors: 404
/// no such event or no such seat, 409 sold, event started, "someone is buying this seat" or the buyer's
/// limit reached (`--max-seats-per-buyer`, counted by Redis in the same script:
/// [`Refusal::SeatLimit`]), 503 store unavailable.
///
/// Traced as span `hold` with the event, seat, buyer and (once granted) fencing token;
/// counted in `telemetry::HOLDS_GRANTED_TOTAL` / `telemetry::HOLDS_REFUSED_TOTAL`.
#[tracing::instrument(name = "hold", skip_all, fields(event = seat.event_id, seat = seat.seat_id, buyer = buyer.id(), fencing_token = Empty))]
pub async fn hold(state: &AppState, buyer: &Buyer, seat: SeatRef) -> Result<HoldOutcome> {
    let event = state.catalog.event(&state.db, seat.event_id).await?;
    let event = event.ok_or_else(Error::no_such_event)?;
    if !event.has_seat(seat.seat_id) {
        return Err(Error::no_such_seat());
    }
    if event.started() {
        telemetry::hold_refused(&Refusal::EventStarted);
        return Err(Refusal::EventStarted.into());
    }
    let key = super::lease_key(&state.settings.lease_namespace, seat);
    let grant = Grant {
        limit: Some(state.settings.max_seats_per_buyer),
        admission: waiting_room::admission(state, buyer, seat.event_id).await?,
        ..Grant::new([key], buyer.id(), state.settings.hold_ttl())
    };
    match state
        .leases
        .acquire_all(&grant)
        .await
        .map(|mut leases| leases.remove(0))
    {
        Ok(lease) => {
            Span::current().record("fencing_token", lease.fencing_token().as_i64());
            telemetry::hold_granted();
            buyer.remember_hold(seat.event_id, seat.seat_id);
            tracing::info!("hold granted");
            Ok(HoldOutcome::Granted(lease))
        }
        // A second click, or another tab of the same buyer: the lease in Redis is theirs.
        Err(LeaseError::Held { holder, .. }) if holder == buyer.id() => {
            buyer.remember_hold(seat.event_id, seat.seat_id);
            Ok(HoldOutcome::AlreadyYours)
        }
        // Held by someone else: `held`; retired by its sale: `sold`; over the buyer's
        // limit: `seat_limit`; the event's waiting room has not admitted the buyer:
        // `not_admitted`.
        Err(err) => Err(hold_refused(err)),
    }
}

/// A hold refused by Redis as the buyer's error (409 held, sold or the buyer's limit;
/// 503 a store unavailable), counted in `telemetry::HOLDS_REFUSED_TOTAL`.
pub fn hold_refused(err: LeaseError) -> Error {
    let err = Error::from(err);
    if let Error::Refused(refusal) = &err {
        telemetry::hold_refused(refusal);
    }
    err
}

/// The buyer's live lease on `seat`, found in Redis by the buyer's id (one script,
/// [`lease::LeaseStore::owned_by`]), owner token included; `None` if the buyer holds no
/// live lease on it.
pub async fn held_lease(state: &AppState, buyer: &Buyer, seat: SeatRef) -> Result<Option<Lease>> {
    let key = super::lease_key(&state.settings.lease_namespace, seat);
    Ok(state.leases.owned_by(&key, buyer.id()).await?)
}

/// The refusal for a buyer with no live hold on `seat`: 409 [`Refusal::HoldExpired`] if
/// their browser remembers holding it ([`Buyer::had_hold`]), else 403
/// (`not_your_hold`).
pub fn no_live_hold(buyer: &Buyer, seat: SeatRef) -> Error {
    if buyer.had_hold(seat.event_id, seat.seat_id) {
        Refusal::HoldExpired.into()
    } else {
        not_your_hold()
    }
}

/// 403: the buyer has no hold on this seat.
pub(crate) fn not_your_hold() -> Error {
    Error::Forbidden("You do not hold this seat. Pick it on the seat map first.".into())
}

/// Releases the buyer's hold on `seat`: compare-and-delete with the owner token that
/// the same script finds by the buyer's id ([`lease::LeaseStore::release_held_by`]), so a
/// lease that passed to another buyer is never touched. One Redis round trip. Success
/// means the buyer holds the seat no more: a hold that lapsed is released already.
/// Errors: 403 if the buyer never held it (as far as their browser remembers,
/// [`Buyer::had_hold`]), 503 Redis unavailable. Traced as span `release` (event, seat,
/// buyer).
#[tracing::instrument(name = "release", skip_all, fields(event = seat.event_id, seat = seat.seat_id, buyer = buyer.id()))]
pub async fn release(state: &AppState, buyer: &Buyer, seat: SeatRef) -> Result<()> {
    let key = super::lease_key(&state.settings.lease_namespace, seat);
    let released = state.leases.release_held_by(&key, buyer.id()).await?;
    if !released && !buyer.had_hold(seat.event_id, seat.seat_id) {
        return Err(not_your_hold());
    }
    buyer.forget_hold(seat.event_id, seat.seat_id);
    Ok(())
}

/// Buys `seat` for `buyer` with the fencing token of the buyer's hold; returns the
/// order id. What this layer adds: the purchase runs on a task of its own, so a buyer
/// who hangs up (a closed tab, a lost signal) does not cancel it half way: the retry
/// finds the order, or the hold still there.
///
/// The layers below, each adding one thing: `purchase_with_live_lease` (the buyer's live
/// lease, and once more if another grant of the buyer's replaced it meanwhile),
/// `pay_and_sell` (the hold's payment, joined and left) and `sell_fenced` (the
/// fenced transaction, phases (b) to (e)). Their order leaves the buyer, whatever fails or
/// crashes, with either the order or the hold (until its TTL), never neither, while a
/// hold that lapsed before the commit still cannot buy.
///
/// Traced as span `confirm` (event, seat, buyer, fencing token); outcomes counted in
/// `telemetry::CONFIRMS_TOTAL`, a sale stopped by `orders_one_per_seat` in
/// `telemetry::DOUBLE_SALES_DETECTED_TOTAL`. Errors: 403 no hold, 409 sold or hold
/// lapsed or token stale, 503 a store unavailable (retry: nothing was lost).
#[tracing::instrument(name = "confirm", skip_all, fields(event = seat.event_id, seat = seat.seat_id, buyer = buyer.id(), fencing_token = Empty))]
pub async fn confirm(state: &AppState, buyer: &Buyer, seat: SeatRef) -> Result<i64> {
    let purchase = purchase_with_live_lease(state.clone(), buyer.clone(), seat);
    let deadline = state.settings.request_deadline();
    crate::http::detached::to_completion("The purchase", deadline, purchase).await
}

/// [`confirm`]'s purchase with the buyer's live lease, then, if that lease turns out not
/// to be the buyer's at the owner check, once more with the live lease Redis has for the
/// buyer by then (another tab held the seat again after a lapse). A hold that is gone is
/// 403, unless this buyer bought the seat already (a submit sent twice): then its order.
async fn purchase_with_live_lease(state: AppState, buyer: Buyer, seat: SeatRef) -> Result<i64> {
    let Some(lease) = held_lease(&state, &buyer, seat).await? else {
        // No live hold: perhaps a submit after a purchase that completed; else a hold
        // that lapsed (if the browser remembers it), or none at all.
        return match queries::order_of(&state.db, seat, buyer.id()).await? {
            Some(order_id) => Ok(order_id),
            None => {
                let refused = no_live_hold(&buyer, seat);
                if let Error::Refused(refusal) = &refused {
                    telemetry::confirm(ConfirmOutcome::Rejected(refusal));
                }
                Err(refused)
            }
        };
    };
    if let Some(order_id) = pay_and_sell(&state, &buyer, seat, &lease).await? {
        return Ok(order_id);
    }
    // The hold was not ours at the owner check: it lapsed, and perhaps the buyer holds the
    // seat again under a new grant; one more attempt with that. It runs without the
    // pause seam's pause: the stalled holder was the first attempt.
    if let Some(live) = held_lease(&state, &buyer, seat).await?
        && live != lease
        && let Some(order_id) =
            failpoint::without(pay_and_sell(&state, &buyer, seat, &live)).await?
    {
        return Ok(order_id);
    }
    // No live hold of ours: it lapsed, and a lapsed hold cannot buy.
    telemetry::confirm(ConfirmOutcome::Rejected(&Refusal::HoldExpired));
    tracing::info!("confirm refused: hold lapsed");
    Err(Refusal::HoldExpired.into())
}

/// One purchase attempt with `lease`; `None` if the hold was not ours at the owner check.
/// What this layer adds: the payment. Every attempt joins the hold's one payment, and an
/// attempt that does not buy leaves it (the last to leave voids it). The steps of a
/// purchase, in this order:
///
/// (a) Payment: the attempt joins the hold's one payment ([`queries::authorize_payment`]):
///    its idempotency key is the hold's (event, seat, fencing token), so a retried or
///    doubled confirm, or a checkout of the seat from another tab, never pays twice.
/// (b) In one transaction: [`queries::sell`], the fenced conditional write (NOT sold and
///    fencing token not lower than the row's), which also captures the payment and
///    takes the row lock; a sale whose capture finds the payment voided is rolled back
///    ([`Refusal::PaymentVoided`]): no capture, no order.
/// (c) Owner check in Redis (`GET`, compared): is the hold still ours? If not, roll back
///    and return `None`: a hold that lapsed cannot buy, even when the holder after it
///    came and went without writing (the fence alone would let the older token
///    through). Checked AFTER the write, with the row locked: from then to the commit no
///    other holder's write can be accepted, so the lease was ours at a moment from which
///    the row stayed ours until the commit.
/// (d) COMMIT.
/// (e) Release the hold (compare-and-delete) and retire the seat, so later holds of it are
///    refused by the lease script ([`give_up`]), best effort: the order stands either
///    way, and a hold left behind only lapses by its TTL on a seat shown sold.
///
/// Phases (b) to (e) are [`sell_fenced`]. A crash before (d) rolls the transaction back
/// and leaves the hold (the retry buys); a crash after (d) leaves the order. A holder
/// that stalls between (b) and (d) keeps the row locked for at most
/// [`crate::config::Settings::purchase_idle_timeout`] (Postgres ends its idle
/// transaction), less than the lock wait a valid holder's confirm allows
/// ([`crate::config::Settings::lock_wait`]), less than the store timeout.
///
/// Round trips: Redis: the owner check and the release; Postgres: the authorization,
/// then one transaction (BEGIN, the statement, COMMIT).
async fn pay_and_sell(
    state: &AppState,
    buyer: &Buyer,
    seat: SeatRef,
    lease: &Lease,
) -> Result<Option<i64>> {
    let token = lease.fencing_token().as_i64();
    Span::current().record("fencing_token", token);
    // (a) Payment, joined under the hold's key: a second attempt (a retry, another tab)
    // joins the same authorization instead of paying again.
    let payment = payment_key(seat, token);
    // The simulated payment provider's time (`--payment-delay-ms`, 0 by default).
    tokio::time::sleep(state.settings.payment_delay()).await;
    let authorize = queries::authorize_payment(&state.db, seat, &payment, buyer.id());
    telemetry::postgres("authorize", authorize).await?;
    let attempt = sell_fenced(state, buyer, seat, lease, &payment).await;
    // Only a sale that committed here captured this payment. Every other end (refused,
    // lapsed, a store failing, or the order this buyer bought under another hold) leaves
    // it; the last attempt to leave voids it, so another tab's attempt in flight keeps it.
    if !matches!(attempt, Ok(Attempt::Sold(_))) {
        leave_payment(state, &payment).await;
    }
    match attempt? {
        Attempt::Sold(order_id) => Ok(Some(order_id)),
        Attempt::Refused => sale_refused(state, buyer, seat, lease).await.map(Some),
        Attempt::NotOurs => Ok(None),
    }
}

/// How the fenced transaction of one attempt ended ([`sell_fenced`]).
enum Attempt {
    /// This attempt's sale committed (its payment captured): the order id.
    Sold(i64),
    /// The fenced write refused the sale; nothing was written ([`sale_refused`] says why).
    Refused,
    /// The hold was not ours at the owner check; rolled back.
    NotOurs,
}

/// Phases (b) to (e) of [`pay_and_sell`], once the payment is authorized under `payment`: the
/// fenced write, the owner check, the commit and the release. The pause seam's
/// points ([`PausePoint`]) sit between the steps.
async fn sell_fenced(
    state: &AppState,
    buyer: &Buyer,
    seat: SeatRef,
    lease: &Lease,
    payment: &str,
) -> Result<Attempt> {
    failpoint::point(PausePoint::BeforeWrite).await;
    // (b) The fenced write, in a transaction that holds the row lock from here to the
    // commit; Postgres ends the transaction if this holder stalls past its idle bound.
    // The name goes on the order: read before the transaction (a session read, only for a
    // buyer who gave a name), so the row lock is not held across it.
    let profile = buyer.profile().await?;
    let mut tx = state.db.begin().await?;
    let idle_bound = state.settings.purchase_idle_timeout();
    let token = lease.fencing_token().as_i64();
    let sell = queries::sell(&mut tx, seat, token, &profile, payment, idle_bound);
    let sold = telemetry::postgres("sell", sell)
        .await
        .inspect_err(detect_double_sale)?;
    let order_id = match sold {
        Sale::Sold { order_id } => order_id,
        // Sold, stale token or event started: nothing written; the caller explains it.
        Sale::Refused => {
            tx.rollback().await?;
            return Ok(Attempt::Refused);
        }
        // The capture found the payment voided: no capture, no order.
        Sale::Unpaid => return unpaid(tx).await,
    };
    failpoint::point(PausePoint::BeforeOwnerCheck).await;
    // (c) The owner check, with the row locked: a hold that lapsed cannot buy.
    if !state.leases.is_held(lease).await? {
        tx.rollback().await?;
        return Ok(Attempt::NotOurs);
    }
    failpoint::point(PausePoint::BeforeCommit).await;
    // (d) COMMIT: from here the order stands, whatever happens next.
    telemetry::postgres("commit", tx.commit()).await?;
    telemetry::confirm(ConfirmOutcome::Accepted);
    state.boards.forget(seat.event_id);
    tracing::info!(order = order_id, "seat sold");
    failpoint::point(PausePoint::AfterCommit).await;
    // (e) Release the hold and retire the seat (best effort).
    give_up(state, lease, true).await;
    buyer.forget_hold(seat.event_id, seat.seat_id);
    Ok(Attempt::Sold(order_id))
}

/// What a checkout's attempt ([`pay_and_sell_all`]) ended in.
#[derive(Debug)]
pub(super) enum Checkout {
    /// Every seat bought: the order ids, in the order of the holds.
    Bought(Vec<i64>),
    /// One seat was bought already by this buyer (a checkout sent twice): nothing else
    /// was bought, and that seat's hold is forgotten; the next attempt buys the rest.
    BoughtAlready,
    /// The holds (by index) that were not the buyer's at the owner check: nothing was
    /// bought, and the other holds are untouched.
    NotOurs(Vec<usize>),
}

/// [`pay_and_sell`] for several holds at once (the cart's checkout,
/// [`super::cart::checkout`]), all or nothing, in the same order of steps: each seat's
/// payment authorized under its own hold's key; ONE transaction with [`queries::sell`]
/// per seat, each fenced with its own hold's fencing token; the owner check of every hold
/// in Redis with every row locked; COMMIT; then each hold released and its seat retired.
///
/// Unless every seat is [`Checkout::Bought`], every payment joined is left. A seat the
/// fenced write refused (sold, stale token, event started) rolls everything back with
/// that seat's refusal ([`sale_refused`], which gives up its worthless hold). Round
/// trips: Postgres one authorization per seat and one transaction; Redis one owner check
/// per seat, then one retire per seat.
pub(super) async fn pay_and_sell_all(
    state: &AppState,
    buyer: &Buyer,
    holds: &[(SeatRef, Lease)],
) -> Result<Checkout> {
    // (a) Payments: one per hold, each under its own hold's key.
    let payments: Vec<String> = holds
        .iter()
        .map(|(seat, lease)| payment_key(*seat, lease.fencing_token().as_i64()))
        .collect();
    // The simulated payment provider's time (`--payment-delay-ms`, 0 by default).
    tokio::time::sleep(state.settings.payment_delay()).await;
    let mut joined = 0;
    let mut authorized = Ok(());
    for ((seat, _), payment) in holds.iter().zip(&payments) {
        let authorize = queries::authorize_payment(&state.db, *seat, payment, buyer.id());
        authorized = telemetry::postgres("authorize", authorize).await;
        if authorized.is_err() {
            break;
        }
        joined += 1;
    }
    let bought = match authorized {
        Ok(()) => sell_all_fenced(state, buyer, holds, &payments).await,
        Err(err) => Err(err.into()),
    };
    // The checkout leaves only the payments it joined, and voids only those it is the
    // last attempt in: a single-seat confirm of one of these seats from another tab
    // keeps its authorization.
    if !matches!(bought, Ok(Checkout::Bought(_))) {
        for payment in &payments[..joined] {
            leave_payment(state, payment).await;
        }
    }
    bought
}

/// Phases (b) to (e) of [`pay_and_sell_all`]: the fenced writes in one transaction, the owner
/// checks, the commit and the releases.
async fn sell_all_fenced(
    state: &AppState,
    buyer: &Buyer,
    holds: &[(SeatRef, Lease)],
    payments: &[String],
) -> Result<Checkout> {
    // (b) Every seat's fenced write in ONE transaction: all or nothing, every row locked
    // until the commit.
    let profile = buyer.profile().await?;
    let mut tx = state.db.begin().await?;
    let idle_bound = state.settings.purchase_idle_timeout();
    let mut orders = Vec::with_capacity(holds.len());
    for ((seat, lease), payment) in holds.iter().zip(payments) {
        let token = lease.fencing_token().as_i64();
        let sell = queries::sell(&mut tx, *seat, token, &profile, payment, idle_bound);
        let sold = telemetry::postgres("sell", sell)
            .await
            .inspect_err(detect_double_sale)?;
        match sold {
            Sale::Sold { order_id } => orders.push(order_id),
            Sale::Refused => {
                tx.rollback().await?;
                // Bought already by this buyer (a checkout sent twice): the seat's hold is
                // given up, and the next attempt buys the rest.
                sale_refused(state, buyer, *seat, lease).await?;
                return Ok(Checkout::BoughtAlready);
            }
            Sale::Unpaid => return unpaid(tx).await,
        }
    }
    failpoint::point(PausePoint::BeforeOwnerCheck).await;
    // (c) The owner check of every hold, with every row locked; any hold not ours rolls
    // the whole cart back, and is named.
    let mut not_ours = Vec::new();
    for (i, (_, lease)) in holds.iter().enumerate() {
        if !state.leases.is_held(lease).await? {
            not_ours.push(i);
        }
    }
    if !not_ours.is_empty() {
        tx.rollback().await?;
        return Ok(Checkout::NotOurs(not_ours));
    }
    // (d) COMMIT, then (e) each hold released and its seat retired.
    telemetry::postgres("commit", tx.commit()).await?;
    if let Some((seat, _)) = holds.first() {
        state.boards.forget(seat.event_id);
    }
    for (seat, lease) in holds {
        telemetry::confirm(ConfirmOutcome::Accepted);
        give_up(state, lease, true).await;
        buyer.forget_hold(seat.event_id, seat.seat_id);
    }
    tracing::info!(seats = holds.len(), "cart sold");
    Ok(Checkout::Bought(orders))
}

/// The payment's idempotency key: one per hold, `<event>:<seat>:<fencing token>`.
fn payment_key(seat: SeatRef, fencing_token: i64) -> String {
    format!("{}:{}:{fencing_token}", seat.event_id, seat.seat_id)
}

/// Leaves the payment of an attempt that did not buy ([`queries::leave_payment`]: the
/// last attempt out voids it), best effort: a payment left authorized is never captured
/// without its sale, and the sweep voids it ([`super::payments`]).
async fn leave_payment(state: &AppState, payment: &str) {
    match queries::leave_payment(&state.db, payment).await {
        Ok(voided) => tracing::debug!(payment, voided, "left the payment"),
        Err(err) => {
            tracing::warn!(error = %err, payment, "could not leave a refused purchase's payment")
        }
    }
}

/// A sale whose capture found its payment voided: roll it back (no capture, no order)
/// and refuse with [`Refusal::PaymentVoided`]. The hold stays; a new attempt authorizes
/// again.
async fn unpaid<T>(tx: sqlx::Transaction<'_, sqlx::Postgres>) -> Result<T> {
    tx.rollback().await?;
    telemetry::confirm(ConfirmOutcome::Rejected(&Refusal::PaymentVoided));
    tracing::warn!("confirm refused: the payment was voided before its capture");
    Err(Refusal::PaymentVoided.into())
}

/// Gives `lease` up once a purchase attempt is over: releases it if it is still ours
/// (owner-checked) and, when the seat is `sold`, retires the seat in the same script
/// ([`lease::LeaseStore::retire`]), so that later holds of it are refused by the lease
/// script instead of granted and refused at confirm. Best effort: a hold left behind
/// lapses by its TTL, and a seat sold but not retired is refused at its next confirm
/// (which retires it).
async fn give_up(state: &AppState, lease: &Lease, sold: bool) {
    let done = if sold {
        state.leases.retire(lease).await
    } else {
        state.leases.release(lease).await
    };
    if let Err(err) = done {
        tracing::warn!(error = %err, sold, "the hold could not be given up: it lapses by its TTL");
    }
}

/// Explains a sale the fenced write ([`queries::sell`]) refused: already bought by this buyer (a double submit:
/// returns the order), the event started, a stale fencing token (the row accepted a
/// higher one, which only a sale writes), or sold. The hold is worthless either way and
/// is given up ([`give_up`]; the seat is retired too when it is sold).
async fn sale_refused(
    state: &AppState,
    buyer: &Buyer,
    seat: SeatRef,
    lease: &Lease,
) -> Result<i64> {
    // A double submit: the first one bought it; this one returns its order.
    if let Some(order_id) = queries::order_of(&state.db, seat, buyer.id()).await? {
        give_up(state, lease, true).await;
        buyer.forget_hold(seat.event_id, seat.seat_id);
        return Ok(order_id);
    }
    // Otherwise the hold is worthless: give it up (retiring a sold seat) before saying why.
    let status = queries::seat_status(&state.db, seat).await;
    give_up(state, lease, matches!(&status, Ok(Some(s)) if s.sold)).await;
    buyer.forget_hold(seat.event_id, seat.seat_id);
    match status? {
        Some(s) if !s.sold && s.started => {
            telemetry::confirm(ConfirmOutcome::Rejected(&Refusal::EventStarted));
            Err(Refusal::EventStarted.into())
        }
        Some(s) if s.fence_token > lease.fencing_token().as_i64() => {
            tracing::warn!(
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
