//! The queue's HTTP side: the page a queued buyer waits on, its stream, and Leave.

use std::convert::Infallible;
use std::time::Duration;

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use futures_util::Stream;
use lease::Entry;
use serde::Serialize;

use super::{POLL_INTERVAL, enter};
use crate::http::buyer::Buyer;
use crate::http::csrf::{CsrfForm, Empty, FormToken};
use crate::http::error::Result;
use crate::seats::parse_id;
use crate::state::AppState;

/// `GET /events/{id}/queue`, its stream, and `POST /events/{id}/queue/leave`.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/events/{event}/queue", get(show))
        .route("/events/{event}/queue/stream", get(stream))
        .route("/events/{event}/queue/leave", post(leave))
}

/// Where a queued buyer stands, as the page and its stream show it.
#[derive(Debug, Serialize)]
struct Standing {
    /// 1 = next in; 0 before the on-sale (the pre-queue's order, drawn as each buyer
    /// joined, is revealed at the on-sale).
    position: u64,
    /// Buyers waiting.
    queue_length: u64,
    /// The estimated wait (or, in the pre-queue, the time to the on-sale), in words.
    wait: String,
    /// Whether the on-sale has begun.
    on_sale: bool,
}

impl Standing {
    /// The standing of `entry`, or `None` once the buyer is admitted.
    fn of(entry: &Entry) -> Option<Standing> {
        Some(match entry {
            Entry::Admitted { .. } => return None,
            Entry::Queued {
                position,
                queue_length,
                wait_estimate,
            } => Standing {
                position: *position,
                queue_length: *queue_length,
                wait: about(*wait_estimate),
                on_sale: true,
            },
            Entry::PreQueue {
                opens_in,
                queue_length,
            } => Standing {
                position: 0,
                queue_length: *queue_length,
                wait: about(*opens_in),
                on_sale: false,
            },
        })
    }
}

/// The queue page: works without JavaScript (it reloads itself every 10 s, and each
/// load keeps the buyer's place); with it, the stream updates `data-position`.
#[derive(Template, WebTemplate)]
#[template(path = "queue.html")]
struct QueuePage {
    event_id: i64,
    event_name: String,
    standing: Standing,
    /// How many shop at once.
    shoppers: u64,
    /// How long a turn to shop lasts, in words ("15 minutes").
    turn: String,
    /// The on-sale time ("14:30:00 UTC"), if the event has one.
    opens_at: Option<String>,
    /// Seats of the event the buyer still holds (from an earlier turn): theirs to buy.
    held: usize,
    authenticity_token: String,
}

/// The event's map, for a buyer the room admits (or an event without a room).
fn to_map(event_id: i64) -> Response {
    Redirect::to(&format!("/events/{event_id}")).into_response()
}

async fn show(
    State(state): State<AppState>,
    buyer: Buyer,
    csrf: FormToken,
    Path(event): Path<String>,
) -> Result<Response> {
    let event_id = parse_id(&event, "event")?;
    let Some(standing) = enter(&state, &buyer, event_id, false)
        .await?
        .as_ref()
        .and_then(Standing::of)
    else {
        return Ok(to_map(event_id));
    };
    let event = super::event(&state, event_id).await?;
    let page = QueuePage {
        event_id,
        event_name: event.name.clone(),
        shoppers: super::terms(&state.settings, &event).map_or(0, |t| t.shoppers),
        turn: crate::seats::routes::in_words(state.settings.admission_ttl()),
        opens_at: event
            .on_sale_at
            .map(|at| crate::events::venue_time(&event.time_zone, at, "%H:%M:%S %Z")),
        standing,
        held: crate::seats::cart::held_seats(&state, &buyer, event_id)
            .await?
            .len(),
        authenticity_token: csrf.authenticity.clone(),
    };
    Ok((csrf, page).into_response())
}

/// `GET /events/{id}/queue/stream`: every [`POLL_INTERVAL`], one step into the room (which
/// also keeps the buyer's place): a `position` event with the [`Standing`] as JSON while
/// queued, then one `admitted` event (`{"url": …}`), and the stream ends. A step that
/// fails (a store down) sends nothing; the next one tries again.
async fn stream(
    State(state): State<AppState>,
    buyer: Buyer,
    Path(event): Path<String>,
) -> Result<Sse<impl Stream<Item = std::result::Result<Event, Infallible>>>> {
    let event_id = parse_id(&event, "event")?;
    super::event(&state, event_id).await?;
    let steps = futures_util::stream::unfold(Some(Duration::ZERO), move |wait| {
        let (state, buyer) = (state.clone(), buyer.clone());
        async move {
            let mut wait = wait?;
            loop {
                tokio::time::sleep(wait).await;
                wait = POLL_INTERVAL;
                let Ok(entry) = enter(&state, &buyer, event_id, false).await else {
                    continue;
                };
                let event = match entry.as_ref().and_then(Standing::of) {
                    Some(standing) => Event::default().event("position").json_data(&standing),
                    None => {
                        let url = serde_json::json!({ "url": format!("/events/{event_id}") });
                        let admitted = Event::default().event("admitted").json_data(url);
                        return admitted.ok().map(|e| (Ok(e), None));
                    }
                };
                if let Ok(event) = event {
                    return Some((Ok(event), Some(wait)));
                }
            }
        }
    });
    Ok(Sse::new(steps).keep_alive(KeepAlive::default()))
}

/// `POST /events/{id}/queue/leave`: out of the queue, or the admission ends; back to the
/// events.
async fn leave(
    State(state): State<AppState>,
    buyer: Buyer,
    Path(event): Path<String>,
    CsrfForm(Empty {}): CsrfForm<Empty>,
) -> Result<Redirect> {
    let event_id = parse_id(&event, "event")?;
    super::leave(&state, &buyer, event_id).await?;
    Ok(Redirect::to("/"))
}

/// A duration in round words for a person: "less than a minute", "about 3 minutes",
/// "about 2 hours".
fn about(d: Duration) -> String {
    let minutes = d.as_secs().div_ceil(60);
    match minutes {
        0 | 1 => "less than a minute".into(),
        m if m < 120 => format!("about {m} minutes"),
        m => format!("about {} hours", m.div_ceil(60)),
    }
}
