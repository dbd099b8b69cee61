//! The application with etcd as its lease store (`--lease-store-url etcd://…`): a hold and
//! a purchase over HTTP on the one-member etcd of `make test` (`ETCD_URL`), and a
//! three-member cluster whose leader is killed (SIGKILL) while holds exist. Sessions stay
//! in Redis; only the leases move.

use std::time::Duration;

use lease::LeaseStore;
use reqwest::StatusCode;
use seatlock::auction::close::{self, CloseOutcome};
use seatlock::auction::queries;
use seatlock_harness::{
    EtcdCluster, HttpBuyer, TestApp, TestAppBuilder, auction_item, check, end_auction_now,
    etcd_url, eventually, proxy::TcpProxy,
};

/// A test app whose leases live in the etcd at `url`; holds last 10 s (whole seconds:
/// etcd's TTL granularity).
fn on_etcd(url: String) -> TestAppBuilder {
    TestApp::builder().with(move |s| {
        s.lease_store_url = Some(url);
        s.hold_ttl_ms = 10_000;
    })
}

/// A server on [`on_etcd`] over a fresh tiny database.
async fn app_on_etcd(url: String) -> TestApp {
    on_etcd(url).spawn().await.expect("test app on etcd")
}

/// Waits (at most 20 s) until `app`'s `/healthz` says ok.
async fn healthy_again(app: &TestApp) {
    let health = format!("{}/healthz", app.address);
    eventually(Duration::from_secs(20), "/healthz ok", || async {
        HttpBuyer::new()
            .get(&health)
            .await
            .is_ok_and(|reply| reply.status == StatusCode::OK)
    })
    .await;
}

#[tokio::test]
async fn a_seat_is_held_and_sold_over_http_with_the_leases_in_etcd() {
    let app = app_on_etcd(etcd_url().unwrap()).await;
    assert_eq!(app.state.leases.name(), "etcd");
    app.hold_and_sell_one_seat().await;
}

#[tokio::test]
async fn killing_the_etcd_leader_keeps_every_hold_with_its_holder() {
    let mut cluster = EtcdCluster::start(3).await.unwrap();
    let app = app_on_etcd(cluster.url()).await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    let (mut alice, mut bob, mut carol) = (HttpBuyer::new(), HttpBuyer::new(), HttpBuyer::new());
    assert_eq!(
        app.act(&mut alice, event, seats[0], "hold").await.0,
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        app.act(&mut bob, event, seats[1], "hold").await.0,
        StatusCode::SEE_OTHER
    );

    let leader = cluster.leader().await.unwrap();
    cluster.kill(leader);
    let killed_at = tokio::time::Instant::now();
    // Carol tries alice's seat and a free one until the free one is granted: alice's is
    // never granted to her, whatever the cluster is doing meanwhile.
    let mut attempts = 0;
    loop {
        attempts += 1;
        let (status, _) = app.act(&mut carol, event, seats[0], "hold").await;
        assert_ne!(
            status,
            StatusCode::SEE_OTHER,
            "alice's seat was granted to carol"
        );
        if app.act(&mut carol, event, seats[2], "hold").await.0 == StatusCode::SEE_OTHER {
            break;
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(30),
            "no grant 30 s after the leader was killed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "leader m{leader} killed: grants resumed after {:?} ({attempts} rounds of attempts)",
        killed_at.elapsed()
    );

    for seat in [seats[0], seats[1]] {
        let (status, held) = app.act(&mut carol, event, seat, "hold").await;
        assert!(held, "seat {seat} is still held by its holder: {status}");
    }
    let first = app.confirm(&mut alice, event, seats[0]).await;
    let second = app.confirm(&mut bob, event, seats[1]).await;
    assert_ne!(first, second);
    let report = check::check(app.db(), event).await.unwrap();
    assert_eq!(report.double_sold_seats, 0);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

#[tokio::test]
async fn an_auction_takes_a_bid_and_closes_with_its_bid_lock_and_closing_lease_in_etcd() {
    let app = on_etcd(etcd_url().unwrap())
        .no_venues()
        .with(|s| s.close_interval_ms = 0)
        .spawn()
        .await
        .unwrap();
    let id = queries::insert_item(app.db(), &auction_item("Signed poster"))
        .await
        .unwrap()
        .unwrap();
    let page = format!("{}/auctions/{id}", app.address);
    let mut bidder = HttpBuyer::new();
    bidder.get(&page).await.unwrap();
    let bid = bidder
        .post(&format!("{page}/bids"), &[("amount", "12.00")])
        .await
        .unwrap();
    assert_eq!(bid.status, StatusCode::SEE_OTHER, "{}", bid.body);
    end_auction_now(app.db(), id).await;
    let outcomes = close::close_due(&app.state, "closer-etcd").await.unwrap();
    assert!(
        matches!(outcomes.as_slice(), [(item, CloseOutcome::Closed(result))] if *item == id && result == "sold"),
        "{outcomes:?}"
    );
    let item = queries::item(app.db(), id).await.unwrap().unwrap();
    // A lone maximum of $12.00 stands at the starting price.
    assert_eq!(
        (
            item.status.as_str(),
            item.high_bid_cents,
            item.leader_max_cents
        ),
        ("closed", Some(1_000), Some(1_200))
    );
}

/// The server's connection to etcd goes half-open (a dropped flow: [`TcpProxy`] keeps
/// both ends open and passes nothing): the client's HTTP/2 keep-alive notices, a new
/// connection is made, holds are answered again, `/healthz` says ok and the live feed's
/// watch, on the new connection too, reports a new hold.
#[tokio::test]
async fn a_half_open_connection_to_etcd_is_replaced() {
    let url = etcd_url().unwrap();
    let upstream: std::net::SocketAddr = url
        .trim_start_matches("etcd://")
        .split(',')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .parse()
        .unwrap();
    let proxy = TcpProxy::start(upstream).await.unwrap();
    let app = app_on_etcd(format!("etcd://{}", proxy.address)).await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut alice = HttpBuyer::new();
    assert_eq!(
        app.act(&mut alice, event, seats[0], "hold").await.0,
        StatusCode::SEE_OTHER
    );
    proxy.freeze_open_connections();
    // A store that answers: granted, or refused because an attempt that timed out was
    // granted after all.
    eventually(
        Duration::from_secs(20),
        "etcd to answer holds again",
        || async {
            let (status, held) = app
                .act(&mut HttpBuyer::new(), event, seats[1], "hold")
                .await;
            status == StatusCode::SEE_OTHER || held
        },
    )
    .await;
    healthy_again(&app).await;
    // The watch runs on a new connection too: a new hold reaches the live pages.
    let mut page = app
        .state
        .live
        .subscribe(&format!("event:{event}"))
        .expect("a place in the stream budget");
    let (status, _) = app
        .act(&mut HttpBuyer::new(), event, seats[2], "hold")
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let message = page.recv().await.unwrap();
            if message.data["seat"] == seats[2] && message.data["state"] == "held" {
                return;
            }
        }
    })
    .await;
    assert!(seen.is_ok(), "the live feed did not report the new hold");
}

/// etcd hangs (SIGSTOP) past a hold's TTL, then resumes. While it hangs, a hold and
/// `/healthz` answer 503 naming etcd. After it resumes, the holder whose etcd lease ran
/// out while etcd slept confirms while another buyer holds the same seat: whichever
/// order etcd's lapse takes, the seat is sold at most once and `/healthz` says ok again.
#[tokio::test]
async fn etcd_stopped_past_a_holds_ttl_sells_the_seat_at_most_once() {
    let cluster = EtcdCluster::start(1).await.unwrap();
    let app = on_etcd(cluster.url())
        .with(|s| s.hold_ttl_ms = 2_000)
        .spawn()
        .await
        .unwrap();
    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut alice = HttpBuyer::new();
    assert_eq!(
        app.act(&mut alice, event, seats[0], "hold").await.0,
        StatusCode::SEE_OTHER
    );
    let mut bob = HttpBuyer::new(); // has the page (and its form token) before etcd hangs
    bob.get(&format!("{}/events/{event}", app.address))
        .await
        .unwrap();
    cluster.signal(0, "STOP").unwrap();
    let (status, _) = app.act(&mut bob, event, seats[1], "hold").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let health = format!("{}/healthz", app.address);
    let reply = HttpBuyer::new().get(&health).await.unwrap();
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(reply.body.contains("etcd"), "{}", reply.body);
    tokio::time::sleep(Duration::from_secs(3)).await; // past alice's TTL
    cluster.signal(0, "CONT").unwrap();

    let bob_holds = app.act(&mut bob, event, seats[0], "hold");
    let (confirmed, _) = tokio::join!(app.act(&mut alice, event, seats[0], "confirm"), bob_holds);
    assert_ne!(confirmed.0, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(app.orders_for(event, seats[0]).await <= 1);
    assert!(
        check::check(app.db(), event)
            .await
            .unwrap()
            .violations
            .is_empty()
    );
    healthy_again(&app).await;
}

/// The etcd leader hangs (SIGSTOP: its ports stay open, nothing answers) in a
/// three-member cluster. The others elect a leader, and the server routes around the
/// hung member: holds are granted again and keep being granted (ten in a row, each
/// released after), not one request in three timing out on the hung member, and the
/// live feed's watch reports new holds.
#[tokio::test]
async fn a_hung_etcd_leader_is_routed_around() {
    let cluster = EtcdCluster::start(3).await.unwrap();
    let app = app_on_etcd(cluster.url()).await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut alice = HttpBuyer::new();
    assert_eq!(
        app.act(&mut alice, event, seats[0], "hold").await.0,
        StatusCode::SEE_OTHER
    );
    let leader = cluster.leader().await.unwrap();
    cluster.signal(leader, "STOP").unwrap();
    let (mut streak, mut attempts) = (0, 0);
    while streak < 10 {
        attempts += 1;
        assert!(attempts <= 40, "no ten grants in a row in 40 attempts");
        let (status, _) = app.act(&mut alice, event, seats[1], "hold").await;
        if status == StatusCode::SEE_OTHER
            && app.act(&mut alice, event, seats[1], "release").await.0 == StatusCode::SEE_OTHER
        {
            streak += 1;
        } else {
            streak = 0;
        }
    }
    println!("m{leader} hung: ten grants in a row after {attempts} attempts");
    // The live feed's watch, wherever it was, reports holds again.
    let mut page = app
        .state
        .live
        .subscribe(&format!("event:{event}"))
        .expect("a place in the stream budget");
    let seen = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            app.act(&mut alice, event, seats[2], "hold").await;
            app.act(&mut alice, event, seats[2], "release").await;
            while let Ok(Ok(message)) =
                tokio::time::timeout(Duration::from_millis(500), page.recv()).await
            {
                if message.data["seat"] == seats[2] && message.data["state"] == "held" {
                    return;
                }
            }
        }
    })
    .await;
    assert!(seen.is_ok(), "the live feed did not report a new hold");
    cluster.signal(leader, "CONT").unwrap();
}

/// A lease TTL etcd cannot express (not whole seconds) stops the server at start, naming
/// the flag, instead of failing each bid with a 503 later.
#[tokio::test]
async fn a_ttl_etcd_cannot_express_stops_the_start_naming_the_flag() {
    let refused = on_etcd(etcd_url().unwrap())
        .with(|s| s.bid_lock_ttl_ms = 1_500)
        .spawn()
        .await
        .err()
        .expect("the server started with a 1.5 s bid lock on etcd");
    assert!(
        format!("{refused:#}").contains("--bid-lock-ttl-ms 1500"),
        "{refused:#}"
    );
}

/// The waiting room lives beside the seat leases in Redis: on etcd the server refuses
/// `--waiting-room-shoppers` at start, and an event with a room of its own is a 503
/// naming why, never a map that lets everyone shop.
#[tokio::test]
async fn a_waiting_room_on_etcd_is_refused_at_start_and_an_events_own_room_is_a_503() {
    let refused = on_etcd(etcd_url().unwrap())
        .with(|s| s.waiting_room_shoppers = 10)
        .spawn()
        .await
        .err()
        .expect("the server started with a waiting room on etcd");
    assert!(
        format!("{refused:#}").contains("--waiting-room-shoppers needs the Redis lease store"),
        "{refused:#}"
    );
    let app = app_on_etcd(etcd_url().unwrap()).await;
    let (event, _) = app.first_event_seats().await.unwrap();
    sqlx::query("UPDATE events SET waiting_room_shoppers = 1 WHERE id = $1")
        .bind(event)
        .execute(app.db())
        .await
        .unwrap();
    let page = HttpBuyer::new()
        .get(&format!("{}/events/{event}", app.address))
        .await
        .unwrap();
    assert_eq!(page.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(page.body.contains("Redis lease store"), "{}", page.body);
}

/// etcd down when the server starts (its only member killed): the server starts,
/// `/healthz` names etcd, and the seat map (it shows the holds) is a 503, not a 500 or a
/// hang.
#[tokio::test]
async fn a_server_starts_while_etcd_is_down_and_says_so() {
    let mut cluster = EtcdCluster::start(1).await.unwrap();
    cluster.kill(0);
    let app = app_on_etcd(cluster.url()).await;
    let reply = HttpBuyer::new()
        .get(&format!("{}/healthz", app.address))
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(reply.body.contains("etcd"), "{}", reply.body);
    let (event, _) = app.first_event_seats().await.unwrap();
    let page = HttpBuyer::new()
        .get(&format!("{}/events/{event}", app.address))
        .await
        .unwrap();
    assert_eq!(
        page.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        page.body
    );
}

/// etcd lengthens a lease shorter than its minimum (1.5 election timeouts) and says so
/// only in the grant's reply (etcd#6025): with a 5 s election timeout, a 2 s bid lock
/// would last 8 s. The server asks etcd at start and refuses, naming the flag and what
/// etcd grants.
#[tokio::test]
async fn a_ttl_the_running_etcd_would_lengthen_stops_the_start() {
    let etcd = EtcdCluster::start_with(
        1,
        &["--heartbeat-interval", "500", "--election-timeout", "5000"],
    )
    .await
    .unwrap();
    let refused = on_etcd(etcd.url())
        .with(|s| s.bid_lock_ttl_ms = 2_000)
        .spawn()
        .await
        .err()
        .expect("the server started with a 2 s bid lock on an etcd whose minimum is 8 s");
    let refused = format!("{refused:#}");
    assert!(
        refused.contains("--bid-lock-ttl-ms 2000") && refused.contains("at least 8s"),
        "{refused}"
    );
    // Asked for directly, the lease is refused rather than lengthened, and nothing is held.
    let store = etcd.store().await.unwrap();
    let key = lease::LeaseKey::new("test:ttl", "seat-1").unwrap();
    let err = store
        .acquire_all(&lease::Grant::new(
            std::slice::from_ref(&key),
            "a",
            Duration::from_secs(2),
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(err, lease::LeaseError::TtlNotExpressible { .. }),
        "{err}"
    );
    assert!(store.remaining(&key).await.unwrap().is_none());
}

/// Past its backend quota etcd takes only reads and deletes (its NOSPACE alarm), and a
/// read-only check still passes (etcd-io/etcd#8207, #7986). `/readyz` asks for the
/// alarms and names etcd and its NOSPACE alarm; a hold is a 503 that says etcd is out of
/// space, not that it is unavailable.
#[tokio::test]
async fn an_etcd_past_its_quota_is_named_by_readyz_and_a_hold_says_why() {
    let etcd = EtcdCluster::start_with(1, &["--quota-backend-bytes", "4194304"])
        .await
        .unwrap();
    let app = app_on_etcd(etcd.url()).await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut client = etcd_client::Client::connect([etcd.url().trim_start_matches("etcd://")], None)
        .await
        .unwrap();
    let filler = vec![b'x'; 1_000_000];
    for i in 0.. {
        if client
            .put(format!("filler-{i}"), filler.clone(), None)
            .await
            .is_err()
        {
            break;
        }
        assert!(i < 50, "etcd took 50 MB past a 4 MB quota");
    }
    eventually(
        Duration::from_secs(10),
        "/readyz to name etcd's alarm",
        || async {
            let ready = reqwest::get(format!("{}/readyz", app.address))
                .await
                .unwrap();
            ready.status() == StatusCode::SERVICE_UNAVAILABLE && {
                let body = ready.text().await.unwrap();
                body.contains("etcd") && body.contains("NOSPACE alarm")
            }
        },
    )
    .await;
    let reply = HttpBuyer::new()
        .seat_action(&app.address, event, seats[0], "hold")
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(reply.body.contains("etcd, out of space"), "{}", reply.body);
}

/// A group hold on etcd is one txn of two compares per seat: past 63 seats it would pass
/// etcd's 128 operations per txn. The server refuses a per-buyer limit above that at
/// start, and the store refuses such a hold before sending it.
#[tokio::test]
async fn more_seats_than_one_etcd_txn_takes_are_refused_in_words() {
    let refused = on_etcd(etcd_url().unwrap())
        .with(|s| s.max_seats_per_buyer = 64)
        .spawn()
        .await
        .err()
        .expect("the server started with 64 seats per buyer on etcd");
    assert!(
        format!("{refused:#}").contains("--max-seats-per-buyer 64"),
        "{refused:#}"
    );
    let store = lease::etcd::EtcdStore::connect(&etcd_url().unwrap(), Duration::from_secs(2))
        .await
        .unwrap();
    let keys: Vec<lease::LeaseKey> = (0..64)
        .map(|i| lease::LeaseKey::new("test:many", format!("seat-{i}")).unwrap())
        .collect();
    let err = store
        .acquire_all(&lease::Grant::new(&keys, "a", Duration::from_secs(2)))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            lease::LeaseError::TooManyKeys {
                keys: 64,
                limit: 63
            }
        ),
        "{err}"
    );
}

/// Every etcd the project starts compacts its history (scripts/etcd.env), so holds,
/// which each write revisions, never fill it. Here with one second of history kept
/// instead of five minutes: the revisions of earlier holds are compacted away, and holds
/// are granted, and pushed to open pages, as before.
#[tokio::test]
async fn etcd_compacts_the_revisions_of_old_holds_and_holds_go_on() {
    let etcd = EtcdCluster::start_with(1, &["--auto-compaction-retention", "1s"])
        .await
        .unwrap();
    let app = app_on_etcd(etcd.url()).await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut buyer = HttpBuyer::new();
    for &seat in &seats[..3] {
        for action in ["hold", "release"] {
            let (status, _) = app.act(&mut buyer, event, seat, action).await;
            assert_eq!(status, StatusCode::SEE_OTHER, "{action} {seat}");
        }
    }
    let mut client = etcd_client::Client::connect([etcd.url().trim_start_matches("etcd://")], None)
        .await
        .unwrap();
    eventually(
        Duration::from_secs(15),
        "revision 2 to be compacted",
        || {
            let mut client = client.clone();
            async move {
                let old = etcd_client::GetOptions::new().with_revision(2);
                client.get("any", Some(old)).await.is_err()
            }
        },
    )
    .await;
    let mut pushed = app
        .state
        .live
        .subscribe(&format!("event:{event}"))
        .expect("a place in the stream budget");
    let (status, _) = app.act(&mut buyer, event, seats[3], "hold").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let message = tokio::time::timeout(Duration::from_secs(10), pushed.recv())
        .await
        .expect("the hold is pushed")
        .unwrap();
    assert_eq!(message.data["seat"], seats[3], "{message:?}");
    let _ = client.status().await;
}

/// No sale before the on-sale with the leases in etcd (issue 43): a hold three seconds
/// before the on-sale is refused (`not_on_sale`) by the grant's txn, holding nothing; once
/// the on-sale has passed, the first hold opens the sale (the group's `~on-sale` key) and
/// is granted.
#[tokio::test]
async fn on_etcd_nothing_is_held_before_the_on_sale_and_then_it_is() {
    let app = app_on_etcd(etcd_url().unwrap()).await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    app.check_no_hold_before_the_on_sale(event, seats[0], 3)
        .await;
}
