//! Events: one event's heading, read by every page of it. This file is a leaf; the home
//! page's list of events is [`list`].

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use sqlx::PgPool;

pub(crate) mod list;

/// How an on-sale is written for a buyer, on the venue's clock (chrono's format): "Sat 12
/// Dec 2026, 19:30:00 GMT". Seconds included: a crowd waits for the minute.
pub(crate) const ON_SALE_FORMAT: &str = "%a %-d %b %Y, %H:%M:%S %Z";

/// An event with its venue and seat counts.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct EventSummary {
    /// Its id.
    pub id: i64,
    /// Its name, for a person.
    pub name: String,
    /// The venue's name.
    pub venue: String,
    /// The venue's city.
    pub city: String,
    /// When the event starts (sales close then): an instant.
    pub starts_at: DateTime<Utc>,
    /// The venue's IANA zone (`venues.time_zone`, migration 0012), `Europe/London`.
    pub time_zone: String,
    /// `events.on_sale_at`: nothing is held or sold before it; `None` on sale since it
    /// was created.
    pub on_sale_at: Option<DateTime<Utc>>,
}

impl EventSummary {
    /// The start on the venue's wall clock, with the zone's abbreviation: "Sat 12 Dec
    /// 2026, 19:30 GMT", "Sat 10 Jul 2027, 19:30 BST" (open-event-server#2805: a
    /// Manchester concert shown as "18:30 UTC" in summer is an hour off for everyone
    /// reading it as the hall's time).
    pub fn when(&self) -> String {
        self.local(self.starts_at, "%a %-d %b %Y, %H:%M %Z")
    }

    /// When the sale opens on the venue's wall clock ([`ON_SALE_FORMAT`]), while it is
    /// still to come by this process's clock (what the page says; the grant's step
    /// decides, on the store's clock): `None` once it has opened, or with no on-sale.
    pub fn opens(&self) -> Option<String> {
        let at = self.on_sale_at.filter(|at| *at > Utc::now())?;
        Some(self.local(at, ON_SALE_FORMAT))
    }

    /// `at` on the venue's wall clock ([`venue_time`]).
    pub fn local(&self, at: DateTime<Utc>, format: &str) -> String {
        venue_time(&self.time_zone, at, format)
    }
}

/// `at` on the wall clock of the IANA zone `time_zone`, formatted by chrono's `format`
/// (`%Z`: the zone's abbreviation, "BST"). A zone the tz database does not know (a venue
/// row edited by hand; `seatlock seed` refuses one) is read as UTC, and says so.
pub(crate) fn venue_time(time_zone: &str, at: DateTime<Utc>, format: &str) -> String {
    let zone: Tz = time_zone.parse().unwrap_or(Tz::UTC);
    at.with_timezone(&zone).format(format).to_string()
}

/// One event, or `None`.
pub(crate) async fn find(db: &PgPool, event_id: i64) -> sqlx::Result<Option<EventSummary>> {
    sqlx::query_as(
        "SELECT e.id, e.name, v.name AS venue, v.city, e.starts_at, v.time_zone, e.on_sale_at
           FROM events e JOIN venues v ON v.id = e.venue_id WHERE e.id = $1",
    )
    .bind(event_id)
    .fetch_optional(db)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(venue_zone: &str, starts_at: &str) -> EventSummary {
        EventSummary {
            id: 1,
            name: "n".into(),
            venue: "The Grand Hall".into(),
            city: "Manchester".into(),
            starts_at: starts_at.parse().unwrap(),
            time_zone: venue_zone.into(),
            on_sale_at: None,
        }
    }

    #[test]
    fn the_start_is_shown_on_the_venues_clock_with_its_zone() {
        let summer = at("Europe/London", "2027-07-10T18:30:00Z");
        assert_eq!(summer.when(), "Sat 10 Jul 2027, 19:30 BST");
        let winter = at("Europe/London", "2026-12-12T19:30:00Z");
        assert_eq!(winter.when(), "Sat 12 Dec 2026, 19:30 GMT");
        // A zone nobody knows is read as UTC, and the text says UTC.
        let unknown = at("Europe/Manchester", "2026-12-12T19:30:00Z");
        assert_eq!(unknown.when(), "Sat 12 Dec 2026, 19:30 UTC");
    }
}
