//! The server-sent event stream of one page, shared by every live route: the first event
//! (a snapshot read after subscribing), then one event per hub message, as the route
//! turns each message into an event.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use tokio::sync::broadcast::error::RecvError;

use super::{LiveMessage, Subscription};
use crate::http::error::Result;

/// What a route makes of one hub message.
pub enum Update {
    /// Send this event to the page.
    Send(Event),
    /// Send nothing for this message (a store is down: the next resync retries).
    Skip,
    /// End the stream (the page's subject is gone).
    End,
}

impl Update {
    /// A freshly read snapshot as an update: `Ok(Some)` is sent, `Ok(None)` (no such
    /// subject any more) ends the stream, an error (a store is down) is skipped.
    pub fn from_snapshot(snapshot: Result<Option<Event>>) -> Self {
        match snapshot {
            Ok(Some(event)) => Update::Send(event),
            Ok(None) => Update::End,
            Err(_) => Update::Skip,
        }
    }
}

/// The page's stream: `first`, then `update(message)` for every message of
/// `subscription`. A page that fell behind (the broadcast channel dropped messages for
/// it) is handed [`LiveMessage::resync`], so the route sends a fresh snapshot. Ends when
/// the hub closes the topic (shutdown) or `update` says [`Update::End`]. Comments keep
/// idle connections open through proxies.
pub fn page_stream<F, Fut>(
    subscription: Subscription,
    first: Event,
    update: F,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>>
where
    F: FnMut(Arc<LiveMessage>) -> Fut + Send + 'static,
    Fut: Future<Output = Update> + Send,
{
    let stream = futures_util::stream::unfold(
        (subscription, Some(first), update),
        |(mut subscription, pending, mut update)| async move {
            if let Some(event) = pending {
                return Some((Ok(event), (subscription, None, update)));
            }
            loop {
                let message = match subscription.recv().await {
                    Ok(message) => message,
                    Err(RecvError::Lagged(_)) => Arc::new(LiveMessage::resync()),
                    Err(RecvError::Closed) => return None,
                };
                match update(message).await {
                    Update::Send(event) => return Some((Ok(event), (subscription, None, update))),
                    // Nothing for this page: wait for the next message.
                    Update::Skip => {}
                    Update::End => return None,
                }
            }
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}
