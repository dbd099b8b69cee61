//! `GET /metrics`: the Prometheus page counts what the seat picker did.

use reqwest::StatusCode;
use seatlock_harness::{HttpBuyer, TestApp};

/// The value of the sample `name` (with its labels, exactly as rendered), 0 if absent.
fn sample(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .map_or(0.0, |value| value.trim().parse().expect("a number"))
}

#[tokio::test]
async fn metrics_count_holds_confirms_and_round_trips() {
    let app = TestApp::builder().spawn().await.unwrap();
    let (event, seats) = app.first_event_seats().await.unwrap();
    let metrics_url = app.metrics_url.clone();
    // The recorder is shared by every server in this process: compare before and after.
    let before = reqwest::get(&metrics_url)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();

    let mut a = HttpBuyer::new();
    let mut b = HttpBuyer::new();
    let hold = a.seat_action(&app.address, event, seats[0], "hold");
    assert_eq!(hold.await.unwrap().status, StatusCode::SEE_OTHER);
    let refused = b.seat_action(&app.address, event, seats[0], "hold");
    assert_eq!(refused.await.unwrap().status, StatusCode::CONFLICT);
    let confirm = a.seat_action(&app.address, event, seats[0], "confirm");
    assert_eq!(confirm.await.unwrap().status, StatusCode::SEE_OTHER);

    let response = reqwest::get(&metrics_url).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"].to_str().unwrap();
    assert!(content_type.starts_with("text/plain; version=0.0.4"));
    let after = response.text().await.unwrap();
    let grew = |name: &str| sample(&after, name) - sample(&before, name);
    assert!(grew("seatlock_holds_granted_total") >= 1.0, "{after}");
    assert!(grew(r#"seatlock_holds_refused_total{reason="held"}"#) >= 1.0);
    assert!(grew(r#"seatlock_confirms_total{outcome="accepted"}"#) >= 1.0);
    assert!(grew(r#"lease_redis_round_trip_seconds_count{op="acquire"}"#) >= 2.0);
    // The confirm finds the buyer's live lease by their id (one script).
    assert!(grew(r#"lease_redis_round_trip_seconds_count{op="current"}"#) >= 1.0);
    assert!(after.contains("# TYPE seatlock_postgres_round_trip_seconds histogram"));
    // (the confirm's release after its commit also retires the seat)
    assert!(after.contains(r#"lease_redis_round_trip_seconds_bucket{op="retire",le="+Inf"}"#));
    assert_eq!(sample(&after, "seatlock_double_sales_detected_total"), 0.0);
}

/// A fresh server process's first scrape already has every counter series, at zero, each
/// with its HELP text: rates and alerts work from the first event.
#[tokio::test]
async fn a_fresh_servers_first_scrape_has_every_counter_at_zero_with_its_help() {
    let settings = TestApp::builder().settings().await.unwrap();
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_seatlock"));
    let server = seatlock_harness::ServerProcess::start(binary, &settings)
        .await
        .unwrap();
    let page = reqwest::get(&server.metrics_url)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for series in [
        "seatlock_holds_granted_total",
        "seatlock_holds_refused_total{reason=\"held\"}",
        "seatlock_holds_refused_total{reason=\"sold\"}",
        "seatlock_confirms_total{outcome=\"accepted\"}",
        "seatlock_confirms_total{outcome=\"rejected_stale\"}",
        "seatlock_confirms_total{outcome=\"rejected_expired\"}",
        "seatlock_confirms_total{outcome=\"rejected_sold\"}",
        "seatlock_double_sales_detected_total",
        "seatlock_auction_page_reads_total",
        "lease_watchdog_losses_total",
    ] {
        assert!(
            page.contains(&format!("{series} 0")),
            "{series} at 0 in:\n{page}"
        );
        let name = series.split('{').next().unwrap();
        assert!(page.contains(&format!("# HELP {name} ")), "HELP of {name}");
    }
}

/// `/metrics` has a listener of its own (`--metrics-bind`, loopback by default): the app's
/// port, which buyers reach, does not serve it.
#[tokio::test]
async fn metrics_are_served_on_their_own_listener_not_the_app_port() {
    let app = TestApp::builder().spawn().await.unwrap();
    let on_app_port = reqwest::get(format!("{}/metrics", app.address))
        .await
        .unwrap();
    assert_eq!(on_app_port.status(), reqwest::StatusCode::NOT_FOUND);
    let page = reqwest::get(&app.metrics_url).await.unwrap();
    assert_eq!(page.status(), reqwest::StatusCode::OK);
    assert!(
        page.text()
            .await
            .unwrap()
            .contains("seatlock_holds_granted_total")
    );
}
