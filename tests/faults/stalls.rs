//! Stalls: a holder that stalls past its lease (SIGSTOP) and wakes, refused by its
//! fencing token (its lease in Redis, or a ZooKeeper session that expires meanwhile); a
//! lock store that stalls under a watchdog.

use std::sync::Arc;
use std::time::Duration;

use lease::zookeeper::ZooKeeperStore;
use lease::{LeaseClient, LeaseKey, LeaseStore, MemoryLedger, WatchdogEvent};
use seatlock::failpoint::PausePoint;
use seatlock::http::error::Refusal;
use seatlock_harness::{RedisServer, TestApp, eventually, zk_url};
use tokio::time::Instant;

use crate::deployment::*;

#[tokio::test]
async fn a_holder_stopped_past_its_lease_is_refused_by_its_fencing_token_when_it_wakes() {
    let d = Deployment::tiny().await;
    stopped_holder_is_refused(&d, async |seat| !d.held(seat).await).await;
}

/// The same on ZooKeeper: the stopped holder's lease is its hold's session, which
/// nothing renews while the process is stopped. ZooKeeper expires it and deletes the
/// hold's znode; the next holder's znode has a later creation zxid, its fencing token,
/// and the woken holder's write with the earlier one is refused by the fence in Postgres.
#[tokio::test]
async fn on_zookeeper_a_holder_whose_session_expired_while_stopped_is_refused_by_its_token() {
    let url = zk_url().unwrap();
    let on_zookeeper = {
        let url = url.clone();
        TestApp::builder().with(move |s| s.lease_store_url = Some(url))
    };
    let d = Deployment::from(on_zookeeper).await;
    let store = ZooKeeperStore::connect(&url, Duration::from_secs(2))
        .await
        .unwrap();
    let lapsed = async |seat| store.remaining(&d.key(seat)).await.unwrap().is_none();
    stopped_holder_is_refused(&d, lapsed).await;
}

/// A holder's confirm is stopped (SIGSTOP of its server) in its payment, past its 2 s
/// hold, until `lapsed(seat)` says the hold is gone; another buyer holds through another
/// server with a greater token and buys; the stopped server wakes and its confirm is
/// refused by its stale fencing token.
async fn stopped_holder_is_refused(d: &Deployment, lapsed: impl AsyncFn(i64) -> bool) {
    // Without cooling: with it the stopped confirm's seat would cool until that confirm's
    // deadline, and nobody would be granted it meanwhile (tests/faults/cooling.rs). This
    // is the article's case, a lock service that grants the seat again at the lapse.
    // (ZooKeeper has no cooling: the flag changes nothing there.)
    let slow = d
        .lab_server(
            |s| s.payment_delay_ms = 3_000,
            |lab| lab.lab_disable_cooling = true,
        )
        .await;
    let other = d.server(|_| {}).await;
    let seat = d.seats[0];
    let (first, _, first_token) = holder(d, &slow.address, seat).await;

    let address = slow.address.clone();
    let (event, confirm_url) = (d.event, format!("/seats/{seat}/confirm"));
    let late = tokio::spawn(async move {
        let url = format!("{address}/events/{event}{confirm_url}");
        first.post(&url, &[]).await.unwrap()
    });
    // The confirm is in its 3 s payment (a second to reach it, two to spare on a busy
    // machine); stop the whole process there, longer than the hold's 2 s lease.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    slow.signal("STOP").unwrap();
    eventually(
        Duration::from_secs(10),
        "the stopped holder's lease to lapse",
        || lapsed(seat),
    )
    .await;

    let (second, second_id, second_token) = holder(d, &other.address, seat).await;
    assert!(second_token > first_token);
    let bought = act(&second, &other.address, d, seat, "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);

    slow.signal("CONT").unwrap();
    let late = late.await.unwrap();
    assert_conflict(&late, Refusal::StaleToken);
    let order = d.assert_sold_once_to(seat, &second_id).await;
    assert_eq!(order.fence_token, second_token);
    let log = std::fs::read_to_string(&slow.log).unwrap();
    assert!(log.contains("stale fencing token"), "{log}");
    d.assert_invariant().await;
}

/// The watchdog keeps time, not a count of failed renewals: with the store suspended
/// (SIGSTOP: connections stay open, nothing answers), it reports the lease lost before the
/// lease can have expired, not after the renewals time out one by one.
#[tokio::test]
async fn a_watchdog_reports_a_stalled_store_as_lost_before_its_lease_can_expire() {
    let redis = RedisServer::start().await.unwrap();
    let store = lease::connect(&redis.url(), Duration::from_secs(2)).unwrap();
    let client = Arc::new(LeaseClient::new(store, MemoryLedger::new()));
    let ttl = Duration::from_secs(3);
    let lease = client
        .acquire(&LeaseKey::new("stall", "close").unwrap(), "closer", ttl)
        .await
        .unwrap();
    let granted_until = lease.expires_at_ms();
    let mut watchdog = client.watch(lease);
    eventually(Duration::from_secs(10), "a renewal", || async {
        matches!(watchdog.status(), WatchdogEvent::Held { expires_at_ms } if expires_at_ms > granted_until)
    })
    .await;
    // The last renewal was sent before now, so the lease lasts at least until now + ttl.
    let renewed_by = Instant::now();
    redis.signal("STOP").unwrap();
    tokio::time::timeout(Duration::from_secs(30), watchdog.lost())
        .await
        .expect("the watchdog reports the loss");
    let reported_at = Instant::now();
    redis.signal("CONT").unwrap();
    assert!(
        reported_at < renewed_by + ttl,
        "lost reported {:?} after the last renewal, the lease lasts {ttl:?}",
        reported_at - renewed_by
    );
}

/// Issue 32, the second path: two confirms of one hold from two tabs. The first stalls
/// before its COMMIT until Postgres cuts its idle transaction off (503); the second,
/// paused before its write, sells after that. The first attempt's failure must not void
/// the payment the second captures. Before, it did: an order with its payment voided.
#[tokio::test]
async fn a_confirm_cut_off_by_postgres_does_not_void_the_payment_a_second_tab_captures() {
    let d = Deployment::tiny().await;
    // Holds long enough for both attempts; the idle bound is half the 2 s store timeout.
    let server = d.server(|s| s.hold_ttl_ms = 10_000).await;
    let seat = d.seats[6];
    let (buyer, id, _) = holder(&d, &server.address, seat).await;
    let url = confirm_url(&d, &server.address, seat);
    // Cut off after 1 s, the first finds out at its COMMIT (1.5 s) and leaves the
    // payment; the second writes after that (2.5 s).
    let stalled = buyer.another_tab(pause_headers(PausePoint::BeforeCommit, 1_500));
    let (first_url, second_url) = (url.clone(), url);
    let first = tokio::spawn(async move { stalled.post(&first_url, &[]).await.unwrap() });
    parked(&server, 1).await;
    let paused = buyer.another_tab(pause_headers(PausePoint::BeforeWrite, 2_500));
    let second = tokio::spawn(async move { paused.post(&second_url, &[]).await.unwrap() });
    parked(&server, 2).await;

    let first = first.await.unwrap();
    assert_eq!(first.status.as_u16(), 503, "cut off by Postgres: {first:?}");
    let second = second.await.unwrap();
    assert_eq!(
        second.status, SEE_OTHER,
        "the second tab buys: {}",
        second.body
    );
    d.assert_sold_once_to(seat, &id).await;
    assert_eq!(d.payments(seat).await, ["captured"]);
    d.assert_no_transaction_left_open().await;
    d.assert_invariant().await;
}
