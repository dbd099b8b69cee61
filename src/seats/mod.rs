//! The seat picker's core: hold a seat (a Redis lease), release it, and buy it with a
//! fenced write. Read [`purchase`] first, then [`queries::sell`]. The other files
//! support them:
//!
//! * [`purchase`]: the rules of one seat: hold, release, confirm.
//! * [`cart`]: several seats at once: the group hold, best available's retries, the
//!   checkout in one fenced transaction, release all.
//! * [`extend`]: "Need more time?", every hold of the buyer's extended at once.
//! * [`queries`]: the SQL; [`queries::sell`] is the fenced write.
//! * [`catalog`]: each event's seats and start, read once per process. A hold asks no
//!   Postgres.
//! * [`payments`]: the sweep that voids payments nobody finished.
//! * `routes`: thin HTTP handlers for hold, release, confirm, checkout, release all and
//!   extend.
//! * This file: the lease key of a seat, and the seats a buyer holds.
//!
//! What the buyer sees lives in [`crate::venue`]: the drawing, the map and its stream,
//! and best available's choice of seats.

pub mod cart;
pub mod catalog;
pub mod extend;
pub mod payments;
pub mod purchase;
pub mod queries;
mod routes;

pub(crate) use routes::in_words;
pub use routes::{MapPage, SeatPost};
pub use routes::{purchase_routes, router};

use lease::{LeaseKey, LeaseStore};

use crate::config::LeaseNamespace;
use crate::http::buyer::Buyer;
use crate::http::error::Result;

/// One seat of one event, as named in URLs: `/events/{event_id}/seats/{seat_id}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeatRef {
    /// `events.id`.
    pub event_id: i64,
    /// `seats.id`.
    pub seat_id: i64,
}

/// The lease group of one event's seats: `<namespace>:event:<id>`.
/// All seats of an event share it, and so share one Redis Cluster slot.
/// So the seat map lists every hold of the event in one round trip.
pub fn event_group(namespace: &LeaseNamespace, event_id: i64) -> String {
    namespace.group("event", event_id)
}

/// The lease key of one seat: name `<seat id>` in [`event_group`].
pub fn lease_key(namespace: &LeaseNamespace, seat: SeatRef) -> LeaseKey {
    namespace.key("event", seat.event_id, &seat.seat_id.to_string())
}

/// The seat a holding of [`event_group`] is on.
/// Its name is parsed back to the seat id that [`lease_key`] wrote.
/// `None` for a name no seat key has.
pub fn seat_of(holding: &lease::Holding) -> Option<i64> {
    holding.name.parse().ok()
}

/// The seats of `event_id` that `leases` records as held by `buyer`, in seat order.
/// It reads only the buyer's own leases ([`lease::LeaseStore::held_by`]: one script on
/// Redis, whatever the number of holds in the event), not the event's every hold.
/// 503 if Redis is unavailable.
pub(crate) async fn held_seats(
    leases: &dyn LeaseStore,
    namespace: &LeaseNamespace,
    buyer: &Buyer,
    event_id: i64,
) -> Result<Vec<i64>> {
    let group = event_group(namespace, event_id);
    let live = leases.held_by(&group, buyer.id()).await?;
    let mut seats: Vec<i64> = live.holdings.iter().filter_map(seat_of).collect();
    seats.sort_unstable();
    Ok(seats)
}
