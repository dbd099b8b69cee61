//! The seat picker: holds (Redis leases), releases, and fenced purchases.
//!
//! * [`purchase`]: the rules: hold, release, confirm.
//! * [`map`]: the seat map of an event (one Postgres query + one Redis round trip).
//! * [`queries`]: the SQL.
//! * [`routes`]: thin HTTP handlers; `live`: the seat map's server-sent events.

mod live;
pub mod map;
pub mod purchase;
pub mod queries;
mod routes;

pub use routes::router;

use crate::error::Error;

/// One seat of one event, as named in URLs: `/events/{event_id}/seats/{seat_id}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeatRef {
    /// `events.id`.
    pub event_id: i64,
    /// `seats.id`.
    pub seat_id: i64,
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
