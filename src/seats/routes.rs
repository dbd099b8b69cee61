//! HTTP handlers of the core: parse, call [`super::purchase`] or [`super::cart`],
//! redirect.

use axum::Router;
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::response::Redirect;
use axum::routing::post;
use serde::Deserialize;

use super::{SeatRef, cart, extend, purchase};
use crate::http::buyer::Buyer;
use crate::http::csrf::{CsrfForm, CsrfPost};
use crate::http::error::{Error, Result};
use crate::http::ids::{EventId, PathId, SeatId};
use crate::state::AppState;
use crate::waiting_room;

/// Release, the cart's checkout, release all and extend ("Need more time?"). The pages around them are the
/// venue's ([`crate::venue::router`]).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/events/{event}/seats/{seat}/release", post(release))
        .route("/events/{event}/checkout", post(checkout))
        .route("/events/{event}/release-all", post(release_all))
        .route("/events/{event}/extend", post(extend_holds))
}

/// The product's hold and confirm (lease + fenced purchase).
pub fn purchase_routes() -> Router<AppState> {
    Router::new()
        .route("/events/{event}/seats/{seat}/hold", post(hold))
        .route("/events/{event}/seats/{seat}/confirm", post(confirm))
}

/// The checkout form: the CSRF token, and `seats` from the cart the buyer saw.
/// `seats` is a comma-separated list of seat ids.
/// Without it, the checkout buys every seat the buyer holds.
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
            .map(|id| SeatId::parse(id).map(|SeatId(id)| id))
            .collect::<Result<Vec<i64>>>()?;
        // An empty list names no cart: every seat the buyer holds, as without the field.
        Ok((!shown.is_empty()).then_some(shown))
    }
}

async fn checkout(
    State(state): State<AppState>,
    buyer: Buyer,
    CsrfPost(EventId(event_id), form): CsrfPost<EventId, CheckoutForm>,
) -> Result<Redirect> {
    let orders = cart::checkout(&state, &buyer, event_id, form.shown()?).await?;
    waiting_room::purchased(&state, &buyer, event_id).await;
    // Behind a waiting room, the buyer's turn ended, so the map is no longer theirs to see.
    // Show the first order instead.
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
    CsrfPost(EventId(event_id), form): CsrfPost<EventId, CartForm>,
) -> Result<Redirect> {
    cart::release_all(&state, &buyer, event_id).await?;
    Ok(form.back_to_cart(event_id))
}

/// "Need more time?": every hold of the buyer's in the event, extended at once.
async fn extend_holds(
    State(state): State<AppState>,
    buyer: Buyer,
    CsrfPost(EventId(event_id), form): CsrfPost<EventId, CartForm>,
) -> Result<Redirect> {
    extend::extend(&state, &buyer, event_id).await?;
    Ok(form.back_to_cart(event_id))
}

/// A cart form that stays on its page (Release all, Need more time?): the CSRF token
/// and `back`, the path of the page it was sent from (templates/cart.html).
#[derive(Deserialize)]
struct CartForm {
    back: Option<String>,
}

impl CartForm {
    /// Back to the cart of the page the form was sent from: `back` when it is a path of
    /// this event's pages (`/events/{id}`, then nothing, a `/…` or a `?…`: the map, a
    /// section, the list of a choice, the checkout) with no dot segment, else the
    /// event's page. Never another site's address, nor another event's.
    fn back_to_cart(&self, event_id: i64) -> Redirect {
        let event = format!("/events/{event_id}");
        let ours = |path: &&str| {
            path.strip_prefix(&event).is_some_and(|rest| {
                rest.is_empty()
                    || rest.starts_with('?')
                    || (rest.starts_with('/') && !rest.starts_with("//"))
            }) && path
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'#' && b != b'\\')
                // No dot segment, plain or escaped: a browser resolves `/events/1/../2`
                // to another event's page.
                && !path.contains("/.")
                && !path.to_ascii_lowercase().contains("%2e")
        };
        let page = self.back.as_deref().filter(ours).unwrap_or(&event);
        Redirect::to(&format!("{page}#cart"))
    }
}

/// The seat named by a URL's `{event}` and `{seat}` segments; 400 if malformed.
fn seat_ref(event: &str, seat: &str) -> Result<SeatRef> {
    Ok(SeatRef {
        event_id: EventId::parse(event)?.0,
        seat_id: SeatId::parse(seat)?.0,
    })
}

/// The page a seat's form was sent from: the event's page, or the page of the section
/// its hidden `section` field names.
#[derive(Debug, Default)]
pub struct MapPage {
    /// The section's code; `None`: the event's page.
    pub(crate) section: Option<String>,
}

impl MapPage {
    /// The page's path: `/events/{id}/sections/{code}`, or else `/events/{id}`.
    /// The section's path is used only when the code is one a section may have.
    /// Such a code has letters, digits and `-`, nothing else.
    pub(crate) fn path(&self, event_id: i64) -> String {
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

/// A form POST on one seat, `/events/{event}/seats/{seat}/<action>`.
/// It gives the seat and the page the form came from.
/// First the CSRF token is checked: 403 if it fails.
/// Then both ids are parsed: 400 if either is malformed.
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
