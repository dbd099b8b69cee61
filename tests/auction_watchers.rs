//! One read per bid per server: the item pages watching an auction share the read each
//! bid causes ([`seatlock::auction::SharedReads`]) instead of each reading the item and
//! its history again. Alone in its test binary, because the metric it counts is global
//! to the process (docs/auction.md, "Watchers").

use futures_util::future::join_all;
use seatlock::auction::queries;
use seatlock_harness::http::EventStream;
use seatlock_harness::{HttpBuyer, TestApp, auction_item};

/// How many pages watch the item.
const WATCHERS: usize = 50;

/// `seatlock_auction_page_reads_total` on this process's `GET /metrics`.
async fn page_reads(app: &TestApp) -> f64 {
    seatlock_harness::http::metric(&app.metrics_url, "seatlock_auction_page_reads_total")
        .await
        .unwrap()
}

#[tokio::test]
async fn fifty_watchers_of_an_item_cost_one_read_per_bid() {
    let app = TestApp::builder()
        .no_venues()
        .with(|s| s.close_interval_ms = 0)
        .spawn()
        .await
        .unwrap();
    let id = queries::insert_item(app.db(), &auction_item("Watched poster"))
        .await
        .unwrap()
        .unwrap();
    let url = format!("{}/auctions/{id}/stream", app.address);
    let mut watchers = join_all((0..WATCHERS).map(|_| EventStream::open(&url))).await;
    for watcher in &mut watchers {
        assert_eq!(watcher.next().await.0, "snapshot");
    }
    let mut bidder = HttpBuyer::new();
    let page = format!("{}/auctions/{id}", app.address);
    bidder.get(&page).await.unwrap();
    let before = page_reads(&app).await;
    for (n, amount) in ["20.00", "30.00"].into_iter().enumerate() {
        let reply = bidder
            .post(&format!("{page}/bids"), &[("amount", amount)])
            .await
            .unwrap();
        assert_eq!(
            reply.status,
            reqwest::StatusCode::SEE_OTHER,
            "{}",
            reply.body
        );
        for watcher in &mut watchers {
            let (name, html) = watcher.next().await;
            assert_eq!(name, "bid");
            assert!(html.contains("Price: $10.00 by Guest"), "{html}");
        }
        // The bidder's redirect target (the page) is not followed: the reads counted are
        // the watchers' alone.
        assert_eq!(
            page_reads(&app).await - before,
            (n + 1) as f64,
            "after bid {n}"
        );
    }
}
