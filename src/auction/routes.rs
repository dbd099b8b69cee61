//! HTTP handlers of the auction: parse, call [`super::bid`], redirect or render.
//!
//! A refused bid (a malformed amount, too low, ended, busy) re-renders the item page with
//! the message next to the form and the typed amount kept, with the error's 4xx status;
//! only an unknown item or an unavailable store gets the generic error page.

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::live::LiveItem;
use super::queries::{self, BidRow, Item};
use super::rules::Outcome;
use super::{Bid, bid};
use crate::http::buyer::Buyer;
use crate::http::csrf::{CsrfPost, FormToken};
use crate::http::error::{Error, REFUSAL_HEADER, Result};
use crate::http::ids::ItemId;
use crate::money::{format_cents, parse_amount};
use crate::state::AppState;

/// How many ended auctions the list page shows.
const RECENTLY_ENDED: i64 = 10;

/// `GET /auctions`, `GET /auctions/{id}`, `GET /auctions/{id}/stream`,
/// `POST /auctions/{id}/bids`.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/auctions", get(list))
        .route("/auctions/{item}", get(show))
        .route("/auctions/{item}/stream", get(super::live::stream))
        .route("/auctions/{item}/bids", post(place_bid))
}

/// The list of auctions.
#[derive(Template, WebTemplate)]
#[template(path = "auctions.html")]
pub(super) struct ListPage {
    /// Open items, ending soonest first.
    pub open: Vec<Item>,
    /// Recently closed items, with their results.
    pub closed: Vec<Item>,
    pub buyer_name: String,
}

/// One item: title and description, the bid form, and its [`LiveItem`].
#[derive(Template, WebTemplate)]
#[template(path = "auction.html")]
pub(super) struct ItemPage {
    /// The part of the page that live updates replace.
    pub live: LiveItem,
    pub buyer_name: String,
    pub authenticity_token: String,
    /// The amount field's value: what the buyer typed, kept after a refused bid.
    pub amount: String,
    /// Why the buyer's last bid was refused, shown inside the form.
    pub error: Option<String>,
    /// The refusal's [`crate::http::error::Refusal::code`], for `data-refusal` (empty if none).
    pub refusal: &'static str,
}

/// Display helpers for the templates.
impl Item {
    pub(super) fn starting_price(&self) -> String {
        format_cents(self.terms.starting_price_cents)
    }

    /// The increment at the current price (or the starting price), from the published
    /// table.
    pub(super) fn increment(&self) -> String {
        let price = self
            .high_bid_cents
            .unwrap_or(self.terms.starting_price_cents);
        format_cents(super::increments::increment_cents(price))
    }

    pub(super) fn minimum_bid(&self) -> String {
        format_cents(self.minimum_bid_cents())
    }

    /// The minimum bid as the form expects it typed: "31.00", no currency sign.
    pub(super) fn minimum_bid_typed(&self) -> String {
        self.minimum_bid().trim_start_matches('$').to_owned()
    }

    /// "$125.00 by Guest 1A2B" (the price and the leader) or "no bids yet (opens at
    /// $25.00)".
    pub(super) fn high_bid_text(&self) -> String {
        match (self.high_bid_cents, &self.high_bidder_name) {
            (Some(high), Some(name)) => format!("{} by {name}", format_cents(high)),
            _ => format!("no bids yet (opens at {})", self.starting_price()),
        }
    }

    /// The reserve, without its amount (as auction houses do): whether it is met.
    pub(super) fn reserve_text(&self) -> &'static str {
        match (self.terms.reserve_price_cents, self.reserve_met()) {
            (0, _) => "no reserve",
            (_, true) => "reserve met",
            (_, false) => "reserve not met yet",
        }
    }

    pub(super) fn soft_close_text(&self) -> String {
        match self.terms.soft_close_secs {
            0 => "off: the auction ends at its end time".into(),
            n => format!(
                "a bid in the last {n} s moves the end to {n} s after it arrived, never past the hard stop ({})",
                self.hard_stop_at.format("%H:%M:%S UTC")
            ),
        }
    }

    pub(super) fn ends_text(&self) -> String {
        self.ends_at
            .format("%a %-d %b %Y, %H:%M:%S UTC")
            .to_string()
    }

    /// Time left by the Postgres clock: "1 d 02 h", "3 h 07 min", "4 min 05 s", "ended".
    pub(super) fn time_left(&self) -> String {
        time_left(self.now, self.ends_at)
    }

    /// The result in words, once closed.
    pub(super) fn result_text(&self) -> String {
        let high = self.high_bid_cents.map(format_cents).unwrap_or_default();
        match self.outcome() {
            Some(Outcome::Sold) => format!(
                "Sold to {} for {high}.",
                self.winner_name.as_deref().unwrap_or("the high bidder")
            ),
            Some(Outcome::ReserveNotMet) => format!(
                "Reserve not met: the high bid of {high} was below the reserve price, so the item is not sold."
            ),
            Some(Outcome::NoBids) => "No bids: the item is not sold.".into(),
            None => "Not closed yet.".into(),
        }
    }
}

/// The published increment table as the page lists it: ("from $25.00", "$1.00").
pub(super) fn increment_bands() -> Vec<(String, String)> {
    super::increments::INCREMENT_TABLE
        .iter()
        .map(|&(from, step)| (format!("from {}", format_cents(from)), format_cents(step)))
        .collect()
}

impl BidRow {
    pub(super) fn amount(&self) -> String {
        format_cents(self.amount_cents)
    }

    /// The bid lock's fencing token, or how the bid was serialised without one.
    pub(super) fn token(&self) -> String {
        self.fence_token
            .map_or_else(|| "none (conditional update)".into(), |t| t.to_string())
    }

    pub(super) fn when(&self) -> String {
        self.created_at.format("%H:%M:%S%.3f UTC").to_string()
    }
}

/// Whole units left until `end`: "1 d 02 h", "3 h 07 min", "4 min 05 s", "9 s", "ended".
fn time_left(now: DateTime<Utc>, end: DateTime<Utc>) -> String {
    let secs = (end - now).num_seconds();
    match secs {
        s if s <= 0 => "ended".into(),
        s if s >= 86_400 => format!("{} d {:02} h", s / 86_400, s % 86_400 / 3_600),
        s if s >= 3_600 => format!("{} h {:02} min", s / 3_600, s % 3_600 / 60),
        s if s >= 60 => format!("{} min {:02} s", s / 60, s % 60),
        s => format!("{s} s"),
    }
}

async fn list(State(state): State<AppState>, buyer: Buyer) -> Result<ListPage> {
    let (open, closed) = tokio::join!(
        queries::open_items(&state.db),
        queries::closed_items(&state.db, RECENTLY_ENDED)
    );
    Ok(ListPage {
        open: open?,
        closed: closed?,
        buyer_name: buyer.name().await?,
    })
}

/// Loads the item page; `refused` is the typed amount and the error, after a bid.
async fn item_page(
    state: &AppState,
    buyer: &Buyer,
    csrf: &FormToken,
    item_id: i64,
    refused: Option<(String, &Error)>,
) -> Result<ItemPage> {
    let live = LiveItem::load(state, item_id, buyer.id())
        .await?
        .ok_or_else(Error::no_such_auction)?;
    let (amount, error, refusal) = match refused {
        Some((amount, error)) => (
            amount,
            Some(error.to_string()),
            error.refusal_code().unwrap_or_default(),
        ),
        None => (String::new(), None, ""),
    };
    Ok(ItemPage {
        live,
        buyer_name: buyer.name().await?,
        authenticity_token: csrf.authenticity.clone(),
        amount,
        error,
        refusal,
    })
}

async fn show(
    State(state): State<AppState>,
    buyer: Buyer,
    csrf: FormToken,
    ItemId(item_id): ItemId,
) -> Result<impl IntoResponse> {
    let page = item_page(&state, &buyer, &csrf, item_id, None).await?;
    Ok((csrf, page))
}

/// When the request arrived, by this server's clock: taken by the first extractor of the
/// bid route, before the session, the CSRF check and the body, so that nothing the
/// server does (nor the item's lock) counts against the bidder.
pub(super) struct Arrival(DateTime<Utc>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Arrival {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        _: &mut axum::http::request::Parts,
        _: &S,
    ) -> std::result::Result<Self, Self::Rejection> {
        Ok(Arrival(Utc::now()))
    }
}

/// The bid form: `amount`, the bidder's maximum, a decimal number of dollars such as
/// `125.50`.
#[derive(Deserialize)]
pub(super) struct BidForm {
    amount: String,
}

/// `POST /auctions/{id}/bids`: `amount` is the bidder's maximum.
async fn place_bid(
    arrived: Arrival,
    State(state): State<AppState>,
    buyer: Buyer,
    csrf: FormToken,
    CsrfPost(ItemId(item_id), form): CsrfPost<ItemId, BidForm>,
) -> Result<Response> {
    let placed = match parse_amount(&form.amount) {
        // Once the bid lock may be taken, a bidder who hangs up cancels nothing: the bid
        // is written or refused, and the lock released at once.
        Ok(max_cents) => {
            let (state, bidder) = (state.clone(), buyer.profile().await?);
            let deadline = state.settings.request_deadline();
            let work = async move {
                let new_bid = Bid {
                    bidder: &bidder,
                    item_id,
                    max_cents,
                    arrived_at: arrived.0,
                };
                bid::place_bid(&state, &new_bid).await
            };
            crate::http::detached::to_completion("The bid", deadline, work).await
        }
        Err(err) => Err(Error::BadRequest(err.to_string())),
    };
    match placed {
        Ok(_) => Ok(Redirect::to(&format!("/auctions/{item_id}")).into_response()),
        Err(err @ (Error::BadRequest(_) | Error::Refused(_))) => {
            let page = item_page(&state, &buyer, &csrf, item_id, Some((form.amount, &err))).await?;
            let refusal = err.refusal_code().map(|code| [(REFUSAL_HEADER, code)]);
            Ok((err.status(), refusal, csrf, page).into_response())
        }
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::time_left;

    #[test]
    fn time_left_in_whole_units() {
        let now = chrono::Utc::now();
        let left = |secs| time_left(now, now + TimeDelta::seconds(secs));
        assert_eq!(left(0), "ended");
        assert_eq!(left(-5), "ended");
        assert_eq!(left(9), "9 s");
        assert_eq!(left(245), "4 min 05 s");
        assert_eq!(left(3 * 3_600 + 7 * 60 + 30), "3 h 07 min");
        assert_eq!(left(86_400 + 2 * 3_600 + 1), "1 d 02 h");
    }
}
