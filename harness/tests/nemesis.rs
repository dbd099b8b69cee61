//! `load-test nemesis` with a fixed seed, 40 s: every fault kind comes up (seed 21's
//! schedule has all seven), the histories are written and parse, the unfenced workload
//! is flagged invalid and not linearizable and the product's workloads pass and are
//! linearizable in the same run (the command exits non-zero otherwise), and the report has
//! the fields `make nemesis` promises.

mod common;

use seatlock_harness::history::Op;
use seatlock_harness::load::nemesis::{LeaseBackend, schedule};

const SEED: u64 = 21;
const SECONDS: u64 = 40;

#[tokio::test]
async fn a_fixed_seed_flags_the_unfenced_workload_and_passes_the_products() {
    let (seed, seconds) = (SEED.to_string(), SECONDS.to_string());
    let args = ["nemesis", "--seed", &seed, "--seconds", &seconds];
    let (dir, stdout, report) = common::run_load_test("nemesis", &args).await;
    println!("{stdout}");
    assert_eq!(report["seed"], SEED);

    // The schedule is the seed's, and every kind of fault was injected.
    let kinds = LeaseBackend::Redis.faults();
    let planned = schedule(SEED, std::time::Duration::from_secs(SECONDS), 6, kinds);
    assert_eq!(report["schedule"].as_array().unwrap().len(), planned.len());
    let injected: Vec<&str> = report["faults"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    for kind in kinds {
        let name = serde_json::to_value(kind).unwrap();
        assert!(
            injected.contains(&name.as_str().unwrap()),
            "{kind:?}: {stdout}"
        );
    }

    let workloads: Vec<&serde_json::Value> =
        report["workloads"].as_array().unwrap().iter().collect();
    let names: Vec<&str> = workloads
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["unfenced-lease", "fenced", "conditional", "auction"]
    );
    for w in &workloads {
        let valid = w["valid"].as_bool().unwrap();
        assert_eq!(valid, w["name"] != "unfenced-lease", "{w}");
        // The full verdict: the search found a linearization of each product workload,
        // and proved there is none of the unfenced one.
        let linearizable = if valid { "true" } else { "false" };
        assert_eq!(w["linearizable"], linearizable, "{w}");
        assert!(w["check_ms"].as_f64().unwrap() >= 0.0);
        assert!(w["linearizability"]["partitions"].as_u64().unwrap() > 0);
        assert!(w["operations"].as_u64().unwrap() > 0);
        // The history on disk is the one judged, one operation per line.
        let history = std::fs::read_to_string(w["history"].as_str().unwrap()).unwrap();
        let ops: Vec<Op> = history
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(ops.len() as u64, w["operations"].as_u64().unwrap());
    }
    let unfenced = workloads[0]["violations"].as_array().unwrap();
    assert!(
        unfenced
            .iter()
            .any(|v| v["kind"] == "double_sale" && !v["ops"].as_array().unwrap().is_empty()),
        "{unfenced:?}"
    );

    let sometimes: Vec<(&str, u64)> = report["sometimes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["count"].as_u64().unwrap()))
        .collect();
    let count = |name: &str| sometimes.iter().find(|s| s.0 == name).unwrap().1;
    assert!(count("failover") > 0, "{stdout}");
    assert!(count("redis_restarted_empty") > 0, "{stdout}");
    let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(page.contains("<svg") && page.contains("unfenced-lease"));
    // The unfenced workload's failing seat, as far as the search could order it.
    let longest = &workloads[0]["linearizability"]["longest"];
    assert!(
        !longest["ordered"].as_array().unwrap().is_empty(),
        "{longest}"
    );
    assert!(page.contains("Longest partial linearizations"));
    std::fs::remove_dir_all(dir).unwrap();
}
