//! `load-test race` with small numbers: the unsafe strategies sell seats twice (a
//! lock-delay shorter than the pause outlasts the lease too, one longer does not), the
//! fenced product path and the conditional UPDATE never do; without cooling fencing
//! really rejected the paused holders' late writes, with it no late write reached the
//! fence; and the history checker agrees (naive, lease and lock-delay histories invalid,
//! fenced and conditional valid); and the fenced path behind HAProxy (`--target` the
//! proxy, three backends) sells no seat twice either.

use std::collections::HashMap;

mod common;

use seatlock_harness::{DEMO_VENUES, HaProxy, ServerProcess, TestApp, procs::lab_binary};
use seatlock_lab::{LabSettings, PurchaseStrategy};

/// The hold TTL of the strategies' races, in ms, and the pauser's pause (longer, so its
/// lease lapses). Longer than `load-test race`'s 300 ms: a holder reads its fencing token
/// from the event page before it confirms, as a browser does, and a debug build on a busy
/// machine can take a few hundred ms to render that page, which would let most leases
/// lapse before their confirm.
const HOLD_TTL_MS: &str = "1000";
const PAUSE_MS: &str = "1500";

#[tokio::test]
async fn only_fenced_and_conditional_never_sell_a_seat_twice() {
    let (dir, stdout, report) = run_small_race("race", "all", &[]).await;
    let rows = rows_by_strategy(&report["strategies"]);
    let n = |strategy: &str, field: &str| rows[strategy][field].as_u64().unwrap();
    for strategy in ALL_ROWS {
        assert_eq!(n(strategy, "attempts"), 3 * 4 * 2, "{strategy}");
        assert!(rows[strategy]["latency_ms"]["p99"].as_f64().unwrap() > 0.0);
    }
    assert!(n("naive", "double_sold_seats") > 0, "{stdout}");
    assert!(n("lease", "double_sold_seats") > 0, "{stdout}");
    assert!(
        n("lock-delay", "double_sold_seats") > 0,
        "a pause outlasting the lease by more than the lock-delay: {stdout}"
    );
    for strategy in ["fenced-no-cooling", "fenced", "conditional"] {
        assert_sold_once_each(&rows, strategy, &stdout);
    }
    assert!(
        n("fenced-no-cooling", "stale_rejected") > 0,
        "the pause must really bite: {stdout}"
    );
    // With cooling nobody else is granted a seat while its stalled confirm is in
    // flight: that confirm is refused `expired` by its owner check, and no late write
    // ever meets the fence.
    assert_eq!(n("fenced", "stale_rejected"), 0, "{stdout}");
    // The history checker judges what happened, operation by operation: it must flag
    // the strategies Postgres shows selling twice, and only those.
    for (strategy, valid) in [
        ("naive", false),
        ("lease", false),
        ("lock-delay", false),
        ("fenced-no-cooling", true),
        ("fenced", true),
        ("conditional", true),
    ] {
        assert_eq!(
            rows[strategy]["history_valid"].as_bool(),
            Some(valid),
            "{strategy}: {stdout}"
        );
        // The full verdict agrees: a seat sold twice has no linearization.
        let linearizable = if valid { "true" } else { "false" };
        assert_eq!(rows[strategy]["linearizable"], linearizable, "{strategy}");
        // At least a hold and a confirm per attempt that bought, and a read per seat.
        assert!(n(strategy, "history_operations") > n(strategy, "attempts"));
        let history = dir.join(format!("history-{strategy}.jsonl"));
        let lines = std::fs::read_to_string(&history).unwrap().lines().count() as u64;
        assert_eq!(lines, n(strategy, "history_operations"), "{strategy}");
    }
    // The leases lapse before the next holder is granted (the pauser outstays its TTL);
    // a lock-free strategy's hold grants no token, so the lock's check has nothing to
    // order and counts none.
    for strategy in [
        "fenced-no-cooling",
        "fenced",
        "naive",
        "lock-delay",
        "conditional",
    ] {
        assert_eq!(n(strategy, "double_grants"), 0, "{strategy}: {stdout}");
    }
    let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(page.contains("<svg") && page.contains("fenced"));
    std::fs::remove_dir_all(dir).unwrap();
}

/// The rows of `load-test race --strategy all`.
const ALL_ROWS: [&str; 6] = [
    "naive",
    "lease",
    "lock-delay",
    "fenced-no-cooling",
    "fenced",
    "conditional",
];

/// Chubby's lock-delay is enough when it outlasts the pause: with a delay longer than the
/// paused holder's write comes after its lease's lapse, its write lands before anyone else
/// may be granted the seat, and no seat is sold twice (the next buyers find it sold).
#[tokio::test]
async fn a_lock_delay_longer_than_the_pause_outlasts_the_lease_sells_no_seat_twice() {
    let (dir, stdout, report) = run_small_race(
        "race-lock-delay",
        "lock-delay",
        &["--lock-delay-ms", "4000"],
    )
    .await;
    let rows = rows_by_strategy(&report["strategies"]);
    assert_sold_once_each(&rows, "lock-delay", &stdout);
    assert_eq!(rows["lock-delay"]["history_valid"].as_bool(), Some(true));
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn fenced_behind_haproxy_sells_no_seat_twice() {
    let settings = TestApp::builder()
        .venues(DEMO_VENUES)
        .with(|s| {
            s.hold_ttl_ms = HOLD_TTL_MS.parse().unwrap();
            s.payment_delay_ms = 20;
        })
        .settings()
        .await
        .unwrap();
    // Without cooling, so that the paused holders' late writes reach the fence (with it,
    // nobody is granted the seat while they pause: `only_fenced_and_conditional_…`).
    let lab = LabSettings {
        purchase_strategy: PurchaseStrategy::Fenced,
        lab_disable_cooling: true,
        ..LabSettings::enabled()
    };
    let binary = lab_binary().unwrap();
    let mut backends = Vec::new();
    for _ in 0..3 {
        let backend = ServerProcess::start_lab(&binary, &settings, &lab).await;
        backends.push(backend.unwrap());
    }
    let addresses: Vec<&str> = backends.iter().map(|b| b.address.as_str()).collect();
    let proxy = HaProxy::start(&addresses).await.unwrap();

    let hold_ttl_ms = settings.hold_ttl_ms.to_string();
    let args = [
        "--strategy",
        "fenced-no-cooling",
        "--seats",
        "4",
        "--target",
        &proxy.address,
        "--database-url",
        &settings.database_url,
        "--hold-ttl-ms",
        &hold_ttl_ms,
        "--pause-ms",
        PAUSE_MS,
    ];
    let (dir, stdout, report) = run_race("race-proxy", &args).await;
    println!("{stdout}");
    let rows = rows_by_strategy(&report["strategies"]);
    assert_sold_once_each(&rows, "fenced-no-cooling", &stdout);
    assert!(
        rows["fenced-no-cooling"]["stale_rejected"]
            .as_u64()
            .unwrap()
            > 0,
        "the pause must really bite through the proxy: {stdout}"
    );
    let served = proxy.backends().await.unwrap();
    assert!(
        served.values().all(|b| b.sessions > 0),
        "every backend served buyers: {served:?}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// `load-test race --strategy groups` with small numbers: buyers wanting overlapping
/// groups of 3. The atomic group hold never leaves a buyer holding or buying part of a
/// group; the seat-by-seat side is measured (its partial groups and wasted holds depend
/// on timing, so they are printed, not asserted). Both sell each seat at most once and
/// every completed group whole.
#[tokio::test]
async fn the_atomic_group_hold_never_leaves_a_partial_group_seat_by_seat_is_measured() {
    let (dir, stdout, report) = run_race(
        "race-groups",
        &[
            "--strategy",
            "groups",
            "--group-size",
            "3",
            "--servers",
            "2",
            "--seats",
            "6",
        ],
    )
    .await;
    println!("{stdout}");
    assert_eq!(report["strategies"].as_array().unwrap().len(), 0);
    let rows = rows_by_strategy(&report["groups"]);
    let n = |strategy: &str, field: &str| {
        rows[strategy][field]
            .as_u64()
            .unwrap_or_else(|| panic!("{strategy}.{field}: {stdout}"))
    };
    for strategy in ["seat-by-seat", "atomic"] {
        // 3 buyers per seat × 6 seats / 3 per group = 6 buyers a round, 2 rounds.
        assert_eq!(n(strategy, "groups"), 12, "{strategy}");
        assert_eq!(n(strategy, "failures"), 0, "{strategy}: {stdout}");
        let ended =
            n(strategy, "completed") + n(strategy, "lost_to_a_sale") + n(strategy, "gave_up");
        assert_eq!(ended, 12, "{strategy}: every buyer's group ended one way");
        assert!(n(strategy, "completed") > 0, "{strategy}: {stdout}");
        assert_eq!(
            n(strategy, "seats_sold"),
            3 * n(strategy, "completed"),
            "{strategy}: every completed group bought whole, nothing else: {stdout}"
        );
        assert_eq!(n(strategy, "partial_purchases"), 0, "{strategy}: {stdout}");
        assert_eq!(n(strategy, "double_sold_seats"), 0, "{strategy}: {stdout}");
        assert_eq!(
            n(strategy, "invariant_violations"),
            0,
            "{strategy}: {stdout}"
        );
        for measured in ["retries", "wasted_holds", "max_attempts_one_buyer"] {
            n(strategy, measured);
        }
    }
    assert_eq!(
        n("atomic", "partial_groups"),
        0,
        "no cart ever held part of a group: {stdout}"
    );
    assert_eq!(
        n("atomic", "hold_requests"),
        n("atomic", "attempts"),
        "one request per attempt"
    );
    assert!(
        n("seat-by-seat", "hold_requests") >= n("seat-by-seat", "attempts"),
        "{stdout}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// Runs `load-test race --buyers 3 --rounds 2 ARGS` ([`common::run_load_test`]).
async fn run_race(name: &str, args: &[&str]) -> (std::path::PathBuf, String, serde_json::Value) {
    let mut all = vec!["race", "--buyers", "3", "--rounds", "2"];
    all.extend_from_slice(args);
    common::run_load_test(name, &all).await
}

/// The strategies' race with small numbers: `strategy` on two servers each, four seats,
/// [`HOLD_TTL_MS`] and [`PAUSE_MS`], then `extra` ([`run_race`]).
async fn run_small_race(
    name: &str,
    strategy: &str,
    extra: &[&str],
) -> (std::path::PathBuf, String, serde_json::Value) {
    let mut args = vec![
        "--strategy",
        strategy,
        "--servers",
        "2",
        "--seats",
        "4",
        "--hold-ttl-ms",
        HOLD_TTL_MS,
        "--pause-ms",
        PAUSE_MS,
    ];
    args.extend_from_slice(extra);
    run_race(name, &args).await
}

/// The rows of a report array (`strategies` or `groups`) by their `strategy` field.
fn rows_by_strategy(rows: &serde_json::Value) -> HashMap<&str, &serde_json::Value> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|row| (row["strategy"].as_str().unwrap(), row))
        .collect()
}

/// A safe strategy's row (`rows` by strategy): every attempt made, every seat sold
/// exactly once, the invariant kept.
fn assert_sold_once_each(rows: &HashMap<&str, &serde_json::Value>, strategy: &str, out: &str) {
    let n = |field: &str| rows[strategy][field].as_u64().unwrap();
    assert_eq!(n("attempts"), 3 * 4 * 2, "{strategy}");
    assert_eq!(n("double_sold_seats"), 0, "{strategy}: {out}");
    assert_eq!(n("invariant_violations"), 0, "{strategy}: {out}");
    assert_eq!(n("confirmed"), 4 * 2, "{strategy}: every seat sold once");
}
