//! The bid rules, as pure functions of an item read at the Postgres clock's `now`:
//!
//! * bids are accepted while the item is open and `starts_at <= now < ends_at`;
//! * the first bid must be at least the starting price;
//! * every later bid must be at least the high bid plus the minimum increment, so a bid
//!   EQUAL to the high bid loses (two buyers bidding the same amount in the same
//!   millisecond: the first one serialised wins, the other is told it is no longer high
//!   enough);
//! * no bid is over [`MAX_AMOUNT_CENTS`] (the most the site takes): where the high bid
//!   plus the increment would pass it, the next bid may be the maximum itself, and a
//!   high bid AT the maximum cannot be outbid (the item is at its limit: the form is
//!   withdrawn and a bid is refused as `at_limit`, where it used to ask for an amount
//!   that the amount parser refuses, so no bid could ever be placed);
//! * at the end, the high bidder wins if the high bid meets the reserve price.
//!
//! The bid path checks these before writing, for a precise message; the write itself
//! ([`super::queries::place_bid`]) re-checks them in SQL and is the authority.

use super::queries::Item;
use crate::http::error::BidRefusal;
use crate::money::MAX_AMOUNT_CENTS;

/// How a closed auction ended (`auction_items.result`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Sold to the high bidder at the high bid.
    Sold,
    /// The high bid was below the reserve price: not sold.
    ReserveNotMet,
    /// Nobody bid: not sold.
    NoBids,
}

impl Outcome {
    /// Parses the stored result; `None` for an open item.
    pub fn from_db(result: Option<&str>) -> Option<Outcome> {
        match result? {
            "sold" => Some(Outcome::Sold),
            "reserve_not_met" => Some(Outcome::ReserveNotMet),
            "no_bids" => Some(Outcome::NoBids),
            _ => None,
        }
    }
}

impl Item {
    /// The least amount the next bid may be, in cents: the starting price before the first
    /// bid, then the high bid plus the minimum increment; never above
    /// [`MAX_AMOUNT_CENTS`].
    pub fn minimum_bid_cents(&self) -> i64 {
        match self.high_bid_cents {
            None => self.terms.starting_price_cents,
            Some(high) => high.saturating_add(self.terms.min_increment_cents),
        }
        .min(MAX_AMOUNT_CENTS)
    }

    /// Whether the high bid is [`MAX_AMOUNT_CENTS`], so that no bid can beat it.
    pub fn at_limit(&self) -> bool {
        self.high_bid_cents == Some(MAX_AMOUNT_CENTS)
    }

    /// Whether bids are accepted at `self.now`: open, started, not ended, not at the limit.
    pub fn accepts_bids(&self) -> bool {
        self.status == "open"
            && self.starts_at <= self.now
            && self.now < self.ends_at
            && !self.at_limit()
    }

    /// Whether the end time has passed (the item may still await its closer).
    pub fn has_ended(&self) -> bool {
        self.status != "open" || self.now >= self.ends_at
    }

    /// Whether the high bid meets the reserve price (always, with no reserve).
    pub fn reserve_met(&self) -> bool {
        self.high_bid_cents
            .is_some_and(|high| high >= self.terms.reserve_price_cents)
    }

    /// The stored result, once closed.
    pub fn outcome(&self) -> Option<Outcome> {
        Outcome::from_db(self.result.as_deref())
    }
}

/// Checks a bid of `amount_cents` against `item` as read at `item.now`.
pub fn check_bid(item: &Item, amount_cents: i64) -> Result<(), BidRefusal> {
    if item.has_ended() {
        return Err(BidRefusal::Ended);
    }
    if item.now < item.starts_at {
        return Err(BidRefusal::NotOpenYet {
            starts_at: item.starts_at,
        });
    }
    if item.at_limit() {
        return Err(BidRefusal::AtLimit);
    }
    let minimum_cents = item.minimum_bid_cents();
    match item.high_bid_cents {
        _ if amount_cents >= minimum_cents => Ok(()),
        None => Err(BidRefusal::BelowStartingPrice {
            amount_cents,
            minimum_cents,
        }),
        Some(high_bid_cents) => Err(BidRefusal::TooLow {
            amount_cents,
            high_bid_cents,
            increment_cents: item.terms.min_increment_cents,
            minimum_cents,
        }),
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeDelta, Utc};

    use super::*;
    use crate::auction::queries::ItemTerms;

    /// A plain item open from an hour ago for another hour ($10.00 start, $1.00
    /// increment), with a $50.00 reserve and the given high bid, read now.
    fn item(high_bid_cents: Option<i64>) -> Item {
        let now = Utc::now();
        Item {
            id: 1,
            terms: ItemTerms {
                title: "Poster".into(),
                description: "Poster, for a test.".into(),
                starting_price_cents: 1_000,
                min_increment_cents: 100,
                reserve_price_cents: 5_000,
                soft_close_secs: 0,
            },
            starts_at: now - TimeDelta::hours(1),
            ends_at: now + TimeDelta::hours(1),
            status: "open".into(),
            high_bid_cents,
            high_bidder_id: high_bid_cents.map(|_| "a".into()),
            high_bidder_name: high_bid_cents.map(|_| "A".into()),
            bid_count: high_bid_cents.map_or(0, |_| 1),
            fence_token: 0,
            result: None,
            winner_id: None,
            winner_name: None,
            closed_at: None,
            now: Utc::now(),
        }
    }

    #[test]
    fn near_the_maximum_the_maximum_itself_wins_and_at_it_nothing_can() {
        let near = item(Some(MAX_AMOUNT_CENTS - 50));
        assert_eq!(near.minimum_bid_cents(), MAX_AMOUNT_CENTS);
        assert!(check_bid(&near, MAX_AMOUNT_CENTS).is_ok());
        assert!(near.accepts_bids());
        let at = item(Some(MAX_AMOUNT_CENTS));
        assert!(!at.accepts_bids());
        assert_eq!(check_bid(&at, MAX_AMOUNT_CENTS), Err(BidRefusal::AtLimit));
    }

    #[test]
    fn the_first_bid_needs_the_starting_price() {
        let first = item(None);
        assert_eq!(first.minimum_bid_cents(), 1_000);
        assert!(check_bid(&first, 1_000).is_ok());
        assert!(matches!(
            check_bid(&first, 999),
            Err(BidRefusal::BelowStartingPrice { .. })
        ));
    }

    #[test]
    fn an_equal_bid_loses_and_high_plus_increment_wins() {
        let bid_on = item(Some(3_000));
        assert_eq!(bid_on.minimum_bid_cents(), 3_100);
        let refusal = check_bid(&bid_on, 3_000).unwrap_err();
        assert!(matches!(refusal, BidRefusal::TooLow { .. }));
        assert!(refusal.to_string().contains("no longer high enough"));
        assert!(refusal.to_string().contains("$31.00"), "{refusal}");
        assert!(check_bid(&bid_on, 3_099).is_err());
        assert!(check_bid(&bid_on, 3_100).is_ok());
    }

    #[test]
    fn bids_only_between_start_and_end() {
        let mut ended = item(None);
        ended.ends_at = ended.now;
        assert_eq!(check_bid(&ended, 10_000), Err(BidRefusal::Ended));
        let mut closed = item(None);
        closed.status = "closed".into();
        assert_eq!(check_bid(&closed, 10_000), Err(BidRefusal::Ended));
        let mut early = item(None);
        early.starts_at = early.now + TimeDelta::seconds(1);
        assert!(matches!(
            check_bid(&early, 10_000),
            Err(BidRefusal::NotOpenYet { .. })
        ));
    }

    #[test]
    fn the_reserve_decides_a_sale() {
        assert!(!item(None).reserve_met());
        assert!(!item(Some(4_999)).reserve_met());
        assert!(item(Some(5_000)).reserve_met());
        assert_eq!(
            Outcome::from_db(Some("reserve_not_met")),
            Some(Outcome::ReserveNotMet)
        );
        assert_eq!(Outcome::from_db(None), None);
    }
}
