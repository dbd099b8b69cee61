//! `load-test onsale` with a small crowd, end to end: one server behind HAProxy, lookers,
//! buyers, hang-ups, retriers and bots on the arena, then once more through its waiting
//! room. What Postgres accepted keeps the invariants (no seat sold twice, no buyer over
//! the limit), seats were sold, the report has every field the JSON promises, and the
//! HTML has its plots. No figure is asserted: they are the machine's, not the code's.

mod common;

/// The report's fields, exactly (the contract of `target/onsale/report.json`).
const FIELDS: [&str; 19] = [
    "buyers",
    "sold",
    "sold_out_s",
    "double_sales",
    "over_limit",
    "hold_p99_ms",
    "confirm_p99_ms",
    "page_p99_ms",
    "requests",
    "unanswered",
    "streams_peak",
    "fanout_p99_ms",
    "queue_wait_p50_s",
    "queue_wait_p99_s",
    "queue_p99_ms",
    "queue_seed",
    "redis_commands_per_s_peak",
    "redis_peak_mb",
    "server_rss_mb",
];

/// A crowd small enough for a debug server on a busy machine: 300 people arriving over
/// 20 s (the arena's page is a full render each), every one retrying what goes
/// unanswered, then `extra`.
async fn small_onsale(name: &str, extra: &[&str]) -> (String, serde_json::Value) {
    let mut args = vec![
        "onsale",
        "--buyers",
        "300",
        "--servers",
        "1",
        "--bots",
        "3",
        "--arrive-over-ms",
        "20000",
        "--on-sale-after-ms",
        "2000",
        "--retry-share",
        "1",
        "--look-s",
        "5",
        "--probe-every",
        "5",
    ];
    args.extend_from_slice(extra);
    let (dir, stdout, report) = common::run_load_test(name, &args).await;
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    for plot in [
        "Seats sold",
        "Seats held per second",
        "Open streams",
        "Latency",
    ] {
        assert!(html.contains(plot), "the HTML plots {plot}");
    }
    assert!(html.matches("<svg").count() >= 4, "one SVG per plot");
    (stdout, report)
}

/// The invariants every run keeps, whatever the machine.
fn assert_invariants(report: &serde_json::Value, stdout: &str) {
    let fields = report.as_object().expect("a JSON object");
    let mut names: Vec<&str> = fields.keys().map(String::as_str).collect();
    let mut expected = FIELDS.to_vec();
    names.sort_unstable();
    expected.sort_unstable();
    assert_eq!(names, expected, "exactly the promised fields");
    let n = |field: &str| report[field].as_u64().unwrap();
    assert_eq!(n("buyers"), 300);
    assert_eq!(n("double_sales"), 0, "{stdout}");
    assert_eq!(n("over_limit"), 0, "{stdout}");
    assert!(n("sold") > 0, "some seats sold: {stdout}");
    assert!(
        n("requests") > n("buyers"),
        "every person sent requests: {stdout}"
    );
    assert!(report["redis_commands_per_s_peak"].as_f64().unwrap() > 0.0);
    assert!(report["hold_p99_ms"].as_f64().unwrap() > 0.0, "{stdout}");
    assert!(report["server_rss_mb"].as_f64().unwrap() > 0.0);
    assert!(report["redis_peak_mb"].as_f64().unwrap() > 0.0);
}

#[tokio::test]
async fn a_small_crowd_buys_without_selling_a_seat_twice_or_over_the_limit() {
    let (stdout, report) = small_onsale("onsale", &[]).await;
    assert_invariants(&report, &stdout);
    assert!(report["streams_peak"].as_u64().unwrap() > 0, "{stdout}");
    assert!(
        report["queue_wait_p50_s"].is_null() && report["queue_seed"].is_null(),
        "no room, no queue wait and no seed"
    );
}

#[tokio::test]
async fn a_small_crowd_through_the_waiting_room_waits_and_buys() {
    let (stdout, report) = small_onsale(
        "onsale-room",
        &["--waiting-room-shoppers", "100", "--poll-ms", "1000"],
    )
    .await;
    assert_invariants(&report, &stdout);
    assert!(
        report["queue_wait_p99_s"].as_f64().is_some(),
        "somebody waited in the queue: {stdout}"
    );
    assert!(
        report["queue_p99_ms"].as_f64().is_some(),
        "the queue page was asked: {stdout}"
    );
    assert!(
        report["queue_seed"].as_i64().is_some(),
        "the pre-queue's seed is reported: {stdout}"
    );
}
