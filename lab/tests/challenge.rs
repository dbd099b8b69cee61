//! The lab's challenges (`GET /lab/challenges`, `lab/src/lab/challenge.rs`) over HTTP,
//! on the real Redis and Postgres: each challenge's check fails on a wrong answer and
//! passes on the right one, by the numbers the lab's checker and seat row give; a bad
//! answer is refused with a message and starts nothing.

use std::time::Duration;

use reqwest::StatusCode;
use seatlock_harness::{HttpBuyer, Reply, TestApp, eventually};

/// How long an attempt's runs may take here (eight runs, two at a time, about 6 s each,
/// on a machine other suites share).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(120);

/// Opens the challenges on `app` (for a CSRF token) and answers `challenge` with `answer`.
async fn send_answer(app: &TestApp, challenge: &str, answer: &str) -> Reply {
    let mut reader = HttpBuyer::new();
    let list = reader
        .get(&format!("{}/lab/challenges", app.address))
        .await
        .unwrap();
    assert_eq!(list.status, StatusCode::OK);
    reader
        .post(
            &format!("{}/lab/challenges/{challenge}", app.address),
            &[("answer", answer)],
        )
        .await
        .unwrap()
}

/// Answers `challenge` with `answer` and returns the attempt's verdict line once every
/// run has finished.
async fn verdict(app: &TestApp, challenge: &str, answer: &str) -> String {
    let reply = send_answer(app, challenge, answer).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let url = format!("{}{}", app.address, reply.location.unwrap());
    let what = format!("the attempt at {challenge} with {answer} to finish");
    eventually(ATTEMPT_TIMEOUT, &what, || {
        let url = url.clone();
        async move {
            let page = reqwest::get(&url).await.unwrap().text().await.unwrap();
            page.contains("data-state=\"done\"")
        }
    })
    .await;
    let page = reqwest::get(&url).await.unwrap().text().await.unwrap();
    page.split("id=\"attempt-verdict\"")
        .nth(1)
        .and_then(|rest| rest.split_once('>'))
        .and_then(|(_, rest)| rest.split_once("</p>"))
        .map(|(line, _)| line.to_string())
        .unwrap()
}

#[tokio::test]
async fn a_pause_inside_the_lease_keeps_the_unfenced_lease_from_selling_twice() {
    let app = TestApp::builder().race_lab().spawn().await.unwrap();
    // A pauses 2.3 s: it wakes after B bought, and its unfenced write sells 14C again:
    // the history checker (the nemesis's) finds the double sale.
    let wrong = verdict(&app, "slow-holder", "2300").await;
    assert!(
        wrong.starts_with("Fail: 0 of 1 runs passed: 14C sold 2 time(s); 1 violation(s)"),
        "{wrong}"
    );
    // A pauses 0.3 s: it writes inside its lease, and B finds the seat sold.
    let right = verdict(&app, "slow-holder", "300").await;
    assert!(
        right.starts_with("Pass: 1 of 1 runs passed: 14C sold 1 time(s); 0 violation(s)"),
        "{right}"
    );
}

#[tokio::test]
async fn only_every_step_on_sells_once_under_every_fault() {
    let app = TestApp::builder().race_lab().spawn().await.unwrap();
    // Every fault, the clock jump too: the harness passes the clock server of .run/env.
    let faults = seatlock_lab::lab::Fault::ALL.len();
    // Fencing off: A's late write is accepted when it pauses before it.
    let wrong = verdict(&app, "every-fault", "fencing").await;
    assert!(wrong.starts_with("Fail: "), "{wrong}");
    assert!(
        !wrong.starts_with(&format!("Fail: {faults} of {faults}")),
        "{wrong}"
    );
    // Every step on. The schedule keeps A's default pause a quarter second from the
    // next holder's write; a machine loaded enough to eat that lands A's write between
    // B's grant and B's write, where every step on really does sell twice (lab.rs,
    // `with_every_step_on_a_holder_waking_between_the_next_grant_and_its_write_sells_twice`).
    // So a second attempt is allowed; two failing fails the test.
    let expected = format!(
        "Pass: {faults} of {faults} runs passed: 14C sold {} time(s); 0 violation(s).",
        vec!["1"; faults].join(", ")
    );
    let first = verdict(&app, "every-fault", "none").await;
    if first != expected {
        let second = verdict(&app, "every-fault", "none").await;
        assert_eq!(second, expected, "first attempt: {first}");
    }
}

#[tokio::test]
async fn a_bad_answer_is_refused_with_a_message_and_starts_nothing() {
    let app = TestApp::builder().race_lab().spawn().await.unwrap();
    for (challenge, answer, status, says) in [
        (
            "slow-holder",
            "soon",
            StatusCode::BAD_REQUEST,
            "whole number",
        ),
        (
            "slow-holder",
            "10001",
            StatusCode::BAD_REQUEST,
            "at most 10000 ms",
        ),
        (
            "every-fault",
            "step-9",
            StatusCode::BAD_REQUEST,
            "no such step",
        ),
        ("no-such", "1", StatusCode::NOT_FOUND, "no such challenge"),
    ] {
        let reply = send_answer(&app, challenge, answer).await;
        assert_eq!(reply.status, status, "{challenge} {answer}");
        assert!(
            reply.body.contains(says),
            "{challenge} {answer}: {}",
            reply.body
        );
    }
    let attempts: i64 = sqlx::query_scalar("SELECT count(*) FROM lab_challenge_attempts")
        .fetch_one(app.db())
        .await
        .unwrap();
    assert_eq!(attempts, 0);
}

/// An attempt whose server stopped before its runs' turn came (their clocks never
/// started: `started_at` infinity) still comes to a verdict: a run queued 15 minutes
/// after its attempt was sent is cut off when the attempt's page is read, and fails; one
/// queued for less still waits.
#[tokio::test]
async fn an_attempt_whose_server_stopped_before_its_runs_turn_fails_instead_of_running_forever() {
    let app = TestApp::builder().race_lab().spawn().await.unwrap();
    let queued = |minutes_ago: i32| {
        let db = app.db().clone();
        async move {
            let attempt: i64 = sqlx::query_scalar(
                "INSERT INTO lab_challenge_attempts (challenge, answer, created_at)
                 VALUES ('slow-holder', '300', now() - make_interval(mins => $1)) RETURNING id",
            )
            .bind(minutes_ago)
            .fetch_one(&db)
            .await
            .unwrap();
            let run: i64 = sqlx::query_scalar(
                "INSERT INTO lab_runs (step, fault, pause_ms, seed, started_at)
                 VALUES ('fencing', 'pause-before-write', 300, 21, 'infinity') RETURNING id",
            )
            .fetch_one(&db)
            .await
            .unwrap();
            for query in [
                "INSERT INTO lab_seats (run_id, side) VALUES ($1, 'off'), ($1, 'on')",
                "INSERT INTO lab_challenge_runs (attempt_id, run_id, side) VALUES ($2, $1, 'off')",
            ] {
                sqlx::query(query)
                    .bind(run)
                    .bind(attempt)
                    .execute(&db)
                    .await
                    .unwrap();
            }
            attempt
        }
    };
    let page = |attempt: i64| {
        let url = format!("{}/lab/challenges/attempts/{attempt}", app.address);
        async move { reqwest::get(&url).await.unwrap().text().await.unwrap() }
    };
    let abandoned = page(queued(16).await).await;
    assert!(abandoned.contains("data-state=\"done\""), "{abandoned}");
    assert!(
        abandoned.contains("Fail: 0 of 1 runs passed"),
        "{abandoned}"
    );
    let waiting = page(queued(1).await).await;
    assert!(waiting.contains("data-state=\"running\""), "{waiting}");
}
