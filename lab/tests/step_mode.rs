//! The lab's step mode (`GET /lab/step`, `lab/src/lab/stepper.rs`) over HTTP, on the
//! real Redis and Postgres: the reader walks A and B into the article's step-4 story
//! (A pauses, its lease lapses, B buys, A wakes and writes) with the fence off and on;
//! an event a server cannot take now is refused with a message and changes nothing; the
//! timeline keeps each event's state; a key made without PX does not lapse; End deletes
//! the session's keys. In Chromium: `e2e/tests/lab_step.rs`.

use lease::LeaseKey;
use redis::AsyncCommands;
use reqwest::StatusCode;
use seatlock_harness::{HttpBuyer, TestApp};
use seatlock_lab::lab::STALLED_HOLDER;

/// A lab server, and a reader who opened its step mode (so it has a CSRF token).
async fn lab_and_reader() -> (TestApp, HttpBuyer) {
    let app = TestApp::builder().race_lab().spawn().await.unwrap();
    let mut reader = HttpBuyer::new();
    let page = reader
        .get(&format!("{}/lab/step", app.address))
        .await
        .unwrap();
    assert_eq!(page.status, StatusCode::OK);
    (app, reader)
}

/// Starts a session switching `step` off (`none`: every step on); returns its id.
async fn start(app: &TestApp, reader: &HttpBuyer, step: &str) -> i64 {
    let reply = reader
        .post(&format!("{}/lab/step", app.address), &[("step", step)])
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let location = reply.location.expect("a redirect to the session");
    location.rsplit('/').next().unwrap().parse().unwrap()
}

/// Takes each `(server, event)` in turn; each must be taken.
async fn steps(app: &TestApp, reader: &HttpBuyer, run: i64, events: &[(&str, &str)]) {
    for (server, event) in events {
        let reply = reader
            .post(
                &format!("{}/lab/step/{run}", app.address),
                &[("server", server), ("event", event)],
            )
            .await
            .unwrap();
        assert_eq!(
            reply.status,
            StatusCode::SEE_OTHER,
            "{server} {event}: {}",
            reply.body
        );
    }
}

/// The checker's marks on session `run`'s rows, in order.
async fn marks(app: &TestApp, run: i64) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT mark_kind FROM lab_rows WHERE run_id = $1 AND mark_kind IS NOT NULL ORDER BY seq",
    )
    .bind(run)
    .fetch_all(app.db())
    .await
    .unwrap()
}

#[tokio::test]
async fn stepping_a_stalled_holder_sells_twice_without_the_fence_and_once_with_it() {
    let (app, reader) = lab_and_reader().await;

    let off = start(&app, &reader, "fencing").await;
    steps(&app, &reader, off, &STALLED_HOLDER).await;
    // B bought with token 2; A's write with token 1 was accepted after it.
    assert_eq!(app.lab_seat(off).await, (Some("A".into()), 2, 2));
    let found = marks(&app, off).await;
    assert!(
        found.contains(&"stale-write-accepted".to_string()),
        "{found:?}"
    );

    let on = start(&app, &reader, "none").await;
    steps(&app, &reader, on, &STALLED_HOLDER).await;
    assert_eq!(app.lab_seat(on).await, (Some("B".into()), 2, 1));
    assert_eq!(marks(&app, on).await, ["stale-write-refused"]);

    // The timeline: after B's grant (event 6) the lock was B's with token 2, the seat
    // free; the page scrubbed there shows that state and hides later rows.
    let mut reader = reader;
    let page = reader
        .get(&format!("{}/lab/step/{on}?at=6", app.address))
        .await
        .unwrap();
    assert_eq!(page.status, StatusCode::OK);
    let shown = page
        .body
        .split("<dl class=\"snapshot\" id=\"snapshot-6\" data-seq=\"6\">")
        .nth(1)
        .expect("event 6's state is shown");
    let shown = shown.split("</dl>").next().unwrap();
    assert!(shown.contains("B (token 2)"), "{shown}");
    assert!(shown.contains("free; no token accepted yet"), "{shown}");
    assert!(page.body.contains("<tbody data-seq=\"7\" hidden>"));
    assert!(page.body.contains("<tbody data-seq=\"6\">"));
}

#[tokio::test]
async fn an_event_a_server_cannot_take_now_is_refused_and_changes_nothing() {
    let (app, reader) = lab_and_reader().await;
    let run = start(&app, &reader, "none").await;
    let url = format!("{}/lab/step/{run}", app.address);
    for (fields, says) in [
        (vec![("server", "A"), ("event", "write")], "A cannot write"),
        (
            vec![("server", "D"), ("event", "grant")],
            "servers A, B and C",
        ),
        (vec![("server", "A"), ("event", "fly")], "no such event"),
    ] {
        let reply = reader.post(&url, &fields).await.unwrap();
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{fields:?}");
        assert!(reply.body.contains(says), "{fields:?}: {}", reply.body);
    }
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM lab_rows WHERE run_id = $1")
        .bind(run)
        .fetch_one(app.db())
        .await
        .unwrap();
    assert_eq!(rows, 0);
    let other = reader
        .post(
            &format!("{}/lab/step/999999", app.address),
            &[("server", "A"), ("event", "grant")],
        )
        .await
        .unwrap();
    assert_eq!(other.status, StatusCode::NOT_FOUND);
    let bad = reader
        .post(&format!("{}/lab/step", app.address), &[("step", "step-9")])
        .await
        .unwrap();
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_key_without_expiry_does_not_lapse_and_end_deletes_it() {
    let (app, reader) = lab_and_reader().await;
    let run = start(&app, &reader, "lease").await;
    steps(
        &app,
        &reader,
        run,
        &[("A", "grant"), ("A", "lapse"), ("B", "grant")],
    )
    .await;
    let did: Vec<String> =
        sqlx::query_scalar("SELECT did FROM lab_rows WHERE run_id = $1 ORDER BY seq")
            .bind(run)
            .fetch_all(app.db())
            .await
            .unwrap();
    assert!(did[1].contains("never expires"), "{did:?}");
    assert!(did[2].starts_with("SET NX fails"), "{did:?}");

    let settings = &app.state.settings;
    let group = format!("{}:off", settings.lease_namespace.group("lab", run));
    let key = LeaseKey::new(group, "14C").unwrap().lease_key();
    let mut redis = redis::Client::open(settings.lease_store_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let pttl: i64 = redis.pttl(&key).await.unwrap();
    assert_eq!(pttl, -1, "A's key has no expiry");
    let end = reader
        .post(
            &format!("{}/lab/step/{run}/end", app.address),
            &[] as &[(&str, &str)],
        )
        .await
        .unwrap();
    assert_eq!(end.status, StatusCode::SEE_OTHER, "{}", end.body);
    let exists: bool = redis.exists(&key).await.unwrap();
    assert!(!exists, "End deleted the key");
    let after = reader
        .post(
            &format!("{}/lab/step/{run}", app.address),
            &[("server", "B"), ("event", "grant")],
        )
        .await
        .unwrap();
    assert_eq!(after.status, StatusCode::BAD_REQUEST);
    assert!(after.body.contains("has ended"), "{}", after.body);
}
