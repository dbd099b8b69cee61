//! Cooling (issue 45, docs/time-to-pay.md): a hold that lapses while its confirm pays
//! cools until that confirm ends: the next buyer is refused `cooling` with the
//! milliseconds left, and the map shows the seat taken. A lapse with no confirm in
//! flight, or after the confirm ended, adds nothing: no `cooling` refusal, the next hold
//! is granted at its first try.

use std::time::Duration;

use seatlock::failpoint::PausePoint;
use seatlock::http::error::Refusal;
use seatlock_harness::{HttpBuyer, ServerProcess, eventually};

use crate::deployment::*;
use crate::payments::{parked_confirm, reprice};

/// A new buyer with the event page of `server` open.
async fn visitor(d: &Deployment, server: &str) -> HttpBuyer {
    let mut buyer = HttpBuyer::new();
    let page = buyer.get(&d.page(server)).await.unwrap();
    assert_eq!(page.status.as_u16(), 200, "{}", page.body);
    buyer
}

/// Waits, by Redis's `PTTL`, until `seat`'s hold has lapsed.
async fn lapsed(d: &Deployment, seat: i64) {
    eventually(Duration::from_secs(10), "the hold to lapse", || async {
        !d.held(seat).await
    })
    .await;
}

/// `server`'s count of holds refused `cooling` (`/metrics`).
async fn cooling_refusals(server: &ServerProcess) -> u64 {
    let metrics = reqwest::get(&server.metrics_url)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series = "seatlock_holds_refused_total{reason=\"cooling\"} ";
    let line = metrics.lines().find(|l| l.starts_with(series));
    line.expect("the cooling series, registered at zero")[series.len()..]
        .trim()
        .parse()
        .unwrap()
}

/// The states an event stream's text gave `seat` in its `seat` messages, in order.
fn seat_states(stream: &str, seat: i64) -> Vec<String> {
    stream
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<serde_json::Value>(data.trim()).ok())
        .filter(|data| data["seat"] == seat)
        .filter_map(|data| data["state"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn a_hold_that_lapses_mid_confirm_cools_until_the_confirm_ends_then_is_granted() {
    let d = Deployment::tiny().await;
    let server = d.server(|_| {}).await;
    let base = &server.address;
    let seat = d.seats[1];
    // The confirm joins its payment, then parks before its fenced write for 4 s: the
    // hold's 2 s lease lapses under it.
    let (_, _, late) = parked_confirm(&d, &server, seat, PausePoint::BeforeWrite, 4_000).await;
    let (stream, reader) = follow(format!("{base}/events/{}/stream", d.event));
    lapsed(&d, seat).await;
    // The live map hears the lapse, and shows the seat taken, not free.
    eventually(
        Duration::from_secs(5),
        "the lapse on the live map",
        || async { seat_states(&stream.lock().unwrap(), seat).contains(&"held".to_owned()) },
    )
    .await;

    let mut second = visitor(&d, base).await;
    let refused = act(&second, base, &d, seat, "hold").await;
    assert_conflict(&refused, Refusal::Cooling { remaining_ms: 0 });
    assert!(
        refused.body.contains(" ms)"),
        "the milliseconds left: {}",
        refused.body
    );
    let retry_after: u64 = refused.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry_after >= 1, "{retry_after}");
    let map = second.get(&d.page(base)).await.unwrap().body;
    let seat_html = format!("id=\"seat-{seat}\" class=\"seat held");
    assert!(
        map.contains(&seat_html),
        "the map shows the cooling seat taken"
    );
    assert_eq!(cooling_refusals(&server).await, 1);

    // The confirm wakes, and is refused: its hold lapsed. The seat is free at once, and
    // the live map says so.
    assert_conflict(&late.await.unwrap(), Refusal::HoldExpired);
    eventually(
        Duration::from_secs(5),
        "the end on the live map",
        || async { seat_states(&stream.lock().unwrap(), seat) == ["held", "available"] },
    )
    .await;
    reader.abort();
    let granted = act(&second, base, &d, seat, "hold").await;
    assert_eq!(granted.status, SEE_OTHER, "{}", granted.body);
    let bought = act(&second, base, &d, seat, "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    assert_eq!(d.orders(seat).await.len(), 1);
    d.assert_invariant().await;
}

/// Cooling adds 0 ms to a clean lapse: a hold never confirmed, and one whose confirm
/// ended (refused `price_changed`) before its lapse, are each granted to the next buyer
/// at the first try once Redis has expired them; no hold is refused `cooling`.
#[tokio::test]
async fn a_clean_lapse_cools_for_0_ms() {
    let d = Deployment::tiny().await;
    let server = d.server(|_| {}).await;
    let base = &server.address;
    let (ended, never) = (d.seats[2], d.seats[3]);
    let (_, _, confirm) = parked_confirm(&d, &server, ended, PausePoint::BeforeWrite, 500).await;
    reprice(&d, ended, 12_345).await;
    assert_conflict(&confirm.await.unwrap(), Refusal::PriceChanged);
    holder(&d, base, never).await;
    let next = visitor(&d, base).await;
    for seat in [ended, never] {
        lapsed(&d, seat).await;
        let hold = act(&next, base, &d, seat, "hold").await;
        assert_eq!(
            hold.status, SEE_OTHER,
            "granted at its first try: {}",
            hold.body
        );
    }
    assert_eq!(cooling_refusals(&server).await, 0);
    d.assert_invariant().await;
}
