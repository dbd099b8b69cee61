//! The lab in the browser (`GET /lab`, `lab/src/lab/`) over HTTP: off without
//! `--enable-race-lab`, bad forms refused whole, any step with any fault recorded whole
//! and true to the seat's row, and a run whose server stopped shown as cut off. The six
//! scenarios' marks, in Chromium: `e2e/tests/browser.rs`
//! (`the_lab_builds_each_steps_table_live_and_marks_where_it_breaks`).

use std::time::Duration;

use reqwest::StatusCode;
use seatlock_harness::{HttpBuyer, TestApp, eventually};

async fn lab_app() -> TestApp {
    TestApp::builder()
        .race_lab()
        .spawn()
        .await
        .expect("test app")
}

/// The form's fields for `step` and `fault`, the default pause and seed 7.
fn form<'a>(step: &'a str, fault: &'a str) -> Vec<(&'a str, &'a str)> {
    with_pause(step, fault, "2300")
}

/// The form's fields for `step`, `fault` and A's pause `pause_ms`, seed 7.
fn with_pause<'a>(step: &'a str, fault: &'a str, pause_ms: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("step", step),
        ("fault", fault),
        ("pause_ms", pause_ms),
        ("seed", "7"),
    ]
}

/// The run history at `url` (`/lab/runs/{id}/history.json`).
async fn history_of(url: &str) -> serde_json::Value {
    let body = reqwest::get(url).await.unwrap().text().await.unwrap();
    serde_json::from_str(&body).unwrap()
}

async fn runs(app: &TestApp) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM lab_runs")
        .fetch_one(app.db())
        .await
        .unwrap()
}

/// Off twice over: the product's server has no lab at all, and the lab's server without
/// `--enable-race-lab` answers 404 on each of its pages.
#[tokio::test]
async fn the_lab_is_404_without_the_race_lab_flag() {
    let product = TestApp::builder().spawn().await.unwrap();
    let lab_off = TestApp::builder().lab(|_| {}).spawn().await.unwrap();
    for app in [product, lab_off] {
        let (event, _) = app.first_event_seats().await.unwrap();
        let mut reader = HttpBuyer::new();
        reader
            .get(&format!("{}/events/{event}", app.address))
            .await
            .unwrap();
        for path in [
            "/lab",
            "/lab/runs/1",
            "/lab/runs/1/stream",
            "/lab/runs/1/history.json",
        ] {
            let reply = reader.get(&format!("{}{path}", app.address)).await.unwrap();
            assert_eq!(reply.status, StatusCode::NOT_FOUND, "{path}");
        }
        let reply = reader
            .post(
                &format!("{}/lab/runs", app.address),
                &form("fencing", "none"),
            )
            .await
            .unwrap();
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{}", reply.body);
        assert_eq!(runs(&app).await, 0);
    }
}

#[tokio::test]
async fn a_bad_lab_form_is_refused_with_a_message_and_starts_nothing() {
    let app = lab_app().await;
    let mut reader = HttpBuyer::new();
    let page = reader.get(&format!("{}/lab", app.address)).await.unwrap();
    assert_eq!(page.status, StatusCode::OK);
    let url = format!("{}/lab/runs", app.address);
    for (fields, says) in [
        (form("step-6", "none"), "no such step"),
        (form("fencing", "meteor"), "no such fault"),
        (
            vec![
                ("step", "fencing"),
                ("fault", "none"),
                ("pause_ms", "10001"),
                ("seed", "1"),
            ],
            "at most 10000 ms",
        ),
        (
            vec![
                ("step", "fencing"),
                ("fault", "none"),
                ("pause_ms", "-5"),
                ("seed", "1"),
            ],
            "whole number of milliseconds",
        ),
        (
            vec![
                ("step", "fencing"),
                ("fault", "none"),
                ("pause_ms", "5"),
                ("seed", "x"),
            ],
            "seed must be a whole number",
        ),
        (
            vec![
                ("step", "fencing"),
                ("fault", "none"),
                ("pause_ms", "5"),
                ("seed", "18446744073709551615"),
            ],
            "seed must be a whole number",
        ),
    ] {
        let reply = reader.post(&url, &fields).await.unwrap();
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{fields:?}");
        assert!(reply.body.contains(says), "{fields:?}: {}", reply.body);
    }
    assert_eq!(runs(&app).await, 0, "a refused form starts no run");
    for (path, status) in [
        ("/lab/runs/abc", StatusCode::BAD_REQUEST),
        ("/lab/runs/999", StatusCode::NOT_FOUND),
    ] {
        let reply = reader.get(&format!("{}{path}", app.address)).await.unwrap();
        assert_eq!(reply.status, status, "{path}");
    }
}

/// Every combination is allowed, not only each step's own fault: whatever was chosen,
/// the run ends and is recorded whole (see [`recorded_whole`]), and with every step on
/// nothing breaks but in the one case of the test below. Five runs, four at once (the
/// fifth waits for a permit), as readers of the page would start them.
#[tokio::test]
async fn any_step_with_any_fault_is_recorded_whole_and_true_to_the_seats_row() {
    let app = lab_app().await;
    let mut started = Vec::new();
    for (step, fault, pause_ms) in [
        ("lease", "redis-restart", "1900"),
        ("fencing", "pause-before-write", "2300"),
        ("conditional", "crash-before-write", "1900"),
        ("lease", "crash-after-grant", "1900"),
        // A key without expiry outlives Redis's clock jump (needs the clock server).
        ("lease", "clock-jump", "2300"),
    ] {
        started.push((step, fault, start_run(&app, step, fault, pause_ms).await));
    }
    for (step, fault, run) in started {
        let on = recorded_whole(&app, step, fault, run).await;
        if fault == "clock-jump" {
            let off = side_rows(&app, run, "off").await;
            let kept = "Redis's clock jumps forward 2.00 s: A's key is still there";
            assert!(
                off.iter().any(|r| r["did"] == kept),
                "{step} {fault}: {off:#?}"
            );
        }
        // The schedule keeps A's default pause a quarter second from the next holder's
        // write, but four runs on a busy machine can slow one side by more: then A's
        // write lands in the window below, and is judged as there.
        let expected = if late_holder_landed_in_the_window(&on) {
            vec!["second-sale"]
        } else {
            vec![]
        };
        assert_eq!(
            violations(&on),
            expected,
            "{step} {fault}: every step on: {on:#?}"
        );
    }
}

/// The one case the page names where every step on still sells 14C twice: A, paused
/// 1.55 s, wakes after the next holder's grant and before its write, and the fence lets
/// A's token through (it refuses only a write older than one the row has seen). Where A
/// lands is up to the machine's timing (a busy one delays A's read and payment more than
/// the lease's lapse), so each run is judged by what A's write met: a row without the next
/// holder's write, accepted and then sold twice; one with it, refused and nothing broken.
/// A run is started again, up to five times, until A lands in the window; none landing
/// fails the test.
#[tokio::test]
async fn with_every_step_on_a_holder_waking_between_the_next_grant_and_its_write_sells_twice() {
    let app = lab_app().await;
    let (step, fault) = ("fencing", "pause-before-write");
    for _ in 0..5 {
        let run = start_run(&app, step, fault, "1550").await;
        let on = recorded_whole(&app, step, fault, run).await;
        let in_window = late_holder_landed_in_the_window(&on);
        let expected = if in_window {
            vec!["second-sale"]
        } else {
            vec![]
        };
        assert_eq!(violations(&on), expected, "run {run}: {on:#?}");
        if in_window {
            return;
        }
    }
    panic!("five runs: A never woke between the next holder's grant and its write");
}

/// Lock-delay instead of the fence (Chubby's answer): after A's lease lapses nobody is
/// granted 14C for the lock-delay, and no row checks a token. A pause that outlasts the
/// lease by more than the delay still sells 14C twice: the next holder reads it free
/// before A's late write. A pause that outlasts the lease by less does not: the next
/// holder meets the lock-delay, and A writes before anyone may take the lock. Where A
/// lands is up to the machine's timing (a busy one delays A's read after its grant), so
/// each run is judged by what its rows show, and started again, up to five times, until
/// A lands where the pause puts it; none landing fails the test.
#[tokio::test]
async fn a_pause_longer_than_the_lock_delay_still_sells_twice_and_a_shorter_one_does_not() {
    let app = lab_app().await;
    let (step, fault) = ("lock-delay", "pause-before-write");
    for (pause_ms, sold_twice) in [("2300", true), ("1500", false)] {
        let mut landed = false;
        for _ in 0..5 {
            let run = start_run(&app, step, fault, pause_ms).await;
            recorded_whole(&app, step, fault, run).await;
            let off = side_rows(&app, run, "off").await;
            let at = |row: &serde_json::Value| row["at_ms"].as_i64().unwrap();
            let first = |a: bool, did: &str| {
                off.iter()
                    .filter(|r| (r["server"] == "A") == a && starts(r, "did", did))
                    .map(at)
                    .min()
            };
            let a_writes = first(true, "writes").expect("A writes");
            let read_free = first(false, "reads 14C: free").is_some_and(|t| t < a_writes);
            let delayed =
                first(false, "is refused: the lease lapsed").is_some_and(|t| t < a_writes);
            let granted = first(false, "takes the lock").is_some_and(|t| t < a_writes);
            landed = if sold_twice {
                read_free
            } else {
                delayed && !granted
            };
            if !landed {
                continue;
            }
            let broken = violations(&off);
            if sold_twice {
                // Whichever write the row took first, the seat was sold twice.
                let twice = ["second-sale", "stale-write-accepted"];
                assert!(
                    broken.len() == 1 && twice.contains(&broken[0]),
                    "run {run}: {off:#?}"
                );
            } else {
                assert_eq!(broken, Vec::<&str>::new(), "run {run}: {off:#?}");
            }
            break;
        }
        assert!(
            landed,
            "pause {pause_ms} ms: five runs, A never landed where its pause puts it"
        );
    }
}

/// Redis's clock jumps forward 2 s while A pays (`clock-jump`, on a Redis of the run's
/// own under libfaketime): A's lease ends by Redis's clock while A's says it has 1.2 s
/// left, B is granted a newer token and writes, and then A writes with its older one.
/// With step 4 off the row takes it (sold twice); with every step on the fence refuses
/// it. Without the jump, A's lease would last past its write and B would find 14C sold:
/// the off side's double sale is there only if the jump happened. Where the writes land
/// is up to the machine's timing, so a run whose next holder did not write before A is
/// started again, up to five times; none landing fails the test.
#[tokio::test]
async fn a_clock_jump_sells_twice_without_the_fence_and_the_fence_refuses_it() {
    std::env::var("SEATLOCK_LAB_CLOCK_SERVER")
        .expect("SEATLOCK_LAB_CLOCK_SERVER (scripts/services.sh up writes it to .run/env)");
    let app = lab_app().await;
    let (step, fault) = ("fencing", "clock-jump");
    for _ in 0..5 {
        let run = start_run(&app, step, fault, "2300").await;
        let on = recorded_whole(&app, step, fault, run).await;
        let off = side_rows(&app, run, "off").await;
        for (side, rows) in [("off", &off), ("on", &on)] {
            let jump = rows
                .iter()
                .find(|r| r["server"] == "lab")
                .unwrap_or_else(|| panic!("run {run} {side}: no jump: {rows:#?}"));
            assert!(
                starts(
                    jump,
                    "did",
                    "Redis's clock jumps forward 2.00 s: A's lease ends by Redis's clock, with 1."
                ),
                "run {run} {side}: {jump:#?}"
            );
        }
        // Did the next holder write before A, on both sides?
        let next_wrote_first = |rows: &[serde_json::Value]| {
            let writers: Vec<&str> = rows
                .iter()
                .filter(|r| starts(r, "did", "writes"))
                .map(|r| r["server"].as_str().unwrap())
                .collect();
            writers.len() == 2 && writers[1] == "A"
        };
        if !(next_wrote_first(&off) && next_wrote_first(&on)) {
            continue;
        }
        assert_eq!(
            violations(&off),
            vec!["stale-write-accepted"],
            "run {run}: {off:#?}"
        );
        assert_eq!(violations(&on), Vec::<&str>::new(), "run {run}: {on:#?}");
        let refused = on
            .iter()
            .filter(|r| r["mark_kind"] == "stale-write-refused" && r["server"] == "A")
            .count();
        assert_eq!(refused, 1, "run {run}: {on:#?}");
        return;
    }
    panic!("five runs: the next holder never wrote before A");
}

/// Without `--lab-clock-server` the form lists the clock jump, disabled, and a run of it
/// is refused with a 400 that says what is missing; nothing starts.
#[tokio::test]
async fn without_a_clock_server_the_clock_jump_is_listed_disabled_and_refused() {
    let app = TestApp::builder()
        .lab(|lab| {
            lab.enable_race_lab = true;
            lab.lab_clock_server = None;
        })
        .spawn()
        .await
        .unwrap();
    let mut reader = HttpBuyer::new();
    let page = reader.get(&format!("{}/lab", app.address)).await.unwrap();
    assert_eq!(page.status, StatusCode::OK);
    let option = page
        .body
        .split("<option value=\"clock-jump\"")
        .nth(1)
        .and_then(|rest| rest.split_once("</option>"))
        .map(|(option, _)| option)
        .unwrap_or_else(|| panic!("no clock-jump option: {}", page.body));
    assert!(
        option.starts_with(" disabled>") && option.ends_with("(needs --lab-clock-server)"),
        "{option}"
    );
    // Asked for by a link, it is not preselected (a disabled option is not sent): the
    // step's own fault is.
    let linked = reader
        .get(&format!(
            "{}/lab?step=fencing&fault=clock-jump",
            app.address
        ))
        .await
        .unwrap();
    assert!(
        linked
            .body
            .contains("<option value=\"pause-before-write\" selected"),
        "{}",
        linked.body
    );
    let reply = reader
        .post(
            &format!("{}/lab/runs", app.address),
            &form("fencing", "clock-jump"),
        )
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.body);
    assert!(reply.body.contains("--lab-clock-server"), "{}", reply.body);
    assert_eq!(runs(&app).await, 0);
}

/// The rows of `run`'s `side` (`off` or `on`), in order.
async fn side_rows(app: &TestApp, run: i64, side: &str) -> Vec<serde_json::Value> {
    let history = format!("{}/lab/runs/{run}/history.json", app.address);
    let json = history_of(&history).await;
    let rows = json["rows"].as_array().unwrap();
    rows.iter().filter(|r| r["side"] == side).cloned().collect()
}

/// Whether A's late write landed between the next holder's grant and its write, as what
/// each write met in its own transaction says: A's, a row that had not yet seen the next
/// holder's write (accepted, 2 ≥ 0) and not one that had (refused, 2 < 3); the next
/// holder's, a row at 0 or 2, accepted either way. Only then does every step on sell twice.
fn late_holder_landed_in_the_window(on: &[serde_json::Value]) -> bool {
    let accepted = |a: bool| {
        on.iter()
            .filter(|r| (r["server"] == "A") == a && starts(r, "did", "writes"))
            .any(|r| starts(r, "seat", "accepted"))
    };
    accepted(true) && accepted(false)
}

/// Starts a run of `step` switched off with A's `fault` and `pause_ms` (seed 7), as the
/// form does; returns its id from the permalink it redirects to. The lab runs at most four
/// at once in a process, and this suite's tests share one: a 503 (all four going) is
/// asked again, as its page says, for up to a minute.
async fn start_run(app: &TestApp, step: &str, fault: &str, pause_ms: &str) -> i64 {
    let mut reader = HttpBuyer::new();
    reader.get(&format!("{}/lab", app.address)).await.unwrap();
    let mut reply = None;
    for _ in 0..120 {
        let sent = reader
            .post(
                &format!("{}/lab/runs", app.address),
                &with_pause(step, fault, pause_ms),
            )
            .await
            .unwrap();
        if sent.status != StatusCode::SERVICE_UNAVAILABLE {
            reply = Some(sent);
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let reply = reply.expect("a run started within a minute");
    assert_eq!(
        reply.status,
        StatusCode::SEE_OTHER,
        "{step} {fault}: {}",
        reply.body
    );
    reply
        .location
        .as_deref()
        .and_then(|l| l.strip_prefix("/lab/runs/"))
        .and_then(|id| id.parse().ok())
        .expect("a run's permalink")
}

/// Whether `row`'s `field` starts with `prefix`.
fn starts(row: &serde_json::Value, field: &str, prefix: &str) -> bool {
    row[field].as_str().unwrap().starts_with(prefix)
}

/// The kinds of the rows marked `violation`, in order.
fn violations(rows: &[serde_json::Value]) -> Vec<&str> {
    rows.iter()
        .filter(|r| r["mark"] == "violation")
        .map(|r| r["mark_kind"].as_str().unwrap())
        .collect()
}

/// Waits for `run` to finish and checks it was recorded whole: both sides' tables
/// numbered from 1 without a gap, time never going back, what they say the seat's row
/// accepted is what the row counted, and the lock's keys gone afterwards (with step 2
/// off, the one that never expires too), and so are its rows in the fence ledger. Returns
/// the step-on side's rows.
async fn recorded_whole(
    app: &TestApp,
    step: &str,
    fault: &str,
    run: i64,
) -> Vec<serde_json::Value> {
    let history = format!("{}/lab/runs/{run}/history.json", app.address);
    let what = format!("{step} {fault}: run {run} to finish");
    eventually(Duration::from_secs(30), &what, || async {
        history_of(&history).await["run"]["finished"] == true
    })
    .await;
    let json = history_of(&history).await;
    assert_eq!(json["run"]["step"], step);
    assert_eq!(json["run"]["cut_off"], false);
    let rows = json["rows"].as_array().unwrap();
    for side in ["off", "on"] {
        let rows: Vec<&serde_json::Value> = rows.iter().filter(|r| r["side"] == side).collect();
        assert!(rows.len() >= 3, "{step} {fault} {side}: {rows:#?}");
        for (n, row) in rows.iter().enumerate() {
            assert_eq!(
                row["seq"],
                n as i64 + 1,
                "{step} {fault} {side}: numbered in order"
            );
        }
        let times: Vec<i64> = rows.iter().map(|r| r["at_ms"].as_i64().unwrap()).collect();
        assert!(
            times.is_sorted(),
            "{step} {fault} {side}: time goes back: {times:?}"
        );
        let accepted = rows
            .iter()
            .filter(|r| starts(r, "seat", "accepted"))
            .count() as i32;
        let (sales, history_valid, anomalies): (i32, Option<bool>, String) = sqlx::query_as(
            "SELECT sales, history_valid, history_anomalies FROM lab_seats
              WHERE run_id = $1 AND side = $2",
        )
        .bind(run)
        .bind(side)
        .fetch_one(app.db())
        .await
        .unwrap();
        assert_eq!(
            accepted, sales,
            "{step} {fault} {side}: the table against the row"
        );
        // The history checker (the nemesis's) judged the side as it ended, and a seat
        // sold twice is a double sale to it too.
        assert!(history_valid.is_some(), "{step} {fault} {side}: not judged");
        if sales > 1 {
            assert_eq!(history_valid, Some(false), "{step} {fault} {side}");
            assert!(
                anomalies.contains("double_sale"),
                "{step} {fault} {side}: {anomalies}"
            );
        }
    }
    let mut redis = app.state.redis.connection();
    let pattern = format!(
        "lease:{{{}:*",
        app.state.settings.lease_namespace.group("lab", run)
    );
    let left: Vec<String> = redis::cmd("KEYS")
        .arg(&pattern)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(
        left.is_empty(),
        "{step} {fault}: keys left behind: {left:?}"
    );
    let ceilings: i64 =
        sqlx::query_scalar("SELECT count(*) FROM fence_ceilings WHERE lease_group LIKE $1")
            .bind(format!(
                "{}:%",
                app.state.settings.lease_namespace.group("lab", run)
            ))
            .fetch_one(app.db())
            .await
            .unwrap();
    assert_eq!(
        ceilings, 0,
        "{step} {fault}: the run's ledger rows are gone"
    );
    rows.iter().filter(|r| r["side"] == "on").cloned().collect()
}

/// A run recorded as started `started_secs_ago` seconds ago whose server never finished
/// it (as if it stopped mid-way); returns its id.
async fn run_left_unfinished(app: &TestApp, started_secs_ago: i32) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO lab_runs (step, fault, pause_ms, seed, started_at)
         VALUES ('fencing', 'pause-before-write', 1900, 1, now() - make_interval(secs => $1))
         RETURNING id",
    )
    .bind(started_secs_ago)
    .fetch_one(app.db())
    .await
    .unwrap()
}

/// The whole of the stream at `url`, which must end within `limit`.
async fn stream_to_its_end(url: &str, limit: Duration) -> String {
    tokio::time::timeout(limit, async { reqwest::get(url).await?.text().await })
        .await
        .expect("the stream ends")
        .unwrap()
}

/// A run whose server stopped mid-way never gets its `finished_at`: past the run limit
/// its page and its stream say it was cut off, the stream ends instead of waiting, and
/// what it left in Redis (with step 2 off, a lock that never expires) is deleted.
#[tokio::test]
async fn a_run_whose_server_stopped_is_shown_cut_off_and_its_stream_ends() {
    let app = lab_app().await;
    let run = run_left_unfinished(&app, 60).await;
    let group = app.state.settings.lease_namespace.group("lab", run);
    let forever = format!("lease:{{{group}:off}}:14C");
    let mut redis = app.state.redis.connection();
    let () = redis::cmd("SET")
        .arg(&forever)
        .arg("A's owner token")
        .query_async(&mut redis)
        .await
        .unwrap();
    let mut reader = HttpBuyer::new();
    let page = reader
        .get(&format!("{}/lab/runs/{run}", app.address))
        .await
        .unwrap();
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("Cut off"), "{}", page.body);
    assert!(
        !page.body.contains("data-stream"),
        "a cut-off run is not followed"
    );
    let url = format!("{}/lab/runs/{run}/stream", app.address);
    let stream = stream_to_its_end(&url, Duration::from_secs(10)).await;
    assert!(
        stream.contains("event: done") && stream.contains("Cut off"),
        "{stream}"
    );
    let left: bool = redis::cmd("EXISTS")
        .arg(&forever)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(!left, "the cut-off run's lock is deleted");
}

/// A stream opened on a run whose server stopped, before anyone saw it cut off, ends by
/// itself once the run passes its cut-off: nobody else has to open its page.
#[tokio::test]
async fn a_stream_open_on_a_run_whose_server_stopped_ends_at_its_cut_off() {
    let app = lab_app().await;
    // Started 42 s ago: cut off 3 s from now (seatlock_lab::lab::CUT_OFF_AFTER).
    let run = run_left_unfinished(&app, 42).await;
    let url = format!("{}/lab/runs/{run}/stream", app.address);
    let stream = stream_to_its_end(&url, Duration::from_secs(20)).await;
    assert!(
        stream.contains("event: done") && stream.contains("Cut off"),
        "{stream}"
    );
}
