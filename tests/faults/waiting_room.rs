//! The waiting room across real server processes: admission in join order whichever
//! server a buyer asks, never more than N shopping under a burst, a lapsed admission
//! admitting the next buyer (and the rule for holds it leaves behind), holds refused
//! without an admission (a fresh cookie jar only queues), a server killed mid-admission,
//! Redis restarted empty. App clocks apart: `clocks.rs`.

use std::time::Duration;

use futures_util::future::join_all;
use reqwest::StatusCode;
use seatlock::http::error::Refusal;
use seatlock_harness::{HttpBuyer, RedisServer, ServerProcess, TINY_VENUES, store_urls};

use crate::deployment::*;

/// Gives the deployment's event a waiting room of `shoppers` (its own setting, migration
/// 0010), on sale `on_sale_in` from now on Postgres's clock (`None`: on sale). Before any
/// server reads the event (each reads it once).
pub(crate) async fn with_room(d: &Deployment, shoppers: i32, on_sale_in: Option<Duration>) {
    sqlx::query(
        "UPDATE events SET waiting_room_shoppers = $1,
                on_sale_at = now() + make_interval(secs => $2) WHERE id = $3",
    )
    .bind(shoppers)
    .bind(on_sale_in.map_or(-60.0, |d| d.as_secs_f64()))
    .bind(d.event)
    .execute(&d.db)
    .await
    .unwrap();
}

/// What a buyer's visit to the event found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Visit {
    /// The seat map: the buyer is admitted.
    Map,
    /// The queue page, with its `data-position` (0: the pre-queue, before the on-sale).
    Queued(u64),
}

/// `buyer` opens the event through `server`; if sent to the queue, opens the queue page.
/// Either page's form token is remembered (both have a form).
pub(crate) async fn visit(buyer: &mut HttpBuyer, d: &Deployment, server: &str) -> Visit {
    let page = buyer.get(&d.page(server)).await.unwrap();
    if page.status == StatusCode::OK {
        return Visit::Map;
    }
    let queue = format!("{}/queue", d.page(server));
    assert_eq!(page.status, SEE_OTHER, "{}", page.body);
    assert_eq!(page.location.as_deref(), Some(&queue[server.len()..]));
    let page = buyer.get(&queue).await.unwrap();
    if page.status == SEE_OTHER {
        return Visit::Map; // admitted between the two requests
    }
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let position = between(&page.body, "data-position=\"", "\"").expect("the queue page");
    Visit::Queued(position.parse().unwrap())
}

/// `buyer` leaves the room (the Leave button of the map or the queue page).
async fn leave(buyer: &HttpBuyer, d: &Deployment, server: &str) {
    let url = format!("{}/queue/leave", d.page(server));
    let reply = buyer.post(&url, &[]).await.unwrap();
    assert_eq!(reply.status, SEE_OTHER, "{}", reply.body);
}

/// `n` fresh buyers open the event in turn, buyer `i` through `server(i)`: the first
/// shops, the others queue at places 1, 2, … (checked).
async fn queue_up(d: &Deployment, n: usize, server: impl Fn(usize) -> String) -> Vec<HttpBuyer> {
    let mut buyers: Vec<HttpBuyer> = (0..n).map(|_| HttpBuyer::new()).collect();
    for (i, buyer) in buyers.iter_mut().enumerate() {
        let expected = if i == 0 {
            Visit::Map
        } else {
            Visit::Queued(i as u64)
        };
        assert_eq!(visit(buyer, d, &server(i)).await, expected, "buyer {i}");
    }
    buyers
}

async fn servers(d: &Deployment, n: usize) -> Vec<ServerProcess> {
    join_all((0..n).map(|_| d.server(|_| {}))).await
}

#[tokio::test]
async fn buyers_are_admitted_in_join_order_whichever_of_three_servers_they_ask() {
    let d = Deployment::tiny().await;
    with_room(&d, 1, None).await;
    let servers = servers(&d, 3).await;
    let at = |i: usize| servers[i % 3].address.clone();
    let mut buyers = queue_up(&d, 6, at).await;
    // Each turn that ends admits exactly the next buyer in join order, even when the
    // later buyers ask first, through other servers.
    for next in 1..6 {
        leave(&buyers[next - 1], &d, &at(next + 1)).await;
        for later in (next + 1..6).rev() {
            let seen = visit(&mut buyers[later], &d, &at(later + next)).await;
            assert_eq!(seen, Visit::Queued((later - next) as u64), "buyer {later}");
        }
        assert_eq!(
            visit(&mut buyers[next], &d, &at(next * 2)).await,
            Visit::Map
        );
    }
}

#[tokio::test]
async fn a_burst_of_buyers_through_three_servers_never_has_more_than_n_shopping() {
    let d = Deployment::tiny().await;
    with_room(&d, 3, None).await;
    let servers = servers(&d, 3).await;
    let visits = (0..45).map(|i| {
        let (server, d) = (servers[i % 3].address.clone(), &d);
        async move { visit(&mut HttpBuyer::new(), d, &server).await }
    });
    let visits = join_all(visits).await;
    let shopping = visits.iter().filter(|v| **v == Visit::Map).count();
    assert_eq!(shopping, 3, "{visits:?}");
    let mut positions: Vec<u64> = visits
        .iter()
        .filter_map(|v| match v {
            Visit::Queued(p) => Some(*p),
            Visit::Map => None,
        })
        .collect();
    positions.sort_unstable();
    assert_eq!(positions, (1..=42).collect::<Vec<_>>(), "one place each");
}

#[tokio::test]
async fn a_lapsed_admission_admits_the_next_buyer_and_its_holds_keep_their_own_ttl() {
    let d = Deployment::tiny().await;
    with_room(&d, 1, None).await;
    let server = d
        .server(|s| {
            s.admission_ttl_ms = 1_000;
            s.hold_ttl_ms = 10_000;
        })
        .await;
    let at = server.address.as_str();
    let (mut a, mut b) = (HttpBuyer::new(), HttpBuyer::new());
    assert_eq!(visit(&mut a, &d, at).await, Visit::Map);
    let held = act(&a, at, &d, d.seats[0], "hold").await;
    assert_eq!(held.status, SEE_OTHER, "{}", held.body);
    assert_eq!(visit(&mut b, &d, at).await, Visit::Queued(1));

    // A stops opening pages: the admission lapses on Redis's clock, and B's next poll
    // is admitted.
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    assert_eq!(visit(&mut b, &d, at).await, Visit::Map);
    // A's queue page says A still holds a seat, with the way to buy it.
    let queued = a.get(&format!("{}/queue", d.page(at))).await.unwrap().body;
    assert!(queued.contains("You still hold 1 seat"), "{queued}");
    assert!(
        queued.contains(&format!("/events/{}/checkout", d.event)),
        "{queued}"
    );
    // A may take no more seats, but the hold it has keeps its TTL and its fence: it buys.
    assert!(
        act(&a, at, &d, d.seats[1], "hold")
            .await
            .is_refused(&Refusal::NotAdmitted)
    );
    assert!(d.held(d.seats[0]).await);
    let bought = act(&a, at, &d, d.seats[0], "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    assert!(bought.location.unwrap().starts_with("/orders/"));
    // A is queued again, at the back.
    assert_eq!(visit(&mut a, &d, at).await, Visit::Queued(1));
}

#[tokio::test]
async fn holds_need_an_admission_so_a_fresh_cookie_jar_only_queues() {
    let d = Deployment::tiny().await;
    with_room(&d, 1, None).await;
    let server = d.server(|s| s.max_seats_per_buyer = 2).await;
    let at = server.address.as_str();
    let mut shopper = HttpBuyer::new();
    assert_eq!(visit(&mut shopper, &d, at).await, Visit::Map);
    for seat in &d.seats[..2] {
        assert_eq!(act(&shopper, at, &d, *seat, "hold").await.status, SEE_OTHER);
    }
    let third = act(&shopper, at, &d, d.seats[2], "hold").await;
    assert!(
        third.is_refused(&Refusal::SeatLimit { held: 2, limit: 2 }),
        "{third:?}"
    );

    // The same person with a fresh cookie jar is a new buyer at the back of the queue,
    // not a new allowance: every hold is refused until the room admits it.
    let mut fresh = HttpBuyer::new();
    assert_eq!(visit(&mut fresh, &d, at).await, Visit::Queued(1));
    let refused = act(&fresh, at, &d, d.seats[2], "hold").await;
    assert!(refused.is_refused(&Refusal::NotAdmitted), "{refused:?}");
    let best = fresh
        .post(&event_url(&d, at, "best-available"), &[("quantity", "2")])
        .await
        .unwrap();
    assert!(best.is_refused(&Refusal::NotAdmitted), "{best:?}");
    assert!(!d.held(d.seats[2]).await);

    // The shopper's purchase ends their turn: the fresh jar is admitted next.
    let bought = shopper
        .post(&event_url(&d, at, "checkout"), &[])
        .await
        .unwrap();
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    assert_eq!(visit(&mut fresh, &d, at).await, Visit::Map);
    assert_eq!(visit(&mut shopper, &d, at).await, Visit::Queued(1));
}

#[tokio::test]
async fn a_server_killed_mid_admission_costs_no_buyer_a_place() {
    let d = Deployment::tiny().await;
    with_room(&d, 1, None).await;
    let mut first = d.server(|_| {}).await;
    let second = d.server(|_| {}).await;
    let (mut a, mut b) = (HttpBuyer::new(), HttpBuyer::new());
    assert_eq!(visit(&mut a, &d, &first.address).await, Visit::Map);
    assert_eq!(visit(&mut b, &d, &first.address).await, Visit::Queued(1));
    first.kill().await.unwrap();

    // The room and the sessions live in Redis: the other server knows both buyers.
    let at = second.address.as_str();
    assert_eq!(visit(&mut b, &d, at).await, Visit::Queued(1));
    assert_eq!(visit(&mut a, &d, at).await, Visit::Map);
    assert_eq!(act(&a, at, &d, d.seats[0], "hold").await.status, SEE_OTHER);
}

#[tokio::test]
async fn redis_restarted_empty_loses_the_queue_and_buyers_join_again_as_they_ask() {
    let mut redis = RedisServer::start().await.unwrap();
    let (admin, _) = store_urls().unwrap();
    let d = Deployment::new(&admin, &redis.url(), TINY_VENUES).await;
    with_room(&d, 1, None).await;
    let server = d.server(|_| {}).await;
    let at = server.address.as_str();
    let mut buyers = queue_up(&d, 3, |_| at.to_owned()).await;
    redis.restart_empty().await.unwrap();

    // The sessions went with the room: each browser is a new buyer, and the room fills
    // again in the order the buyers ask (here the last one first). No 5xx, no hang.
    let order = [2, 1, 0];
    let expected = [Visit::Map, Visit::Queued(1), Visit::Queued(2)];
    for (i, expected) in order.into_iter().zip(expected) {
        let seen = tokio::time::timeout(Duration::from_secs(10), visit(&mut buyers[i], &d, at))
            .await
            .expect("answered");
        assert_eq!(seen, expected, "buyer {i}");
    }
}

#[tokio::test]
async fn buying_one_of_several_held_seats_keeps_the_turn_until_the_last() {
    let d = Deployment::tiny().await;
    with_room(&d, 1, None).await;
    let server = d.server(|_| {}).await;
    let at = server.address.as_str();
    let (mut a, mut b) = (HttpBuyer::new(), HttpBuyer::new());
    assert_eq!(visit(&mut a, &d, at).await, Visit::Map);
    for seat in &d.seats[..2] {
        assert_eq!(act(&a, at, &d, *seat, "hold").await.status, SEE_OTHER);
    }
    assert_eq!(visit(&mut b, &d, at).await, Visit::Queued(1));
    assert_eq!(
        act(&a, at, &d, d.seats[0], "confirm").await.status,
        SEE_OTHER
    );
    // A still holds a seat: still A's turn, B still waits.
    assert_eq!(visit(&mut b, &d, at).await, Visit::Queued(1));
    assert_eq!(visit(&mut a, &d, at).await, Visit::Map);
    assert_eq!(
        act(&a, at, &d, d.seats[1], "confirm").await.status,
        SEE_OTHER
    );
    assert_eq!(visit(&mut b, &d, at).await, Visit::Map);
}

/// Before the on-sale the queue page says when it opens on the venue's clock (the tiny
/// venue is in New York), as the home page does, not in UTC.
#[tokio::test]
async fn the_queue_page_gives_the_on_sale_on_the_venues_clock() {
    let d = Deployment::tiny().await;
    with_room(&d, 1, Some(Duration::from_secs(3_600))).await;
    let server = d.server(|_| {}).await;
    let mut buyer = HttpBuyer::new();
    assert_eq!(
        visit(&mut buyer, &d, &server.address).await,
        Visit::Queued(0)
    );
    let on_sale: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT on_sale_at FROM events WHERE id = $1")
            .bind(d.event)
            .fetch_one(&d.db)
            .await
            .unwrap();
    let shown = on_sale
        .with_timezone(&chrono_tz::America::New_York)
        .format("%H:%M:%S %Z")
        .to_string();
    let page = buyer
        .get(&format!("{}/queue", d.page(&server.address)))
        .await
        .unwrap()
        .body;
    assert!(
        page.contains(&format!("at <time>{shown}</time>")),
        "{shown}: {page}"
    );
}
