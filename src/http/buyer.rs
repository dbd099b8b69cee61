//! The buyer: an anonymous visitor known by a public random id, carried in a signed
//! cookie ([`BUYER_COOKIE`], the `cookie` crate's signed jar, HMAC-SHA256 under the
//! server secret), and a display name, kept in a tower-sessions session (in Redis:
//! [`crate::http::sessions`]) once the buyer gives one.
//!
//! * **No store on the hot path.** Who the buyer is (and so their form token,
//!   [`crate::http::csrf`]) is checked from the cookie alone, without a store read: a
//!   hold is its one lease script and nothing else. The buyer's holds are found in Redis
//!   by their id (the holder label every grant records), so their owner tokens stay in
//!   Redis and never reach the browser, nor a session.
//! * **A look writes nothing lasting.** A first visit mints an id and sets the cookie
//!   (kept by the browser, not by any store); a session exists only once the buyer names
//!   themselves (`POST /me`). Crawlers and cookie-dropping bots cost no store memory.
//! * **A rename is one write.** The name goes into the session, whose id is rotated
//!   (session fixation); the buyer's id does not change, so a request in flight across a
//!   rename neither brings the old session back (it never writes the session) nor turns
//!   the browser into a new guest.
//!
//! What a signed cookie cannot do is be revoked: whoever holds a copy of a buyer's cookie
//! is that buyer until it expires, as with any bearer token (it is HttpOnly, SameSite=Lax,
//! and `Secure` on https, [`crate::http::proxy`]).

use std::sync::{Arc, OnceLock};

use axum::extract::FromRequestParts;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::post;
use axum::{Router, http::HeaderMap};
use cookie::{Cookie, CookieJar, Key};
use hmac::{Hmac, Mac};
use lease::OwnerToken;
use rand::Rng;
use serde::Deserialize;
use sha2::Sha256;
use tower_sessions::Session;

use crate::http::csrf::CsrfForm;
use crate::http::error::{Error, Result};
use crate::profile::BuyerProfile;
use crate::state::AppState;

/// The name of the cookie that carries the buyer's id, signed.
pub const BUYER_COOKIE: &str = "seatlock.buyer";

/// How long a browser keeps its buyer id without a visit: 30 days, so a buyer can come
/// back to their orders.
const BUYER_COOKIE_MAX_AGE: cookie::time::Duration = cookie::time::Duration::days(30);

/// Session key of the buyer's name (with their id, so a session cookie paired with
/// another buyer's id names nobody).
const PROFILE: &str = "profile";

/// The key that signs buyer cookies and derives their waiting-room tokens: from
/// `SEATLOCK_SECRET` (at least 32 bytes; every server of a deployment must share it),
/// else random per process, which suits one process only (another process would see
/// every buyer as new).
#[derive(Clone)]
pub struct Identities {
    key: Key,
}

impl Identities {
    /// See the type's docs. `secret`, when given, has been checked by
    /// [`crate::http::csrf::check_secret`].
    pub fn new(secret: Option<&str>) -> Self {
        let key = match secret {
            // HKDF-expanded to the 64 bytes the signed jar wants.
            Some(secret) => Key::derive_from(secret.as_bytes()),
            None => Key::generate(),
        };
        Identities { key }
    }

    /// The buyer id of a request's signed cookie, if it has one that verifies.
    fn read(&self, headers: &HeaderMap) -> Option<String> {
        let mut jar = CookieJar::new();
        for value in headers.get_all(header::COOKIE) {
            for cookie in value.to_str().ok()?.split(';') {
                if let Ok(cookie) = Cookie::parse_encoded(cookie.trim().to_owned()) {
                    jar.add_original(cookie);
                }
            }
        }
        let id = jar.signed(&self.key).get(BUYER_COOKIE)?.value().to_owned();
        is_buyer_id(&id).then_some(id)
    }

    /// The `Set-Cookie` value that gives a browser `id`.
    fn cookie_for(&self, id: &str) -> Option<HeaderValue> {
        let mut jar = CookieJar::new();
        let cookie = Cookie::build((BUYER_COOKIE, id.to_owned()))
            .path("/")
            .http_only(true)
            .same_site(cookie::SameSite::Lax)
            .max_age(BUYER_COOKIE_MAX_AGE);
        jar.signed_mut(&self.key).add(cookie);
        let signed = jar.delta().next()?.encoded().to_string();
        HeaderValue::from_str(&signed).ok()
    }

    /// The owner token of `buyer_id`'s place in event `event_id`'s waiting room:
    /// HMAC-SHA256 of both under the key, so every request of the buyer, on any server,
    /// stands for the same place, with nothing stored. Secret like a hold's owner token
    /// (whoever knows it may shop with it): it never leaves the server.
    fn admission_token(&self, buyer_id: &str, event_id: i64) -> OwnerToken {
        let mut mac = Hmac::<Sha256>::new_from_slice(self.key.signing())
            .expect("HMAC takes a key of any length");
        mac.update(format!("admission\0{event_id}\0{buyer_id}").as_bytes());
        OwnerToken::from_string(hex::encode(mac.finalize().into_bytes()))
    }
}

/// A buyer id as minted: 16 lowercase hex digits.
fn is_buyer_id(id: &str) -> bool {
    id.len() == 16
        && id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

fn random_id() -> String {
    format!("{:016x}", rand::rng().random::<u64>())
}

/// What [`identify`] puts in each request: the key, and the buyer's id once known (read
/// from the cookie, or minted by the first extractor that needs it).
#[derive(Clone)]
struct Identified {
    identities: Identities,
    id: Arc<OnceLock<String>>,
}

/// Middleware, inside the session layer: reads the buyer's signed cookie; if a handler
/// needed a buyer and the request had none, sets the cookie of the id minted for it on
/// the response. Requests that never ask who the buyer is (assets, health checks) get
/// no cookie.
pub async fn identify(
    State(identities): State<Identities>,
    mut req: Request,
    next: Next,
) -> Response {
    let id = Arc::new(OnceLock::new());
    let known = identities.read(req.headers());
    if let Some(known) = known.clone() {
        let _ = id.set(known);
    }
    req.extensions_mut().insert(Identified {
        identities: identities.clone(),
        id: id.clone(),
    });
    let mut response = next.run(req).await;
    if known.is_none()
        && let Some(minted) = id.get()
        && let Some(cookie) = identities.cookie_for(minted)
    {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

/// The request's buyer id and whether the request came without one (then it is minted
/// now, and [`identify`] gives it to the browser). 503 if the router lacks [`identify`]
/// (a wiring bug, which every test would show).
pub(crate) fn buyer_id(parts: &Parts) -> Result<(String, bool, Identities)> {
    let identified = parts
        .extensions
        .get::<Identified>()
        .ok_or(Error::Unavailable(
            "the buyer's identity (a server without its middleware)",
        ))?;
    let mut new = false;
    let id = identified.id.get_or_init(|| {
        new = true;
        random_id()
    });
    Ok((id.clone(), new, identified.identities.clone()))
}

/// The current buyer: their id (from the signed cookie, or minted on this request) and
/// their session, read only when the name is asked for. Cheap to clone.
#[derive(Clone)]
pub struct Buyer {
    id: String,
    session: Session,
    identities: Identities,
    /// Whether this request came without a buyer id.
    new: bool,
}

impl<S: Send + Sync> FromRequestParts<S> for Buyer {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self> {
        let (id, new, identities) = buyer_id(parts)?;
        let session = Session::from_request_parts(parts, state)
            .await
            .map_err(|_| Error::Unavailable("the session store"))?;
        Ok(Buyer {
            id,
            session,
            identities,
            new,
        })
    }
}

/// Middleware, outside the session layer. When tower-sessions cannot save a session after
/// the handler ran (the session store, Redis, down or too slow), it answers a bare,
/// bodiless 500; this turns that into the same 503 page as any other unavailable store,
/// naming [`crate::http::error::SESSION_STORE`], so a buyer is told to try again.
pub async fn session_save_failures(req: Request, next: Next) -> Response {
    let response = next.run(req).await;
    if response.status() == StatusCode::INTERNAL_SERVER_ERROR
        && !response.headers().contains_key(header::CONTENT_TYPE)
    {
        return Error::Unavailable(crate::http::error::SESSION_STORE).into_response();
    }
    response
}

impl Buyer {
    /// Whether this request came without a buyer id: a first visit, or a client that
    /// keeps no cookies.
    pub fn is_new(&self) -> bool {
        self.new
    }

    /// The public id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The buyer's id and name: the session's name if the buyer gave one (one Redis
    /// read, only for a buyer with a session), else "Guest" and the id's first four
    /// digits. 503 if the session store fails.
    pub async fn profile(&self) -> Result<BuyerProfile> {
        let named = self
            .session
            .get::<BuyerProfile>(PROFILE)
            .await
            .map_err(Error::from)?
            .filter(|profile| profile.id == self.id);
        Ok(named.unwrap_or_else(|| BuyerProfile {
            name: format!("Guest {}", self.id[..4].to_uppercase()),
            id: self.id.clone(),
        }))
    }

    /// The buyer's display name ([`Buyer::profile`]).
    pub async fn name(&self) -> Result<String> {
        Ok(self.profile().await?.name)
    }

    /// The owner token of the buyer's place in event `event_id`'s waiting room (derived,
    /// see [`Identities`]): no store is read or written.
    pub fn admission_token(&self, event_id: i64) -> OwnerToken {
        self.identities.admission_token(&self.id, event_id)
    }
}

/// `POST /me`: set the display name. The session id is rotated at the same time, so a
/// session id planted before the buyer named themselves is worthless afterwards
/// (session fixation).
#[derive(Deserialize)]
pub struct RenameForm {
    name: String,
}

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
    // A new session id with the name, so a session id planted before the buyer named
    // themselves is worthless afterwards (session fixation). The buyer id stays.
    buyer.session.cycle_id().await.map_err(Error::from)?;
    let profile = BuyerProfile {
        id: buyer.id.clone(),
        name: name.to_owned(),
    };
    buyer
        .session
        .insert(PROFILE, profile)
        .await
        .map_err(Error::from)?;
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

/// `POST /me`.
pub fn router() -> Router<AppState> {
    Router::new().route("/me", post(rename))
}
