//! Every request has a deadline ([`crate::config::Settings::request_deadline`]): a request still waiting
//! on a store when it passes is answered 503, and the work it was waiting for is dropped.
//!
//! Redis and Postgres answer within the store timeout or fail, as long as they can hear
//! the request; a half-open connection (a dropped flow, a suspended host) answers nothing
//! and reports nothing until TCP gives up, minutes later. The deadline bounds that wait.
//! What it drops is safe to drop: a purchase or bid cut off half way leaves its hold, its
//! authorization or its bid lock to their TTLs and idempotency keys (see
//! [`crate::seats::purchase`]), and the connection it was using is checked before reuse
//! (`crate::db`). The response body is not bounded: a live page's stream runs on.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::http::error::Error;
use crate::state::AppState;

/// What a request cut off at its deadline names as unavailable.
const WHAT: &str = "A store";

/// Middleware: runs the request within the deadline, else answers 503.
pub async fn bound(State(state): State<AppState>, req: Request, next: Next) -> Response {
    within(state.settings.request_deadline(), next.run(req))
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// `work`, or [`Error::Unavailable`] once `deadline` (a [`crate::config::Settings::request_deadline`])
/// has passed; `work` is then dropped.
pub async fn within<T>(deadline: Duration, work: impl Future<Output = T>) -> Result<T, Error> {
    tokio::time::timeout(deadline, work).await.map_err(|_| {
        tracing::warn!(?deadline, "work passed its deadline");
        Error::Unavailable(WHAT)
    })
}
