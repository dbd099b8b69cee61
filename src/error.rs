//! One error type for every handler, mapped to a status code and a page with a human
//! message. Bad input is always a 4xx; only an unavailable store is a 5xx (503).

use askama::Template;
use askama_web::WebTemplate;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use lease::LeaseError;

/// Everything a request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is malformed (bad id, bad amount, bad form): 400.
    #[error("{0}")]
    BadRequest(String),
    /// The caller may not do this (not its hold, bad CSRF token): 403.
    #[error("{0}")]
    Forbidden(String),
    /// No such event, seat or order: 404.
    #[error("{0}")]
    NotFound(String),
    /// The request lost a race or conflicts with the seat's state: 409.
    #[error("{0}")]
    Conflict(String),
    /// The request body is over [`crate::app::BODY_LIMIT_BYTES`]: 413.
    #[error("The request is too large.")]
    TooLarge,
    /// Redis or Postgres is unreachable; names which one: 503.
    #[error("{0} is unavailable, please try again in a moment")]
    Unavailable(&'static str),
    /// A Postgres error that is not one of the above.
    #[error("database error: {0}")]
    Database(sqlx::Error),
}

/// Result alias for handlers and domain functions.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<sqlx::Error> for Error {
    /// Maps constraint violations to friendly conflicts and lost connections to 503.
    fn from(err: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &err
            && let Some(friendly) = db.constraint().and_then(constraint_error)
        {
            return friendly;
        }
        match err {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_) => Error::Unavailable("Postgres"),
            sqlx::Error::Database(ref db)
                if db
                    .code()
                    .is_some_and(|c| c.starts_with("57P") || c == "57014" || c == "55P03") =>
            {
                // admin_shutdown, crash_shutdown, cannot_connect_now; and our own
                // statement_timeout (query_canceled) and lock_timeout (lock_not_available)
                Error::Unavailable("Postgres")
            }
            other => Error::Database(other),
        }
    }
}

impl From<LeaseError> for Error {
    fn from(err: LeaseError) -> Self {
        match err {
            LeaseError::Held { .. } => Error::Conflict(SOMEONE_IS_BUYING.into()),
            LeaseError::Lost => Error::Conflict(HOLD_EXPIRED.into()),
            LeaseError::Unavailable(_) => Error::Unavailable("Redis"),
            LeaseError::Ledger(_) => Error::Unavailable("Postgres"),
        }
    }
}

/// The friendly error for a violated constraint that users can run into (names from
/// migrations/), or `None` for one that only a bug could violate.
fn constraint_error(constraint: &str) -> Option<Error> {
    Some(match constraint {
        "orders_one_per_seat" => Error::Conflict("This seat has already been sold.".into()),
        "bids_one_per_amount" => Error::Conflict(
            "Another bid of this amount was accepted first, so your bid is no longer high enough."
                .into(),
        ),
        "bids_one_per_fencing_token" => {
            Error::Conflict("This bid lock was already used for a bid. Please try again.".into())
        }
        "bids_amount_in_range" => {
            Error::BadRequest("A bid must be between $0.01 and $1000000.00.".into())
        }
        _ => return None,
    })
}

/// Shown when a seat is held by another buyer.
pub const SOMEONE_IS_BUYING: &str =
    "Someone is buying this seat. It may come free again if they do not complete their purchase.";
/// Shown when the buyer's own hold has lapsed.
pub const HOLD_EXPIRED: &str =
    "Your hold on this seat has expired. Pick the seat again if it is still available.";

impl Error {
    /// The HTTP status for this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Error::BadRequest(_) => StatusCode::BAD_REQUEST,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::Conflict(_) => StatusCode::CONFLICT,
            Error::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Database(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// The error page.
#[derive(Template, WebTemplate)]
#[template(path = "error.html")]
pub struct ErrorPage {
    /// Short heading, from the status ("Conflict").
    pub title: String,
    /// The human message.
    pub message: String,
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = match &self {
            Error::Database(err) => {
                tracing::error!(error = %err, "unexpected database error");
                "Something went wrong on our side; nothing was charged. Please try again.".into()
            }
            other => {
                tracing::debug!(error = %other, status = status.as_u16(), "request refused");
                other.to_string()
            }
        };
        let title = status.canonical_reason().unwrap_or("Error").to_owned();
        (status, ErrorPage { title, message }).into_response()
    }
}
