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
//!   finds no live lease can tell a hold that lapsed (409 `expired`) from a seat the
//!   buyer never held (403). It decides nothing else: Redis says who holds what.
//! * **A look writes nothing lasting.** A first visit mints an id and sets the cookie
//!   (kept by the browser, not by any store); a session exists only once the buyer names
//!   themselves (`POST /me`, [`crate::profile::routes`]). Crawlers and cookie-dropping bots
//!   cost no store memory, except on an event with a waiting room, where each of their
//!   visits is a new arrival that takes a place (docs/waiting-room.md says what it costs).
//! * **A rename is one write.** The name goes into the session, whose id is rotated
//!   (session fixation); the buyer's id does not change, so a request in flight across a
//!   rename neither brings the old session back (it never writes the session) nor turns
//!   the browser into a new guest.
//!
//! * **Bounded.** In lifetime: the buyer cookie's signed value says when it was issued;
//!   the server refuses one older than [`BUYER_COOKIE_MAX_AGE`] (30 days) whatever the
//!   browser kept, and issues it again, renewed, once it is older than
//!   [`BUYER_COOKIE_RENEW_AFTER`] (a day), so a buyer who keeps coming never reaches the
//!   limit. In size: a browser keeps at most [`MAX_HELD_COOKIES`] had-hold cookies, the
//!   oldest forgotten first, so many lapsed holds never grow the `Cookie` header past a
//!   proxy's limit. In scope: on https every cookie's name is `__Host-` prefixed
//!   ([`crate::http::proxy`]).
//! * **Rotatable.** Each signature is checked under every secret ([`Secrets`]); a cookie
//!   that verifies only under an accepted one is signed again under the current one on
//!   the answer.
//!
//! What a signed cookie cannot do is be revoked: whoever holds a copy of a buyer's cookie
//! is that buyer until it expires, as with any bearer token (it is HttpOnly, SameSite=Lax,
//! and `Secure` on https, [`crate::http::proxy`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::FromRequestParts;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use cookie::{Cookie, CookieJar, Key};
use lease::OwnerToken;
use rand::Rng;
use sha2::{Digest, Sha256};
use tower_sessions::Session;

use crate::http::error::{Error, Result};
use crate::http::secrets::Secrets;
use crate::profile::BuyerProfile;

/// The name of the cookie that carries the buyer's id, signed.
pub const BUYER_COOKIE: &str = "seatlock.buyer";

/// How long a buyer id lives without a visit: 30 days, so a buyer can come back to their
/// orders. The browser is told so (`Max-Age`), and the server refuses a buyer cookie
/// issued longer ago than this (its signed value says when), so a copy kept past it is
/// worthless.
pub const BUYER_COOKIE_MAX_AGE: cookie::time::Duration = cookie::time::Duration::days(30);

/// A buyer cookie issued longer ago than this is issued again on the answer (same id,
/// issued now): a buyer who visits keeps their id for good, at the cost of at most one
/// `Set-Cookie` a day.
pub const BUYER_COOKIE_RENEW_AFTER: cookie::time::Duration = cookie::time::Duration::days(1);

/// Most had-hold cookies a browser keeps ([`Buyer::remember_hold`]). Each is about 100
/// bytes of the `Cookie` header, so 24 keep it near 2.5 kB, under every proxy's header
/// limit (nginx's 8 kB line, HAProxy's 16 kB buffer), while three events' worth of the
/// default eight seats each are remembered. Past it the oldest is forgotten: a confirm of
/// its lapsed hold then says 403 (never held) instead of 409 `expired`.
pub const MAX_HELD_COOKIES: usize = 24;

/// The start of the name of a had-hold cookie: `seatlock.held.<event>.<seat>`.
const HELD_COOKIE: &str = "seatlock.held.";

/// How long a browser remembers that it held a seat: a day, ample for any hold's TTL.
const HELD_COOKIE_MAX_AGE: cookie::time::Duration = cookie::time::Duration::days(1);

/// Session key of the buyer's name (with their id, so a session cookie paired with
/// another buyer's id names nobody).
const PROFILE: &str = "profile";

/// The keys that sign and verify buyer cookies, had-hold cookies and tickets: one per
/// secret ([`Secrets`]; every server of a deployment must share them), the current one
/// (which signs) first; else one random per process, which suits one process only
/// (another process would see every buyer as new).
#[derive(Clone)]
pub struct Identities {
    keys: Arc<[Key]>,
}

/// A had-hold cookie the request carried: its name, and when it was set (Unix µs;
/// 0 if set before its value said so) if it is this buyer's (`None`: another buyer's, or
/// a forgery). The lowest is forgotten first.
#[derive(Clone, Debug)]
struct HeldCookie {
    name: String,
    set_at: Option<u64>,
}

/// What a request's signed cookies say ([`Identities::read`]).
struct Read {
    /// The buyer id, if a buyer cookie verifies and is not past its maximum age, and
    /// whether to issue it again (renewed, or signed under an accepted secret).
    known: Option<(String, bool)>,
    /// The seats (event, seat) whose had-hold cookie names that id.
    held: HashSet<(i64, i64)>,
    /// Every had-hold cookie of the request, this buyer's or not.
    held_cookies: Vec<HeldCookie>,
    /// This buyer's had-hold cookies signed under an accepted secret: (name, value), to
    /// sign again under the current one.
    resign: Vec<(String, String)>,
    /// The cookies themselves.
    jar: CookieJar,
}

impl Identities {
    /// See the type's docs.
    pub fn new(secrets: Option<&Secrets>) -> Self {
        let keys = match secrets {
            // HKDF-expanded to the 64 bytes the signed jar wants.
            Some(secrets) => secrets
                .all()
                .map(|secret| Key::derive_from(secret.as_bytes()))
                .collect(),
            None => Arc::new([Key::generate()]) as Arc<[Key]>,
        };
        Identities { keys }
    }

    /// The value of cookie `name` of `jar` if its signature verifies under one of the
    /// keys, and whether that key is the current one.
    fn verified(&self, jar: &CookieJar, name: &str) -> Option<(String, bool)> {
        self.keys.iter().enumerate().find_map(|(i, key)| {
            let cookie = jar.signed(key).get(name)?;
            Some((cookie.value().to_owned(), i == 0))
        })
    }

    /// What a request's signed cookies say, at `now` (Unix seconds).
    fn read(&self, headers: &HeaderMap, now: u64) -> Read {
        let mut jar = CookieJar::new();
        for value in headers.get_all(header::COOKIE) {
            let Ok(value) = value.to_str() else { continue };
            for cookie in value.split(';') {
                if let Ok(cookie) = Cookie::parse_encoded(cookie.trim().to_owned()) {
                    jar.add_original(cookie);
                }
            }
        }
        let known = self
            .verified(&jar, BUYER_COOKIE)
            .and_then(|(value, current)| {
                let (id, issued_at) = buyer_value(&value)?;
                // Issued later than a day from now: no server's clock is that far ahead,
                // so it is a copy made to outlive the maximum age. Refused like one past it.
                if issued_at.is_some_and(|at| at > now + seconds(BUYER_COOKIE_RENEW_AFTER)) {
                    return None;
                }
                let age = issued_at.map(|at| now.saturating_sub(at));
                if age.is_some_and(|age| age > seconds(BUYER_COOKIE_MAX_AGE)) {
                    return None;
                }
                let renew =
                    !current || age.is_none_or(|age| age > seconds(BUYER_COOKIE_RENEW_AFTER));
                Some((id.to_owned(), renew))
            });
        let mut read = Read {
            known,
            held: HashSet::new(),
            held_cookies: Vec::new(),
            resign: Vec::new(),
            jar,
        };
        for cookie in read.jar.iter() {
            let Some(rest) = cookie.name().strip_prefix(HELD_COOKIE) else {
                continue;
            };
            let name = cookie.name().to_owned();
            let mine = held_seat(rest)
                .zip(read.known.as_ref())
                .and_then(|(seat, (id, _))| {
                    let (value, current) = self.verified(&read.jar, &name)?;
                    let set_at = held_set_at(&value, id, seat)?;
                    Some((seat, value, current, set_at))
                });
            let set_at = mine.as_ref().map(|(_, _, _, at)| *at);
            if let Some((seat, value, current, _)) = mine {
                read.held.insert(seat);
                if !current {
                    read.resign.push((name.clone(), value));
                }
            }
            read.held_cookies.push(HeldCookie { name, set_at });
        }
        read
    }

    /// `cookie` signed under the current key, as a `Set-Cookie` value (HttpOnly,
    /// SameSite=Lax, path `/`).
    fn signed(&self, cookie: Cookie<'static>) -> Option<HeaderValue> {
        let mut jar = CookieJar::new();
        let mut cookie = cookie;
        cookie.set_path("/");
        cookie.set_http_only(true);
        cookie.set_same_site(cookie::SameSite::Lax);
        jar.signed_mut(&self.keys[0]).add(cookie);
        let signed = jar.delta().next()?.encoded().to_string();
        HeaderValue::from_str(&signed).ok()
    }
}

/// Now since the Unix epoch (zero on a clock before 1970).
fn unix_now() -> std::time::Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// A cookie duration in whole seconds.
fn seconds(duration: cookie::time::Duration) -> u64 {
    u64::try_from(duration.whole_seconds()).unwrap_or(0)
}

/// The value of a buyer cookie: `<id>.<issued at, Unix seconds>`.
fn buyer_cookie_value(id: &str, issued_at: u64) -> String {
    format!("{id}.{issued_at}")
}

/// The buyer id a buyer cookie's value names, and when the cookie was issued (`None`: a
/// value from before it said so, a bare id, taken as issued now and renewed at once).
fn buyer_value(value: &str) -> Option<(&str, Option<u64>)> {
    let (id, issued_at) = match value.split_once('.') {
        Some((id, at)) => (id, Some(at.parse().ok()?)),
        None => (value, None),
    };
    is_buyer_id(id).then_some((id, issued_at))
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
/// from the buyer cookie's value (the signature covers the value alone), then when it was
/// set (Unix µs: finer than a second, so holds taken one after another in the same second
/// are told apart), so the oldest is forgotten first.
fn held_value(buyer_id: &str, (event_id, seat_id): (i64, i64), set_at: u64) -> String {
    format!("{buyer_id}:{event_id}.{seat_id}:{set_at}")
}

/// Whether `value` is `buyer_id`'s had-hold value for `seat` ([`held_value`]): `None` if
/// not, else when it was set (0 for a value from before it said so: the oldest).
fn held_set_at(value: &str, buyer_id: &str, (event_id, seat_id): (i64, i64)) -> Option<u64> {
    let rest = value.strip_prefix(&format!("{buyer_id}:{event_id}.{seat_id}"))?;
    match rest.strip_prefix(':') {
        Some(at) => at.parse().ok(),
        None => rest.is_empty().then_some(0),
    }
}

/// The name of the had-hold cookie of `seat_id` of `event_id`.
fn held_cookie(event_id: i64, seat_id: i64) -> String {
    format!("{HELD_COOKIE}{event_id}.{seat_id}")
}

fn random_id() -> String {
    format!("{:016x}", rand::rng().random::<u64>())
}

/// What [`identify`] puts in each request: the keys, the buyer's id once known (read
/// from the cookie, or minted by the first extractor that needs it), the seats the
/// browser remembers holding and its had-hold cookies, the request's cookies, and the
/// cookies to set on the response.
#[derive(Clone)]
struct Identified {
    identities: Identities,
    id: Arc<OnceLock<String>>,
    held: Arc<HashSet<(i64, i64)>>,
    held_cookies: Arc<[HeldCookie]>,
    jar: Arc<CookieJar>,
    outbox: Arc<Mutex<Vec<HeaderValue>>>,
}

/// Middleware, inside the session layer: reads the buyer's signed cookies; if a handler
/// needed a buyer and the request had none (or one past [`BUYER_COOKIE_MAX_AGE`]), sets
/// the cookie of the id minted for it on the response; renews a known buyer's cookie
/// older than [`BUYER_COOKIE_RENEW_AFTER`], and signs again under the current secret the
/// buyer and had-hold cookies that verified under an accepted one; then adds whatever
/// had-hold cookies the handler set or removed (last, so they win). Requests that never
/// ask who the buyer is (assets, health checks) get no cookie.
pub async fn identify(
    State(identities): State<Identities>,
    mut req: Request,
    next: Next,
) -> Response {
    let now = unix_now().as_secs();
    let read = identities.read(req.headers(), now);
    let id = Arc::new(OnceLock::new());
    if let Some((known, _)) = &read.known {
        let _ = id.set(known.clone());
    }
    let outbox = Arc::new(Mutex::new(Vec::new()));
    req.extensions_mut().insert(Identified {
        identities: identities.clone(),
        id: id.clone(),
        held: Arc::new(read.held),
        held_cookies: read.held_cookies.into(),
        jar: Arc::new(read.jar),
        outbox: outbox.clone(),
    });
    let mut response = next.run(req).await;
    let issue = match (&read.known, id.get()) {
        (Some((known, true)), _) => Some(known),
        (None, Some(minted)) => Some(minted),
        _ => None,
    };
    let mut cookies: Vec<Cookie<'static>> = Vec::new();
    if let Some(id) = issue {
        let value = buyer_cookie_value(id, now);
        cookies.push(
            Cookie::build((BUYER_COOKIE, value))
                .max_age(BUYER_COOKIE_MAX_AGE)
                .into(),
        );
    }
    if read.known.is_some() {
        for (name, value) in read.resign {
            cookies.push(
                Cookie::build((name, value))
                    .max_age(HELD_COOKIE_MAX_AGE)
                    .into(),
            );
        }
    }
    let headers = response.headers_mut();
    for cookie in cookies {
        headers.extend(identities.signed(cookie).map(|c| (header::SET_COOKIE, c)));
    }
    let set = std::mem::take(&mut *outbox.lock().unwrap_or_else(|e| e.into_inner()));
    for cookie in set {
        headers.append(header::SET_COOKIE, cookie);
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

    /// Names the buyer `name` in a new session. The session id is rotated at the same
    /// time, so a session id planted before is worthless afterwards (session fixation).
    /// The buyer id stays. 503 if the session store fails.
    pub async fn set_name(&self, name: &str) -> Result<()> {
        self.session.cycle_id().await.map_err(Error::from)?;
        let profile = BuyerProfile {
            id: self.id.clone(),
            name: name.to_owned(),
        };
        self.session
            .insert(PROFILE, profile)
            .await
            .map_err(Error::from)
    }

    /// The buyer's display name ([`Buyer::profile`]).
    pub async fn name(&self) -> Result<String> {
        Ok(self.profile().await?.name)
    }

    /// The owner token of the buyer's place in event `event_id`'s waiting room: SHA-256
    /// of the buyer's id and the event, so every request of the buyer, on any server,
    /// stands for the same place, with nothing stored. It is not keyed by the secret, so
    /// rotating the secret keeps every admission ([`Secrets`]); it is the buyer's alone
    /// because the id it comes from is, which only a cookie signed by the server presents.
    /// It never leaves the server, and no request can name a token: the server derives it
    /// from the verified id.
    pub fn admission_token(&self, event_id: i64) -> OwnerToken {
        let digest = Sha256::digest(format!("admission\0{event_id}\0{}", self.id));
        OwnerToken::from_string(hex::encode(digest))
    }

    /// Whether the browser remembers holding any seat of `event_id` ([`Buyer::had_hold`]).
    pub fn had_hold_in(&self, event_id: i64) -> bool {
        self.identified
            .held
            .iter()
            .any(|&(event, _)| event == event_id)
    }

    /// Whether the browser remembers holding `seat_id` of `event_id` (a had-hold cookie of
    /// this buyer's, set by [`Buyer::remember_hold`] and not yet forgotten or expired).
    pub fn had_hold(&self, event_id: i64, seat_id: i64) -> bool {
        self.identified.held.contains(&(event_id, seat_id))
    }

    /// Has the browser remember, for a day, that this buyer held `seat_id` of `event_id`
    /// (a signed cookie on this response): only to tell a lapsed hold from none. The
    /// browser keeps at most [`MAX_HELD_COOKIES`] of them: past that, this answer also
    /// has it forget the oldest (another buyer's, or unsigned, before any).
    pub fn remember_hold(&self, event_id: i64, seat_id: i64) {
        let name = held_cookie(event_id, seat_id);
        let mut others: Vec<&HeldCookie> = (self.identified.held_cookies.iter())
            .filter(|held| held.name != name)
            .collect();
        let excess = (others.len() + 1).saturating_sub(MAX_HELD_COOKIES);
        others.sort_by_key(|held| held.set_at);
        for oldest in &others[..excess] {
            self.remove_cookie(oldest.name.clone());
        }
        let set_at = u64::try_from(unix_now().as_micros()).unwrap_or(u64::MAX);
        let value = held_value(&self.id, (event_id, seat_id), set_at);
        self.set_signed_cookie(name, value, HELD_COOKIE_MAX_AGE);
    }

    /// Has the browser forget [`Buyer::remember_hold`]'s cookie (released or bought).
    pub fn forget_hold(&self, event_id: i64, seat_id: i64) {
        if self.had_hold(event_id, seat_id) {
            self.remove_cookie(held_cookie(event_id, seat_id));
        }
    }

    /// The value of the request's cookie `name` if its signature verifies under the
    /// current secret or an accepted one (`None`: absent, or forged). One that verifies
    /// only under an accepted secret is signed again under the current one on this
    /// response, for `max_age`. What the value claims (whose it is, for which subject) is
    /// the caller's to check: the signature covers the value.
    pub fn signed_cookie(&self, name: &str, max_age: cookie::time::Duration) -> Option<String> {
        let identified = &self.identified;
        let (value, current) = identified.identities.verified(&identified.jar, name)?;
        if !current {
            self.set_signed_cookie(name.to_owned(), value.clone(), max_age);
        }
        Some(value)
    }

    /// Sets cookie `name` to `value`, signed under the current secret, for `max_age`, on
    /// this response (HttpOnly, SameSite=Lax, path `/`).
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
