//! The queue's HTTP side: the page a queued buyer waits on, its stream, and Leave. A
//! queued buyer's page, poll and stream cost no store round trip: their standing comes
//! from their ticket and the room's state in memory (see the module docs).

use std::time::Duration;

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::State;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use rand::Rng;
use serde::Serialize;

use super::rooms::{Seen, view_of};
use super::ticket::Ticket;
use super::{Room, Standing, Waiting, event, standing, terms};
use crate::http::buyer::Buyer;
use crate::http::csrf::{CsrfPost, Empty, FormToken};
use crate::http::error::{Error, Result};
use crate::http::ids::EventId;
use crate::live::{Update, page_stream, queue_topic};
use crate::state::AppState;

/// `GET /events/{id}/queue`, its stream, and `POST /events/{id}/queue/leave`.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/events/{event}/queue", get(show))
        .route("/events/{event}/queue/stream", get(stream))
        .route("/events/{event}/queue/leave", post(leave))
}

/// Where a queued buyer stands, as the page and its stream show it.
#[derive(Debug, Serialize, PartialEq)]
struct StandingView {
    /// 1 = next in; 0 before the on-sale (the pre-queue's order is drawn at the on-sale).
    position: u64,
    /// Buyers waiting.
    queue_length: u64,
    /// The estimated wait (or, in the pre-queue, the time to the on-sale), in words.
    wait: String,
    /// Whether the on-sale has begun.
    on_sale: bool,
}

impl StandingView {
    /// The view of `standing`, or `None` once the buyer's turn has come.
    fn of(standing: &Standing) -> Option<StandingView> {
        Some(match standing {
            Standing::Turn(_) => return None,
            Standing::InLine {
                position,
                waiting,
                wait,
            } => StandingView {
                position: *position,
                queue_length: *waiting,
                wait: about(*wait),
                on_sale: true,
            },
            Standing::PreQueue { waiting, opens_in } => StandingView {
                position: 0,
                queue_length: *waiting,
                wait: about(*opens_in),
                on_sale: false,
            },
        })
    }
}

/// The queue page: works without JavaScript (it reloads itself, sooner the nearer the
/// buyer's turn, from the ticket, at no store's cost); with it, the stream updates
/// `data-position`.
#[derive(Template, WebTemplate)]
#[template(path = "queue.html")]
struct QueuePage {
    event_id: i64,
    event_name: String,
    standing: StandingView,
    /// How many shop at once.
    shoppers: u64,
    /// How long a turn to shop lasts, in words ("15 minutes").
    turn: String,
    /// How long a turn waits for the buyer, in words ("2 minutes").
    arrival_window: String,
    /// The on-sale time ("14:30:00 EST"), if the event has one.
    opens_at: Option<String>,
    /// The seed the pre-queue's order is drawn from.
    queue_seed: u64,
    /// Seats of the event the buyer still held when their last turn ended.
    held: usize,
    /// Seconds until the page reloads itself without JavaScript ([`reload_after`]).
    refresh_s: u64,
    authenticity_token: String,
}

/// When a queue page without JavaScript should look again. In line: a quarter of the
/// estimated wait, from 2 s near the head to 30 s far back, a fifth either way at
/// random, so that most reloads come from the few near their turn. In the pre-queue:
/// at the on-sale, spread over a second per thousand waiting, so that the pre-queue does
/// not reload all at once.
fn reload_after(standing: &Standing) -> Duration {
    let (min, max) = (Duration::from_secs(2), Duration::from_secs(30));
    let mut rng = rand::rng();
    match standing {
        Standing::InLine { wait, .. } => (*wait / 4)
            .clamp(min, max)
            .mul_f64(rng.random_range(0.8..1.2)),
        Standing::PreQueue { waiting, opens_in } => {
            let spread = Duration::from_millis(*waiting).max(min);
            (*opens_in + spread.mul_f64(rng.random())).clamp(min, max)
        }
        Standing::Turn(_) => min,
    }
}

/// The event's map, for a buyer whose turn has come (or an event without a room).
fn to_map(event_id: i64) -> Response {
    Redirect::to(&format!("/events/{event_id}")).into_response()
}

/// `GET /events/{id}/queue`: the buyer's queue page, or the map once their turn has
/// come.
async fn show(
    State(state): State<AppState>,
    buyer: Buyer,
    csrf: FormToken,
    EventId(event_id): EventId,
) -> Result<Response> {
    let event = event(&state, event_id).await?;
    let Some(terms) = terms(&state.settings, &event) else {
        return Ok(to_map(event_id));
    };
    let (ticket, standing) = standing(&state, &buyer, (event_id, &event), &terms).await?;
    page(&state, csrf, event_id, Waiting { ticket, standing }).await
}

/// The queue page of a buyer `waiting` in event `event_id`'s line, served by the queue's
/// own route and, in place of the map, by `GET /events/{id}` (as the waiting rooms in
/// front of a site do: the page at the address the buyer asked for, reloading itself).
/// A standing that is a turn sends the buyer to the map. Errors: 404 no such event.
pub async fn page(
    state: &AppState,
    csrf: FormToken,
    event_id: i64,
    waiting: Waiting,
) -> Result<Response> {
    let event = event(state, event_id).await?;
    let Some(terms) = terms(&state.settings, &event) else {
        return Ok(to_map(event_id));
    };
    let Waiting { ticket, standing } = waiting;
    let refresh_s = reload_after(&standing).as_secs().max(1);
    let Some(standing) = StandingView::of(&standing) else {
        return Ok(to_map(event_id));
    };
    let page = QueuePage {
        event_id,
        event_name: event.name.clone(),
        standing,
        shoppers: terms.shoppers,
        turn: crate::seats::in_words(terms.admission_ttl),
        arrival_window: crate::seats::in_words(terms.arrival_window),
        opens_at: event
            .on_sale_at
            .map(|at| crate::events::venue_time(&event.time_zone, at, "%H:%M:%S %Z")),
        queue_seed: event.queue_seed,
        held: ticket.held,
        refresh_s,
        authenticity_token: csrf.authenticity.clone(),
    };
    Ok((csrf, page).into_response())
}

/// The stream's `retry:`: a reconnect after this long, drawn from 2 to 8 s per stream,
/// so that a crowd whose streams ended together (a server drained) comes back spread.
fn retry_after() -> Duration {
    Duration::from_millis(rand::rng().random_range(2_000..8_000))
}

/// `GET /events/{id}/queue/stream`: the buyer's standing as a `position` event (the
/// [`StandingView`] as JSON), again whenever the room's state moves it, then one
/// `admitted` event (`{"url": …}`) when the turn comes; `reload` if the buyer has no
/// ticket (the page joins). Counted against `--max-streams` like a map's stream, and
/// ended by the drain. No store is asked: the room's state comes on the hub.
async fn stream(
    State(state): State<AppState>,
    buyer: Buyer,
    EventId(event_id): EventId,
) -> Result<Response> {
    let event = event(&state, event_id).await?;
    let Some(terms) = terms(&state.settings, &event) else {
        return Err(Error::NotFound("This event has no waiting room.".into()));
    };
    // Subscribe first, then read the room: no step can fall between the two.
    let subscription = (state.live)
        .subscribe(&queue_topic(event_id))
        .ok_or(Error::StreamsFull)?;
    let seen = super::seen(&state, event_id, &terms).await?;
    // A ticket from an earlier life of the room is no ticket: the page joins again.
    let ticket = Ticket::read(&buyer, event_id)
        .filter(|t| seen.as_ref().is_none_or(|s| s.view.epoch == t.epoch));
    let Some(ticket) = ticket else {
        return Ok(
            page_stream(subscription, reload().retry(retry_after()), |_| async {
                Update::End
            })
            .into_response(),
        );
    };
    let epoch = ticket.epoch.clone();
    let map_url = serde_json::json!({ "url": format!("/events/{event_id}") });
    let standing_event =
        move |state: &AppState, seen: Option<Seen>| -> (Option<StandingView>, Event) {
            let room = Room {
                state,
                event_id,
                seed: event.queue_seed,
                terms: &terms,
            };
            let seen = seen.unwrap_or_else(|| Seen::empty(&ticket.epoch, ticket.place));
            let view = StandingView::of(&room.standing(&ticket, &seen));
            let sse = match &view {
                Some(view) => Event::default().event("position").json_data(view),
                None => Event::default().event("admitted").json_data(&map_url),
            };
            (view, sse.expect("JSON"))
        };
    let (mut shown, first) = standing_event(&state, seen);
    let mut done = shown.is_none();
    Ok(
        page_stream(subscription, first.retry(retry_after()), move |message| {
            let state = state.clone();
            // What the room's state now says: the message's own, or after a gap what this
            // server knows (read again if old).
            let next = if done {
                None
            } else {
                let seen = view_of(&message).map(|view| Seen {
                    view,
                    age: Duration::ZERO,
                });
                // The room was lost and began again: this ticket is stale, reload.
                if seen.as_ref().is_some_and(|s| s.view.epoch != epoch) {
                    done = true;
                    return std::future::ready(Update::Send(reload()));
                }
                Some(match seen {
                    Some(seen) => standing_event(&state, Some(seen)),
                    None => standing_event(&state, state.rooms.heard(&state.live, event_id)),
                })
            };
            let update = match next {
                None => Update::End,
                Some((view, _)) if view.is_some() && view == shown => Update::Skip,
                Some((view, sse)) => {
                    done = view.is_none();
                    shown = view;
                    Update::Send(sse)
                }
            };
            std::future::ready(update)
        })
        .into_response(),
    )
}

/// The stream's `reload` event: the page must be loaded again (it joins the line).
fn reload() -> Event {
    Event::default().event("reload").data("{}")
}

/// `POST /events/{id}/queue/leave`: out of the line, or the turn ends; back to the
/// events.
async fn leave(
    State(state): State<AppState>,
    buyer: Buyer,
    CsrfPost(EventId(event_id), Empty {}): CsrfPost<EventId, Empty>,
) -> Result<Redirect> {
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
