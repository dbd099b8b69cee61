//! The list way to choose seats (`GET /events/{id}/list`), for a keyboard or a screen
//! reader: a section, then a row (or any), then the blocks of adjacent seats sized to the
//! party, each with its price and accessibility marks, and one button to hold it.
//!
//! The blocks are the ones best available would offer ([`super::best_available::blocks`]:
//! one row, one price, no aisle between, no seat stranded), read from the same board as
//! the map. Holding one is best available's own route with the block named
//! ([`super::best_available::Wanted::first_seat`]): the same group hold, the same
//! refusals, nothing decided here. The idea is seats.io's "choose from a list" mode.

use std::collections::HashSet;

use super::best_available::{self, FreeSeat, Wanted};
use super::map::SeatMap;
use crate::money::format_cents;

/// Without a section chosen, the list shows this many blocks, best first (the arena has
/// thousands); a section's list shows all of its blocks.
pub const ANY_SECTION_BLOCKS: usize = 12;

/// One row's blocks on the list.
pub struct ListedRow {
    /// The section's code.
    pub section_code: String,
    /// The section's name.
    pub section_name: String,
    /// The row's label ("F").
    pub row_label: String,
    /// Its blocks, in the order listed.
    pub blocks: Vec<ListedBlock>,
}

impl ListedRow {
    /// The row's heading id on the page (the blocks' buttons are described by it).
    pub fn anchor(&self) -> String {
        format!("row-{}-{}", self.section_code, self.row_label)
    }
}

/// One block of adjacent seats on the list.
pub struct ListedBlock {
    /// `seats.id` of its first seat: the `first` the hold button posts.
    pub first_seat: i64,
    /// The first and last seat numbers.
    pub numbers: (i32, i32),
    /// Each seat's price, in cents (a block has one price).
    pub price_cents: i64,
    /// Wheelchair places in the block.
    pub wheelchair: usize,
    /// Companion seats in the block.
    pub companion: usize,
    /// A seat of the block is next to an aisle or at its row's end.
    pub aisle: bool,
}

impl ListedBlock {
    /// "seat 5" or "seats 5–6".
    pub fn seats(&self) -> String {
        match self.numbers {
            (from, to) if from == to => format!("seat {from}"),
            (from, to) => format!("seats {from}–{to}"),
        }
    }

    /// "$90.00 each", then its marks: "wheelchair place", "companion seat", "aisle".
    pub fn details(&self) -> String {
        let mut words = vec![format!("{} each", format_cents(self.price_cents))];
        let plural = |n: usize, one: &str| match n {
            0 => None,
            1 => Some(format!("1 {one}")),
            n => Some(format!("{n} {one}s")),
        };
        words.extend(plural(self.wheelchair, "wheelchair place"));
        words.extend(plural(self.companion, "companion seat"));
        if self.aisle {
            words.push("aisle".into());
        }
        words.join(" · ")
    }

    fn of(block: &[FreeSeat]) -> ListedBlock {
        let (first, last) = (&block[0], &block[block.len() - 1]);
        let count = |kind: &str| {
            (block.iter())
                .filter(|s| s.access.as_deref() == Some(kind))
                .count()
        };
        ListedBlock {
            first_seat: first.seat_id,
            numbers: (first.number, last.number),
            price_cents: first.price_cents,
            wheelchair: count("wheelchair"),
            companion: count("companion"),
            aisle: best_available::at_aisle(block),
        }
    }
}

/// The blocks `wanted` asks for on `map`, grouped by row, and whether more were left
/// out ([`ANY_SECTION_BLOCKS`]). Seats held by anyone (the board's holds and the viewer's
/// own as they are now) are not offered. Within a section the rows come in drawing order;
/// across sections, best first, as best available would pick.
pub fn listed(map: &SeatMap, wanted: &Wanted) -> (Vec<ListedRow>, bool) {
    let board = &map.board;
    let held: HashSet<i64> = (board.held_seats())
        .chain(map.my_holds.iter().map(|h| h.seat_id))
        .collect();
    let limit = match wanted.section {
        Some(_) => usize::MAX,
        None => ANY_SECTION_BLOCKS,
    };
    let mut blocks: Vec<&[FreeSeat]> = best_available::blocks(&board.free, &held, wanted)
        .take(limit.saturating_add(1))
        .collect();
    let more = blocks.len() > limit;
    blocks.truncate(limit);
    if wanted.section.is_some() {
        blocks.sort_by_key(|block| board.position(block[0].seat_id));
    }
    let mut rows: Vec<ListedRow> = Vec::new();
    for block in blocks {
        let seat = &block[0];
        let same_row = rows
            .last()
            .is_some_and(|r| r.section_code == seat.section_code && r.row_label == seat.row_label);
        if !same_row {
            let name = board.seat(seat.seat_id).map(|s| s.section_name.clone());
            rows.push(ListedRow {
                section_code: seat.section_code.clone(),
                section_name: name.unwrap_or_default(),
                row_label: seat.row_label.clone(),
                blocks: Vec::new(),
            });
        }
        let row = rows.last_mut().expect("just pushed");
        row.blocks.push(ListedBlock::of(block));
    }
    (rows, more)
}

/// The row labels of section `code`, in drawing order: the list's choice of row.
pub fn rows_of(map: &SeatMap, code: &str) -> Vec<String> {
    let mut rows: Vec<String> = Vec::new();
    for seat in map.board.seats.iter().filter(|s| s.section_code == code) {
        if rows.last() != Some(&seat.row_label) {
            rows.push(seat.row_label.clone());
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(numbers: (i32, i32), access: &[Option<&str>], aisle: bool) -> ListedBlock {
        let count = |kind| access.iter().filter(|a| **a == Some(kind)).count();
        ListedBlock {
            first_seat: 1,
            numbers,
            price_cents: 9000,
            wheelchair: count("wheelchair"),
            companion: count("companion"),
            aisle,
        }
    }

    #[test]
    fn a_block_says_its_seats_price_and_marks() {
        let plain = block((5, 6), &[None, None], false);
        assert_eq!(plain.seats(), "seats 5–6");
        assert_eq!(plain.details(), "$90.00 each");
        let access = block((1, 3), &[Some("wheelchair"), Some("companion"), None], true);
        assert_eq!(
            access.details(),
            "$90.00 each · 1 wheelchair place · 1 companion seat · aisle"
        );
        assert_eq!(block((7, 7), &[None], false).seats(), "seat 7");
    }
}
