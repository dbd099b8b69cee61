//! Cross-site request forgery defences, two layers:
//!
//! 1. Every form carries an `authenticity_token` checked against the CSRF cookie
//!    (axum_csrf's HMAC-signed double-submit cookie). Handlers get their form through
//!    [`CsrfForm`], which refuses the request before the handler runs.
//! 2. [`refuse_foreign_origin`] refuses any POST whose `Origin` header names another
//!    site, for browsers that send it (all current ones do).

use axum::body::Bytes;
use axum::extract::{FromRef, FromRequest, Request};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum_csrf::{CsrfConfig, CsrfToken};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::error::Error;

/// The CSRF configuration. With `secret` (at least 32 bytes) every server process signs
/// and checks tokens the same way, so a form served by one process can be posted to
/// another; without it each process makes a random key, which suits one process only.
pub fn config(secret: Option<&str>) -> CsrfConfig {
    let config = CsrfConfig::default()
        .with_cookie_name("seatlock.csrf")
        .with_http_only(true)
        .with_secure(false)
        .with_cookie_same_site(axum_csrf::SameSite::Lax);
    match secret {
        // The cookie holds a random token in clear; the form carries HMAC(secret, token),
        // which a cross-site page can neither read nor compute (signed double submit).
        Some(secret) => config.with_salt(secret.to_owned()).with_key(None),
        None => config,
    }
}

/// Checks that a secret is long enough for [`config`].
pub fn check_secret(secret: &str) -> Result<(), String> {
    if secret.len() >= 32 {
        Ok(())
    } else {
        Err("SEATLOCK_SECRET must be at least 32 bytes".into())
    }
}

/// The form field every POST form carries.
#[derive(Deserialize)]
struct AuthenticityToken {
    authenticity_token: String,
}

/// A urlencoded form of type `T` whose `authenticity_token` field matched the CSRF
/// cookie. Rejections: 413 for a body over the limit, 403 for a missing or wrong token,
/// 400 for a form that does not parse as `T`.
pub struct CsrfForm<T>(pub T);

impl<S, T> FromRequest<S> for CsrfForm<T>
where
    S: Send + Sync,
    CsrfConfig: FromRef<S>,
    T: DeserializeOwned,
{
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = req.into_parts();
        let token = <CsrfToken as axum::extract::FromRequestParts<S>>::from_request_parts(
            &mut parts, state,
        )
        .await
        .map_err(|_| forbidden())?;
        let bytes = Bytes::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(|rejection| match rejection.status().as_u16() {
                413 => Error::TooLarge,
                _ => Error::BadRequest("The form could not be read.".into()),
            })?;
        let sent: AuthenticityToken =
            serde_urlencoded::from_bytes(&bytes).map_err(|_| forbidden())?;
        token
            .verify(&sent.authenticity_token)
            .map_err(|_| forbidden())?;
        let form = serde_urlencoded::from_bytes(&bytes)
            .map_err(|e| Error::BadRequest(format!("The form is not valid: {e}.")))?;
        Ok(CsrfForm(form))
    }
}

fn forbidden() -> Error {
    Error::Forbidden(
        "This form has expired or did not come from this site. Reload the page and try again."
            .into(),
    )
}

/// A form with nothing but the CSRF token (hold, release, confirm buttons).
#[derive(Deserialize)]
pub struct Empty {}

/// Middleware: a POST whose `Origin` header is present and does not match the `Host`
/// header is refused with 403 before any handler runs.
pub async fn refuse_foreign_origin(req: Request, next: Next) -> Response {
    if req.method() == Method::POST
        && let Some(origin) = req.headers().get(header::ORIGIN)
    {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok());
        let origin_host = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .map(|(_, rest)| rest);
        if host.is_none() || origin_host != host {
            return Error::Forbidden("Cross-site form posts are not accepted.".into())
                .into_response();
        }
    }
    next.run(req).await
}
