//! The application with ZooKeeper as its lease store (`--lease-store-url zk://…`): a hold
//! and a purchase over HTTP on the one-member ZooKeeper of `make test` (`ZK_URL`), a race
//! of buyers for one seat, a TTL the server would not grant, who may renew a hold, and a
//! three-member ensemble whose leader is killed (SIGKILL) under traffic. Sessions stay in
//! Redis; only the leases move. The paused holder whose session expires is in
//! tests/faults/stalls.rs.

use std::time::Duration;

use lease::{FencingToken, LeaseError, LeaseKey, LeaseStore};
use reqwest::StatusCode;
use seatlock_harness::{
    HttpBuyer, TestApp, TestAppBuilder, ZooKeeperEnsemble, check, unique_name, zk_url,
};

/// A test app whose leases live in the ZooKeeper at `url`; holds last 10 s.
fn on_zookeeper(url: String) -> TestAppBuilder {
    TestApp::builder().with(move |s| {
        s.lease_store_url = Some(url);
        s.hold_ttl_ms = 10_000;
    })
}

#[tokio::test]
async fn a_seat_is_held_and_sold_over_http_with_the_leases_in_zookeeper() {
    let app = on_zookeeper(zk_url().unwrap()).spawn().await.unwrap();
    assert_eq!(app.state.leases.name(), "zookeeper");
    app.hold_and_sell_one_seat().await;
}

/// Eight buyers press "hold" on the same free seat at once, on each of three seats: the
/// recipe's lowest znode wins, so exactly one of them holds each seat, and when all eight
/// then press "buy", each seat is sold once, to its holder.
#[tokio::test]
async fn a_race_of_eight_buyers_holds_and_sells_each_seat_once() {
    let app = std::sync::Arc::new(on_zookeeper(zk_url().unwrap()).spawn().await.unwrap());
    let (event, seats) = app.first_event_seats().await.unwrap();
    for &seat in &seats[..3] {
        let racers = (0..8).map(|_| {
            let app = app.clone();
            tokio::spawn(async move {
                let mut buyer = HttpBuyer::new();
                let (status, _) = app.act(&mut buyer, event, seat, "hold").await;
                (buyer, status)
            })
        });
        let mut buyers = Vec::new();
        for racer in racers.collect::<Vec<_>>() {
            buyers.push(racer.await.unwrap());
        }
        let holders = buyers
            .iter()
            .filter(|(_, status)| *status == StatusCode::SEE_OTHER)
            .count();
        assert_eq!(holders, 1, "seat {seat}: one hold among eight racers");
        let buys = buyers.into_iter().map(|(mut buyer, _)| {
            let app = app.clone();
            tokio::spawn(async move { app.act(&mut buyer, event, seat, "confirm").await.0 })
        });
        let mut sold = 0;
        for buy in buys.collect::<Vec<_>>() {
            sold += usize::from(buy.await.unwrap() == StatusCode::SEE_OTHER);
        }
        assert_eq!(sold, 1, "seat {seat} is sold once");
        assert_eq!(app.orders_for(event, seat).await, 1);
    }
    let report = check::check(app.db(), event).await.unwrap();
    assert_eq!(report.double_sold_seats, 0);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

/// A hold TTL longer than the server's `maxSessionTimeout` (15 minutes here) would be a
/// session ZooKeeper cuts short: the server refuses to start, naming the flag and what
/// ZooKeeper grants, instead of selling holds that end early.
#[tokio::test]
async fn a_hold_ttl_longer_than_zookeepers_sessions_stops_the_start() {
    let started = TestApp::builder()
        .with(|s| {
            s.lease_store_url = Some(zk_url().unwrap());
            s.hold_ttl_ms = 20 * 60_000;
        })
        .spawn()
        .await;
    let err = format!("{:#}", started.err().expect("the start is refused"));
    assert!(err.contains("--hold-ttl-ms 1200000"), "{err}");
    assert!(err.contains("granted a 900s session"), "{err}");
}

/// A leader killed (SIGKILL) in a three-member ensemble while one caller grants and
/// releases holds in a loop: grants fail while the others elect a leader, then resume,
/// and every fencing token granted (the znode's creation zxid) is above the one before,
/// none repeated; those granted under the new leader carry its epoch (the zxid's high 32
/// bits) and are above every earlier one. A hold granted before the kill is still its
/// holder's after it (the new leader restarts each session's timeout in full).
#[tokio::test]
async fn killing_the_zookeeper_leader_under_traffic_repeats_no_token() {
    let mut ensemble = ZooKeeperEnsemble::start(3).await.unwrap();
    let store = ensemble.store().await.unwrap();
    let group = unique_name("zk_leader");
    let ttl = Duration::from_secs(10);
    let kept = LeaseKey::new(&group, "kept").unwrap();
    let before = store.acquire(&kept, "alice", ttl).await.unwrap();
    let mut tokens = vec![before.fencing_token()];
    let mut granted = 0;
    let grant_once = async |round: usize, tokens: &mut Vec<FencingToken>| {
        let seat = LeaseKey::new(&group, (round % 4).to_string()).unwrap();
        match store.acquire(&seat, "caller", ttl).await {
            Ok(lease) => {
                tokens.push(lease.fencing_token());
                let _ = store.release(&lease).await;
                true
            }
            Err(LeaseError::ZooKeeper(_)) => false,
            Err(other) => panic!("round {round}: {other:?}"),
        }
    };
    for round in 0..10 {
        assert!(grant_once(round, &mut tokens).await, "before the kill");
    }
    let leader = ensemble.leader().await.unwrap();
    ensemble.kill(leader);
    let killed_at = tokio::time::Instant::now();
    let old_epoch = tokens.last().unwrap().0 >> 32;
    let mut round = 10;
    while granted < 10 {
        assert!(
            killed_at.elapsed() < Duration::from_secs(30),
            "10 grants within 30 s of the kill"
        );
        round += 1;
        if grant_once(round, &mut tokens).await {
            granted += 1;
        } else {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    println!(
        "leader m{leader} killed: {granted} grants within {:?}",
        killed_at.elapsed()
    );
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "every token above the one before: {tokens:?}"
    );
    assert!(
        tokens.last().unwrap().0 >> 32 > old_epoch,
        "the new leader's epoch: {tokens:?}"
    );
    assert!(store.is_held(&before).await.unwrap());
    assert!(matches!(
        store.acquire(&kept, "bob", ttl).await,
        Err(LeaseError::Held { holder, .. }) if holder == "alice"
    ));
}

/// A hold's session password stays in the process that granted it: another process (here
/// another store) reads, releases and recovers the hold, but cannot renew it, and says so
/// (`SessionElsewhere`) instead of answering that the hold is gone; the granting process
/// renews it.
#[tokio::test]
async fn only_the_granting_process_renews_a_hold() {
    let url = zk_url().unwrap();
    let timeout = Duration::from_secs(2);
    let granting = lease::zookeeper::ZooKeeperStore::connect(&url, timeout)
        .await
        .unwrap();
    let other = lease::zookeeper::ZooKeeperStore::connect(&url, timeout)
        .await
        .unwrap();
    let seat = LeaseKey::new(unique_name("zk_elsewhere"), "1").unwrap();
    let mut lease = granting
        .acquire(&seat, "alice", Duration::from_secs(5))
        .await
        .unwrap();
    assert!(other.is_held(&lease).await.unwrap());
    let mut recovered = other.owned_by(&seat, "alice").await.unwrap().unwrap();
    assert!(matches!(
        other.renew(&mut recovered).await,
        Err(LeaseError::SessionElsewhere { name }) if name == "1"
    ));
    assert!(granting.renew(&mut lease).await.unwrap());
    assert!(other.release(&recovered).await.unwrap());
    assert!(!granting.renew(&mut lease).await.unwrap());
}
