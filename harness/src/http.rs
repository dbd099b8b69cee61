//! One browser's worth of HTTP for tests and the load test: a cookie jar, the CSRF token
//! of the last page, forms posted exactly as the pages post them.

use std::sync::LazyLock;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::redirect::Policy;
use seatlock::http::error::{REFUSAL_HEADER, Refusal};

/// One browser's worth of HTTP: a cookie jar (session and CSRF cookies), no automatic
/// redirects (tests look at the 303s), and the CSRF token of the last page read.
pub struct HttpBuyer {
    client: reqwest::Client,
    jar: std::sync::Arc<reqwest::cookie::Jar>,
    token: String,
    /// A certificate trusted beyond the system's (a test proxy's own, for https).
    root: Option<reqwest::Certificate>,
    /// Whether `client` is shared with other buyers ([`HttpBuyer::in_a_crowd`]): then it
    /// keeps no cookies, and this buyer's jar is sent and filled by hand.
    shared: bool,
}

/// The TLS setup of every buyer that trusts the system's certificates alone, built once:
/// building one loads those certificates (about 60 ms here), which a crowd of thousands
/// of browsers (`load-test onsale`) cannot pay each. `None` if it cannot be built (each
/// client then builds its own, and says why).
static SYSTEM_TLS: LazyLock<Option<native_tls::TlsConnector>> =
    LazyLock::new(|| native_tls::TlsConnector::new().ok());

/// A response reduced to what tests look at.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: StatusCode,
    /// `Location` header of a redirect, if any.
    pub location: Option<String>,
    /// Body text.
    pub body: String,
    /// The refusal code of a 409 ([`seatlock::http::error::REFUSAL_HEADER`]), e.g. `stale`.
    pub refusal: Option<String>,
    /// Every response header (`Set-Cookie`, `Strict-Transport-Security`, …).
    pub headers: reqwest::header::HeaderMap,
}

impl Reply {
    /// Whether this is a 409 refused for `refusal` (compared by its stable code, not its
    /// wording).
    pub fn is_refused(&self, refusal: &Refusal) -> bool {
        self.status == StatusCode::CONFLICT && self.refusal.as_deref() == Some(refusal.code())
    }
}

impl HttpBuyer {
    /// A new buyer with an empty cookie jar.
    pub fn new() -> Self {
        Self::with_headers(reqwest::header::HeaderMap::new())
    }

    /// A new buyer that sends `headers` with every request (the race lab's pause header).
    pub fn with_headers(headers: reqwest::header::HeaderMap) -> Self {
        Self::build(headers, Default::default(), String::new(), None)
    }

    /// A new buyer of a crowd (`load-test onsale`): its own cookie jar, but the
    /// connections of `client`, shared by the whole crowd. One process here may open
    /// only 20,000 files, and a connection per person, opened and closed as each waits,
    /// left the kernel searching for a free port on every connect. So the crowd's
    /// requests share connections, as a proxy's would. `client` should follow no
    /// redirect and keep no cookies ([`HttpBuyer::crowd_client`]).
    pub fn in_a_crowd(client: &reqwest::Client) -> Self {
        HttpBuyer {
            client: client.clone(),
            jar: std::sync::Arc::default(),
            token: String::new(),
            root: None,
            shared: true,
        }
    }

    /// The client a crowd shares ([`HttpBuyer::in_a_crowd`]): `headers` on every request,
    /// no redirect followed, no cookies kept.
    pub fn crowd_client(headers: reqwest::header::HeaderMap) -> reqwest::Client {
        reqwest::Client::builder()
            .default_headers(headers)
            .redirect(Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .expect("an HTTP client builds")
    }

    /// A request of this buyer: with its cookies, when its client is shared.
    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        use reqwest::cookie::CookieStore;
        let request = self.client.request(method, url);
        match url
            .parse()
            .ok()
            .filter(|_| self.shared)
            .and_then(|u| self.jar.cookies(&u))
        {
            Some(cookies) => request.header(reqwest::header::COOKIE, cookies),
            None => request,
        }
    }

    /// Sends `request` and, when the client is shared, keeps the cookies it sets.
    async fn send(&self, request: reqwest::RequestBuilder) -> anyhow::Result<reqwest::Response> {
        use reqwest::cookie::CookieStore;
        let response = request.send().await?;
        if self.shared {
            let mut set = response
                .headers()
                .get_all(reqwest::header::SET_COOKIE)
                .iter();
            self.jar.set_cookies(&mut set, response.url());
        }
        Ok(response)
    }

    /// A new buyer that trusts `root` (a PEM certificate) for https, as a browser trusts
    /// a site's, and sends `headers` with every request.
    pub fn trusting(root: &[u8], headers: reqwest::header::HeaderMap) -> anyhow::Result<Self> {
        let root = reqwest::Certificate::from_pem(root)?;
        Ok(Self::build(
            headers,
            Default::default(),
            String::new(),
            Some(root),
        ))
    }

    /// Another client of the same browser (the same cookie jar and CSRF token, like a
    /// second tab) that sends `headers` with every request.
    pub fn another_tab(&self, headers: reqwest::header::HeaderMap) -> Self {
        Self::build(
            headers,
            self.jar.clone(),
            self.token.clone(),
            self.root.clone(),
        )
    }

    fn build(
        headers: reqwest::header::HeaderMap,
        jar: std::sync::Arc<reqwest::cookie::Jar>,
        token: String,
        root: Option<reqwest::Certificate>,
    ) -> Self {
        let client = Self::client(&jar, headers, root.as_ref());
        HttpBuyer {
            client,
            jar,
            token,
            root,
            shared: false,
        }
    }

    /// The HTTP client of a buyer: `jar`'s cookies, `headers`, no redirects followed,
    /// `root` trusted for https.
    fn client(
        jar: &std::sync::Arc<reqwest::cookie::Jar>,
        headers: reqwest::header::HeaderMap,
        root: Option<&reqwest::Certificate>,
    ) -> reqwest::Client {
        let mut client = reqwest::Client::builder()
            .default_headers(headers)
            .cookie_provider(jar.clone())
            .redirect(Policy::none())
            .timeout(Duration::from_secs(30));
        match root {
            Some(root) => client = client.add_root_certificate(root.clone()),
            None => {
                if let Some(tls) = &*SYSTEM_TLS {
                    client = client.use_preconfigured_tls(tls.clone());
                }
            }
        }
        client.build().expect("an HTTP client builds")
    }

    /// The value of cookie `name` this buyer would send to `base` (`http://host:port`).
    pub fn cookie(&self, base: &str, name: &str) -> Option<String> {
        self.cookie_header(base)?.split("; ").find_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            (key == name).then(|| value.to_owned())
        })
    }

    /// The `Cookie` header this buyer would send to `base`, if it has cookies there.
    pub fn cookie_header(&self, base: &str) -> Option<String> {
        use reqwest::cookie::CookieStore;
        let header = self.jar.cookies(&base.parse().ok()?)?;
        header.to_str().ok().map(str::to_owned)
    }

    /// Puts cookie `name=value` in the jar for `base`, as if the site had set it (a
    /// planted or stolen cookie, in session tests).
    pub fn set_cookie(&self, base: &str, name: &str, value: &str) -> anyhow::Result<()> {
        let url = base.parse()?;
        self.jar
            .add_cookie_str(&format!("{name}={value}; Path=/; HttpOnly"), &url);
        Ok(())
    }

    /// The CSRF token of the last page read (empty before any).
    pub fn csrf_token(&self) -> &str {
        &self.token
    }

    /// POSTs `body` to `url` as a urlencoded form, exactly as given (no token added):
    /// for oversized or hand-made bodies.
    pub async fn post_raw(&self, url: &str, body: String) -> anyhow::Result<Reply> {
        let request = self
            .request(reqwest::Method::POST, url)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body);
        Self::reply(self.send(request).await?).await
    }

    async fn reply(response: reqwest::Response) -> anyhow::Result<Reply> {
        let status = response.status();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let location = header(reqwest::header::LOCATION.as_str());
        let refusal = header(REFUSAL_HEADER);
        let gzipped = header(reqwest::header::CONTENT_ENCODING.as_str()).as_deref() == Some("gzip");
        let headers = response.headers().clone();
        let bytes = response.bytes().await?;
        // Compressed only when asked (`Accept-Encoding: gzip` in the buyer's headers, as
        // a browser sends it): read as the browser would, decompressed.
        let body = if gzipped {
            let mut text = String::new();
            std::io::Read::read_to_string(
                &mut flate2::read::GzDecoder::new(&bytes[..]),
                &mut text,
            )?;
            text
        } else {
            String::from_utf8_lossy(&bytes).into_owned()
        };
        Ok(Reply {
            status,
            location,
            refusal,
            headers,
            body,
        })
    }

    /// GETs `url` and remembers the page's CSRF token, if it has a form.
    pub async fn get(&mut self, url: &str) -> anyhow::Result<Reply> {
        let request = self.request(reqwest::Method::GET, url);
        let reply = Self::reply(self.send(request).await?).await?;
        if let Some(token) = authenticity_token(&reply.body) {
            self.token = token;
        }
        Ok(reply)
    }

    /// POSTs a form to `url` with the remembered CSRF token and the extra `fields`.
    pub async fn post(&self, url: &str, fields: &[(&str, &str)]) -> anyhow::Result<Reply> {
        let mut form: Vec<(&str, &str)> = vec![("authenticity_token", &self.token)];
        form.extend_from_slice(fields);
        self.post_raw(url, serde_urlencoded::to_string(&form)?)
            .await
    }

    /// GETs the event page `page_url` (as a browser follows a hold's redirect) and reads
    /// the fencing token of this buyer's hold of `seat` ([`hold_token_of`]).
    pub async fn read_hold_token(
        &mut self,
        page_url: &str,
        seat: i64,
    ) -> anyhow::Result<Option<i64>> {
        Ok(hold_token_of(&self.get(page_url).await?.body, seat))
    }

    /// POSTs `action` (`hold`, `release` or `confirm`) for one seat, first opening the
    /// event page (session + CSRF token) if this buyer has read no page yet.
    pub async fn seat_action(
        &mut self,
        base: &str,
        event: i64,
        seat: i64,
        action: &str,
    ) -> anyhow::Result<Reply> {
        if self.token.is_empty() {
            self.get(&format!("{base}/events/{event}")).await?;
        }
        self.post(&format!("{base}/events/{event}/seats/{seat}/{action}"), &[])
            .await
    }
}

impl Default for HttpBuyer {
    fn default() -> Self {
        Self::new()
    }
}

/// The value of the first `authenticity_token` hidden field in an HTML page.
pub fn authenticity_token(html: &str) -> Option<String> {
    let start = html.find("name=\"authenticity_token\" value=\"")? + 33;
    let end = html[start..].find('"')?;
    Some(html[start..start + end].to_owned())
}

/// Whether a seat map's snapshot data (`{"mine": [seat], "held": [seat], "sold": [seat]}`,
/// `src/venue/live.rs`) shows `seat` held, by anyone.
pub fn snapshot_shows_held(data: &str, seat: i64) -> bool {
    let data: serde_json::Value = serde_json::from_str(data).unwrap_or_default();
    (data["held"].as_array()).is_some_and(|held| held.contains(&seat.into()))
}

/// The public buyer id of an event page's viewer (its `data-buyer` attribute).
pub fn page_buyer_id(page: &str) -> Option<String> {
    between(page, "data-buyer=\"", "\"")
}

/// The fencing token of the viewer's first hold, as the event page shows it.
pub fn hold_token(page: &str) -> Option<i64> {
    between(page, "fencing token ", "<")?.trim().parse().ok()
}

/// The fencing token of the viewer's hold of `seat`, as the event page shows it (its
/// `<li class="hold" id="hold-{seat}">`); `None` if the page shows no hold of that seat.
pub fn hold_token_of(page: &str, seat: i64) -> Option<i64> {
    let from = page.find(&format!("id=\"hold-{seat}\""))?;
    // Only this hold's item: a seat not showing a token must not read the next one's.
    let item = &page[from..];
    hold_token(&item[..item.find("</li>")?])
}

/// The text of `text` between the first `start` and the next `end` after it.
pub fn between(text: &str, start: &str, end: &str) -> Option<String> {
    let from = text.find(start)? + start.len();
    let to = text[from..].find(end)?;
    Some(text[from..from + to].to_owned())
}

/// The value of the Prometheus sample `series` (its name, with its labels if any) on
/// the `/metrics` page at `metrics_url`; 0 if the page has no such sample.
pub async fn metric(metrics_url: &str, series: &str) -> anyhow::Result<f64> {
    let page = reqwest::get(metrics_url).await?.text().await?;
    Ok(page
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(Ok(0.0), |value| value.trim().parse())?)
}

/// A server-sent event stream read with a plain HTTP client (tests of live pages).
pub struct EventStream {
    response: reqwest::Response,
    buffer: String,
}

impl EventStream {
    /// Opens the stream at `url` and asserts it answered 200.
    pub async fn open(url: &str) -> EventStream {
        let response = reqwest::get(url).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{url}");
        EventStream {
            response,
            buffer: String::new(),
        }
    }

    /// The stream at `url` as `buyer`'s browser opens it (its cookies sent: a queue
    /// page's stream is the buyer's own). The response, whatever its status, and the
    /// stream once it is 200.
    pub async fn open_as(buyer: &HttpBuyer, url: &str) -> Result<EventStream, StatusCode> {
        let request = buyer.request(reqwest::Method::GET, url);
        let response = buyer.send(request).await.unwrap();
        if response.status() != StatusCode::OK {
            return Err(response.status());
        }
        Ok(EventStream {
            response,
            buffer: String::new(),
        })
    }

    /// The next event's name and data (data lines joined by newlines), within 5 s.
    pub async fn next(&mut self) -> (String, String) {
        tokio::time::timeout(Duration::from_secs(5), self.next_or_end())
            .await
            .expect("an event within 5 s")
            .expect("stream open")
    }

    /// The next event's name and data, or `None` once the server ended the stream.
    pub async fn next_or_end(&mut self) -> Option<(String, String)> {
        async {
            loop {
                if let Some(end) = self.buffer.find("\n\n") {
                    let block: String = self.buffer.drain(..end + 2).collect();
                    let (mut name, mut data) = (String::new(), Vec::new());
                    for line in block.lines() {
                        if let Some(value) = line.strip_prefix("event: ") {
                            name = value.to_owned();
                        } else if let Some(value) = line.strip_prefix("data: ") {
                            data.push(value);
                        }
                    }
                    if !name.is_empty() {
                        return Some((name, data.join("\n")));
                    }
                    continue; // a keep-alive comment
                }
                let chunk = self.response.chunk().await.ok()??;
                self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
            }
        }
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seats_hold_token_is_read_from_that_seats_hold_only() {
        let page = r#"<li class="hold" id="hold-7"><div class="muted">fencing token 41</div></li>
            <li class="hold" id="hold-9"><div class="muted">fencing token 42</div></li>
            <li class="hold" id="hold-11"><div>no token shown</div></li>"#;
        assert_eq!(hold_token_of(page, 9), Some(42));
        assert_eq!(hold_token_of(page, 7), Some(41));
        assert_eq!(hold_token_of(page, 11), None);
        assert_eq!(hold_token_of(page, 12), None);
    }
}
