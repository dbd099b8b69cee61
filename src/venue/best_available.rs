//! Best available: the block of adjacent seats a buyer is offered, picked among the
//! seats the event's board shows free ([`super::board::Board::free`]).
//!
//! The rules, pure and tested here: one row, one price, no aisle between the seats,
//! within the buyer's filters ([`Wanted`]), and no seat left alone ([`pick_block`]).
//! The hold of the block, all or none, is the core's ([`crate::seats::cart::best_available`]).

use std::collections::HashSet;

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
    /// Only seats of this section (`sections.code`); `None`: any. The list way to choose
    /// narrows to a section, then a row ([`super::list`]).
    pub section: Option<String>,
    /// Only seats of this row (its label), in any section `section` allows; `None`: any.
    pub row: Option<String>,
    /// Only the block that starts at this seat (`seats.id`): the block a buyer chose
    /// from the list. It is held as any other best available block, with the same
    /// refusals; `None`: any.
    pub first_seat: Option<i64>,
}

/// Whether `block` (adjacent seats of one row) has a seat next to an aisle or at the
/// end of its row: what `aisle` asks for, and what the list marks.
pub fn at_aisle(block: &[FreeSeat]) -> bool {
    let (first, last) = (&block[0], &block[block.len() - 1]);
    first.aisle_before || first.number == 1 || last.aisle_after
}

impl Wanted {
    /// Whether `block` (adjacent seats of one row, one price) is what the buyer asked
    /// for, leaving the orphan rule aside.
    fn fits(&self, block: &[FreeSeat]) -> bool {
        let first = &block[0];
        let priced = self.price_cents.is_none_or(|p| first.price_cents == p);
        let accessible = !self.accessible
            || (block.iter().all(|s| s.access.is_some())
                && block
                    .iter()
                    .any(|s| s.access.as_deref() == Some("wheelchair")));
        let aisle = !self.aisle || at_aisle(block);
        let placed = (self.section.as_ref()).is_none_or(|code| first.section_code == *code)
            && (self.row.as_ref()).is_none_or(|row| first.row_label == *row)
            && self.first_seat.is_none_or(|id| first.seat_id == id);
        priced && accessible && aisle && placed
    }
}

/// An unsold seat, for picking a block of adjacent seats ([`pick_block`]). The event's
/// board keeps them ([`super::board::Board::free`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FreeSeat {
    /// `seats.id`.
    pub seat_id: i64,
    /// `sections.id`: seats of different sections are never adjacent.
    pub section_id: i64,
    /// `sections.code`: where best available sends the buyer to see the block.
    pub section_code: String,
    /// The row's label ("C").
    pub row_label: String,
    /// The seat's number in its row.
    pub number: i32,
    /// An aisle runs just before this seat: it is not adjacent to the one before.
    pub aisle_before: bool,
    /// An aisle (or the row's end) is just after this seat.
    pub aisle_after: bool,
    /// `seats.access`: `wheelchair`, `companion` or none (migration 0013).
    pub access: Option<String>,
    /// The seat's price for this event, in cents.
    pub price_cents: i64,
}

/// What [`pick_block`] found.
#[derive(Debug, PartialEq)]
pub enum Pick<'a> {
    /// The block to hold.
    Block(&'a [FreeSeat]),
    /// Blocks that fit, but each would strand a seat.
    OnlyStranding,
    /// No block fits.
    None,
}

/// The best block for `wanted` among `free`, or why there is none.
///
/// `free` is in the board's order ([`super::board::Board::free`]): dearest first, then
/// section, row and number. The block is the first, in that order, of `wanted.quantity`
/// adjacent seats, none of them in `held`. Adjacent means one section, row and price,
/// consecutive numbers, and no aisle between. The block fits the filters ([`Wanted`])
/// and strands no seat.
///
/// The orphan rule, as seats.io's and Ticketmaster's best available keep it: a block
/// never leaves ONE seat alone between it and a held or sold seat, an aisle or the row's
/// end, since nobody buys a single seat stranded like that. Within a run of free seats
/// of length `n` the block may start at `o` only if neither `o` (seats left before it)
/// nor `n - o - quantity` (after it) is 1. If every fitting block would strand one,
/// nothing is held and the buyer is told why ([`Pick::OnlyStranding`]).
pub fn pick_block<'a>(free: &'a [FreeSeat], held: &HashSet<i64>, wanted: &Wanted) -> Pick<'a> {
    pick_one_of(free, held, wanted, 1)
}

/// The block `wanted` names (`wanted.first_seat` and the `wanted.quantity` adjacent seats
/// from it), holds aside: the block a buyer chose from the list, as it stands among the
/// unsold seats. `None`: no first seat named, or no such block of unsold seats.
pub fn named_block<'a>(free: &'a [FreeSeat], wanted: &Wanted) -> Option<&'a [FreeSeat]> {
    let first = wanted.first_seat?;
    let quantity = wanted.quantity as usize;
    runs(free, &HashSet::new()).find_map(|run| {
        let at = run.iter().position(|seat| seat.seat_id == first)?;
        run.get(at..at + quantity)
    })
}

/// [`pick_block`]'s block, or one drawn at random among the best blocks of the first
/// `spread` runs that have one (`spread` 1: the best). One block per run: two blocks of
/// one run, each stranding no seat alone, could strand one together once two buyers
/// won them; blocks of different runs never touch.
pub fn pick_one_of<'a>(
    free: &'a [FreeSeat],
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
                let strands = strands_seat(before, room);
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

/// Every block [`pick_block`] could offer for `wanted`, best first: each fitting block of
/// each run that strands no seat, several per run (the list shows them all, and a buyer
/// picks one; [`super::list`]).
pub fn blocks<'a>(
    free: &'a [FreeSeat],
    held: &HashSet<i64>,
    wanted: &'a Wanted,
) -> impl Iterator<Item = &'a [FreeSeat]> {
    let quantity = wanted.quantity as usize;
    runs(free, held).flat_map(move |run| {
        let room = run.len().checked_sub(quantity).filter(|_| quantity > 0);
        (room.into_iter())
            .flat_map(|room| (0..=room).filter(move |&before| !strands_seat(before, room)))
            .map(move |before| &run[before..before + quantity])
            .filter(|block| wanted.fits(block))
    })
}

/// The orphan rule: a block with `before` free seats before it, in a run with `room`
/// seats more than the block, leaves exactly one seat alone before or after it.
fn strands_seat(before: usize, room: usize) -> bool {
    before == 1 || room - before == 1
}

/// The runs of `free`: each a longest stretch of seats next to each other (as
/// [`pick_block`] means it), none of them in `held`; a held seat ends a run as a sold
/// one (absent from `free`) does.
fn runs<'a>(free: &'a [FreeSeat], held: &HashSet<i64>) -> impl Iterator<Item = &'a [FreeSeat]> {
    let next_to = |prev: &FreeSeat, seat: &FreeSeat| {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Seats of one row: (id, number, aisle before, price).
    fn row(label: &str, seats: &[(i64, i32, bool, i64)]) -> Vec<FreeSeat> {
        seats
            .iter()
            .map(|&(seat_id, number, aisle_before, price_cents)| FreeSeat {
                seat_id,
                section_id: 1,
                section_code: "MAIN".into(),
                row_label: label.into(),
                number,
                aisle_before,
                aisle_after: false,
                access: None,
                price_cents,
            })
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

    #[test]
    fn the_list_sees_every_block_that_strands_no_seat_and_names_one_to_hold() {
        // Row A: 1-5 free; row B: 1-4 free, 5 held.
        let mut free = row(
            "A",
            &(1..=5)
                .map(|n| (n, n as i32, false, 50))
                .collect::<Vec<_>>(),
        );
        free.extend(row(
            "B",
            &(11..=15)
                .map(|id| (id, id as i32 - 10, false, 50))
                .collect::<Vec<_>>(),
        ));
        let held = HashSet::from([15]);
        let listed = |wanted: &Wanted| -> Vec<Vec<i64>> {
            (blocks(&free, &held, wanted))
                .map(|b| b.iter().map(|s| s.seat_id).collect())
                .collect()
        };
        // A2-A3 and A3-A4 would strand A1 or A5; B2-B3 would strand B1 and B4 (B5 is held).
        let all = [vec![1, 2], vec![4, 5], vec![11, 12], vec![13, 14]];
        assert_eq!(listed(&seats(2)), all);
        let row_b = Wanted {
            section: Some("MAIN".into()),
            row: Some("B".into()),
            ..seats(2)
        };
        assert_eq!(listed(&row_b), [vec![11, 12], vec![13, 14]]);
        let elsewhere = Wanted {
            section: Some("UPPER".into()),
            ..seats(2)
        };
        assert!(listed(&elsewhere).is_empty());
        // The block chosen from the list is the one best available holds, ...
        let chosen = Wanted {
            first_seat: Some(4),
            ..seats(2)
        };
        assert_eq!(ids(pick_block(&free, &held, &chosen)), Some(vec![4, 5]));
        // ... and once one of its seats is held, none is held in its place.
        let taken = HashSet::from([5, 15]);
        assert_eq!(pick_block(&free, &taken, &chosen), Pick::None);
        // Holds aside, it is still the block its holder named (a resend is theirs).
        let named = named_block(&free, &chosen).map(|b| b.iter().map(|s| s.seat_id).collect());
        assert_eq!(named, Some(vec![4, 5]));
        let past_the_row = Wanted {
            first_seat: Some(5),
            ..seats(2)
        };
        assert_eq!(named_block(&free, &past_the_row), None);
        // A block that would strand a seat is refused as on the map, never moved.
        let stranding = Wanted {
            first_seat: Some(2),
            ..seats(2)
        };
        assert_eq!(pick_block(&free, &held, &stranding), Pick::OnlyStranding);
    }
}
