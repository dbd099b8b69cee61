//! Buyers who hang up mid-purchase (a closed tab, a lost signal) and holders that stall
//! inside theirs: a purchase, once started, runs to its end whatever the client does, and
//! a stalled holder blocks a valid one only briefly.

use std::time::Duration;

use seatlock::failpoint::PausePoint;
use seatlock_harness::eventually;

use crate::deployment::*;

/// At every point of a confirm, a buyer who hangs up while the server is parked there
/// ends with the order (the purchase ran to its end), paid once; the same browser's retry
/// shows that order. Nothing is left open in Postgres.
#[tokio::test]
async fn a_buyer_who_hangs_up_at_any_point_of_a_confirm_ends_with_the_order_paid_once() {
    let d = Deployment::tiny().await;
    let server = d.server(|_| {}).await;
    let points = [
        PausePoint::BeforeWrite,
        PausePoint::BeforeOwnerCheck,
        PausePoint::BeforeCommit,
        PausePoint::AfterCommit,
    ];
    for (parks, (point, &seat)) in points.into_iter().zip(&d.seats).enumerate() {
        let (buyer, id, _) = holder(&d, &server.address, seat).await;
        // Shorter than the purchase's idle bound, so the transaction outlives the pause.
        let tab = buyer.another_tab(pause_headers(point, 300));
        let url = format!("{}/events/{}/seats/{seat}/confirm", server.address, d.event);
        let confirm = tokio::spawn(async move { tab.post(&url, &[]).await });
        parked(&server, parks + 1).await;
        confirm.abort(); // the buyer hangs up: the connection closes mid-request
        assert!(confirm.await.is_err(), "{point:?}: the buyer got no answer");
        eventually(
            Duration::from_secs(10),
            "the purchase to finish",
            || async { !d.orders(seat).await.is_empty() },
        )
        .await;
        let order = d.assert_sold_once_to(seat, &id).await;
        let again = act(&buyer, &server.address, &d, seat, "confirm").await;
        assert_eq!(again.status, SEE_OTHER, "{point:?}: {}", again.body);
        let location = format!("/orders/{}", order.id);
        assert_eq!(
            again.location.as_deref(),
            Some(location.as_str()),
            "{point:?}"
        );
        assert_eq!(d.payments(seat).await, ["captured"], "{point:?}: paid once");
    }
    d.assert_no_transaction_left_open().await;
    d.assert_invariant().await;
}

/// A holder whose purchase stalls after its fenced write (the seat's row locked, its
/// lease lapsing) and a valid holder who comes next on another server: Postgres ends the
/// stalled transaction after the purchase's idle bound, within the valid holder's lock
/// wait, so the valid holder buys without a 5xx. The stalled holder, waking, is refused.
#[tokio::test]
async fn a_holder_stalled_inside_its_purchase_cannot_keep_a_valid_holder_from_buying() {
    let d = Deployment::tiny().await;
    // The stalled holder writes late in its lease (2 s), then stalls for 6 s.
    let slow = d.server(|s| s.payment_delay_ms = 1_600).await;
    let other = d.server(|_| {}).await;
    let seat = d.seats[5];
    let (stalled, _, _) = holder(&d, &slow.address, seat).await;
    let tab = stalled.another_tab(pause_headers(PausePoint::BeforeCommit, 6_000));
    let url = format!("{}/events/{}/seats/{seat}/confirm", slow.address, d.event);
    let late = tokio::spawn(async move { tab.post(&url, &[]).await.unwrap() });

    // The valid holder keeps trying to hold until the stalled holder's lease lapses,
    // then buys at once, while the stalled transaction may still hold the row.
    let (valid, valid_id) = loop {
        let mut buyer = seatlock_harness::HttpBuyer::new();
        buyer.get(&d.page(&other.address)).await.unwrap();
        let hold = act(&buyer, &other.address, &d, seat, "hold").await;
        if hold.status == SEE_OTHER {
            let page = buyer.get(&d.page(&other.address)).await.unwrap().body;
            break (buyer, buyer_id(&page));
        }
        assert!(hold.status.is_client_error(), "hold: {hold:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let bought = act(&valid, &other.address, &d, seat, "confirm").await;
    assert_eq!(
        bought.status, SEE_OTHER,
        "the valid holder buys: {}",
        bought.body
    );
    d.assert_sold_once_to(seat, &valid_id).await;

    let late = late.await.unwrap();
    assert!(
        late.status.is_client_error() || late.status.as_u16() == 503,
        "{late:?}"
    );
    d.assert_sold_once_to(seat, &valid_id).await;
    d.assert_no_transaction_left_open().await;
    d.assert_invariant().await;
}
