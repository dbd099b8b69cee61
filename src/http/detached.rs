//! Work that must not be cancelled half way by a client that hangs up.
//!
//! When a browser closes its connection mid-request (a closed tab, a phone losing its
//! signal), the server drops the request's future, and with it whatever the handler was
//! awaiting: a purchase dropped between its steps would lose the buyer's hold, a bid would
//! keep its bid lock until the lease lapsed. Such work runs on a task of its own, which
//! the request merely awaits.

use std::future::Future;
use std::time::Duration;

use tracing::Instrument;

use crate::http::error::{Error, Result};

/// Runs `work` on a Tokio task of its own, in the current tracing span and under the
/// pause installed around the caller ([`crate::failpoint`]), and awaits its result. If the caller is dropped (the client hung up), `work` still runs to its end,
/// or to `deadline` ([`crate::config::Settings::request_deadline`]: a store that stopped
/// answering), where it is dropped. Errors: `work`'s own; 503 at the deadline; a 503
/// naming `what` if the task panicked.
pub async fn to_completion<T: Send + 'static>(
    what: &'static str,
    deadline: Duration,
    work: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let bounded = async move { crate::http::deadline::within(deadline, work).await? };
    // A task-local does not cross `tokio::spawn`: carry the caller's pause over.
    tokio::spawn(crate::failpoint::carried(bounded).in_current_span())
        .await
        .map_err(|err| {
            tracing::error!(error = %err, what, "detached work failed");
            Error::Unavailable(what)
        })?
}
