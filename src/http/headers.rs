//! Security headers on every response, whatever answered it (a page, an error, a
//! stylesheet, a live stream), each set only where the handler set none.
//!
//! * `Content-Security-Policy`: the page's scripts, styles, fetches and streams come from
//!   this origin only, nothing may frame it, and its forms post only here. A script
//!   injected into a page (a buyer's name, an item's text, if ever escaped wrongly) does
//!   not run: no page has an inline script or style to allow (the venue's zone colours
//!   are a stylesheet of their own, `GET /events/{id}/zones.css`).
//! * `X-Content-Type-Options: nosniff`: a response is only ever what its type says.
//! * `X-Frame-Options: DENY`: no framing, for browsers older than `frame-ancestors`.
//! * `Referrer-Policy: same-origin`: a link out does not tell another site which order
//!   or run page it came from.
//!
//! HSTS is not here: it is sent only on an https origin, which the server knows from its
//! configuration or a trusted proxy ([`crate::http::proxy`]).

use axum::Router;
use axum::http::{HeaderName, HeaderValue, header};
use tower_http::set_header::SetResponseHeaderLayer;

/// The policy every response carries (MDN, "Content-Security-Policy"; the directives
/// that do not fall back to `default-src`, `base-uri`, `form-action` and
/// `frame-ancestors`, are named).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The headers, as (name, value).
pub const SECURITY_HEADERS: [(HeaderName, &str); 4] = [
    (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::REFERRER_POLICY, "same-origin"),
];

/// `router` with [`SECURITY_HEADERS`] added to every response that lacks them.
pub fn secured<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    SECURITY_HEADERS
        .into_iter()
        .fold(router, |router, (name, value)| {
            router.layer(SetResponseHeaderLayer::if_not_present(
                name,
                HeaderValue::from_static(value),
            ))
        })
}
