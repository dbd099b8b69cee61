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

use axum::extract::State;
use axum::response::sse::{Event, Sse};
use futures_util::Stream;

use askama::Template;

use super::queries::{self, BidRow, Item};
use crate::http::buyer::Buyer;
use crate::http::error::{Error, Result};
use crate::http::ids::ItemId;
use crate::live::{Update, page_stream};
use crate::state::AppState;

/// How many bids the item page lists (the highest ones).
const BID_HISTORY: i64 = 50;
/// The changing part of an item's page, as one viewer sees it: terms, high bid or
/// result, bid history. Rendered inside [`ItemPage`], and alone for each live update
/// (`GET /auctions/{id}/stream`), so both say the same thing in the same words.
#[derive(Template)]
#[template(path = "auction_live.html")]
pub(super) struct LiveItem {
    /// The item, read at the Postgres clock.
    pub item: Item,
    /// The highest bids, highest first.
    pub bids: Vec<BidRow>,
    /// The viewer's public id: marks "(you)", "You won." and the viewer's bids.
    pub buyer_id: String,
}

impl LiveItem {
    /// Reads item `item_id` and its highest bids for viewer `buyer_id` (two queries, in
    /// parallel); `None` if there is no such item.
    pub(super) async fn load(
        state: &AppState,
        item_id: i64,
        buyer_id: &str,
    ) -> Result<Option<Self>> {
        let (item, bids) = tokio::join!(
            queries::item(&state.db, item_id),
            queries::bids(&state.db, item_id, BID_HISTORY)
        );
        let Some(item) = item? else {
            return Ok(None);
        };
        Ok(Some(LiveItem {
            item,
            bids: bids?,
            buyer_id: buyer_id.to_owned(),
        }))
    }

    /// Whether the viewer holds the high bid.
    fn leading(&self) -> bool {
        self.item.high_bidder_id.as_deref() == Some(self.buyer_id.as_str())
    }

    /// Whether the viewer won the (closed) auction.
    fn won(&self) -> bool {
        self.item.winner_id.as_deref() == Some(self.buyer_id.as_str())
    }
}

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
pub(super) async fn stream(
    State(state): State<AppState>,
    buyer: Buyer,
    ItemId(item_id): ItemId,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let buyer_id = buyer.id().to_owned();
    // Subscribe first, then read the snapshot: no change can fall between the two.
    let subscription = state
        .live
        .subscribe(&format!("auction:{item_id}"))
        .ok_or(Error::StreamsFull)?;
    let first = render(&state, item_id, &buyer_id, "snapshot")
        .await?
        .ok_or_else(Error::no_such_auction)?;
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
