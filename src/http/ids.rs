//! The ids that URLs name, parsed once. A handler takes an [`EventId`], an [`ItemId`] or
//! an [`OrderId`] and gets a positive id. A malformed one gets the 400 page first.
//!
//! Each id is a newtype with its own `parse`, so a raw segment never reaches the SQL.
//! A form POST parses its id after its CSRF check ([`crate::http::csrf::CsrfPost`]).

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;

use crate::http::error::{Error, Result};

/// Parses a positive id from a URL segment. `what` names it in the 400 message.
pub fn parse_id(raw: &str, what: &str) -> Result<i64> {
    raw.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| Error::BadRequest(format!("{raw:?} is not a valid {what} id.")))
}

/// An id named by one segment of a route's path.
pub trait PathId: Sized {
    /// The segment's name in the route: `event` in `/events/{event}`.
    const SEGMENT: &'static str;

    /// The id in `raw`, or a 400 naming what it is not.
    fn parse(raw: &str) -> Result<Self>;
}

/// The text of segment `name` of the request's path, percent-decoded. 400 if it is
/// not UTF-8 once decoded; 404 if the route has no such segment.
pub async fn segment(parts: &mut Parts, name: &str) -> Result<String> {
    let params = RawPathParams::from_request_parts(parts, &())
        .await
        .map_err(|rejection| Error::BadRequest(rejection.body_text()))?;
    let raw = params.iter().find(|(key, _)| *key == name);
    raw.map(|(_, value)| value.to_owned())
        .ok_or_else(Error::no_such_page)
}

/// Declares a newtype over `i64` that parses segment `$segment`, named `$what` in the
/// 400 message, and extracts itself from the path.
macro_rules! path_id {
    ($(#[$doc:meta])* $name:ident, $segment:literal, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name(pub i64);

        impl PathId for $name {
            const SEGMENT: &'static str = $segment;

            fn parse(raw: &str) -> Result<Self> {
                parse_id(raw, $what).map($name)
            }
        }

        impl<S: Send + Sync> FromRequestParts<S> for $name {
            type Rejection = Error;

            async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self> {
                <$name as PathId>::parse(&segment(parts, $segment).await?)
            }
        }
    };
}

path_id!(
    /// `events.id`, from the `{event}` segment.
    EventId,
    "event",
    "event"
);

path_id!(
    /// `seats.id`, from the `{seat}` segment.
    SeatId,
    "seat",
    "seat"
);

path_id!(
    /// An auction's `items.id`, from the `{item}` segment.
    ItemId,
    "item",
    "auction"
);

path_id!(
    /// `orders.id`, from the `{id}` segment of `/orders/{id}`.
    OrderId,
    "id",
    "order"
);

#[cfg(test)]
mod tests {
    use super::{EventId, PathId, parse_id};

    #[test]
    fn ids_are_positive_integers() {
        assert_eq!(parse_id("42", "seat").unwrap(), 42);
        for bad in ["0", "-1", "abc", "", "1e3", "99999999999999999999"] {
            assert!(parse_id(bad, "seat").is_err(), "{bad}");
        }
        assert_eq!(EventId::parse("7").unwrap(), EventId(7));
        assert!(EventId::parse("7x").is_err());
    }
}
