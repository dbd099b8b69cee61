//! Health checks that never take every server out at once, and a clean drain
//! (`src/http/health.rs`, `scripts/haproxy.cfg`): with Postgres down every backend is
//! unready, yet the proxy still sends buyers to a live one, which grants a hold (it needs
//! only Redis) and says in its own words what it cannot do; a server sent SIGTERM says it
//! is draining, keeps serving until the proxy has taken it out, then stops, and no buyer
//! sees a failed request.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use seatlock_harness::{HaProxy, HttpBuyer, PostgresServer, TINY_VENUES, eventually, store_urls};

use crate::deployment::*;

/// Waits until each of the proxy's first `backends` servers has `status` (`UP`, `DOWN`).
async fn all_backends(proxy: &HaProxy, backends: usize, status: &str, limit: Duration) {
    for i in 0..backends {
        let name = HaProxy::backend_name(i);
        proxy.wait_for(&name, status, limit).await.unwrap();
    }
}

#[tokio::test]
async fn with_postgres_down_no_backend_is_ready_yet_the_proxy_still_serves_a_hold() {
    let postgres = PostgresServer::start().await.unwrap();
    let (_, redis) = store_urls().unwrap();
    let d = Deployment::new(&postgres.admin_url(), &redis, TINY_VENUES).await;
    // Holds outlast the test: the deployment's 2 s can lapse between the second hold's
    // answer and the check that it is in Redis on a busy machine (CI saw it).
    let long_holds = |s: &mut seatlock::config::Settings| s.hold_ttl_ms = 60_000;
    let servers = [d.server(long_holds).await, d.server(long_holds).await];
    let addresses: Vec<&str> = servers.iter().map(|s| s.address.as_str()).collect();
    let proxy = HaProxy::start(&addresses).await.unwrap();

    // A buyer reads the map through the proxy and holds a seat: its backend knows the
    // event, and has a block of fencing tokens.
    let mut buyer = HttpBuyer::new();
    let page = buyer.get(&d.page(&proxy.address)).await.unwrap();
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let first = act(&buyer, &proxy.address, &d, d.seats[0], "hold").await;
    assert_eq!(first.status, SEE_OTHER, "{}", first.body);

    postgres.stop("immediate").await.unwrap();
    for server in &servers {
        eventually(
            Duration::from_secs(10),
            "/readyz to name postgres",
            || async {
                probe(&server.address, "/readyz")
                    .await
                    .is_some_and(|(s, body)| {
                        s == StatusCode::SERVICE_UNAVAILABLE && body.contains("postgres")
                    })
            },
        )
        .await;
        let live = probe(&server.address, "/livez").await;
        assert_eq!(live, Some((StatusCode::OK, "ok".into())));
        let healthz = probe(&server.address, "/healthz").await.unwrap();
        assert!(
            healthz.1.contains("postgres"),
            "/healthz is /readyz: {healthz:?}"
        );
    }
    all_backends(&proxy, 2, "DOWN", Duration::from_secs(10)).await;

    // No backend is ready, and the proxy still sends the buyer to its own: the hold is
    // granted (Redis is up), and a page that needs Postgres is the server's own 503
    // naming it, not the proxy's "No server is available".
    let second = act(&buyer, &proxy.address, &d, d.seats[1], "hold").await;
    assert_eq!(second.status, SEE_OTHER, "{}", second.body);
    assert!(d.held(d.seats[1]).await, "the lease is in Redis");
    let page = buyer.get(&d.page(&proxy.address)).await.unwrap();
    assert_eq!(page.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        page.body.contains("Postgres is unavailable"),
        "{}",
        page.body
    );

    postgres.start_again().await.unwrap();
    all_backends(&proxy, 2, "UP", Duration::from_secs(20)).await;
    let page = buyer.get(&d.page(&proxy.address)).await.unwrap();
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
}

#[tokio::test]
async fn a_server_sent_sigterm_drains_before_it_stops_and_no_buyer_sees_a_failure() {
    let d = Deployment::tiny().await;
    // Longer than the proxy needs (two failed checks 500 ms apart) with room for a busy
    // machine; the default, 2 s, leaves it a second.
    let drain = Duration::from_secs(4);
    let mut servers = Vec::new();
    for _ in 0..2 {
        servers.push(d.server(|s| s.drain_ms = drain.as_millis() as u64).await);
    }
    let addresses: Vec<&str> = servers.iter().map(|s| s.address.as_str()).collect();
    let proxy = HaProxy::start(&addresses).await.unwrap();

    // Buyers keep reading the map through the proxy, each kept on a backend by its
    // cookie, until told to stop; every reply is kept.
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..4 {
        let (stop, url) = (stop.clone(), d.page(&proxy.address));
        readers.push(tokio::spawn(async move {
            let mut buyer = HttpBuyer::new();
            let mut seen = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let reply = buyer.get(&url).await;
                seen.push(reply.map(|r| r.status).map_err(|e| e.to_string()));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            seen
        }));
    }
    eventually(Duration::from_secs(20), "both backends serving", || async {
        let backends = proxy.backends().await.unwrap_or_default();
        backends.len() == 2 && backends.values().all(|b| b.sessions > 0)
    })
    .await;

    let draining = &servers[0];
    draining.signal("TERM").unwrap();
    eventually(
        Duration::from_secs(2),
        "/readyz to say draining",
        || async {
            probe(&draining.address, "/readyz").await
                == Some((
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable: draining".into(),
                ))
        },
    )
    .await;
    // Still serving while it drains, and still there when the proxy takes it out.
    let page = probe(&draining.address, &format!("/events/{}", d.event)).await;
    assert_eq!(page.map(|p| p.0), Some(StatusCode::OK));
    proxy
        .wait_for(&HaProxy::backend_name(0), "DOWN", drain)
        .await
        .unwrap();
    assert_eq!(
        probe(&draining.address, "/livez").await,
        Some((StatusCode::OK, "ok".into())),
        "the server stopped before the proxy took it out"
    );
    let status = servers[0]
        .exited_within(drain + Duration::from_secs(10))
        .await
        .unwrap();
    assert!(status.success(), "{status}");

    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    let mut replies = Vec::new();
    for reader in readers {
        replies.extend(reader.await.unwrap());
    }
    let failed: Vec<_> = replies
        .iter()
        .filter(|r| !matches!(r, Ok(StatusCode::OK)))
        .collect();
    assert!(replies.len() > 40, "{} replies", replies.len());
    assert!(failed.is_empty(), "{failed:?} of {} replies", replies.len());
}
