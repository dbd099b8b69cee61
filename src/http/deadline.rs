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
//!
//! The deadline is the stores' budget, so it starts once the request is whole: its body is
//! read first, within the header timeout (a client that sends it slower, a trickle
//! included, is answered 408, not a 503 that blames a store) and the body limit (413).

use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::http::error::Error;
use crate::state::AppState;

/// Largest request body accepted, in bytes. Every form here is a few hundred bytes.
pub const BODY_LIMIT_BYTES: usize = 16 * 1024;

/// What a request cut off at its deadline names as unavailable.
const WHAT: &str = "A store";

/// Middleware: reads the request's body whole (408 if it takes longer than the header
/// timeout, 413 past [`BODY_LIMIT_BYTES`]), then runs the request within the deadline,
/// else answers 503.
pub async fn bound(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let body = match read_whole(body, state.settings.header_timeout()).await {
        Ok(body) => body,
        Err(err) => {
            // The body was not read to its end, so the connection cannot carry another
            // request: say so (RFC 9110 asks it of a 408), and hyper closes it.
            let mut response = err.into_response();
            let close = HeaderValue::from_static("close");
            response.headers_mut().insert(header::CONNECTION, close);
            return response;
        }
    };
    within(
        state.settings.request_deadline(),
        next.run(Request::from_parts(parts, body)),
    )
    .await
    .unwrap_or_else(IntoResponse::into_response)
}

/// `body` read into memory within `limit` (the whole read, not each chunk: a byte every
/// few seconds does not keep it going). Errors: 408 too slow, 413 too large (announced
/// or sent), 400 a body that broke off.
async fn read_whole(body: Body, limit: Duration) -> Result<Body, Error> {
    // A `Content-Length` over the limit is refused before a byte is read (nor is a
    // `100 Continue` sent, which would invite the upload).
    if body.size_hint().lower() > BODY_LIMIT_BYTES as u64 {
        return Err(Error::TooLarge);
    }
    let read = Limited::new(body, BODY_LIMIT_BYTES).collect();
    match tokio::time::timeout(limit, read).await {
        Ok(Ok(collected)) => Ok(Body::from(collected.to_bytes())),
        Ok(Err(err)) if err.is::<LengthLimitError>() => Err(Error::TooLarge),
        Ok(Err(_)) => Err(Error::form_unreadable()),
        Err(_) => Err(Error::RequestTimeout),
    }
}

/// `work`, or [`Error::Unavailable`] once `deadline` (a [`crate::config::Settings::request_deadline`])
/// has passed; `work` is then dropped.
pub async fn within<T>(deadline: Duration, work: impl Future<Output = T>) -> Result<T, Error> {
    tokio::time::timeout(deadline, work).await.map_err(|_| {
        tracing::warn!(?deadline, "work passed its deadline");
        Error::Unavailable(WHAT)
    })
}
