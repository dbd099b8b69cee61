//! The lease store on a Redis Cluster ([`ClusterTopology`]: three masters, three
//! replicas, on free loopback ports): the double-purchase race, a shard's failover that
//! loses a grant (the failover guard per shard), a slot migration under traffic, and the
//! live feed hearing the expiries of every master. Why each holds: `docs/cluster.md`.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use lease::{LeaseClient, LeaseError, LeaseKey, LeaseStore, MemoryLedger};
use seatlock::seats::{self, SeatRef};
use seatlock_harness::cluster::ClusterTopology;
use seatlock_harness::{HttpBuyer, TINY_VENUES, TestApp, eventually, store_urls};

use crate::deployment::*;
use crate::failover::{Outcome, guarded_server, pushed_lapse};
use crate::traffic::*;

/// A deployment on a new cluster; its servers' holds last `hold_ttl_ms`.
async fn on_cluster() -> (ClusterTopology, Deployment) {
    let cluster = ClusterTopology::start().await.unwrap();
    let (admin, _) = store_urls().unwrap();
    let d = Deployment::new(&admin, &cluster.url(), TINY_VENUES).await;
    (cluster, d)
}

/// Whether the node on loopback `port` serves `key` and has it (asked of that node
/// alone: a node that does not serve its slot answers `MOVED`).
async fn exists_on(port: u16, key: &str) -> bool {
    let mut node = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    match redis::cmd("EXISTS")
        .arg(key)
        .query_async::<bool>(&mut node)
        .await
    {
        Err(err) if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::Moved) => false,
        other => other.unwrap(),
    }
}

/// A seat's key in an event group (of `namespace`, an event id not in the database) whose
/// slot the master on `port` serves: another shard than a deployment's event.
async fn group_on(
    cluster: &ClusterTopology,
    namespace: &seatlock::config::LeaseNamespace,
    port: u16,
) -> LeaseKey {
    for event_id in 1_000_000.. {
        let seat = SeatRef {
            event_id,
            seat_id: 1,
        };
        let key = seats::lease_key(namespace, seat);
        if cluster.master_of(&key.lease_key()).await.unwrap() == port {
            return key;
        }
    }
    unreachable!("some group lands on every master")
}

/// Many buyers on two servers race for the same four seats on a cluster: each seat is
/// sold once, the hold is on the master of the event's slot, and the race lab's checker
/// finds nothing.
#[tokio::test]
async fn on_a_cluster_racing_buyers_sell_each_seat_once() {
    let (cluster, d) = on_cluster().await;
    // Holds long enough to be looked at on a busy machine.
    let long = |s: &mut seatlock::config::Settings| s.hold_ttl_ms = 30_000;
    let servers = [d.server(long).await, d.server(long).await];
    // A hold is on the master of its event's slot.
    let master = cluster
        .master_of(&d.key(d.seats[0]).lease_key())
        .await
        .unwrap();
    let _held = holder(&d, &servers[0].address, d.seats[5]).await;
    let key = d.key(d.seats[5]).lease_key();
    assert!(
        exists_on(master, &key).await,
        "the hold is not on its slot's master"
    );
    let mut racers = Vec::new();
    for (i, &seat) in d.seats[..4].iter().enumerate() {
        for racer in 0..4 {
            let address = servers[(i + racer) % 2].address.clone();
            let d = &d;
            racers.push(async move {
                let mut buyer = HttpBuyer::new();
                buyer.get(&d.page(&address)).await.unwrap();
                let hold = act(&buyer, &address, d, seat, "hold").await;
                if hold.status != SEE_OTHER {
                    return false;
                }
                act(&buyer, &address, d, seat, "confirm").await.status == SEE_OTHER
            });
        }
    }
    let sold = futures_util::future::join_all(racers).await;
    for &seat in &d.seats[..4] {
        assert!(d.orders(seat).await.len() <= 1, "seat {seat} sold twice");
    }
    assert!(sold.iter().filter(|s| **s).count() <= 4, "{sold:?}");
    assert!(sold.iter().any(|s| *s), "no racer bought a seat");
    d.assert_invariant().await;
}

/// The Sentinel scenario of `failover.rs` on one shard of a cluster, under traffic on
/// another shard: buyer A is granted a seat on the event's master while its replica is
/// kept from applying it, the master is killed, the cluster promotes the replica, and
/// buyer B is granted the same seat through the same server. Meanwhile a client keeps
/// taking leases on a group another master serves: its grants carry on through the
/// failover (the cluster runs with `cluster-require-full-coverage no`). Checks what holds
/// with the guard on or off: the seat is sold once, A's late confirm refused.
async fn lose_a_grant_on_one_shard(failover_guard: bool) -> Outcome {
    let (mut cluster, d) = on_cluster().await;
    let server = guarded_server(&d, failover_guard).await;
    let address = server.address.clone();
    let seat = d.seats[14];
    let master = cluster.master_of(&d.key(seat).lease_key()).await.unwrap();
    let other = cluster
        .view()
        .await
        .unwrap()
        .into_iter()
        .find(|n| n.master && n.port != master)
        .unwrap();
    let elsewhere = group_on(&cluster, &d.settings.lease_namespace, other.port).await;

    // Traffic on the other shard: a lease taken and given back, again and again; each
    // grant's time is kept.
    let traffic_store = lease::connect(&cluster.url(), Duration::from_millis(500)).unwrap();
    let traffic = LeaseClient::new(traffic_store, MemoryLedger::new());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let grants = Arc::new(std::sync::Mutex::new(Vec::<Instant>::new()));
    let traffic = tokio::spawn({
        let (stop, grants) = (stop.clone(), grants.clone());
        async move {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                match traffic
                    .acquire(&elsewhere, "traffic", Duration::from_secs(5))
                    .await
                {
                    Ok(lease) => {
                        grants.lock().unwrap().push(Instant::now());
                        let _ = traffic.release(&lease).await;
                    }
                    Err(LeaseError::Held { .. }) => {}
                    Err(_) => {}
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });

    // A grant the replica applies, then buyer A's, which it does not.
    let (_, _, replicated) = holder(&d, &address, d.seats[0]).await;
    let mut a = HttpBuyer::new();
    a.get(&d.page(&address)).await.unwrap();
    cluster.lose_next_write(master).await.unwrap();
    let hold = act(&a, &address, &d, seat, "hold").await;
    assert_eq!(hold.status, SEE_OTHER, "{}", hold.body);
    let a_token = hold_token(&a.get(&d.page(&address)).await.unwrap().body).unwrap();
    let killed_at = Instant::now();
    let (promoted, _) = cluster.kill_master(master).await.unwrap();
    let promoted_at = Instant::now();

    // Buyer B, after the failover, on the same server: granted the same seat, on the
    // promoted replica (the server found it by itself).
    let mut b = HttpBuyer::new();
    b.get(&d.page(&address)).await.unwrap();
    eventually(
        Duration::from_secs(15),
        "B's hold after the failover",
        || async { act(&b, &address, &d, seat, "hold").await.status == SEE_OTHER },
    )
    .await;
    let b_token = hold_token(&b.get(&d.page(&address)).await.unwrap().body).unwrap();
    assert!(exists_on(promoted, &d.key(seat).lease_key()).await);
    let bought = act(&b, &address, &d, seat, "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    let late = act(&a, &address, &d, seat, "confirm").await;
    assert_ne!(late.status, SEE_OTHER, "A's late confirm was accepted");
    assert_eq!(d.orders(seat).await.len(), 1);
    d.assert_invariant().await;

    // The other shard carried on while this one failed over.
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    traffic.await.unwrap();
    let during = grants
        .lock()
        .unwrap()
        .iter()
        .filter(|t| (killed_at..promoted_at).contains(*t))
        .count();
    assert!(
        during > 0,
        "no grant on the other shard during the failover"
    );
    Outcome {
        before: vec![replicated, a_token],
        after: b_token,
    }
}

#[tokio::test]
async fn with_the_guard_a_shards_failover_never_repeats_a_fencing_token() {
    lose_a_grant_on_one_shard(true)
        .await
        .assert_never_repeated();
}

#[tokio::test]
async fn without_the_guard_a_shards_failover_repeats_the_lost_grants_token() {
    lose_a_grant_on_one_shard(false).await.assert_repeated();
}

/// An operator's `CLUSTER FAILOVER FORCE` on the event's replica while buyers keep
/// buying: the server follows the new master, no token is issued twice (the promoted
/// replica's blocks are its own), no seat is sold twice.
#[tokio::test]
async fn a_forced_failover_under_traffic_repeats_no_token_and_sells_no_seat_twice() {
    let (cluster, d) = on_cluster().await;
    let servers = [d.server(|_| {}).await, d.server(|_| {}).await];
    let all = Arc::new(RwLock::new(
        servers.iter().map(|s| s.address.clone()).collect(),
    ));
    let traffic = Traffic::start(&d, all, d.seats[4..].to_vec(), 4);
    let (_, _, before) = holder(&d, &servers[0].address, d.seats[0]).await;
    let master = cluster
        .master_of(&d.key(d.seats[0]).lease_key())
        .await
        .unwrap();
    let promoted = cluster.force_failover(master).await.unwrap();
    let after = eventually_holder(&d, &servers[1].address, d.seats[1]).await;
    assert!(after > before, "{after} after {before}");
    assert!(exists_on(promoted, &d.key(d.seats[1]).lease_key()).await);
    let tally = traffic.stop().await;
    assert_no_acknowledged_sale_lost(&d, &tally).await;
    assert_only_503s(&tally);
    d.assert_invariant().await;
}

/// The token of a hold on `seat` through `server`, retried while the store fails over.
async fn eventually_holder(d: &Deployment, server: &str, seat: i64) -> i64 {
    let mut buyer = HttpBuyer::new();
    buyer.get(&d.page(server)).await.unwrap();
    eventually(
        Duration::from_secs(15),
        "a hold after the failover",
        || async { act(&buyer, server, d, seat, "hold").await.status == SEE_OTHER },
    )
    .await;
    hold_token(&buyer.get(&d.page(server)).await.unwrap().body).unwrap()
}

/// The event's slot moves to another master, a key or two at a time, while buyers keep
/// holding and buying: every hold taken before the move is still held afterwards, by
/// the same buyer with the same token, and can be bought; no seat is sold twice; holds
/// after the move are on the new master.
#[tokio::test]
async fn a_slot_migration_under_traffic_loses_no_hold_and_sells_no_seat_twice() {
    let (cluster, d) = on_cluster().await;
    let servers = [
        d.server(|s| s.hold_ttl_ms = 60_000).await,
        d.server(|s| s.hold_ttl_ms = 60_000).await,
    ];
    let mut kept = Vec::new();
    for (i, &seat) in d.seats[..4].iter().enumerate() {
        let address = servers[i % 2].address.clone();
        let (buyer, _, token) = holder(&d, &address, seat).await;
        kept.push((buyer, address, seat, token));
    }
    let all = Arc::new(RwLock::new(
        servers.iter().map(|s| s.address.clone()).collect(),
    ));
    let traffic = Traffic::start(&d, all, d.seats[6..].to_vec(), 4);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let key = d.key(d.seats[0]).lease_key();
    let (slot, from) = (
        cluster.slot_of(&key).await.unwrap(),
        cluster.master_of(&key).await.unwrap(),
    );
    let to = cluster
        .view()
        .await
        .unwrap()
        .into_iter()
        .find(|n| n.master && n.port != from)
        .unwrap()
        .port;
    cluster.migrate_slot(slot, to, 2).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tally = traffic.stop().await;

    for (buyer, address, seat, token) in &mut kept {
        let page = buyer.get(&d.page(address)).await.unwrap().body;
        assert_eq!(
            hold_token(&page),
            Some(*token),
            "seat {seat}: the hold moved unchanged"
        );
        let bought = act(buyer, address, &d, *seat, "confirm").await;
        assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    }
    let after = eventually_holder(&d, &servers[0].address, d.seats[5]).await;
    assert!(kept.iter().all(|(_, _, _, token)| after > *token));
    assert!(exists_on(to, &d.key(d.seats[5]).lease_key()).await);
    assert!(!exists_on(from, &d.key(d.seats[5]).lease_key()).await);
    assert_no_acknowledged_sale_lost(&d, &tally).await;
    assert_only_503s(&tally);
    assert!(tally.requests() > 0);
    d.assert_invariant().await;
}

/// The live feed on a cluster subscribes at every node: a hold that lapses on each of
/// the three masters is pushed to its event's pages as available, `expired` (each master
/// sends only its own expiries).
#[tokio::test]
async fn the_live_feed_hears_the_expiries_of_every_master() {
    let cluster = ClusterTopology::start().await.unwrap();
    let app = TestApp::builder()
        .redis(cluster.url())
        .spawn()
        .await
        .unwrap();
    assert!(
        app.state
            .live
            .wait_until_live(Duration::from_secs(10))
            .await
    );
    let namespace = &app.state.settings.lease_namespace;
    let masters: Vec<u16> = cluster
        .view()
        .await
        .unwrap()
        .into_iter()
        .filter(|n| n.master)
        .map(|n| n.port)
        .collect();
    assert_eq!(masters.len(), 3);
    for master in masters {
        let key = group_on(&cluster, namespace, master).await;
        let mut pushed = app
            .state
            .live
            .subscribe(&seatlock::live::event_topic(
                key.group().rsplit(':').next().unwrap().parse().unwrap(),
            ))
            .expect("a place in the stream budget");
        app.state
            .leases
            .acquire(&key, "tester", Duration::from_millis(300))
            .await
            .unwrap();
        let lapsed = pushed_lapse(&mut pushed)
            .await
            .unwrap_or_else(|| panic!("no lapse pushed from the master on {master}"));
        assert_eq!(lapsed.data["why"], "expired", "{lapsed:?}");
    }
}

/// No grant before the on-sale on a Redis Cluster and under Sentinel (issue 43): the same
/// acquire script judges it, on the clock of the master (primary) that grants: a hold
/// two seconds before the on-sale is refused `not_on_sale`, holding nothing; once the
/// on-sale has passed, it is granted.
#[tokio::test]
async fn on_a_cluster_and_under_sentinel_nothing_is_held_before_the_on_sale() {
    let cluster = ClusterTopology::start().await.unwrap();
    let sentinel = seatlock_harness::sentinel::SentinelTopology::start()
        .await
        .unwrap();
    for url in [cluster.url(), sentinel.url()] {
        let app = TestApp::builder().redis(url).spawn().await.unwrap();
        let (event, seats) = app.first_event_seats().await.unwrap();
        app.check_no_hold_before_the_on_sale(event, seats[0], 2)
            .await;
    }
}

/// "Need more time?" on a Redis Cluster and under Sentinel: the same `extend.lua`, one
/// slot per event. Each store keeps the fencing token, refuses the eleventh extension,
/// and answers `expired` for a hold that lapsed, leaving its key absent.
#[tokio::test]
async fn on_a_cluster_and_under_sentinel_an_extension_keeps_the_token_and_never_revives_a_lapse() {
    let cluster = ClusterTopology::start().await.unwrap();
    let sentinel = seatlock_harness::sentinel::SentinelTopology::start()
        .await
        .unwrap();
    for url in [cluster.url(), sentinel.url()] {
        let redis = lease::connect_async(&url, Duration::from_secs(2))
            .await
            .unwrap();
        let store = LeaseClient::new(redis, MemoryLedger::new());
        let group = format!("extend:{}", rand::random::<u32>());
        let seats = [
            LeaseKey::new(&group, "1").unwrap(),
            LeaseKey::new(&group, "2").unwrap(),
        ];
        let ttl = Duration::from_millis(500);
        let leases = store
            .acquire_all(&lease::Grant::new(&seats, "alice", ttl))
            .await
            .unwrap();
        let more = lease::Extension::new("alice", Duration::from_secs(30));
        let mut last = leases.clone();
        for _ in 0..10 {
            last = store.extend_all(&last, &more).await.unwrap().leases;
        }
        assert!(
            last.iter()
                .all(|l| l.fencing_token() == leases[0].fencing_token())
        );
        let refused = store.extend_all(&last, &more).await;
        assert!(
            matches!(refused, Err(LeaseError::ExtensionLimit { limit: 10, .. })),
            "{url}: {refused:?}"
        );
        // A hold that lapses stays lapsed.
        let lapsing = LeaseKey::new(&group, "3").unwrap();
        let short = store.acquire(&lapsing, "alice", ttl).await.unwrap();
        eventually(Duration::from_secs(5), "the hold lapses", || async {
            store.remaining(&lapsing).await.unwrap().is_none()
        })
        .await;
        let refused = store.extend_all(&[short], &more).await;
        assert!(
            matches!(refused, Err(LeaseError::Expired { .. })),
            "{url}: {refused:?}"
        );
        assert_eq!(store.remaining(&lapsing).await.unwrap(), None, "{url}");
    }
}
