//! A timed run's history, for the history checker that judges the nemesis
//! ([`seatlock_history::check`]): each side's grants, refusals, writes and releases become
//! operations of one history, judged when the side ends. The verdict is kept with the
//! side's seat row (`lab_seats.history_valid`, `history_anomalies`), and the challenges
//! pass or fail on it (`challenge.rs`).
//!
//! The lab's own marks (`check.rs`) say, row by row, what each event did for a reader; the
//! history checker says whether the whole side kept the article's invariant, by the same
//! rules as a `make nemesis` run, so a challenge is judged as the nemesis would judge it.

use seatlock_history::check::{self, Model, Verdict};
use seatlock_history::{Op, OpKind, Outcome};

use super::check::Action;
use super::simulated::{Protocol, Report};
use super::{LEASE_TTL, SEAT};

/// The operation `report` records, if it is one: a grant or a refusal (`acquire`), a
/// write ("14C sold", accepted or refused by the seat's row) or a release. A server's
/// read of the seat, its payment, its pauses and the faults are not operations of the
/// lock or of the resource. The lab reports an event once it is done, so an operation's
/// invocation and completion are the same instant (stricter than the truth: an
/// operation's interval can only be wider, which gives the checker more orders to allow).
pub(super) fn operation(report: &Report) -> Option<Op> {
    let (op, fencing_token, outcome, reason) = match &report.action {
        Action::Granted { token, .. } => (OpKind::Acquire, Some(*token), Outcome::Ok, None),
        Action::Refused { holder } => (
            OpKind::Acquire,
            None,
            Outcome::Fail,
            Some(format!("held by {holder}")),
        ),
        Action::Delayed(_) => (
            OpKind::Acquire,
            None,
            Outcome::Fail,
            Some("lock-delay".into()),
        ),
        Action::Wrote {
            token, accepted, ..
        } => {
            let outcome = if *accepted {
                Outcome::Ok
            } else {
                Outcome::Fail
            };
            (OpKind::Write, *token, outcome, None)
        }
        Action::Released { deleted, .. } => {
            let outcome = if *deleted { Outcome::Ok } else { Outcome::Fail };
            (OpKind::Release, None, outcome, None)
        }
        _ => return None,
    };
    let at_ms = report.at.as_secs_f64() * 1e3;
    Some(Op {
        process: report.server.into(),
        holder: report.server.into(),
        op,
        resource: format!("seat {SEAT}"),
        fencing_token,
        value: (op == OpKind::Write).then(|| "sold".into()),
        invoke_ms: at_ms,
        complete_ms: at_ms,
        outcome,
        reason,
    })
}

/// Judges one side's operations as the nemesis's checker does: a seat takes one sale
/// (`exclusive`); its writes are fenced when the side's step 4 is on; a lease may lapse
/// [`LEASE_TTL`] after its grant (never, with step 2 off: a key without expiry).
pub(super) fn judge(ops: &[Op], protocol: Protocol) -> Verdict {
    let ttl_ms = if protocol.px {
        LEASE_TTL.as_secs_f64() * 1e3
    } else {
        f64::INFINITY
    };
    let model = Model {
        ttl_ms,
        fenced: protocol.fenced(),
        exclusive: true,
        proxy_increment: None,
    };
    check::check(ops, model)
}

/// What the checker found, as the seat row keeps it: each broken promise's kind, in the
/// order found (`double_sale`, `token_order`, …; the fence's own, `repeated_token` and
/// `token_went_back`, where the writes are fenced), comma-separated; empty when valid.
pub(super) fn anomalies(verdict: &Verdict) -> String {
    let fence = verdict
        .lock_anomalies
        .iter()
        .filter(|a| matches!(a.kind, "repeated_token" | "token_went_back"));
    let kinds: Vec<&str> = verdict
        .violations
        .iter()
        .chain(fence)
        .map(|a| a.kind)
        .collect();
    kinds.join(",")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::lab::check::WriteRule;
    use crate::lab::{Side, Step};

    fn report(at_ms: u64, server: &'static str, action: Action) -> Report {
        Report {
            at: Duration::from_millis(at_ms),
            server,
            action,
            lock_key: String::new(),
            counter: None,
        }
    }

    fn wrote(token: i64, accepted: bool) -> Action {
        Action::Wrote {
            token: Some(token),
            accepted,
            rule: WriteRule::Fenced,
            before_sold_to: None,
            before_token: 0,
        }
    }

    /// The article's step-4 story: A's lease lapses while it pauses, B is granted a
    /// newer token and buys, A wakes and writes with its older one.
    fn stalled_holder(a_accepted: bool) -> Vec<Op> {
        let granted = |token| Action::Granted {
            token,
            overwrote: None,
        };
        [
            report(0, "A", granted(2)),
            report(1900, "B", granted(3)),
            report(2500, "B", wrote(3, true)),
            report(2900, "A", wrote(2, a_accepted)),
            report(
                3400,
                "B",
                Action::Released {
                    deleted: true,
                    whose: Some("B".into()),
                },
            ),
        ]
        .iter()
        .filter_map(operation)
        .collect()
    }

    #[test]
    fn a_late_write_accepted_is_a_double_sale_and_one_refused_is_valid() {
        let unfenced = Protocol::of(Step::Fencing, Side::Off);
        let verdict = judge(&stalled_holder(true), unfenced);
        assert!(!verdict.valid);
        assert!(anomalies(&verdict).contains("double_sale"), "{verdict:?}");

        let fenced = Protocol::of(Step::Fencing, Side::On);
        let verdict = judge(&stalled_holder(false), fenced);
        assert!(verdict.valid, "{verdict:?}");
        assert_eq!(anomalies(&verdict), "");
    }

    /// Step 3 off: B's lock deleted by A's late plain `DEL`, C granted beside B. The
    /// checker counts the double grant and judges the seat: B's sale stands, C reads 14C
    /// sold and leaves, and the history is valid.
    #[test]
    fn a_double_grant_is_counted_and_the_seat_is_what_is_judged() {
        let granted = |token| Action::Granted {
            token,
            overwrote: None,
        };
        let ops: Vec<Op> = [
            report(0, "A", granted(2)),
            report(1900, "B", granted(3)),
            report(2500, "B", wrote(3, true)),
            report(
                2900,
                "A",
                Action::Released {
                    deleted: true,
                    whose: Some("B".into()),
                },
            ),
            report(3000, "C", granted(4)),
            report(
                3100,
                "C",
                Action::Read {
                    sold_to: Some("B".into()),
                },
            ),
        ]
        .iter()
        .filter_map(operation)
        .collect();
        let verdict = judge(&ops, Protocol::of(Step::OwnerCheck, Side::Off));
        assert!(verdict.valid, "{verdict:?}");
        assert_eq!(verdict.double_grants, 1, "{verdict:?}");
        assert_eq!(anomalies(&verdict), "");
    }

    #[test]
    fn only_the_lock_and_the_resource_make_operations() {
        assert!(operation(&report(0, "A", Action::Read { sold_to: None })).is_none());
        assert!(operation(&report(0, "A", Action::Paused(Duration::from_secs(1)))).is_none());
        let write = operation(&report(1500, "A", wrote(2, false))).unwrap();
        assert_eq!(
            (
                write.op,
                write.outcome,
                write.fencing_token,
                write.invoke_ms
            ),
            (OpKind::Write, Outcome::Fail, Some(2), 1500.0)
        );
    }
}
