//! The published increment table: how much a bid must beat the price by, by price band.
//! One table for the whole site, in Rust only: the bid statement gets it as two arrays
//! (`auction_increment`, migrations/0016), the rules and the pages read it here.

/// The published increment table: `(from_cents, increment_cents)`, ascending. At a price
/// of `p` the increment is that of the last band starting at or below `p`. The bid
/// statement gets it as two arrays (`auction_increment`, migrations/0016), every item page
/// shows it; bands and steps as the large auction sites publish them.
pub const INCREMENT_TABLE: &[(i64, i64)] = &[
    (0, 5),
    (100, 25),
    (500, 50),
    (2_500, 100),
    (10_000, 250),
    (25_000, 500),
    (50_000, 1_000),
    (100_000, 2_500),
    (250_000, 5_000),
    (500_000, 10_000),
];

/// The increment at `price_cents`, in cents ([`INCREMENT_TABLE`]).
pub fn increment_cents(price_cents: i64) -> i64 {
    INCREMENT_TABLE
        .iter()
        .rev()
        .find(|(from, _)| *from <= price_cents)
        .map_or(INCREMENT_TABLE[0].1, |(_, step)| *step)
}

/// [`INCREMENT_TABLE`] as the bid statement binds it: the band starts, and the increments.
pub fn increment_arrays() -> (Vec<i64>, Vec<i64>) {
    INCREMENT_TABLE.iter().copied().unzip()
}

#[cfg(test)]
mod tests {
    use super::increment_cents;
    use crate::money::MAX_AMOUNT_CENTS;

    #[test]
    fn the_increment_comes_from_the_price_band() {
        assert_eq!(increment_cents(0), 5);
        assert_eq!(increment_cents(99), 5);
        assert_eq!(increment_cents(2_500), 100);
        assert_eq!(increment_cents(3_000), 100);
        assert_eq!(increment_cents(MAX_AMOUNT_CENTS), 10_000);
    }
}
