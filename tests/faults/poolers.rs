//! Through a connection pooler (`src/db.rs`): PgBouncer in session mode, as shipped
//! (refusing startup parameters it does not know), serves every page, sale and live
//! update; in transaction mode, even told to drop the parameters it does not know, the
//! server refuses to start and says what to change.

use std::time::Duration;

use reqwest::StatusCode;
use seatlock_harness::{PgBouncer, ServerProcess, eventually};

use crate::deployment::*;

#[tokio::test]
async fn through_pgbouncer_in_session_mode_buyers_buy_and_open_pages_see_the_sale() {
    let d = Deployment::tiny().await;
    let bouncer = PgBouncer::start(&d.settings.database_url, "session", "")
        .await
        .unwrap();
    let server = d.server(|s| s.database_url = bouncer.url.clone()).await;
    let ready = probe(&server.address, "/readyz").await;
    assert_eq!(ready, Some((StatusCode::OK, "ok".into())));

    let (page, reader) = follow(format!("{}/stream", d.page(&server.address)));
    let (buyer, id, _) = holder(&d, &server.address, d.seats[0]).await;
    let bought = act(&buyer, &server.address, &d, d.seats[0], "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    d.assert_sold_once_to(d.seats[0], &id).await;
    // The sale reaches the open page through Postgres's NOTIFY and the server's LISTEN,
    // both through the bouncer.
    eventually(
        Duration::from_secs(10),
        "the sale on the open page",
        || async { shows_sold(&page.lock().unwrap(), d.seats[0]) },
    )
    .await;
    reader.abort();
    d.assert_invariant().await;
}

#[tokio::test]
async fn through_pgbouncer_in_transaction_mode_the_server_refuses_to_start_saying_what_to_change() {
    let d = Deployment::tiny().await;
    // What a deployment that "fixed" sqlx's startup errors would run: the parameters
    // dropped, and with them, before, the statement and lock timeouts.
    let bouncer = PgBouncer::start(
        &d.settings.database_url,
        "transaction",
        "extra_float_digits,options",
    )
    .await
    .unwrap();
    let mut settings = d.settings.clone();
    settings.database_url = bouncer.url.clone();
    let refused = ServerProcess::start(SERVER.as_ref(), &settings).await;
    let err = format!("{:#}", refused.err().expect("the server refused to start"));
    assert!(
        err.contains("pool_mode = transaction") && err.contains("pool_mode = session"),
        "{err}"
    );
    // Nothing was sold or held meanwhile.
    assert_eq!(d.order_count().await, 0);
}
