//! The waiting room across real server processes: turns in join order whichever server a
//! buyer asks, never more than N shopping under a burst, lapses and leaves freeing their
//! places with every position exact, holds refused without an admission, forged and
//! borrowed tickets, the ticker killed or paused past its lease, Redis restarted empty,
//! queue streams inside the stream budget and ended by the drain. App clocks apart:
//! `clocks.rs`.

use std::time::Duration;

use futures_util::future::join_all;
use reqwest::StatusCode;
use seatlock::http::error::Refusal;
use seatlock_harness::http::EventStream;
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Visit {
    /// The seat map: the buyer shops.
    Map,
    /// The queue page, with its `data-position` (0: the pre-queue, before the on-sale).
    Queued(u64),
}

/// `buyer` opens the event through `server` as a browser does: the map, or the queue
/// page the room answers in its place (or sends the buyer to); a queue page that sends
/// the buyer back (the turn came) opens the map. Either page's form token is remembered
/// (both have a form).
pub(crate) async fn visit(buyer: &mut HttpBuyer, d: &Deployment, server: &str) -> Visit {
    let queue = format!("{}/queue", d.page(server));
    for _ in 0..3 {
        let mut page = buyer.get(&d.page(server)).await.unwrap();
        if page.status == SEE_OTHER {
            assert_eq!(page.location.as_deref(), Some(&queue[server.len()..]));
            page = buyer.get(&queue).await.unwrap();
            if page.status == SEE_OTHER {
                continue; // the turn came between the two: the map takes it
            }
        }
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        return match between(&page.body, "data-position=\"", "\"") {
            Some(position) => Visit::Queued(position.parse().unwrap()),
            None => Visit::Map,
        };
    }
    panic!("the map and the queue page kept sending the buyer to each other");
}

/// Visits until the visit finds `expected` (the ticker steps once a second, and a takeover
/// takes a lease's length), within 20 s; the last visit's finding otherwise.
pub(crate) async fn settles(
    buyer: &mut HttpBuyer,
    d: &Deployment,
    server: &str,
    expected: Visit,
) -> Visit {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let seen = visit(buyer, d, server).await;
        if seen == expected || tokio::time::Instant::now() > deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `buyer` leaves the room (the Leave button of the map or the queue page).
async fn leave(buyer: &HttpBuyer, d: &Deployment, server: &str) {
    let url = format!("{}/queue/leave", d.page(server));
    let reply = buyer.post(&url, &[]).await.unwrap();
    assert_eq!(reply.status, SEE_OTHER, "{}", reply.body);
}

/// `n` fresh buyers open the event in turn, buyer `i` through `server(i)`; the first
/// then shops and the others wait at positions 1, 2, … (checked).
pub(crate) async fn queue_up(
    d: &Deployment,
    n: usize,
    server: impl Fn(usize) -> String,
) -> Vec<HttpBuyer> {
    let mut buyers: Vec<HttpBuyer> = (0..n).map(|_| HttpBuyer::new()).collect();
    for (i, buyer) in buyers.iter_mut().enumerate() {
        visit(buyer, d, &server(i)).await;
    }
    assert_eq!(
        settles(&mut buyers[0], d, &server(0), Visit::Map).await,
        Visit::Map
    );
    for (i, buyer) in buyers.iter_mut().enumerate().skip(1) {
        let expected = Visit::Queued(i as u64);
        assert_eq!(
            settles(buyer, d, &server(i), expected.clone()).await,
            expected,
            "buyer {i}"
        );
    }
    buyers
}

async fn servers(d: &Deployment, n: usize) -> Vec<ServerProcess> {
    join_all((0..n).map(|_| d.server(|_| {}))).await
}

#[tokio::test]
async fn buyers_take_turns_in_join_order_whichever_of_three_servers_they_ask() {
    let d = Deployment::tiny().await;
    with_room(&d, 1, None).await;
    let servers = servers(&d, 3).await;
    let at = |i: usize| servers[i % 3].address.clone();
    let mut buyers = queue_up(&d, 6, at).await;
    // Each turn that ends gives exactly the next buyer in join order theirs, even when
    // the later buyers ask first, through other servers; every position is exact.
    for next in 1..6 {
        leave(&buyers[next - 1], &d, &at(next + 1)).await;
        assert_eq!(
            settles(&mut buyers[next], &d, &at(next * 2), Visit::Map).await,
            Visit::Map
        );
        for later in (next + 1..6).rev() {
            let seen = visit(&mut buyers[later], &d, &at(later + next)).await;
            assert_eq!(seen, Visit::Queued((later - next) as u64), "buyer {later}");
        }
    }
}

#[tokio::test]
async fn a_burst_of_buyers_through_three_servers_never_has_more_than_n_shopping() {
    let d = Deployment::tiny().await;
    with_room(&d, 3, None).await;
    let servers = servers(&d, 3).await;
    let mut buyers: Vec<HttpBuyer> = (0..45).map(|_| HttpBuyer::new()).collect();
    let arrivals = buyers.iter_mut().enumerate().map(|(i, buyer)| {
        let (server, d) = (servers[i % 3].address.clone(), &d);
        async move { visit(buyer, d, &server).await }
    });
    join_all(arrivals).await;
    // Once the ticker has stepped, and every one of them asks again: three shop, and the
    // rest have one position each.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let visits = buyers.iter_mut().enumerate().map(|(i, buyer)| {
        let (server, d) = (servers[(i + 1) % 3].address.clone(), &d);
        async move { visit(buyer, d, &server).await }
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
async fn positions_stay_exact_across_leaves_and_lapses_on_two_servers() {
    let d = Deployment::tiny().await;
    with_room(&d, 2, None).await;
    let servers = join_all((0..2).map(|_| d.server(|s| s.admission_ttl_ms = 1_500))).await;
    let at = |i: usize| servers[i % 2].address.clone();
    let mut b: Vec<HttpBuyer> = (0..6).map(|_| HttpBuyer::new()).collect();
    for (i, buyer) in b.iter_mut().enumerate() {
        visit(buyer, &d, &at(i)).await;
    }
    for (i, buyer) in b.iter_mut().enumerate() {
        let expected = match i {
            0 | 1 => Visit::Map,
            _ => Visit::Queued(i as u64 - 1),
        };
        let server = at(i + usize::from(i < 2));
        assert_eq!(
            settles(buyer, &d, &server, expected.clone()).await,
            expected
        );
    }
    // B0 leaves; B1 stops opening pages and its admission lapses. B2 and B3 shop, in
    // that order, and B4, B5 move up by exactly two.
    leave(&b[0], &d, &at(1)).await;
    assert_eq!(settles(&mut b[2], &d, &at(0), Visit::Map).await, Visit::Map);
    assert_eq!(visit(&mut b[3], &d, &at(1)).await, Visit::Queued(1));
    assert_eq!(settles(&mut b[3], &d, &at(1), Visit::Map).await, Visit::Map);
    for (i, buyer) in b.iter_mut().enumerate().skip(4) {
        assert_eq!(
            visit(buyer, &d, &at(i + 1)).await,
            Visit::Queued(i as u64 - 3)
        );
    }
    // B1 comes back after its lapse: at the back of the line, behind B5.
    assert_eq!(visit(&mut b[1], &d, &at(0)).await, Visit::Queued(3));
}

#[tokio::test]
async fn a_lapsed_admission_gives_the_next_buyer_their_turn_and_its_holds_keep_their_own_ttl() {
    let d = Deployment::tiny().await;
    with_room(&d, 1, None).await;
    let server = d
        .server(|s| {
            s.admission_ttl_ms = 1_000;
            s.hold_ttl_ms = 10_000;
        })
        .await;
    let at = server.address.as_str();
    let mut buyers = queue_up(&d, 2, |_| at.to_owned()).await;
    let [a, b] = &mut buyers[..] else {
        unreachable!()
    };
    let held = act(a, at, &d, d.seats[0], "hold").await;
    assert_eq!(held.status, SEE_OTHER, "{}", held.body);

    // A stops opening pages: the admission lapses on Redis's clock, and B's turn comes.
    assert_eq!(settles(b, &d, at, Visit::Map).await, Visit::Map);
    // A's next visit puts A back in line, and the queue page says A still holds a seat,
    // with the way to buy it.
    assert_eq!(visit(a, &d, at).await, Visit::Queued(1));
    let queued = a.get(&format!("{}/queue", d.page(at))).await.unwrap().body;
    assert!(queued.contains("You still hold 1 seat"), "{queued}");
    assert!(
        queued.contains(&format!("/events/{}/checkout", d.event)),
        "{queued}"
    );
    // A may take no more seats, but the hold it has keeps its TTL and its fence: it buys.
    assert!(
        act(a, at, &d, d.seats[1], "hold")
            .await
            .is_refused(&Refusal::NotAdmitted)
    );
    assert!(d.held(d.seats[0]).await);
    let bought = act(a, at, &d, d.seats[0], "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    assert!(bought.location.unwrap().starts_with("/orders/"));
}

#[tokio::test]
async fn holds_need_an_admission_so_a_fresh_cookie_jar_only_queues() {
    let d = Deployment::tiny().await;
    with_room(&d, 1, None).await;
    let server = d.server(|s| s.max_seats_per_buyer = 2).await;
    let at = server.address.as_str();
    let mut shopper = HttpBuyer::new();
    assert_eq!(settles(&mut shopper, &d, at, Visit::Map).await, Visit::Map);
    for seat in &d.seats[..2] {
        assert_eq!(act(&shopper, at, &d, *seat, "hold").await.status, SEE_OTHER);
    }
    let third = act(&shopper, at, &d, d.seats[2], "hold").await;
    assert!(
        third.is_refused(&Refusal::SeatLimit { held: 2, limit: 2 }),
        "{third:?}"
    );

    // The same person with a fresh cookie jar is a new buyer at the back of the line,
    // not a new allowance: every hold is refused until their turn.
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

    // The shopper's purchase ends their turn: the fresh jar's comes next.
    let bought = shopper
        .post(&event_url(&d, at, "checkout"), &[])
        .await
        .unwrap();
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    assert_eq!(settles(&mut fresh, &d, at, Visit::Map).await, Visit::Map);
    assert_eq!(visit(&mut shopper, &d, at).await, Visit::Queued(1));
}

/// Bad input writes nothing, whichever the event (issue 43): a section the venue lacks,
/// on an event behind a waiting room whose one place is taken, is a 404 as without a
/// room, not a 303 to the queue: no ticket is given, and the next arrival is first in line.
#[tokio::test]
async fn a_section_the_venue_lacks_is_a_404_behind_a_room_and_queues_nobody() {
    let d = Deployment::tiny().await;
    with_room(&d, 1, None).await;
    let server = d.server(|_| {}).await;
    let at = server.address.as_str();
    let mut shopper = HttpBuyer::new();
    assert_eq!(settles(&mut shopper, &d, at, Visit::Map).await, Visit::Map);
    let mut stranger = HttpBuyer::new();
    let missing = stranger
        .get(&event_url(&d, at, "sections/NO-SUCH"))
        .await
        .unwrap();
    assert_eq!(
        missing.status,
        reqwest::StatusCode::NOT_FOUND,
        "{missing:?}"
    );
    assert!(missing.body.contains("no section"), "{}", missing.body);
    let queue = format!("seatlock.queue.{}", d.event);
    assert_eq!(stranger.cookie(at, &queue), None, "no ticket given");
    let mut next = HttpBuyer::new();
    assert_eq!(
        visit(&mut next, &d, at).await,
        Visit::Queued(1),
        "nobody queued before"
    );
}

/// The ticket cookie of `buyer` for the deployment's event, as the browser keeps it.
fn ticket(buyer: &HttpBuyer, d: &Deployment, server: &str) -> String {
    buyer
        .cookie(server, &format!("seatlock.queue.{}", d.event))
        .expect("a ticket")
}

#[tokio::test]
async fn a_forged_a_borrowed_and_another_events_ticket_admit_nobody_and_write_nothing() {
    let d = Deployment::tiny().await;
    with_room(&d, 1, None).await;
    // A second event with a room of its own, where the waiting buyer also queues.
    let other: i64 = sqlx::query_scalar(
        "INSERT INTO events (venue_id, name, starts_at, on_sale_at, waiting_room_shoppers)
         SELECT venue_id, 'Other night', starts_at, on_sale_at, 1 FROM events WHERE id = $1
         RETURNING id",
    )
    .bind(d.event)
    .fetch_one(&d.db)
    .await
    .unwrap();
    let server = d.server(|_| {}).await;
    let at = server.address.as_str();
    let mut buyers = queue_up(&d, 2, |_| at.to_owned()).await;
    let name = format!("seatlock.queue.{}", d.event);
    let shopper_ticket = ticket(&buyers[0], &d, at);
    let waiting_ticket = ticket(&buyers[1], &d, at);
    let other_page = format!("{at}/events/{other}");
    buyers[1].get(&other_page).await.unwrap();
    let other_ticket = buyers[1]
        .cookie(at, &format!("seatlock.queue.{other}"))
        .expect("a ticket for the other event");

    // Forged: the waiting buyer rewrites their ticket to place 1 (the signature breaks).
    let mut forger = buyers.pop().unwrap();
    let forged = waiting_ticket.replacen(".L2.", ".L1.", 1);
    assert_ne!(forged, waiting_ticket);
    forger.set_cookie(at, &name, &forged).unwrap();
    // Borrowed: a stranger presents the shopper's ticket (it names the shopper).
    let mut stranger = HttpBuyer::new();
    visit(&mut stranger, &d, at).await;
    stranger.set_cookie(at, &name, &shopper_ticket).unwrap();
    // Another event's: a buyer presents their (signed, genuine) ticket of the other event
    // as this event's.
    let mut mover = HttpBuyer::new();
    mover.get(&other_page).await.unwrap();
    let moved = mover
        .cookie(at, &format!("seatlock.queue.{other}"))
        .unwrap_or(other_ticket);
    mover.set_cookie(at, &name, &moved).unwrap();

    for (who, buyer) in [
        ("forged", &mut forger),
        ("borrowed", &mut stranger),
        ("another event's", &mut mover),
    ] {
        assert!(
            matches!(visit(buyer, &d, at).await, Visit::Queued(_)),
            "{who}"
        );
        let hold = act(buyer, at, &d, d.seats[3], "hold").await;
        assert!(hold.is_refused(&Refusal::NotAdmitted), "{who}: {hold:?}");
    }
    assert!(!d.held(d.seats[3]).await, "nothing written");
}

#[tokio::test]
async fn a_ticker_killed_mid_advance_is_replaced_and_no_turn_is_skipped_or_given_twice() {
    let d = Deployment::tiny().await;
    with_room(&d, 1, None).await;
    let mut first = d.server(|_| {}).await;
    let mut buyers = queue_up(&d, 4, |_| first.address.clone()).await;
    // A second server has served the room too, so it contends for the ticker's lease.
    let second = d.server(|_| {}).await;
    let at = second.address.as_str();
    assert_eq!(visit(&mut buyers[3], &d, at).await, Visit::Queued(3));
    // The only ticker dies (SIGKILL) just as the turn is about to move.
    leave(&buyers[0], &d, at).await;
    first.kill().await.unwrap();
    // The second server's ticker takes the lease once it lapses: B1's turn, then B2's.
    assert_eq!(
        settles(&mut buyers[1], &d, at, Visit::Map).await,
        Visit::Map
    );
    assert_eq!(visit(&mut buyers[2], &d, at).await, Visit::Queued(1));
    assert_eq!(visit(&mut buyers[3], &d, at).await, Visit::Queued(2));
    leave(&buyers[1], &d, at).await;
    assert_eq!(
        settles(&mut buyers[2], &d, at, Visit::Map).await,
        Visit::Map
    );
    assert_eq!(visit(&mut buyers[3], &d, at).await, Visit::Queued(1));
}

#[tokio::test]
async fn a_ticker_paused_past_its_lease_is_fenced_when_it_wakes_and_never_more_than_n_shop() {
    let d = Deployment::tiny().await;
    with_room(&d, 1, None).await;
    let first = d.server(|_| {}).await;
    let mut buyers = queue_up(&d, 4, |_| first.address.clone()).await;
    let second = d.server(|_| {}).await;
    let at = second.address.as_str();
    assert_eq!(visit(&mut buyers[3], &d, at).await, Visit::Queued(3));
    // The ticker's process stops past its lease (5 s); the other takes over and moves
    // the line on.
    first.signal("STOP").unwrap();
    leave(&buyers[0], &d, at).await;
    assert_eq!(
        settles(&mut buyers[1], &d, at, Visit::Map).await,
        Visit::Map
    );
    // The old ticker wakes: whatever step it sends carries its old token and is refused;
    // the room stays one shopper, and the line stays exact.
    first.signal("CONT").unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    for server in [first.address.as_str(), at] {
        assert_eq!(visit(&mut buyers[2], &d, server).await, Visit::Queued(1));
        assert_eq!(visit(&mut buyers[3], &d, server).await, Visit::Queued(2));
    }
    let shopping: u64 = redis::cmd("ZCARD")
        .arg(format!(
            "lease:{{{}}}:~admitted",
            seatlock::seats::event_group(&d.settings.lease_namespace, d.event)
        ))
        .query_async(&mut d.leases.redis())
        .await
        .unwrap();
    assert_eq!(shopping, 1);
}

#[tokio::test]
async fn a_server_killed_costs_no_buyer_a_place() {
    let d = Deployment::tiny().await;
    with_room(&d, 1, None).await;
    let mut first = d.server(|_| {}).await;
    let second = d.server(|_| {}).await;
    let mut buyers = queue_up(&d, 2, |_| first.address.clone()).await;
    first.kill().await.unwrap();

    // The room lives in Redis and the places in the browsers' tickets: the other server
    // knows both buyers.
    let at = second.address.as_str();
    assert_eq!(visit(&mut buyers[1], &d, at).await, Visit::Queued(1));
    assert_eq!(visit(&mut buyers[0], &d, at).await, Visit::Map);
    assert_eq!(
        act(&buyers[0], at, &d, d.seats[0], "hold").await.status,
        SEE_OTHER
    );
}

/// A room of one on a Redis of its own, `n` buyers queued through one server, then that
/// Redis restarted empty: the room and its epoch are gone, the buyers' tickets remain.
async fn queued_then_room_lost(
    n: usize,
) -> (RedisServer, Deployment, ServerProcess, Vec<HttpBuyer>) {
    let mut redis = RedisServer::start().await.unwrap();
    let (admin, _) = store_urls().unwrap();
    let d = Deployment::new(&admin, &redis.url(), TINY_VENUES).await;
    with_room(&d, 1, None).await;
    let server = d.server(|_| {}).await;
    let at = server.address.clone();
    let buyers = queue_up(&d, n, |_| at.clone()).await;
    redis.restart_empty().await.unwrap();
    (redis, d, server, buyers)
}

#[tokio::test]
async fn redis_restarted_empty_loses_the_room_and_buyers_join_again_as_they_ask() {
    let (_redis, d, server, mut buyers) = queued_then_room_lost(3).await;
    let at = server.address.as_str();

    // The room went with Redis (its epoch with it): each ticket is stale, and the room
    // fills again in the order the buyers ask (here the last one first). No 5xx.
    let order = [2, 1, 0];
    let expected = [Visit::Map, Visit::Queued(1), Visit::Queued(2)];
    for (i, expected) in order.into_iter().zip(expected) {
        let seen = settles(&mut buyers[i], &d, at, expected.clone()).await;
        assert_eq!(seen, expected, "buyer {i}");
    }
}

#[tokio::test]
async fn buying_one_of_several_held_seats_keeps_the_turn_until_the_last() {
    let d = Deployment::tiny().await;
    with_room(&d, 1, None).await;
    let server = d.server(|_| {}).await;
    let at = server.address.as_str();
    let mut buyers = queue_up(&d, 2, |_| at.to_owned()).await;
    let [a, b] = &mut buyers[..] else {
        unreachable!()
    };
    for seat in &d.seats[..2] {
        assert_eq!(act(a, at, &d, *seat, "hold").await.status, SEE_OTHER);
    }
    assert_eq!(
        act(a, at, &d, d.seats[0], "confirm").await.status,
        SEE_OTHER
    );
    // A still holds a seat: still A's turn, B still waits.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(visit(b, &d, at).await, Visit::Queued(1));
    assert_eq!(visit(a, &d, at).await, Visit::Map);
    assert_eq!(
        act(a, at, &d, d.seats[1], "confirm").await.status,
        SEE_OTHER
    );
    assert_eq!(settles(b, &d, at, Visit::Map).await, Visit::Map);
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

#[tokio::test]
async fn queue_streams_count_against_the_stream_budget_and_end_on_the_drain() {
    let d = Deployment::tiny().await;
    with_room(&d, 1, None).await;
    let mut server = d
        .server(|s| {
            s.max_streams = 3;
            s.drain_ms = 1_000;
        })
        .await;
    let at = server.address.clone();
    let mut buyers = queue_up(&d, 4, |_| at.clone()).await;
    let url = format!("{}/queue/stream", d.page(&at));
    let mut open = Vec::new();
    for buyer in &buyers[1..] {
        let mut stream = EventStream::open_as(buyer, &url)
            .await
            .expect("within the budget");
        assert_eq!(stream.next().await.0, "position");
        open.push(stream);
    }
    // The budget is spent: a fourth stream, a queue's or a map's, is refused at once.
    let refused = EventStream::open_as(&buyers[0], &url).await.err();
    assert_eq!(refused, Some(StatusCode::SERVICE_UNAVAILABLE));
    let map = reqwest::get(format!("{}/stream", d.page(&at)))
        .await
        .unwrap();
    assert_eq!(map.status(), StatusCode::SERVICE_UNAVAILABLE);
    visit(&mut buyers[0], &d, &at).await;

    // SIGTERM: once the drain's second has passed, the open queue streams end and the
    // server exits, well within the time a supervisor gives it.
    server.signal("TERM").unwrap();
    for mut stream in open {
        let ended = tokio::time::timeout(Duration::from_secs(5), async {
            while stream.next_or_end().await.is_some() {}
        });
        ended.await.expect("the queue stream ended on the drain");
    }
    server
        .exited_within(Duration::from_secs(6))
        .await
        .expect("the drain finished with queue pages open");
}

#[tokio::test]
async fn a_queued_browsers_stream_says_admitted_when_the_turn_comes() {
    let d = Deployment::tiny().await;
    with_room(&d, 1, None).await;
    let server = d.server(|_| {}).await;
    let at = server.address.as_str();
    let buyers = queue_up(&d, 2, |_| at.to_owned()).await;
    let url = format!("{}/queue/stream", d.page(at));
    let mut stream = EventStream::open_as(&buyers[1], &url).await.unwrap();
    let (name, data) = stream.next().await;
    assert_eq!(name, "position");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&data).unwrap()["position"],
        1
    );
    leave(&buyers[0], &d, at).await;
    let (name, data) = stream.next().await;
    assert_eq!(name, "admitted", "{data}");
    assert!(data.contains(&format!("/events/{}", d.event)));
}

#[tokio::test]
async fn a_stale_tickets_queue_stream_says_reload_once_the_room_began_again() {
    let (_redis, d, server, mut buyers) = queued_then_room_lost(2).await;
    let at = server.address.as_str();
    // Buyer 0 asks first: the room begins again, in a new epoch, and it is their turn.
    let seen = settles(&mut buyers[0], &d, at, Visit::Map).await;
    assert_eq!(seen, Visit::Map);
    // Buyer 1 still has the old epoch's ticket: its stream must not place it in line.
    let url = format!("{}/queue/stream", d.page(at));
    let mut stream = EventStream::open_as(&buyers[1], &url).await.unwrap();
    let (name, data) = stream.next().await;
    assert_eq!(name, "reload", "a stale ticket is no ticket: {data}");
}
