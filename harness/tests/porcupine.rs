//! The linearizability checker against Porcupine, on Porcupine's own test histories
//! (`tests/data/porcupine/`, MIT, with its licence): every history of a short subset gets
//! the verdict Porcupine's tests expect. The whole set, with each history's time, is
//! `make linearizability` (release).

use std::path::Path;
use std::time::Instant;

use seatlock_harness::history::linearizability::{Budget, Linearizable};
use seatlock_harness::history::porcupine::{check_log, expected};

/// Every tenth etcd log and the two smaller key-value pairs: both verdicts of both
/// kinds, quick in a debug build.
fn in_the_subset(name: &str) -> bool {
    let tenth = |n: &str| n.parse::<u32>().is_ok_and(|n| n % 10 == 0);
    match name.strip_prefix("jepsen/etcd_") {
        Some(rest) => tenth(rest.trim_end_matches(".log")),
        None => name.starts_with("kv/c01") || name.starts_with("kv/c10"),
    }
}

#[test]
fn porcupines_verdicts_on_a_subset_of_its_histories() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/porcupine");
    let list = std::fs::read_to_string(data.join("expected.txt")).unwrap();
    let cases: Vec<(String, bool)> = expected(&list)
        .unwrap()
        .into_iter()
        .filter(|(name, _)| in_the_subset(name))
        .collect();
    assert!(cases.iter().any(|c| c.1) && cases.iter().any(|c| !c.1));
    for (name, linearizable) in &cases {
        let log = std::fs::read_to_string(data.join(name)).unwrap();
        let started = Instant::now();
        let (verdict, steps) = check_log(name, &log, Budget::DEFAULT).unwrap();
        println!(
            "{name}: {} in {steps} steps, {:.1} ms (debug)",
            verdict.name(),
            started.elapsed().as_secs_f64() * 1e3
        );
        let want = if *linearizable {
            Linearizable::True
        } else {
            Linearizable::False
        };
        assert_eq!(verdict, want, "{name}");
    }
    println!("{} histories", cases.len());
}
