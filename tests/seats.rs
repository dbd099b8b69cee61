//! The seat picker over HTTP against real Redis and Postgres: one fresh database per
//! test, servers on port 0 ([`TestApp::builder`]).

use std::time::Duration;

use reqwest::StatusCode;
use seatlock::http::error::Refusal;
use seatlock::profile::BuyerProfile;
use seatlock::seats::SeatRef;
use seatlock::seats::queries::{self, Sale};
use seatlock_harness::http::{EventStream, snapshot_shows_held};
use seatlock_harness::{DEMO_VENUES, HttpBuyer, RedisServer, TestApp, eventually};

async fn tiny() -> TestApp {
    TestApp::builder().spawn().await.expect("test app")
}

/// A server over a fresh tiny database with a hold TTL of `ttl_ms`.
async fn tiny_with_ttl(ttl_ms: u64) -> TestApp {
    TestApp::builder()
        .with(move |s| s.hold_ttl_ms = ttl_ms)
        .spawn()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_hold_shows_a_countdown_and_refuses_a_second_buyer() {
    let app = tiny().await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut a = HttpBuyer::new();
    let reply = a
        .seat_action(&app.address, event, seats[0], "hold")
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert_eq!(
        reply.location.unwrap(),
        format!("/events/{event}#seat-{}", seats[0])
    );

    let page = a
        .get(&format!("{}/events/{event}", app.address))
        .await
        .unwrap();
    assert!(page.body.contains("held for you until"), "{}", page.body);
    assert!(
        page.body
            .contains(&format!("id=\"seat-{}\" class=\"seat mine", seats[0]))
    );

    // Another buyer's page shows it held once the event's shared board is read again
    // (at once on an open page, by its stream).
    let mut b = HttpBuyer::new();
    let map = format!("{}/events/{event}", app.address);
    let held = format!("id=\"seat-{}\" class=\"seat held", seats[0]);
    page_showing(&mut b, &map, &held).await;
    let reply = b
        .seat_action(&app.address, event, seats[0], "hold")
        .await
        .unwrap();
    assert!(reply.is_refused(&Refusal::SomeoneIsBuying), "{reply:?}");
    assert!(
        reply.body.contains("data-refusal=\"held\""),
        "{}",
        reply.body
    );
}

#[tokio::test]
async fn confirm_sells_once_and_a_double_submit_returns_the_same_order_paid_once() {
    let app = tiny().await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut a = HttpBuyer::new();
    a.seat_action(&app.address, event, seats[1], "hold")
        .await
        .unwrap();
    let url = format!("{}/events/{event}/seats/{}/confirm", app.address, seats[1]);
    let (first, second) = tokio::join!(a.post(&url, &[]), a.post(&url, &[]));
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(first.status, StatusCode::SEE_OTHER, "{}", first.body);
    assert_eq!(second.status, StatusCode::SEE_OTHER, "{}", second.body);
    assert_eq!(
        first.location, second.location,
        "both submits lead to the same order"
    );
    assert_eq!(app.orders_for(event, seats[1]).await, 1);
    let order = a
        .get(&format!(
            "{}{}",
            app.address,
            first.location.clone().unwrap()
        ))
        .await
        .unwrap();
    assert!(order.body.contains("Order confirmed"));
    // And once more, after the hold is gone from the session.
    let third = a.post(&url, &[]).await.unwrap();
    assert_eq!(third.status, StatusCode::SEE_OTHER);
    assert_eq!(app.orders_for(event, seats[1]).await, 1);
    // Three confirms, one hold: one payment, captured by the one order.
    let payments: Vec<(String, Option<i64>)> = sqlx::query_as(
        "SELECT status, order_id FROM payments WHERE event_id = $1 AND seat_id = $2",
    )
    .bind(event)
    .bind(seats[1])
    .fetch_all(app.db())
    .await
    .unwrap();
    let order_id: i64 = first.location.unwrap()["/orders/".len()..].parse().unwrap();
    assert_eq!(payments, [("captured".to_owned(), Some(order_id))]);
}

#[tokio::test]
async fn a_confirm_after_the_hold_lapsed_is_refused_even_if_nobody_bought() {
    let app = tiny_with_ttl(300).await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut a = HttpBuyer::new();
    a.seat_action(&app.address, event, seats[2], "hold")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(450)).await;
    let reply = a
        .seat_action(&app.address, event, seats[2], "confirm")
        .await
        .unwrap();
    assert!(reply.is_refused(&Refusal::HoldExpired), "{reply:?}");
    assert_eq!(app.orders_for(event, seats[2]).await, 0);
    let seat = SeatRef {
        event_id: event,
        seat_id: seats[2],
    };
    let status = queries::seat_status(app.db(), seat).await.unwrap().unwrap();
    assert!(!status.sold, "nothing half-written");
}

#[tokio::test]
async fn postgres_refuses_a_stale_fencing_token() {
    let app = tiny().await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    let seat = SeatRef {
        event_id: event,
        seat_id: seats[3],
    };
    // A newer holder's token (42) has been accepted by the row.
    sqlx::query("UPDATE event_seats SET fence_token = 42 WHERE event_id = $1 AND seat_id = $2")
        .bind(event)
        .bind(seat.seat_id)
        .execute(app.db())
        .await
        .unwrap();
    let mut tx = app.db().begin().await.unwrap();
    let idle = Duration::from_secs(5);
    let buyer = |id: &str| BuyerProfile {
        id: id.into(),
        name: id.into(),
    };
    queries::authorize_payment(app.db(), seat, "paid", "current")
        .await
        .unwrap();
    let late = queries::sell(&mut tx, seat, 41, &buyer("late"), "paid", idle)
        .await
        .unwrap();
    assert_eq!(late, Sale::Refused, "41 < 42: refused");
    let current = queries::sell(&mut tx, seat, 42, &buyer("current"), "paid", idle)
        .await
        .unwrap();
    assert!(matches!(current, Sale::Sold { .. }), "42 = 42: accepted");
    tx.rollback().await.unwrap();
}

/// No capture, no order: the fenced write that finds its payment voided (by
/// the last attempt to leave it, or the sweep) says [`Sale::Unpaid`], and the purchase
/// rolls it back; a voided authorization joined again is captured. Before, the statement
/// inserted the order and captured nothing.
#[tokio::test]
async fn a_sale_whose_payment_was_voided_is_unpaid_and_joined_again_is_captured() {
    let app = tiny().await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    let seat = SeatRef {
        event_id: event,
        seat_id: seats[4],
    };
    let buyer = BuyerProfile {
        id: "b".into(),
        name: "B".into(),
    };
    let idle = Duration::from_secs(5);
    queries::authorize_payment(app.db(), seat, "k", "b")
        .await
        .unwrap();
    assert!(
        queries::leave_payment(app.db(), "k").await.unwrap(),
        "voided"
    );
    let mut tx = app.db().begin().await.unwrap();
    let sale = queries::sell(&mut tx, seat, 1, &buyer, "k", idle)
        .await
        .unwrap();
    assert_eq!(sale, Sale::Unpaid);
    tx.rollback().await.unwrap();
    queries::authorize_payment(app.db(), seat, "k", "b")
        .await
        .unwrap();
    let mut tx = app.db().begin().await.unwrap();
    let sale = queries::sell(&mut tx, seat, 1, &buyer, "k", idle)
        .await
        .unwrap();
    assert!(matches!(sale, Sale::Sold { .. }), "{sale:?}");
    tx.commit().await.unwrap();
    assert_eq!(app.orders_for(event, seats[4]).await, 1);
}

/// Two attempts joined one payment; the first leaves without buying and does not void
/// it, the second leaves and does (the last one out). A captured payment is never left.
#[tokio::test]
async fn only_the_last_attempt_to_leave_a_payment_voids_it() {
    let app = tiny().await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    let seat = SeatRef {
        event_id: event,
        seat_id: seats[5],
    };
    let status = || async {
        sqlx::query_scalar::<_, String>("SELECT status FROM payments WHERE idempotency_key = 'two'")
            .fetch_one(app.db())
            .await
            .unwrap()
    };
    for _ in 0..2 {
        queries::authorize_payment(app.db(), seat, "two", "b")
            .await
            .unwrap();
    }
    assert!(!queries::leave_payment(app.db(), "two").await.unwrap());
    assert_eq!(status().await, "authorized", "one attempt is still in");
    assert!(queries::leave_payment(app.db(), "two").await.unwrap());
    assert_eq!(status().await, "voided");
    assert!(
        !queries::leave_payment(app.db(), "two").await.unwrap(),
        "left once"
    );
}

#[tokio::test]
async fn a_holder_whose_lease_lapsed_cannot_buy_after_a_newer_holder_did() {
    // Long enough for B's hold to outlive B's confirm on a busy machine.
    let app = tiny_with_ttl(1_000).await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    let (mut a, mut b) = (HttpBuyer::new(), HttpBuyer::new());
    let base = &app.address;
    a.seat_action(base, event, seats[4], "hold").await.unwrap();
    // A "pauses" past its lease.
    let key = app.seat_key(event, seats[4]);
    eventually(Duration::from_secs(5), "A's hold to lapse", || async {
        app.state.leases.remaining(&key).await.unwrap().is_none()
    })
    .await;
    let hold = b.seat_action(base, event, seats[4], "hold").await.unwrap();
    assert_eq!(hold.status, StatusCode::SEE_OTHER);
    let bought = b
        .seat_action(base, event, seats[4], "confirm")
        .await
        .unwrap();
    assert_eq!(bought.status, StatusCode::SEE_OTHER);
    let late = a
        .seat_action(base, event, seats[4], "confirm")
        .await
        .unwrap();
    assert_eq!(late.status, StatusCode::CONFLICT);
    assert_eq!(app.orders_for(event, seats[4]).await, 1);
}

/// Holds then confirms; returns the final status (303 bought, 409 lost the race).
async fn buy(mut buyer: HttpBuyer, base: String, event: i64, seat: i64) -> StatusCode {
    let hold = buyer.seat_action(&base, event, seat, "hold").await.unwrap();
    if hold.status != StatusCode::SEE_OTHER {
        return hold.status;
    }
    buyer
        .seat_action(&base, event, seat, "confirm")
        .await
        .unwrap()
        .status
}

#[tokio::test]
async fn two_servers_racing_for_a_seat_sell_it_exactly_once() {
    let settings = TestApp::builder()
        .venues(DEMO_VENUES)
        .settings()
        .await
        .unwrap();
    let one = TestApp::spawn(settings.clone()).await.unwrap();
    let two = TestApp::spawn(settings).await.unwrap();
    let (event, seats) = one.first_event_seats().await.unwrap();
    for &seat in &seats[..100] {
        let (ra, rb) = tokio::join!(
            buy(HttpBuyer::new(), one.address.clone(), event, seat),
            buy(HttpBuyer::new(), two.address.clone(), event, seat),
        );
        let sold = [ra, rb]
            .iter()
            .filter(|s| **s == StatusCode::SEE_OTHER)
            .count();
        assert_eq!(sold, 1, "seat {seat}: {ra} / {rb}");
        assert!([ra, rb].contains(&StatusCode::CONFLICT));
        assert_eq!(one.orders_for(event, seat).await, 1);
    }
}

#[tokio::test]
async fn fencing_tokens_keep_growing_after_redis_restarts_empty() {
    let mut redis = RedisServer::start().await.unwrap();
    let app = TestApp::builder().redis(redis.url()).spawn().await.unwrap();
    let (event, seats) = app.first_event_seats().await.unwrap();
    let key = app.seat_key(event, seats[0]);
    let ttl = Duration::from_secs(60);
    let before = app.state.leases.acquire(&key, "a", ttl).await.unwrap();

    redis.restart_empty().await.unwrap();
    // The first call after the restart may meet the dropped connection; the manager
    // reconnects on its own.
    let mut after = app.state.leases.acquire(&key, "b", ttl).await;
    for _ in 0..20 {
        if after.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        after = app.state.leases.acquire(&key, "b", ttl).await;
    }
    let after = after.expect("Redis is back");
    assert!(
        after.fencing_token() > before.fencing_token(),
        "{before:?} then {after:?}"
    );
    assert!(
        !app.state.leases.release(&before).await.unwrap(),
        "the old lease is gone"
    );
}

#[tokio::test]
async fn bad_ids_and_other_buyers_holds_get_clear_4xx_pages() {
    let app = tiny().await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut a = HttpBuyer::new();
    let base = &app.address;
    for (path, status) in [
        ("/events/999999".to_owned(), StatusCode::NOT_FOUND),
        ("/events/abc".to_owned(), StatusCode::BAD_REQUEST),
        ("/events/-1".to_owned(), StatusCode::BAD_REQUEST),
        ("/orders/1".to_owned(), StatusCode::NOT_FOUND),
        ("/nowhere".to_owned(), StatusCode::NOT_FOUND),
    ] {
        let reply = a.get(&format!("{base}{path}")).await.unwrap();
        assert_eq!(reply.status, status, "{path}");
        assert!(
            reply.body.contains("class=\"message\""),
            "{path}: an HTML page with a message"
        );
    }
    a.get(&format!("{base}/events/{event}")).await.unwrap();
    for (path, status) in [
        (
            format!("/events/{event}/seats/999999/hold"),
            StatusCode::NOT_FOUND,
        ),
        (
            format!("/events/{event}/seats/x1/hold"),
            StatusCode::BAD_REQUEST,
        ),
        (
            format!("/events/999999/seats/{}/hold", seats[0]),
            StatusCode::NOT_FOUND,
        ),
        (
            format!("/events/{event}/seats/{}/confirm", seats[0]),
            StatusCode::FORBIDDEN,
        ),
        (
            format!("/events/{event}/seats/{}/release", seats[0]),
            StatusCode::FORBIDDEN,
        ),
    ] {
        let reply = a.post(&format!("{base}{path}"), &[]).await.unwrap();
        assert_eq!(reply.status, status, "{path}: {}", reply.body);
        assert!(reply.body.contains("class=\"message\""), "{path}");
    }
    // B holds a seat; A can neither release nor confirm it.
    let mut b = HttpBuyer::new();
    b.seat_action(base, event, seats[5], "hold").await.unwrap();
    for action in ["release", "confirm"] {
        let reply = a.seat_action(base, event, seats[5], action).await.unwrap();
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{action}");
    }
    assert_eq!(app.orders_for(event, seats[5]).await, 0);
    let key = app.seat_key(event, seats[5]);
    assert!(
        app.state.leases.remaining(&key).await.unwrap().is_some(),
        "B still holds it"
    );
}

#[tokio::test]
async fn posts_without_a_valid_csrf_token_or_from_another_site_are_refused() {
    let app = tiny().await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    let url = format!("{}/events/{event}/seats/{}/hold", app.address, seats[0]);
    let reply = HttpBuyer::new().post(&url, &[]).await.unwrap(); // no page visited: no token
    assert_eq!(reply.status, StatusCode::FORBIDDEN);

    let mut b = HttpBuyer::new();
    b.get(&format!("{}/events/{event}", app.address))
        .await
        .unwrap();
    let wrong = b
        .post(&url, &[("authenticity_token", "forged")])
        .await
        .unwrap();
    assert_eq!(wrong.status, StatusCode::FORBIDDEN);
    let huge = "x".repeat(64 * 1024);
    let reply = b.post(&url, &[("padding", &huge)]).await.unwrap();
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);

    let foreign = reqwest::Client::new()
        .post(&url)
        .header("origin", "https://evil.example")
        .form(&[("authenticity_token", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), StatusCode::FORBIDDEN);
    assert_eq!(app.held_count(event).await, 0);
}

#[tokio::test]
async fn healthz_names_the_store_that_is_down() {
    let app = tiny().await;
    let reply = HttpBuyer::new()
        .get(&format!("{}/healthz", app.address))
        .await
        .unwrap();
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));

    let mut redis = RedisServer::start().await.unwrap();
    let app = TestApp::builder()
        .no_venues()
        .redis(redis.url())
        .with(|s| s.store_timeout_ms = 500)
        .spawn()
        .await
        .unwrap();
    redis.kill();
    let reply = HttpBuyer::new()
        .get(&format!("{}/healthz", app.address))
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        reply.body.contains("redis") && !reply.body.contains("postgres"),
        "{}",
        reply.body
    );
}

/// Issue 29: the arena opens on its overview (36 sections drawn, no seat, at most
/// 100 kB), each section's page lists that section's seats (11,056 in all), a section
/// the venue does not have is a 404 page, and a hold sent from a section's page (its
/// `section` field) returns to it, as best available does.
#[tokio::test]
async fn the_arena_opens_on_its_overview_and_each_section_lists_its_seats() {
    let app = TestApp::builder()
        .venues(DEMO_VENUES)
        .spawn()
        .await
        .unwrap();
    let arena: i64 = sqlx::query_scalar(
        "SELECT e.id FROM events e JOIN venues v ON v.id = e.venue_id WHERE v.slug = 'harbour-arena'",
    )
    .fetch_one(app.db())
    .await
    .unwrap();
    let mut a = HttpBuyer::new();
    let page = a
        .get(&format!("{}/events/{arena}", app.address))
        .await
        .unwrap();
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(page.body.matches("<a class=\"sec\"").count(), 36);
    assert_eq!(page.body.matches("class=\"seat ").count(), 0);
    assert!(page.body.len() <= 100_000, "{} bytes", page.body.len());
    let codes: Vec<String> = sqlx::query_scalar(
        "SELECT sec.code FROM sections sec JOIN events e ON e.venue_id = sec.venue_id
          WHERE e.id = $1 ORDER BY sec.position",
    )
    .bind(arena)
    .fetch_all(app.db())
    .await
    .unwrap();
    let mut seats = 0;
    for code in &codes {
        let url = format!("{}/events/{arena}/sections/{code}", app.address);
        let section = a.get(&url).await.unwrap();
        assert_eq!(section.status, StatusCode::OK, "{code}");
        seats += section.body.matches("class=\"seat available").count();
    }
    assert_eq!(seats, 11_056);
    let missing = a
        .get(&format!("{}/events/{arena}/sections/NOPE", app.address))
        .await
        .unwrap();
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(
        missing.body.contains("has no section") && missing.body.contains("NOPE"),
        "{}",
        missing.body
    );

    let seat: i64 = sqlx::query_scalar(
        "SELECT s.id FROM seats s JOIN sections sec ON sec.id = s.section_id
           JOIN events e ON e.venue_id = sec.venue_id
          WHERE e.id = $1 AND sec.code = '101' ORDER BY s.id LIMIT 1",
    )
    .bind(arena)
    .fetch_one(app.db())
    .await
    .unwrap();
    let url = format!("{}/events/{arena}/seats/{seat}/hold", app.address);
    let held = a.post(&url, &[("section", "101")]).await.unwrap();
    assert_eq!(held.status, StatusCode::SEE_OTHER, "{}", held.body);
    assert_eq!(
        held.location.unwrap(),
        format!("/events/{arena}/sections/101#seat-{seat}")
    );
    let url = format!("{}/events/{arena}/best-available", app.address);
    let best = a.post(&url, &[("quantity", "2")]).await.unwrap();
    assert_eq!(best.status, StatusCode::SEE_OTHER, "{}", best.body);
    assert_eq!(
        best.location.unwrap(),
        format!("/events/{arena}/sections/FLOOR-1#cart")
    );
}

#[tokio::test]
async fn concurrent_holds_from_one_session_can_all_be_bought() {
    let app = tiny().await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut a = HttpBuyer::new();
    a.get(&format!("{}/events/{event}", app.address))
        .await
        .unwrap();
    let url = |seat: i64| format!("{}/events/{event}/seats/{seat}/hold", app.address);
    let (u0, u1, u2, u3) = (url(seats[8]), url(seats[9]), url(seats[10]), url(seats[11]));
    // Four requests of one session at once: each saves its own copy of the session's holds.
    let held = tokio::join!(
        a.post(&u0, &[]),
        a.post(&u1, &[]),
        a.post(&u2, &[]),
        a.post(&u3, &[])
    );
    for reply in [held.0, held.1, held.2, held.3] {
        assert_eq!(reply.unwrap().status, StatusCode::SEE_OTHER);
    }
    for &seat in &seats[8..12] {
        let reply = a
            .seat_action(&app.address, event, seat, "confirm")
            .await
            .unwrap();
        assert_eq!(
            reply.status,
            StatusCode::SEE_OTHER,
            "seat {seat}: {}",
            reply.body
        );
        assert_eq!(app.orders_for(event, seat).await, 1);
    }
}

/// Holds `stale` and `other`, then releases `stale` and holds it again while a slow
/// confirm of `other` runs in another tab. The hold of `stale` is now a new grant. A copy
/// of the first one, kept anywhere, would be stale.
async fn stale_copy(app: &TestApp, a: &mut HttpBuyer, event: i64, stale: i64, other: i64) {
    for seat in [stale, other] {
        let held = a.seat_action(&app.address, event, seat, "hold").await;
        assert_eq!(held.unwrap().status, StatusCode::SEE_OTHER);
    }
    let tab = a.another_tab(Default::default());
    let url = format!("{}/events/{event}/seats/{other}/confirm", app.address);
    let slow = tokio::spawn(async move { tab.post(&url, &[]).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(300)).await; // the confirm has started
    for action in ["release", "hold"] {
        let reply = a.seat_action(&app.address, event, stale, action).await;
        assert_eq!(reply.unwrap().status, StatusCode::SEE_OTHER, "{action}");
    }
    assert_eq!(slow.await.unwrap().status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn release_and_confirm_act_on_the_live_lease_after_the_hold_was_granted_again() {
    let app = TestApp::builder()
        .with(|s| s.payment_delay_ms = 1_500)
        .spawn()
        .await
        .unwrap();
    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut a = HttpBuyer::new();

    // Release with a stale copy: the live lease is released, not left to block the seat.
    stale_copy(&app, &mut a, event, seats[12], seats[13]).await;
    let released = a
        .seat_action(&app.address, event, seats[12], "release")
        .await;
    assert_eq!(released.unwrap().status, StatusCode::SEE_OTHER);
    let key = app.seat_key(event, seats[12]);
    assert!(
        app.state.leases.remaining(&key).await.unwrap().is_none(),
        "release answered success: the buyer's lease must be gone"
    );
    let mut b = HttpBuyer::new();
    let taken = b.seat_action(&app.address, event, seats[12], "hold").await;
    assert_eq!(
        taken.unwrap().status,
        StatusCode::SEE_OTHER,
        "free for others"
    );

    // Confirm with a stale copy: the live hold buys, it is not called expired.
    stale_copy(&app, &mut a, event, seats[14], seats[15]).await;
    let bought = a
        .seat_action(&app.address, event, seats[14], "confirm")
        .await;
    let bought = bought.unwrap();
    assert_eq!(bought.status, StatusCode::SEE_OTHER, "{bought:?}");
    assert_eq!(app.orders_for(event, seats[14]).await, 1);
}

/// A sold seat is refused at hold by the lease script, through every server of the
/// deployment: the sale retired the seat's lease in the shared Redis. Where Redis no
/// longer knows (it lost its data, or the server that sold it died before retiring it),
/// the hold is granted, the fenced write refuses the confirm as `sold`, and that confirm
/// retires the seat again.
#[tokio::test]
async fn a_sold_seat_is_refused_at_hold_by_every_server_and_at_confirm_if_redis_forgot() {
    let settings = TestApp::builder().settings().await.unwrap();
    let one = TestApp::spawn(settings.clone()).await.unwrap();
    let two = TestApp::spawn(settings).await.unwrap();
    let (event, seats) = one.first_event_seats().await.unwrap();
    let seat = seats[5];
    // The second server has served this event before the sale.
    let mut b = HttpBuyer::new();
    let warm = b.seat_action(&two.address, event, seats[6], "hold").await;
    assert_eq!(warm.unwrap().status, StatusCode::SEE_OTHER);
    let mut a = HttpBuyer::new();
    for action in ["hold", "confirm"] {
        let reply = a.seat_action(&one.address, event, seat, action).await;
        assert_eq!(reply.unwrap().status, StatusCode::SEE_OTHER, "{action}");
    }

    let refused = b.seat_action(&two.address, event, seat, "hold").await;
    let refused = refused.unwrap();
    assert!(refused.is_refused(&Refusal::AlreadySold), "{refused:?}");

    let retired = one.seat_key(event, seat).retired_key();
    let forgotten: i64 = redis::cmd("DEL")
        .arg(&retired)
        .query_async(&mut one.state.redis.connection())
        .await
        .unwrap();
    assert_eq!(forgotten, 1, "the sale retired the seat in Redis");
    let granted = b.seat_action(&two.address, event, seat, "hold").await;
    assert_eq!(granted.unwrap().status, StatusCode::SEE_OTHER);
    let confirm = b.seat_action(&two.address, event, seat, "confirm").await;
    let confirm = confirm.unwrap();
    assert!(confirm.is_refused(&Refusal::AlreadySold), "{confirm:?}");
    assert_eq!(one.orders_for(event, seat).await, 1);
    let again = HttpBuyer::new()
        .seat_action(&one.address, event, seat, "hold")
        .await
        .unwrap();
    assert!(
        again.is_refused(&Refusal::AlreadySold),
        "retired again: {again:?}"
    );
}

/// Sales close when the event starts: a hold is refused, and a confirm of a hold taken
/// before the start is refused at the moment of its write, writing nothing. The event
/// starts as events do, by the clock (a server reads an event's start once, on its first
/// hold, and events are not rescheduled while on sale).
#[tokio::test]
async fn seats_of_an_event_that_has_started_are_no_longer_sold() {
    let app = tiny().await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    let starts_at: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
        "UPDATE events SET starts_at = now() + interval '2 seconds' WHERE id = $1
         RETURNING starts_at",
    )
    .bind(event)
    .fetch_one(app.db())
    .await
    .unwrap();
    let mut early = HttpBuyer::new();
    let held = early
        .seat_action(&app.address, event, seats[20], "hold")
        .await;
    assert_eq!(held.unwrap().status, StatusCode::SEE_OTHER);
    let until_start = (starts_at - chrono::Utc::now())
        .to_std()
        .unwrap_or_default();
    tokio::time::sleep(until_start + Duration::from_millis(100)).await;
    let late = HttpBuyer::new()
        .seat_action(&app.address, event, seats[21], "hold")
        .await
        .unwrap();
    assert!(late.is_refused(&Refusal::EventStarted), "{late:?}");
    let confirm = early
        .seat_action(&app.address, event, seats[20], "confirm")
        .await;
    let confirm = confirm.unwrap();
    assert!(confirm.is_refused(&Refusal::EventStarted), "{confirm:?}");
    assert_eq!(app.orders_for(event, seats[20]).await, 0);
}

/// Pages are sent gzip-compressed to clients that ask (the seat map is the big one: the
/// arena's 1.67 MB of HTML goes as about 100 kB); live pages' event streams are not, so
/// no event waits in a compressor's buffer.
#[tokio::test]
async fn seat_maps_are_sent_compressed_and_event_streams_are_not() {
    let app = tiny().await;
    let (event, _) = app.first_event_seats().await.unwrap();
    let client = reqwest::Client::new();
    let get = |path: String| {
        client
            .get(format!("{}{path}", app.address))
            .header(reqwest::header::ACCEPT_ENCODING, "gzip")
            .send()
    };
    let page = get(format!("/events/{event}")).await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert_eq!(page.headers()[reqwest::header::CONTENT_ENCODING], "gzip");
    let stream = get(format!("/events/{event}/stream")).await.unwrap();
    assert_eq!(
        stream.headers()[reqwest::header::CONTENT_TYPE],
        "text/event-stream"
    );
    assert!(
        !stream
            .headers()
            .contains_key(reqwest::header::CONTENT_ENCODING)
    );
}

/// An authorization left open (its server killed mid-purchase, or its statement arriving
/// after the purchase gave up) is voided once it is older than the longest hold (ten hold
/// TTLs, every extension) plus the request deadline: nobody can capture it any more.
/// Fresh ones and captured ones stay.
#[tokio::test]
async fn authorizations_left_open_past_the_hold_and_the_deadline_are_voided() {
    let app = tiny().await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    for (key, seat, age_s) in [("old", seats[0], 4 * 3_600), ("fresh", seats[1], 0)] {
        sqlx::query(
            "INSERT INTO payments (idempotency_key, event_id, seat_id, buyer_id, amount_cents,
                                   authorized_at)
             VALUES ($1, $2, $3, 'b', 100, now() - make_interval(secs => $4))",
        )
        .bind(key)
        .bind(event)
        .bind(seat)
        .bind(age_s as f64)
        .execute(app.db())
        .await
        .unwrap();
    }
    let older_than = seatlock::seats::payments::stale_after(&app.state.settings);
    assert!(older_than < Duration::from_secs(4 * 3_600), "the premise");
    let voided = queries::void_stale_authorizations(app.db(), older_than)
        .await
        .unwrap();
    assert_eq!(voided, 1);
    let statuses: Vec<(String, String)> =
        sqlx::query_as("SELECT idempotency_key, status FROM payments ORDER BY idempotency_key")
            .fetch_all(app.db())
            .await
            .unwrap();
    assert_eq!(
        statuses,
        [
            ("fresh".to_owned(), "authorized".to_owned()),
            ("old".to_owned(), "voided".to_owned())
        ]
    );
}

/// With the leases in a Redis of their own (`--lease-store-url redis://…`, another server
/// than `--redis-url`, which keeps the sessions), the live feed listens to the lease
/// store: a hold is pushed to the event's pages, and it is in the lease Redis only. Each
/// Redis is checked by `/healthz`: the sessions' one going down is reported.
#[tokio::test]
async fn with_the_leases_in_a_redis_of_their_own_holds_are_pushed_live() {
    let (mut sessions, leases) = (
        RedisServer::start().await.unwrap(),
        RedisServer::start().await.unwrap(),
    );
    let url = leases.url();
    let app = TestApp::builder()
        .redis(sessions.url())
        .with(move |s| s.lease_store_url = Some(url))
        .spawn()
        .await
        .unwrap();
    assert!(
        app.state
            .live
            .wait_until_live(Duration::from_secs(10))
            .await
    );
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
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let message = tokio::time::timeout(Duration::from_secs(5), pushed.recv())
        .await
        .expect("the hold is pushed within 5 s")
        .unwrap();
    assert_eq!(message.event, "seat", "{message:?}");
    assert_eq!(message.data["seat"], seats[0], "{message:?}");
    assert_eq!(message.data["state"], "held", "{message:?}");

    let key = app.seat_key(event, seats[0]).lease_key();
    let in_redis = async |url: &str| -> bool {
        let mut conn = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        redis::cmd("EXISTS")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap()
    };
    assert!(
        in_redis(&leases.url()).await,
        "the lease is in the lease store"
    );
    assert!(
        !in_redis(&sessions.url()).await,
        "and not in the sessions' Redis"
    );

    let health = |app: &TestApp| reqwest::get(format!("{}/healthz", app.address));
    assert_eq!(health(&app).await.unwrap().status(), StatusCode::OK);
    sessions.kill();
    let reply = health(&app).await.unwrap();
    assert_eq!(reply.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.text().await.unwrap(), "unavailable: redis");
}

#[tokio::test]
async fn an_event_is_stored_as_an_instant_and_shown_on_the_venues_clock() {
    // The tiny venue is in New York; its event is at 20:00 there, whatever the season.
    let app = tiny().await;
    let (event, _) = app.first_event_seats().await.unwrap();
    let wall_clock: String = sqlx::query_scalar(
        "SELECT to_char(e.starts_at AT TIME ZONE v.time_zone, 'HH24:MI')
           FROM events e JOIN venues v ON v.id = e.venue_id WHERE e.id = $1",
    )
    .bind(event)
    .fetch_one(app.db())
    .await
    .unwrap();
    assert_eq!(
        wall_clock, "20:00",
        "seeding read the venue file's time as New York's"
    );

    let mut buyer = HttpBuyer::new();
    let event_page = format!("{}/events/{event}", app.address);
    // Instants either side of a clock change, each 19:30 in New York: in July on
    // daylight time (23:30 UTC), in January on standard time (00:30 UTC the next day).
    for (instant, shown) in [
        ("2027-07-10 23:30Z", "Sat 10 Jul 2027, 19:30 EDT"),
        ("2027-01-09 00:30Z", "Fri 8 Jan 2027, 19:30 EST"),
    ] {
        sqlx::query("UPDATE events SET starts_at = $2::timestamptz WHERE id = $1")
            .bind(event)
            .bind(instant)
            .execute(app.db())
            .await
            .unwrap();
        let body = page_showing(&mut buyer, &event_page, shown).await;
        assert!(body.contains(shown), "{instant} is not shown as {shown}");
        let home = buyer.get(&app.address).await.unwrap().body;
        assert!(home.contains(shown), "the home page: {home}");
    }
}

#[tokio::test]
async fn a_bad_event_in_any_venue_file_seeds_nothing_and_names_the_file() {
    let (admin, _) = seatlock_harness::store_urls().unwrap();
    let url = seatlock_harness::fresh_database(&admin).await.unwrap();
    let db = sqlx::PgPool::connect(&url).await.unwrap();
    let dir = std::env::temp_dir().join(seatlock_harness::stores::unique_name("venues"));
    std::fs::create_dir_all(&dir).unwrap();
    let tiny =
        std::fs::read_to_string(format!("{}/tiny.json", seatlock_harness::TINY_VENUES)).unwrap();
    std::fs::write(dir.join("a.json"), &tiny).unwrap();
    // The second venue's extra event is at a time no clock shows.
    let bad = tiny
        .replace("tiny-theatre", "second-stage")
        .replace(
            "\"zones\"",
            "\"more_events\": [{\"name\": \"Late\", \"starts_in_days\": 8, \"time\": \"25:00\"}],\n \"zones\"",
        );
    std::fs::write(dir.join("b.json"), bad).unwrap();
    let err = seatlock::seed::seed(&db, &dir).await.unwrap_err();
    assert!(
        format!("{err:#}").contains("b.json: event \"Late\""),
        "{err:#}"
    );
    let venues: i64 = sqlx::query_scalar("SELECT count(*) FROM venues")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(venues, 0, "nothing of a.json was written either");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An open map converges to the stores' truth after a change it was never told of: a
/// hold deleted from Redis behind the lease library's back (no release message, no
/// expiry) leaves the map showing it held until two convergence steps find the truth
/// moved and send every open map a snapshot without it. It does so while another buyer
/// keeps holding and releasing a seat beside it, so that messages never stop.
#[tokio::test]
async fn an_open_map_converges_after_a_change_it_was_never_told_of() {
    let app = tiny().await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut buyer = HttpBuyer::new();
    buyer
        .get(&format!("{}/events/{event}", app.address))
        .await
        .unwrap();
    let held = buyer
        .seat_action(&app.address, event, seats[0], "hold")
        .await
        .unwrap();
    assert_eq!(held.status, StatusCode::SEE_OTHER, "{}", held.body);
    let url = format!("{}/events/{event}/stream", app.address);
    let mut stream = seatlock_harness::http::EventStream::open(&url).await;
    let (name, data) = stream.next().await;
    assert_eq!(name, "snapshot");
    assert!(snapshot_shows_held(&data, seats[0]), "held: {data}");

    // Another buyer holds and releases seat 2 every 100 ms, until the test ends.
    let busy = {
        let (address, seat) = (app.address.clone(), seats[1]);
        tokio::spawn(async move {
            let mut other = HttpBuyer::new();
            other
                .get(&format!("{address}/events/{event}"))
                .await
                .unwrap();
            loop {
                for action in ["hold", "release"] {
                    other
                        .seat_action(&address, event, seat, action)
                        .await
                        .unwrap();
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        })
    };

    // The hold vanishes without a word: its key and its holding deleted directly.
    let key = app.seat_key(event, seats[0]);
    let mut redis = app.state.redis.connection();
    let _: () = redis::pipe()
        .del(key.lease_key())
        .hdel(key.holders_key(), key.name())
        .query_async(&mut redis)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + 4 * seatlock::venue::live::CONVERGE_INTERVAL;
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the map never converged"
        );
        let (name, data) = stream.next().await;
        if name == "snapshot" && !snapshot_shows_held(&data, seats[0]) {
            break;
        }
    }
    busy.abort();
}

/// The page at `url` as `buyer` gets it once it contains `wanted`. An event's pages are
/// built on its board, shared by every view and read again once it is
/// [`BOARD_TTL`](seatlock::venue::board::BOARD_TTL) old, so a change made by another
/// buyer (or straight in the database) shows within that; panics after five times it.
async fn page_showing(buyer: &mut HttpBuyer, url: &str, wanted: &str) -> String {
    let deadline = tokio::time::Instant::now() + 5 * seatlock::venue::board::BOARD_TTL;
    loop {
        let body = buyer.get(url).await.unwrap().body;
        if body.contains(wanted) {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{url} never showed {wanted:?}: {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A copy of event `event` (same venue and start, its own seats), as `seatlock seed`
/// makes one: its id.
async fn another_event(app: &TestApp, event: i64) -> i64 {
    let mut tx = app.db().begin().await.unwrap();
    let other: i64 = sqlx::query_scalar(
        "INSERT INTO events (venue_id, name, starts_at)
         SELECT venue_id, 'Another night', starts_at FROM events WHERE id = $1 RETURNING id",
    )
    .bind(event)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    seatlock::seed::create_event_seats(&mut tx, other)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    other
}

/// The map names no one (issue 43): two named buyers hold seats in two events; a stranger
/// reads both events' pages and streams, before and while they hold more, and finds
/// neither buyer's id, name or owner token, only held seats. Each holder's own stream
/// tells its holds as `mine`, and another's as `held`.
#[tokio::test]
async fn the_map_and_its_stream_name_no_holder_to_a_stranger() {
    let app = tiny().await;
    let (first, seats) = app.first_event_seats().await.unwrap();
    let second = another_event(&app, first).await;
    let second_seats = seatlock_harness::event_seats(app.db(), second)
        .await
        .unwrap();
    let base = app.address.clone();
    let mut secrets = Vec::new();
    let mut holders = Vec::new();
    for (n, name) in ["Alice Holder", "Bob Holder"].into_iter().enumerate() {
        let mut buyer = HttpBuyer::new();
        let page = buyer.get(&format!("{base}/events/{first}")).await.unwrap();
        let id = seatlock_harness::http::page_buyer_id(&page.body).unwrap();
        secrets.extend([id.clone(), name.to_owned()]);
        let named = buyer
            .post(&format!("{base}/me"), &[("name", name)])
            .await
            .unwrap();
        assert_eq!(named.status, StatusCode::SEE_OTHER, "{}", named.body);
        for (event, seat) in [(first, seats[n]), (second, second_seats[n])] {
            let held = buyer.seat_action(&base, event, seat, "hold").await.unwrap();
            assert_eq!(held.status, StatusCode::SEE_OTHER, "{}", held.body);
            let key = app.seat_key(event, seat);
            let lease = app.state.leases.owned_by(&key, &id).await.unwrap();
            secrets.push(lease.expect("held").owner().as_str().to_owned());
        }
        holders.push(buyer);
    }
    let mut stranger = HttpBuyer::new();
    let mut seen = String::new();
    let mut streams = Vec::new();
    for event in [first, second] {
        seen += &stranger
            .get(&format!("{base}/events/{event}"))
            .await
            .unwrap()
            .body;
        seen += &stranger
            .get(&format!("{base}/events/{event}/sections/MAIN"))
            .await
            .unwrap()
            .body;
        let url = format!("{base}/events/{event}/stream");
        let mut stream = EventStream::open_as(&stranger, &url).await.unwrap();
        let (name, snapshot) = stream.next().await;
        assert_eq!(name, "snapshot");
        assert!(snapshot_shows_held(
            &snapshot,
            if event == first {
                seats[0]
            } else {
                second_seats[0]
            }
        ));
        seen += &snapshot;
        streams.push(stream);
    }
    // Each holder's own map tells its hold as theirs, and the other's as held.
    let url = format!("{base}/events/{first}/stream");
    let mut alices = EventStream::open_as(&holders[0], &url).await.unwrap();
    let (_, snapshot) = alices.next().await;
    let snapshot: serde_json::Value = serde_json::from_str(&snapshot).unwrap();
    assert_eq!(
        snapshot["mine"],
        serde_json::json!([seats[0]]),
        "{snapshot}"
    );
    // More holds while the stranger's streams are open: each reaches them as `held`.
    for (n, holder) in holders.iter_mut().enumerate() {
        for (event, seat) in [(first, seats[2 + n]), (second, second_seats[2 + n])] {
            let held = holder
                .seat_action(&base, event, seat, "hold")
                .await
                .unwrap();
            assert_eq!(held.status, StatusCode::SEE_OTHER, "{}", held.body);
        }
    }
    for stream in &mut streams {
        for _ in 0..2 {
            let (name, change) = stream.next().await;
            assert_eq!(name, "seat");
            assert!(change.contains("\"state\":\"held\""), "{change}");
            seen += &change;
        }
    }
    let (_, mine) = alices.next().await;
    assert!(
        mine.contains(&format!("\"seat\":{}", seats[2])) && mine.contains("\"mine\""),
        "{mine}"
    );
    let (_, theirs) = alices.next().await;
    assert!(theirs.contains("\"held\""), "{theirs}");
    for secret in &secrets {
        assert!(
            !seen.contains(secret.as_str()),
            "a stranger sees {secret:?}"
        );
    }
}

/// An extended hold outlives its TTL, and so does the authorization of its purchase. The
/// sweep waits for the longest a hold may last (ten TTLs, every extension) plus the
/// request deadline, so it leaves that authorization open, and the sale captures it.
/// With the old threshold (one TTL plus the deadline) the sweep voided it here.
#[tokio::test]
async fn an_extended_holds_authorization_is_not_swept_and_its_sale_captures_it() {
    let app = TestApp::builder()
        // Short enough for a test, long enough for a busy machine: a page that timed out
        // would leave the buyer without a form token (a 403 on the hold).
        .with(|s| {
            s.hold_ttl_ms = 2_000;
            s.store_timeout_ms = 500;
        })
        .spawn()
        .await
        .unwrap();
    let (event, seats) = app.first_event_seats().await.unwrap();
    let seat = SeatRef {
        event_id: event,
        seat_id: seats[5],
    };
    let base = format!("{}/events/{event}", app.address);
    let mut a = HttpBuyer::new();
    assert_eq!(a.get(&base).await.unwrap().status, StatusCode::OK);
    let hold = a
        .post(&format!("{base}/seats/{}/hold", seat.seat_id), &[])
        .await
        .unwrap();
    assert_eq!(hold.status, StatusCode::SEE_OTHER, "{}", hold.body);
    let holding = app
        .state
        .leases
        .holders(&app.event_group(event))
        .await
        .unwrap()
        .holdings
        .remove(0);
    // The purchase's authorization, under the hold's payment key (event:seat:token).
    let payment = format!("{event}:{}:{}", seat.seat_id, holding.fencing_token.0);
    queries::authorize_payment(app.db(), seat, &payment, &holding.holder)
        .await
        .unwrap();
    // The buyer keeps asking for more time until the authorization is older than one TTL
    // plus the request deadline.
    let settings = &app.state.settings;
    let one_ttl = settings.hold_ttl() + settings.request_deadline();
    let older_than_one_ttl = || async {
        sqlx::query_scalar::<_, bool>(
            "SELECT authorized_at < now() - make_interval(secs => $2)
               FROM payments WHERE idempotency_key = $1",
        )
        .bind(&payment)
        .bind(one_ttl.as_secs_f64())
        .fetch_one(app.db())
        .await
        .unwrap()
    };
    while !older_than_one_ttl().await {
        tokio::time::sleep(Duration::from_millis(800)).await;
        let more = a.post(&format!("{base}/extend"), &[]).await.unwrap();
        assert_eq!(more.status, StatusCode::SEE_OTHER, "{}", more.body);
    }
    let stale_after = seatlock::seats::payments::stale_after(settings);
    let swept = queries::void_stale_authorizations(app.db(), stale_after)
        .await
        .unwrap();
    assert_eq!(swept, 0, "the live hold's authorization is not swept");
    let bought = a
        .post(&format!("{base}/seats/{}/confirm", seat.seat_id), &[])
        .await
        .unwrap();
    assert_eq!(bought.status, StatusCode::SEE_OTHER, "{}", bought.body);
    let status: String =
        sqlx::query_scalar("SELECT status FROM payments WHERE idempotency_key = $1")
            .bind(&payment)
            .fetch_one(app.db())
            .await
            .unwrap();
    assert_eq!(status, "captured");
}
