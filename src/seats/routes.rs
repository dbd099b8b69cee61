//! HTTP handlers of the seat picker: parse, call [`super::purchase`], redirect or render.

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use lease::Entry;

use serde::Deserialize;

use super::map::{self, SeatMap};
use super::{SeatRef, parse_id};
use super::{cart, purchase, waiting_room};
use crate::http::buyer::Buyer;
use crate::http::csrf::{CsrfForm, Empty, FormToken};
use crate::http::error::{Error, Result};
use crate::money::format_cents;
use crate::racelab::pause::Pause;
use crate::state::AppState;

/// `GET /events/{id}`, its stream, release, and the cart: best available, the checkout
/// page and its purchase, release all.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/events/{event}", get(show))
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

/// The seat map page.
#[derive(Template, WebTemplate)]
#[template(path = "event.html")]
pub(super) struct EventPage {
    pub map: SeatMap,
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

async fn show(
    State(state): State<AppState>,
    buyer: Buyer,
    csrf: FormToken,
    Path(event): Path<String>,
) -> Result<Response> {
    let event_id = parse_id(&event, "event")?;
    // Behind a waiting room, only an admitted buyer sees the map (and the view renews
    // the admission); anyone else waits on the queue page, before any map is read.
    let admitted_until = match waiting_room::enter(&state, &buyer, event_id, true).await? {
        None => None,
        Some(Entry::Admitted { expires_at_ms, .. }) => Some(map::clock_time(expires_at_ms)),
        Some(_) => {
            return Ok(Redirect::to(&format!("/events/{event_id}/queue")).into_response());
        }
    };
    let map = event_map(&state, &buyer, &event).await?;
    let page = EventPage {
        map,
        buyer_name: buyer.name().await?,
        buyer_id: buyer.id().to_owned(),
        authenticity_token: csrf.authenticity.clone(),
        hold_for: in_words(state.settings.hold_ttl()),
        max_seats: state.settings.max_seats_per_buyer,
        quantities: (1..=state.settings.max_seats_per_buyer).collect(),
        admitted_until,
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
    map::load(state, event_id, buyer.id())
        .await?
        .ok_or_else(|| Error::NotFound("There is no such event.".into()))
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
/// value gets the same 400 page as one out of range).
#[derive(Deserialize)]
struct QuantityForm {
    quantity: String,
}

async fn best_available(
    State(state): State<AppState>,
    buyer: Buyer,
    Path(event): Path<String>,
    CsrfForm(form): CsrfForm<QuantityForm>,
) -> Result<Redirect> {
    let event_id = parse_id(&event, "event")?;
    let quantity = form.quantity.trim().parse().unwrap_or(0);
    cart::best_available(&state, &buyer, event_id, quantity).await?;
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
        seats
            .split(',')
            .filter(|id| !id.is_empty())
            .map(|id| parse_id(id, "seat"))
            .collect::<Result<Vec<i64>>>()
            .map(Some)
    }
}

async fn checkout(
    State(state): State<AppState>,
    buyer: Buyer,
    pause: Pause,
    Path(event): Path<String>,
    CsrfForm(form): CsrfForm<CheckoutForm>,
) -> Result<Redirect> {
    let event_id = parse_id(&event, "event")?;
    let checkout = cart::checkout(&state, &buyer, event_id, form.shown()?);
    let orders = pause.over(checkout).await?;
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

/// Back to the seat map, scrolled to `seat`.
pub(crate) fn back_to_map(seat: SeatRef) -> Redirect {
    Redirect::to(&format!("/events/{}#seat-{}", seat.event_id, seat.seat_id))
}

/// A form POST on one seat, `/events/{event}/seats/{seat}/<action>`: the seat, once the
/// CSRF token checked out (403 otherwise) and both ids parsed (400 otherwise), in that
/// order. The form has no fields.
pub(crate) struct SeatPost(pub SeatRef);

impl FromRequest<AppState> for SeatPost {
    type Rejection = Error;

    async fn from_request(req: Request, state: &AppState) -> Result<Self> {
        let (mut parts, body) = req.into_parts();
        let Path((event, seat)) = Path::<(String, String)>::from_request_parts(&mut parts, state)
            .await
            .map_err(|_| Error::NotFound("There is no such page.".into()))?;
        let CsrfForm(Empty {}) =
            CsrfForm::from_request(Request::from_parts(parts, body), state).await?;
        Ok(SeatPost(seat_ref(&event, &seat)?))
    }
}

async fn hold(
    State(state): State<AppState>,
    buyer: Buyer,
    SeatPost(seat): SeatPost,
) -> Result<Redirect> {
    purchase::hold(&state, &buyer, seat).await?;
    Ok(back_to_map(seat))
}

async fn release(
    State(state): State<AppState>,
    buyer: Buyer,
    SeatPost(seat): SeatPost,
) -> Result<Redirect> {
    purchase::release(&state, &buyer, seat).await?;
    Ok(back_to_map(seat))
}

async fn confirm(
    State(state): State<AppState>,
    buyer: Buyer,
    pause: Pause,
    SeatPost(seat): SeatPost,
) -> Result<Redirect> {
    let order_id = pause.over(purchase::confirm(&state, &buyer, seat)).await?;
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
