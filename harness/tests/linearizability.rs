//! The linearizability checker (`seatlock_harness::history::linearizability`): the search
//! on small register histories, against trying every order, and against Porcupine on
//! Porcupine's own test histories (`tests/data/porcupine/`, MIT, with its licence): every
//! history of a short subset gets the verdict Porcupine's tests expect. The whole set,
//! with each history's time, is `make linearizability` (release).

use std::path::Path;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use seatlock_harness::history::linearizability::{
    Budget, Event, Linearizable, Model, Operation, check_events, check_operations,
};
use seatlock_harness::history::models::{CasRegister, RegisterInput as In, RegisterOutput as Out};
use seatlock_harness::history::porcupine::{check_log, expected};

type Op = Operation<In, Out>;

fn op(call: f64, ret: f64, input: In, output: Out) -> Op {
    Operation {
        process: String::new(),
        input,
        output,
        call,
        ret,
    }
}

fn verdict(ops: &[Op]) -> Linearizable {
    check_operations(&CasRegister, ops, Budget::DEFAULT).verdict
}

#[test]
fn overlapping_operations_may_be_taken_in_either_order() {
    // write 1 overlaps a read of 1 that began first: fine.
    let ops = [
        op(0.0, 10.0, In::Read, Out::Read(Some(1))),
        op(5.0, 15.0, In::Write(1), Out::Done),
    ];
    assert_eq!(verdict(&ops), Linearizable::True);
    // The same read after the write returned, seeing the old value: stale.
    let stale = [
        op(0.0, 10.0, In::Write(1), Out::Done),
        op(11.0, 12.0, In::Write(2), Out::Done),
        op(13.0, 14.0, In::Read, Out::Read(Some(1))),
    ];
    let search = check_operations(&CasRegister, &stale, Budget::DEFAULT);
    assert_eq!(search.verdict, Linearizable::False);
    assert_eq!(
        search.linearization,
        [0, 1],
        "the longest partial linearization"
    );
}

#[test]
fn an_unknown_write_may_happen_late_or_never() {
    let late = [
        op(0.0, f64::INFINITY, In::Write(1), Out::Unknown),
        op(10.0, 11.0, In::Read, Out::Read(None)),
        op(20.0, 21.0, In::Read, Out::Read(Some(1))),
    ];
    assert_eq!(verdict(&late), Linearizable::True);
    let never = [
        op(0.0, f64::INFINITY, In::Write(1), Out::Unknown),
        op(10.0, 11.0, In::Read, Out::Read(None)),
    ];
    assert_eq!(verdict(&never), Linearizable::True);
    // But not undone once seen.
    let undone = [
        op(0.0, f64::INFINITY, In::Write(1), Out::Unknown),
        op(10.0, 11.0, In::Read, Out::Read(Some(1))),
        op(20.0, 21.0, In::Read, Out::Read(None)),
    ];
    assert_eq!(verdict(&undone), Linearizable::False);
}

#[test]
fn a_budget_overrun_is_unknown_never_a_pass() {
    let ops: Vec<Op> = (0..12)
        .map(|i| op(0.0, 100.0, In::Write(i), Out::Done))
        .chain([op(200.0, 201.0, In::Read, Out::Read(Some(99)))])
        .collect();
    let tight = check_operations(&CasRegister, &ops, Budget::steps(50));
    assert_eq!(tight.verdict, Linearizable::Unknown);
    assert_eq!(tight.steps, 50);
    assert_eq!(verdict(&ops), Linearizable::False);
}

#[test]
fn events_and_timed_operations_give_one_verdict() {
    let events = vec![
        Event::Call {
            id: 7,
            process: "0".into(),
            input: In::Write(3),
        },
        Event::Call {
            id: 8,
            process: "1".into(),
            input: In::Cas(3, 4),
        },
        Event::Return {
            id: 7,
            output: Out::Done,
        },
        Event::Return {
            id: 8,
            output: Out::Cas(true),
        },
    ];
    let search = check_events(&CasRegister, &events, Budget::DEFAULT).unwrap();
    assert_eq!(search.verdict, Linearizable::True);
    assert_eq!(search.linearization, [0, 1]);
    assert!(check_events(&CasRegister, &events[..3], Budget::DEFAULT).is_err());
}

/// Every order of `ops` that respects real time, tried one by one: the definition.
fn brute_force(ops: &[Op]) -> bool {
    fn go(ops: &[Op], done: &mut Vec<bool>, state: Option<i64>) -> bool {
        if done.iter().all(|&d| d) {
            return true;
        }
        for i in 0..ops.len() {
            // i may go next if no pending operation returned before i was called.
            let minimal =
                !done[i] && (0..ops.len()).all(|j| done[j] || j == i || ops[j].ret >= ops[i].call);
            if !minimal {
                continue;
            }
            if let Some(next) = CasRegister.step(&state, &ops[i].input, &ops[i].output) {
                done[i] = true;
                if go(ops, done, next) {
                    return true;
                }
                done[i] = false;
            }
        }
        false
    }
    go(ops, &mut vec![false; ops.len()], None)
}

#[test]
fn the_search_agrees_with_trying_every_order() {
    let mut rng = StdRng::seed_from_u64(49);
    let (mut yes, mut no) = (0, 0);
    for _ in 0..3_000 {
        let n = rng.random_range(1..7);
        let ops: Vec<Op> = (0..n)
            .map(|_| {
                let call = rng.random_range(0..20) as f64;
                let (input, output) = match rng.random_range(0..4) {
                    0 => (
                        In::Read,
                        Out::Read(rng.random_bool(0.8).then(|| rng.random_range(0..3))),
                    ),
                    1 => (In::Write(rng.random_range(0..3)), Out::Done),
                    2 => (
                        In::Cas(rng.random_range(0..3), rng.random_range(0..3)),
                        Out::Cas(rng.random_bool(0.5)),
                    ),
                    _ => (In::Write(rng.random_range(0..3)), Out::Unknown),
                };
                let ret = if output == Out::Unknown {
                    f64::INFINITY
                } else {
                    call + rng.random_range(1..10) as f64
                };
                op(call, ret, input, output)
            })
            .collect();
        let expected = brute_force(&ops);
        assert_eq!(verdict(&ops) == Linearizable::True, expected, "{ops:?}");
        if expected { yes += 1 } else { no += 1 }
    }
    assert!(yes > 300 && no > 300, "both kinds tried: {yes} {no}");
}

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

#[test]
fn a_history_with_times_it_cannot_read_is_unknown_never_a_pass() {
    // A write at a time that is not a number would sort after everything and let the
    // stale read pass; a return before its call is no history at all.
    let not_a_number = [
        op(0.0, 1.0, In::Write(1), Out::Done),
        op(f64::NAN, f64::NAN, In::Write(2), Out::Done),
        op(5.0, 6.0, In::Read, Out::Read(Some(1))),
    ];
    assert_eq!(verdict(&not_a_number), Linearizable::Unknown);
    let backwards = [op(5.0, 1.0, In::Write(1), Out::Done)];
    assert_eq!(verdict(&backwards), Linearizable::Unknown);
}

#[test]
fn a_memo_past_its_bytes_is_unknown() {
    // Many concurrent writes and a read no order explains: the memo grows with every
    // subset of writes tried. A small memo ends the search as `unknown`.
    let mut ops: Vec<Op> = (0..40)
        .map(|v| op(0.0, 1.0, In::Write(v), Out::Done))
        .collect();
    ops.push(op(2.0, 3.0, In::Read, Out::Read(Some(-1))));
    let small = Budget {
        max_memo_bytes: 64 << 10,
        ..Budget::DEFAULT
    };
    let search = check_operations(&CasRegister, &ops, small);
    assert_eq!(search.verdict, Linearizable::Unknown);
    assert!(search.steps < Budget::DEFAULT.max_steps, "{}", search.steps);
}

/// Bids on one item whose final read shows a lower token taken after a higher one: the
/// fence takes tokens in order, so no order explains it, also when the late bid was sent
/// twice (its first answer lost) and the search cannot tell which send's token it was.
#[test]
fn a_lower_token_taken_after_a_higher_one_is_not_linearizable_even_when_resent() {
    use seatlock_harness::history::check::{Accepted, accepted_value};
    use seatlock_harness::history::partitions::check_rows;
    use seatlock_harness::history::{Op as HistoryOp, OpKind, Outcome};

    let bid = |process: &str, cents: &str, at: f64, outcome: Outcome| HistoryOp {
        process: process.into(),
        holder: process.split('/').next().unwrap().into(),
        op: OpKind::Write,
        resource: "item 1".into(),
        fencing_token: None,
        value: Some(cents.into()),
        invoke_ms: at,
        complete_ms: at + 10.0,
        outcome,
        reason: None,
    };
    let taken: Vec<Accepted> = [("b", 2, "1200"), ("a", 1, "1000"), ("a", 3, "1500")]
        .into_iter()
        .map(|(holder, token, value)| Accepted {
            value: Some(value.into()),
            ..Accepted::of(holder, Some(token))
        })
        .collect();
    let read = HistoryOp {
        process: "checker".into(),
        holder: "checker".into(),
        op: OpKind::Read,
        resource: "item 1".into(),
        fencing_token: None,
        value: Some(accepted_value(&taken)),
        invoke_ms: 500.0,
        complete_ms: 510.0,
        outcome: Outcome::Ok,
        reason: None,
    };
    let resent = vec![
        bid("a/tab0", "1000", 0.0, Outcome::Unknown),
        bid("a/tab1", "1000", 1.0, Outcome::Ok),
        bid("b/tab0", "1200", 5.0, Outcome::Ok),
        bid("a/tab0", "1500", 100.0, Outcome::Ok),
        read,
    ];
    let verdict = check_rows(&resent, false, false, Budget::DEFAULT).linearizable;
    assert_eq!(verdict, Linearizable::False);
}
