//! A holder that stalls past its lease (SIGSTOP) and wakes: its fencing token refuses it.

use std::time::Duration;

use seatlock::error::Refusal;
use seatlock_harness::eventually;

use crate::deployment::*;

#[tokio::test]
async fn a_holder_stopped_past_its_lease_is_refused_by_its_fencing_token_when_it_wakes() {
    let d = Deployment::tiny().await;
    let slow = d.server(|s| s.payment_delay_ms = 1_000).await;
    let other = d.server(|_| {}).await;
    let seat = d.seats[0];
    let (first, _, first_token) = holder(&d, &slow.address, seat).await;

    let address = slow.address.clone();
    let (event, confirm_url) = (d.event, format!("/seats/{seat}/confirm"));
    let late = tokio::spawn(async move {
        let url = format!("{address}/events/{event}{confirm_url}");
        first.post(&url, &[]).await.unwrap()
    });
    // The confirm is in its 1 s payment; stop the whole process there, longer than the
    // hold's 2 s lease.
    tokio::time::sleep(Duration::from_millis(300)).await;
    slow.signal("STOP").unwrap();
    eventually(
        Duration::from_secs(10),
        "the stopped holder's lease to lapse",
        || async { !d.held(seat).await },
    )
    .await;

    let (second, second_id, second_token) = holder(&d, &other.address, seat).await;
    assert!(second_token > first_token);
    let bought = act(&second, &other.address, &d, seat, "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);

    slow.signal("CONT").unwrap();
    let late = late.await.unwrap();
    assert_conflict(&late, Refusal::StaleToken);
    let order = d.assert_sold_once_to(seat, &second_id).await;
    assert_eq!(order.fence_token, second_token);
    let log = std::fs::read_to_string(&slow.log).unwrap();
    assert!(log.contains("stale fencing token"), "{log}");
    d.assert_invariant().await;
}
