//! Scale-out: three server processes behind HAProxy, configured as `make scale`
//! configures it (`seatlock_harness::haproxy`). A backend killed mid-traffic is taken out
//! by the proxy's health check, the buyers it served are sent to the others, and the
//! invariant holds.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use seatlock::config::Settings;
use seatlock_harness::{HaProxy, eventually};

use crate::deployment::*;
use crate::traffic::*;

/// Replies that are not an answer from a backend: a 5xx (the proxy's 502 for a request
/// in flight on the killed backend, its 503 when no backend is up) or none at all.
fn unserved(outcomes: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    outcomes
        .iter()
        .filter(|(name, _)| name.contains(": 5") || name.contains("no answer"))
        .map(|(name, n)| (name.clone(), *n))
        .collect()
}

/// `now` minus `then`, outcome by outcome.
fn since(then: &BTreeMap<String, u64>, now: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    now.iter()
        .map(|(name, n)| (name.clone(), n - then.get(name).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

#[tokio::test]
async fn a_backend_killed_mid_traffic_is_routed_around_and_the_invariant_holds() {
    let d = Deployment::tiny().await;
    let payment = |s: &mut Settings| s.payment_delay_ms = 20;
    let mut backends = Vec::new();
    for _ in 0..3 {
        backends.push(d.server(payment).await);
    }
    let addresses: Vec<&str> = backends.iter().map(|b| b.address.as_str()).collect();
    let proxy = HaProxy::start(&addresses).await.unwrap();
    let through_proxy = Arc::new(RwLock::new(vec![proxy.address.clone()]));
    let traffic = Traffic::start(&d, through_proxy, d.seats.clone(), 9);

    // Least connections spreads the buyers (each then stays on its backend by cookie).
    eventually(
        Duration::from_secs(30),
        "100 requests, every backend serving buyers",
        || async {
            let backends = proxy.backends().await.unwrap_or_default();
            traffic.tally.requests() >= 100
                && backends.len() == 3
                && backends.values().all(|b| b.sessions > 0)
        },
    )
    .await;
    let served_before_kill = traffic.tally.requests();

    backends[0].kill().await.unwrap();
    proxy
        .wait_for(&HaProxy::backend_name(0), "DOWN", Duration::from_secs(5))
        .await
        .unwrap();
    let at_down = traffic.tally.outcomes.lock().unwrap().clone();
    let at_down_total = traffic.tally.requests();
    let sessions_at_down = proxy.backends().await.unwrap();
    // The buyers keep going, the third pinned to the dead backend among them, until
    // each survivor has served some: a survivor's few buyers may all be in a stalled
    // confirm (a pause of a hold and a half) for the first 200 requests.
    eventually(
        Duration::from_secs(60),
        "200 more requests after the backend went down, each survivor serving some",
        || async {
            let now = proxy.backends().await.unwrap_or_default();
            traffic.tally.requests() >= at_down_total + 200
                && ["app2", "app3"].iter().all(|survivor| {
                    now.get(*survivor).map_or(0, |b| b.sessions)
                        > sessions_at_down[*survivor].sessions
                })
        },
    )
    .await;
    let tally = traffic.stop().await;
    let outcomes = tally.outcomes.lock().unwrap().clone();
    let after_down = since(&at_down, &outcomes);
    println!(
        "scale-out: {served_before_kill} requests before the kill, {} after it went down",
        tally.requests() - at_down_total
    );
    println!("outcomes: {outcomes:#?}");

    // Before the health check took it out, only requests in flight on the killed
    // backend may have failed (502); once out, every request was served.
    let failed = unserved(&outcomes);
    assert!(
        failed.keys().all(|name| name.contains(": 502")),
        "{failed:?}"
    );
    assert!(
        unserved(&after_down).is_empty(),
        "after the backend went down: {after_down:#?}"
    );
    // The survivors served what came after, the dead backend's buyers among them.
    let sessions = proxy.backends().await.unwrap();
    assert_eq!(sessions["app1"].status, "DOWN");
    for survivor in ["app2", "app3"] {
        assert!(
            sessions[survivor].sessions > sessions_at_down[survivor].sessions,
            "{survivor}: {sessions:?}"
        );
    }
    assert!(
        outcomes.keys().any(|n| n.starts_with("confirm: 303")),
        "buyers bought"
    );
    assert_no_acknowledged_sale_lost(&d, &tally).await;
    d.assert_invariant().await;
}
