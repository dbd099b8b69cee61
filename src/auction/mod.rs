//! The online auction: a short per-item lease serialises bids, every bid write is fenced,
//! and a lease-claimed closing job writes each result exactly once.
//!
//! * [`rules`]: the bid rules (open, minimum bid, an equal bid loses) and the messages:
//!   pure functions.
//! * [`bid`]: the bid path: per-item bid lock (a lease from the `lease` crate, retried
//!   with jittered backoff), read, validate, ONE fenced conditional write, owner-checked
//!   release; or, with `--bid-strategy conditional`, the same write without a lock.
//! * [`close`]: the background closer: finds items past their end, claims each closing
//!   job with a lease kept alive by a [`lease::Watchdog`], writes the result fenced.
//! * [`known_items`]: the ids known to exist, so an unknown id takes no bid lock.
//! * [`queries`]: the SQL.
//! * `routes`: thin HTTP handlers and the pages.
//! * `live`: `GET /auctions/{id}/stream`, the item page's live updates.
//!
//! Lease keys: group `<namespace>:auction:<id>`, names `bid` ([`bid_lock_key`]) and
//! `close` ([`closing_key`]). Sharing the group gives the item one fencing counter, so the
//! item row's `fence_token` orders bid writes and the close alike.

pub mod bid;
pub mod close;
pub mod known_items;
mod live;
pub mod queries;
mod routes;
pub mod rules;

pub use routes::router;

use lease::LeaseKey;

use crate::config::LeaseNamespace;
use crate::profile::BuyerProfile;

/// The bid lock of one auction item: name `bid` in group `<namespace>:auction:<id>`.
pub fn bid_lock_key(namespace: &LeaseNamespace, item_id: i64) -> LeaseKey {
    namespace.key("auction", item_id, "bid")
}

/// The closing job's lease of one auction item: name `close` in the item's group, so the
/// closer's fencing tokens are ordered with the bid lock's.
pub fn closing_key(namespace: &LeaseNamespace, item_id: i64) -> LeaseKey {
    namespace.key("auction", item_id, "close")
}

/// A bid as placed: who offers how much for which item.
#[derive(Clone, Copy, Debug)]
pub struct Bid<'a> {
    /// The bidder: the public id, from the signed cookie, and the display name.
    pub bidder: &'a BuyerProfile,
    /// `auction_items.id`.
    pub item_id: i64,
    /// The amount, in cents (parsed by [`crate::money::parse_amount`]).
    pub amount_cents: i64,
}
