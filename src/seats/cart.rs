//! Several seats at once: the group hold behind **Best available**, the buyer's cart, and
//! the checkout that buys the whole cart in ONE Postgres transaction.
//!
//! * [`best_available`]: picks `quantity` adjacent unsold, unheld seats of one row (best
//!   price zone first) that leave no single seat stranded ([`pick_block`]), within the
//!   buyer's filters ([`Wanted`]: a price band, accessible places, an aisle seat), and
//!   holds them with ONE lease script
//!   ([`lease::LeaseStore::acquire_all`]): all or none, one fencing token for the group,
//!   one Redis slot, so two buyers racing for overlapping blocks get a whole block or
//!   nothing, and nothing can deadlock (no seat is locked one by one).
//! * [`checkout`]: the single-seat confirm's steps ([`super::purchase`]) for every seat of
//!   the cart at once: each seat's payment authorized under its own hold's key, then one
//!   transaction with [`super::queries::sell`] per seat (each fenced with its own hold's
//!   token), the owner check of every hold in Redis, and only then the commit and the
//!   releases. All or nothing: a lapsed hold rolls everything back and is named; the
//!   other holds stay.
//! * [`release_all`]: [`super::purchase::release`] for each held seat.
//!
//! The per-buyer limit (`--max-seats-per-buyer`) is counted by Redis inside the hold's
//! script, for single holds and groups alike.

use std::collections::HashSet;

use lease::{Grant, Lease, LeaseError};

use super::purchase::{self, Checkout};
use super::{SeatRef, queries};
use crate::http::buyer::Buyer;
use crate::http::error::{Error, Refusal, Result};
use crate::state::AppState;
use crate::telemetry;
use crate::waiting_room;

/// How many picks [`best_available`] makes: the first from the event's board, each
/// later one (after another buyer took part of the block it chose) with the holds read
/// again.
const PICKS: usize = 5;

/// After a collision, how many of the best blocks left the next pick is drawn from, at
/// random, multiplied by this after each further collision (16, 256, 4096...): buyers
/// who asked in the same instant all picked the same best block and all but one
/// collided; picking the next best again, they would all collide again (a thundering
/// herd), so they spread, the wider the more they collide, as a backoff spreads in time.
const SPREAD: usize = 16;

/// What a buyer asks best available for: how many seats, and the filters of the form.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wanted {
    /// How many seats, together in one row.
    pub quantity: u64,
    /// Only seats at this price, in cents (one price band of the key); `None`: any.
    pub price_cents: Option<i64>,
    /// Only wheelchair places and their companion seats, at least one a wheelchair place.
    pub accessible: bool,
    /// At least one seat of the block next to an aisle or at the end of its row.
    pub aisle: bool,
}

impl Wanted {
    /// Whether `block` (adjacent seats of one row, one price) is what the buyer asked
    /// for, leaving the orphan rule aside.
    fn fits(&self, block: &[queries::FreeSeat]) -> bool {
        let (first, last) = (&block[0], &block[block.len() - 1]);
        let priced = self.price_cents.is_none_or(|p| first.price_cents == p);
        let accessible = !self.accessible
            || (block.iter().all(|s| s.access.is_some())
                && block
                    .iter()
                    .any(|s| s.access.as_deref() == Some("wheelchair")));
        let aisle = !self.aisle || first.aisle_before || first.number == 1 || last.aisle_after;
        priced && accessible && aisle
    }
}

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
/// Picks the best block among the seats the event's board shows free ([`pick_block`])
/// and holds it with the group script; a block that someone else took meanwhile is
/// picked again a few times (`PICKS`), each time at random among more of the best
/// blocks left (`SPREAD`), the holds read again ([`super::board::Boards::held_since`]).
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
    let group = super::event_group(&state.settings.lease_namespace, event_id);
    let (board, mine) = tokio::join!(
        state.boards.get(state, event_id),
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
                let held = state.boards.held_since(state, event_id, collided).await?;
                taken = held.iter().chain(&sold_since).copied().collect();
                spread = spread.saturating_mul(SPREAD);
            }
            Err(err) => return Err(purchase::hold_refused(err)),
        }
    }
    Err(Refusal::BlocksTaken { quantity }.into())
}

/// Holds exactly `seats` (ids of seats of `event_id`, checked by the caller) for `buyer`
/// in ONE run of the group script ([`lease::LeaseStore::acquire_all`], behind the
/// event's waiting room if it has one: [`waiting_room::admission`]): every seat with
/// one owner token, one fencing token and the hold TTL, or none; then remembers each
/// hold in the buyer's signed cookie. Returns the leases in the order of `seats`, or the
/// lease error as it came (`Held`, `Retired` for a sold seat, `OverLimit`, `NotAdmitted`,
/// `Unavailable`...: nothing was held; `purchase::hold_refused` turns it into the buyer's
/// 409 or 503). Errors: 404 no such event.
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

/// What [`pick_block`] found.
#[derive(Debug, PartialEq)]
pub enum Pick<'a> {
    /// The block to hold.
    Block(&'a [queries::FreeSeat]),
    /// Blocks that fit, but each would strand a seat.
    OnlyStranding,
    /// No block fits.
    None,
}

/// The best block for `wanted` among `free` (ordered by price, highest first, then
/// section, row and number, as the event's board keeps them: [`super::board::Board::free`]): the first one, in
/// that order, of `wanted.quantity` adjacent seats (same section, row and price,
/// consecutive numbers, no aisle between them), none in `held`, that fits the filters
/// ([`Wanted`]) and strands no seat.
///
/// The orphan rule, as seats.io's and Ticketmaster's best available keep it: a block
/// never leaves ONE seat alone between it and a held or sold seat, an aisle or the row's
/// end, since nobody buys a single seat stranded like that. Within a run of free seats
/// of length `n` the block may start at `o` only if neither `o` (seats left before it)
/// nor `n - o - quantity` (after it) is 1. If every fitting block would strand one,
/// nothing is held and the buyer is told why ([`Pick::OnlyStranding`]).
pub fn pick_block<'a>(
    free: &'a [queries::FreeSeat],
    held: &HashSet<i64>,
    wanted: &Wanted,
) -> Pick<'a> {
    pick_one_of(free, held, wanted, 1)
}

/// [`pick_block`]'s block, or one drawn at random among the best blocks of the first
/// `spread` runs that have one (`spread` 1: the best). One block per run: two blocks of
/// one run, each stranding no seat alone, could strand one together once two buyers
/// won them; blocks of different runs never touch.
fn pick_one_of<'a>(
    free: &'a [queries::FreeSeat],
    held: &HashSet<i64>,
    wanted: &Wanted,
    spread: usize,
) -> Pick<'a> {
    let quantity = wanted.quantity as usize;
    let mut stranding = false;
    let mut fitting = Vec::new();
    for run in runs(free, held) {
        let Some(room) = run.len().checked_sub(quantity) else {
            continue;
        };
        let best = (0..=room)
            .map(|before| (before, &run[before..before + quantity]))
            .filter(|(_, block)| wanted.fits(block))
            .find(|&(before, _)| {
                let strands = before == 1 || room - before == 1;
                stranding |= strands;
                !strands
            });
        if let Some((_, block)) = best {
            fitting.push(block);
            if fitting.len() == spread {
                break;
            }
        }
    }
    match fitting.len() {
        0 if stranding => Pick::OnlyStranding,
        0 => Pick::None,
        n => Pick::Block(fitting[rand::random_range(0..n)]),
    }
}

/// The runs of `free`: each a longest stretch of seats next to each other (as
/// [`pick_block`] means it), none of them in `held`; a held seat ends a run as a sold
/// one (absent from `free`) does.
fn runs<'a>(
    free: &'a [queries::FreeSeat],
    held: &HashSet<i64>,
) -> impl Iterator<Item = &'a [queries::FreeSeat]> {
    let next_to = |prev: &queries::FreeSeat, seat: &queries::FreeSeat| {
        prev.section_id == seat.section_id
            && prev.row_label == seat.row_label
            && prev.price_cents == seat.price_cents
            && prev.number + 1 == seat.number
            && !seat.aisle_before
    };
    let mut start = 0;
    std::iter::from_fn(move || {
        while start < free.len() && held.contains(&free[start].seat_id) {
            start += 1;
        }
        if start == free.len() {
            return None;
        }
        let mut end = start + 1;
        while end < free.len()
            && !held.contains(&free[end].seat_id)
            && next_to(&free[end - 1], &free[end])
        {
            end += 1;
        }
        let run = &free[start..end];
        start = end;
        Some(run)
    })
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
    let seats = held_seats(state, buyer, event_id).await?;
    let mut holds = Vec::with_capacity(seats.len());
    for seat_id in seats {
        let seat = SeatRef { event_id, seat_id };
        if let Some(lease) = purchase::held_lease(state, buyer, seat).await? {
            holds.push((seat, lease));
        }
    }
    Ok(holds)
}

/// The seats of `event_id` that Redis records as held by `buyer`, in seat order: one
/// read of the event's holders ([`lease::LeaseStore::holders`]). 503 Redis unavailable.
pub(crate) async fn held_seats(state: &AppState, buyer: &Buyer, event_id: i64) -> Result<Vec<i64>> {
    let group = super::event_group(&state.settings.lease_namespace, event_id);
    let live = state.leases.holders(&group).await?;
    let mut seats: Vec<i64> = live
        .holdings
        .iter()
        .filter(|h| h.holder == buyer.id())
        .filter_map(super::seat_of)
        .collect();
    seats.sort_unstable();
    Ok(seats)
}

/// Releases every seat `buyer` holds in `event_id` (each owner-checked, as
/// [`purchase::release`]); returns how many were released. 503 Redis unavailable.
pub async fn release_all(state: &AppState, buyer: &Buyer, event_id: i64) -> Result<usize> {
    let mut released = 0;
    for seat_id in held_seats(state, buyer, event_id).await? {
        match purchase::release(state, buyer, SeatRef { event_id, seat_id }).await {
            Ok(()) => released += 1,
            // Lapsed since the read: nothing left to release.
            Err(Error::Forbidden(_)) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(released)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seats of one row: (id, number, aisle before, price).
    fn row(label: &str, seats: &[(i64, i32, bool, i64)]) -> Vec<queries::FreeSeat> {
        seats
            .iter()
            .map(
                |&(seat_id, number, aisle_before, price_cents)| queries::FreeSeat {
                    seat_id,
                    section_id: 1,
                    section_code: "MAIN".into(),
                    row_label: label.into(),
                    number,
                    aisle_before,
                    aisle_after: false,
                    access: None,
                    price_cents,
                },
            )
            .collect()
    }

    fn ids(pick: Pick) -> Option<Vec<i64>> {
        match pick {
            Pick::Block(block) => Some(block.iter().map(|s| s.seat_id).collect()),
            _ => None,
        }
    }

    fn seats(quantity: u64) -> Wanted {
        Wanted {
            quantity,
            ..Wanted::default()
        }
    }

    #[test]
    fn a_block_is_adjacent_unheld_seats_of_one_row_across_no_aisle_or_gap() {
        let mut free = row(
            "A",
            &[
                (1, 1, false, 50),
                (2, 2, false, 50),
                (3, 3, true, 50),
                (4, 4, false, 50),
            ],
        );
        free.extend(row(
            "B",
            &[(5, 1, false, 50), (6, 2, false, 50), (8, 4, false, 50)],
        ));
        let none = HashSet::new();
        let pick = |held: &[i64], quantity| {
            ids(pick_block(
                &free,
                &HashSet::from_iter(held.iter().copied()),
                &seats(quantity),
            ))
        };
        assert_eq!(ids(pick_block(&free, &none, &seats(2))), Some(vec![1, 2]));
        // 2 and 3 are across an aisle; B2 and B4 are not neighbours (B3 is sold).
        assert_eq!(pick(&[], 3), None);
        assert_eq!(pick(&[2], 2), Some(vec![3, 4]));
        assert_eq!(pick(&[2, 4], 2), Some(vec![5, 6]));
        // A row's last seats and the next row's first are not adjacent.
        assert_eq!(pick(&[1, 2, 5], 2), Some(vec![3, 4]));
        assert_eq!(pick(&[1, 4, 5], 2), None);
    }

    #[test]
    fn best_available_never_strands_a_single_seat() {
        // Row A: 1-3 free between sold seats (4 is sold); row B: 1-4 free.
        let mut free = row(
            "A",
            &[(1, 1, false, 90), (2, 2, false, 90), (3, 3, false, 90)],
        );
        free.extend(row(
            "B",
            &[
                (5, 1, false, 90),
                (6, 2, false, 90),
                (7, 3, false, 90),
                (8, 4, false, 90),
            ],
        ));
        let none = HashSet::new();
        // 2 of A's three would leave one alone: B's first two, leaving B3-B4 together.
        assert_eq!(ids(pick_block(&free, &none, &seats(2))), Some(vec![5, 6]));
        assert_eq!(
            ids(pick_block(&free, &none, &seats(3))),
            Some(vec![1, 2, 3])
        );
        // 3 of B's four would strand the fourth: A's three instead.
        assert_eq!(ids(pick_block(&free[3..], &none, &seats(3))), None);
        assert_eq!(
            pick_block(&free[3..], &none, &seats(3)),
            Pick::OnlyStranding
        );
        // Inside a run of five, 2 seats go at its start (three left together).
        let five = row(
            "C",
            &[
                (1, 1, false, 9),
                (2, 2, false, 9),
                (3, 3, false, 9),
                (4, 4, false, 9),
                (5, 5, false, 9),
            ],
        );
        assert_eq!(ids(pick_block(&five, &none, &seats(2))), Some(vec![1, 2]));
        // With seat 1 held, the run is 2-5: 2 and 3, leaving 4-5.
        assert_eq!(
            ids(pick_block(&five, &HashSet::from([1]), &seats(2))),
            Some(vec![2, 3])
        );
        // With 3 held, 1-2 and 4-5 are each a whole run: no orphan.
        assert_eq!(
            ids(pick_block(&five, &HashSet::from([3]), &seats(2))),
            Some(vec![1, 2])
        );
        assert_eq!(
            pick_block(&five, &HashSet::from([1, 2]), &seats(2)),
            Pick::OnlyStranding
        );
    }

    #[test]
    fn after_a_collision_picks_spread_over_the_best_block_of_each_run() {
        // Row A: runs 1-2, 4-5 and 7-16 (3 and 6 held); row B: 17-26 (27-32 held).
        let sixteen = |label, first: i64| {
            let seats: Vec<_> = (1..=16).map(|n| (first + n, n as i32, false, 9)).collect();
            row(label, &seats)
        };
        let mut free = sixteen("A", 0);
        free.extend(sixteen("B", 16));
        let held = HashSet::from([3, 6, 27, 28, 29, 30, 31, 32]);
        let mut picked = std::collections::BTreeSet::new();
        for _ in 0..300 {
            picked.insert(ids(pick_one_of(&free, &held, &seats(3), 3)).unwrap());
        }
        // 1-2 and 4-5 are too short: each other run gives its best block alone, never
        // a second one (7-9 and 11-13 won by two buyers would strand 10).
        let best = [vec![7, 8, 9], vec![17, 18, 19]];
        assert_eq!(picked, std::collections::BTreeSet::from(best));
        // A spread of one is the best block.
        assert_eq!(
            ids(pick_one_of(&free, &held, &seats(3), 1)),
            Some(vec![7, 8, 9])
        );
    }

    #[test]
    fn the_filters_pick_a_price_band_accessible_places_or_an_aisle_seat() {
        let mut free = row(
            "A",
            &[
                (1, 1, false, 90),
                (2, 2, false, 90),
                (3, 3, false, 90),
                (4, 4, false, 90),
            ],
        );
        free.extend(row(
            "B",
            &[
                (5, 1, false, 50),
                (6, 2, false, 50),
                (7, 3, false, 50),
                (8, 4, false, 50),
            ],
        ));
        free[3].aisle_after = true;
        free[6].access = Some("wheelchair".into());
        free[7].access = Some("companion".into());
        let none = HashSet::new();
        let band = Wanted {
            price_cents: Some(50),
            ..seats(2)
        };
        assert_eq!(ids(pick_block(&free, &none, &band)), Some(vec![5, 6]));
        let accessible = Wanted {
            accessible: true,
            ..seats(2)
        };
        assert_eq!(ids(pick_block(&free, &none, &accessible)), Some(vec![7, 8]));
        let one = Wanted {
            accessible: true,
            ..seats(1)
        };
        assert_eq!(
            ids(pick_block(&free, &none, &one)),
            None,
            "7 alone would strand 8"
        );
        let aisle = Wanted {
            aisle: true,
            ..seats(2)
        };
        // With A1 held, A3-A4 (by the aisle) would strand A2: B1-B2 (the row's end).
        assert_eq!(
            ids(pick_block(&free, &HashSet::from([1]), &aisle)),
            Some(vec![5, 6])
        );
        assert_eq!(ids(pick_block(&free, &none, &aisle)), Some(vec![1, 2]));
    }
}
