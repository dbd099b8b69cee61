//! One buyer, two tabs: the first tab's confirm is parked at each point of its
//! purchase while the second tab confirms the same seat, checks out (with a lapsed hold
//! in the cart, or a whole one) or releases everything, on the same server or another
//! one. Whatever the interleaving, no order exists without its captured payment, no
//! capture without its order, and once every attempt has answered no authorization is
//! left open: the last attempt to leave a payment voids it, and only that one.

use seatlock::failpoint::PausePoint;
use seatlock_harness::Reply;

use crate::deployment::*;

/// What the second tab does while the first one's confirm is parked.
#[derive(Clone, Copy, Debug)]
enum SecondTab {
    /// Confirms the same seat (a double submit from another tab).
    Confirm,
    /// Checks out the cart, in which the hold on another seat has lapsed: 409.
    CheckoutWithALapsedHold,
    /// Checks out the whole cart, both holds live.
    Checkout,
    /// Releases every hold of the event.
    ReleaseAll,
}

const POINTS: [PausePoint; 4] = [
    PausePoint::BeforeWrite,
    PausePoint::BeforeOwnerCheck,
    PausePoint::BeforeCommit,
    PausePoint::AfterCommit,
];

/// Every (second tab, pause point, server) interleaving: 4 × 4 × 2 = 32.
#[tokio::test]
async fn a_second_tab_never_leaves_an_order_unpaid_at_any_point_on_any_server() {
    let mut tried = 0;
    for second in [
        SecondTab::Confirm,
        SecondTab::CheckoutWithALapsedHold,
        SecondTab::Checkout,
        SecondTab::ReleaseAll,
    ] {
        // A fresh database per kind of second tab: 8 interleavings × 2 seats.
        let d = Deployment::tiny().await;
        let servers = [d.server(|_| {}).await, d.server(|_| {}).await];
        let first_server = &servers[0].address;
        let mut seats = d.seats.chunks(2);
        let mut parks = 0;
        for point in POINTS {
            for other in &servers {
                let case = format!("{second:?} at {point:?} through {}", other.address);
                let &[seat, other_seat] = seats.next().unwrap() else {
                    unreachable!("the tiny venue has an even number of seats")
                };
                let (buyer, id, _) = holder(&d, first_server, seat).await;
                let held = act(&buyer, first_server, &d, other_seat, "hold").await;
                assert_eq!(held.status, SEE_OTHER, "{case}: {}", held.body);
                if matches!(second, SecondTab::CheckoutWithALapsedHold) {
                    seatlock_harness::lapse_lease(&d.settings.redis_url, &d.key(other_seat))
                        .await
                        .unwrap();
                }
                // Shorter than the purchase's idle bound: the first tab's transaction
                // outlives its pause.
                let tab = buyer.another_tab(pause_headers(point, 400));
                let url = confirm_url(&d, first_server, seat);
                let first = tokio::spawn(async move { tab.post(&url, &[]).await.unwrap() });
                parks += 1;
                parked(&servers[0], parks).await;
                let reply = second_tab(&d, &buyer, &other.address, second, seat).await;
                let first = first.await.unwrap();
                assert_no_5xx(&case, &[&first, &reply]);
                match second {
                    SecondTab::ReleaseAll => {}
                    SecondTab::Checkout => {
                        d.assert_sold_once_to(seat, &id).await;
                        d.assert_sold_once_to(other_seat, &id).await;
                    }
                    SecondTab::Confirm | SecondTab::CheckoutWithALapsedHold => {
                        d.assert_sold_once_to(seat, &id).await;
                    }
                }
                d.assert_no_authorization_left_open(&case).await;
                tried += 1;
            }
        }
        d.assert_no_transaction_left_open().await;
        d.assert_invariant().await;
    }
    assert_eq!(tried, 32);
}

/// The second tab's request.
async fn second_tab(
    d: &Deployment,
    buyer: &seatlock_harness::HttpBuyer,
    server: &str,
    second: SecondTab,
    seat: i64,
) -> Reply {
    match second {
        SecondTab::Confirm => act(buyer, server, d, seat, "confirm").await,
        SecondTab::CheckoutWithALapsedHold | SecondTab::Checkout => buyer
            .post(&event_url(d, server, "checkout"), &[])
            .await
            .unwrap(),
        SecondTab::ReleaseAll => buyer
            .post(&event_url(d, server, "release-all"), &[])
            .await
            .unwrap(),
    }
}
