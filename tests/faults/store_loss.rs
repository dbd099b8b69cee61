//! A store lost or unwritable under traffic: Redis lost mid-traffic, Postgres restarted
//! mid-confirm, a session that cannot be saved (sessions live in Redis).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use reqwest::StatusCode;
use seatlock::failpoint::PausePoint;
use seatlock::http::error::Refusal;
use seatlock_harness::{
    HttpBuyer, PostgresServer, RedisServer, ServerProcess, TINY_VENUES, eventually, store_urls,
};

use crate::deployment::*;
use crate::traffic::*;

#[tokio::test]
async fn redis_lost_mid_traffic_stops_guarded_work_then_resumes_with_higher_tokens() {
    let mut redis = RedisServer::start().await.unwrap();
    let (admin, _) = store_urls().unwrap();
    let d = Deployment::new(&admin, &redis.url(), TINY_VENUES).await;
    let servers = [d.server(|_| {}).await, d.server(|_| {}).await];
    let pids: Vec<_> = servers.iter().map(ServerProcess::pid).collect();
    let address = |i: usize| servers[i % 2].address.clone();

    // Before: seats 0 and 1 sold, seats 2..5 held.
    let mut issued = Vec::new();
    let mut holders = Vec::new();
    for (i, &seat) in d.seats[..5].iter().enumerate() {
        let (buyer, _, token) = holder(&d, &address(i), seat).await;
        issued.push(token);
        if i < 2 {
            let bought = act(&buyer, &address(i), &d, seat, "confirm").await;
            assert_eq!(bought.status, SEE_OTHER);
        } else {
            holders.push((buyer, address(i), seat));
        }
    }
    let mut newcomer = HttpBuyer::new();
    newcomer.get(&d.page(&address(0))).await.unwrap();
    let all = Arc::new(RwLock::new(vec![address(0), address(1)]));
    let traffic = Traffic::start(&d, all, d.seats[10..].to_vec(), 4);
    tokio::time::sleep(Duration::from_millis(500)).await;

    redis.kill();
    for server in &servers {
        eventually(
            Duration::from_secs(10),
            "/healthz to name redis",
            || async {
                health(&server.address).await.is_some_and(|(s, body)| {
                    s == StatusCode::SERVICE_UNAVAILABLE && body.contains("redis")
                })
            },
        )
        .await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // confirms in flight end
    let sold_while_down = d.order_count().await;
    let hold = newcomer
        .seat_action(&address(0), d.event, d.seats[6], "hold")
        .await
        .unwrap();
    let (held_buyer, held_server, held_seat) = &holders[0];
    let confirm = act(held_buyer, held_server, &d, *held_seat, "confirm").await;
    let map = newcomer.get(&d.page(&address(1))).await.unwrap();
    for reply in [&hold, &confirm, &map] {
        assert_eq!(
            reply.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            reply.body
        );
        assert!(
            reply.body.contains("Redis is unavailable"),
            "{}",
            reply.body
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        d.order_count().await,
        sold_while_down,
        "no sale while Redis is down"
    );

    redis.restart_empty().await.unwrap();
    for server in &servers {
        eventually(Duration::from_secs(10), "/healthz to recover", || async {
            health(&server.address)
                .await
                .is_some_and(|(s, _)| s == StatusCode::OK)
        })
        .await;
    }
    // The holds were lost with Redis, but not the buyers: who a buyer is lives in their
    // signed cookie, so their forms still work. Each holder is told in words that its
    // hold expired (its browser remembers holding the seat), and the page no longer
    // counts down.
    for (buyer, server, seat) in &mut holders {
        let late = act(buyer, server, &d, *seat, "confirm").await;
        assert!(late.is_refused(&Refusal::HoldExpired), "{late:?}");
        let page = buyer.get(&d.page(server)).await.unwrap();
        assert!(!page.body.contains("held for you"), "{}", page.body);
    }
    // Work resumes in the same processes, with tokens above every token issued before.
    let before = *issued.iter().max().unwrap();
    for (i, &seat) in d.seats[2..5].iter().enumerate() {
        let (buyer, _, token) = holder(&d, &address(i), seat).await;
        assert!(
            token > before,
            "token {token} after the restart, {before} before"
        );
        let bought = act(&buyer, &address(i + 1), &d, seat, "confirm").await;
        assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    }
    let now: Vec<_> = servers.iter().map(ServerProcess::pid).collect();
    assert_eq!(pids, now, "the servers were not restarted");

    let tally = traffic.stop().await;
    println!("traffic: {:#?}", tally.outcomes.lock().unwrap());
    assert_only_503s(&tally);
    assert_no_acknowledged_sale_lost(&d, &tally).await;
    d.assert_invariant().await;
}

/// A deployment on a private Postgres (the shared Redis) and one server process of it.
async fn on_private_postgres() -> (PostgresServer, Deployment, ServerProcess) {
    let postgres = PostgresServer::start().await.unwrap();
    let (_, redis) = store_urls().unwrap();
    let d = Deployment::new(&postgres.admin_url(), &redis, TINY_VENUES).await;
    let server = d.server(|_| {}).await;
    (postgres, d, server)
}

#[tokio::test]
async fn postgres_restarted_mid_confirm_fails_cleanly_and_the_pool_recovers_by_itself() {
    let (postgres, d, server) = on_private_postgres().await;
    let base = server.address.clone();

    // Six holders confirm at once, each parked for 1.5 s at a different point: before
    // the write (in the payment), inside the transaction, between the owner check and
    // the commit. Postgres restarts under them.
    let points = [
        PausePoint::BeforeWrite,
        PausePoint::BeforeOwnerCheck,
        PausePoint::BeforeCommit,
    ];
    let mut confirms = Vec::new();
    for (i, &seat) in d.seats[..6].iter().enumerate() {
        let (buyer, id, _) = holder(&d, &base, seat).await;
        let tab = buyer.another_tab(pause_headers(points[i % 3], 1_500));
        let url = format!("{base}/events/{}/seats/{seat}/confirm", d.event);
        let task = tokio::spawn(async move { tab.post(&url, &[]).await.unwrap() });
        confirms.push((buyer, id, seat, task));
    }
    parked(&server, 6).await;
    let all = Arc::new(RwLock::new(vec![base.clone()]));
    let traffic = Traffic::start(&d, all, d.seats[12..].to_vec(), 4);
    tokio::time::sleep(Duration::from_millis(300)).await;
    postgres.stop("fast").await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    postgres.start_again().await.unwrap();

    for (buyer, id, seat, task) in confirms {
        let reply = task.await.unwrap();
        let orders = d.orders(seat).await;
        match reply.status {
            SEE_OTHER => {
                let order = d.assert_sold_once_to(seat, &id).await;
                let location = format!("/orders/{}", order.id);
                assert_eq!(reply.location.as_deref(), Some(location.as_str()));
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                assert!(
                    reply.body.contains("Postgres is unavailable"),
                    "{}",
                    reply.body
                );
                assert!(
                    orders.is_empty(),
                    "a failed confirm wrote nothing: {orders:?}"
                );
                // The buyer tries again: bought if the hold survived, else told it lapsed.
                let again = act(&buyer, &base, &d, seat, "confirm").await;
                let orders = d.orders(seat).await;
                match again.status {
                    SEE_OTHER => assert_eq!(orders.len(), 1),
                    StatusCode::CONFLICT => {
                        assert!(again.is_refused(&Refusal::HoldExpired), "{again:?}");
                        assert!(orders.is_empty());
                    }
                    other => panic!("retry of seat {seat}: {other} {}", again.body),
                }
            }
            // On a busy machine the restart can outlast the hold's TTL before the parked
            // confirm reaches Redis again: told it lapsed, and nothing written.
            StatusCode::CONFLICT => {
                assert!(reply.is_refused(&Refusal::HoldExpired), "{reply:?}");
                assert!(
                    orders.is_empty(),
                    "a refused confirm wrote nothing: {orders:?}"
                );
            }
            other => panic!("seat {seat}: {other} {}", reply.body),
        }
    }
    // The same process, never restarted, sells again: its pool reconnected by itself.
    let _ = buy(&d, &base, d.seats[10]).await;
    assert!(server.pid().is_some(), "still the first process");
    let tally = traffic.stop().await;
    println!("traffic: {:#?}", tally.outcomes.lock().unwrap());
    assert_only_503s(&tally);
    assert_no_acknowledged_sale_lost(&d, &tally).await;
    d.assert_invariant().await;
}

/// A deployment on a private Redis (the shared Postgres) and one server process of it.
async fn on_private_redis() -> (RedisServer, Deployment, ServerProcess) {
    let redis = RedisServer::start().await.unwrap();
    let (admin, _) = store_urls().unwrap();
    let d = Deployment::new(&admin, &redis.url(), TINY_VENUES).await;
    let server = d.server(|_| {}).await;
    (redis, d, server)
}

/// Makes the deployment's (private) Redis refuse every write to a key that is not a
/// lease's (`lease:*`), and allow reads: sessions load but cannot be saved, while holds,
/// releases and retirements go on. `ACL SETUSER` applies to the connections already
/// open. `false` lifts it.
async fn refuse_session_writes(d: &Deployment, refuse: bool) {
    let rules: &[&str] = if refuse {
        &["resetkeys", "~lease:*", "%R~*"]
    } else {
        &["allkeys"]
    };
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg(rules)
        .query_async(&mut d.leases.redis())
        .await
        .unwrap();
}

/// A hold and a sale write no session (the buyer is a signed cookie, the hold is found
/// by the buyer's id), so a Redis that refuses session writes changes nothing for them:
/// the hold and the sale go through. Only a rename, which does write the session, is
/// refused: a 503 page naming Redis, the name unchanged, and a retry once Redis accepts
/// writes again renames.
#[tokio::test]
async fn holds_and_sales_write_no_session_so_refused_session_writes_stop_only_a_rename() {
    let (_redis, d, server) = on_private_redis().await;
    let seat = d.seats[0];
    let mut buyer = HttpBuyer::new();
    let page = buyer.get(&d.page(&server.address)).await.unwrap();
    let id = buyer_id(&page.body);
    refuse_session_writes(&d, true).await;
    let held = act(&buyer, &server.address, &d, seat, "hold").await;
    assert_eq!(held.status, SEE_OTHER, "{}", held.body);
    let bought = act(&buyer, &server.address, &d, seat, "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    d.assert_sold_once_to(seat, &id).await;

    let rename = format!("{}/me", server.address);
    let refused = buyer.post(&rename, &[("name", "Alice")]).await.unwrap();
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        refused.body.contains("Redis is unavailable"),
        "{}",
        refused.body
    );
    refuse_session_writes(&d, false).await;
    let page = buyer.get(&d.page(&server.address)).await.unwrap();
    assert!(!page.body.contains("Alice"), "no half-done rename");
    let renamed = buyer.post(&rename, &[("name", "Alice")]).await.unwrap();
    assert_eq!(renamed.status, SEE_OTHER, "{}", renamed.body);
    let page = buyer.get(&d.page(&server.address)).await.unwrap();
    assert!(page.body.contains("Alice"), "renamed");
    d.assert_invariant().await;
}
