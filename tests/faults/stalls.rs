//! Stalls: a holder that stalls past its lease (SIGSTOP) and wakes, refused by its
//! fencing token; a lock store that stalls under a watchdog.

use std::sync::Arc;
use std::time::Duration;

use lease::{LeaseClient, LeaseKey, MemoryLedger, WatchdogEvent};
use seatlock::error::Refusal;
use seatlock_harness::{RedisServer, eventually};
use tokio::time::Instant;

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

/// The watchdog keeps time, not a count of failed renewals: with the store suspended
/// (SIGSTOP: connections stay open, nothing answers), it reports the lease lost before the
/// lease can have expired, not after the renewals time out one by one.
#[tokio::test]
async fn a_watchdog_reports_a_stalled_store_as_lost_before_its_lease_can_expire() {
    let redis = RedisServer::start().await.unwrap();
    let store = lease::connect(&redis.url(), Duration::from_secs(2)).unwrap();
    let client = Arc::new(LeaseClient::new(store, MemoryLedger::new()));
    let ttl = Duration::from_secs(3);
    let lease = client
        .acquire(&LeaseKey::new("stall", "close").unwrap(), "closer", ttl)
        .await
        .unwrap();
    let granted_until = lease.expires_at_ms();
    let mut watchdog = client.watch(lease);
    eventually(Duration::from_secs(10), "a renewal", || async {
        matches!(watchdog.status(), WatchdogEvent::Held { expires_at_ms } if expires_at_ms > granted_until)
    })
    .await;
    // The last renewal was sent before now, so the lease lasts at least until now + ttl.
    let renewed_by = Instant::now();
    redis.signal("STOP").unwrap();
    tokio::time::timeout(Duration::from_secs(30), watchdog.lost())
        .await
        .expect("the watchdog reports the loss");
    let reported_at = Instant::now();
    redis.signal("CONT").unwrap();
    assert!(
        reported_at < renewed_by + ttl,
        "lost reported {:?} after the last renewal, the lease lasts {ttl:?}",
        reported_at - renewed_by
    );
}
