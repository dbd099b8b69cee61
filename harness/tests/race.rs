//! `load-test race` with small numbers: the unsafe strategies sell seats twice, the
//! fenced product path and the conditional UPDATE never do, and fencing really rejected
//! the paused holders' late writes.

use std::collections::HashMap;

#[test]
fn only_fenced_and_conditional_never_sell_a_seat_twice() {
    let dir = std::env::temp_dir().join(seatlock_harness::unique_name("race"));
    let json = dir.join("report.json");
    let html = dir.join("report.html");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_load-test"))
        .args([
            "race",
            "--strategy",
            "all",
            "--servers",
            "2",
            "--buyers",
            "3",
            "--seats",
            "4",
            "--rounds",
            "2",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--html")
        .arg(&html)
        .env(
            "SEATLOCK_SERVER_BIN",
            seatlock_harness::procs::seatlock_binary().unwrap(),
        )
        .output()
        .expect("load-test runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows: HashMap<&str, &serde_json::Value> = report["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| (row["strategy"].as_str().unwrap(), row))
        .collect();
    let n = |strategy: &str, field: &str| rows[strategy][field].as_u64().unwrap();
    for strategy in ["naive", "lease", "fenced", "conditional"] {
        assert_eq!(n(strategy, "attempts"), 3 * 4 * 2, "{strategy}");
        assert!(rows[strategy]["latency_ms"]["p99"].as_f64().unwrap() > 0.0);
    }
    assert!(n("naive", "double_sold_seats") > 0, "{stdout}");
    assert!(n("lease", "double_sold_seats") > 0, "{stdout}");
    for strategy in ["fenced", "conditional"] {
        assert_eq!(n(strategy, "double_sold_seats"), 0, "{strategy}: {stdout}");
        assert_eq!(
            n(strategy, "invariant_violations"),
            0,
            "{strategy}: {stdout}"
        );
        assert_eq!(
            n(strategy, "confirmed"),
            4 * 2,
            "{strategy}: every seat sold once"
        );
    }
    assert!(
        n("fenced", "stale_rejected") > 0,
        "the pause must really bite: {stdout}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg") && page.contains("fenced"));
    std::fs::remove_dir_all(dir).unwrap();
}
