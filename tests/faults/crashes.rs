//! A server killed (SIGKILL) at each point of a confirm.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use seatlock::failpoint::PausePoint;
use seatlock::http::error::Refusal;
use seatlock_harness::{HttpBuyer, ServerProcess, eventually};

use crate::deployment::*;

/// A buyer of `seat` whose confirm through `doomed` is parked at `point` when `doomed` is
/// SIGKILLed; returns the buyer (to try again elsewhere) and its public id.
async fn killed_at(
    d: &Deployment,
    mut doomed: ServerProcess,
    seat: i64,
    point: PausePoint,
) -> (HttpBuyer, String) {
    let (buyer, id, _) = holder(d, &doomed.address, seat).await;
    let tab = buyer.another_tab(pause_headers(point, 30_000));
    let url = format!("{}/events/{}/seats/{seat}/confirm", doomed.address, d.event);
    let confirm = tokio::spawn(async move { tab.post(&url, &[]).await });
    parked(&doomed, 1).await;
    doomed.kill().await.unwrap();
    assert!(confirm.await.unwrap().is_err(), "the buyer got no answer");
    (buyer, id)
}

#[tokio::test]
async fn a_server_killed_between_hold_and_confirm_or_mid_payment_loses_no_sale() {
    let d = Deployment::tiny().await;
    let survivor = d.server(|_| {}).await;
    let base = &survivor.address;

    // Killed between the hold and the confirm: the hold is in Redis, the session in
    // Postgres, so the same browser confirms through the other process.
    let mut doomed = d.server(|_| {}).await;
    let (buyer, id, _) = holder(&d, &doomed.address, d.seats[0]).await;
    doomed.kill().await.unwrap();
    let bought = act(&buyer, base, &d, d.seats[0], "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    d.assert_sold_once_to(d.seats[0], &id).await;

    // Killed in the payment, before the write: nothing written, the hold still stands.
    let doomed = d.server(|_| {}).await;
    let (buyer, id) = killed_at(&d, doomed, d.seats[1], PausePoint::BeforeWrite).await;
    assert!(d.orders(d.seats[1]).await.is_empty());
    let bought = act(&buyer, base, &d, d.seats[1], "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    d.assert_sold_once_to(d.seats[1], &id).await;
    d.assert_invariant().await;
}

/// A deployment with a server that survives and one about to be killed.
async fn crash_scene() -> (Deployment, ServerProcess, ServerProcess) {
    let d = Deployment::tiny().await;
    let survivor = d.server(|_| {}).await;
    let doomed = d.server(|_| {}).await;
    (d, survivor, doomed)
}

#[tokio::test]
async fn a_server_killed_inside_the_confirm_transaction_sells_nothing_and_its_orphaned_hold_lapses()
{
    let (d, survivor, _) = crash_scene().await;
    // Without cooling: with it the killed confirm's seat would cool until that confirm's
    // deadline (a minute with the lab's pause margin) after its hold lapsed, since nobody
    // can tell a killed confirm from a slow one (docs/time-to-pay.md).
    let doomed = d
        .lab_server(|_| {}, |lab| lab.lab_disable_cooling = true)
        .await;
    let base = &survivor.address;
    let seat = d.seats[2];
    let started = Instant::now();
    let (walked_away, _) = killed_at(&d, doomed, seat, PausePoint::BeforeOwnerCheck).await;
    // Postgres rolled the open transaction back when the connection died.
    assert!(d.orders(seat).await.is_empty());
    assert!(d.held(seat).await, "the orphaned hold stays until its TTL");
    let mut next = HttpBuyer::new();
    let refused = next.seat_action(base, d.event, seat, "hold").await.unwrap();
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert!(refused.is_refused(&Refusal::SomeoneIsBuying), "{refused:?}");
    eventually(
        Duration::from_secs(10),
        "the orphaned hold to lapse",
        || async { !d.held(seat).await },
    )
    .await;
    assert!(started.elapsed() >= Duration::from_millis(d.settings.hold_ttl_ms));
    let id = buy(&d, base, seat).await;
    // The first buyer comes back: its hold lapsed (and the seat went to another).
    let late = act(&walked_away, base, &d, seat, "confirm").await;
    assert_conflict(&late, Refusal::HoldExpired);
    d.assert_sold_once_to(seat, &id).await;
    d.assert_invariant().await;
}

/// Killed after the fenced write and the owner check, before `COMMIT`: Postgres rolls the
/// transaction back, and the hold is still the buyer's (it is released only after the
/// commit), so the same browser's retry buys, paying once.
#[tokio::test]
async fn a_server_killed_after_the_owner_check_before_the_commit_sells_nothing_and_a_retry_buys() {
    let (d, survivor, doomed) = crash_scene().await;
    let base = &survivor.address;
    let seat = d.seats[3];
    let (buyer, id) = killed_at(&d, doomed, seat, PausePoint::BeforeCommit).await;
    assert!(d.orders(seat).await.is_empty(), "the commit never happened");
    assert!(
        d.held(seat).await,
        "the hold is released only after a commit"
    );
    let again = act(&buyer, base, &d, seat, "confirm").await;
    assert_eq!(again.status, SEE_OTHER, "{}", again.body);
    d.assert_sold_once_to(seat, &id).await;
    assert_eq!(
        d.payments(seat).await,
        ["captured"],
        "one payment, captured"
    );
    d.assert_invariant().await;
}

#[tokio::test]
async fn a_server_killed_after_the_commit_loses_no_sale_and_a_retry_shows_the_same_order() {
    let (d, survivor, doomed) = crash_scene().await;
    let seat = d.seats[4];
    let (buyer, id) = killed_at(&d, doomed, seat, PausePoint::AfterCommit).await;
    let order = d.assert_sold_once_to(seat, &id).await; // committed before the crash
    assert!(d.held(seat).await, "the hold is left to lapse by its TTL");
    let again = act(&buyer, &survivor.address, &d, seat, "confirm").await;
    assert_eq!(again.status, SEE_OTHER, "{}", again.body);
    let location = format!("/orders/{}", order.id);
    assert_eq!(again.location.as_deref(), Some(location.as_str()));
    assert_eq!(d.orders(seat).await.len(), 1);
    assert_eq!(
        d.payments(seat).await,
        ["captured"],
        "the retry paid nothing more"
    );
    d.assert_invariant().await;
}
