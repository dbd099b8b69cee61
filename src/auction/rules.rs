//! The bid rules, as pure functions of an item read at the Postgres clock's `now`. A bid
//! states the bidder's hidden MAXIMUM; the site bids for them up to it (proxy bidding,
//! docs/auction.md):
//!
//! * a bid is on time if it ARRIVED while the item was open, `starts_at <= arrived_at <
//!   ends_at` (the receiving server's clock when the request came in), and its turn at the
//!   item's lock came within the arrival grace after the end ([`super::bid::arrival_grace`]);
//! * a bidder who does not lead must state at least the price plus the increment of the
//!   price's band ([`super::increments::INCREMENT_TABLE`]; the starting price for the
//!   first bid); an EQUAL maximum is accepted and loses to the earlier one;
//! * the leader may raise their maximum (the price does not move: nobody outbids
//!   themself, except up to a reserve it now meets) or lower it, never below the price;
//! * no maximum is over [`MAX_AMOUNT_CENTS`], and a price AT it cannot be outbid;
//! * at the end, the leader wins at the price if the price meets the reserve.
//!
//! The bid path checks these before writing, for a precise message; the write itself
//! ([`super::queries::place_bid`]) applies them in SQL and is the authority, including
//! the resolution of the new price and leader (`auction_resolve`, migrations/0016).

use chrono::{DateTime, Utc};

use super::increments::increment_cents;
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
    /// The least maximum a bidder who does not lead may state, in cents: the starting
    /// price before the first bid, then the price plus its band's increment; never above
    /// [`MAX_AMOUNT_CENTS`].
    pub fn minimum_bid_cents(&self) -> i64 {
        match self.high_bid_cents {
            None => self.terms.starting_price_cents,
            Some(price) => price.saturating_add(increment_cents(price)),
        }
        .min(MAX_AMOUNT_CENTS)
    }

    /// Whether the price is [`MAX_AMOUNT_CENTS`], so that no bid can beat it.
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

    /// Whether `bidder_id` leads.
    pub fn leads(&self, bidder_id: &str) -> bool {
        self.high_bidder_id.as_deref() == Some(bidder_id)
    }

    /// The stored result, once closed.
    pub fn outcome(&self) -> Option<Outcome> {
        Outcome::from_db(self.result.as_deref())
    }
}

/// A maximum as the bid path checks it: who, how much, when it arrived.
#[derive(Clone, Copy, Debug)]
pub struct Offer<'a> {
    /// The bidder's public id.
    pub bidder_id: &'a str,
    /// The maximum, in cents.
    pub max_cents: i64,
    /// When the server received the bid (its own clock).
    pub arrived_at: DateTime<Utc>,
}

/// Checks `offer` against `item` as read at `item.now`, judged at its arrival and given
/// `grace`, how long after the end a bid that arrived in time may still take its turn.
pub fn check_bid(
    item: &Item,
    offer: &Offer<'_>,
    grace: chrono::TimeDelta,
) -> Result<(), BidRefusal> {
    if item.status != "open" || offer.arrived_at >= item.ends_at || item.now >= item.ends_at + grace
    {
        return Err(BidRefusal::Ended);
    }
    if offer.arrived_at < item.starts_at {
        return Err(BidRefusal::NotOpenYet {
            starts_at: item.starts_at,
        });
    }
    if item.at_limit() {
        return Err(BidRefusal::AtLimit);
    }
    let amount_cents = offer.max_cents;
    match item.high_bid_cents {
        Some(price_cents) if item.leads(offer.bidder_id) => {
            if amount_cents >= price_cents {
                Ok(())
            } else {
                Err(BidRefusal::BelowPrice {
                    amount_cents,
                    price_cents,
                })
            }
        }
        _ if amount_cents >= item.minimum_bid_cents() => Ok(()),
        None => Err(BidRefusal::BelowStartingPrice {
            amount_cents,
            minimum_cents: item.minimum_bid_cents(),
        }),
        Some(high_bid_cents) => Err(BidRefusal::TooLow {
            amount_cents,
            high_bid_cents,
            increment_cents: increment_cents(high_bid_cents),
            minimum_cents: item.minimum_bid_cents(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeDelta, Utc};

    use super::*;
    use crate::auction::queries::ItemTerms;

    /// A plain item open from an hour ago for another hour ($10.00 start), with a $50.00
    /// reserve and the given price, led by bidder `a`, read now.
    fn item(high_bid_cents: Option<i64>) -> Item {
        let now = Utc::now();
        Item {
            id: 1,
            terms: ItemTerms {
                title: "Poster".into(),
                description: "Poster, for a test.".into(),
                starting_price_cents: 1_000,
                reserve_price_cents: 5_000,
                soft_close_secs: 0,
            },
            starts_at: now - TimeDelta::hours(1),
            ends_at: now + TimeDelta::hours(1),
            hard_stop_at: now + TimeDelta::hours(2),
            status: "open".into(),
            high_bid_cents,
            high_bidder_id: high_bid_cents.map(|_| "a".into()),
            high_bidder_name: high_bid_cents.map(|_| "A".into()),
            leader_max_cents: high_bid_cents,
            runner_up_max_cents: None,
            bid_count: high_bid_cents.map_or(0, |_| 1),
            fence_token: 0,
            result: None,
            winner_id: None,
            winner_name: None,
            closed_at: None,
            now,
        }
    }

    /// `bidder`'s maximum of `max_cents`, arrived at `item`'s read.
    fn check(item: &Item, bidder: &str, max_cents: i64) -> Result<(), BidRefusal> {
        let offer = Offer {
            bidder_id: bidder,
            max_cents,
            arrived_at: item.now,
        };
        check_bid(item, &offer, TimeDelta::seconds(3))
    }

    #[test]
    fn near_the_maximum_the_maximum_itself_wins_and_at_it_nothing_can() {
        let near = item(Some(MAX_AMOUNT_CENTS - 50));
        assert_eq!(near.minimum_bid_cents(), MAX_AMOUNT_CENTS);
        assert!(check(&near, "b", MAX_AMOUNT_CENTS).is_ok());
        assert!(near.accepts_bids());
        let at = item(Some(MAX_AMOUNT_CENTS));
        assert!(!at.accepts_bids());
        assert_eq!(check(&at, "b", MAX_AMOUNT_CENTS), Err(BidRefusal::AtLimit));
    }

    #[test]
    fn the_first_bid_needs_the_starting_price() {
        let first = item(None);
        assert_eq!(first.minimum_bid_cents(), 1_000);
        assert!(check(&first, "b", 1_000).is_ok());
        assert!(matches!(
            check(&first, "b", 999),
            Err(BidRefusal::BelowStartingPrice { .. })
        ));
    }

    #[test]
    fn a_bidder_who_does_not_lead_beats_the_price_by_its_bands_increment() {
        let bid_on = item(Some(3_000));
        assert_eq!(bid_on.minimum_bid_cents(), 3_100);
        let refusal = check(&bid_on, "b", 3_099).unwrap_err();
        assert!(matches!(refusal, BidRefusal::TooLow { .. }));
        assert!(refusal.to_string().contains("$31.00"), "{refusal}");
        assert!(check(&bid_on, "b", 3_100).is_ok());
    }

    #[test]
    fn the_leader_may_lower_a_maximum_to_the_price_and_no_further() {
        let led = item(Some(3_000));
        assert!(check(&led, "a", 3_000).is_ok());
        assert!(check(&led, "a", 100_000).is_ok());
        assert_eq!(
            check(&led, "a", 2_999),
            Err(BidRefusal::BelowPrice {
                amount_cents: 2_999,
                price_cents: 3_000
            })
        );
    }

    #[test]
    fn judged_at_arrival_within_the_grace() {
        let mut ended = item(None);
        ended.ends_at = ended.now - TimeDelta::seconds(1);
        let on_time = Offer {
            bidder_id: "b",
            max_cents: 10_000,
            arrived_at: ended.ends_at - TimeDelta::milliseconds(1),
        };
        assert!(check_bid(&ended, &on_time, TimeDelta::seconds(3)).is_ok());
        assert_eq!(
            check_bid(&ended, &on_time, TimeDelta::milliseconds(500)),
            Err(BidRefusal::Ended)
        );
        assert_eq!(check(&ended, "b", 10_000), Err(BidRefusal::Ended));
        let mut closed = item(None);
        closed.status = "closed".into();
        assert_eq!(check(&closed, "b", 10_000), Err(BidRefusal::Ended));
        let mut early = item(None);
        early.starts_at = early.now + TimeDelta::seconds(1);
        assert!(matches!(
            check(&early, "b", 10_000),
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
