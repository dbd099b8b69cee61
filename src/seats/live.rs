//! `GET /events/{id}/stream`: the seat map's live updates (server-sent events).
//!
//! The stream opens with a `snapshot` (every held and sold seat), then sends one `seat`
//! event per change: `{"seat": 14, "state": "held", "holder": "<buyer id>"}`,
//! `{"seat": 14, "state": "available", "why": "released" | "expired"}` or
//! `{"seat": 14, "state": "sold"}`. After any gap (a lost Redis or Postgres connection,
//! a page too slow to keep up) it sends a fresh snapshot; a browser that reconnects gets
//! one too, so pages never need Last-Event-ID.

use std::collections::HashMap;
use std::convert::Infallible;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use tokio::sync::broadcast::error::RecvError;

use super::{parse_id, queries};
use crate::error::{Error, Result};
use crate::events;
use crate::live::Subscription;
use crate::state::AppState;

/// Every held and sold seat of the event, as a `snapshot` event; `None` if no such event.
async fn snapshot(state: &AppState, event_id: i64) -> Result<Option<Event>> {
    let group = state.event_group(event_id);
    let (event, sold, holds) = tokio::join!(
        events::find(&state.db, event_id),
        queries::sold_seats(&state.db, event_id),
        state.leases.holders(&group),
    );
    if event?.is_none() {
        return Ok(None);
    }
    let held: HashMap<String, String> = holds?
        .holdings
        .into_iter()
        .map(|h| (h.name, h.holder))
        .collect();
    let data = serde_json::json!({ "held": held, "sold": sold? });
    Ok(Some(
        Event::default()
            .event("snapshot")
            .json_data(data)
            .expect("JSON"),
    ))
}

/// The next event for a page: a change, or a fresh snapshot after a gap.
async fn next(state: &AppState, event_id: i64, subscription: &mut Subscription) -> Option<Event> {
    loop {
        match subscription.recv().await {
            Ok(message) if message.event != "resync" => {
                return Some(
                    Event::default()
                        .event(&message.event)
                        .json_data(&message.data)
                        .expect("JSON"),
                );
            }
            Ok(_) | Err(RecvError::Lagged(_)) => match snapshot(state, event_id).await {
                Ok(Some(event)) => return Some(event),
                Ok(None) => return None,
                Err(_) => continue, // a store is down; the next resync will retry
            },
            Err(RecvError::Closed) => return None,
        }
    }
}

/// `GET /events/{id}/stream`. 404 for an unknown event, 400 for a malformed id.
pub async fn stream(
    State(state): State<AppState>,
    Path(event): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let event_id = parse_id(&event, "event")?;
    // Subscribe first, then read the snapshot: no change can fall between the two.
    let subscription = state.live.subscribe(&format!("event:{event_id}"));
    let first = snapshot(&state, event_id)
        .await?
        .ok_or_else(|| Error::NotFound("There is no such event.".into()))?;
    let stream = futures_util::stream::unfold(
        (state, subscription, Some(first)),
        move |(state, mut subscription, pending)| async move {
            let event = match pending {
                Some(event) => event,
                None => next(&state, event_id, &mut subscription).await?,
            };
            Some((Ok(event), (state, subscription, None)))
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
