//! Connections that go quiet the way real networks make them: closed by the server after
//! an idle spell, or half-open (open at both ends, nothing passes). A buyer never sees the
//! store's reconnect after an idle close, and a half-open connection is replaced.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;
use seatlock_harness::http::snapshot_shows_held;
use seatlock_harness::{HttpBuyer, RedisServer, TcpProxy, TestApp, eventually};

use crate::deployment::{follow, shows_sold};

/// A server on a private Redis (optionally behind `proxy`'s address) and a buyer who has
/// read the event page.
pub(crate) async fn scene(
    redis_url: String,
    store_timeout_ms: u64,
) -> (TestApp, HttpBuyer, i64, Vec<i64>) {
    let app = TestApp::builder()
        .redis(redis_url)
        .with(move |s| s.store_timeout_ms = store_timeout_ms)
        .spawn()
        .await
        .unwrap();
    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut buyer = HttpBuyer::new();
    buyer
        .get(&format!("{}/events/{event}", app.address))
        .await
        .unwrap();
    (app, buyer, event, seats)
}

/// A private Redis, a [`TcpProxy`] in front of it, and the proxy's Redis URL.
async fn behind_a_proxy() -> (RedisServer, TcpProxy, String) {
    let redis = RedisServer::start().await.unwrap();
    let upstream = format!("127.0.0.1:{}", redis.port).parse().unwrap();
    let proxy = TcpProxy::start(upstream).await.unwrap();
    let url = format!("redis://{}/", proxy.address);
    (redis, proxy, url)
}

/// Redis closes clients idle for 1 s (`CONFIG SET timeout`, as managed Redis services,
/// NATs and proxies do): the first hold after a quiet spell is granted, not a 503.
#[tokio::test]
async fn the_first_hold_after_redis_closed_an_idle_connection_is_granted() {
    let redis = RedisServer::start().await.unwrap();
    let (app, mut buyer, event, seats) = scene(redis.url(), 2_000).await;
    let first = buyer
        .seat_action(&app.address, event, seats[0], "hold")
        .await;
    assert_eq!(first.unwrap().status, StatusCode::SEE_OTHER);
    let mut admin = lease::connect(&redis.url(), Duration::from_secs(2))
        .unwrap()
        .connection();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("timeout")
        .arg("1")
        .query_async(&mut admin)
        .await
        .unwrap();
    for (round, &seat) in seats[1..4].iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(2_500)).await; // a quiet spell
        let hold = buyer.seat_action(&app.address, event, seat, "hold").await;
        let hold = hold.unwrap();
        assert_eq!(
            hold.status,
            StatusCode::SEE_OTHER,
            "round {round}: {hold:?}"
        );
    }
}

/// The lease store's connection goes half-open (a proxy stops passing bytes but keeps
/// both ends open): the request caught on it times out (503, the store is named), and
/// the next one runs on a new connection, not on the dead one.
#[tokio::test]
async fn a_half_open_redis_connection_is_replaced_after_one_timeout() {
    let (_redis, proxy, url) = behind_a_proxy().await;
    let (app, mut buyer, event, seats) = scene(url, 500).await;
    let first = buyer
        .seat_action(&app.address, event, seats[0], "hold")
        .await;
    assert_eq!(first.unwrap().status, StatusCode::SEE_OTHER);
    proxy.freeze_open_connections();
    let caught = buyer
        .seat_action(&app.address, event, seats[1], "hold")
        .await;
    let caught = caught.unwrap();
    assert_eq!(caught.status, StatusCode::SERVICE_UNAVAILABLE, "{caught:?}");
    assert!(caught.body.contains("Redis"), "{}", caught.body);
    for &seat in &seats[2..5] {
        let hold = buyer.seat_action(&app.address, event, seat, "hold").await;
        let hold = hold.unwrap();
        assert_eq!(hold.status, StatusCode::SEE_OTHER, "{hold:?}");
    }
}

/// The live feed's pub/sub connection goes half-open: the heartbeat finds it dead within
/// seconds, it is replaced, the open pages are told to take a fresh snapshot, and changes
/// made afterwards reach them.
#[tokio::test]
async fn a_half_open_live_feed_is_replaced_and_open_pages_keep_getting_changes() {
    let (_redis, proxy, url) = behind_a_proxy().await;
    let (app, mut buyer, event, seats) = scene(url, 500).await;
    let page = Arc::new(Mutex::new(String::new()));
    let reader = tokio::spawn({
        let (page, url) = (
            page.clone(),
            format!("{}/events/{event}/stream", app.address),
        );
        async move {
            let mut stream = reqwest::get(url).await.unwrap();
            while let Ok(Some(chunk)) = stream.chunk().await {
                page.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&chunk));
            }
        }
    });
    eventually(
        Duration::from_secs(10),
        "the page's first snapshot",
        || async { !page.lock().unwrap().is_empty() },
    )
    .await;
    proxy.freeze_open_connections();
    let seen_before = page.lock().unwrap().len();
    let mut held = None;
    for &seat in &seats[1..8] {
        let hold = buyer.seat_action(&app.address, event, seat, "hold").await;
        if hold.unwrap().status == StatusCode::SEE_OTHER {
            held = Some(seat);
            break;
        }
    }
    let seat = held.expect("a hold is granted once the lease connection is replaced");
    // As a `seat` event, or in the fresh snapshot (`"held": [<seat>, …]`) sent after
    // the feed's reconnection.
    let as_change = format!("\"seat\":{seat}");
    eventually(
        Duration::from_secs(15),
        "the hold to reach the open page",
        || async {
            let page = page.lock().unwrap();
            (page[seen_before..].lines())
                .filter_map(|line| line.strip_prefix("data:"))
                .any(|data| data.contains(&as_change) || snapshot_shows_held(data.trim(), seat))
        },
    )
    .await;
    reader.abort();
}

/// `/healthz` names a live feed that is down, and says `ok` once it is subscribed again.
#[tokio::test]
async fn healthz_names_a_live_feed_that_is_down() {
    let mut redis = RedisServer::start().await.unwrap();
    let (app, mut buyer, _, _) = scene(redis.url(), 500).await;
    let health = format!("{}/healthz", app.address);
    assert_eq!(buyer.get(&health).await.unwrap().body, "ok");
    redis.kill();
    eventually(
        Duration::from_secs(10),
        "healthz to name the feed",
        || async {
            let reply = HttpBuyer::new().get(&health).await.unwrap();
            reply.status == StatusCode::SERVICE_UNAVAILABLE && reply.body.contains("live-redis")
        },
    )
    .await;
    redis.restart_empty().await.unwrap();
    eventually(Duration::from_secs(15), "the feed to come back", || async {
        HttpBuyer::new().get(&health).await.unwrap().body == "ok"
    })
    .await;
}

/// Postgres behind a proxy whose open flows all go half-open at once: the pool's
/// connections and the live feed's LISTEN. The request caught on a silent connection is
/// answered 503 at its deadline (before: it waited until TCP gave up, past the client's
/// 30 s), the silent connections are closed rather than reused, purchases succeed again
/// on new ones, and the LISTEN feed is replaced: a sale made afterwards reaches a page
/// that was open all along.
#[tokio::test]
async fn half_open_postgres_connections_are_cut_off_and_replaced() {
    let (admin, _) = seatlock_harness::store_urls().unwrap();
    let upstream = seatlock_harness::authority(&admin).unwrap();
    let proxy = TcpProxy::start(upstream.parse().unwrap()).await.unwrap();
    let proxied = proxy.address.to_string();
    let app = TestApp::builder()
        .with(move |s| {
            s.store_timeout_ms = 500;
            s.database_url = s.database_url.replacen(&upstream, &proxied, 1);
        })
        .spawn()
        .await
        .unwrap();
    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut buyer = HttpBuyer::new();
    let page_url = format!("{}/events/{event}", app.address);
    buyer.get(&page_url).await.unwrap();
    let (page, reader) = follow(format!("{page_url}/stream"));
    let buy = async |buyer: &mut HttpBuyer, seat: i64| {
        let hold = buyer.seat_action(&app.address, event, seat, "hold").await;
        match hold.unwrap().status {
            StatusCode::SEE_OTHER => {
                buyer
                    .seat_action(&app.address, event, seat, "confirm")
                    .await
            }
            _ => Err(anyhow::anyhow!("hold of seat {seat} not granted")),
        }
    };
    let bought = buy(&mut buyer, seats[0]).await.unwrap();
    assert_eq!(bought.status, StatusCode::SEE_OTHER, "{bought:?}");
    eventually(Duration::from_secs(10), "the live page", || async {
        page.lock()
            .unwrap()
            .contains(&format!("\"seat\":{}", seats[0]))
    })
    .await;

    proxy.freeze_open_connections();
    let seen_before = page.lock().unwrap().len();
    // Used a moment ago, the pooled connection is handed out unchecked: this request is
    // caught on it.
    let caught = buyer.get(&page_url).await.unwrap();
    assert_eq!(caught.status, StatusCode::SERVICE_UNAVAILABLE, "{caught:?}");
    let mut sold = None;
    for &seat in &seats[1..10] {
        if let Ok(reply) = buy(&mut buyer, seat).await
            && reply.status == StatusCode::SEE_OTHER
        {
            sold = Some(seat);
            break;
        }
    }
    let seat = sold.expect("a purchase succeeds on new connections");
    eventually(
        Duration::from_secs(15),
        "the sale to reach the page open all along",
        || async { shows_sold(&page.lock().unwrap()[seen_before..], seat) },
    )
    .await;
    reader.abort();
}
