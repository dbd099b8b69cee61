//! A Redis failover that loses a grant (article step 5), against a real Sentinel
//! topology ([`SentinelTopology`]): buyer A is granted a seat on the primary while the
//! replica is kept from applying it, the primary is killed, Sentinel promotes the
//! replica, and buyer B is granted the same seat through the same `seatlock serve`
//! process, which follows the failover through Sentinel. The lease is granted twice either
//! way (replication is asynchronous); the failover guard is what keeps B's fencing token
//! above A's, and `NOT sold` keeps the seat sold once.

use std::time::Duration;

use reqwest::StatusCode;
use seatlock_harness::sentinel::SentinelTopology;
use seatlock_harness::{HttpBuyer, TINY_VENUES, TestApp, eventually, store_urls};

use crate::deployment::*;

/// What one failover did to one seat (here, and on one shard of a cluster).
pub(crate) struct Outcome {
    /// Every token the servers issued before the failover (the last one is A's, lost).
    pub(crate) before: Vec<i64>,
    /// B's token, granted on the promoted replica.
    pub(crate) after: i64,
}

impl Outcome {
    /// The guard's promise: B's token is above every token issued before.
    pub(crate) fn assert_never_repeated(&self) {
        assert!(
            self.before.iter().all(|&t| self.after > t),
            "after the failover {} is not above {:?}",
            self.after,
            self.before
        );
    }

    /// What the lab reproduces without the guard: B is given A's lost token again.
    pub(crate) fn assert_repeated(&self) {
        assert_eq!(
            self.after, self.before[1],
            "the lab should reproduce the duplicate token"
        );
    }
}

/// A server of `d` for a failover that loses a grant: its holds last 60 s (A's outlives
/// the failover), its failover guard on or off.
pub(crate) async fn guarded_server(
    d: &Deployment,
    failover_guard: bool,
) -> seatlock_harness::ServerProcess {
    d.lab_server(
        |s| s.hold_ttl_ms = 60_000,
        |lab| lab.lab_disable_failover_guard = !failover_guard,
    )
    .await
}

/// The scenario above, with the server's failover guard on or off; checks what holds
/// either way: B is granted the seat (the server serves after the failover), the live
/// feeds come back on the new primary, and the seat is sold at most once.
async fn lose_a_grant(failover_guard: bool) -> Outcome {
    let mut topology = SentinelTopology::start().await.unwrap();
    let (admin, _) = store_urls().unwrap();
    let d = Deployment::new(&admin, &topology.url(), TINY_VENUES).await;
    let server = guarded_server(&d, failover_guard).await;
    let address = server.address.clone();
    let seat = d.seats[14];

    // A grant the replica applies, then buyer A's, which it does not.
    let (_, _, replicated) = holder(&d, &address, d.seats[0]).await;
    let mut a = HttpBuyer::new();
    a.get(&d.page(&address)).await.unwrap();
    topology.lose_next_write().await.unwrap();
    let hold = act(&a, &address, &d, seat, "hold").await;
    assert_eq!(hold.status, SEE_OTHER, "{}", hold.body);
    let a_token = hold_token(&a.get(&d.page(&address)).await.unwrap().body).unwrap();
    topology.fail_over().await.unwrap();

    // Buyer B, after the failover, on the same server: granted the same seat.
    let (b, _, b_token) = holder(&d, &address, seat).await;
    let bought = act(&b, &address, &d, seat, "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    let late = act(&a, &address, &d, seat, "confirm").await;
    assert_ne!(late.status, SEE_OTHER, "A's late confirm was accepted");
    assert_eq!(d.orders(seat).await.len(), 1);
    d.assert_invariant().await;
    eventually(
        Duration::from_secs(10),
        "/healthz: live feeds subscribed on the new primary",
        || async {
            health(&address)
                .await
                .is_some_and(|(s, _)| s == StatusCode::OK)
        },
    )
    .await;
    Outcome {
        before: vec![replicated, a_token],
        after: b_token,
    }
}

#[tokio::test]
async fn with_the_guard_a_failover_never_repeats_a_fencing_token() {
    lose_a_grant(true).await.assert_never_repeated();
}

#[tokio::test]
async fn without_the_guard_a_failover_repeats_the_lost_grants_token() {
    lose_a_grant(false).await.assert_repeated();
}

/// A Redis killed and restarted from its last snapshot (RDB) comes back with the fence
/// hash, its block's stamp and the grant's function library as they were at the
/// snapshot, without the grant made after it. The library remembers the server's
/// `run_id` (lease/src/redis/library.rs), but only in the Lua state of the process that
/// loaded it: the restarted server reads its new one, the stamp is not its own, and the
/// next grant takes a fresh block. Without the guard the snapshot's counter is used
/// again, and the lost grant's token is given out twice. Returns the tokens before the
/// crash (the last one lost) and the first one after it.
async fn restart_from_snapshot(failover_guard: bool) -> (Vec<u64>, u64) {
    use lease::LeaseStore;
    let mut redis = seatlock_harness::RedisServer::start().await.unwrap();
    let timeout = Duration::from_secs(2);
    let leases = lease::LeaseClient::new(
        lease::connect(&redis.url(), timeout).unwrap(),
        lease::MemoryLedger::new(),
    )
    .with_failover_guard(failover_guard);
    let key = |seat: &str| lease::LeaseKey::new("snapshot-event", seat).unwrap();
    let ttl = Duration::from_secs(60);
    let kept = leases.acquire(&key("1"), "a", ttl).await.unwrap();
    let mut admin = leases.redis();
    redis::cmd("SAVE")
        .query_async::<()>(&mut admin)
        .await
        .unwrap();
    let lost = leases.acquire(&key("2"), "a", ttl).await.unwrap();
    redis.restart_from_snapshot().await.unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let after = loop {
        match leases.acquire(&key("3"), "b", ttl).await {
            Ok(lease) => break lease,
            // The connection the kill dropped, until the restarted server answers.
            Err(err) => assert!(tokio::time::Instant::now() < deadline, "{err}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    (
        vec![kept.fencing_token().0, lost.fencing_token().0],
        after.fencing_token().0,
    )
}

#[tokio::test]
async fn with_the_guard_a_restart_from_a_snapshot_never_repeats_a_fencing_token() {
    let (before, after) = restart_from_snapshot(true).await;
    assert!(
        before.iter().all(|&t| after > t),
        "{after} after {before:?}"
    );
}

#[tokio::test]
async fn without_the_guard_a_restart_from_a_snapshot_repeats_the_lost_grants_token() {
    let (before, after) = restart_from_snapshot(false).await;
    assert_eq!(after, before[1], "the snapshot's counter, used again");
}

/// A switchover (`SENTINEL FAILOVER`: the old primary stays up and becomes a replica, as
/// a primary cut off by a partition does when it comes back). The live feed must not stay
/// subscribed to the demoted server, which has no expiry notifications to send: Sentinel's
/// reconfiguration of it ends its client and pub/sub connections (`CLIENT KILL TYPE
/// normal` and `pubsub`, with the `REPLICAOF`), and the feed subscribes again through the
/// Sentinels, on the new primary. A hold taken after the switchover that lapses is shown
/// as available on the event's pages.
#[tokio::test]
async fn after_a_switchover_the_live_feed_moves_to_the_new_primary_and_shows_lapses() {
    let mut topology = SentinelTopology::start().await.unwrap();
    let app = TestApp::builder()
        .redis(topology.url())
        .with(|s| s.hold_ttl_ms = 8_000) // lapses after the feed's next check (5 s)
        .spawn()
        .await
        .unwrap();
    assert!(
        app.state
            .live
            .wait_until_live(Duration::from_secs(10))
            .await
    );
    topology.switch_over().await.unwrap();
    // Until the server's Sentinel poll follows (a second or so), a hold still goes to the
    // old primary, which accepts it until Sentinel turns it into a replica and its data
    // is replaced: the split-brain window a failover has. Hold after it.
    let new_primary = format!("127.0.0.1:{}", topology.replica.port);
    eventually(Duration::from_secs(10), "the server to follow", || async {
        app.state
            .redis
            .client()
            .get_connection_info()
            .addr()
            .to_string()
            == new_primary
    })
    .await;

    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut pushed = app
        .state
        .live
        .subscribe(&seatlock::live::event_topic(event))
        .expect("a place in the stream budget");
    let reply = HttpBuyer::new()
        .seat_action(&app.address, event, seats[0], "hold")
        .await
        .unwrap();
    assert_eq!(reply.status, SEE_OTHER, "{}", reply.body);
    let lapsed = pushed_lapse(&mut pushed)
        .await
        .expect("the lapse is shown within 20 s");
    assert_eq!(lapsed.data["seat"], seats[0], "{lapsed:?}");
    assert_eq!(lapsed.data["why"], "expired", "{lapsed:?}");
}

/// A Sentinel that hangs (SIGSTOP: its port still accepts connections, nothing answers),
/// the first one the URL names: a server still starts, and its live feed, cut off
/// (`CLIENT KILL TYPE pubsub`), subscribes again on the primary the other Sentinels
/// name, so `/healthz` (HAProxy's check) says ok and holds are granted. Asking a hung
/// Sentinel with redis-rs's blocking client never returns (no read timeout).
#[tokio::test]
async fn a_hung_sentinel_neither_blocks_a_start_nor_keeps_the_live_feed_down() {
    let topology = SentinelTopology::start().await.unwrap();
    let (admin, _) = store_urls().unwrap();
    let d = Deployment::new(&admin, &topology.url(), TINY_VENUES).await;
    topology.signal_sentinel(0, "STOP").unwrap();
    let server = d.server(|_| {}).await;
    let address = server.address.clone();
    let healthy = || async {
        health(&address)
            .await
            .is_some_and(|(s, _)| s == StatusCode::OK)
    };
    eventually(Duration::from_secs(10), "/healthz ok", healthy).await;

    let mut primary = redis::Client::open(topology.primary.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let pubsub_clients = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .clone();
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut primary)
        .await
        .unwrap();
    assert!(killed >= 1, "the live feed was not subscribed");
    eventually(
        Duration::from_secs(10),
        "the live feed to subscribe again",
        || {
            let mut primary = primary.clone();
            let pubsub_clients = pubsub_clients.clone();
            async move {
                let list: String = pubsub_clients.query_async(&mut primary).await.unwrap();
                !list.trim().is_empty()
            }
        },
    )
    .await;
    eventually(Duration::from_secs(10), "/healthz ok again", healthy).await;
    holder(&d, &address, d.seats[0]).await;
}

/// A server (re)started while the Sentinels still name a primary that is dead (killed,
/// its failover not over yet) starts, as it does while a plain Redis is down: `/healthz`
/// says what is down, and once the replica is promoted the server follows it and grants
/// holds. (A backend that exits instead stays out of the proxy until someone restarts
/// it.)
#[tokio::test]
async fn a_server_started_while_the_sentinels_name_a_dead_primary_serves_after_the_failover() {
    let mut topology = SentinelTopology::start().await.unwrap();
    let (admin, _) = store_urls().unwrap();
    let d = Deployment::new(&admin, &topology.url(), TINY_VENUES).await;
    topology.primary.kill();
    let server = d.server(|_| {}).await;
    let address = server.address.clone();
    topology.fail_over().await.unwrap(); // the primary is dead already: waits for the promotion
    eventually(Duration::from_secs(15), "/healthz ok", || async {
        health(&address)
            .await
            .is_some_and(|(s, _)| s == StatusCode::OK)
    })
    .await;
    holder(&d, &address, d.seats[0]).await;
}

/// The primary hangs (SIGSTOP: its port open, nothing answered) and Sentinel promotes
/// the replica: the server follows (a request that times out asks the Sentinels again),
/// holds are granted, `/healthz` says ok; when the old primary wakes up and is turned
/// into a replica, holds are still granted and the seat sold once.
#[tokio::test]
async fn a_hung_primary_is_failed_over_and_followed() {
    let mut topology = SentinelTopology::start().await.unwrap();
    let (admin, _) = store_urls().unwrap();
    let d = Deployment::new(&admin, &topology.url(), TINY_VENUES).await;
    let server = d.server(|_| {}).await;
    let address = server.address.clone();
    holder(&d, &address, d.seats[0]).await;
    topology.hang_primary().await.unwrap();
    let healthy = || async {
        health(&address)
            .await
            .is_some_and(|(s, _)| s == StatusCode::OK)
    };
    eventually(
        Duration::from_secs(15),
        "/healthz ok after the failover",
        healthy,
    )
    .await;
    eventually(
        Duration::from_secs(15),
        "a hold on the new primary",
        || async {
            let mut buyer = HttpBuyer::new();
            buyer.get(&d.page(&address)).await.is_ok()
                && act(&buyer, &address, &d, d.seats[1], "hold").await.status == SEE_OTHER
        },
    )
    .await;
    topology.primary.signal("CONT").unwrap();
    buy(&d, &address, d.seats[2]).await;
    eventually(
        Duration::from_secs(15),
        "/healthz ok after the wake-up",
        healthy,
    )
    .await;
    d.assert_invariant().await;
}

/// The first message `pushed` brings that shows a seat available again, if one comes
/// within 20 s.
pub(crate) async fn pushed_lapse(
    pushed: &mut seatlock::live::Subscription,
) -> Option<std::sync::Arc<seatlock::live::LiveMessage>> {
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let message = pushed.recv().await.ok()?;
            if message.event == "seat" && message.data["state"] == "available" {
                return Some(message);
            }
        }
    })
    .await
    .ok()
    .flatten()
}

/// Whether the lease of `seat` is on the Redis at `url`.
async fn lease_on(url: &str, app: &TestApp, event: i64, seat: i64) -> bool {
    let key = seatlock::seats::lease_key(
        &app.state.settings.lease_namespace,
        seatlock::seats::SeatRef {
            event_id: event,
            seat_id: seat,
        },
    );
    let mut redis = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("EXISTS")
        .arg(key.lease_key())
        .query_async::<bool>(&mut redis)
        .await
        .unwrap()
}

/// The Sentinels promote the replica while the old primary keeps answering (it cannot
/// be demoted: as on the minority side of a partition). No request fails, so nothing
/// tells the server to ask again: it must ask by itself. Within seconds its holds land
/// on the new primary, and not one buyer sees a failure meanwhile.
#[tokio::test]
async fn the_server_follows_a_failover_before_any_request_fails() {
    let mut topology = SentinelTopology::start_undemotable().await.unwrap();
    let app = TestApp::builder()
        .redis(topology.url())
        .spawn()
        .await
        .unwrap();
    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut buyer = HttpBuyer::new();
    let first = buyer
        .seat_action(&app.address, event, seats[0], "hold")
        .await
        .unwrap();
    assert_eq!(first.status, SEE_OTHER, "{}", first.body);
    assert!(lease_on(&topology.primary.url(), &app, event, seats[0]).await);

    topology.switch_over().await.unwrap();
    // Seats held (and released) one after another, every reply a success, until one
    // lands on the new primary; the per-buyer limit is never reached.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    for &seat in seats[1..].iter().cycle() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no hold reached the new primary within 10 s"
        );
        let reply = buyer
            .seat_action(&app.address, event, seat, "hold")
            .await
            .unwrap();
        assert_eq!(reply.status, SEE_OTHER, "{}", reply.body);
        let on_new = lease_on(&topology.replica.url(), &app, event, seat).await;
        if on_new && !lease_on(&topology.primary.url(), &app, event, seat).await {
            break;
        }
        let reply = buyer
            .seat_action(&app.address, event, seat, "release")
            .await
            .unwrap();
        assert_eq!(reply.status, SEE_OTHER, "{}", reply.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A Sentinel with a stale view (it names the old primary, still answering) comes first
/// in the URL. The server asks every Sentinel and follows the primary most of them name,
/// at its start and after.
#[tokio::test]
async fn the_primary_is_the_one_most_sentinels_name_not_the_first_to_answer() {
    let mut topology = SentinelTopology::start_undemotable().await.unwrap();
    topology.switch_over().await.unwrap();
    topology.make_stale(0).await.unwrap();
    let app = TestApp::builder()
        .redis(topology.url())
        .spawn()
        .await
        .unwrap();
    let (event, seats) = app.first_event_seats().await.unwrap();
    let reply = HttpBuyer::new()
        .seat_action(&app.address, event, seats[0], "hold")
        .await
        .unwrap();
    assert_eq!(reply.status, SEE_OTHER, "{}", reply.body);
    assert!(lease_on(&topology.replica.url(), &app, event, seats[0]).await);
    assert!(!lease_on(&topology.primary.url(), &app, event, seats[0]).await);
}

/// A primary with `min-replicas-to-write 1` whose only replica is gone refuses writes
/// with `NOREPLICAS` (what bounds the writes an old primary, cut off from its replicas,
/// accepts during a partition). A hold is then a 503 page that says so, not a plain
/// "Redis is unavailable".
#[tokio::test]
async fn a_primary_without_enough_replicas_refuses_a_hold_in_words() {
    let primary = seatlock_harness::RedisServer::start_with(&[
        "--repl-diskless-sync-delay",
        "0",
        "--min-replicas-to-write",
        "1",
        "--min-replicas-max-lag",
        "1",
    ])
    .await
    .unwrap();
    let port = primary.port.to_string();
    let mut replica =
        seatlock_harness::RedisServer::start_with(&["--replicaof", "127.0.0.1", &port])
            .await
            .unwrap();
    let app = TestApp::builder()
        .redis(primary.url())
        .spawn()
        .await
        .unwrap();
    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut buyer = HttpBuyer::new();
    let page = format!("{}/events/{event}", app.address);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    // The page (and the session) while the replica is in sync.
    while buyer.get(&page).await.unwrap().status != StatusCode::OK {
        assert!(tokio::time::Instant::now() < deadline, "no page in 10 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    replica.kill();
    let refused = loop {
        let reply = buyer
            .seat_action(&app.address, event, seats[0], "hold")
            .await
            .unwrap();
        if reply.status == StatusCode::SERVICE_UNAVAILABLE {
            break reply;
        }
        assert!(tokio::time::Instant::now() < deadline, "never refused");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        refused.body.contains("too few replicas in sync"),
        "{}",
        refused.body
    );
}
