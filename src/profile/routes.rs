//! `POST /me`: the buyer names themselves. The name lives in a session
//! ([`crate::http::buyer::Buyer::set_name`]); the buyer's id does not change.

use axum::Router;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect};
use axum::routing::post;
use serde::Deserialize;

use crate::http::buyer::Buyer;
use crate::http::csrf::CsrfForm;
use crate::http::error::{Error, Result};
use crate::state::AppState;

/// `POST /me`.
pub fn router() -> Router<AppState> {
    Router::new().route("/me", post(rename))
}

/// The rename form: the display name, as typed.
#[derive(Deserialize)]
pub struct RenameForm {
    name: String,
}

/// `POST /me`: sets the display name, then back to the page the form was on. 400 for a
/// name that is empty, over 40 characters, or has control characters.
async fn rename(
    buyer: Buyer,
    headers: HeaderMap,
    CsrfForm(form): CsrfForm<RenameForm>,
) -> Result<impl IntoResponse> {
    let name = form.name.trim();
    if name.is_empty() || name.chars().count() > 40 || name.chars().any(char::is_control) {
        return Err(Error::BadRequest(
            "A display name is 1 to 40 characters, without control characters.".into(),
        ));
    }
    buyer.set_name(name).await?;
    Ok(Redirect::to(&back_to(&headers)))
}

/// Where to send the browser after a form: the page it came from if that is on this
/// site (a path), else `/`.
pub fn back_to(headers: &HeaderMap) -> String {
    headers
        .get(axum::http::header::REFERER)
        .and_then(|r| r.to_str().ok())
        .and_then(|r| r.split_once("://").map(|(_, rest)| rest))
        .and_then(|rest| rest.find('/').map(|i| rest[i..].to_owned()))
        .filter(|path| path.starts_with('/') && !path.starts_with("//"))
        .unwrap_or_else(|| "/".into())
}
