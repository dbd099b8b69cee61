//! Behind a reverse proxy that terminates TLS: which origin the buyer's browser is on.
//!
//! This server speaks plain HTTP. A proxy in front of it (nginx, HAProxy, a cloud load
//! balancer) may terminate TLS, and may rewrite `Host` on the way in (nginx's default is
//! `proxy_set_header Host $proxy_host`, the upstream's name). Three things depend on the
//! origin the buyer's browser is on:
//!
//! * the CSRF origin check ([`crate::http::csrf::refuse_foreign_origin`]): a POST's
//!   `Origin` must be this origin;
//! * cookies are `Secure` when the origin is https, so the browser never sends the
//!   session over plain HTTP, and their names are `__Host-` prefixed
//!   ([`HOST_PREFIX`]), so a sibling subdomain or a plain-HTTP page cannot plant one;
//! * `Strict-Transport-Security` ([`HSTS`]) is sent when the origin is https.
//!
//! The origin of a request ([`BuyerOrigin`]) is, in order:
//!
//! 1. `--public-origin` (`https://tickets.example.com`) when it is configured. Nothing
//!    the request says is needed, so a proxy that rewrites `Host` breaks nothing.
//! 2. From a peer in `--trusted-proxies`: `X-Forwarded-Proto`, `X-Forwarded-Host` (else
//!    `Host`) and `X-Forwarded-Port` (for a host written without its port, as nginx's
//!    `$host` is). Of several values, the last: the one the trusted peer itself wrote,
//!    after whatever the client sent (a proxy that appends, as Apache does, keeps the
//!    client's value in front; ASP.NET's forwarded-headers default, one hop). Behind a
//!    chain of proxies, the last one must set the headers, not append to them, or the
//!    public origin be configured (or the last pass on the first one's values).
//! 3. From anyone else: `Host`, scheme unknown. The Origin check then compares hosts
//!    only: a browser on plain HTTP, or behind a TLS proxy that keeps `Host`, passes.
//!
//! A forwarded header from a peer not in `--trusted-proxies` is ignored: any client can
//! send one (RFC 7239 §8, "Security Considerations").

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Uri, header};
use axum::middleware::Next;
use axum::response::Response;

use crate::config::{PublicOrigin, Settings, TrustedProxies, without_default_port};

/// The `Strict-Transport-Security` value sent on https: one year, this host only (the
/// server cannot know whether every subdomain serves https). RFC 6797 §7.2: never sent
/// on plain HTTP, where a browser ignores it anyway.
pub const HSTS: &str = "max-age=31536000";

/// The prefix of every cookie name on https (RFC 6265bis §4.1.3.2): a browser keeps a
/// `__Host-` cookie only if it is `Secure`, for path `/`, with no `Domain`, set by an https
/// page of this very host. So no sibling subdomain (`evil.example.com` setting
/// `Domain=example.com`) and no plain-HTTP answer can set one, and on https the server
/// reads no other: a planted buyer cookie, CSRF cookie or ticket is never seen.
pub const HOST_PREFIX: &str = "__Host-";

/// How this server is reached: the settings [`buyer_origin`] works from.
#[derive(Clone, Debug, Default)]
pub struct Proxying {
    /// `--public-origin`.
    pub public_origin: Option<PublicOrigin>,
    /// `--trusted-proxies`.
    pub trusted_proxies: TrustedProxies,
}

impl Proxying {
    /// `--public-origin` and `--trusted-proxies` of `settings`.
    pub fn of(settings: &Settings) -> Proxying {
        Proxying {
            public_origin: settings.public_origin.clone(),
            trusted_proxies: settings.trusted_proxies.clone().unwrap_or_default(),
        }
    }
}

/// The origin the buyer's browser is on, as far as this request tells (see the module
/// docs for the order of the sources). Put in each request's extensions by
/// [`buyer_origin`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuyerOrigin {
    /// `Some(true)` for https, `Some(false)` for http, `None` when only `Host` is known.
    pub https: Option<bool>,
    /// Host and port, without the scheme's default port; `None` without a `Host`.
    pub authority: Option<String>,
}

impl BuyerOrigin {
    /// The origin of a request from `peer` with `headers`, under `proxying`.
    pub fn of(proxying: &Proxying, peer: Option<IpAddr>, headers: &HeaderMap) -> BuyerOrigin {
        if let Some(public) = &proxying.public_origin {
            return BuyerOrigin {
                https: Some(public.https()),
                authority: Some(public.authority().to_owned()),
            };
        }
        // The last value of the last line: what the nearest hop wrote.
        let last = |name: &str| {
            let value = headers.get_all(name).iter().next_back()?.to_str().ok()?;
            let last = value.rsplit(',').next()?.trim();
            (!last.is_empty()).then(|| last.to_ascii_lowercase())
        };
        let host = last(header::HOST.as_str());
        if peer.is_some_and(|peer| proxying.trusted_proxies.contains(peer)) {
            let https = match last("x-forwarded-proto").as_deref() {
                Some("https") => Some(true),
                Some("http") => Some(false),
                _ => None,
            };
            let port = last("x-forwarded-port").filter(|p| p.parse::<u16>().is_ok());
            let authority = last("x-forwarded-host").or(host).map(|host| {
                // "[::1]" has colons and no port; "[::1]:8443" and "host:8443" have one.
                let has_port = host
                    .rsplit_once(':')
                    .is_some_and(|(_, p)| !p.ends_with(']'));
                let host = match port {
                    Some(port) if !has_port => format!("{host}:{port}"),
                    _ => host,
                };
                without_default_port(https == Some(true), &host)
            });
            return BuyerOrigin { authority, https };
        }
        BuyerOrigin {
            https: None,
            authority: host,
        }
    }

    /// Whether a request whose `Origin` header is `origin` comes from this origin: the
    /// same host and port, and the same scheme when the scheme is known. `null` (an
    /// opaque origin) and anything unparsable never match.
    pub fn admits(&self, origin: &str) -> bool {
        let Ok(uri) = origin.parse::<Uri>() else {
            return false;
        };
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return false,
        };
        let Some(authority) = uri.authority() else {
            return false;
        };
        let sent = without_default_port(https, &authority.as_str().to_ascii_lowercase());
        let expected = self
            .authority
            .as_deref()
            .map(|own| without_default_port(https, own));
        self.https.is_none_or(|own| own == https) && expected.as_deref() == Some(sent.as_str())
    }
}

/// Middleware: finds the request's [`BuyerOrigin`] and puts it in its extensions; on an
/// https origin, hands the app only the request's [`HOST_PREFIX`]ed cookies, under their
/// names without it, and names every cookie the response sets with it, `Secure`, for path
/// `/` and no domain, and adds [`HSTS`]. So the app names its cookies once, whatever the
/// scheme. The peer's address comes from the server loop ([`crate::http::serve`]).
pub async fn buyer_origin(
    State(proxying): State<Proxying>,
    mut request: Request,
    next: Next,
) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| peer.ip());
    let origin = BuyerOrigin::of(&proxying, peer, request.headers());
    let https = origin.https == Some(true);
    request.extensions_mut().insert(origin);
    if https {
        host_only_cookies(request.headers_mut());
    }
    let mut response = next.run(request).await;
    if https {
        secure_cookies(response.headers_mut());
        response
            .headers_mut()
            .entry(header::STRICT_TRANSPORT_SECURITY)
            .or_insert(HeaderValue::from_static(HSTS));
    }
    response
}

/// Keeps of the request's `Cookie` headers only the [`HOST_PREFIX`]ed cookies, named
/// without the prefix, in one `Cookie` header (none if there are none).
fn host_only_cookies(headers: &mut HeaderMap) {
    let kept: Vec<&str> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().strip_prefix(HOST_PREFIX))
        .collect();
    let joined = (!kept.is_empty())
        .then(|| HeaderValue::from_str(&kept.join("; ")).ok())
        .flatten();
    headers.remove(header::COOKIE);
    if let Some(joined) = joined {
        headers.insert(header::COOKIE, joined);
    }
}

/// Names each `Set-Cookie` of `headers` (the session's, the CSRF cookie, whatever sets
/// one) with [`HOST_PREFIX`] and makes it `Secure`, for path `/`, with no domain, as the
/// prefix requires; parsed and written back by the `cookie` crate.
fn secure_cookies(headers: &mut HeaderMap) {
    let cookies: Vec<HeaderValue> = headers
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|value| {
            let Some(mut cookie) = value
                .to_str()
                .ok()
                .and_then(|text| cookie::Cookie::parse(text).ok())
            else {
                return value.clone();
            };
            cookie.set_name(format!("{HOST_PREFIX}{}", cookie.name()));
            cookie.set_secure(true);
            cookie.set_path("/");
            cookie.unset_domain();
            HeaderValue::from_str(&cookie.to_string()).unwrap_or_else(|_| value.clone())
        })
        .collect();
    headers.remove(header::SET_COOKIE);
    for cookie in cookies {
        headers.append(header::SET_COOKIE, cookie);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| {
                (
                    axum::http::HeaderName::from_static(name),
                    HeaderValue::from_str(value).unwrap(),
                )
            })
            .collect()
    }

    fn proxying(public: Option<&str>, trusted: &str) -> Proxying {
        Proxying {
            public_origin: public.map(|p| p.parse().unwrap()),
            trusted_proxies: trusted.parse().unwrap(),
        }
    }

    const PROXY: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 7)));
    const STRANGER: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::new(203, 0, 113, 9)));

    #[test]
    fn the_public_origin_wins_over_a_rewritten_host() {
        let p = proxying(Some("https://tickets.example.com"), "");
        let origin = BuyerOrigin::of(&p, STRANGER, &headers(&[("host", "app-upstream")]));
        assert_eq!(origin.https, Some(true));
        assert!(origin.admits("https://tickets.example.com"));
        assert!(!origin.admits("http://tickets.example.com"), "a downgrade");
        assert!(!origin.admits("https://app-upstream"));
    }

    #[test]
    fn forwarded_headers_count_only_from_a_trusted_proxy() {
        let p = proxying(None, "10.0.0.0/8");
        // A client's own values in front, the proxy's appended after them.
        let sent = headers(&[
            ("host", "app-upstream:3000"),
            ("x-forwarded-proto", "http, https"),
            ("x-forwarded-host", "evil.example, tickets.example.com"),
        ]);
        let through_proxy = BuyerOrigin::of(&p, PROXY, &sent);
        assert_eq!(
            through_proxy,
            BuyerOrigin {
                https: Some(true),
                authority: Some("tickets.example.com".into())
            }
        );
        assert!(through_proxy.admits("https://tickets.example.com"));

        let from_anyone = BuyerOrigin::of(&p, STRANGER, &sent);
        assert_eq!(from_anyone.https, None);
        assert!(!from_anyone.admits("https://tickets.example.com"));
        assert!(from_anyone.admits("http://app-upstream:3000"));
    }

    #[test]
    fn a_forwarded_port_completes_a_host_written_without_one() {
        let p = proxying(None, "10.0.0.0/8");
        let nginx = |host: &str, port: &str| {
            let sent = headers(&[
                ("host", "app-upstream"),
                ("x-forwarded-proto", "https"),
                ("x-forwarded-host", host),
                ("x-forwarded-port", port),
            ]);
            BuyerOrigin::of(&p, PROXY, &sent).authority.unwrap()
        };
        assert_eq!(
            nginx("tickets.example.com", "8443"),
            "tickets.example.com:8443"
        );
        assert_eq!(nginx("tickets.example.com", "443"), "tickets.example.com");
        assert_eq!(
            nginx("tickets.example.com:9000", "8443"),
            "tickets.example.com:9000"
        );
        assert_eq!(nginx("[::1]", "8443"), "[::1]:8443");
        assert_eq!(nginx("tickets.example.com", "x"), "tickets.example.com");
    }

    #[test]
    fn without_configuration_the_host_is_compared_as_before() {
        let origin = BuyerOrigin::of(
            &Proxying::default(),
            None,
            &headers(&[("host", "shop:3000")]),
        );
        assert!(origin.admits("http://shop:3000"));
        assert!(origin.admits("https://shop:3000"));
        assert!(!origin.admits("http://evil:3000"));
        assert!(!origin.admits("null"));
        let no_host = BuyerOrigin::of(&Proxying::default(), None, &HeaderMap::new());
        assert!(!no_host.admits("http://shop:3000"));
    }

    #[test]
    fn on_https_every_cookie_is_host_only_both_ways() {
        let mut h = HeaderMap::new();
        h.append(
            header::SET_COOKIE,
            HeaderValue::from_static("a=1; Path=/; HttpOnly"),
        );
        h.append(
            header::SET_COOKIE,
            HeaderValue::from_static("b=2; Secure; Domain=example.com; Path=/x"),
        );
        secure_cookies(&mut h);
        let set: Vec<&str> = h
            .get_all(header::SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(
            set,
            [
                "__Host-a=1; HttpOnly; Secure; Path=/",
                "__Host-b=2; Secure; Path=/"
            ]
        );

        // A request's cookies: only the prefixed ones reach the app, without the prefix.
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=planted; __Host-a=1"),
        );
        h.append(header::COOKIE, HeaderValue::from_static("__Host-b=2"));
        host_only_cookies(&mut h);
        assert_eq!(h.get_all(header::COOKIE).iter().count(), 1);
        assert_eq!(h[header::COOKIE], "a=1; b=2");
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("a=planted"));
        host_only_cookies(&mut h);
        assert!(h.get(header::COOKIE).is_none());
    }
}
