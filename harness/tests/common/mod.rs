//! What the tests of the `load-test` binary share.

/// Runs `load-test ARGS --json DIR/report.json --html DIR/report.html` against this
/// build's servers (`SEATLOCK_SERVER_BIN`, and `SEATLOCK_LAB_BIN` for the race lab's), DIR a new temporary folder named after `name`;
/// asserts it succeeded (its stdout and stderr in the message otherwise) and returns DIR,
/// its stdout and the JSON report.
pub(crate) async fn run_load_test(
    name: &str,
    args: &[&str],
) -> (std::path::PathBuf, String, serde_json::Value) {
    let dir = std::env::temp_dir().join(seatlock_harness::unique_name(name));
    let json = dir.join("report.json");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_load-test"))
        .args(args)
        .arg("--json")
        .arg(&json)
        .arg("--html")
        .arg(dir.join("report.html"))
        .env(
            "SEATLOCK_SERVER_BIN",
            seatlock_harness::procs::seatlock_binary().unwrap(),
        )
        .env(
            "SEATLOCK_LAB_BIN",
            seatlock_harness::procs::lab_binary().unwrap(),
        )
        .output()
        .await
        .expect("load-test runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    (dir, stdout, report)
}
