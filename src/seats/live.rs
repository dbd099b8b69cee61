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
use axum::response::sse::{Event, Sse};
use futures_util::Stream;

use super::{parse_id, queries};
use crate::events;
use crate::http::error::{Error, Result};
use crate::live::{LiveMessage, Update, page_stream};
use crate::state::AppState;

/// Every held and sold seat of the event, as a `snapshot` event; `None` if no such event.
async fn snapshot(state: &AppState, event_id: i64) -> Result<Option<Event>> {
    let group = super::event_group(&state.settings.lease_namespace, event_id);
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

/// The page event for a hub message: a seat change as it is, or a fresh snapshot after
/// a gap.
async fn update(state: &AppState, event_id: i64, message: &LiveMessage) -> Update {
    if message.event == "resync" {
        return Update::from_snapshot(snapshot(state, event_id).await);
    }
    Update::Send(
        Event::default()
            .event(&message.event)
            .json_data(&message.data)
            .expect("JSON"),
    )
}

/// `GET /events/{id}/stream`. 404 for an unknown event, 400 for a malformed id.
pub(super) async fn stream(
    State(state): State<AppState>,
    Path(event): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let event_id = parse_id(&event, "event")?;
    // Subscribe first, then read the snapshot: no change can fall between the two.
    let subscription = state
        .live
        .subscribe(&format!("event:{event_id}"))
        .ok_or(Error::StreamsFull)?;
    let first = snapshot(&state, event_id)
        .await?
        .ok_or_else(|| Error::NotFound("There is no such event.".into()))?;
    Ok(page_stream(subscription, first, move |message| {
        let state = state.clone();
        async move { update(&state, event_id, &message).await }
    }))
}
