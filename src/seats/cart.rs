//! Several seats at once: the group hold, the checkout of the cart, and release all.
//!
//! * [`hold_group`]: holds a group of seats with ONE lease script
//!   ([`lease::LeaseStore::acquire_all`]). It is all or none, with one fencing token for
//!   the group, in one Redis slot. Two buyers racing for overlapping groups each get a
//!   whole group or nothing. Nothing can deadlock: no seat is locked one by one.
//! * [`best_available()`]: picks a block ([`crate::venue::best_available`]) and holds it
//!   with [`hold_group`], picking again if someone else was faster.
//! * [`checkout`]: the single-seat confirm's steps ([`super::purchase`]) for every seat
//!   of the cart at once. Each seat's payment is authorized under its own hold's key.
//!   One transaction runs [`super::queries::sell`] per seat, each fenced with its own
//!   hold's token. Redis checks the owner of every hold, and only then comes the commit.
//!   All or nothing: a lapsed hold rolls everything back and is named. The other holds
//!   stay.
//! * [`release_all`]: [`super::purchase::release`] for each held seat.
//!
//! Redis counts the per-buyer limit (`--max-seats-per-buyer`) inside the hold's script,
//! for single holds and groups alike.

use std::collections::HashSet;

use lease::{Grant, Lease, LeaseError};

use super::purchase::{self, Checkout};
use super::{SeatRef, held_seats, queries};
use crate::http::buyer::Buyer;
use crate::http::error::{Error, Refusal, Result};
use crate::state::AppState;
use crate::telemetry;
use crate::venue::best_available::{self, FreeSeat, Pick, Wanted, pick_one_of};
use crate::waiting_room;

/// How many picks [`best_available()`] makes.
/// The first pick is from the event's board.
/// Another buyer may take part of the chosen block. Each later pick then reads the holds
/// again.
const PICKS: usize = 5;

/// After a collision, the next pick is drawn at random among this many of the best
/// blocks left, multiplied by it after each further collision: 16, 256, 4096. Buyers
/// who asked in the same instant all picked the same best block, and all but one
/// collided. Picking the next best again, they would all collide again: a thundering
/// herd. So they spread, the wider the more they collide, as a backoff spreads in time.
const SPREAD: usize = 16;

/// The seats best available held, and the code of their section.
/// Their leases share one owner token and one fencing token.
pub struct HeldBlock {
    /// The seats (`seats.id`), in seat order.
    pub seat_ids: Vec<i64>,
    /// `sections.code` of the block.
    pub section_code: String,
}

impl HeldBlock {
    /// The block of `seats` (adjacent, one row: one section).
    fn of(seats: &[FreeSeat]) -> HeldBlock {
        HeldBlock {
            seat_ids: seats.iter().map(|s| s.seat_id).collect(),
            section_code: seats[0].section_code.clone(),
        }
    }
}

/// Holds `wanted.quantity` adjacent seats of `event_id` for `buyer` in one step.
///
/// It picks the best block among the seats the event's board shows free
/// ([`crate::venue::best_available::pick_block`]). It holds that block with
/// [`hold_group`]. Someone else may take the block meanwhile. Then it picks again, up to
/// `PICKS` times. Each time, the holds are read again
/// ([`crate::venue::board::Boards::held_since`]). The pick is then drawn at random among
/// more of the best blocks left (`SPREAD`).
///
/// Errors:
/// * 400: `quantity` not in 1..=`--max-seats-per-buyer`.
/// * 404: no such event.
/// * 409: event started, or not on sale yet ([`Refusal::NotOnSale`]). Or no such block ([`Refusal::NoBlock`]). Or only blocks that
///   would strand a seat ([`Refusal::StrandsSeat`]). Or the buyer's limit
///   ([`Refusal::SeatLimit`]). Or taken by others on every pick ([`Refusal::BlocksTaken`]).
/// * 503: store unavailable.
#[tracing::instrument(name = "best_available", skip_all, fields(event = event_id, buyer = buyer.id(), quantity = wanted.quantity))]
pub async fn best_available(
    state: &AppState,
    buyer: &Buyer,
    event_id: i64,
    wanted: &Wanted,
) -> Result<HeldBlock> {
    let quantity = wanted.quantity;
    let limit = state.settings.max_seats_per_buyer;
    if !(1..=limit).contains(&quantity) {
        return Err(Error::BadRequest(format!(
            "Choose between 1 and {limit} seats."
        )));
    }
    let event = state
        .catalog
        .event(&state.db, event_id)
        .await?
        .ok_or_else(Error::no_such_event)?;
    if event.started() {
        return Err(Refusal::EventStarted.into());
    }
    // Pick among the seats the event's board shows free.
    // The board was read at most a second ago, and every view shares it.
    // So a crowd asking at once costs no read of Postgres.
    // Leave out the buyer's own holds as they are now: one script.
    // The board may be behind. The hold script is the only judge.
    // It refuses a block someone else held or bought since.
    // The next pick leaves out that block, and every seat held by then.
    let namespace = &state.settings.lease_namespace;
    let group = super::event_group(namespace, event_id);
    let (board, mine) = tokio::join!(
        state
            .boards
            .get(&state.db, &*state.leases, namespace, event_id),
        state.leases.held_by(&group, buyer.id())
    );
    let board = board?.ok_or_else(Error::no_such_event)?;
    let mine: HashSet<i64> = (mine?.holdings.iter()).filter_map(super::seat_of).collect();
    // A block chosen from the list and sent twice (a double click, or a retry after a
    // lost answer) is this buyer's already: answered as the first send was, as a single
    // seat's resend is (`HoldOutcome::AlreadyYours`), not refused as taken.
    if let Some(block) = best_available::named_block(&board.free, wanted)
        && block.iter().all(|seat| mine.contains(&seat.seat_id))
    {
        return Ok(HeldBlock::of(block));
    }
    let mut taken: HashSet<i64> = board.held_seats().chain(mine).collect();
    // The seats of blocks refused as sold since the board was read.
    // One seat of each is sold, and the holds do not show it.
    let mut sold_since = Vec::new();
    let mut spread = 1;
    for _ in 0..PICKS {
        let block = match pick_one_of(&board.free, &taken, wanted, spread) {
            Pick::Block(block) => block,
            Pick::OnlyStranding => return Err(Refusal::StrandsSeat { quantity }.into()),
            Pick::None => return Err(Refusal::NoBlock { quantity }.into()),
        };
        let seats: Vec<i64> = block.iter().map(|s| s.seat_id).collect();
        match hold_group(state, buyer, event_id, &seats).await? {
            Ok(_) => return Ok(HeldBlock::of(block)),
            // Someone held or bought part of the block since the board was read.
            // A crowd asking in the same second picked from the same board.
            // So read the holds again, in a read that starts after the refusal.
            // Every pick colliding meanwhile shares that read.
            // It replaces what was known. A seat of the refused block that nobody holds
            // stays free. So no block is placed one seat off a hold that is not there.
            // The next pick is drawn among the best blocks left, not the best alone.
            // A cooling seat reads as held there too (docs/time-to-pay.md).
            Err(
                refused @ (LeaseError::Held { .. }
                | LeaseError::Retired
                | LeaseError::Cooling { .. }),
            ) => {
                let collided = std::time::Instant::now();
                if matches!(refused, LeaseError::Retired) {
                    sold_since.extend(seats);
                }
                let held = (state.boards)
                    .held_since(&*state.leases, namespace, event_id, collided)
                    .await?;
                taken = held.iter().chain(&sold_since).copied().collect();
                spread = spread.saturating_mul(SPREAD);
            }
            Err(err) => return Err(purchase::hold_refused(err, &event)),
        }
    }
    Err(Refusal::BlocksTaken { quantity }.into())
}

/// Holds exactly `seats` of `event_id` for `buyer` in ONE run of the group script
/// ([`lease::LeaseStore::acquire_all`]). The caller checked the ids. Behind the event's
/// waiting room, the grant carries the buyer's admission ([`waiting_room::admission`]).
///
/// Every seat gets one owner token, one fencing token and the hold TTL, or none does.
/// Each hold then leaves a signed cookie naming the seat ([`Buyer::remember_hold`]).
/// Returns the leases in the order of `seats`.
///
/// A refusal comes back as the lease error, and nothing was held then. The errors are
/// `Held`, `Retired` for a sold seat, `OverLimit`, `NotAdmitted`, `NotYet` before the
/// event's on-sale (in the grant's step, on the store's clock) and `Unavailable`.
/// `purchase::hold_refused` turns them into the buyer's 409 or 503.
/// The one error of its own is 404, no such event.
///
/// Used by [`best_available()`] and by the race lab's hold of a named group.
pub async fn hold_group(
    state: &AppState,
    buyer: &Buyer,
    event_id: i64,
    seats: &[i64],
) -> Result<std::result::Result<Vec<Lease>, LeaseError>> {
    let keys: Vec<_> = seats
        .iter()
        .map(|&seat_id| {
            super::lease_key(
                &state.settings.lease_namespace,
                SeatRef { event_id, seat_id },
            )
        })
        .collect();
    let event = state.catalog.event(&state.db, event_id).await?;
    let grant = Grant {
        limit: Some(state.settings.max_seats_per_buyer),
        admission: waiting_room::admission(state, buyer, event_id).await?,
        not_before_ms: event.ok_or_else(Error::no_such_event)?.on_sale_at_ms(),
        ..Grant::new(keys, buyer.id(), state.settings.hold_ttl())
    };
    let leases = match state.leases.acquire_all(&grant).await {
        Ok(leases) => leases,
        Err(err) => return Ok(Err(err)),
    };
    telemetry::hold_granted();
    for &seat_id in seats {
        buyer.remember_hold(event_id, seat_id);
    }
    tracing::info!(
        fencing_token = leases[0].fencing_token().as_i64(),
        "group hold granted"
    );
    Ok(Ok(leases))
}

/// Buys the seats `buyer` holds in `event_id`, in one fenced transaction.
/// Returns the order ids.
///
/// `shown` is the cart the buyer saw: the form's `seats`. Then exactly those are bought.
/// The buyer may hold one of them no more: it lapsed, or another tab released it. Then
/// that seat is named and nothing is bought. Without `shown`, every seat the buyer holds
/// is bought.
///
/// It runs on a task of its own, like the single-seat confirm ([`purchase::confirm`]).
/// So a buyer who hangs up does not cancel it half way.
///
/// Errors:
/// * 403: the buyer holds no seat of the event.
/// * 409 [`Refusal::HoldsLapsed`], naming the seats whose holds lapsed. Nothing is
///   bought, and the other holds are kept.
/// * 409: a seat sold, stale or started. Nothing is bought. That seat's worthless hold is
///   given up, and the others are kept.
/// * 503: a store unavailable. Nothing is lost: retry.
#[tracing::instrument(name = "checkout", skip_all, fields(event = event_id, buyer = buyer.id()))]
pub async fn checkout(
    state: &AppState,
    buyer: &Buyer,
    event_id: i64,
    shown: Option<Vec<i64>>,
) -> Result<Vec<i64>> {
    let most = state.settings.max_seats_per_buyer;
    if shown
        .as_ref()
        .is_some_and(|seats| seats.len() as u64 > most)
    {
        return Err(Error::BadRequest(format!(
            "A cart holds at most {most} seats."
        )));
    }
    let work = checkout_cart(state.clone(), buyer.clone(), event_id, shown);
    crate::http::detached::to_completion("The purchase", state.settings.request_deadline(), work)
        .await
}

async fn checkout_cart(
    state: AppState,
    buyer: Buyer,
    event_id: i64,
    shown: Option<Vec<i64>>,
) -> Result<Vec<i64>> {
    let mut bought_already = false;
    let mut refreshed = false;
    loop {
        // The cart the buyer saw, no more and no less.
        // A seat held since, in another tab, stays held and is not marked.
        // Each hold bought is marked as paying: one that lapses from here cools until
        // this attempt ends (docs/time-to-pay.md).
        let holds = held_leases(&state, &buyer, event_id, shown.as_deref(), true).await?;
        if let Some(shown) = &shown {
            // A shown seat no longer held is named, and nothing is bought.
            lapsed_since_shown(&state, &buyer, event_id, shown, &holds).await?;
        }
        if holds.is_empty() {
            // A checkout sent twice: the first one bought what this one was to buy.
            if bought_already {
                return Ok(Vec::new());
            }
            return Err(no_holds_here());
        }
        // One all-or-nothing attempt: pay, the fenced writes, the owner checks, commit.
        let checkout = purchase::pay_and_sell_all(&state, &buyer, &holds).await;
        // An order ends each seat's cooling in its retire. Any other end ends it here.
        if !matches!(checkout, Ok(Checkout::Bought(_))) {
            for (_, lease) in &holds {
                purchase::end_paying(&state, lease).await;
            }
        }
        let not_ours = match checkout? {
            Checkout::Bought(orders) => return Ok(orders),
            Checkout::NotOurs(not_ours) => not_ours,
            Checkout::BoughtAlready => {
                // This buyer already bought a seat, now forgotten. Try the rest.
                // Each pass forgets one seat, so this ends.
                bought_already = true;
                continue;
            }
        };
        // A hold may lapse between the read and the owner check.
        // Redis may have it again under a new grant of this buyer's, from another tab.
        // Then the next pass buys it with the live lease. That happens once.
        let mut lapsed = Vec::new();
        for i in not_ours {
            let (seat, lease) = &holds[i];
            match purchase::held_lease(&state, &buyer, *seat).await? {
                Some(live) if live != *lease && !refreshed => {}
                _ => lapsed.push(seat.seat_id),
            }
        }
        if !lapsed.is_empty() {
            let seats = queries::seat_names(&state.db, event_id, &lapsed).await?;
            tracing::info!(?lapsed, "checkout refused: holds lapsed");
            return Err(Refusal::HoldsLapsed { seats }.into());
        }
        refreshed = true;
    }
}

/// Refuses a checkout whose `shown` cart has seats missing from `holds`.
/// A missing seat the buyer bought is fine: that is a checkout sent twice.
/// Else it is 409 [`Refusal::HoldsLapsed`], naming the seats the buyer held.
/// Their browser remembers them ([`Buyer::had_hold`]).
/// It is 403 if any seat was never the buyer's: a form not from this site's cart.
/// Postgres is read only when a shown seat is missing.
async fn lapsed_since_shown(
    state: &AppState,
    buyer: &Buyer,
    event_id: i64,
    shown: &[i64],
    holds: &[(SeatRef, Lease)],
) -> Result<()> {
    let mut lapsed = Vec::new();
    for &seat_id in shown {
        let seat = SeatRef { event_id, seat_id };
        if holds.iter().any(|(held, _)| *held == seat) {
            continue;
        }
        if !buyer.had_hold(event_id, seat_id) {
            return Err(purchase::not_your_hold());
        }
        if queries::order_of(&state.db, seat, buyer.id())
            .await?
            .is_none()
        {
            lapsed.push(seat_id);
        }
    }
    if lapsed.is_empty() {
        return Ok(());
    }
    let seats = queries::seat_names(&state.db, event_id, &lapsed).await?;
    tracing::info!(
        ?lapsed,
        "checkout refused: holds lapsed since the cart was shown"
    );
    Err(Refusal::HoldsLapsed { seats }.into())
}

/// 403 for a cart action (Buy all, Need more time?) by a buyer who holds no seat of the
/// event.
pub(super) fn no_holds_here() -> Error {
    Error::Forbidden("You hold no seats of this event. Pick seats on the seat map first.".into())
}

/// The buyer's live holds in `event_id`, in seat order: every one, or only the seats
/// of `only` (a cart the buyer saw).
/// They are the seats Redis records under the buyer's id ([`held_seats`]).
/// Each comes with its lease ([`purchase::held_lease`]; with `paying`, a checkout's,
/// marked as paying: [`purchase::paying_lease`]). No other hold is marked: it would cool
/// for a purchase that does not buy it.
/// A hold that lapsed in between is left out.
pub(super) async fn held_leases(
    state: &AppState,
    buyer: &Buyer,
    event_id: i64,
    only: Option<&[i64]>,
    paying: bool,
) -> Result<Vec<(SeatRef, Lease)>> {
    let seats = held_seats(
        &*state.leases,
        &state.settings.lease_namespace,
        buyer,
        event_id,
    )
    .await?;
    let mut holds = Vec::with_capacity(seats.len());
    let wanted = |seat_id: &i64| only.is_none_or(|only| only.contains(seat_id));
    for seat_id in seats.into_iter().filter(wanted) {
        let seat = SeatRef { event_id, seat_id };
        let lease = if paying {
            purchase::paying_lease(state, buyer, seat).await?
        } else {
            purchase::held_lease(state, buyer, seat).await?
        };
        if let Some(lease) = lease {
            holds.push((seat, lease));
        }
    }
    Ok(holds)
}

/// Releases every seat `buyer` holds in `event_id`.
/// Each release is owner-checked, as [`purchase::release`] is.
/// Returns how many were released. 503 if Redis is unavailable.
pub async fn release_all(state: &AppState, buyer: &Buyer, event_id: i64) -> Result<usize> {
    let mut released = 0;
    for seat_id in held_seats(
        &*state.leases,
        &state.settings.lease_namespace,
        buyer,
        event_id,
    )
    .await?
    {
        match purchase::release(state, buyer, SeatRef { event_id, seat_id }).await {
            Ok(()) => released += 1,
            // Lapsed since the read. Nothing left to release.
            Err(Error::Forbidden(_)) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(released)
}
