//! The event's pages: the venue drawn, one section's seats, the list way to choose, the
//! checkout page, the zones' colours, the seat map's stream and best available. Each parses, reads, and
//! renders or redirects. The holds themselves are the core's ([`crate::seats`]).

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};

use super::best_available::Wanted;
use super::list::{self, ListedRow};
use super::map::{self, SeatMap, SectionView};
use super::overview::{self, SectionSummary};
use crate::http::buyer::Buyer;
use crate::http::csrf::{CsrfPost, FormToken};
use crate::http::error::{Error, Result};
use crate::http::ids::{EventId, PathId, SeatId};
use crate::money::format_cents;
use crate::seats::{MapPage, cart, in_words};
use crate::state::AppState;
use crate::waiting_room;

/// `GET /events/{id}` (the overview), `GET /events/{id}/sections/{code}` (one section's
/// seats), `GET /events/{id}/list` (the list way to choose), the zones' stylesheet, the
/// stream, the checkout page and best available.
/// The checkout's POST is the core's ([`crate::seats::router`]).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/events/{event}", get(show))
        .route("/events/{event}/sections/{code}", get(show_section))
        .route("/events/{event}/list", get(show_list))
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

    /// This page's path: the event's, or its section's.
    fn here(&self) -> String {
        let page = MapPage {
            section: self.section.as_ref().map(|s| s.code.clone()),
        };
        page.path(self.map.event.id)
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

    /// This page's path.
    fn here(&self) -> String {
        format!("/events/{}/checkout", self.map.event.id)
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

/// `GET /events/{id}/list`: the list way to choose ([`super::list`]): the form of the
/// party's size, section, row and filters, then the blocks that fit, each with a button
/// posting best available with the block named, and the buyer's cart.
#[derive(Template, WebTemplate)]
#[template(path = "list.html")]
pub(super) struct ListPage {
    pub map: SeatMap,
    /// The choice as asked (the form's values, kept on the page and in the redirect).
    pub choice: QuantityForm,
    /// How many seats together (the choice's, 2 when it names none).
    pub quantity: u64,
    /// The chosen section's rows (empty: no section chosen).
    pub rows: Vec<String>,
    /// The blocks that fit, by row.
    pub listed: Vec<ListedRow>,
    /// Some blocks were left out (no section chosen: [`list::ANY_SECTION_BLOCKS`]).
    pub more: bool,
    pub authenticity_token: String,
    /// The choices of the party's size: 1 to `--max-seats-per-buyer`.
    pub quantities: Vec<u64>,
    pub hold_for: String,
}

impl ListPage {
    fn price(&self, cents: &i64) -> String {
        format_cents(*cents)
    }

    /// This page's path: the list of this choice.
    fn here(&self) -> String {
        self.choice.list_path(self.map.event.id)
    }

    /// The chosen section's name, if one is chosen.
    fn section_name(&self) -> Option<&str> {
        let sections = &self.map.board.overview.sections;
        let code = self.choice.section.as_deref()?;
        sections.iter().find(|s| s.code == code).map(|s| &*s.name)
    }

    /// Whether section `code` is the one chosen (selected in the form).
    fn section_is(&self, code: &str) -> bool {
        self.choice.section.as_deref() == Some(code)
    }

    /// Whether `row` is the one chosen.
    fn row_is(&self, row: &str) -> bool {
        self.choice.row.as_deref() == Some(row)
    }

    /// Whether the price band of `cents` is the one chosen.
    fn band_is(&self, cents: &i64) -> bool {
        self.choice.band.trim() == cents.to_string()
    }
}

/// The party's size a list page shows when the address names none: two, the most
/// common party, so the first blocks listed need no choice at all.
const LIST_PARTY: u64 = 2;

/// `GET /events/{id}/list?quantity=&section=&row=&band=&accessible=&aisle=`; behind a
/// waiting room, only for an admitted buyer, as the map. A section the venue does not
/// have lists nothing; a quantity out of range lists for two.
async fn show_list(
    State(state): State<AppState>,
    buyer: Buyer,
    csrf: FormToken,
    EventId(event_id): EventId,
    choice: std::result::Result<Query<QuantityForm>, QueryRejection>,
) -> Result<Response> {
    // The app's page, not axum's plain text, for an address it cannot read (a key given
    // twice, a word where a number goes).
    let Query(choice) = choice.map_err(|rejection| {
        let text = rejection.body_text();
        let reason = text.trim_start_matches("Failed to deserialize query string: ");
        Error::BadRequest(format!("The choice in the address is not valid: {reason}."))
    })?;
    if let Err(queue) = admission(&state, &buyer, &csrf, event_id).await? {
        return Ok(queue);
    }
    let map = event_map(&state, &buyer, event_id).await?;
    let max_seats = state.settings.max_seats_per_buyer;
    let mut wanted = choice.wanted()?;
    if !(1..=max_seats).contains(&wanted.quantity) {
        wanted.quantity = LIST_PARTY.min(max_seats);
    }
    let rows = (wanted.section.as_deref()).map_or_else(Vec::new, |code| list::rows_of(&map, code));
    let (listed, more) = list::listed(&map, &wanted);
    let page = ListPage {
        map,
        choice,
        quantity: wanted.quantity,
        rows,
        listed,
        more,
        authenticity_token: csrf.authenticity.clone(),
        quantities: (1..=max_seats).collect(),
        hold_for: in_words(state.settings.hold_ttl()),
    };
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

/// The best-available form and the list's choice (its query): how many seats, as typed
/// (parsed by the handler, so a bad value gets the same 400 page as one out of range),
/// and its filters: `band` a price in cents (empty: any), `accessible` and `aisle`
/// checkboxes (present: on), `section` and `row` (empty: any), `first` the first seat of
/// the block chosen from the list; `back` is `list` when the form was the list's, which
/// the buyer is sent back to.
#[derive(Deserialize, Serialize, Default)]
pub(super) struct QuantityForm {
    #[serde(default)]
    quantity: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    band: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    accessible: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    aisle: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    section: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    row: Option<String>,
    #[serde(default, skip_serializing)]
    first: Option<String>,
    #[serde(default, skip_serializing)]
    back: Option<String>,
}

impl QuantityForm {
    /// What the buyer asked for; 400 for a price band that is not a number of cents, or
    /// a first seat that is not a seat id.
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
        let chosen = |field: &Option<String>| field.clone().filter(|v| !v.trim().is_empty());
        let first_seat = match chosen(&self.first) {
            Some(id) => Some(SeatId::parse(&id)?.0),
            None => None,
        };
        Ok(Wanted {
            quantity: self.quantity.trim().parse().unwrap_or(0),
            price_cents,
            accessible: self.accessible.is_some(),
            aisle: self.aisle.is_some(),
            section: chosen(&self.section),
            row: chosen(&self.section).and(chosen(&self.row)),
            first_seat,
        })
    }

    /// The list page of this choice: `/events/{id}/list?…` with its fields.
    fn list_path(&self, event_id: i64) -> String {
        let query = serde_urlencoded::to_string(self).unwrap_or_default();
        format!("/events/{event_id}/list?{query}")
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
    if form.back.as_deref() == Some("list") {
        return Ok(Redirect::to(&format!("{}#cart", form.list_path(event_id))));
    }
    let seats = state.catalog.event(&state.db, event_id).await?;
    if seats.is_some_and(|e| e.seat_count() > overview::ALL_SEATS_UP_TO) {
        let page = MapPage {
            section: Some(held.section_code),
        };
        return Ok(Redirect::to(&format!("{}#cart", page.path(event_id))));
    }
    Ok(Redirect::to(&format!("/events/{event_id}#cart")))
}
