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
//! * **What the browser remembers.** Each hold also leaves a signed cookie naming the seat
//!   ([`Buyer::remember_hold`]; the buyer's id and the seat, no token), so a confirm that
//!   finds no live lease can tell a hold that lapsed (409 `hold_expired`) from a seat the
//!   buyer never held (403). It decides nothing else: Redis says who holds what.
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

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};

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

/// The start of the name of a had-hold cookie: `seatlock.held.<event>.<seat>`.
const HELD_COOKIE: &str = "seatlock.held.";

/// How long a browser remembers that it held a seat: a day, ample for any hold's TTL.
const HELD_COOKIE_MAX_AGE: cookie::time::Duration = cookie::time::Duration::days(1);

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

    /// What a request's signed cookies say: the buyer id, if one verifies, the seats
    /// (event, seat) whose had-hold cookie names that id, and the cookies themselves.
    fn read(&self, headers: &HeaderMap) -> (Option<String>, HashSet<(i64, i64)>, CookieJar) {
        let mut jar = CookieJar::new();
        for value in headers.get_all(header::COOKIE) {
            let Ok(value) = value.to_str() else { continue };
            for cookie in value.split(';') {
                if let Ok(cookie) = Cookie::parse_encoded(cookie.trim().to_owned()) {
                    jar.add_original(cookie);
                }
            }
        }
        let signed = jar.signed(&self.key);
        let id = signed
            .get(BUYER_COOKIE)
            .map(|c| c.value().to_owned())
            .filter(|id| is_buyer_id(id));
        let mut held = HashSet::new();
        if let Some(id) = &id {
            for cookie in jar.iter() {
                let seat = cookie.name().strip_prefix(HELD_COOKIE).and_then(held_seat);
                if let Some(seat) = seat
                    && signed
                        .get(cookie.name())
                        .is_some_and(|c| c.value() == held_value(id, seat.0, seat.1))
                {
                    held.insert(seat);
                }
            }
        }
        (id, held, jar)
    }

    /// `cookie` signed, as a `Set-Cookie` value (HttpOnly, SameSite=Lax, path `/`).
    fn signed(&self, cookie: Cookie<'static>) -> Option<HeaderValue> {
        let mut jar = CookieJar::new();
        let mut cookie = cookie;
        cookie.set_path("/");
        cookie.set_http_only(true);
        cookie.set_same_site(cookie::SameSite::Lax);
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

/// The (event, seat) of a had-hold cookie's name after its prefix: `<event>.<seat>`.
fn held_seat(rest: &str) -> Option<(i64, i64)> {
    let (event, seat) = rest.split_once('.')?;
    Some((event.parse().ok()?, seat.parse().ok()?))
}

/// A buyer id as minted: 16 lowercase hex digits.
fn is_buyer_id(id: &str) -> bool {
    id.len() == 16
        && id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// The signed value of a had-hold cookie: the buyer and the seat, so it cannot be made
/// from the buyer cookie's value (the signature covers the value alone).
fn held_value(buyer_id: &str, event_id: i64, seat_id: i64) -> String {
    format!("{buyer_id}:{event_id}.{seat_id}")
}

/// The name of the had-hold cookie of `seat_id` of `event_id`.
fn held_cookie(event_id: i64, seat_id: i64) -> String {
    format!("{HELD_COOKIE}{event_id}.{seat_id}")
}

fn random_id() -> String {
    format!("{:016x}", rand::rng().random::<u64>())
}

/// What [`identify`] puts in each request: the key, the buyer's id once known (read from
/// the cookie, or minted by the first extractor that needs it), the seats the browser
/// remembers holding, the request's cookies, and the cookies to set on the response.
#[derive(Clone)]
struct Identified {
    identities: Identities,
    id: Arc<OnceLock<String>>,
    held: Arc<HashSet<(i64, i64)>>,
    jar: Arc<CookieJar>,
    outbox: Arc<Mutex<Vec<HeaderValue>>>,
}

/// Middleware, inside the session layer: reads the buyer's signed cookies; if a handler
/// needed a buyer and the request had none, sets the cookie of the id minted for it on
/// the response, with whatever had-hold cookies the handler set or removed. Requests that
/// never ask who the buyer is (assets, health checks) get no cookie.
pub async fn identify(
    State(identities): State<Identities>,
    mut req: Request,
    next: Next,
) -> Response {
    let (known, held, jar) = identities.read(req.headers());
    let id = Arc::new(OnceLock::new());
    if let Some(known) = known.clone() {
        let _ = id.set(known);
    }
    let outbox = Arc::new(Mutex::new(Vec::new()));
    req.extensions_mut().insert(Identified {
        identities: identities.clone(),
        id: id.clone(),
        held: Arc::new(held),
        jar: Arc::new(jar),
        outbox: outbox.clone(),
    });
    let mut response = next.run(req).await;
    if known.is_none()
        && let Some(minted) = id.get()
    {
        let cookie = Cookie::build((BUYER_COOKIE, minted.clone())).max_age(BUYER_COOKIE_MAX_AGE);
        response.headers_mut().extend(
            identities
                .signed(cookie.build())
                .map(|c| (header::SET_COOKIE, c)),
        );
    }
    let cookies = std::mem::take(&mut *outbox.lock().unwrap_or_else(|e| e.into_inner()));
    for cookie in cookies {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

/// The request's buyer id and whether the request came without one (then it is minted
/// now, and [`identify`] gives it to the browser). 503 if the router lacks [`identify`]
/// (a wiring bug, which every test would show).
pub(crate) fn buyer_id(parts: &Parts) -> Result<(String, bool)> {
    let identified = identified(parts)?;
    let mut new = false;
    let id = identified.id.get_or_init(|| {
        new = true;
        random_id()
    });
    Ok((id.clone(), new))
}

fn identified(parts: &Parts) -> Result<&Identified> {
    parts
        .extensions
        .get::<Identified>()
        .ok_or(Error::Unavailable(
            "the buyer's identity (a server without its middleware)",
        ))
}

/// The current buyer: their id (from the signed cookie, or minted on this request), the
/// seats their browser remembers holding, and their session, read only when the name is
/// asked for. Cheap to clone.
#[derive(Clone)]
pub struct Buyer {
    id: String,
    session: Session,
    identified: Identified,
    /// Whether this request came without a buyer id.
    new: bool,
}

impl<S: Send + Sync> FromRequestParts<S> for Buyer {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self> {
        let (id, new) = buyer_id(parts)?;
        let identified = identified(parts)?.clone();
        let session = Session::from_request_parts(parts, state)
            .await
            .map_err(|_| Error::Unavailable("the session store"))?;
        Ok(Buyer {
            id,
            session,
            identified,
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

/// Middleware, outside the session layer: drops a `Set-Cookie` that removes the session
/// cookie. This application ends a session early only by rotating its id (a rename,
/// whose answer sets the new cookie), and a request in flight across that rotation loads
/// the old session, finds it deleted, and tower-sessions then removes the session cookie
/// by name: the new one. A session that simply expired keeps a cookie that expires
/// with it (both last a day of inactivity).
pub async fn keep_rotated_sessions(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let removal = |value: &HeaderValue| {
        value
            .to_str()
            .ok()
            .and_then(|text| Cookie::parse(text.to_owned()).ok())
            .is_some_and(|c| {
                c.name() == crate::http::sessions::SESSION_COOKIE
                    && c.max_age() == Some(cookie::time::Duration::ZERO)
            })
    };
    if response
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .any(removal)
    {
        let kept: Vec<HeaderValue> = response
            .headers()
            .get_all(header::SET_COOKIE)
            .iter()
            .filter(|value| !removal(value))
            .cloned()
            .collect();
        response.headers_mut().remove(header::SET_COOKIE);
        for value in kept {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
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
        self.identified
            .identities
            .admission_token(&self.id, event_id)
    }

    /// Whether the browser remembers holding `seat_id` of `event_id` (a had-hold cookie of
    /// this buyer's, set by [`Buyer::remember_hold`] and not yet forgotten or expired).
    pub fn had_hold(&self, event_id: i64, seat_id: i64) -> bool {
        self.identified.held.contains(&(event_id, seat_id))
    }

    /// Has the browser remember, for a day, that this buyer held `seat_id` of `event_id`
    /// (a signed cookie on this response): only to tell a lapsed hold from none.
    pub fn remember_hold(&self, event_id: i64, seat_id: i64) {
        let value = held_value(&self.id, event_id, seat_id);
        self.set_signed_cookie(held_cookie(event_id, seat_id), value, HELD_COOKIE_MAX_AGE);
    }

    /// Has the browser forget [`Buyer::remember_hold`]'s cookie (released or bought).
    pub fn forget_hold(&self, event_id: i64, seat_id: i64) {
        if self.had_hold(event_id, seat_id) {
            self.remove_cookie(held_cookie(event_id, seat_id));
        }
    }

    /// The value of the request's cookie `name` if its signature verifies under the
    /// server secret (`None`: absent, or forged). What the value claims (whose it is, for
    /// which subject) is the caller's to check: the signature covers the value.
    pub fn signed_cookie(&self, name: &str) -> Option<String> {
        let signed = self.identified.jar.signed(&self.identified.identities.key);
        signed.get(name).map(|cookie| cookie.value().to_owned())
    }

    /// Sets cookie `name` to `value`, signed, for `max_age`, on this response (HttpOnly,
    /// SameSite=Lax, path `/`).
    pub fn set_signed_cookie(&self, name: String, value: String, max_age: cookie::time::Duration) {
        let cookie = Cookie::build((name, value)).max_age(max_age);
        self.send(self.identified.identities.signed(cookie.build()));
    }

    /// Has the browser drop cookie `name`.
    pub fn remove_cookie(&self, name: String) {
        let gone = Cookie::build((name, ""))
            .path("/")
            .max_age(cookie::time::Duration::ZERO);
        self.send(HeaderValue::from_str(&gone.build().to_string()).ok());
    }

    fn send(&self, cookie: Option<HeaderValue>) {
        if let Some(cookie) = cookie {
            let mut outbox = self
                .identified
                .outbox
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            outbox.push(cookie);
        }
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
