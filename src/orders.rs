//! `GET /orders/{id}`: a buyer's confirmation page. Only the buyer who placed the order
//! can see it; anyone else gets 404.

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use chrono::{DateTime, Utc};

use crate::http::buyer::Buyer;
use crate::http::error::{Error, Result};
use crate::http::ids::OrderId;
use crate::money::format_cents;
use crate::state::AppState;

/// A confirmed order with what it bought.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct Order {
    /// Its id.
    pub id: i64,
    /// `events.id`.
    pub event_id: i64,
    /// The event's name.
    pub event_name: String,
    /// The venue's name.
    pub venue: String,
    /// The seat, named for a person ("Main row C seat 14").
    pub seat: String,
    /// The price, in cents.
    pub price_cents: i64,
    /// The fencing token the row accepted with it.
    pub fence_token: i64,
    /// The buyer's display name.
    pub buyer_name: String,
    /// When it was written.
    pub created_at: DateTime<Utc>,
}

/// The confirmation page.
#[derive(Template, WebTemplate)]
#[template(path = "order.html")]
pub(crate) struct OrderPage {
    /// The order.
    pub order: Order,
}

impl OrderPage {
    fn price(&self) -> String {
        format_cents(self.order.price_cents)
    }
}

async fn show(
    State(state): State<AppState>,
    buyer: Buyer,
    OrderId(id): OrderId,
) -> Result<OrderPage> {
    let order = sqlx::query_as(
        "SELECT o.id, o.event_id, e.name AS event_name, v.name AS venue,
                sec.name || ', row ' || s.row_label || ', seat ' || s.number AS seat,
                o.price_cents, o.fence_token, o.buyer_name, o.created_at
           FROM orders o
           JOIN events e ON e.id = o.event_id
           JOIN venues v ON v.id = e.venue_id
           JOIN seats s ON s.id = o.seat_id
           JOIN sections sec ON sec.id = s.section_id
          WHERE o.id = $1 AND o.buyer_id = $2",
    )
    .bind(id)
    .bind(buyer.id())
    .fetch_optional(&state.db)
    .await?
    .ok_or_else(|| Error::NotFound("There is no such order for you.".into()))?;
    Ok(OrderPage { order })
}

/// `GET /orders/{id}`.
pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/orders/{id}", get(show))
}
