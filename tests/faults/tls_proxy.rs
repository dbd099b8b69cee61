//! Behind a TLS-terminating proxy that rewrites `Host` (`src/http/proxy.rs`): with the
//! public origin configured, a buyer on https holds and buys, and the session and CSRF
//! cookies are `Secure` with HSTS sent; with the proxy trusted instead, its forwarded
//! headers say the same, while the same headers sent by anyone else change nothing.

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderValue, ORIGIN, SET_COOKIE, STRICT_TRANSPORT_SECURITY};
use seatlock::http::proxy::HSTS;
use seatlock_harness::{HttpBuyer, Reply, ServerProcess, TlsProxy};

use crate::deployment::*;

/// Headers sending `Origin: origin`, as a browser does with each form post.
fn from_origin(origin: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(ORIGIN, HeaderValue::from_str(origin).unwrap());
    headers
}

/// The `Set-Cookie` values of `reply`.
fn set_cookies(reply: &Reply) -> Vec<&str> {
    reply
        .headers
        .get_all(SET_COOKIE)
        .iter()
        .map(|c| c.to_str().unwrap())
        .collect()
}

/// Whether `reply` set cookies (the first page of a session sets two) and marked every
/// one `Secure`, and whether it sent HSTS.
fn secured(reply: &Reply) -> (bool, bool) {
    let cookies = set_cookies(reply);
    let secure = !cookies.is_empty() && cookies.iter().all(|c| c.contains("; Secure"));
    let hsts = reply
        .headers
        .get(STRICT_TRANSPORT_SECURITY)
        .map(|v| v.to_str().unwrap());
    assert!(hsts.is_none() || hsts == Some(HSTS), "{hsts:?}");
    (secure, hsts.is_some())
}

/// A deployment whose server, its settings changed by `adjust` (given the public origin),
/// sits behind a TLS proxy that rewrites `Host`: the deployment, the proxy (its
/// certificate), the server and the public origin `https://127.0.0.1:PORT`.
async fn behind_a_tls_proxy(
    adjust: impl FnOnce(&mut seatlock::config::Settings, &str),
) -> (Deployment, TlsProxy, ServerProcess, String) {
    let d = Deployment::tiny().await;
    let mut proxy = TlsProxy::new().unwrap();
    let public = proxy.address();
    let server = d.server(|s| adjust(s, &public)).await;
    proxy.start(&server.address).await.unwrap();
    (d, proxy, server, public)
}

#[tokio::test]
async fn behind_a_tls_proxy_that_rewrites_host_the_public_origin_makes_forms_work_and_cookies_secure()
 {
    let (d, proxy, _server, public) =
        behind_a_tls_proxy(|s, public| s.public_origin = Some(public.parse().unwrap())).await;

    // The buyer's browser is on https://127.0.0.1:PORT; the server sees Host:
    // seatlock-upstream and plain HTTP.
    let mut buyer = HttpBuyer::trusting(&proxy.certificate, from_origin(&public)).unwrap();
    let page = buyer.get(&d.page(&public)).await.unwrap();
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert_eq!(secured(&page), (true, true), "{:?}", page.headers);
    let hold = act(&buyer, &public, &d, d.seats[0], "hold").await;
    assert_eq!(hold.status, SEE_OTHER, "{}", hold.body);
    let bought = act(&buyer, &public, &d, d.seats[0], "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    d.assert_sold_once_to(d.seats[0], &buyer_id(&page.body))
        .await;

    // A form posted from the upstream's name, or from the http twin of the public
    // origin, is another site's.
    for foreign in [
        format!("http://{}", TlsProxy::UPSTREAM_HOST),
        public.replacen("https", "http", 1),
    ] {
        let tab = buyer.another_tab(from_origin(&foreign));
        let reply = act(&tab, &public, &d, d.seats[1], "hold").await;
        assert_eq!(
            reply.status,
            StatusCode::FORBIDDEN,
            "{foreign}: {}",
            reply.body
        );
    }
    assert!(!d.held(d.seats[1]).await);
}

#[tokio::test]
async fn forwarded_headers_are_believed_from_the_trusted_proxy_alone() {
    let (d, proxy, server, public) =
        behind_a_tls_proxy(|s, _| s.trusted_proxies = Some(TlsProxy::SOURCE.parse().unwrap()))
            .await;

    // Through the proxy: X-Forwarded-Proto and X-Forwarded-Host give the buyer's origin.
    let mut buyer = HttpBuyer::trusting(&proxy.certificate, from_origin(&public)).unwrap();
    let page = buyer.get(&d.page(&public)).await.unwrap();
    assert_eq!(secured(&page), (true, true), "{:?}", page.headers);
    let hold = act(&buyer, &public, &d, d.seats[0], "hold").await;
    assert_eq!(hold.status, SEE_OTHER, "{}", hold.body);

    // Straight to the server from 127.0.0.1, the same headers are anyone's: the session
    // is not marked https, and a form "from" the forwarded host is refused.
    let mut forged = from_origin("https://tickets.example.com");
    forged.insert("x-forwarded-proto", HeaderValue::from_static("https"));
    forged.insert(
        "x-forwarded-host",
        HeaderValue::from_static("tickets.example.com"),
    );
    let mut stranger = HttpBuyer::with_headers(forged);
    let page = stranger.get(&d.page(&server.address)).await.unwrap();
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert_eq!(secured(&page), (false, false), "{:?}", page.headers);
    let reply = act(&stranger, &server.address, &d, d.seats[1], "hold").await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.body);

    // A plain-HTTP buyer of the server itself is served as before.
    let mut direct = HttpBuyer::with_headers(from_origin(&server.address));
    direct.get(&d.page(&server.address)).await.unwrap();
    let reply = act(&direct, &server.address, &d, d.seats[1], "hold").await;
    assert_eq!(reply.status, SEE_OTHER, "{}", reply.body);
}

/// On https every cookie is `__Host-` named, `Secure`, for path `/` and no domain, so a
/// browser takes none from a sibling subdomain or a plain-HTTP page, and the server reads
/// no other. A sibling plants a genuine buyer cookie of its own under the plain name in
/// the victim's browser (`Domain=example.com`, which a `__Host-` name forbids): the
/// victim stays themselves and buys their hold under their own id.
#[tokio::test]
async fn on_https_cookies_are_host_only_and_a_planted_one_is_never_read() {
    use seatlock::http::buyer::BUYER_COOKIE;
    use seatlock::http::proxy::HOST_PREFIX;
    let (d, proxy, _server, public) =
        behind_a_tls_proxy(|s, public| s.public_origin = Some(public.parse().unwrap())).await;
    let browser = || HttpBuyer::trusting(&proxy.certificate, from_origin(&public)).unwrap();
    let host_buyer_cookie = format!("{HOST_PREFIX}{BUYER_COOKIE}");

    let mut planter = browser();
    let page = planter.get(&d.page(&public)).await.unwrap();
    let cookies = set_cookies(&page);
    assert!(cookies.len() >= 2, "{cookies:?}");
    for cookie in &cookies {
        let scoped = cookie.starts_with(HOST_PREFIX)
            && cookie.contains("; Secure")
            && cookie.contains("Path=/")
            && !cookie.to_ascii_lowercase().contains("domain=");
        assert!(scoped, "not host-only: {cookie}");
    }
    let planted = planter.cookie(&public, &host_buyer_cookie).unwrap();

    let mut victim = browser();
    let seen = victim.get(&d.page(&public)).await.unwrap();
    assert_eq!(seen.status, StatusCode::OK, "{}", seen.body);
    let victim_id = buyer_id(&seen.body);
    let seat = d.seats[0];
    assert_eq!(
        act(&victim, &public, &d, seat, "hold").await.status,
        SEE_OTHER
    );
    victim.set_cookie(&public, BUYER_COOKIE, &planted).unwrap();
    let seen = victim.get(&d.page(&public)).await.unwrap();
    assert!(
        seen.body.contains("held for you"),
        "the victim is still themselves"
    );
    let bought = act(&victim, &public, &d, seat, "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    d.assert_sold_once_to(seat, &victim_id).await;
}
