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
//! One read per bid per server: the notification only says that the item changed, so
//! the item and its history must be read again; every stream of the item in this process
//! gets the same message from the hub ([`crate::live::LiveHub`]), and the first to ask
//! reads for all of them ([`SharedReads`]); each stream then renders that read for its
//! own viewer (their maximum, leading or outbid). A thousand watchers cost two queries
//! per bid, not two thousand, and the bid that holds the item's lock does not wait
//! behind them for the pool.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::response::sse::{Event, Sse};
use futures_util::Stream;

use askama::Template;

use super::queries::{self, BidRow, Item};
use crate::http::buyer::Buyer;
use crate::http::error::{Error, Result};
use crate::http::ids::ItemId;
use crate::live::{Update, page_stream};
use crate::money::format_cents;
use crate::state::AppState;
use crate::venue::per_event::PerEvent;

/// How many bids the item page lists (the highest ones).
const BID_HISTORY: i64 = 50;
/// The changing part of an item's page, as one viewer sees it: terms, price and leader
/// or result, the viewer's maximum, bid history. Rendered inside [`ItemPage`], and alone
/// for each live update (`GET /auctions/{id}/stream`), so both say the same thing in the
/// same words.
#[derive(Template)]
#[template(path = "auction_live.html")]
pub(super) struct LiveItem {
    /// The item, read at the Postgres clock.
    pub item: Item,
    /// The latest rows of the bid history, latest first.
    pub bids: Vec<BidRow>,
    /// The viewer's public id: marks "(you)", "You won." and the viewer's bids.
    pub buyer_id: String,
}

/// One read of an item's page data, before it is rendered for a viewer.
#[derive(Clone)]
struct ItemRead {
    item: Item,
    bids: Vec<BidRow>,
}

impl ItemRead {
    /// Reads item `item_id` and its latest history rows (two queries, in parallel); `None`
    /// if there is no such item.
    async fn load(state: &AppState, item_id: i64) -> Result<Option<Self>> {
        metrics::counter!(crate::telemetry::AUCTION_PAGE_READS_TOTAL).increment(1);
        let (item, bids) = tokio::join!(
            queries::item(&state.db, item_id),
            queries::bids(&state.db, item_id, BID_HISTORY)
        );
        let Some(item) = item? else {
            return Ok(None);
        };
        Ok(Some(ItemRead { item, bids: bids? }))
    }

    fn for_viewer(self, buyer_id: &str) -> LiveItem {
        LiveItem {
            item: self.item,
            bids: self.bids,
            buyer_id: buyer_id.to_owned(),
        }
    }

    /// Whether the page differs for `buyer_id` from a stranger's: they lead, won, or
    /// have a row in the history shown.
    fn concerns(&self, buyer_id: &str) -> bool {
        self.item.leads(buyer_id)
            || self.item.winner_id.as_deref() == Some(buyer_id)
            || self.bids.iter().any(|row| row.bidder_id == buyer_id)
    }
}

/// One read of an item, and the page rendered once for every watcher it does not concern
/// (most of a thousand watchers have not bid): rendering a thousand pages per bid would
/// cost the server more than the read it saves.
struct SharedPage {
    read: ItemRead,
    /// `None` if it could not be rendered (logged by [`render`]).
    stranger: std::sync::OnceLock<Option<String>>,
}

impl SharedPage {
    /// The page's changing part as `buyer_id` sees it, as HTML.
    fn html_for(&self, buyer_id: &str) -> Result<String> {
        if self.read.concerns(buyer_id) {
            return render(&self.read.clone().for_viewer(buyer_id));
        }
        self.stranger
            .get_or_init(|| render(&self.read.clone().for_viewer("")).ok())
            .clone()
            .ok_or(Error::Unavailable("the page renderer"))
    }
}

/// The reads of this process's item streams, one per item: the last read made, kept
/// with the generation of the item's hub topic it was made at (the generation moves on
/// with every message sent on the topic, [`crate::live::LiveHub::generation`]). The
/// first stream to handle a message reads, holding the item's slot; the others wait for
/// it and share it while the generation stays the same. A straggler still on an older message gets
/// the newest read, which is only more current. The seat map shares its snapshot the
/// same way ([`crate::venue::snapshots`]). A failed read is not kept.
#[derive(Default)]
pub struct SharedReads(PerEvent<(u64, Arc<SharedPage>)>);

impl SharedReads {
    /// The read of item `item_id` current at its topic's generation, made once however
    /// many streams ask; `None` if there is no such item.
    async fn read(&self, state: &AppState, item_id: i64) -> Result<Option<Arc<SharedPage>>> {
        let generation = state.live.generation(&item_topic(item_id));
        let page = async {
            Ok(ItemRead::load(state, item_id).await?.map(|read| {
                Arc::new(SharedPage {
                    read,
                    stranger: std::sync::OnceLock::new(),
                })
            }))
        };
        self.0.read_at(item_id, generation, page).await
    }
}

/// The hub topic of item `item_id`'s live pages, `auction:<id>`: the topic the
/// statements that change the item notify ([`super::queries`]).
fn item_topic(item_id: i64) -> String {
    format!("auction:{item_id}")
}

impl LiveItem {
    /// Reads item `item_id` and its latest history rows for viewer `buyer_id` (two
    /// queries, in parallel); `None` if there is no such item.
    pub(super) async fn load(
        state: &AppState,
        item_id: i64,
        buyer_id: &str,
    ) -> Result<Option<Self>> {
        Ok(ItemRead::load(state, item_id)
            .await?
            .map(|read| read.for_viewer(buyer_id)))
    }

    /// Whether the viewer leads.
    fn leading(&self) -> bool {
        self.item.leads(&self.buyer_id)
    }

    /// Whether the viewer won the (closed) auction.
    fn won(&self) -> bool {
        self.item.winner_id.as_deref() == Some(self.buyer_id.as_str())
    }

    /// The viewer's maximum, in cents: the leader's from the item, anyone else's from
    /// their latest own row in the history shown (beaten: at most the price); `None` if
    /// the viewer has not bid (or not lately).
    fn your_max_cents(&self) -> Option<i64> {
        if self.leading() {
            return self.item.leader_max_cents;
        }
        self.bids
            .iter()
            .find(|row| row.bidder_id == self.buyer_id && !row.automatic)
            .and_then(|row| row.max_cents)
    }

    /// "$45.00", the viewer's maximum for the page, or empty.
    fn your_max(&self) -> String {
        self.your_max_cents().map(format_cents).unwrap_or_default()
    }
}

/// Renders `live`, the changing part of its page, as HTML.
fn render(live: &LiveItem) -> Result<String> {
    askama::Template::render(live).map_err(|err| {
        tracing::error!(item = live.item.id, error = %err, "rendering a live auction update");
        Error::Unavailable("the page renderer")
    })
}

/// Renders `live` as an SSE event named `name`.
fn event(live: &LiveItem, name: &str) -> Result<Event> {
    Ok(Event::default().event(name).data(render(live)?))
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
        .subscribe(&item_topic(item_id))
        .ok_or(Error::StreamsFull)?;
    let first = LiveItem::load(&state, item_id, &buyer_id)
        .await?
        .ok_or_else(Error::no_such_auction)?;
    let first = event(&first, "snapshot")?;
    Ok(page_stream(subscription, first, move |message| {
        let (state, buyer_id) = (state.clone(), buyer_id.clone());
        async move {
            // `bid` and `closed` keep their names; `resync` becomes a `snapshot`.
            let name = match message.event.as_str() {
                "resync" => "snapshot",
                other => other,
            };
            let page = state.auction_reads.read(&state, item_id).await;
            let html = page.and_then(|page| page.map(|page| page.html_for(&buyer_id)).transpose());
            Update::from_snapshot(
                html.map(|html| html.map(|html| Event::default().event(name).data(html))),
            )
        }
    }))
}
