//! Several seats at once over HTTP against real Redis and Postgres (a fresh database per
//! test, the tiny venue: rows A and B are two blocks of 4 at $50.00 with an aisle between,
//! rows C and D one block of 8 at $25.00): best available (one group hold), the per-buyer
//! limit, the cart's one-transaction checkout, release all.

use std::collections::{BTreeMap, BTreeSet};

use reqwest::StatusCode;
use seatlock::error::Refusal;
use seatlock_harness::{HttpBuyer, TestApp};

async fn tiny() -> TestApp {
    TestApp::builder().spawn().await.expect("test app")
}

/// A buyer who has opened the event page (a session and a CSRF token).
async fn buyer(app: &TestApp, event: i64) -> HttpBuyer {
    let mut buyer = HttpBuyer::new();
    buyer
        .get(&format!("{}/events/{event}", app.address))
        .await
        .unwrap();
    buyer
}

async fn best_available(
    app: &TestApp,
    buyer: &HttpBuyer,
    event: i64,
    quantity: &str,
) -> seatlock_harness::Reply {
    let url = format!("{}/events/{event}/best-available", app.address);
    buyer.post(&url, &[("quantity", quantity)]).await.unwrap()
}

async fn post(
    app: &TestApp,
    buyer: &HttpBuyer,
    event: i64,
    action: &str,
) -> seatlock_harness::Reply {
    let url = format!("{}/events/{event}/{action}", app.address);
    buyer.post(&url, &[]).await.unwrap()
}

/// The live holds of the event by holder: seat ids and the fencing tokens they carry.
async fn holds(app: &TestApp, event: i64) -> BTreeMap<String, (BTreeSet<i64>, BTreeSet<u64>)> {
    let snapshot = app
        .state
        .leases
        .holders(&app.event_group(event))
        .await
        .unwrap();
    let mut by_holder: BTreeMap<String, (BTreeSet<i64>, BTreeSet<u64>)> = BTreeMap::new();
    for h in snapshot.holdings {
        let entry = by_holder.entry(h.holder).or_default();
        entry.0.insert(h.name.parse().unwrap());
        entry.1.insert(h.fencing_token.0);
    }
    by_holder
}

/// (section id, row, number, price) of each seat.
async fn places(app: &TestApp, event: i64, seats: &BTreeSet<i64>) -> Vec<(i64, String, i32, i64)> {
    let ids: Vec<i64> = seats.iter().copied().collect();
    sqlx::query_as(
        "SELECT s.section_id, s.row_label, s.number, es.price_cents
           FROM event_seats es JOIN seats s ON s.id = es.seat_id
          WHERE es.event_id = $1 AND es.seat_id = ANY($2) ORDER BY s.number",
    )
    .bind(event)
    .bind(&ids)
    .fetch_all(app.db())
    .await
    .unwrap()
}

/// Whether `seats` are adjacent in one row (same section, row and price, consecutive
/// numbers).
fn adjacent_in_one_row(places: &[(i64, String, i32, i64)]) -> bool {
    places
        .windows(2)
        .all(|w| w[0].0 == w[1].0 && w[0].1 == w[1].1 && w[0].3 == w[1].3 && w[0].2 + 1 == w[1].2)
}

/// A tiny-venue app and a buyer who holds four seats there by best available.
async fn holding_four() -> (TestApp, i64, HttpBuyer) {
    let app = tiny().await;
    let (event, _) = app.first_event_seats().await.unwrap();
    let a = buyer(&app, event).await;
    assert_eq!(
        best_available(&app, &a, event, "4").await.status,
        StatusCode::SEE_OTHER
    );
    (app, event, a)
}

async fn orders_of_event(app: &TestApp, event: i64) -> Vec<(i64, i64)> {
    sqlx::query_as("SELECT seat_id, fence_token FROM orders WHERE event_id = $1 ORDER BY seat_id")
        .bind(event)
        .fetch_all(app.db())
        .await
        .unwrap()
}

#[tokio::test]
async fn best_available_4_holds_4_adjacent_seats_of_one_row_with_one_token() {
    let app = tiny().await;
    let (event, _) = app.first_event_seats().await.unwrap();
    let mut a = buyer(&app, event).await;
    let reply = best_available(&app, &a, event, "4").await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    assert_eq!(reply.location.unwrap(), format!("/events/{event}#cart"));

    let holds = holds(&app, event).await;
    assert_eq!(holds.len(), 1, "{holds:?}");
    let (seats, tokens) = holds.values().next().unwrap();
    assert_eq!(seats.len(), 4);
    assert_eq!(
        tokens.len(),
        1,
        "one fencing token for the group: {tokens:?}"
    );
    let places = places(&app, event, seats).await;
    assert!(adjacent_in_one_row(&places), "{places:?}");
    assert!(
        places.iter().all(|p| p.3 == 5000),
        "best zone first: {places:?}"
    );

    // The cart: each seat, the total, one countdown, Buy all and Release all; the
    // checkout page shows the same.
    for path in [
        format!("/events/{event}"),
        format!("/events/{event}/checkout"),
    ] {
        let page = a.get(&format!("{}{path}", app.address)).await.unwrap();
        assert_eq!(page.status, StatusCode::OK);
        assert!(
            page.body.contains("$200.00"),
            "total on {path}: {}",
            page.body
        );
        assert_eq!(page.body.matches("id=\"cart-countdown\"").count(), 1);
        assert!(
            page.body
                .contains(&format!("formaction=\"/events/{event}/checkout\""))
        );
        assert!(
            page.body
                .contains(&format!("formaction=\"/events/{event}/release-all\""))
        );
    }
}

#[tokio::test]
async fn two_buyers_best_available_4_at_once_get_disjoint_whole_groups() {
    let app = tiny().await;
    let (event, _) = app.first_event_seats().await.unwrap();
    for round in 0..5 {
        let (a, b) = (buyer(&app, event).await, buyer(&app, event).await);
        let (ra, rb) = tokio::join!(
            best_available(&app, &a, event, "4"),
            best_available(&app, &b, event, "4")
        );
        assert_eq!(
            ra.status,
            StatusCode::SEE_OTHER,
            "round {round}: {}",
            ra.body
        );
        assert_eq!(
            rb.status,
            StatusCode::SEE_OTHER,
            "round {round}: {}",
            rb.body
        );
        let holds = holds(&app, event).await;
        assert_eq!(holds.len(), 2, "round {round}: {holds:?}");
        let groups: Vec<_> = holds.values().collect();
        assert!(groups[0].0.is_disjoint(&groups[1].0));
        for (seats, tokens) in groups {
            assert_eq!((seats.len(), tokens.len()), (4, 1), "round {round}");
            assert!(adjacent_in_one_row(&places(&app, event, seats).await));
        }
        for buyer in [&a, &b] {
            assert_eq!(
                post(&app, buyer, event, "release-all").await.status,
                StatusCode::SEE_OTHER
            );
        }
    }
}

#[tokio::test]
async fn checkout_buys_every_held_seat_in_one_step_each_with_its_own_token() {
    let app = tiny().await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut a = buyer(&app, event).await;
    assert_eq!(
        best_available(&app, &a, event, "3").await.status,
        StatusCode::SEE_OTHER
    );
    // A seat picked by hand joins the same cart, with a token of its own.
    let single = *seats.last().unwrap();
    let reply = a
        .seat_action(&app.address, event, single, "hold")
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    let held = holds(&app, event).await;
    let (held_seats, tokens) = held.values().next().unwrap().clone();
    assert_eq!((held_seats.len(), tokens.len()), (4, 2));

    let reply = post(&app, &a, event, "checkout").await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    assert_eq!(reply.location.unwrap(), format!("/events/{event}#tickets"));
    let orders = orders_of_event(&app, event).await;
    assert_eq!(
        orders.iter().map(|o| o.0).collect::<BTreeSet<_>>(),
        held_seats
    );
    assert_eq!(
        orders.iter().map(|o| o.1 as u64).collect::<BTreeSet<_>>(),
        tokens
    );
    let captured: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM payments WHERE event_id = $1 AND status = 'captured' AND order_id IS NOT NULL",
    )
    .bind(event)
    .fetch_one(app.db())
    .await
    .unwrap();
    assert_eq!(captured, 4);
    assert!(
        holds(&app, event).await.is_empty(),
        "the holds are given up"
    );
    let page = a
        .get(&format!("{}/events/{event}", app.address))
        .await
        .unwrap();
    assert_eq!(page.body.matches("class=\"seat bought").count(), 4);
    // A second checkout finds nothing to buy.
    let again = post(&app, &a, event, "checkout").await;
    assert_eq!(again.status, StatusCode::FORBIDDEN);
    assert_eq!(orders_of_event(&app, event).await.len(), 4);
}

#[tokio::test]
async fn a_checkout_sent_twice_at_once_buys_each_seat_once_and_both_lead_to_the_tickets() {
    let (app, event, a) = holding_four().await;
    let (first, second) = tokio::join!(
        post(&app, &a, event, "checkout"),
        post(&app, &a, event, "checkout")
    );
    for reply in [first, second] {
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
        assert_eq!(reply.location.unwrap(), format!("/events/{event}#tickets"));
    }
    assert_eq!(orders_of_event(&app, event).await.len(), 4);
    let payments: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM payments WHERE event_id = $1 GROUP BY status")
            .bind(event)
            .fetch_all(app.db())
            .await
            .unwrap();
    assert_eq!(
        payments,
        vec![("captured".to_owned(), 4)],
        "each seat paid once"
    );
}

#[tokio::test]
async fn a_lapsed_hold_at_checkout_is_named_nothing_is_bought_and_the_rest_stay_held() {
    let (app, event, a) = holding_four().await;
    let (seats, _) = holds(&app, event).await.into_values().next().unwrap();
    let lapsing = *seats.iter().nth(1).unwrap();
    // The second seat's lease lapses (Redis expires it now).
    let mut redis = app.state.redis.connection();
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(app.seat_key(event, lapsing).lease_key())
        .arg(1)
        .query_async(&mut redis)
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;

    let reply = post(&app, &a, event, "checkout").await;
    assert!(
        reply.is_refused(&Refusal::HoldsLapsed {
            seats: String::new()
        }),
        "{reply:?}"
    );
    let place = &places(&app, event, &BTreeSet::from([lapsing])).await[0];
    let named = format!("Main row {} seat {}", place.1, place.2);
    assert!(reply.body.contains(&named), "names {named}: {}", reply.body);
    assert!(
        orders_of_event(&app, event).await.is_empty(),
        "nothing bought"
    );
    let authorized: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM payments WHERE event_id = $1 AND status <> 'voided'",
    )
    .bind(event)
    .fetch_one(app.db())
    .await
    .unwrap();
    assert_eq!(authorized, 0, "every authorization voided");
    let mut rest = seats.clone();
    rest.remove(&lapsing);
    for &seat in &seats {
        let key = app.seat_key(event, seat);
        let held = app.state.leases.remaining(&key).await.unwrap().is_some();
        assert_eq!(
            held,
            seat != lapsing,
            "seat {seat}: only the lapsed hold is gone"
        );
    }

    // The retry buys the three still held.
    let reply = post(&app, &a, event, "checkout").await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let bought: BTreeSet<i64> = orders_of_event(&app, event)
        .await
        .iter()
        .map(|o| o.0)
        .collect();
    assert_eq!(bought, rest);
}

#[tokio::test]
async fn the_per_buyer_limit_refuses_the_ninth_seat_and_bad_quantities() {
    let app = tiny().await;
    let (event, seats) = app.first_event_seats().await.unwrap();
    let mut a = buyer(&app, event).await;
    for bad in ["9", "0", "-1", "four", ""] {
        let reply = best_available(&app, &a, event, bad).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{bad:?}");
        assert!(
            reply.body.contains("Choose between 1 and 8 seats."),
            "{}",
            reply.body
        );
    }
    assert_eq!(
        best_available(&app, &a, event, "4").await.status,
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        best_available(&app, &a, event, "4").await.status,
        StatusCode::SEE_OTHER
    );
    let (held, _) = holds(&app, event).await.into_values().next().unwrap();
    assert_eq!(held.len(), 8);
    let ninth = *seats.iter().find(|s| !held.contains(s)).unwrap();
    let reply = a
        .seat_action(&app.address, event, ninth, "hold")
        .await
        .unwrap();
    assert!(
        reply.is_refused(&Refusal::SeatLimit { held: 8, limit: 8 }),
        "{reply:?}"
    );
    assert!(reply.body.contains("at most 8 seats"), "{}", reply.body);
    let reply = best_available(&app, &a, event, "1").await;
    assert!(reply.is_refused(&Refusal::SeatLimit { held: 8, limit: 8 }));
    assert_eq!(holds(&app, event).await.values().next().unwrap().0.len(), 8);
    // Another buyer is not limited by a's holds.
    let mut b = buyer(&app, event).await;
    let reply = b
        .seat_action(&app.address, event, ninth, "hold")
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn release_all_frees_every_held_seat() {
    let (app, event, a) = holding_four().await;
    let (first, _) = holds(&app, event).await.into_values().next().unwrap();
    let reply = post(&app, &a, event, "release-all").await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    assert!(holds(&app, event).await.is_empty());
    // The same best block goes to the next buyer, and a's limit is free again.
    let b = buyer(&app, event).await;
    assert_eq!(
        best_available(&app, &b, event, "4").await.status,
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        best_available(&app, &a, event, "8").await.status,
        StatusCode::SEE_OTHER
    );
    let by_holder = holds(&app, event).await;
    assert!(by_holder.values().any(|(seats, _)| *seats == first));
}

#[tokio::test]
async fn no_block_of_adjacent_seats_is_a_409_that_holds_nothing() {
    let app = TestApp::builder()
        .with(|s| s.max_seats_per_buyer = 20)
        .spawn()
        .await
        .unwrap();
    let (event, _) = app.first_event_seats().await.unwrap();
    let a = buyer(&app, event).await;
    let reply = best_available(&app, &a, event, "9").await;
    assert!(
        reply.is_refused(&Refusal::NoBlock { quantity: 9 }),
        "{reply:?}"
    );
    assert!(holds(&app, event).await.is_empty());
}
