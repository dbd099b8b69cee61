//! `GET /`: the home page, every event soonest first.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;
use axum::response::IntoResponse;

use super::EventSummary;
use crate::http::buyer::Buyer;
use crate::http::csrf::FormToken;
use crate::http::error::Result;
use crate::state::AppState;

/// A line of the home page.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct EventListing {
    #[sqlx(flatten)]
    /// The event.
    pub event: EventSummary,
    /// How many seats the event has.
    pub seats: i64,
    /// How many seats are unsold.
    pub unsold: i64,
    /// `events.waiting_room_shoppers` (migration 0010): `None` leaves it to the flag.
    pub waiting_room_shoppers: Option<i32>,
}

impl EventListing {
    /// "a waiting room: 1 at a time, on sale Tue 1 Dec, 14:30 GMT" (the venue's clock) for an event with a
    /// room (`default_shoppers`: `--waiting-room-shoppers`), else `None`.
    pub(crate) fn waiting_room(&self, default_shoppers: &u64) -> Option<String> {
        let shoppers = self
            .waiting_room_shoppers
            .map_or(*default_shoppers, |n| u64::try_from(n).unwrap_or(0));
        (shoppers > 0).then(|| {
            let on_sale = (self.event.on_sale_at)
                .map(|at| format!(", on sale {}", self.event.local(at, "%a %-d %b, %H:%M %Z")))
                .unwrap_or_default();
            format!("a waiting room: {shoppers} at a time{on_sale}")
        })
    }
}

/// The home page: every event, soonest first.
#[derive(Template, WebTemplate)]
#[template(path = "index.html")]
pub(crate) struct IndexPage {
    /// The events, soonest first.
    pub events: Vec<EventListing>,
    /// The buyer's display name.
    pub buyer_name: String,
    /// The CSRF token of the page's forms.
    pub authenticity_token: String,
    /// `--waiting-room-shoppers`: the room of events without one of their own.
    pub waiting_room_shoppers: u64,
}

/// `GET /`.
pub(crate) async fn index(
    State(state): State<AppState>,
    buyer: Buyer,
    csrf: FormToken,
) -> Result<impl IntoResponse> {
    let events = sqlx::query_as(
        "SELECT e.id, e.name, v.name AS venue, v.city, e.starts_at, v.time_zone,
                count(*) AS seats, count(*) FILTER (WHERE NOT es.sold) AS unsold,
                e.waiting_room_shoppers, e.on_sale_at
           FROM events e JOIN venues v ON v.id = e.venue_id
           JOIN event_seats es ON es.event_id = e.id
          GROUP BY e.id, v.id ORDER BY e.starts_at, e.id",
    )
    .fetch_all(&state.db)
    .await?;
    let page = IndexPage {
        events,
        buyer_name: buyer.name().await?,
        authenticity_token: csrf.authenticity.clone(),
        waiting_room_shoppers: state.settings.waiting_room_shoppers,
    };
    Ok((csrf, page))
}
