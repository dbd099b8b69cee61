//! The race lab's row "proxy resolution without the fence" (docs/race-lab.md): two
//! maxima placed at once on an item led by a third. Resolved against a read and written
//! unfenced ([`seatlock_lab::proxy::bid_unfenced`]), both reads come before either write
//! and both bidders are told they lead; through the product's one statement (run here
//! without a bid lock: its row lock alone), the second maximum is ranked against the
//! first, whichever it is, and the item ends led by the higher one, the other as
//! runner-up.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use seatlock::auction::Bid;
use seatlock::auction::queries;
use seatlock::profile::BuyerProfile;
use seatlock_harness::{TestApp, auction_item};
use tokio::sync::Barrier;

fn bidder(id: &str) -> BuyerProfile {
    BuyerProfile {
        id: id.into(),
        name: format!("Bidder {id}"),
    }
}

/// `who`'s maximum of `max_cents` on item `item_id`, arriving now.
fn offer(who: &BuyerProfile, item_id: i64, max_cents: i64) -> Bid<'_> {
    Bid {
        bidder: who,
        item_id,
        max_cents,
        arrived_at: Utc::now(),
    }
}

/// An item led by `first` at $10.00 with a maximum of $12.00.
async fn led_item(app: &TestApp) -> i64 {
    let id = queries::insert_item(app.db(), &auction_item("Lab poster"))
        .await
        .unwrap()
        .unwrap();
    let first = bidder("first");
    let bid = offer(&first, id, 1_200);
    queries::place_bid(app.db(), &bid, None, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    id
}

#[tokio::test]
async fn without_the_fence_two_concurrent_maxima_both_end_up_leading() {
    let app = TestApp::builder().no_venues().spawn().await.unwrap();
    let (a, b) = (bidder("a"), bidder("b"));
    let maxima = [(&a, 2_000), (&b, 3_000)];

    // The unfenced row: both read the item (led by "first") before either writes.
    let id = led_item(&app).await;
    let both_read = Arc::new(Barrier::new(2));
    let told = futures_util::future::join_all(maxima.map(|(who, max_cents)| {
        let (db, both_read) = (app.db().clone(), both_read.clone());
        async move {
            let bid = offer(who, id, max_cents);
            let between = async move {
                both_read.wait().await;
            };
            seatlock_lab::proxy::bid_unfenced(&db, &bid, between)
                .await
                .unwrap()
        }
    }))
    .await;
    let leaders: Vec<&str> = told.iter().map(|t| t.leader_id.as_str()).collect();
    assert_eq!(leaders, ["a", "b"], "each was told it leads: {told:?}");
    let item = queries::item(app.db(), id).await.unwrap().unwrap();
    assert_eq!(
        item.runner_up_max_cents,
        Some(1_200),
        "the row never ranked A against B: the runner-up is still the first bidder"
    );

    // The product: the same two maxima at once, through the one fenced statement.
    let id = led_item(&app).await;
    let placed = futures_util::future::join_all(maxima.map(|(who, max_cents)| {
        let db = app.db().clone();
        async move {
            let bid = offer(who, id, max_cents);
            queries::place_bid(&db, &bid, None, Duration::ZERO)
                .await
                .unwrap()
                .unwrap()
        }
    }))
    .await;
    // Whichever came first, the second was ranked against it.
    assert_eq!(
        placed.iter().filter(|p| p.price_cents == 2_050).count(),
        1,
        "{placed:?}"
    );
    let item = queries::item(app.db(), id).await.unwrap().unwrap();
    assert_eq!(
        (
            item.high_bidder_id.as_deref(),
            item.high_bid_cents,
            item.runner_up_max_cents
        ),
        (Some("b"), Some(2_050), Some(2_000)),
        "B leads at A's maximum plus the increment"
    );
}
