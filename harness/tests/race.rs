//! `load-test race` with small numbers: the unsafe strategies sell seats twice, the
//! fenced product path and the conditional UPDATE never do, and fencing really rejected
//! the paused holders' late writes; and the fenced path behind HAProxy (`--target` the
//! proxy, three backends) sells no seat twice either.

use std::collections::HashMap;

use seatlock::config::PurchaseStrategy;
use seatlock_harness::{DEMO_VENUES, HaProxy, ServerProcess, TestApp, procs::seatlock_binary};

/// Runs `load-test race` with `args` and small numbers (3 buyers on each of 4 seats, 2
/// rounds), writing its JSON report and, if `html`, its HTML page too; fails unless it
/// succeeds. Returns its stdout, the report's rows by strategy and the page.
async fn race(args: &[&str], html: bool) -> (String, HashMap<String, serde_json::Value>, String) {
    let dir = std::env::temp_dir().join(seatlock_harness::unique_name("race"));
    let (json, page) = (dir.join("report.json"), dir.join("report.html"));
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_load-test"));
    command
        .arg("race")
        .args(["--buyers", "3", "--seats", "4", "--rounds", "2"])
        .args(args)
        .arg("--json")
        .arg(&json)
        .env("SEATLOCK_SERVER_BIN", seatlock_binary().unwrap());
    if html {
        command.arg("--html").arg(&page);
    }
    let output = command.output().await.expect("load-test runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = report["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| (row["strategy"].as_str().unwrap().to_owned(), row.clone()))
        .collect();
    let page = std::fs::read_to_string(&page).unwrap_or_default();
    std::fs::remove_dir_all(dir).unwrap();
    (stdout, rows, page)
}

/// `rows[strategy][field]` as a number.
fn n(rows: &HashMap<String, serde_json::Value>, strategy: &str, field: &str) -> u64 {
    rows[strategy][field].as_u64().unwrap()
}

/// The safe strategy's row: every attempt made, every seat sold exactly once, the
/// invariant kept, and the paused holders' late writes really refused.
fn assert_sold_once_each(rows: &HashMap<String, serde_json::Value>, strategy: &str, out: &str) {
    assert_eq!(n(rows, strategy, "attempts"), 3 * 4 * 2, "{strategy}");
    assert_eq!(
        n(rows, strategy, "double_sold_seats"),
        0,
        "{strategy}: {out}"
    );
    assert_eq!(
        n(rows, strategy, "invariant_violations"),
        0,
        "{strategy}: {out}"
    );
    assert_eq!(
        n(rows, strategy, "confirmed"),
        4 * 2,
        "{strategy}: every seat sold once"
    );
}

#[tokio::test]
async fn only_fenced_and_conditional_never_sell_a_seat_twice() {
    let args = ["--strategy", "all", "--servers", "2"];
    let (stdout, rows, page) = race(&args, true).await;
    for strategy in ["naive", "lease", "fenced", "conditional"] {
        assert_eq!(n(&rows, strategy, "attempts"), 3 * 4 * 2, "{strategy}");
        assert!(rows[strategy]["latency_ms"]["p99"].as_f64().unwrap() > 0.0);
    }
    assert!(n(&rows, "naive", "double_sold_seats") > 0, "{stdout}");
    assert!(n(&rows, "lease", "double_sold_seats") > 0, "{stdout}");
    for strategy in ["fenced", "conditional"] {
        assert_sold_once_each(&rows, strategy, &stdout);
    }
    assert!(
        n(&rows, "fenced", "stale_rejected") > 0,
        "the pause must really bite: {stdout}"
    );
    assert!(page.contains("<svg") && page.contains("fenced"));
}

#[tokio::test]
async fn fenced_behind_haproxy_sells_no_seat_twice() {
    let settings = TestApp::builder()
        .venues(DEMO_VENUES)
        .with(|s| {
            s.enable_race_lab = true;
            s.purchase_strategy = PurchaseStrategy::Fenced;
            s.hold_ttl_ms = 300;
            s.payment_delay_ms = 20;
        })
        .settings()
        .await
        .unwrap();
    let binary = seatlock_binary().unwrap();
    let mut backends = Vec::new();
    for _ in 0..3 {
        backends.push(ServerProcess::start(&binary, &settings).await.unwrap());
    }
    let addresses: Vec<&str> = backends.iter().map(|b| b.address.as_str()).collect();
    let proxy = HaProxy::start(&addresses).await.unwrap();

    let hold_ttl_ms = settings.hold_ttl_ms.to_string();
    let args = [
        "--strategy",
        "fenced",
        "--target",
        &proxy.address,
        "--database-url",
        &settings.database_url,
        "--hold-ttl-ms",
        &hold_ttl_ms,
    ];
    let (stdout, rows, _) = race(&args, false).await;
    println!("{stdout}");
    assert_sold_once_each(&rows, "fenced", &stdout);
    assert!(
        n(&rows, "fenced", "stale_rejected") > 0,
        "the pause must really bite through the proxy: {stdout}"
    );
    let served = proxy.backends().await.unwrap();
    assert!(
        served.values().all(|b| b.sessions > 0),
        "every backend served buyers: {served:?}"
    );
}
