//! The event's pages: the venue drawn, one section's seats, the checkout page, the
//! zones' colours, the seat map's stream and best available. Each parses, reads, and
//! renders or redirects. The holds themselves are the core's ([`crate::seats`]).

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use super::best_available::Wanted;
use super::map::{self, SeatMap, SectionView};
use super::overview::{self, SectionSummary};
use crate::http::buyer::Buyer;
use crate::http::csrf::{CsrfPost, FormToken};
use crate::http::error::{Error, Result};
use crate::http::ids::EventId;
use crate::money::format_cents;
use crate::seats::{MapPage, cart, in_words};
use crate::state::AppState;
use crate::waiting_room;

/// `GET /events/{id}` (the overview), `GET /events/{id}/sections/{code}` (one section's
/// seats), the zones' stylesheet, the stream, the checkout page and best available.
/// The checkout's POST is the core's ([`crate::seats::router`]).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/events/{event}", get(show))
        .route("/events/{event}/sections/{code}", get(show_section))
        .route("/events/{event}/zones.css", get(zones_css))
        .route("/events/{event}/stream", get(super::live::stream))
        .route("/events/{event}/best-available", post(best_available))
        .route("/events/{event}/checkout", get(show_checkout))
}

/// The event's page: the overview (and, for a small venue, every seat), or one section's
/// seats. What every viewer shares is the board's (`map.board`: the overview is
/// rendered once per board, [`super::board`]); the rest is the buyer's own part (the
/// holds and tickets in `map`, name, form token) and the seats drawn for them (`grid`).
#[derive(Template, WebTemplate)]
#[template(path = "event.html")]
pub(super) struct EventPage {
    /// The event, its key and board, the buyer's holds and tickets.
    pub map: SeatMap,
    /// The page opens on the venue drawn (the board's `overview_html`); not on a
    /// section's page.
    pub show_overview: bool,
    /// The sections whose seats the page shows.
    pub grid: Vec<SectionView>,
    /// On a section's page: that section.
    pub section: Option<SectionSummary>,
    /// Where a seat's hold form posts, relative to the page: `"{id}/"` from
    /// `/events/{id}`, `"../"` from `/events/{id}/sections/{code}`.
    pub seat_base: String,
    pub buyer_name: String,
    /// The viewer's own buyer id (`data-buyer`: for tools that act as this buyer, as on
    /// the profile). No other buyer's id is on the page or its stream: the stream tells
    /// the viewer's holds as `mine` ([`super::live`]).
    pub buyer_id: String,
    pub authenticity_token: String,
    /// The hold length in words ("10 minutes").
    pub hold_for: String,
    /// `--max-seats-per-buyer`.
    pub max_seats: u64,
    /// The choices of the best-available quantity: 1 to `max_seats`.
    pub quantities: Vec<u64>,
    /// With a waiting room: when the buyer's turn to shop ends ("HH:MM:SS UTC", Redis
    /// clock) unless a page view renews it.
    pub admitted_until: Option<String>,
}

impl EventPage {
    fn price(&self, cents: &i64) -> String {
        format_cents(*cents)
    }

    /// Seats available and in all, of the event (overview) or of the section (its page).
    fn counts(&self) -> (usize, usize) {
        match &self.section {
            Some(section) => (section.available, section.total),
            None => (self.map.available, self.map.total),
        }
    }
}

/// `GET /events/{id}/checkout`: the buyer's held seats of the event, each price, the
/// total, one countdown, Buy all and Release all.
#[derive(Template, WebTemplate)]
#[template(path = "checkout.html")]
pub(super) struct CheckoutPage {
    pub map: SeatMap,
    pub authenticity_token: String,
}

impl CheckoutPage {
    fn price(&self, cents: &i64) -> String {
        format_cents(*cents)
    }
}

/// Behind a waiting room, only an admitted buyer sees the event's pages (and the view
/// renews the admission): `Ok(until)` with when the buyer's turn ends (`None` without a
/// room), or `Err` with the queue page to answer instead, before any map is read.
async fn admission(
    state: &AppState,
    buyer: &Buyer,
    csrf: &FormToken,
    event_id: i64,
) -> Result<std::result::Result<Option<String>, Response>> {
    Ok(match waiting_room::gate(state, buyer, event_id).await? {
        waiting_room::Gate::Open(until) => Ok(until.map(map::clock_time)),
        waiting_room::Gate::Queue(Some(waiting)) => {
            Err(waiting_room::page(state, csrf.clone(), event_id, waiting).await?)
        }
        waiting_room::Gate::Queue(None) => {
            Err(Redirect::to(&format!("/events/{event_id}/queue")).into_response())
        }
    })
}

/// The page for `buyer` around `map`: the parts that are the buyer's own.
async fn page(
    state: &AppState,
    buyer: &Buyer,
    csrf: &FormToken,
    map: SeatMap,
    admitted_until: Option<String>,
) -> Result<EventPage> {
    let buyer_name = buyer.name().await?;
    Ok(EventPage {
        map,
        show_overview: false,
        grid: Vec::new(),
        section: None,
        seat_base: String::new(),
        buyer_name,
        buyer_id: buyer.id().to_owned(),
        authenticity_token: csrf.authenticity.clone(),
        hold_for: in_words(state.settings.hold_ttl()),
        max_seats: state.settings.max_seats_per_buyer,
        quantities: (1..=state.settings.max_seats_per_buyer).collect(),
        admitted_until,
    })
}

/// `GET /events/{id}`: the overview, and every seat under it for a venue of at most
/// [`overview::ALL_SEATS_UP_TO`] seats.
async fn show(
    State(state): State<AppState>,
    buyer: Buyer,
    csrf: FormToken,
    EventId(event_id): EventId,
) -> Result<Response> {
    let admitted_until = match admission(&state, &buyer, &csrf, event_id).await? {
        Ok(until) => until,
        Err(queue) => return Ok(queue),
    };
    let map = event_map(&state, &buyer, event_id).await?;
    let mut page = page(&state, &buyer, &csrf, map, admitted_until).await?;
    if page.map.total <= overview::ALL_SEATS_UP_TO {
        page.grid = page.map.sections(None);
    }
    page.show_overview = true;
    page.seat_base = format!("{event_id}/");
    Ok((csrf, page).into_response())
}

/// `GET /events/{id}/sections/{code}`: one section's seats, with the buyer's holds and
/// cart beside them. 404 for a section the event's venue does not have, decided before
/// the waiting room's gate (from the process's [`crate::seats::catalog`]), so bad input
/// writes nothing, room or no room.
async fn show_section(
    State(state): State<AppState>,
    buyer: Buyer,
    csrf: FormToken,
    EventId(event_id): EventId,
    Path((_, code)): Path<(String, String)>,
) -> Result<Response> {
    let event = state.catalog.event(&state.db, event_id).await?;
    if !event.ok_or_else(Error::no_such_event)?.has_section(&code) {
        return Err(Error::NotFound(format!(
            "This event's venue has no section {code:?}."
        )));
    }
    let admitted_until = match admission(&state, &buyer, &csrf, event_id).await? {
        Ok(until) => until,
        Err(queue) => return Ok(queue),
    };
    let map = event_map(&state, &buyer, event_id).await?;
    let mut summary = (map.board.overview.sections.iter())
        .find(|s| s.code == code)
        .ok_or_else(Error::no_such_event)?
        .clone();
    summary.available = map.available_of(|seat| seat.section_code == code, summary.available);
    let mut page = page(&state, &buyer, &csrf, map, admitted_until).await?;
    page.grid = page.map.sections(Some(&code));
    page.section = Some(summary);
    page.seat_base = "../".into();
    Ok((csrf, page).into_response())
}

/// The event's price-zone colours as a stylesheet.
#[derive(Template)]
#[template(path = "zones.css", escape = "none")]
struct ZonesCss {
    zones: Vec<super::queries::Zone>,
}

/// `GET /events/{id}/zones.css`: the colours of the zones of the event's venue, for its
/// map and key (fixed once the venue is seeded, so browsers may keep it for an hour); 404
/// for an event that does not exist.
async fn zones_css(State(state): State<AppState>, EventId(event_id): EventId) -> Result<Response> {
    let zones = super::queries::zones(&state.db, event_id).await?;
    if zones.is_empty() {
        return Err(Error::NotFound(format!("There is no event {event_id}.")));
    }
    // Rendering writes only strings checked at seeding: it cannot fail.
    let css = ZonesCss { zones }.render().unwrap_or_default();
    let headers = [
        (axum::http::header::CONTENT_TYPE, "text/css; charset=utf-8"),
        (axum::http::header::CACHE_CONTROL, "public, max-age=3600"),
    ];
    Ok((headers, css).into_response())
}

/// The map of event `event_id` for `buyer`: 404 no such event.
async fn event_map(state: &AppState, buyer: &Buyer, event_id: i64) -> Result<SeatMap> {
    map::load(state, event_id, buyer.id(), buyer.is_new())
        .await?
        .ok_or_else(Error::no_such_event)
}

async fn show_checkout(
    State(state): State<AppState>,
    buyer: Buyer,
    csrf: FormToken,
    EventId(event_id): EventId,
) -> Result<impl IntoResponse> {
    let page = CheckoutPage {
        map: event_map(&state, &buyer, event_id).await?,
        authenticity_token: csrf.authenticity.clone(),
    };
    Ok((csrf, page))
}

/// The best-available form: how many seats, as typed (parsed by the handler, so a bad
/// value gets the same 400 page as one out of range), and its filters: `band` a price
/// in cents (empty: any), `accessible` and `aisle` checkboxes (present: on).
#[derive(Deserialize)]
struct QuantityForm {
    quantity: String,
    #[serde(default)]
    band: String,
    #[serde(default)]
    accessible: Option<String>,
    #[serde(default)]
    aisle: Option<String>,
}

impl QuantityForm {
    /// What the buyer asked for; 400 for a price band that is not a number of cents.
    fn wanted(&self) -> Result<Wanted> {
        let band = self.band.trim();
        let price_cents = match band {
            "" => None,
            cents => Some(
                cents
                    .parse()
                    .map_err(|_| Error::BadRequest(format!("{cents:?} is not a price band.")))?,
            ),
        };
        Ok(Wanted {
            quantity: self.quantity.trim().parse().unwrap_or(0),
            price_cents,
            accessible: self.accessible.is_some(),
            aisle: self.aisle.is_some(),
        })
    }
}

/// Best available, then the cart: on the event's page when it shows every seat, else on
/// the page of the section the seats are in (so the buyer sees them).
async fn best_available(
    State(state): State<AppState>,
    buyer: Buyer,
    CsrfPost(EventId(event_id), form): CsrfPost<EventId, QuantityForm>,
) -> Result<Redirect> {
    let held = cart::best_available(&state, &buyer, event_id, &form.wanted()?).await?;
    let seats = state.catalog.event(&state.db, event_id).await?;
    if seats.is_some_and(|e| e.seat_count() > overview::ALL_SEATS_UP_TO) {
        let page = MapPage {
            section: Some(held.section_code),
        };
        return Ok(Redirect::to(&format!("{}#cart", page.path(event_id))));
    }
    Ok(Redirect::to(&format!("/events/{event_id}#cart")))
}
