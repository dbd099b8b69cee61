//! Hostile input over HTTP: each attack gets a clear 4xx page and leaves nothing
//! half-written (no hold, no order, no bid, no fence ceiling, no renamed buyer). Cases
//! already covered elsewhere are not repeated here: bad ids on the seat pages and others'
//! holds (`tests/seats.rs`: `bad_ids_and_other_buyers_holds_get_clear_4xx_pages`), a
//! missing or forged CSRF token and one foreign Origin on a hold
//! (`posts_without_a_valid_csrf_token_or_from_another_site_are_refused`), and bad bid
//! amounts (`tests/auction.rs`: `bad_amounts_and_ids_get_clear_4xx_pages_and_write_nothing`).

use std::time::Duration;

use redis::AsyncCommands;
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderValue, ORIGIN};
use seatlock::auction::queries::insert_item;
use seatlock::config::Settings;
use seatlock::http::buyer::BUYER_COOKIE;
use seatlock::http::deadline::BODY_LIMIT_BYTES;
use seatlock::http::error::Refusal;
use seatlock::http::sessions::SESSION_COOKIE;
use seatlock_harness::{HttpBuyer, Reply, TestApp, auction_item, eventually};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CSRF_COOKIE: &str = "seatlock.csrf";

/// A server over a fresh tiny database, its settings changed by `adjust`, with one open
/// auction item; returns the app, the event, its seats and the item.
async fn app(adjust: impl FnOnce(&mut Settings) + Send + 'static) -> (TestApp, i64, Vec<i64>, i64) {
    let app = TestApp::builder()
        .with(|s| s.close_interval_ms = 0)
        .with(adjust)
        .spawn()
        .await
        .unwrap();
    let (event, seats) = app.first_event_seats().await.unwrap();
    let item = insert_item(app.db(), &auction_item("Hostile lamp"))
        .await
        .unwrap()
        .unwrap();
    (app, event, seats, item)
}

/// A buyer who has read the event page (session and CSRF token).
async fn visitor(app: &TestApp, event: i64) -> HttpBuyer {
    let mut buyer = HttpBuyer::new();
    let page = buyer
        .get(&format!("{}/events/{event}", app.address))
        .await
        .unwrap();
    assert_eq!(page.status, StatusCode::OK);
    buyer
}

/// A [`visitor`] who holds `seat`.
async fn holding(app: &TestApp, event: i64, seat: i64) -> HttpBuyer {
    let mut buyer = visitor(app, event).await;
    let held = buyer
        .seat_action(&app.address, event, seat, "hold")
        .await
        .unwrap();
    assert_eq!(held.status, StatusCode::SEE_OTHER, "{}", held.body);
    buyer
}

/// Every form of the site, as (path, extra fields): hold, release, confirm, best
/// available, checkout, release all, rename, bid.
fn forms(event: i64, seat: i64, item: i64) -> Vec<(String, Vec<(&'static str, &'static str)>)> {
    let seat = format!("/events/{event}/seats/{seat}");
    vec![
        (format!("{seat}/hold"), vec![]),
        (format!("{seat}/release"), vec![]),
        (format!("{seat}/confirm"), vec![]),
        (
            format!("/events/{event}/best-available"),
            vec![("quantity", "4")],
        ),
        (format!("/events/{event}/checkout"), vec![]),
        (format!("/events/{event}/release-all"), vec![]),
        ("/me".into(), vec![("name", "Mallory")]),
        (format!("/auctions/{item}/bids"), vec![("amount", "50.00")]),
    ]
}

/// `reply` is an HTML page with a message and status `status`.
fn assert_page(reply: &Reply, status: StatusCode, what: &str) {
    assert_eq!(reply.status, status, "{what}: {}", reply.body);
    assert!(
        reply.body.contains("class=\"message\""),
        "{what}: a page with a message: {}",
        reply.body
    );
}

/// Nothing was written anywhere for this app: no live hold in the event, no order, no
/// bid, no fence ceiling, and no buyer renamed.
async fn assert_nothing_written(app: &TestApp, event: i64) {
    let holds = app
        .state
        .leases
        .holders(&app.event_group(event))
        .await
        .unwrap();
    assert!(holds.holdings.is_empty(), "{:?}", holds.holdings);
    for table in ["orders", "bids"] {
        let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(app.db())
            .await
            .unwrap();
        assert_eq!(rows, 0, "{table}");
    }
    let mallory = b"Mallory".as_slice();
    let renamed = sessions(app)
        .await
        .into_iter()
        .filter(|data| data.windows(mallory.len()).any(|w| w == mallory))
        .count();
    assert_eq!(renamed, 0, "no buyer is named Mallory");
}

/// Every session of `app` as Redis has it (MessagePack records).
async fn sessions(app: &TestApp) -> Vec<Vec<u8>> {
    let mut redis = app.state.redis.connection();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(app.session_key("*"))
        .query_async(&mut redis)
        .await
        .unwrap();
    let mut data = Vec::new();
    for key in keys {
        let value: Option<Vec<u8>> = redis.get(key).await.unwrap();
        data.extend(value);
    }
    data
}

/// Whether the session whose cookie value is `sid` is in Redis.
async fn session_exists(app: &TestApp, sid: &str) -> bool {
    let exists: bool = app
        .state
        .redis
        .connection()
        .exists(app.session_key(sid))
        .await
        .unwrap();
    exists
}

/// The lease groups that have a fence ceiling, and the Redis keys of this app's
/// namespace.
async fn lock_state(app: &TestApp) -> (Vec<String>, Vec<String>) {
    let ceilings = sqlx::query_scalar("SELECT lease_group FROM fence_ceilings")
        .fetch_all(app.db())
        .await
        .unwrap();
    let keys = redis::cmd("KEYS")
        .arg(format!("lease:{{{}:*", app.state.settings.lease_namespace))
        .query_async(&mut app.state.redis.connection().clone())
        .await
        .unwrap();
    (ceilings, keys)
}

#[tokio::test]
async fn unknown_and_malformed_ids_get_4xx_pages_and_take_no_lock() {
    let (app, event, seats, item) = app(|_| {}).await;
    let base = &app.address;
    let mut buyer = visitor(&app, event).await;
    for (path, status) in [
        ("/events/99999999999999999999", StatusCode::BAD_REQUEST),
        ("/events/1.5", StatusCode::BAD_REQUEST),
        ("/events/%20", StatusCode::BAD_REQUEST),
        ("/events/0x10", StatusCode::BAD_REQUEST),
        ("/orders/abc", StatusCode::BAD_REQUEST),
        ("/orders/0", StatusCode::BAD_REQUEST),
        ("/orders/999999", StatusCode::NOT_FOUND),
    ] {
        let reply = buyer.get(&format!("{base}{path}")).await.unwrap();
        assert_page(&reply, status, path);
    }
    buyer.get(&format!("{base}/events/{event}")).await.unwrap();
    let known = seats[0];
    for (path, status) in [
        (
            format!("/events/{event}/seats/{known}x/hold"),
            StatusCode::BAD_REQUEST,
        ),
        (
            format!("/events/{event}/seats/-{known}/release"),
            StatusCode::BAD_REQUEST,
        ),
        (
            format!("/events/{event}/seats/0/confirm"),
            StatusCode::BAD_REQUEST,
        ),
        (
            format!("/events/99999999999999999999/seats/{known}/hold"),
            StatusCode::BAD_REQUEST,
        ),
        (
            format!("/events/{}/seats/{known}/hold", event + 1),
            StatusCode::NOT_FOUND,
        ),
        (
            format!("/events/{}/seats/{known}/confirm", event + 1),
            StatusCode::FORBIDDEN,
        ),
        (
            format!("/events/{}/seats/{known}/release", event + 1),
            StatusCode::FORBIDDEN,
        ),
        ("/auctions/999999/bids".into(), StatusCode::NOT_FOUND),
        ("/auctions/999998/bids".into(), StatusCode::NOT_FOUND),
        (
            format!("/auctions/{}/bids", item + 1),
            StatusCode::NOT_FOUND,
        ),
    ] {
        let reply = buyer
            .post(&format!("{base}{path}"), &[("amount", "50")])
            .await
            .unwrap();
        assert_page(&reply, status, &path);
    }
    // A 404 says which part of the path is unknown: the event, or the seat in it.
    for (path, words) in [
        (
            format!("/events/999999/seats/{known}/hold"),
            "There is no such event.",
        ),
        (
            format!("/events/{event}/seats/999999/hold"),
            "This event has no such seat.",
        ),
    ] {
        let reply = buyer.post(&format!("{base}{path}"), &[]).await.unwrap();
        assert_page(&reply, StatusCode::NOT_FOUND, &path);
        assert!(reply.body.contains(words), "{path}: {}", reply.body);
    }
    // Unknown ids took no lock: no fence ceiling reserved, no lease key made.
    let (ceilings, keys) = lock_state(&app).await;
    assert!(ceilings.is_empty(), "{ceilings:?}");
    assert!(keys.is_empty(), "{keys:?}");
    assert_nothing_written(&app, event).await;
}

/// `http://host:port/path` as (`host:port`, `/path`), for a request written by hand.
fn host_and_path(url: &str) -> (&str, &str) {
    let rest = url.strip_prefix("http://").unwrap();
    rest.split_at(rest.find('/').unwrap())
}

/// POSTs `body` to `url` with `Transfer-Encoding: chunked` (no `Content-Length`, so the
/// limit can only be enforced while reading) and the given `Cookie` header; returns the
/// status code.
async fn post_chunked(url: &str, cookie: &str, body: &[u8]) -> u16 {
    let (host, path) = host_and_path(url);
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\nConnection: close\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let mut request = head.into_bytes();
    for chunk in body.chunks(4096) {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    // The server may answer and close before reading it all: a failed write is fine.
    let _ = stream.write_all(&request).await;
    let mut response = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response)).await;
    let response = String::from_utf8_lossy(&response);
    response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {response:?}"))
}

#[tokio::test]
async fn oversized_bodies_get_413_on_every_form_and_change_nothing() {
    let (app, event, seats, item) = app(|_| {}).await;
    let buyer = visitor(&app, event).await;
    let token = buyer.csrf_token().to_owned();
    let cookie = buyer.cookie_header(&app.address).unwrap();
    for (path, fields) in forms(event, seats[0], item) {
        let url = format!("{}{path}", app.address);
        let mut form = vec![("authenticity_token", token.as_str())];
        form.extend(fields);
        let fields = serde_urlencoded::to_string(&form).unwrap();
        let body = format!("{fields}&padding={}", "x".repeat(BODY_LIMIT_BYTES));
        let reply = buyer.post_raw(&url, body.clone()).await.unwrap();
        assert_page(&reply, StatusCode::PAYLOAD_TOO_LARGE, &path);
        assert!(reply.body.contains("too large"), "{}", reply.body);
        assert_eq!(
            post_chunked(&url, &cookie, body.as_bytes()).await,
            413,
            "{path} chunked"
        );
    }
    assert_nothing_written(&app, event).await;
    // Just under the limit is an ordinary form.
    let fields = format!("authenticity_token={}", urlencode(&token));
    let padding = "x".repeat(BODY_LIMIT_BYTES - fields.len() - "&padding=".len());
    let url = format!("{}/events/{event}/seats/{}/hold", app.address, seats[0]);
    let reply = buyer
        .post_raw(&url, format!("{fields}&padding={padding}"))
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
}

fn urlencode(value: &str) -> String {
    serde_urlencoded::to_string([("v", value)]).unwrap()[2..].to_owned()
}

/// The fencing token of the viewer's hold as the event page shows it.
async fn shown_token(buyer: &mut HttpBuyer, app: &TestApp, event: i64) -> i64 {
    let page = buyer
        .get(&format!("{}/events/{event}", app.address))
        .await
        .unwrap()
        .body;
    let from = page.find("fencing token ").expect("a hold on the page") + 14;
    let to = page[from..].find('<').unwrap();
    page[from..from + to].trim().parse().unwrap()
}

#[tokio::test]
async fn a_fencing_token_in_the_form_is_ignored_forged_or_replayed() {
    // Long enough for B's hold to outlive A's refused confirm and B's own on a busy
    // machine; A's lapse is waited for.
    let (app, event, seats, _) = app(|s| s.hold_ttl_ms = 1_000).await;
    let base = &app.address;
    let seat = seats[0];
    let url = |action: &str| format!("{base}/events/{event}/seats/{seat}/{action}");
    let mut a = visitor(&app, event).await;
    let hold = a
        .post(&url("hold"), &[("fencing_token", "999999999")])
        .await
        .unwrap();
    assert_eq!(hold.status, StatusCode::SEE_OTHER);
    let a_token = shown_token(&mut a, &app, event).await;
    assert!(a_token < 999_999_999, "the grant's token comes from Redis");
    let key = app.seat_key(event, seat);
    eventually(Duration::from_secs(5), "A's hold to lapse", || async {
        app.state.leases.remaining(&key).await.unwrap().is_none()
    })
    .await;
    let mut b = visitor(&app, event).await;
    b.post(&url("hold"), &[]).await.unwrap();
    let b_token = shown_token(&mut b, &app, event).await;

    // A claims a token above B's: ignored, A's own (lapsed) hold decides.
    let forged = (b_token + 1_000).to_string();
    let claims = [
        ("fencing_token", forged.as_str()),
        ("fence_token", forged.as_str()),
    ];
    let late = a.post(&url("confirm"), &claims).await.unwrap();
    assert_page(&late, StatusCode::CONFLICT, "forged high token");
    assert!(late.is_refused(&Refusal::HoldExpired), "{late:?}");
    // B claims a token below its own: ignored too, B's grant is what Postgres records.
    let bought = b
        .post(&url("confirm"), &[("fencing_token", "1")])
        .await
        .unwrap();
    assert_eq!(bought.status, StatusCode::SEE_OTHER, "{}", bought.body);
    // A replays its confirm, token claims and all: still nothing.
    let replayed = a.post(&url("confirm"), &claims).await.unwrap();
    assert!(replayed.status.is_client_error(), "{}", replayed.body);
    let orders: Vec<(String, i64)> =
        sqlx::query_as("SELECT buyer_name, fence_token FROM orders WHERE seat_id = $1")
            .bind(seat)
            .fetch_all(app.db())
            .await
            .unwrap();
    assert_eq!(orders.len(), 1);
    assert_eq!(
        orders[0].1, b_token,
        "the order carries B's grant, not a claim"
    );
}

#[tokio::test]
async fn csrf_tokens_of_another_session_and_foreign_origins_are_refused_on_every_form() {
    let (app, event, seats, item) = app(|_| {}).await;
    let a = visitor(&app, event).await;
    let b = visitor(&app, event).await;
    let port = app.address.rsplit(':').next().unwrap().to_owned();
    let origins = [
        "null".to_owned(),
        "http://evil.example".to_owned(),
        format!("http://127.0.0.1:{port}.evil.example"),
        "http://127.0.0.1:1".to_owned(),
    ];
    for (path, fields) in forms(event, seats[0], item) {
        let url = format!("{}{path}", app.address);
        // B's token is valid, but for B's CSRF cookie, not A's.
        let mut form = vec![("authenticity_token", b.csrf_token())];
        form.extend(fields.iter().copied());
        let body = serde_urlencoded::to_string(&form).unwrap();
        let reply = a.post_raw(&url, body).await.unwrap();
        assert_page(&reply, StatusCode::FORBIDDEN, &format!("{path}, B's token"));
        // A's own valid token, from another site.
        for origin in &origins {
            let mut headers = HeaderMap::new();
            headers.insert(ORIGIN, HeaderValue::from_str(origin).unwrap());
            let reply = a.another_tab(headers).post(&url, &fields).await.unwrap();
            assert_page(
                &reply,
                StatusCode::FORBIDDEN,
                &format!("{path} from {origin}"),
            );
            assert!(reply.body.contains("Cross-site"), "{}", reply.body);
        }
    }
    assert_nothing_written(&app, event).await;
}

/// Cookie injection (a sibling subdomain, a plain-HTTP response) lets another site plant
/// its own CSRF cookie in a victim's browser, with the form token that matches it. The
/// token is bound to the session it was minted for, so in the victim's session the pair
/// is refused on every form (before: the cookie and token matched, and the post went
/// through).
#[tokio::test]
async fn a_planted_csrf_cookie_and_its_token_are_refused_in_another_session() {
    let (app, event, seats, item) = app(|_| {}).await;
    let victim = visitor(&app, event).await;
    let attacker = visitor(&app, event).await;
    let planted = attacker.cookie(&app.address, CSRF_COOKIE).unwrap();
    victim
        .set_cookie(&app.address, CSRF_COOKIE, &planted)
        .unwrap();
    assert_eq!(victim.cookie(&app.address, CSRF_COOKIE).unwrap(), planted);
    for (path, fields) in forms(event, seats[0], item) {
        let mut form = vec![("authenticity_token", attacker.csrf_token())];
        form.extend(fields.iter().copied());
        let body = serde_urlencoded::to_string(&form).unwrap();
        let url = format!("{}{path}", app.address);
        let reply = victim.post_raw(&url, body).await.unwrap();
        assert_page(
            &reply,
            StatusCode::FORBIDDEN,
            &format!("{path}, planted pair"),
        );
    }
    assert_nothing_written(&app, event).await;
}

/// A look writes nothing lasting: a visitor who views pages and even holds a seat has no
/// session anywhere (the buyer is a signed cookie, the hold a Redis lease found by the
/// buyer's id), and no cookie carries the hold's owner token. A session is created when
/// the buyer names themselves: one Redis key under the server's namespace, whose TTL is
/// its expiry (a day of inactivity), and no table in Postgres.
#[tokio::test]
async fn a_session_exists_only_once_a_buyer_names_themselves_and_is_a_redis_key_with_a_ttl() {
    let (app, event, seats, _) = app(|_| {}).await;
    let mut buyer = holding(&app, event, seats[0]).await;
    buyer.get(&format!("{}/", app.address)).await.unwrap();
    assert!(
        sessions(&app).await.is_empty(),
        "no session for a look or a hold"
    );
    assert_eq!(buyer.cookie(&app.address, SESSION_COOKIE), None);
    let mut redis = app.state.redis.connection();
    let owner: String = redis
        .get(app.seat_key(event, seats[0]).lease_key())
        .await
        .unwrap();
    assert!(!buyer.cookie_header(&app.address).unwrap().contains(&owner));

    let renamed = buyer
        .post(&format!("{}/me", app.address), &[("name", "Alice")])
        .await
        .unwrap();
    assert_eq!(renamed.status, StatusCode::SEE_OTHER, "{}", renamed.body);
    let sid = buyer.cookie(&app.address, SESSION_COOKIE).unwrap();
    let key = app.session_key(&sid);
    let namespace = app.state.settings.lease_namespace.as_str();
    assert!(key.starts_with(&format!("{namespace}:session:")), "{key}");
    let ttl_ms: i64 = redis.pttl(&key).await.unwrap();
    let day_ms = 24 * 3_600_000;
    assert!(
        (day_ms - 60_000..=day_ms).contains(&ttl_ms),
        "{ttl_ms} ms left"
    );
    let data: Vec<u8> = redis.get(&key).await.unwrap();
    assert!(!data.windows(owner.len()).any(|w| w == owner.as_bytes()));
    let in_postgres: Option<String> =
        sqlx::query_scalar("SELECT to_regnamespace('tower_sessions')::text")
            .fetch_one(app.db())
            .await
            .unwrap();
    assert_eq!(in_postgres, None, "no session table in Postgres");
}

/// Naming yourself rotates the session id: a session cookie planted or copied before is
/// worthless afterwards (the old session is deleted). A session cookie alone was never
/// worth much: the name it holds is shown only to the buyer whose signed cookie it was
/// made for.
#[tokio::test]
async fn naming_yourself_changes_the_session_id_and_the_old_cookie_gets_nothing() {
    let (app, event, seats, _) = app(|_| {}).await;
    let base = &app.address;
    let seat = seats[0];
    let mut victim = holding(&app, event, seat).await;
    let named = victim
        .post(&format!("{base}/me"), &[("name", "Alice")])
        .await
        .unwrap();
    assert_eq!(named.status, StatusCode::SEE_OTHER, "{}", named.body);
    let planted = victim.cookie(base, SESSION_COOKIE).unwrap();
    // The attacker has the victim's session cookie, not their buyer cookie.
    let mut attacker = visitor(&app, event).await;
    attacker.set_cookie(base, SESSION_COOKIE, &planted).unwrap();
    let page = attacker
        .get(&format!("{base}/events/{event}"))
        .await
        .unwrap();
    assert!(!page.body.contains("held for you") && !page.body.contains("Alice"));

    let renamed = victim
        .post(&format!("{base}/me"), &[("name", "Bob")])
        .await
        .unwrap();
    assert_eq!(renamed.status, StatusCode::SEE_OTHER, "{}", renamed.body);
    let fresh = victim.cookie(base, SESSION_COOKIE).unwrap();
    assert_ne!(fresh, planted, "a new session id");
    assert!(
        !session_exists(&app, &planted).await,
        "the old session is deleted"
    );
    for action in ["confirm", "release"] {
        attacker.set_cookie(base, SESSION_COOKIE, &planted).unwrap();
        let reply = attacker
            .seat_action(base, event, seat, action)
            .await
            .unwrap();
        assert_page(&reply, StatusCode::FORBIDDEN, action);
    }
    // The victim keeps its hold, and buys under its new name.
    let bought = victim
        .seat_action(base, event, seat, "confirm")
        .await
        .unwrap();
    assert_eq!(bought.status, StatusCode::SEE_OTHER, "{}", bought.body);
    let name: String = sqlx::query_scalar("SELECT buyer_name FROM orders WHERE seat_id = $1")
        .bind(seat)
        .fetch_one(app.db())
        .await
        .unwrap();
    assert_eq!(name, "Bob");
}

/// The buyer cookie is signed: a browser that sets another buyer's id in it, unsigned or
/// signed with another key, is a new stranger who cannot touch that buyer's hold.
#[tokio::test]
async fn a_forged_buyer_cookie_is_a_new_stranger_who_cannot_touch_the_hold() {
    let (app, event, seats, _) = app(|_| {}).await;
    let base = &app.address;
    let seat = seats[0];
    let mut victim = holding(&app, event, seat).await;
    let page = victim.get(&format!("{base}/events/{event}")).await.unwrap();
    let victim_id = seatlock_harness::http::page_buyer_id(&page.body).unwrap();
    let genuine = victim.cookie(base, BUYER_COOKIE).unwrap();
    // The signed value is the signature then the id: keep the id, break the signature;
    // or send the bare id.
    let forged_signature = format!("{}{victim_id}", "A".repeat(genuine.len() - victim_id.len()));
    for forged in [victim_id.clone(), forged_signature] {
        let mut stranger = visitor(&app, event).await;
        stranger.set_cookie(base, BUYER_COOKIE, &forged).unwrap();
        let page = stranger
            .get(&format!("{base}/events/{event}"))
            .await
            .unwrap();
        assert!(!page.body.contains("held for you"), "a stranger");
        assert_ne!(
            seatlock_harness::http::page_buyer_id(&page.body).as_deref(),
            Some(victim_id.as_str())
        );
        stranger.set_cookie(base, BUYER_COOKIE, &forged).unwrap();
        for action in ["confirm", "release"] {
            let reply = stranger
                .seat_action(base, event, seat, action)
                .await
                .unwrap();
            assert_page(&reply, StatusCode::FORBIDDEN, action);
            stranger.set_cookie(base, BUYER_COOKIE, &forged).unwrap();
        }
    }
    let page = victim.get(&format!("{base}/events/{event}")).await.unwrap();
    assert!(
        page.body.contains("held for you"),
        "the hold is still the victim's"
    );
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(app.db())
        .await
        .unwrap();
    assert_eq!(orders, 0);
}

/// POSTs `body` to `url` with its `Content-Length` and the `Cookie` header, sending
/// `sent` bytes of it `pace` apart and then nothing more; returns the raw response.
async fn post_slowly(url: &str, cookie: &str, body: &[u8], sent: usize, pace: Duration) -> String {
    let (host, path) = host_and_path(url);
    let stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let trickle = body[..sent].to_vec();
    let sending = tokio::spawn(async move {
        writer.write_all(head.as_bytes()).await?;
        for byte in trickle {
            tokio::time::sleep(pace).await;
            writer.write_all(&[byte]).await?;
        }
        // The rest never comes, and the connection stays open.
        tokio::time::sleep(Duration::from_secs(30)).await;
        std::io::Result::Ok(())
    });
    let mut response = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(15), reader.read_to_end(&mut response)).await;
    sending.abort();
    String::from_utf8_lossy(&response).into_owned()
}

/// POSTs the start of a body to `url` with `Expect: 100-continue` and a `Content-Length`
/// of `announced` bytes, and sends nothing more; returns the raw response.
async fn post_announcing(url: &str, cookie: &str, start: &[u8], announced: u64) -> String {
    let (host, path) = host_and_path(url);
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\nExpect: 100-continue\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {announced}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let _ = stream.write_all(start).await;
    let mut response = vec![0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(15), stream.read(&mut response)).await;
    let n = read.expect("an answer").unwrap_or(0);
    String::from_utf8_lossy(&response[..n]).into_owned()
}

/// A body that arrives too slowly, whether it stops half way or trickles a byte at a
/// time, is answered 408 once the header timeout has passed, not a 503 that blames a
/// store at the request's deadline; nothing is written, and the buyer's next try works.
#[tokio::test]
async fn a_body_sent_too_slowly_gets_408_and_changes_nothing() {
    let (app, event, seats, _) = app(|s| s.header_timeout_ms = 1_000).await;
    let buyer = visitor(&app, event).await;
    let cookie = buyer.cookie_header(&app.address).unwrap();
    let url = format!("{}/events/{event}/seats/{}/hold", app.address, seats[0]);
    let body = format!("authenticity_token={}", urlencode(buyer.csrf_token()));
    let half = body.len() / 2;
    for (sent, pace) in [
        (half, Duration::ZERO),
        (body.len() - 1, Duration::from_millis(150)),
    ] {
        let response = post_slowly(&url, &cookie, body.as_bytes(), sent, pace).await;
        assert!(
            response.starts_with("HTTP/1.1 408"),
            "{sent} bytes {pace:?} apart: {response}"
        );
        assert!(response.contains("arrived too slowly"), "{response}");
        let head = response.to_ascii_lowercase();
        assert!(head.contains("\r\nconnection: close\r\n"), "{response}");
    }
    // A body announced over the limit is refused at once: no `100 Continue` invites it,
    // and no timeout is waited for.
    let huge = format!("{body}&padding=");
    let response = post_announcing(&url, &cookie, huge.as_bytes(), 1_000_000_000_000).await;
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    assert_nothing_written(&app, event).await;
    let reply = buyer.post_raw(&url, body).await.unwrap();
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
}

/// Slow clients: connections that send part of their headers and then nothing are closed
/// after the header timeout, which frees their slots for others (at most
/// `max_connections` are served at once), while a live page's event stream, a response
/// that lasts, is not cut.
#[tokio::test]
async fn connections_that_send_part_of_their_headers_are_closed_and_others_served() {
    let (app, event, _, _) = app(|s| {
        s.header_timeout_ms = 500;
        s.max_connections = 20;
        s.max_streams = 10;
    })
    .await;
    let address = app.address.trim_start_matches("http://").to_owned();
    let mut stream = reqwest::get(format!("{}/events/{event}/stream", app.address))
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    let mut slow = Vec::new();
    for _ in 0..40 {
        let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
        socket
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: seatlock\r\nX-Slow: ")
            .await
            .unwrap();
        slow.push(socket);
    }
    // Someone else is served, once the slow connections' slots are freed.
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        HttpBuyer::new().get(&format!("{}/healthz", app.address)),
    )
    .await
    .expect("a normal request is served")
    .unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    // Every slow connection was closed by the server.
    for (n, socket) in slow.iter_mut().enumerate() {
        let mut buffer = [0u8; 512];
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match socket.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {} // hyper may answer 408 first
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "slow connection {n} is still open");
    }
    // The live page's stream outlived the header timeout several times over.
    let first = tokio::time::timeout(Duration::from_secs(5), stream.chunk())
        .await
        .expect("the snapshot")
        .unwrap();
    assert!(first.is_some(), "the stream is open");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let alive = tokio::time::timeout(Duration::from_millis(200), stream.chunk()).await;
    assert!(
        !matches!(alive, Ok(Ok(None) | Err(_))),
        "the event stream was not cut: {alive:?}"
    );
}

/// Lookers never lock out buyers: with every live stream of the budget open
/// (`--max-streams`), one more map's stream is answered at once, 503 with `Retry-After`
/// (its page's script tries again later), while a page view and a hold are served as
/// ever; once a stream ends, the next one is live.
#[tokio::test]
async fn past_the_stream_budget_a_map_is_told_to_retry_and_buyers_are_still_served() {
    let (app, event, seats, _) = app(|s| {
        s.max_connections = 16;
        s.max_streams = 3;
    })
    .await;
    let base = &app.address;
    let stream_url = format!("{base}/events/{event}/stream");
    let mut open = Vec::new();
    for _ in 0..3 {
        let mut stream = reqwest::get(&stream_url).await.unwrap();
        assert_eq!(stream.status(), StatusCode::OK);
        let snapshot = tokio::time::timeout(Duration::from_secs(5), stream.chunk())
            .await
            .expect("a snapshot")
            .unwrap();
        assert!(snapshot.is_some());
        open.push(stream);
    }
    let refused = tokio::time::timeout(Duration::from_secs(5), reqwest::get(&stream_url))
        .await
        .expect("an answer, not a hang")
        .unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers()["retry-after"], "5");
    assert!(
        refused
            .text()
            .await
            .unwrap()
            .contains("catches up in a moment")
    );

    let mut buyer = HttpBuyer::new();
    let page = buyer.get(&format!("{base}/events/{event}")).await.unwrap();
    assert_eq!(page.status, StatusCode::OK);
    let held = buyer
        .seat_action(base, event, seats[0], "hold")
        .await
        .unwrap();
    assert_eq!(held.status, StatusCode::SEE_OTHER, "{}", held.body);

    drop(open.pop());
    eventually(Duration::from_secs(5), "a place in the budget", || async {
        reqwest::get(&stream_url).await.unwrap().status() == StatusCode::OK
    })
    .await;
}

/// A request still in flight when the buyer renames themselves (the session id rotated)
/// neither brings the old session back nor turns the browser into a new buyer: a confirm
/// slow in its payment, renamed under 100 ms later, pays, and the browser opens the order
/// as the same buyer, under the new name.
#[tokio::test]
async fn a_request_in_flight_during_a_rename_does_not_bring_the_old_session_back() {
    let (app, event, seats, _) = app(|s| s.payment_delay_ms = 800).await;
    let base = app.address.clone();
    let mut buyer = holding(&app, event, seats[0]).await;
    let named = buyer
        .post(&format!("{base}/me"), &[("name", "Alice")])
        .await
        .unwrap();
    assert_eq!(named.status, StatusCode::SEE_OTHER, "{}", named.body);
    let old = buyer.cookie(&base, SESSION_COOKIE).unwrap();
    let identity = buyer.cookie(&base, BUYER_COOKIE).unwrap();
    let tab = buyer.another_tab(Default::default());
    let url = format!("{base}/events/{event}/seats/{}/confirm", seats[0]);
    let slow = tokio::spawn(async move { tab.post(&url, &[]).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(100)).await; // the confirm is paying
    let renamed = buyer.post(&format!("{base}/me"), &[("name", "Bob")]).await;
    assert_eq!(renamed.unwrap().status, StatusCode::SEE_OTHER);
    assert_ne!(buyer.cookie(&base, SESSION_COOKIE).unwrap(), old);
    let bought = slow.await.unwrap();
    assert_eq!(bought.status, StatusCode::SEE_OTHER, "{}", bought.body);
    assert!(
        !session_exists(&app, &old).await,
        "the old session stays deleted"
    );
    assert_eq!(
        buyer.cookie(&base, BUYER_COOKIE).unwrap(),
        identity,
        "the same buyer"
    );
    let order: i64 = sqlx::query_scalar("SELECT id FROM orders WHERE seat_id = $1")
        .bind(seats[0])
        .fetch_one(app.db())
        .await
        .unwrap();
    let page = buyer.get(&format!("{base}/orders/{order}")).await.unwrap();
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let page = buyer.get(&format!("{base}/events/{event}")).await.unwrap();
    assert!(page.body.contains("Bob"), "the new name");
    let mut stranger = HttpBuyer::new();
    stranger.set_cookie(&base, SESSION_COOKIE, &old).unwrap();
    let page = stranger
        .get(&format!("{base}/events/{event}"))
        .await
        .unwrap();
    assert!(
        !page.body.contains("Alice") && !page.body.contains("Bob"),
        "the old cookie is a stranger's"
    );
}

/// Every kind of response carries the security headers (`src/http/headers.rs`): a page,
/// a stylesheet, a script, a 404, a 403 refusal, a health check, a live stream. The
/// policy allows no inline script or style, so the event page has none, and its zone
/// colours come from `GET /events/{id}/zones.css` (a stylesheet, refused for an event
/// that does not exist).
#[tokio::test]
async fn every_response_carries_the_security_headers_and_no_page_needs_inline_code() {
    let (app, event, seats, _) = app(|_| {}).await;
    let base = &app.address;
    let client = reqwest::Client::new();
    let get = |path: String| {
        let request = client.get(format!("{base}{path}"));
        async move { request.send().await.unwrap() }
    };
    let foreign = client
        .post(format!("{base}/events/{event}/seats/{}/hold", seats[0]))
        .header(ORIGIN, "http://evil.example")
        .send()
        .await
        .unwrap();
    let mut replies = vec![("a foreign POST".to_string(), foreign)];
    for path in [
        "/".to_string(),
        format!("/events/{event}"),
        format!("/events/{event}/zones.css"),
        "/static/app.js".into(),
        "/static/app.css".into(),
        "/no-such-page".into(),
        "/events/999999/zones.css".into(),
        "/livez".into(),
        "/readyz".into(),
        format!("/events/{event}/stream"),
    ] {
        replies.push((path.clone(), get(path).await));
    }
    for (what, reply) in &replies {
        for (name, value) in seatlock::http::headers::SECURITY_HEADERS {
            assert_eq!(
                reply.headers().get(&name).and_then(|v| v.to_str().ok()),
                Some(value),
                "{what} ({}): {name}",
                reply.status()
            );
        }
    }
    let status = |what: &str| replies.iter().find(|(w, _)| w == what).unwrap().1.status();
    assert_eq!(status("a foreign POST"), StatusCode::FORBIDDEN);
    assert_eq!(status("/no-such-page"), StatusCode::NOT_FOUND);
    assert_eq!(status("/events/999999/zones.css"), StatusCode::NOT_FOUND);

    let page = get(format!("/events/{event}")).await.text().await.unwrap();
    assert!(!page.contains("style="), "an inline style attribute");
    assert!(!page.contains("<style"), "an inline style element");
    let scripts = page.matches("<script").count();
    assert_eq!(
        scripts,
        page.matches("<script src=").count(),
        "an inline script"
    );
    let css = get(format!("/events/{event}/zones.css")).await;
    assert_eq!(css.headers()["content-type"], "text/css; charset=utf-8");
    let css = css.text().await.unwrap();
    for (code, colour) in [("A", "#1d70b8"), ("B", "#00875a")] {
        assert!(
            css.contains(&format!(".swatch.zone-{code} {{ background: {colour}; }}")),
            "{css}"
        );
        assert!(
            css.contains(&format!(".seat.available.z-{code} {{")),
            "{css}"
        );
    }
}

/// On an https origin the answers the app writes before any handler carry HSTS too (issue
/// 43): a body over the limit is a 413 with HSTS and the security headers (it was written
/// outside the layer that adds HSTS). The answers hyper writes itself, before the app (a
/// malformed request: 400; headers past its buffer: 431), are left to the TLS proxy
/// (docs/scale-out.md).
#[tokio::test]
async fn on_https_a_body_too_large_is_a_413_with_hsts() {
    let public = "https://tickets.example";
    let (app, event, seats, _) =
        app(move |s| s.public_origin = Some(public.parse().unwrap())).await;
    let reply = reqwest::Client::new()
        .post(format!(
            "{}/events/{event}/seats/{}/hold",
            app.address, seats[0]
        ))
        .header(ORIGIN, public)
        .body(vec![b'a'; BODY_LIMIT_BYTES + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let header = |name: &reqwest::header::HeaderName| {
        reply
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let hsts = header(&reqwest::header::STRICT_TRANSPORT_SECURITY);
    assert_eq!(hsts.as_deref(), Some(seatlock::http::proxy::HSTS));
    for (name, value) in seatlock::http::headers::SECURITY_HEADERS {
        assert_eq!(header(&name).as_deref(), Some(value), "{name}");
    }
}

/// `value` (a buyer id and when it was issued, Unix seconds) as the buyer cookie a server
/// of the test secret would have set: what a browser keeps, or a thief replays, later.
fn buyer_cookie_issued_at(id: &str, issued_at: i64) -> String {
    let key = cookie::Key::derive_from(seatlock_harness::TEST_SECRET.as_bytes());
    let mut jar = cookie::CookieJar::new();
    let value = format!("{id}.{issued_at}");
    jar.signed_mut(&key)
        .add(cookie::Cookie::new(BUYER_COOKIE, value));
    let pair = jar.delta().next().unwrap().encoded().to_string();
    pair.split_once('=').unwrap().1.to_owned()
}

/// The buyer id a buyer cookie's value names: the 16 hex digits before `.<issued at>`.
fn cookie_buyer_id(value: &str) -> String {
    let (signed, _) = value.rsplit_once('.').expect("<signature><id>.<issued at>");
    signed[signed.len() - 16..].to_owned()
}

/// The value `reply` sets for cookie `name`, if it sets one.
fn set_cookie_value(reply: &Reply, name: &str) -> Option<String> {
    reply
        .headers
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| c.strip_prefix(&format!("{name}=")))
        .map(|rest| rest.split(';').next().unwrap_or_default().to_owned())
}

/// A buyer cookie is bounded in lifetime, by the server: its signed value says when it
/// was issued. One issued two days ago is the same buyer (their hold), issued again on
/// the answer (renewed, so a buyer who keeps coming never ages out); one issued past the
/// maximum age (30 days) is refused whatever the browser kept, as a copy replayed later
/// would be: a stranger, who cannot buy the hold.
#[tokio::test]
async fn a_buyer_cookie_is_renewed_while_used_and_refused_past_its_maximum_age() {
    use seatlock::http::buyer::{BUYER_COOKIE_MAX_AGE, BUYER_COOKIE_RENEW_AFTER};
    let (app, event, seats, _) = app(|_| {}).await;
    let base = &app.address;
    let seat = seats[0];
    let page = format!("{base}/events/{event}");
    let mut buyer = holding(&app, event, seat).await;
    let id = cookie_buyer_id(&buyer.cookie(base, BUYER_COOKIE).unwrap());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;

    let aged = now - 2 * BUYER_COOKIE_RENEW_AFTER.whole_seconds();
    buyer
        .set_cookie(base, BUYER_COOKIE, &buyer_cookie_issued_at(&id, aged))
        .unwrap();
    let seen = buyer.get(&page).await.unwrap();
    assert!(seen.body.contains("held for you"), "the same buyer");
    let renewed = set_cookie_value(&seen, BUYER_COOKIE).expect("renewed on the answer");
    assert_eq!(cookie_buyer_id(&renewed), id);
    let issued: i64 = renewed.rsplit_once('.').unwrap().1.parse().unwrap();
    assert!(issued >= now, "issued now: {issued} < {now}");
    // Renewed once: the next answer sets no buyer cookie.
    let again = buyer.get(&page).await.unwrap();
    assert_eq!(set_cookie_value(&again, BUYER_COOKIE), None);

    // Issued in the future (a server's clock cannot be days ahead): refused, or a copy
    // would outlive the maximum age by as much.
    let ahead = now + 2 * BUYER_COOKIE_RENEW_AFTER.whole_seconds();
    let mut copy = HttpBuyer::new();
    copy.set_cookie(base, BUYER_COOKIE, &buyer_cookie_issued_at(&id, ahead))
        .unwrap();
    let seen = copy.get(&page).await.unwrap();
    assert!(
        !seen.body.contains("held for you"),
        "issued ahead: a stranger"
    );

    let expired = now - BUYER_COOKIE_MAX_AGE.whole_seconds() - 60;
    buyer
        .set_cookie(base, BUYER_COOKIE, &buyer_cookie_issued_at(&id, expired))
        .unwrap();
    let seen = buyer.get(&page).await.unwrap();
    assert!(!seen.body.contains("held for you"), "a stranger");
    let minted = set_cookie_value(&seen, BUYER_COOKIE).expect("a new buyer");
    assert_ne!(cookie_buyer_id(&minted), id);
    let confirm = buyer
        .seat_action(base, event, seat, "confirm")
        .await
        .unwrap();
    assert_page(&confirm, StatusCode::FORBIDDEN, "confirm");
    assert!(app.orders_for(event, seat).await == 0);
}

/// A buyer who leaves many holds behind keeps at most `MAX_HELD_COOKIES` had-hold
/// cookies (one per hold, to tell a lapsed hold from none): the oldest is forgotten, so
/// the `Cookie` header stays far below a proxy's limit (nginx's 8 kB line). The newest
/// lapsed hold is still told `expired`; the oldest, forgotten, as never held (403).
#[tokio::test]
async fn many_lapsed_holds_never_grow_the_cookie_header_past_a_bound() {
    use seatlock::http::buyer::MAX_HELD_COOKIES;
    let (app, event, seats, _) = app(|s| s.max_seats_per_buyer = 100).await;
    let base = &app.address;
    assert!(seats.len() > MAX_HELD_COOKIES, "{} seats", seats.len());
    let mut buyer = visitor(&app, event).await;
    for seat in &seats {
        let held = buyer.seat_action(base, event, *seat, "hold").await.unwrap();
        assert_eq!(held.status, StatusCode::SEE_OTHER, "{}", held.body);
    }
    let header = buyer.cookie_header(base).unwrap();
    let remembered = header
        .split("; ")
        .filter(|c| c.starts_with("seatlock.held."))
        .count();
    assert_eq!(remembered, MAX_HELD_COOKIES, "{header}");
    assert!(header.len() < 4_096, "{} bytes: {header}", header.len());

    let (first, last) = (seats[0], *seats.last().unwrap());
    for seat in [first, last] {
        seatlock_harness::lapse_lease(&app.state.settings.redis_url, &app.seat_key(event, seat))
            .await
            .unwrap();
    }
    let newest = buyer
        .seat_action(base, event, last, "confirm")
        .await
        .unwrap();
    assert!(newest.is_refused(&Refusal::HoldExpired), "{newest:?}");
    let oldest = buyer
        .seat_action(base, event, first, "confirm")
        .await
        .unwrap();
    assert_page(&oldest, StatusCode::FORBIDDEN, "a forgotten hold");
}
