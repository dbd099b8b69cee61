//! The buyer: an anonymous browser session (tower-sessions, stored in Redis:
//! [`crate::http::sessions`]) with a
//! public id, a display name, and the buyer's current holds.
//!
//! A hold's owner token is kept here, server side, and never sent to the browser: the
//! session is what proves that a release or confirm comes from the holder.

use std::collections::BTreeMap;

use axum::extract::FromRequestParts;
use axum::extract::Request;
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::post;
use axum::{Router, http::HeaderMap};
use lease::{FencingToken, Lease, LeaseKey, OwnerToken};
use rand::Rng;
use serde::{Deserialize, Serialize};
use tower_sessions::Session;

use crate::http::csrf::CsrfForm;
use crate::http::error::{Error, Result};
use crate::profile::BuyerProfile;
use crate::state::AppState;

const BUYER: &str = "buyer";
const HOLDS: &str = "holds";
const ADMISSIONS: &str = "admissions";

/// A hold as the session remembers it: enough to rebuild the [`Lease`]. A copy, not the
/// record: Redis is. An entry can be stale (two requests of one session each save the
/// whole session), so every use is checked against Redis, and a mismatch refreshed from
/// Redis by the buyer's id (see `seats::purchase`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HeldSeat {
    /// The lease's owner token (secret).
    pub owner_token: String,
    /// The grant's fencing token.
    pub fencing_token: u64,
    /// The hold TTL asked for, in milliseconds.
    pub ttl_ms: u64,
    /// Expiry at grant time, Unix ms on the Redis clock.
    pub expires_at_ms: u64,
}

impl HeldSeat {
    /// Remembers a freshly granted lease.
    pub fn from_lease(lease: &Lease) -> Self {
        HeldSeat {
            owner_token: lease.owner().as_str().to_owned(),
            fencing_token: lease.fencing_token().0,
            ttl_ms: lease.ttl().as_millis() as u64,
            expires_at_ms: lease.expires_at_ms(),
        }
    }

    /// The lease this hold stands for, on `key`.
    pub fn lease(&self, key: LeaseKey) -> Lease {
        Lease::from_parts(
            key,
            OwnerToken::from_string(self.owner_token.clone()),
            FencingToken(self.fencing_token),
            std::time::Duration::from_millis(self.ttl_ms),
            self.expires_at_ms,
        )
    }
}

/// The current buyer, extracted from the session; created on first visit. Cheap to clone
/// (the session is shared).
#[derive(Clone)]
pub struct Buyer {
    /// Public id and name.
    pub profile: BuyerProfile,
    session: Session,
    /// Whether this request created the buyer (no session before it).
    new: bool,
}

fn random_id() -> String {
    format!("{:016x}", rand::rng().random::<u64>())
}

impl<S: Send + Sync> FromRequestParts<S> for Buyer {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self> {
        let session = Session::from_request_parts(parts, state)
            .await
            .map_err(|_| Error::Unavailable("the session store"))?;
        let mut new = false;
        let profile = match session
            .get::<BuyerProfile>(BUYER)
            .await
            .map_err(Error::from)?
        {
            Some(profile) => profile,
            None => {
                let id = random_id();
                let profile = BuyerProfile {
                    name: format!("Guest {}", &id[..4].to_uppercase()),
                    id,
                };
                session.insert(BUYER, &profile).await.map_err(Error::from)?;
                new = true;
                profile
            }
        };
        Ok(Buyer {
            profile,
            session,
            new,
        })
    }
}

/// Middleware, outside the session layer. When tower-sessions cannot save a session after
/// the handler ran (the session store, Redis, down or too slow), it answers a bare,
/// bodiless 500; this turns that into the same 503 page as any other unavailable store,
/// naming [`crate::http::error::SESSION_STORE`], so a buyer is told to try again (a confirm tried again
/// finds its order, a hold its lease).
pub async fn session_save_failures(req: Request, next: Next) -> Response {
    let response = next.run(req).await;
    if response.status() == StatusCode::INTERNAL_SERVER_ERROR
        && !response.headers().contains_key(header::CONTENT_TYPE)
    {
        return Error::Unavailable(crate::http::error::SESSION_STORE).into_response();
    }
    response
}

/// Session key of one hold: `"<event>/<seat>"`.
fn hold_key(event_id: i64, seat_id: i64) -> String {
    format!("{event_id}/{seat_id}")
}

impl Buyer {
    /// Whether this request created the buyer: a visitor without a session before it (a
    /// first visit, or a client that keeps no cookies).
    pub fn is_new(&self) -> bool {
        self.new
    }

    /// The public id.
    pub fn id(&self) -> &str {
        &self.profile.id
    }

    async fn holds(&self) -> Result<BTreeMap<String, HeldSeat>> {
        Ok(self
            .session
            .get(HOLDS)
            .await
            .map_err(Error::from)?
            .unwrap_or_default())
    }

    /// The buyer's hold on a seat, if the session has one (it may have lapsed in Redis).
    pub async fn hold(&self, event_id: i64, seat_id: i64) -> Result<Option<HeldSeat>> {
        Ok(self.holds().await?.remove(&hold_key(event_id, seat_id)))
    }

    /// The seats of `event_id` the session remembers holding, in seat order (some may have
    /// lapsed in Redis).
    pub async fn held_seats(&self, event_id: i64) -> Result<Vec<i64>> {
        let prefix = format!("{event_id}/");
        let mut seats: Vec<i64> = self
            .holds()
            .await?
            .keys()
            .filter_map(|key| key.strip_prefix(&prefix)?.parse().ok())
            .collect();
        seats.sort_unstable();
        Ok(seats)
    }

    /// Records a granted hold.
    pub async fn remember_hold(&self, event_id: i64, seat_id: i64, held: HeldSeat) -> Result<()> {
        let mut holds = self.holds().await?;
        holds.insert(hold_key(event_id, seat_id), held);
        self.session.insert(HOLDS, holds).await.map_err(Error::from)
    }

    /// The owner token of the buyer's place in `event_id`'s waiting room: the session's,
    /// else a fresh random one, stored in the session (saved with this request's answer),
    /// so every later request of the buyer, on any server, stands for the same place.
    /// Kept server side like a hold's owner token: whoever knows it may shop with it.
    pub async fn admission_token(&self, event_id: i64) -> Result<OwnerToken> {
        let mut admissions: BTreeMap<i64, String> = self
            .session
            .get(ADMISSIONS)
            .await
            .map_err(Error::from)?
            .unwrap_or_default();
        if let Some(token) = admissions.get(&event_id) {
            return Ok(OwnerToken::from_string(token.clone()));
        }
        let token = OwnerToken::random();
        admissions.insert(event_id, token.as_str().to_owned());
        self.session
            .insert(ADMISSIONS, admissions)
            .await
            .map_err(Error::from)?;
        Ok(token)
    }

    /// Forgets a hold (released, confirmed or lapsed).
    pub async fn forget_hold(&self, event_id: i64, seat_id: i64) -> Result<()> {
        let mut holds = self.holds().await?;
        if holds.remove(&hold_key(event_id, seat_id)).is_some() {
            self.session
                .insert(HOLDS, holds)
                .await
                .map_err(Error::from)?;
        }
        Ok(())
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
    buyer.session.cycle_id().await.map_err(Error::from)?;
    let profile = BuyerProfile {
        id: buyer.profile.id.clone(),
        name: name.to_owned(),
    };
    buyer
        .session
        .insert(BUYER, profile)
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
