//! `GET /auctions/{id}/stream`: an item page's live updates (server-sent events).
//!
//! Every event carries the changing part of the page as HTML, rendered from the same
//! template as the page ([`LiveItem`], `templates/auction_live.html`) for the viewer who
//! opened the stream: the high bid or the result, the bid count and the bid history. The
//! stream opens with a `snapshot`, then sends `bid` after each accepted bid and `closed`
//! when the closer writes the result, whichever server process did it (both are
//! `pg_notify`s queued by the statement that writes them, see [`super::queries`]). After
//! a gap (a lost Postgres connection, a page too slow to keep up) it sends a fresh
//! `snapshot`; a browser that reconnects gets one too.
//!
//! Known limit: the notification only says that the item changed, so every open stream
//! re-reads the item and its bids once per change (two queries per page per bid).

use std::convert::Infallible;

use axum::extract::{Path, State};
use axum::response::sse::{Event, Sse};
use futures_util::Stream;

use super::routes::LiveItem;
use crate::buyer::Buyer;
use crate::error::{Error, Result};
use crate::live::{Update, page_stream};
use crate::seats::parse_id;
use crate::state::AppState;

/// The item as `buyer_id` sees it, as an SSE event named `name` whose data is the HTML
/// of [`LiveItem`]; `None` if there is no such item.
async fn render(
    state: &AppState,
    item_id: i64,
    buyer_id: &str,
    name: &str,
) -> Result<Option<Event>> {
    let Some(live) = LiveItem::load(state, item_id, buyer_id).await? else {
        return Ok(None);
    };
    let html = askama::Template::render(&live).map_err(|err| {
        tracing::error!(item = item_id, error = %err, "rendering a live auction update");
        Error::Unavailable("the page renderer")
    })?;
    Ok(Some(Event::default().event(name).data(html)))
}

/// `GET /auctions/{id}/stream`. 404 for an unknown item, 400 for a malformed id.
pub async fn stream(
    State(state): State<AppState>,
    buyer: Buyer,
    Path(item): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let item_id = parse_id(&item, "auction")?;
    let buyer_id = buyer.id().to_owned();
    // Subscribe first, then read the snapshot: no change can fall between the two.
    let subscription = state.live.subscribe(&format!("auction:{item_id}"));
    let first = render(&state, item_id, &buyer_id, "snapshot")
        .await?
        .ok_or_else(|| Error::NotFound("There is no such auction.".into()))?;
    Ok(page_stream(subscription, first, move |message| {
        let (state, buyer_id) = (state.clone(), buyer_id.clone());
        async move {
            // `bid` and `closed` keep their names; `resync` becomes a `snapshot`.
            let name = match message.event.as_str() {
                "resync" => "snapshot",
                other => other,
            };
            Update::from_snapshot(render(&state, item_id, &buyer_id, name).await)
        }
    }))
}
