//! The seat picker: holds (Redis leases), releases, and fenced purchases.
//!
//! * [`purchase`]: the rules: hold, release, confirm.
//! * [`cart`]: several seats at once: best available (one group hold), checkout (one
//!   fenced transaction), release all.
//! * [`catalog`]: each event's seats and start, read once per process, so a hold does
//!   not ask Postgres.
//! * [`map`]: the seat map of an event (one Postgres query + one Redis round trip).
//! * [`overview`]: the venue drawn section by section, each shaded by what is left, and
//!   the one section a buyer picks ([`layout`]: where the sections are).
//! * [`queries`]: the SQL.
//! * `routes`: thin HTTP handlers; `live`: the seat map's server-sent events.

pub mod board;
pub mod cart;
pub mod catalog;
pub mod layout;
pub mod live;
pub mod map;
pub mod overview;
pub mod payments;
mod per_event;
pub mod purchase;
pub mod queries;
mod routes;

pub(crate) use routes::in_words;
pub use routes::{MapPage, SeatPost};
pub use routes::{purchase_routes, router};

use lease::LeaseKey;

use crate::config::LeaseNamespace;
use crate::http::error::Error;

/// One seat of one event, as named in URLs: `/events/{event_id}/seats/{seat_id}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeatRef {
    /// `events.id`.
    pub event_id: i64,
    /// `seats.id`.
    pub seat_id: i64,
}

/// The lease group of one event's seats: `<namespace>:event:<id>`. All seats of an event
/// share it (one Redis Cluster slot), so the seat map lists every hold of the event in one
/// round trip.
pub fn event_group(namespace: &LeaseNamespace, event_id: i64) -> String {
    namespace.group("event", event_id)
}

/// The lease key of one seat: name `<seat id>` in [`event_group`].
pub fn lease_key(namespace: &LeaseNamespace, seat: SeatRef) -> LeaseKey {
    namespace.key("event", seat.event_id, &seat.seat_id.to_string())
}

/// The seat a holding of [`event_group`] is on: its name parsed back to the seat id that
/// [`lease_key`] wrote (`None` for a name no seat key has).
pub fn seat_of(holding: &lease::Holding) -> Option<i64> {
    holding.name.parse().ok()
}

/// Parses a positive id from a URL segment; `what` names it in the 400 message.
pub fn parse_id(raw: &str, what: &str) -> Result<i64, Error> {
    raw.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| Error::BadRequest(format!("{raw:?} is not a valid {what} id.")))
}

#[cfg(test)]
mod tests {
    use super::parse_id;

    #[test]
    fn ids_are_positive_integers() {
        assert_eq!(parse_id("42", "seat").unwrap(), 42);
        for bad in ["0", "-1", "abc", "", "1e3", "99999999999999999999"] {
            assert!(parse_id(bad, "seat").is_err(), "{bad}");
        }
    }
}
