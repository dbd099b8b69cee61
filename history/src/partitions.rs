//! A workload's history as linearizability problems: one partition per resource (a seat,
//! an auction item; P-compositionality: a history is linearizable iff each object's is),
//! each searched against the [`FencedRow`] model ([`super::linearizability`]).
//!
//! What goes in, per resource:
//!
//! * every write acknowledged (`ok`) or not answered (`unknown`: it returns at the end of
//!   the history, so it may land any time after its call, or never);
//! * the final `read`, what Postgres holds at the end (the harness reads it once every
//!   server's deadline has passed). It settles the unknown writes it decides: one that no
//!   entry of the read can be was never taken, and is left out; one that is the only write
//!   an entry can be was taken before the read, and goes in as acknowledged then. The
//!   others stay unknown. It also gives each bid its fencing token (a bidder learns it
//!   only from the row: a read entry is told apart by its maximum);
//! * not the refused writes (`fail`: nothing changed), nor the lock's own operations
//!   (acquire, renew, release): under a failover a lease is not a mutex, and what is
//!   judged here is the resource.
//!
//! A seat's write is matched by its holder, not its token: `fence_token` is written only
//! by the sale, so `NOT sold` decides, and a confirm may buy under a newer grant of the
//! same buyer than the one its page showed (`purchase_with_live_lease`).
//!
//! A tab whose write went unanswered is, as Jepsen has it, a crashed process: its next
//! operations are a new process's (`buyer-1/tab0 (2)`). The search needs no processes,
//! only real time; the names are for the report.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::check::parse_accepted;
use super::linearizability::{Budget, Linearizable, Model, Operation, check_operations};
use super::models::{FencedRow, RowInput, RowOutput, Write};
use super::{Op, OpKind, Outcome};

/// The verdict on one workload's history.
#[derive(Debug, Clone, Serialize)]
pub struct RowsVerdict {
    /// `true`, `false`, or `unknown` (a partition's search ran out of budget).
    pub linearizable: Linearizable,
    /// Resources checked.
    pub partitions: usize,
    /// Resources whose history is not linearizable.
    pub failing: usize,
    /// Resources whose search ran out of budget.
    pub undecided: usize,
    /// Steps of all the searches (see [`super::linearizability::Search::steps`]).
    pub steps: u64,
    /// Writes with no answer.
    pub unknown_writes: usize,
    /// Of those, the ones the final reads show taken.
    pub unknown_writes_taken: usize,
    /// Of those, the ones the final reads show never taken.
    pub unknown_writes_not_taken: usize,
    /// The first failing (else undecided) resource's longest partial linearization.
    pub longest: Option<PartialLinearization>,
}

/// How far the search got in one resource: the operations it could order, each with the
/// row's state after it, and the ones it could not.
#[derive(Debug, Clone, Serialize)]
pub struct PartialLinearization {
    /// The resource: `seat 12`.
    pub resource: String,
    /// The operations ordered, first first.
    pub ordered: Vec<Linearized>,
    /// The operations left over, in the order they were called.
    pub left: Vec<Linearized>,
}

/// One operation of a [`PartialLinearization`].
#[derive(Debug, Clone, Serialize)]
pub struct Linearized {
    /// Who called it (a tab after an unanswered write is a new process).
    pub process: String,
    /// The operation and its answer: `write(buyer-2) -> ok`.
    pub op: String,
    /// The row after it (ordered operations only).
    pub state: Option<String>,
    /// When it was called, ms on the history's clock.
    pub invoke_ms: f64,
    /// When it was answered; `None` for an unknown one.
    pub complete_ms: Option<f64>,
}

/// Checks `ops` (a workload's history, any order) resource by resource against a
/// [`FencedRow`] with `exclusive` and `answers_own_sale`, each search within `budget`.
pub fn check_rows(
    ops: &[Op],
    exclusive: bool,
    answers_own_sale: bool,
    budget: Budget,
) -> RowsVerdict {
    let processes = processes(ops);
    let mut holders: HashMap<String, u32> = HashMap::new();
    let mut by_resource: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        by_resource.entry(&op.resource).or_default().push(i);
    }
    let mut problems = Vec::new();
    let mut settled = Settled::default();
    for (resource, members) in &by_resource {
        let operations = partition(ops, members, &processes, &mut holders, &mut settled);
        problems.push((*resource, operations));
    }
    let mut names = vec![String::new(); holders.len()];
    for (name, id) in holders {
        names[id as usize] = name;
    }
    let model = FencedRow {
        exclusive,
        answers_own_sale,
        holders: names,
    };
    let mut verdict = RowsVerdict {
        linearizable: Linearizable::True,
        partitions: problems.len(),
        failing: 0,
        undecided: 0,
        steps: 0,
        unknown_writes: settled.unknown,
        unknown_writes_taken: settled.taken,
        unknown_writes_not_taken: settled.not_taken,
        longest: None,
    };
    let mut verdicts = Vec::new();
    let mut first_undecided = None;
    for (resource, operations) in &problems {
        let search = check_operations(&model, operations, budget);
        verdict.steps += search.steps;
        verdicts.push(search.verdict);
        let partial = || PartialLinearization {
            resource: resource.to_string(),
            ordered: replay(&model, operations, &search.linearization),
            left: (0..operations.len())
                .filter(|i| !search.linearization.contains(i))
                .map(|i| linearized(&model, &operations[i], None))
                .collect(),
        };
        match search.verdict {
            Linearizable::True => {}
            Linearizable::False => {
                verdict.failing += 1;
                if verdict.longest.is_none() {
                    verdict.longest = Some(partial());
                }
            }
            Linearizable::Unknown => {
                verdict.undecided += 1;
                first_undecided.get_or_insert_with(partial);
            }
        }
    }
    verdict.linearizable = Linearizable::all(verdicts);
    if verdict.longest.is_none() {
        verdict.longest = first_undecided;
    }
    verdict
}

/// Unknown writes, counted, and those the final reads settled.
#[derive(Default)]
struct Settled {
    unknown: usize,
    taken: usize,
    not_taken: usize,
}

/// One resource's operations for the search: the writes answered `ok` or not at all,
/// and the final read, with the unknown writes and the bids' tokens it decides settled.
fn partition(
    ops: &[Op],
    members: &[usize],
    processes: &[String],
    holders: &mut HashMap<String, u32>,
    settled: &mut Settled,
) -> Vec<Operation<RowInput, RowOutput>> {
    let mut id = |name: &str| {
        let next = holders.len() as u32;
        *holders.entry(name.to_string()).or_insert(next)
    };
    let final_read = members
        .iter()
        .copied()
        .filter(|&i| ops[i].op == OpKind::Read && ops[i].outcome == Outcome::Ok)
        .max_by(|&a, &b| ops[a].complete_ms.total_cmp(&ops[b].complete_ms));
    let found: Vec<Write> = final_read
        .map(|i| parse_accepted(ops[i].value.as_deref().unwrap_or_default()))
        .unwrap_or_default()
        .iter()
        .map(|a| Write {
            holder: id(&a.holder),
            value: a.value.as_deref().and_then(|v| v.parse().ok()),
            token: a.fencing_token,
        })
        .collect();
    let mut operations: Vec<Operation<RowInput, RowOutput>> = Vec::new();
    for &i in members {
        let op = &ops[i];
        let (output, ret) = match (op.op, op.outcome) {
            (OpKind::Write, Outcome::Ok) => (RowOutput::Ok, op.complete_ms),
            (OpKind::Write, Outcome::Unknown) => (RowOutput::Unknown, f64::INFINITY),
            _ => continue,
        };
        let write = Write {
            holder: id(&op.holder),
            value: op.value.as_deref().and_then(|v| v.parse().ok()),
            token: None,
        };
        operations.push(Operation {
            process: processes[i].clone(),
            input: RowInput::Write(write),
            output,
            call: op.invoke_ms,
            ret,
        });
    }
    settled.unknown += operations
        .iter()
        .filter(|o| o.output == RowOutput::Unknown)
        .count();
    if let Some(i) = final_read {
        let read_ms = ops[i].invoke_ms;
        let can_be = |o: &Operation<RowInput, RowOutput>, entry: &Write| match &o.input {
            RowInput::Write(w) => w.holder == entry.holder && w.value == entry.value,
            RowInput::Read => false,
        };
        // An entry only one write can be: that write was taken before the read (its
        // token, a bid's, is the entry's).
        for entry in &found {
            let mut candidates = operations.iter_mut().filter(|o| can_be(o, entry));
            if let (Some(o), None) = (candidates.next(), candidates.next()) {
                if o.output == RowOutput::Unknown {
                    settled.taken += 1;
                    o.output = RowOutput::Ok;
                    o.ret = read_ms.max(o.call);
                }
                if let RowInput::Write(w) = &mut o.input {
                    w.token = w.token.or(entry.token);
                }
            }
        }
        // An unknown write no entry can be was never taken: it changed nothing.
        let before = operations.len();
        operations.retain(|o| o.output != RowOutput::Unknown || found.iter().any(|e| can_be(o, e)));
        settled.not_taken += before - operations.len();
        operations.push(Operation {
            process: processes[i].clone(),
            input: RowInput::Read,
            output: RowOutput::Read(found),
            call: ops[i].invoke_ms,
            ret: ops[i].complete_ms,
        });
    }
    operations
}

/// Each operation's process: its `process`, renamed `process (n)` after its n-1th
/// unanswered write (Jepsen's crashed process, replaced by a new one).
fn processes(ops: &[Op]) -> Vec<String> {
    let mut order: Vec<usize> = (0..ops.len()).collect();
    order.sort_by(|&a, &b| ops[a].invoke_ms.total_cmp(&ops[b].invoke_ms));
    let mut crashed: HashMap<&str, usize> = HashMap::new();
    let mut names = vec![String::new(); ops.len()];
    for i in order {
        let op = &ops[i];
        let n = crashed.get(op.process.as_str()).copied().unwrap_or(0);
        names[i] = if n == 0 {
            op.process.clone()
        } else {
            format!("{} ({})", op.process, n + 1)
        };
        if op.op == OpKind::Write && op.outcome == Outcome::Unknown {
            *crashed.entry(&op.process).or_default() += 1;
        }
    }
    names
}

/// Runs `order` through `model`: each operation with the row after it.
fn replay(
    model: &FencedRow,
    operations: &[Operation<RowInput, RowOutput>],
    order: &[usize],
) -> Vec<Linearized> {
    let mut state = model.init();
    let mut steps = Vec::new();
    for &i in order {
        let op = &operations[i];
        let Some(next) = model.step(&state, &op.input, &op.output) else {
            break;
        };
        state = next;
        steps.push(linearized(model, op, Some(model.describe_state(&state))));
    }
    steps
}

fn linearized(
    model: &FencedRow,
    op: &Operation<RowInput, RowOutput>,
    state: Option<String>,
) -> Linearized {
    Linearized {
        process: op.process.clone(),
        op: model.describe(&op.input, &op.output),
        state,
        invoke_ms: op.call,
        complete_ms: op.ret.is_finite().then_some(op.ret),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{Accepted, accepted_value};

    fn op(process: &str, kind: OpKind, at: f64, outcome: Outcome) -> Op {
        Op {
            process: process.into(),
            holder: process.split('/').next().unwrap().into(),
            op: kind,
            resource: "seat 1".into(),
            fencing_token: None,
            value: Some("sold".into()),
            invoke_ms: at,
            complete_ms: at + 10.0,
            outcome,
            reason: None,
        }
    }

    fn read(at: f64, accepted: &[(&str, Option<i64>, Option<&str>)]) -> Op {
        let accepted: Vec<Accepted> = accepted
            .iter()
            .map(|&(h, t, v)| Accepted {
                value: v.map(String::from),
                ..Accepted::of(h, t)
            })
            .collect();
        Op {
            value: Some(accepted_value(&accepted)),
            ..op("checker", OpKind::Read, at, Outcome::Ok)
        }
    }

    use OpKind::*;
    use Outcome::*;

    fn seat(ops: &[Op]) -> RowsVerdict {
        check_rows(ops, true, true, Budget::DEFAULT)
    }

    #[test]
    fn a_seat_sold_once_is_linearizable_and_its_unknown_writes_settled() {
        let history = [
            op("a/tab0", Acquire, 0.0, Ok),
            op("a/tab0", Write, 20.0, Unknown),
            op("b/tab0", Write, 25.0, Fail),
            op("c/tab0", Write, 30.0, Unknown),
            op("a/tab0", Write, 100.0, Ok),
            read(500.0, &[("a", Some(3), None)]),
        ];
        let verdict = seat(&history);
        assert_eq!(verdict.linearizable, Linearizable::True);
        assert_eq!((verdict.unknown_writes, verdict.partitions), (2, 1));
        // a's first write or its second bought it: undecided; c's never took.
        assert_eq!(
            (
                verdict.unknown_writes_taken,
                verdict.unknown_writes_not_taken
            ),
            (0, 1)
        );
        // Alone, a's unknown write is the only one the read can be: taken.
        let alone = [history[1].clone(), history[5].clone()];
        assert_eq!(seat(&alone).unknown_writes_taken, 1);
        assert!(verdict.longest.is_none());
    }

    #[test]
    fn a_seat_sold_twice_is_not_and_the_report_shows_how_far_it_got() {
        let history = [
            op("a/tab0", Write, 0.0, Ok),
            op("b/tab1", Write, 50.0, Ok),
            read(500.0, &[("a", None, None), ("b", None, None)]),
        ];
        let verdict = seat(&history);
        assert_eq!(verdict.linearizable, Linearizable::False);
        assert_eq!(verdict.failing, 1);
        let longest = verdict.longest.unwrap();
        assert_eq!(longest.resource, "seat 1");
        assert_eq!(longest.ordered.len(), 1);
        assert_eq!(longest.ordered[0].op, "write(a) -> ok");
        assert_eq!(longest.left.len(), 2);
    }

    #[test]
    fn a_lost_write_and_a_phantom_are_not_linearizable() {
        let lost = [op("a/tab0", Write, 0.0, Ok), read(500.0, &[])];
        assert_eq!(seat(&lost).linearizable, Linearizable::False);
        let phantom = [
            op("a/tab0", Write, 0.0, Fail),
            read(500.0, &[("a", None, None)]),
        ];
        assert_eq!(seat(&phantom).linearizable, Linearizable::False);
        // An unknown one may be either.
        for found in [vec![("a", None, None)], vec![]] {
            let unknown = [op("a/tab0", Write, 0.0, Unknown), read(500.0, &found)];
            assert_eq!(seat(&unknown).linearizable, Linearizable::True);
        }
    }

    #[test]
    fn the_double_submit_is_answered_with_its_order_where_the_product_does() {
        let history = [
            op("a/tab0", Write, 0.0, Ok),
            op("a/tab1", Write, 100.0, Ok),
            read(500.0, &[("a", Some(1), None)]),
        ];
        assert_eq!(seat(&history).linearizable, Linearizable::True);
        let conditional = check_rows(&history, true, false, Budget::DEFAULT);
        assert_eq!(conditional.linearizable, Linearizable::False);
    }

    fn bid(process: &str, cents: &str, at: f64, outcome: Outcome) -> Op {
        Op {
            value: Some(cents.into()),
            resource: "item 1".into(),
            ..op(process, Write, at, outcome)
        }
    }

    fn item_read(at: f64, accepted: &[(&str, i64, &str)]) -> Op {
        let found: Vec<_> = accepted
            .iter()
            .map(|&(h, t, v)| (h, Some(t), Some(v)))
            .collect();
        Op {
            resource: "item 1".into(),
            ..read(at, &found)
        }
    }

    #[test]
    fn bids_are_taken_in_real_time_order_and_token_order() {
        let bids = [
            bid("a/tab0", "1000", 0.0, Ok),
            bid("b/tab0", "1200", 5.0, Ok),
            bid("a/tab0", "1500", 100.0, Ok),
        ];
        let with = |accepted: &[(&str, i64, &str)]| {
            let mut h = bids.to_vec();
            h.push(item_read(500.0, accepted));
            check_rows(&h, false, false, Budget::DEFAULT).linearizable
        };
        // The first two overlap: either order; the third came after both.
        let ok = [("b", 1, "1200"), ("a", 2, "1000"), ("a", 3, "1500")];
        assert_eq!(with(&ok), Linearizable::True);
        let late = [("a", 1, "1000"), ("a", 2, "1500"), ("b", 3, "1200")];
        assert_eq!(
            with(&late),
            Linearizable::False,
            "b's bid was taken after a later one"
        );
        let backwards = [("a", 2, "1000"), ("b", 1, "1200"), ("a", 3, "1500")];
        assert_eq!(
            with(&backwards),
            Linearizable::False,
            "a lower token after a higher"
        );
    }

    #[test]
    fn a_tab_after_an_unanswered_write_is_a_new_process() {
        let history = [
            op("a/tab0", Write, 0.0, Unknown),
            op("a/tab0", Write, 100.0, Ok),
            op("a/tab0", Write, 200.0, Unknown),
            op("a/tab0", Write, 300.0, Ok),
        ];
        assert_eq!(
            processes(&history),
            ["a/tab0", "a/tab0 (2)", "a/tab0 (2)", "a/tab0 (3)"]
        );
    }

    #[test]
    fn a_search_over_budget_is_undecided_not_passed() {
        // Twelve unanswered bids of one maximum the read cannot tell apart, and a read
        // no order explains: every subset of them is tried.
        let mut history: Vec<Op> = (0..12)
            .map(|i| bid(&format!("a/tab{i}"), "100", 0.0, Unknown))
            .collect();
        history.push(item_read(500.0, &[("a", 1, "100"), ("zz", 2, "100")]));
        let verdict = check_rows(&history, false, false, Budget::steps(100));
        assert_eq!(verdict.linearizable, Linearizable::Unknown);
        assert_eq!(verdict.undecided, 1);
        assert!(verdict.longest.is_some());
        let decided = check_rows(&history, false, false, Budget::DEFAULT);
        assert_eq!(decided.linearizable, Linearizable::False);
    }
}
