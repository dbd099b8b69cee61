//! Application clocks an hour off (libfaketime): Redis's clock decides expiry.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use seatlock::http::error::Refusal;
use seatlock_harness::{HttpBuyer, ServerProcess, eventually};

use crate::deployment::*;

/// A server of `d` whose wall clock (not its monotonic clock, which only times sleeps)
/// is offset by libfaketime's `FAKETIME`, e.g. `+1h`.
async fn server_with_clock(d: &Deployment, faketime: &str) -> ServerProcess {
    let lib = seatlock_harness::procs::libfaketime().unwrap();
    let env = [
        ("LD_PRELOAD", lib.as_str()),
        ("FAKETIME", faketime),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    d.server_with_env(|_| {}, &env).await
}

#[tokio::test]
async fn app_clocks_an_hour_off_change_no_hold_expiry_and_no_sale() {
    let d = Deployment::tiny().await;
    let ahead = server_with_clock(&d, "+1h").await;
    let behind = server_with_clock(&d, "-1h").await;

    // The offsets are real: each server's Date header is an hour off this test's clock.
    for (server, hours) in [(&ahead, 1), (&behind, -1)] {
        let reply = reqwest::get(format!("{}/healthz", server.address))
            .await
            .unwrap();
        let date = reply.headers()[reqwest::header::DATE].to_str().unwrap();
        let date = chrono::DateTime::parse_from_rfc2822(date).unwrap();
        let off = (date.to_utc() - chrono::Utc::now()).num_seconds() - hours * 3_600;
        assert!(
            off.abs() < 120,
            "{} is {off} s off its offset",
            server.address
        );
    }

    // A hold through the server an hour ahead: its countdown is Redis's, not the app's.
    let seat = d.seats[0];
    let granted = Instant::now();
    let (mut first, _, _) = holder(&d, &ahead.address, seat).await;
    let page = first.get(&d.page(&ahead.address)).await.unwrap().body;
    let remaining: u64 = between(&page, "data-remaining-ms=\"", "\"")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        remaining > 0 && remaining <= d.settings.hold_ttl_ms,
        "{remaining}"
    );
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut d.leases.redis().clone())
        .await
        .unwrap();
    let redis_ms = secs * 1_000 + micros / 1_000;
    let until = between(&page, "held for you until <time>", "</time>").unwrap();
    let near = |ms: u64| {
        (0..=2)
            .any(|s| seatlock::venue::map::clock_time(ms + remaining + s * 1_000 - 1_000) == until)
    };
    assert!(
        near(redis_ms),
        "until {until}, Redis time {redis_ms} + {remaining} ms"
    );

    // The server an hour behind refuses a second buyer while the lease lives, and the
    // lease lapses on Redis's clock, after its TTL.
    let mut second = HttpBuyer::new();
    let refused = second
        .seat_action(&behind.address, d.event, seat, "hold")
        .await
        .unwrap();
    assert_eq!(refused.status, StatusCode::CONFLICT);
    eventually(Duration::from_secs(10), "the lease to lapse", || async {
        !d.held(seat).await
    })
    .await;
    assert!(granted.elapsed() >= Duration::from_millis(d.settings.hold_ttl_ms));
    let held = second
        .seat_action(&behind.address, d.event, seat, "hold")
        .await
        .unwrap();
    assert_eq!(held.status, SEE_OTHER, "{}", held.body);
    let late = act(&first, &ahead.address, &d, seat, "confirm").await;
    assert_conflict(&late, Refusal::HoldExpired);
    let bought = act(&second, &behind.address, &d, seat, "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    assert_eq!(d.orders(seat).await.len(), 1);
    d.assert_invariant().await;
}

#[tokio::test]
async fn app_clocks_an_hour_off_neither_open_a_waiting_room_early_nor_keep_it_shut() {
    use crate::waiting_room::{Visit, visit, with_room};
    let d = Deployment::tiny().await;
    let on_sale_in = Duration::from_secs(4);
    with_room(&d, 1, Some(on_sale_in)).await;
    let set = Instant::now();
    let ahead = server_with_clock(&d, "+1h").await;
    let behind = server_with_clock(&d, "-1h").await;
    let (mut a, mut b) = (HttpBuyer::new(), HttpBuyer::new());
    // An hour ahead, the server's own clock is past the on-sale; Redis's is not, and it
    // decides: both buyers wait in the pre-queue.
    assert_eq!(visit(&mut a, &d, &ahead.address).await, Visit::Queued(0));
    assert_eq!(visit(&mut b, &d, &behind.address).await, Visit::Queued(0));
    tokio::time::sleep(
        (set + on_sale_in + Duration::from_millis(500)).saturating_duration_since(Instant::now()),
    )
    .await;
    // An hour behind, the server's clock is before the on-sale; Redis's is past it: the
    // room opens, to exactly one of the two (at the ticker's next step).
    let mut seen = Vec::new();
    for _ in 0..50 {
        seen = vec![
            visit(&mut a, &d, &behind.address).await,
            visit(&mut b, &d, &ahead.address).await,
        ];
        if seen.contains(&Visit::Map) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        seen.contains(&Visit::Map) && seen.contains(&Visit::Queued(1)),
        "{seen:?}"
    );
}

/// On etcd there is no store clock to ask: a hold's expiry is its granting server's
/// reckoning. A buyer who held through a server an hour ahead and reads the map through
/// another sees etcd's own countdown on both, never the servers' skew as time left.
#[tokio::test]
async fn on_etcd_the_countdown_is_etcds_whatever_the_servers_clocks_say() {
    let builder = seatlock_harness::TestApp::builder().with(|s| {
        s.lease_store_url = Some(seatlock_harness::etcd_url().unwrap());
    });
    let d = Deployment::from(builder).await;
    let ahead = server_with_clock(&d, "+1h").await;
    let on_time = d.server(|_| {}).await;
    let (mut buyer, _, _) = holder(&d, &ahead.address, d.seats[0]).await;
    for server in [&on_time.address, &ahead.address] {
        let page = buyer.get(&d.page(server)).await.unwrap().body;
        let remaining: u64 = between(&page, "data-remaining-ms=\"", "\"")
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            remaining <= d.settings.hold_ttl_ms,
            "{server} shows {remaining} ms left of a {} ms hold",
            d.settings.hold_ttl_ms
        );
    }
}
