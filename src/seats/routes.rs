//! HTTP handlers of the seat picker: parse, call [`super::purchase`], redirect or render.

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use serde::Deserialize;

use super::map::{self, SeatMap, SectionView};
use super::overview::{self, SectionSummary};
use super::{SeatRef, parse_id};
use super::{cart, purchase};
use crate::http::buyer::Buyer;
use crate::http::csrf::{CsrfForm, Empty, FormToken};
use crate::http::error::{Error, Result};
use crate::money::format_cents;
use crate::state::AppState;
use crate::waiting_room;

/// `GET /events/{id}` (the overview), `GET /events/{id}/sections/{code}` (one section's
/// seats), its stream, release, and the cart: best available, the checkout page and its
/// purchase, release all.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/events/{event}", get(show))
        .route("/events/{event}/sections/{code}", get(show_section))
        .route("/events/{event}/zones.css", get(zones_css))
        .route("/events/{event}/stream", get(super::live::stream))
        .route("/events/{event}/seats/{seat}/release", post(release))
        .route("/events/{event}/best-available", post(best_available))
        .route(
            "/events/{event}/checkout",
            get(show_checkout).post(checkout),
        )
        .route("/events/{event}/release-all", post(release_all))
}

/// The product's hold and confirm (lease + fenced purchase).
pub fn purchase_routes() -> Router<AppState> {
    Router::new()
        .route("/events/{event}/seats/{seat}/hold", post(hold))
        .route("/events/{event}/seats/{seat}/confirm", post(confirm))
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
    /// Public buyer id, so the page's script can tell its own holds in live updates.
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
    Path(event): Path<String>,
) -> Result<Response> {
    let event_id = parse_id(&event, "event")?;
    let admitted_until = match admission(&state, &buyer, &csrf, event_id).await? {
        Ok(until) => until,
        Err(queue) => return Ok(queue),
    };
    let map = event_map(&state, &buyer, &event).await?;
    let mut page = page(&state, &buyer, &csrf, map, admitted_until).await?;
    if page.map.total <= overview::ALL_SEATS_UP_TO {
        page.grid = page.map.sections(None);
    }
    page.show_overview = true;
    page.seat_base = format!("{event_id}/");
    Ok((csrf, page).into_response())
}

/// `GET /events/{id}/sections/{code}`: one section's seats, with the buyer's holds and
/// cart beside them. 404 for a section the event's venue does not have.
async fn show_section(
    State(state): State<AppState>,
    buyer: Buyer,
    csrf: FormToken,
    Path((event, code)): Path<(String, String)>,
) -> Result<Response> {
    let event_id = parse_id(&event, "event")?;
    let admitted_until = match admission(&state, &buyer, &csrf, event_id).await? {
        Ok(until) => until,
        Err(queue) => return Ok(queue),
    };
    let map = event_map(&state, &buyer, &event).await?;
    let no_section = || Error::NotFound(format!("This event's venue has no section {code:?}."));
    let mut summary = (map.board.overview.sections.iter())
        .find(|s| s.code == code)
        .ok_or_else(no_section)?
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
async fn zones_css(State(state): State<AppState>, Path(event): Path<String>) -> Result<Response> {
    let event_id = parse_id(&event, "event")?;
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

/// The map of the event named by a URL's `{event}` segment for `buyer`: 400 malformed
/// id, 404 no such event.
async fn event_map(state: &AppState, buyer: &Buyer, event: &str) -> Result<SeatMap> {
    let event_id = parse_id(event, "event")?;
    map::load(state, event_id, buyer.id(), buyer.is_new())
        .await?
        .ok_or_else(Error::no_such_event)
}

async fn show_checkout(
    State(state): State<AppState>,
    buyer: Buyer,
    csrf: FormToken,
    Path(event): Path<String>,
) -> Result<impl IntoResponse> {
    let page = CheckoutPage {
        map: event_map(&state, &buyer, &event).await?,
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
    fn wanted(&self) -> Result<cart::Wanted> {
        let band = self.band.trim();
        let price_cents = match band {
            "" => None,
            cents => Some(
                cents
                    .parse()
                    .map_err(|_| Error::BadRequest(format!("{cents:?} is not a price band.")))?,
            ),
        };
        Ok(cart::Wanted {
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
    Path(event): Path<String>,
    CsrfForm(form): CsrfForm<QuantityForm>,
) -> Result<Redirect> {
    let event_id = parse_id(&event, "event")?;
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

/// The checkout form: the CSRF token and, from the cart the buyer saw, `seats` (seat ids,
/// comma-separated; absent: every seat the buyer holds).
#[derive(Deserialize)]
struct CheckoutForm {
    seats: Option<String>,
}

impl CheckoutForm {
    /// The shown seats: 400 for anything but comma-separated ids.
    fn shown(&self) -> Result<Option<Vec<i64>>> {
        let Some(seats) = self.seats.as_deref() else {
            return Ok(None);
        };
        let shown = seats
            .split(',')
            .filter(|id| !id.is_empty())
            .map(|id| parse_id(id, "seat"))
            .collect::<Result<Vec<i64>>>()?;
        // An empty list names no cart: every seat the buyer holds, as without the field.
        Ok((!shown.is_empty()).then_some(shown))
    }
}

async fn checkout(
    State(state): State<AppState>,
    buyer: Buyer,
    Path(event): Path<String>,
    CsrfForm(form): CsrfForm<CheckoutForm>,
) -> Result<Redirect> {
    let event_id = parse_id(&event, "event")?;
    let orders = cart::checkout(&state, &buyer, event_id, form.shown()?).await?;
    waiting_room::purchased(&state, &buyer, event_id).await;
    // Behind a waiting room the map is no longer the buyer's to see (their turn ended):
    // show the first order instead.
    match orders.first() {
        Some(order) if waiting_room::has_room(&state, event_id).await? => {
            Ok(Redirect::to(&format!("/orders/{order}")))
        }
        _ => Ok(Redirect::to(&format!("/events/{event_id}#tickets"))),
    }
}

async fn release_all(
    State(state): State<AppState>,
    buyer: Buyer,
    Path(event): Path<String>,
    CsrfForm(Empty {}): CsrfForm<Empty>,
) -> Result<Redirect> {
    let event_id = parse_id(&event, "event")?;
    cart::release_all(&state, &buyer, event_id).await?;
    Ok(Redirect::to(&format!("/events/{event_id}#cart")))
}

/// The seat named by a URL's `{event}` and `{seat}` segments; 400 if malformed.
fn seat_ref(event: &str, seat: &str) -> Result<SeatRef> {
    Ok(SeatRef {
        event_id: parse_id(event, "event")?,
        seat_id: parse_id(seat, "seat")?,
    })
}

/// The page a seat's form was sent from: the event's page, or the page of the section
/// its hidden `section` field names.
#[derive(Debug, Default)]
pub struct MapPage {
    section: Option<String>,
}

impl MapPage {
    /// The page's path: `/events/{id}`, or `/events/{id}/sections/{code}` when the code
    /// is one a section may have (letters, digits, `-`; anything else: the event's page).
    fn path(&self, event_id: i64) -> String {
        let code = self.section.as_deref().filter(|code| {
            (1..=40).contains(&code.len())
                && code.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
        match code {
            Some(code) => format!("/events/{event_id}/sections/{code}"),
            None => format!("/events/{event_id}"),
        }
    }

    /// Back to this page, scrolled to `seat`.
    pub fn back(&self, seat: SeatRef) -> Redirect {
        Redirect::to(&format!(
            "{}#seat-{}",
            self.path(seat.event_id),
            seat.seat_id
        ))
    }
}

/// A seat's form: nothing but the CSRF token and, on a section's page, the section.
#[derive(Deserialize)]
struct SeatForm {
    #[serde(default)]
    section: Option<String>,
}

/// A form POST on one seat, `/events/{event}/seats/{seat}/<action>`: the seat, once the
/// CSRF token checked out (403 otherwise) and both ids parsed (400 otherwise), in that
/// order, and the page it came from.
pub struct SeatPost(pub SeatRef, pub MapPage);

impl FromRequest<AppState> for SeatPost {
    type Rejection = Error;

    async fn from_request(req: Request, state: &AppState) -> Result<Self> {
        let (mut parts, body) = req.into_parts();
        let Path((event, seat)) = Path::<(String, String)>::from_request_parts(&mut parts, state)
            .await
            .map_err(|_| Error::no_such_page())?;
        let CsrfForm(SeatForm { section }) =
            CsrfForm::from_request(Request::from_parts(parts, body), state).await?;
        Ok(SeatPost(seat_ref(&event, &seat)?, MapPage { section }))
    }
}

async fn hold(
    State(state): State<AppState>,
    buyer: Buyer,
    SeatPost(seat, page): SeatPost,
) -> Result<Redirect> {
    purchase::hold(&state, &buyer, seat).await?;
    Ok(page.back(seat))
}

async fn release(
    State(state): State<AppState>,
    buyer: Buyer,
    SeatPost(seat, page): SeatPost,
) -> Result<Redirect> {
    purchase::release(&state, &buyer, seat).await?;
    Ok(page.back(seat))
}

async fn confirm(
    State(state): State<AppState>,
    buyer: Buyer,
    SeatPost(seat, _): SeatPost,
) -> Result<Redirect> {
    let order_id = purchase::confirm(&state, &buyer, seat).await?;
    waiting_room::purchased(&state, &buyer, seat.event_id).await;
    Ok(Redirect::to(&format!("/orders/{order_id}")))
}

/// A duration in words: "10 minutes", "90 seconds".
pub(crate) fn in_words(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    match secs {
        s if s >= 120 && s % 60 == 0 => format!("{} minutes", s / 60),
        1 => "1 second".into(),
        s => format!("{s} seconds"),
    }
}
