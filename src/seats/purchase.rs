//! The seat picker's rules, along the article's steps.
//! The steps are numbered 1 to 5. A purchase's own phases are lettered (a) to (e), on
//! `pay_and_sell`, so the two never mix.
//!
//! * [`hold`] is steps 1 and 2: create-if-absent with a lease (`SET … NX PX`). It takes
//!   one Redis round trip, and the grant carries its fencing token (step 4). It reads no
//!   Postgres. The seat and the event's start come from the process's [`super::catalog`].
//!   The lease script refuses a sold seat, because a sale retires the seat's lease.
//! * [`release`] is step 3: compare-and-delete. The same script finds the owner token by
//!   the buyer's id ([`lease::LeaseStore::release_held_by`]).
//! * [`confirm`] is step 4: the fenced, conditional write in Postgres. Then come the
//!   owner check with the row locked, the commit, and only then the release. The release
//!   also retires the seat. Whatever fails, the buyer keeps the order or the hold.
//!
//! Redis is the only record of who holds what.
//! A buyer's holds are found there by the buyer's id, the holder label of each grant.
//! So their owner tokens never leave Redis and the server.
//! No session keeps a copy that could go stale.

use lease::{Grant, Lease, LeaseError};
use tracing::Span;
use tracing::field::Empty;

use super::SeatRef;
use super::catalog::EventSeats;
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
/// It checks, without Postgres, that the seat belongs to the event.
/// It checks that the event has not started, on this process's clock.
/// Both come from the [`super::catalog`], read from Postgres once per event and process.
/// The acquire script refuses a sold seat, retired by its sale
/// ([`lease::LeaseStore::retire`]).
///
/// Redis may not know that a sold seat is retired. It may have lost its data. Or the
/// server that sold the seat died between its commit and the retire. Then the seat can
/// still be granted. The confirm's fenced write refuses that hold as `sold`, and the
/// confirm retires the seat then. The fenced write is the guarantee. These checks only
/// spare buyers a hold that cannot be bought.
///
/// Round trips: one Redis script, the lease. The buyer is known from their signed
/// cookie. Postgres: none, except one read on the event's first hold in this process.
///
/// Errors:
/// * 404: no such event, or no such seat.
/// * 409: sold, event started, not on sale yet, "someone is buying this seat", or the
///   buyer's limit reached. Redis counts the limit (`--max-seats-per-buyer`) and judges
///   the on-sale (on its own clock) in the same script ([`Refusal::SeatLimit`],
///   [`Refusal::NotOnSale`]).
/// * 503: store unavailable.
///
/// Traced as span `hold`, with the event, seat, buyer and, once granted, fencing token.
/// Counted in `telemetry::HOLDS_GRANTED_TOTAL` and `telemetry::HOLDS_REFUSED_TOTAL`.
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
        not_before_ms: event.on_sale_at_ms(),
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
        // The refusal names why. Held by someone else: `held`. Retired by its sale:
        // `sold`. Over the buyer's limit: `seat_limit`. Not admitted by the event's
        // waiting room: `not_admitted`. Before the on-sale: `not_on_sale`.
        Err(err) => Err(hold_refused(err, &event)),
    }
}

/// A hold of `event` refused by the lease store, as the buyer's error.
/// It is 409 for held, sold, the buyer's limit or before the on-sale (named on the
/// venue's clock), and 503 for a store unavailable.
/// Counted in `telemetry::HOLDS_REFUSED_TOTAL`.
pub fn hold_refused(err: LeaseError, event: &EventSeats) -> Error {
    let err = match err {
        LeaseError::NotYet { not_before_ms } => {
            Refusal::not_on_sale(not_before_ms, &event.time_zone).into()
        }
        err => Error::from(err),
    };
    if let Error::Refused(refusal) = &err {
        telemetry::hold_refused(refusal);
    }
    err
}

/// The buyer's live lease on `seat`, owner token included.
/// Redis finds it by the buyer's id, in one script ([`lease::LeaseStore::owned_by`]).
/// `None` if the buyer holds no live lease on it.
pub async fn held_lease(state: &AppState, buyer: &Buyer, seat: SeatRef) -> Result<Option<Lease>> {
    let key = super::lease_key(&state.settings.lease_namespace, seat);
    Ok(state.leases.owned_by(&key, buyer.id()).await?)
}

/// [`held_lease`] for a confirm about to pay: the same script also marks the lease as
/// paying for the request deadline ([`lease::LeaseStore::owned_by_paying`]). Should the
/// hold lapse before the confirm ends, the seat *cools*: new holds of it are refused
/// `cooling` until the confirm ends ([`end_paying`]) or the deadline passes, so the
/// purchase in flight finishes or fails before anyone else is granted the seat
/// (docs/time-to-pay.md). No round trip more than [`held_lease`]'s.
pub(super) async fn paying_lease(
    state: &AppState,
    buyer: &Buyer,
    seat: SeatRef,
) -> Result<Option<Lease>> {
    let key = super::lease_key(&state.settings.lease_namespace, seat);
    let cooling = state.settings.request_deadline();
    Ok(state
        .leases
        .owned_by_paying(&key, buyer.id(), cooling)
        .await?)
}

/// Ends the cooling [`paying_lease`] began, for a confirm that ended without its sale (a
/// sale's retire ends it). One round trip, on that path only. Best effort: a marker left
/// behind ends by its time, the request deadline.
pub(super) async fn end_paying(state: &AppState, lease: &Lease) {
    if let Err(err) = state.leases.end_paying(lease).await {
        tracing::warn!(error = %err, "the seat's cooling could not be ended: it ends by its time");
    }
}

/// The refusal for a buyer with no live hold on `seat`.
/// It is 409 [`Refusal::HoldExpired`] if their browser remembers holding it
/// ([`Buyer::had_hold`]). Otherwise it is 403, `not_your_hold`.
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

/// Releases the buyer's hold on `seat`.
///
/// It is a compare-and-delete in one Redis round trip
/// ([`lease::LeaseStore::release_held_by`]). The script finds the owner token by the
/// buyer's id. So a lease that passed to another buyer is never touched. Success means
/// the buyer holds the seat no more. A hold that lapsed counts as released already.
///
/// Errors: 403 if the buyer never held it, as far as their browser remembers
/// ([`Buyer::had_hold`]). 503 if Redis is unavailable.
/// Traced as span `release`, with the event, seat and buyer.
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

/// Buys `seat` for `buyer` with the fencing token of the buyer's hold.
/// Returns the order id.
///
/// What this layer adds: the purchase runs on a task of its own. A buyer who hangs up
/// does not cancel it half way, whether by a closed tab or a lost signal. The retry
/// finds the order, or the hold still there.
///
/// Each layer below adds one thing:
/// * `purchase_with_live_lease`: the buyer's live lease. It tries once more if another
///   grant of the buyer's replaced it meanwhile.
/// * `pay_and_sell`: the hold's payment, joined and left.
/// * `sell_fenced`: the fenced transaction, phases (b) to (e).
///
/// Whatever fails or crashes, the buyer keeps the order or the hold.
/// Never neither: the hold lasts until its TTL. A hold that lapsed before the commit
/// still cannot buy.
///
/// Traced as span `confirm`, with the event, seat, buyer and fencing token.
/// Outcomes are counted in `telemetry::CONFIRMS_TOTAL`.
/// A sale stopped by `orders_one_per_seat` is counted in
/// `telemetry::DOUBLE_SALES_DETECTED_TOTAL`.
///
/// Errors: 403 no hold. 409 sold, hold lapsed, or token stale. 503 a store unavailable:
/// retry, nothing was lost.
#[tracing::instrument(name = "confirm", skip_all, fields(event = seat.event_id, seat = seat.seat_id, buyer = buyer.id(), fencing_token = Empty))]
pub async fn confirm(state: &AppState, buyer: &Buyer, seat: SeatRef) -> Result<i64> {
    let purchase = purchase_with_live_lease(state.clone(), buyer.clone(), seat);
    let deadline = state.settings.request_deadline();
    crate::http::detached::to_completion("The purchase", deadline, purchase).await
}

/// [`confirm`]'s purchase with the buyer's live lease.
/// That lease may turn out not to be the buyer's at the owner check. Then it tries once
/// more, with the live lease Redis has for the buyer by then. That happens when another
/// tab held the seat again after a lapse. A hold that is gone is 403. The exception is a
/// submit sent twice: this buyer bought the seat already, so it returns that order.
async fn purchase_with_live_lease(state: AppState, buyer: Buyer, seat: SeatRef) -> Result<i64> {
    let Some(lease) = paying_lease(&state, &buyer, seat).await? else {
        // No live hold. Perhaps this submit follows a purchase that completed.
        // Else the hold lapsed, if the browser remembers it, or there was none.
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
    let bought = pay_and_sell(&state, &buyer, seat, &lease).await;
    // An order ends the cooling in its retire. Any other end ends it here: the seat is
    // free at once if the hold lapsed meanwhile.
    if !matches!(bought, Ok(Some(_))) {
        end_paying(&state, &lease).await;
    }
    if let Some(order_id) = bought? {
        return Ok(order_id);
    }
    // The hold was not ours at the owner check: it lapsed.
    // Perhaps the buyer holds the seat again, under a new grant. Try once more with it.
    // The pause seam's pause is off this time: the stalled holder was the first attempt.
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

/// One purchase attempt with `lease`.
/// `None` if the hold was not ours at the owner check.
///
/// What this layer adds: the payment. Every attempt joins the hold's one payment.
/// An attempt that does not buy leaves it. The last to leave voids it.
///
/// The phases of a purchase, in this order:
///
/// (a) Payment. The attempt joins the hold's one payment ([`queries::authorize_payment`]).
///    Its idempotency key is the hold's event, seat and fencing token. So a retried or
///    doubled confirm never pays twice, nor does a checkout of the seat from another tab.
/// (b) The fenced write, [`queries::sell`], in one transaction. It writes only if the
///    seat is NOT sold and the fencing token is not lower than the row's. It also
///    captures the payment, of exactly the order's price, and takes the row lock. A
///    capture may find the payment voided, or authorized for a price since changed.
///    Then the sale is rolled back ([`Refusal::PaymentVoided`],
///    [`Refusal::PriceChanged`]): no capture, no order.
/// (c) The owner check in Redis: a `GET`, compared. Is the hold still ours? If not,
///    roll back and return `None`. A hold that lapsed cannot buy. That holds even when
///    the holder after it came and went without writing. The fence alone would let the
///    older token through. The check comes AFTER the write, with the row locked. From
///    then to the commit, no other holder's write can be accepted. So the lease was ours
///    at a moment from which the row stayed ours until the commit.
/// (d) COMMIT.
/// (e) Release the hold with a compare-and-delete, and retire the seat ([`give_up`]).
///    The lease script then refuses later holds of it. This is best effort: the order
///    stands either way. A hold left behind only lapses by its TTL, on a seat shown sold.
///
/// Phases (b) to (e) are [`sell_fenced`]. A crash before (d) rolls the transaction back
/// and leaves the hold, so the retry buys. A crash after (d) leaves the order.
///
/// A holder may stall between (b) and (d). It keeps the row locked for at most
/// [`crate::config::Settings::purchase_idle_timeout`]. Then Postgres ends its idle
/// transaction. That bound is less than the lock wait a valid holder's confirm allows
/// ([`crate::config::Settings::lock_wait`]). The lock wait is less than the store timeout.
///
/// Round trips: Redis, the owner check and the release. Postgres, the authorization,
/// then one transaction: BEGIN, the statement, COMMIT.
async fn pay_and_sell(
    state: &AppState,
    buyer: &Buyer,
    seat: SeatRef,
    lease: &Lease,
) -> Result<Option<i64>> {
    let token = lease.fencing_token().as_i64();
    Span::current().record("fencing_token", token);
    // (a) Payment, joined under the hold's key.
    // A second attempt joins the same authorization instead of paying again.
    // It may be a retry, or another tab.
    let payment = payment_key(seat, token);
    // The simulated payment provider's time: `--payment-delay-ms`, 0 by default.
    tokio::time::sleep(state.settings.payment_delay()).await;
    let authorize = queries::authorize_payment(&state.db, seat, &payment, buyer.id());
    telemetry::postgres("authorize", authorize).await?;
    let attempt = sell_fenced(state, buyer, seat, lease, &payment).await;
    // Only a sale that committed here captured this payment.
    // Every other end leaves it: refused, lapsed, a store failing, or an order this
    // buyer bought under another hold. The last attempt to leave voids it.
    // So another tab's attempt in flight keeps it.
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
    /// The fenced write refused the sale. Nothing was written. [`sale_refused`] says why.
    Refused,
    /// The hold was not ours at the owner check. Rolled back.
    NotOurs,
}

/// Phases (b) to (e) of [`pay_and_sell`], once the payment is authorized under `payment`.
/// They are the fenced write, the owner check, the commit and the release.
/// The pause seam's points ([`PausePoint`]) sit between them.
async fn sell_fenced(
    state: &AppState,
    buyer: &Buyer,
    seat: SeatRef,
    lease: &Lease,
    payment: &str,
) -> Result<Attempt> {
    failpoint::point(PausePoint::BeforeWrite).await;
    // (b) The fenced write. Its transaction holds the row lock from here to the commit.
    // Postgres ends the transaction if this holder stalls past its idle bound.
    // The buyer's name goes on the order. It is read before the transaction, so the row
    // lock is not held across that read. The read is a session read, only for a buyer
    // who gave a name.
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
        // Sold, stale token or event started. Nothing written. The caller explains it.
        Sale::Refused => {
            tx.rollback().await?;
            return Ok(Attempt::Refused);
        }
        // The capture found the payment voided, or of another amount. No capture, no
        // order.
        Sale::Unpaid => return unpaid(tx, Refusal::PaymentVoided).await,
        Sale::Repriced => return unpaid(tx, Refusal::PriceChanged).await,
    };
    failpoint::point(PausePoint::BeforeOwnerCheck).await;
    // (c) The owner check, with the row locked. A hold that lapsed cannot buy.
    if !state.leases.is_held(lease).await? {
        tx.rollback().await?;
        return Ok(Attempt::NotOurs);
    }
    failpoint::point(PausePoint::BeforeCommit).await;
    // (d) COMMIT. From here the order stands, whatever happens next.
    telemetry::postgres("commit", tx.commit()).await?;
    telemetry::confirm(ConfirmOutcome::Accepted);
    state.boards.forget(seat.event_id);
    tracing::info!(order = order_id, "seat sold");
    failpoint::point(PausePoint::AfterCommit).await;
    // (e) Release the hold and retire the seat, best effort.
    give_up(state, lease, true).await;
    buyer.forget_hold(seat.event_id, seat.seat_id);
    Ok(Attempt::Sold(order_id))
}

/// What a checkout's attempt ended in ([`pay_and_sell_all`]).
#[derive(Debug)]
pub(super) enum Checkout {
    /// Every seat bought: the order ids, in the order of the holds.
    Bought(Vec<i64>),
    /// This buyer bought one seat already: a checkout sent twice. Nothing else was
    /// bought. That seat's hold is forgotten. The next attempt buys the rest.
    BoughtAlready,
    /// The holds, by index, that were not the buyer's at the owner check.
    /// Nothing was bought. The other holds are untouched.
    NotOurs(Vec<usize>),
}

/// [`pay_and_sell`] for several holds at once, all or nothing.
/// It is the cart's checkout, [`super::cart::checkout`].
///
/// The phases come in the same order:
/// (a) Each seat's payment is authorized under its own hold's key.
/// (b) ONE transaction runs [`queries::sell`] per seat. Each is fenced with its own
///    hold's fencing token.
/// (c) Redis checks the owner of every hold, with every row locked.
/// (d) COMMIT.
/// (e) Each hold is released and its seat retired.
///
/// Unless every seat is [`Checkout::Bought`], every payment joined is left.
/// The fenced write may refuse a seat: sold, stale token, or event started.
/// That rolls everything back with that seat's refusal ([`sale_refused`]).
/// [`sale_refused`] also gives up the seat's worthless hold.
///
/// Round trips: Postgres, one authorization per seat and one transaction.
/// Redis, one owner check per seat, then one retire per seat.
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
    // The simulated payment provider's time: `--payment-delay-ms`, 0 by default.
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
    // The checkout leaves only the payments it joined.
    // It voids only those it is the last attempt in.
    // So another tab's confirm of one of these seats keeps its authorization.
    if !matches!(bought, Ok(Checkout::Bought(_))) {
        for payment in &payments[..joined] {
            leave_payment(state, payment).await;
        }
    }
    bought
}

/// Phases (b) to (e) of [`pay_and_sell_all`].
/// They are the fenced writes in one transaction, the owner checks, the commit and the
/// releases.
async fn sell_all_fenced(
    state: &AppState,
    buyer: &Buyer,
    holds: &[(SeatRef, Lease)],
    payments: &[String],
) -> Result<Checkout> {
    // (b) Every seat's fenced write, in ONE transaction. It is all or nothing.
    // Every row stays locked until the commit.
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
                // This buyer bought it already: a checkout sent twice.
                // The seat's hold is given up. The next attempt buys the rest.
                sale_refused(state, buyer, *seat, lease).await?;
                return Ok(Checkout::BoughtAlready);
            }
            Sale::Unpaid => return unpaid(tx, Refusal::PaymentVoided).await,
            Sale::Repriced => return unpaid(tx, Refusal::PriceChanged).await,
        }
    }
    failpoint::point(PausePoint::BeforeOwnerCheck).await;
    // (c) The owner check of every hold, with every row locked.
    // Any hold not ours rolls the whole cart back, and is named.
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

/// The payment's idempotency key, one per hold: `<event>:<seat>:<fencing token>`.
fn payment_key(seat: SeatRef, fencing_token: i64) -> String {
    format!("{}:{}:{fencing_token}", seat.event_id, seat.seat_id)
}

/// Leaves the payment of an attempt that did not buy ([`queries::leave_payment`]).
/// The last attempt out voids it. This is best effort. A payment left authorized is
/// never captured without its sale, and the sweep voids it ([`super::payments`]).
async fn leave_payment(state: &AppState, payment: &str) {
    match queries::leave_payment(&state.db, payment).await {
        Ok(voided) => tracing::debug!(payment, voided, "left the payment"),
        Err(err) => {
            tracing::warn!(error = %err, payment, "could not leave a refused purchase's payment")
        }
    }
}

/// A sale whose capture took nothing: its payment was voided
/// ([`Refusal::PaymentVoided`]), or authorized for another amount than the order's price
/// ([`Refusal::PriceChanged`]). Roll it back: no capture, no order. Refuse with `why`.
/// The hold stays. A new attempt authorizes again, at the price then.
async fn unpaid<T>(tx: sqlx::Transaction<'_, sqlx::Postgres>, why: Refusal) -> Result<T> {
    tx.rollback().await?;
    telemetry::confirm(ConfirmOutcome::Rejected(&why));
    tracing::warn!(
        refusal = why.code(),
        "confirm refused: the capture took nothing"
    );
    Err(why.into())
}

/// Gives `lease` up once a purchase attempt is over.
/// It releases the lease if it is still ours: the release is owner-checked.
/// When the seat is `sold`, the same script retires the seat ([`lease::LeaseStore::retire`]).
/// The lease script then refuses later holds of it, instead of granting them for the
/// confirm to refuse. This is best effort. A hold left behind lapses by its TTL. A seat
/// sold but not retired is refused at its next confirm, which retires it.
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

/// Explains a sale the fenced write refused ([`queries::sell`]).
///
/// * Already bought by this buyer: a double submit. It returns the order.
/// * The event started, or its sale has not opened (Postgres's clock).
/// * A stale fencing token: the row accepted a higher one, which only a sale writes.
/// * Sold.
///
/// The hold is worthless either way, and is given up ([`give_up`]).
/// The seat is retired too when it is sold.
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
    // Otherwise the hold is worthless. Give it up before saying why.
    // Giving it up retires a sold seat.
    let status = queries::seat_status(&state.db, seat).await;
    give_up(state, lease, matches!(&status, Ok(Some(s)) if s.sold)).await;
    buyer.forget_hold(seat.event_id, seat.seat_id);
    match status? {
        Some(s) if !s.sold && s.started => {
            telemetry::confirm(ConfirmOutcome::Rejected(&Refusal::EventStarted));
            Err(Refusal::EventStarted.into())
        }
        Some(s) if !s.sold && s.opens_at.is_some() => {
            let event = state.catalog.event(&state.db, seat.event_id).await?;
            let zone = event.as_ref().map_or("UTC", |e| e.time_zone.as_str());
            let opens_at_ms = s
                .opens_at
                .map_or(0, |at| at.timestamp_millis().max(0) as u64);
            let refusal = Refusal::not_on_sale(opens_at_ms, zone);
            telemetry::confirm(ConfirmOutcome::Rejected(&refusal));
            Err(refusal.into())
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

/// Counts a sale refused by the `orders_one_per_seat` constraint.
/// The fenced write let a second sale of the seat through, and only the constraint
/// stopped it. That is a bug.
fn detect_double_sale(err: &sqlx::Error) {
    if let sqlx::Error::Database(db) = err
        && db.constraint() == Some("orders_one_per_seat")
    {
        telemetry::double_sale_detected();
    }
}
