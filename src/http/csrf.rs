//! Cross-site request forgery defences, two layers:
//!
//! 1. Every form carries an `authenticity_token` checked against the CSRF cookie
//!    (axum_csrf's HMAC-signed double-submit cookie) **and bound to the buyer**: the
//!    HMAC key is the server secret joined with the buyer's id, which the buyer's signed
//!    cookie carries (OWASP's signed double submit with a session-dependent value; here
//!    the "session" is the signed id, so checking a form reads no store). A cookie and
//!    token pair minted for one buyer is worthless for another, so a site that can plant
//!    cookies in a victim's browser (a sibling subdomain, a plain-HTTP response) cannot
//!    plant a working pair without planting the buyer cookie too. Pages get their token from [`FormToken`]; handlers get
//!    their form through [`CsrfForm`], which refuses the request before the handler runs.
//! 2. [`refuse_foreign_origin`] refuses any POST whose `Origin` header names another
//!    site, for browsers that send it (all current ones do). Which origin is this site's,
//!    behind a proxy, is [`crate::http::proxy`]'s to say.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRef, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, IntoResponseParts, Response, ResponseParts};
use axum_csrf::{CsrfConfig, CsrfToken};
use rand::Rng;
use rand::distr::Alphanumeric;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::http::error::Error;
use crate::http::ids::{PathId, segment};
use crate::http::proxy::BuyerOrigin;
use crate::http::secrets::Secrets;

/// The CSRF configuration: the cookie settings and the signing secrets (the current one
/// first, then those accepted during a rotation), from which `Csrf::for_buyer` derives
/// each buyer's own.
#[derive(Clone)]
pub struct Csrf {
    // Shared: the CSRF extractors take a copy per request.
    cookie: Arc<CsrfConfig>,
    secrets: Arc<[String]>,
}

impl Csrf {
    /// With `secrets` every server process signs tokens with the current secret and
    /// checks them against each secret, so a form served by one process can be posted to
    /// another, also across a rotation ([`Secrets`]); without them each process makes a
    /// random one and encrypts the cookie with a random key, which suits one process only.
    pub fn new(secrets: Option<&Secrets>) -> Csrf {
        let cookie = CsrfConfig::default()
            .with_cookie_name("seatlock.csrf")
            .with_http_only(true)
            .with_secure(false)
            .with_cookie_same_site(axum_csrf::SameSite::Lax);
        match secrets {
            // The cookie holds a random token in clear; the form carries an HMAC of it,
            // which a cross-site page can neither read nor compute (signed double submit).
            Some(secrets) => Csrf {
                cookie: Arc::new(cookie.with_key(None)),
                secrets: secrets.all().map(str::to_owned).collect(),
            },
            None => Csrf {
                cookie: Arc::new(cookie),
                secrets: Arc::new([random_text()]),
            },
        }
    }

    /// The configuration for the buyer `buyer_id` under `secret`: the form token is
    /// HMAC(secret ":" buyer id, cookie token).
    fn for_buyer(&self, secret: &str, buyer_id: &str) -> CsrfConfig {
        (*self.cookie)
            .clone()
            .with_salt(format!("{secret}:{buyer_id}"))
    }

    /// The CSRF token of the request's buyer ([`crate::http::buyer::buyer_id`], from the
    /// signed buyer cookie, or minted on this request) under `secret`: no store is read
    /// or written.
    async fn token(&self, parts: &mut Parts, secret: &str) -> Result<CsrfToken, Error> {
        let (buyer_id, _) = crate::http::buyer::buyer_id(parts)?;
        let config = self.for_buyer(secret, &buyer_id);
        // (axum_csrf's extractor never fails: a missing cookie gets a new token.)
        CsrfToken::from_request_parts(parts, &config)
            .await
            .map_err(|_| Error::Unavailable("CSRF"))
    }

    /// The secret that signs form tokens.
    fn current(&self) -> &str {
        &self.secrets[0]
    }

    /// The request's CSRF token under each secret, the current one first: a form served
    /// before a rotation, or by a server not restarted yet, verifies under one of them
    /// during the overlap ([`Secrets`]).
    async fn tokens(&self, parts: &mut Parts) -> Result<Vec<CsrfToken>, Error> {
        let mut tokens = Vec::with_capacity(self.secrets.len());
        for secret in self.secrets.iter() {
            tokens.push(self.token(parts, secret).await?);
        }
        Ok(tokens)
    }
}

/// 32 random alphanumeric characters.
fn random_text() -> String {
    rand::rng()
        .sample_iter(&Alphanumeric)
        .take(32)
        .map(char::from)
        .collect()
}

/// A page's CSRF token: `authenticity` goes in its forms; returned with the page (as a
/// response part) it sets the CSRF cookie the token is checked against.
#[derive(Clone)]
pub struct FormToken {
    cookie: CsrfToken,
    /// The value of every form's `authenticity_token` field.
    pub authenticity: String,
}

impl<S> FromRequestParts<S> for FormToken
where
    Csrf: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Error> {
        let csrf = Csrf::from_ref(state);
        let cookie = csrf.token(parts, csrf.current()).await?;
        let authenticity = cookie
            .authenticity_token()
            .map_err(|_| Error::Unavailable("CSRF"))?;
        Ok(FormToken {
            cookie,
            authenticity,
        })
    }
}

impl IntoResponseParts for FormToken {
    type Error = std::convert::Infallible;

    fn into_response_parts(self, res: ResponseParts) -> Result<ResponseParts, Self::Error> {
        self.cookie.into_response_parts(res)
    }
}

/// The form field every POST form carries.
#[derive(Deserialize)]
struct AuthenticityToken {
    authenticity_token: String,
}

/// A urlencoded form of type `T` whose `authenticity_token` field matched the CSRF
/// cookie and the buyer (its body already read whole, within the limit, by
/// [`crate::http::deadline::bound`]). Rejections: 403 for a missing
/// or wrong token, 400 for a form that does not parse as `T`.
pub struct CsrfForm<T>(pub T);

impl<S, T> FromRequest<S> for CsrfForm<T>
where
    Csrf: FromRef<S>,
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = req.into_parts();
        let tokens = Csrf::from_ref(state).tokens(&mut parts).await?;
        let bytes = Bytes::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(|_| Error::form_unreadable())?;
        let sent: AuthenticityToken =
            serde_urlencoded::from_bytes(&bytes).map_err(|_| forbidden())?;
        if !tokens
            .iter()
            .any(|token| token.verify(&sent.authenticity_token).is_ok())
        {
            return Err(forbidden());
        }
        let form = serde_urlencoded::from_bytes(&bytes)
            .map_err(|e| Error::BadRequest(format!("The form is not valid: {e}.")))?;
        Ok(CsrfForm(form))
    }
}

/// A form POST on the resource a path names: the form once its CSRF token checked out
/// ([`CsrfForm`]: 403 otherwise), then the id ([`PathId`]: 400 otherwise). The check
/// comes first, so a form from another site gets 403 whatever its URL.
pub struct CsrfPost<I, T>(pub I, pub T);

impl<S, I, T> FromRequest<S> for CsrfPost<I, T>
where
    Csrf: FromRef<S>,
    S: Send + Sync,
    I: PathId,
    T: DeserializeOwned,
{
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = req.into_parts();
        let raw = segment(&mut parts, I::SEGMENT).await?;
        let CsrfForm(form) =
            CsrfForm::from_request(Request::from_parts(parts, body), state).await?;
        Ok(CsrfPost(I::parse(&raw)?, form))
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

/// Middleware: a POST whose `Origin` header is present and is not the buyer's origin
/// ([`BuyerOrigin`], which [`crate::http::proxy::buyer_origin`] put in the request: the
/// public origin when configured, else what the request and a trusted proxy say) is
/// refused with 403 before any handler runs.
pub async fn refuse_foreign_origin(req: Request, next: Next) -> Response {
    if req.method() == Method::POST
        && let Some(origin) = req.headers().get(header::ORIGIN)
    {
        let admitted = req
            .extensions()
            .get::<BuyerOrigin>()
            .zip(origin.to_str().ok())
            .is_some_and(|(own, sent)| own.admits(sent));
        if !admitted {
            return Error::Forbidden("Cross-site form posts are not accepted.".into())
                .into_response();
        }
    }
    next.run(req).await
}
