//! The online auction: a short per-item lease serialises bids, every bid write is fenced,
//! and a lease-claimed closing job writes each result exactly once.
//!
//! * [`increments`]: the published increment table by price band.
//! * [`rules`]: the bid rules (judged at arrival, the minimum maximum, the published
//!   increment table) and the messages: pure functions.
//! * [`bid`]: the bid path: per-item bid lock (a lease from the `lease` crate, retried
//!   with jittered backoff), read, validate, ONE fenced conditional write, owner-checked
//!   release; or, with `--bid-strategy conditional`, the same write without a lock.
//! * [`close`]: the background closer: finds items past their end, claims each closing
//!   job with a lease kept alive by a [`lease::Watchdog`], writes the result fenced.
//! * [`known_items`]: the ids known to exist, so an unknown id takes no bid lock.
//! * [`queries`]: the SQL.
//! * `routes`: thin HTTP handlers and the pages.
//! * `live`: `GET /auctions/{id}/stream`, the item page's live updates, one read per bid
//!   per server shared by every watcher.
//!
//! Lease keys: group `<namespace>:auction:<id>`, names `bid` ([`bid_lock_key`]) and
//! `close` ([`closing_key`]). Sharing the group gives the item one fencing counter, so the
//! item row's `fence_token` orders bid writes and the close alike.

pub mod bid;
pub mod close;
pub mod increments;
pub mod known_items;
mod live;
pub mod queries;
mod routes;
pub mod rules;

pub use live::SharedReads;
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

/// A bid as placed: who states which maximum for which item, and when it arrived.
#[derive(Clone, Copy, Debug)]
pub struct Bid<'a> {
    /// The bidder: the public id, from the signed cookie, and the display name.
    pub bidder: &'a BuyerProfile,
    /// `auction_items.id`.
    pub item_id: i64,
    /// The bidder's hidden maximum, in cents (the form's `amount`, parsed by
    /// [`crate::money::parse_amount`]): the site bids for them up to it.
    pub max_cents: i64,
    /// When this server received the request, by its own clock: the instant the bid is
    /// judged at (on time if before the end; docs/auction.md, "Judged at arrival").
    pub arrived_at: chrono::DateTime<chrono::Utc>,
}
