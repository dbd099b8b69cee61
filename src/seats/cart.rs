//! Several seats at once: the group hold, the checkout of the cart, and release all.
//!
//! * [`hold_group`]: holds a group of seats with ONE lease script
//!   ([`lease::LeaseStore::acquire_all`]). It is all or none, with one fencing token for
//!   the group, in one Redis slot. Two buyers racing for overlapping groups each get a
//!   whole group or nothing. Nothing can deadlock: no seat is locked one by one.
//! * [`best_available`]: picks a block ([`crate::venue::best_available`]) and holds it
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
use crate::venue::best_available::{Pick, Wanted, pick_one_of};
use crate::waiting_room;

/// How many picks [`best_available`] makes: the first from the event's board, each
/// later one (after another buyer took part of the block it chose) with the holds read
/// again.
const PICKS: usize = 5;

/// After a collision, the next pick is drawn at random among this many of the best
/// blocks left, multiplied by it after each further collision: 16, 256, 4096. Buyers
/// who asked in the same instant all picked the same best block, and all but one
/// collided. Picking the next best again, they would all collide again: a thundering
/// herd. So they spread, the wider the more they collide, as a backoff spreads in time.
const SPREAD: usize = 16;

/// The seats best available held: their leases (one owner token, one fencing token), in
/// seat order, and the code of their section.
pub struct HeldBlock {
    /// The leases, in seat order.
    pub leases: Vec<Lease>,
    /// `sections.code` of the block.
    pub section_code: String,
}

/// Holds `wanted.quantity` adjacent seats of `event_id` for `buyer` in one step.
///
/// Picks the best block among the seats the event's board shows free
/// ([`crate::venue::best_available::pick_block`]) and holds it with [`hold_group`]. A
/// block that someone else took meanwhile is picked again, up to `PICKS` times. Each
/// time the holds are read again ([`crate::venue::board::Boards::held_since`]), and the
/// pick is drawn at random among more of the best blocks left (`SPREAD`).
///
/// Errors: 400 `quantity` not in 1..=`--max-seats-per-buyer`; 404 no such event; 409
/// event started, no such block ([`Refusal::NoBlock`]), only blocks that would strand a
/// seat ([`Refusal::StrandsSeat`]), the buyer's limit ([`Refusal::SeatLimit`]), or taken
/// by others on every pick ([`Refusal::BlocksTaken`]); 503 store unavailable.
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
    // Pick among the seats the event's board shows free (read at most a second ago, and
    // shared with every view: a crowd asking at once costs no read of Postgres), less
    // the buyer's own holds as they are now (one script). The board may be behind: a
    // block someone else held or bought since is refused by the hold script, the only
    // judge, and the next pick leaves it out and every seat held by then (a crowd asking
    // in the same second picks from the same board, so after one collision the holds
    // are read again, a read that started after the collision and is shared by every
    // pick colliding meanwhile, and the next pick is drawn among the best blocks left
    // rather than the best alone).
    let namespace = &state.settings.lease_namespace;
    let group = super::event_group(namespace, event_id);
    let (board, mine) = tokio::join!(
        state
            .boards
            .get(&state.db, &*state.leases, namespace, event_id),
        state.leases.held_by(&group, buyer.id())
    );
    let board = board?.ok_or_else(Error::no_such_event)?;
    let mine = mine?
        .holdings
        .into_iter()
        .filter_map(|h| super::seat_of(&h));
    let mut taken: HashSet<i64> = board.held_seats().chain(mine).collect();
    // The seats of blocks refused as sold since the board was read (one of each is, and
    // the holds do not show it).
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
            Ok(leases) => {
                let section_code = block[0].section_code.clone();
                return Ok(HeldBlock {
                    leases,
                    section_code,
                });
            }
            // Someone held or bought part of the block since the board was read: pick
            // again among the seats free in a read of the holds made after the refusal.
            // It replaces what was known (a seat of the refused block that nobody holds
            // stays free, so no block is placed one seat off a hold that is not there).
            Err(refused @ (LeaseError::Held { .. } | LeaseError::Retired)) => {
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
            Err(err) => return Err(purchase::hold_refused(err)),
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
/// Returns the leases in the order of `seats`. A refusal comes back as the lease error:
/// `Held`, `Retired` for a sold seat, `OverLimit`, `NotAdmitted`, `Unavailable`. Nothing
/// was held then. `purchase::hold_refused` turns it into the buyer's 409 or 503.
/// Errors: 404 no such event.
///
/// Used by [`best_available`] and by the race lab's hold of a named group.
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
    let grant = Grant {
        limit: Some(state.settings.max_seats_per_buyer),
        admission: waiting_room::admission(state, buyer, event_id).await?,
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

/// Buys the seats `buyer` holds in `event_id` in one fenced transaction; returns the
/// order ids. `shown` is the cart the buyer saw (the form's `seats`): then exactly those
/// are bought, and any of them the buyer holds no more (lapsed, or released in another
/// tab) is named and nothing is bought; without it, every seat the buyer holds. Runs on a task of its own, like the single-seat confirm
/// ([`purchase::confirm`]), so a buyer who hangs up does not cancel it half way.
///
/// Errors: 403 the buyer holds no seat of the event; 409 [`Refusal::HoldsLapsed`]
/// naming the seats whose holds lapsed (nothing bought, the other holds kept), or the
/// refusal of a seat sold, stale or started (nothing bought; that seat's worthless hold
/// given up, the others kept); 503 a store unavailable (nothing lost: retry).
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
        let mut holds = held_leases(&state, &buyer, event_id).await?;
        if let Some(shown) = &shown {
            // The cart the buyer saw, no more (a seat held since in another tab stays
            // held) and no less: a shown seat no longer held is named, nothing bought.
            holds.retain(|(seat, _)| shown.contains(&seat.seat_id));
            lapsed_since_shown(&state, &buyer, event_id, shown, &holds).await?;
        }
        if holds.is_empty() {
            // A checkout sent twice: the first one bought what this one was to buy.
            if bought_already {
                return Ok(Vec::new());
            }
            return Err(Error::Forbidden(
                "You hold no seats of this event. Pick seats on the seat map first.".into(),
            ));
        }
        // One all-or-nothing attempt: pay, the fenced writes, the owner checks, commit.
        let not_ours = match purchase::pay_and_sell_all(&state, &buyer, &holds).await? {
            Checkout::Bought(orders) => return Ok(orders),
            Checkout::NotOurs(not_ours) => not_ours,
            Checkout::BoughtAlready => {
                // A seat was already bought by this buyer (and is now forgotten): try the
                // rest. Each pass forgets one seat, so this ends.
                bought_already = true;
                continue;
            }
        };
        // A hold that lapsed between the read and the owner check, but which Redis has
        // again under a new grant of this buyer's (another tab), is bought on the next
        // pass with the live lease; once.
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

/// Refuses a checkout whose `shown` cart has seats that are not in `holds` and that
/// `buyer` has not bought either (bought: a checkout sent twice): 409
/// [`Refusal::HoldsLapsed`] naming those the buyer held (their browser remembers it,
/// [`Buyer::had_hold`]), 403 if any was never the buyer's (a form not from this site's
/// cart). Postgres is read only when a shown seat is missing.
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

/// The buyer's live holds in `event_id`, in seat order: the seats Redis records under the
/// buyer's id ([`held_seats`]), each with its lease ([`purchase::held_lease`]; one that
/// lapsed in between is left out).
async fn held_leases(
    state: &AppState,
    buyer: &Buyer,
    event_id: i64,
) -> Result<Vec<(SeatRef, Lease)>> {
    let seats = held_seats(
        &*state.leases,
        &state.settings.lease_namespace,
        buyer,
        event_id,
    )
    .await?;
    let mut holds = Vec::with_capacity(seats.len());
    for seat_id in seats {
        let seat = SeatRef { event_id, seat_id };
        if let Some(lease) = purchase::held_lease(state, buyer, seat).await? {
            holds.push((seat, lease));
        }
    }
    Ok(holds)
}

/// Releases every seat `buyer` holds in `event_id` (each owner-checked, as
/// [`purchase::release`]); returns how many were released. 503 Redis unavailable.
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
            // Lapsed since the read: nothing left to release.
            Err(Error::Forbidden(_)) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(released)
}
