//! The history checker: judges the history of one workload (its [`Op`]s) against a
//! fenced lock and the resource behind it, Jepsen's way (it reads what happened,
//! operation by operation, not only the final state).
//!
//! Two questions, per resource (a seat, an auction item):
//!
//! * **The lock** (Hazelcast's `FencedMutex` model, with a lease): every granted token is
//!   higher than every token granted before it in real time (`token_went_back`), no token
//!   is granted to two holders (`repeated_token`), and no lease is granted while another
//!   holder's lease may still run and was not released (`double_grant`). A lease is not a
//!   mutex under faults that lose the store's memory (a failover, a restart): double
//!   grants are *expected* there, and reported, not judged; what is judged is whether the
//!   fence caught them.
//! * **The resource** (the article's invariant: writes accepted by the resource come from
//!   at most one holder at a time, in token order), read from the final `read` of each
//!   resource: `double_sale` (an exclusive resource, a seat, accepted two writes),
//!   `token_order` (a fenced resource accepted a lower token after a higher one, or one
//!   token from two holders), `lost_write` (the client was told `ok`, the resource has no
//!   such write), `phantom_write` (the resource has a write its client was told `fail`
//!   for, or never sent). An `unknown` write may be either: both are fine.
//!
//! A workload is valid when its resources break none of those and, where its writes are
//! fenced, no token was granted twice or went back (double grants are counted beside).
//! Violations come first in time first, each with the operations around it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Op, OpKind, Outcome};

/// What the checker assumes of a workload.
#[derive(Debug, Clone, Copy)]
pub struct Model {
    /// The lease's TTL, in ms: a lease granted at `t` may lapse from `t + ttl_ms` on.
    pub ttl_ms: f64,
    /// Whether the resource is written with fencing tokens (judge `token_order`).
    pub fenced: bool,
    /// Whether the resource takes one write only (a seat is sold once; an auction item
    /// takes many bids).
    pub exclusive: bool,
    /// Proxy bidding (an auction item with no reserve): the published increment at a
    /// price (the seat picker's `seatlock::auction::increments::increment_cents`), to judge `price_too_high`
    /// on the accepted writes' maxima (their `value`) and prices.
    pub proxy_increment: Option<fn(i64) -> i64>,
}

/// One broken promise, with the operations around it.
#[derive(Debug, Clone, Serialize)]
pub struct Anomaly {
    /// `double_sale`, `token_order`, `lost_write`, `phantom_write`, `price_too_high` (the
    /// resource's), or `double_grant`, `repeated_token`, `token_went_back` (the lock's).
    pub kind: &'static str,
    /// The resource it happened to: `seat 12`, `item 3`.
    pub resource: String,
    /// What happened, in words.
    pub message: String,
    /// The resource's operations involved and around them (at most [`AROUND`]).
    pub ops: Vec<Op>,
}

/// How many of a resource's operations an anomaly carries.
pub const AROUND: usize = 12;

/// The checker's verdict on one workload's history.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Verdict {
    /// No anomaly of the resource's, and (fenced) none of the fence's.
    pub valid: bool,
    /// Operations judged.
    pub operations: usize,
    /// The resource's anomalies, first one first.
    pub violations: Vec<Anomaly>,
    /// The lock's anomalies (a lease is not a mutex under store faults).
    pub lock_anomalies: Vec<Anomaly>,
    /// Leases granted while another holder's may still have run (the lock's anomalies of
    /// kind `double_grant`).
    pub double_grants: usize,
    /// Double grants where the resource accepted a write from at most one of the two
    /// holders: what the fence (or the resource's condition) is for.
    pub double_grants_caught: usize,
}

/// One write a resource accepted, as its final read reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepted {
    /// The holder whose write it was.
    pub holder: String,
    /// The fencing token the write carried, if any.
    pub fencing_token: Option<i64>,
    /// What was written, where a holder's writes must be told apart (a bid's maximum, in
    /// cents); `None` where one write per holder is all there is to know (a seat's sale).
    pub value: Option<String>,
    /// The price the resource stood at right after this write (a proxy bid's), in cents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_cents: Option<i64>,
}

impl Accepted {
    /// A write of `holder` under `fencing_token`, with no value to tell it apart.
    pub fn of(holder: &str, fencing_token: Option<i64>) -> Accepted {
        Accepted {
            holder: holder.into(),
            fencing_token,
            value: None,
            price_cents: None,
        }
    }

    /// Whether write `w` can be this one: same holder, and the same value if both say.
    fn matches(&self, w: &Op) -> bool {
        self.holder == w.holder
            && match (&self.value, &w.value) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

/// Encodes the writes a resource accepted, in the order it accepted them, as a final
/// read's `value`: a JSON array of [`Accepted`].
pub fn accepted_value(writes: &[Accepted]) -> String {
    serde_json::to_string(writes).expect("plain data serializes")
}

/// The inverse of [`accepted_value`]; a value that does not parse reads as nothing.
pub fn parse_accepted(value: &str) -> Vec<Accepted> {
    serde_json::from_str(value).unwrap_or_default()
}

/// The proxy rule on the writes a resource accepted, in its order: after each, the price
/// is never above the runner-up's maximum plus the increment at it (the second-highest
/// of the holders' latest maxima, read from the writes' values), nor above the top
/// maximum. Judged only where there is a runner-up and a recorded price (a lone bidder
/// stands at the starting price, which the checker does not know). Each breach: a
/// message and the holders involved.
fn prices_too_high<'a>(
    resource: &str,
    accepted: &'a [Accepted],
    increment: fn(i64) -> i64,
) -> Vec<(String, Vec<&'a str>)> {
    let mut maxima: BTreeMap<&'a str, i64> = BTreeMap::new();
    let mut breaches = Vec::new();
    for write in accepted {
        let Some(max) = write.value.as_deref().and_then(|v| v.parse().ok()) else {
            continue;
        };
        maxima.insert(&write.holder, max);
        let mut ranked: Vec<(&str, i64)> = maxima.iter().map(|(h, m)| (*h, *m)).collect();
        ranked.sort_by_key(|&(_, max)| std::cmp::Reverse(max));
        let (Some(price), [(top, top_max), (second, second_max), ..]) =
            (write.price_cents, ranked.as_slice())
        else {
            continue;
        };
        let bound = (*top_max).min(second_max + increment(*second_max));
        if price > bound {
            breaches.push((
                format!(
                    "{resource} stood at {price} cents after a write of {}: above the runner-up's \
                     maximum {second_max} plus the increment {} (or the top maximum {top_max})",
                    write.holder,
                    increment(*second_max)
                ),
                vec![*top, *second],
            ));
        }
    }
    breaches
}

/// Checks `ops` (any order) under `model`.
pub fn check(ops: &[Op], model: Model) -> Verdict {
    let mut by_resource: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        by_resource.entry(&op.resource).or_default().push(op);
    }
    let mut verdict = Verdict {
        operations: ops.len(),
        ..Verdict::default()
    };
    for (resource, mut ops) in by_resource {
        ops.sort_by(|a, b| a.invoke_ms.total_cmp(&b.invoke_ms));
        let accepted = check_resource(resource, &ops, model, &mut verdict.violations);
        check_lock(resource, &ops, model, &accepted, &mut verdict);
    }
    // First in time first: the report shows the earliest, and the timeline centres on it.
    let began = |a: &Anomaly| a.ops.iter().map(|o| o.invoke_ms).fold(f64::MAX, f64::min);
    verdict
        .violations
        .sort_by(|a, b| began(a).total_cmp(&began(b)));
    verdict
        .lock_anomalies
        .sort_by(|a, b| began(a).total_cmp(&began(b)));
    // Where the writes are fenced, the fence's own promise is judged too (the article's
    // step 5): no token granted twice, none going back.
    let fence_broken = model.fenced
        && verdict
            .lock_anomalies
            .iter()
            .any(|a| matches!(a.kind, "repeated_token" | "token_went_back"));
    verdict.valid = verdict.violations.is_empty() && !fence_broken;
    verdict
}

/// The operations of a resource an anomaly shows: those of `holders`, and the others
/// next to them, at most [`AROUND`].
fn around(ops: &[&Op], holders: &[&str]) -> Vec<Op> {
    let involved: Vec<usize> = (0..ops.len())
        .filter(|&i| holders.contains(&ops[i].holder.as_str()))
        .collect();
    let (first, last) = match (involved.first(), involved.last()) {
        (Some(&f), Some(&l)) => (f, l),
        _ => (0, ops.len().saturating_sub(1)),
    };
    let from = first.saturating_sub(2);
    let to = (last + 3).min(ops.len());
    ops[from..to]
        .iter()
        .filter(|op| to - from <= AROUND || holders.contains(&op.holder.as_str()))
        .take(AROUND)
        .map(|op| (*op).clone())
        .collect()
}

/// The resource's half; returns what it accepted (the last final read's, else the `ok`
/// writes), in order.
fn check_resource(
    resource: &str,
    ops: &[&Op],
    model: Model,
    violations: &mut Vec<Anomaly>,
) -> Vec<Accepted> {
    let writes: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|o| o.op == OpKind::Write)
        .collect();
    let final_read = ops
        .iter()
        .filter(|o| o.op == OpKind::Read && o.outcome == Outcome::Ok)
        .max_by(|a, b| a.complete_ms.total_cmp(&b.complete_ms));
    let accepted: Vec<Accepted> = match final_read {
        Some(read) => parse_accepted(read.value.as_deref().unwrap_or_default()),
        None => writes
            .iter()
            .filter(|w| w.outcome == Outcome::Ok)
            .map(|w| Accepted {
                value: w.value.clone(),
                ..Accepted::of(&w.holder, w.fencing_token)
            })
            .collect(),
    };
    let mut flag = |kind, message: String, holders: Vec<&str>| {
        violations.push(Anomaly {
            kind,
            resource: resource.into(),
            message,
            ops: around(ops, &holders),
        })
    };
    if final_read.is_some() {
        // Each acknowledged write has its own accepted one, and each accepted write its
        // own write that was not refused: matched one to one, so one holder's accepted
        // write cannot stand in for another of the same holder's.
        let mut unmatched: Vec<&Accepted> = accepted.iter().collect();
        for w in writes.iter().filter(|w| w.outcome == Outcome::Ok) {
            let found = unmatched.iter().position(|a| a.matches(w));
            if let Some(at) = found {
                unmatched.remove(at);
            } else if !accepted.iter().any(|a| a.matches(w) && a.value.is_none()) {
                flag(
                    "lost_write",
                    format!(
                        "{} was told its write was accepted; {resource} has no write of it",
                        w.process
                    ),
                    vec![&w.holder],
                );
            }
        }
        for a in unmatched {
            // A seat's sale carries no value: a second tab's acknowledged confirm of the
            // same sale matches it too, and so may any write of that holder not refused.
            let sent = writes
                .iter()
                .any(|w| a.matches(w) && w.outcome != Outcome::Fail);
            if !sent {
                let holder = &a.holder;
                flag(
                    "phantom_write",
                    format!(
                        "{resource} accepted a write of {holder} that was refused or never sent"
                    ),
                    vec![holder],
                );
            }
        }
    }
    if let Some(increment) = model.proxy_increment {
        for (message, holders) in prices_too_high(resource, &accepted, increment) {
            flag("price_too_high", message, holders);
        }
    }
    if model.exclusive && accepted.len() > 1 {
        let holders: Vec<&str> = accepted.iter().map(|a| a.holder.as_str()).collect();
        flag(
            "double_sale",
            format!(
                "{resource} accepted {} writes: {}",
                accepted.len(),
                holders.join(", ")
            ),
            holders.clone(),
        );
    }
    if model.fenced {
        // Against the highest token accepted so far: a write without a token between two
        // others must not hide a token going back; and a fenced resource takes none.
        let mut highest: Option<(&str, i64)> = None;
        for b in &accepted {
            let Some(tb) = b.fencing_token else {
                flag(
                    "token_order",
                    format!(
                        "{resource} accepted a write of {} without a token",
                        b.holder
                    ),
                    vec![&b.holder],
                );
                continue;
            };
            match highest {
                Some((a, ta)) if tb < ta || (tb == ta && a != b.holder) => flag(
                    "token_order",
                    format!(
                        "{resource} accepted {}'s token {tb} after {a}'s token {ta}",
                        b.holder
                    ),
                    vec![a, &b.holder],
                ),
                Some((_, ta)) if ta >= tb => {}
                _ => highest = Some((&b.holder, tb)),
            }
        }
    }
    accepted
}

/// The lock's half (see the module docs).
fn check_lock(
    resource: &str,
    ops: &[&Op],
    model: Model,
    accepted: &[Accepted],
    verdict: &mut Verdict,
) {
    let grants: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|o| o.op == OpKind::Acquire && o.outcome == Outcome::Ok)
        .collect();
    let mut flag = |kind, message: String, holders: [&str; 2]| {
        verdict.lock_anomalies.push(Anomaly {
            kind,
            resource: resource.into(),
            message,
            ops: around(ops, &holders),
        })
    };
    // Real time: a grant that completed before another was sent has the lower token;
    // a token belongs to one holder.
    for (i, a) in grants.iter().enumerate() {
        for b in &grants[i + 1..] {
            let (Some(ta), Some(tb)) = (a.fencing_token, b.fencing_token) else {
                continue;
            };
            if ta == tb && a.holder != b.holder {
                flag(
                    "repeated_token",
                    format!("token {ta} was granted to {} and to {}", a.holder, b.holder),
                    [&a.holder, &b.holder],
                );
            } else if a.complete_ms < b.invoke_ms && tb < ta {
                flag(
                    "token_went_back",
                    format!(
                        "{} was granted token {tb} after {} had been granted {ta}",
                        b.holder, a.holder
                    ),
                    [&a.holder, &b.holder],
                );
            }
        }
    }
    // Mutual exclusion with a lease, in the order the fence says the grants happened
    // (two grants sent at once may be answered either way round): a grant to another
    // holder came before the previous holder's lease could lapse, and that holder had not
    // released. A pair the fence orders against real time is `token_went_back`, above.
    let mut in_token_order: Vec<&Op> = grants
        .iter()
        .copied()
        .filter(|g| g.fencing_token.is_some())
        .collect();
    in_token_order.sort_by_key(|g| g.fencing_token);
    for pair in in_token_order.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.holder == b.holder || b.complete_ms < a.invoke_ms {
            continue;
        }
        // The lease began at its first grant (a second tab's grant of the same lease
        // returns it, it does not extend it); only a renew extends it.
        let granted_ms = grants
            .iter()
            .filter(|g| g.holder == a.holder && g.fencing_token == a.fencing_token)
            .map(|g| g.invoke_ms)
            .fold(a.invoke_ms, f64::min);
        let extended_ms = ops
            .iter()
            .filter(|o| {
                o.holder == a.holder
                    && o.outcome == Outcome::Ok
                    && o.op == OpKind::Renew
                    && o.fencing_token == a.fencing_token
            })
            .map(|o| o.invoke_ms)
            .fold(granted_ms, f64::max);
        let released = ops.iter().any(|o| {
            o.holder == a.holder
                && o.op == OpKind::Release
                && o.outcome != Outcome::Fail
                && o.invoke_ms >= granted_ms
                && o.invoke_ms < b.complete_ms
        });
        if released || b.complete_ms >= extended_ms + model.ttl_ms {
            continue;
        }
        verdict.double_grants += 1;
        // Caught: one of the two holders' writes landed and the other's was refused.
        let landed = |h: &str| accepted.iter().any(|w| w.holder == h);
        let refused = |h: &str| {
            ops.iter()
                .any(|o| o.holder == h && o.op == OpKind::Write && o.outcome == Outcome::Fail)
        };
        if (landed(&a.holder) && !landed(&b.holder) && refused(&b.holder))
            || (landed(&b.holder) && !landed(&a.holder) && refused(&a.holder))
        {
            verdict.double_grants_caught += 1;
        }
        flag(
            "double_grant",
            format!(
                "{} was granted token {:?} {:.0} ms after {} was granted {:?} (TTL {:.0} ms), \
                 which had not released",
                b.holder,
                b.fencing_token.unwrap_or_default(),
                b.complete_ms - extended_ms,
                a.holder,
                a.fencing_token.unwrap_or_default(),
                model.ttl_ms
            ),
            [&a.holder, &b.holder],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEAT: Model = Model {
        ttl_ms: 1_000.0,
        fenced: true,
        exclusive: true,
        proxy_increment: None,
    };

    fn op(holder: &str, kind: OpKind, token: Option<i64>, at: f64, outcome: Outcome) -> Op {
        Op {
            process: format!("{holder}/tab1"),
            holder: holder.into(),
            op: kind,
            resource: "seat 1".into(),
            fencing_token: token,
            value: None,
            invoke_ms: at,
            complete_ms: at + 5.0,
            outcome,
            reason: None,
        }
    }

    fn final_read(at: f64, accepted: &[(&str, Option<i64>)]) -> Op {
        let accepted: Vec<Accepted> = accepted.iter().map(|(h, t)| Accepted::of(h, *t)).collect();
        Op {
            value: Some(accepted_value(&accepted)),
            ..op("checker", OpKind::Read, None, at, Outcome::Ok)
        }
    }

    fn kinds(anomalies: &[Anomaly]) -> Vec<&'static str> {
        anomalies.iter().map(|a| a.kind).collect()
    }

    use OpKind::*;
    use Outcome::*;

    #[test]
    fn one_holder_after_another_is_valid() {
        let history = [
            op("a", Acquire, Some(1), 0.0, Ok),
            op("a", Release, Some(1), 100.0, Ok),
            op("b", Acquire, Some(2), 200.0, Ok),
            op("b", Write, Some(2), 300.0, Ok),
            final_read(400.0, &[("b", Some(2))]),
        ];
        let verdict = check(&history, SEAT);
        assert!(verdict.valid, "{:?}", verdict.violations);
        assert!(verdict.lock_anomalies.is_empty());
        assert_eq!(verdict.operations, 5);
    }

    #[test]
    fn a_lease_that_lapsed_may_be_granted_again() {
        let history = [
            op("a", Acquire, Some(1), 0.0, Ok),
            op("b", Acquire, Some(2), 1_200.0, Ok),
            op("a", Write, Some(1), 1_300.0, Fail),
            op("b", Write, Some(2), 1_400.0, Ok),
            final_read(1_500.0, &[("b", Some(2))]),
        ];
        let verdict = check(&history, SEAT);
        assert!(verdict.valid);
        assert_eq!(verdict.double_grants, 0);
    }

    #[test]
    fn an_unfenced_pause_sells_twice() {
        // a holds, stalls past its TTL, writes; b held after the lapse and wrote first.
        let history = [
            op("a", Acquire, Some(1), 0.0, Ok),
            op("b", Acquire, Some(2), 1_100.0, Ok),
            op("b", Write, None, 1_150.0, Ok),
            op("a", Write, None, 1_900.0, Ok),
            final_read(2_000.0, &[("b", None), ("a", None)]),
        ];
        let verdict = check(
            &history,
            Model {
                fenced: false,
                ..SEAT
            },
        );
        assert!(!verdict.valid);
        assert_eq!(kinds(&verdict.violations), ["double_sale"]);
        assert!(verdict.violations[0].message.contains("2 writes"));
    }

    #[test]
    fn a_lower_token_accepted_after_a_higher_one_breaks_token_order() {
        let mut history = [
            op("b", Write, Some(2), 100.0, Ok),
            op("a", Write, Some(1), 200.0, Ok),
            final_read(300.0, &[("b", Some(2)), ("a", Some(1))]),
        ];
        let not_exclusive = Model {
            exclusive: false,
            ..SEAT
        };
        assert_eq!(
            kinds(&check(&history, not_exclusive).violations),
            ["token_order"]
        );
        // One token from two holders is as bad.
        history[1].fencing_token = Some(2);
        history[2] = final_read(300.0, &[("b", Some(2)), ("a", Some(2))]);
        let verdict = check(&history, not_exclusive);
        assert_eq!(kinds(&verdict.violations), ["token_order"]);
        assert!(verdict.violations[0].message.contains("token 2 after"));
    }

    #[test]
    fn an_acknowledged_write_the_resource_lacks_is_lost() {
        let history = [
            op("a", Acquire, Some(1), 0.0, Ok),
            op("a", Write, Some(1), 10.0, Ok),
            final_read(100.0, &[]),
        ];
        assert_eq!(kinds(&check(&history, SEAT).violations), ["lost_write"]);
    }

    #[test]
    fn a_refused_write_the_resource_took_is_a_phantom_and_an_unknown_one_is_either() {
        let refused = [
            op("a", Write, Some(1), 10.0, Fail),
            final_read(100.0, &[("a", Some(1))]),
        ];
        assert_eq!(kinds(&check(&refused, SEAT).violations), ["phantom_write"]);
        for accepted in [vec![("a", Some(1))], vec![]] {
            let unknown = [
                op("a", Write, Some(1), 10.0, Unknown),
                final_read(100.0, &accepted),
            ];
            assert!(check(&unknown, SEAT).valid);
        }
    }

    #[test]
    fn a_grant_inside_anothers_lease_is_a_double_grant_caught_when_one_write_lands() {
        // Redis lost a's lease (a restart, a failover): b is granted 300 ms later.
        let history = [
            op("a", Acquire, Some(1), 0.0, Ok),
            op("b", Acquire, Some(2), 300.0, Ok),
            op("b", Write, Some(2), 400.0, Ok),
            op("a", Write, Some(1), 500.0, Fail),
            final_read(600.0, &[("b", Some(2))]),
        ];
        let verdict = check(&history, SEAT);
        assert!(
            verdict.valid,
            "the fence caught it: {:?}",
            verdict.violations
        );
        assert_eq!(kinds(&verdict.lock_anomalies), ["double_grant"]);
        assert_eq!(
            (verdict.double_grants, verdict.double_grants_caught),
            (1, 1)
        );
        // A release in between makes it no anomaly at all.
        let mut released = history.to_vec();
        released.insert(1, op("a", Release, Some(1), 200.0, Ok));
        assert_eq!(check(&released, SEAT).double_grants, 0);
    }

    #[test]
    fn grants_are_ordered_by_their_tokens_not_by_when_they_were_sent() {
        // b's hold was sent first and answered late (its server stalled): a held and
        // released in between, so b was granted after a, with the higher token.
        let history = [
            Op {
                complete_ms: 2_900.0,
                ..op("b", Acquire, Some(89), 0.0, Ok)
            },
            op("a", Acquire, Some(48), 300.0, Ok),
            op("a", Release, Some(48), 600.0, Ok),
            op("b", Write, Some(89), 3_000.0, Ok),
            final_read(3_100.0, &[("b", Some(89))]),
        ];
        let verdict = check(&history, SEAT);
        assert!(verdict.valid);
        assert!(
            verdict.lock_anomalies.is_empty(),
            "{:?}",
            verdict.lock_anomalies
        );
    }

    #[test]
    fn repeated_and_backward_tokens_are_the_locks_anomalies() {
        let repeated = [
            op("a", Acquire, Some(7), 0.0, Ok),
            op("b", Acquire, Some(7), 2_000.0, Ok),
        ];
        assert_eq!(
            kinds(&check(&repeated, SEAT).lock_anomalies),
            ["repeated_token"]
        );
        let backward = [
            op("a", Acquire, Some(7), 0.0, Ok),
            op("b", Acquire, Some(3), 2_000.0, Ok),
        ];
        assert_eq!(
            kinds(&check(&backward, SEAT).lock_anomalies),
            ["token_went_back"]
        );
        // Overlapping grants may be ordered either way; one holder may be granted its
        // own token again (a second tab).
        let concurrent = [
            op("a", Acquire, Some(7), 0.0, Ok),
            Op {
                complete_ms: 20.0,
                ..op("b", Acquire, Some(3), 1.0, Ok)
            },
            op("a", Acquire, Some(7), 1.0, Ok),
        ];
        let verdict = check(&concurrent, SEAT);
        assert!(!kinds(&verdict.lock_anomalies).contains(&"token_went_back"));
        assert!(!kinds(&verdict.lock_anomalies).contains(&"repeated_token"));
    }

    fn bid(holder: &str, cents: &str, at: f64, outcome: Outcome) -> Op {
        Op {
            value: Some(cents.into()),
            ..op(holder, Write, None, at, outcome)
        }
    }

    fn bids_read(at: f64, accepted: &[(&str, i64, &str)]) -> Op {
        let accepted: Vec<Accepted> = accepted
            .iter()
            .map(|(h, t, cents)| Accepted {
                value: Some((*cents).into()),
                ..Accepted::of(h, Some(*t))
            })
            .collect();
        Op {
            value: Some(accepted_value(&accepted)),
            ..op("checker", Read, None, at, Ok)
        }
    }

    const ITEM: Model = Model {
        exclusive: false,
        ..SEAT
    };

    /// A final read of proxy bids: (holder, token, maximum, price after it).
    fn proxy_read(at: f64, accepted: &[(&str, i64, i64, i64)]) -> Op {
        let accepted: Vec<Accepted> = accepted
            .iter()
            .map(|&(h, t, max, price)| Accepted {
                value: Some(max.to_string()),
                price_cents: Some(price),
                ..Accepted::of(h, Some(t))
            })
            .collect();
        Op {
            value: Some(accepted_value(&accepted)),
            ..op("checker", Read, None, at, Ok)
        }
    }

    const PROXY: Model = Model {
        proxy_increment: Some(seatlock::auction::increments::increment_cents),
        ..ITEM
    };

    #[test]
    fn a_price_above_the_runner_ups_maximum_plus_the_increment_is_flagged() {
        let writes = [
            bid("a", "1000", 0.0, Ok),
            bid("b", "3000", 100.0, Ok),
            bid("a", "3000", 200.0, Ok),
        ];
        // The read: A's, then B's and A's equal maxima, with the price after each.
        let read = |b_price| {
            let accepted = [
                ("a", 1, 1_000, 1_000),
                ("b", 2, 3_000, b_price),
                ("a", 3, 3_000, 3_000),
            ];
            let read = proxy_read(500.0, &accepted);
            writes.iter().cloned().chain([read]).collect::<Vec<Op>>()
        };
        // $10.00, then B leads at A's $10.00 plus $0.50, then A's equal $30.00 loses to
        // B's earlier one at $30.00: the proxy rule holds.
        let history = read(1_050);
        assert!(check(&history, PROXY).valid, "{:?}", check(&history, PROXY));
        // Hand-written bad history: B's maximum was charged in full ($30.00) against a
        // runner-up at $10.00, as when the resolution ran against a stale runner-up.
        let history = read(3_000);
        let verdict = check(&history, PROXY);
        assert_eq!(kinds(&verdict.violations), ["price_too_high"]);
        assert!(
            verdict.violations[0]
                .message
                .contains("runner-up's maximum 1000"),
            "{verdict:?}"
        );
        // The same history without the proxy rule is not judged on prices.
        assert!(check(&history, ITEM).valid);
    }

    #[test]
    fn one_bidders_writes_are_matched_one_by_one() {
        // Told ok twice, one bid kept: a lost bid, not hidden by the other.
        let lost = [
            bid("a", "1100", 0.0, Ok),
            bid("a", "1300", 100.0, Ok),
            bids_read(500.0, &[("a", 1, "1300")]),
        ];
        assert_eq!(kinds(&check(&lost, ITEM).violations), ["lost_write"]);
        // A refused bid that landed anyway: a phantom, not hidden by an accepted one.
        let phantom = [
            bid("a", "1100", 0.0, Fail),
            bid("a", "1300", 100.0, Ok),
            bids_read(500.0, &[("a", 1, "1100"), ("a", 2, "1300")]),
        ];
        assert_eq!(kinds(&check(&phantom, ITEM).violations), ["phantom_write"]);
    }

    #[test]
    fn a_write_without_a_token_neither_hides_a_token_going_back_nor_passes_a_fence() {
        let history = [
            op("b", Write, Some(5), 0.0, Ok),
            op("c", Write, None, 10.0, Ok),
            op("a", Write, Some(3), 20.0, Ok),
            final_read(500.0, &[("b", Some(5)), ("c", None), ("a", Some(3))]),
        ];
        assert_eq!(
            kinds(&check(&history, ITEM).violations),
            ["token_order", "token_order"]
        );
    }

    #[test]
    fn a_holder_named_with_commas_and_hashes_is_one_holder() {
        let history = [
            op("x,y#1", Acquire, Some(1), 0.0, Ok),
            op("x,y#1", Write, Some(1), 10.0, Ok),
            final_read(500.0, &[("x,y#1", Some(1))]),
        ];
        let verdict = check(&history, SEAT);
        assert!(verdict.valid, "{:?}", verdict.violations);
    }

    #[test]
    fn a_second_tabs_grant_of_the_same_lease_does_not_extend_it() {
        // The server answers a second tab's hold with the grant it made, same TTL.
        let history = [
            op("a", Acquire, Some(1), 0.0, Ok),
            op("a", Acquire, Some(1), 900.0, Ok),
            op("b", Acquire, Some(2), 1_500.0, Ok),
            op("b", Write, Some(2), 1_600.0, Ok),
            final_read(2_000.0, &[("b", Some(2))]),
        ];
        let verdict = check(&history, SEAT);
        assert_eq!(
            (verdict.double_grants, verdict.double_grants_caught),
            (0, 0)
        );
    }

    #[test]
    fn a_double_grant_nobody_wrote_under_is_not_counted_as_caught() {
        let history = [
            op("a", Acquire, Some(1), 0.0, Ok),
            op("b", Acquire, Some(2), 300.0, Ok),
            final_read(2_000.0, &[]),
        ];
        let verdict = check(&history, SEAT);
        assert_eq!(
            (verdict.double_grants, verdict.double_grants_caught),
            (1, 0)
        );
    }

    #[test]
    fn a_fenced_workload_whose_fence_repeats_a_token_is_invalid() {
        let history = [
            op("a", Acquire, Some(7), 0.0, Ok),
            op("b", Acquire, Some(7), 2_000.0, Ok),
            op("b", Write, Some(7), 2_100.0, Ok),
            final_read(3_000.0, &[("b", Some(7))]),
        ];
        assert!(!check(&history, SEAT).valid);
        let unfenced = Model {
            fenced: false,
            ..SEAT
        };
        assert!(check(&history, unfenced).valid);
    }

    #[test]
    fn violations_come_first_in_time_first() {
        let mut history = Vec::new();
        for (seat, at) in [("seat 106", 5_000.0), ("seat 7", 1_000.0)] {
            for holder in ["a", "b"] {
                history.push(Op {
                    resource: seat.into(),
                    ..op(holder, Write, None, at, Ok)
                });
            }
        }
        let unfenced = Model {
            fenced: false,
            ..SEAT
        };
        let verdict = check(&history, unfenced);
        let seats: Vec<&str> = verdict
            .violations
            .iter()
            .map(|v| v.resource.as_str())
            .collect();
        assert_eq!(seats, ["seat 7", "seat 106"]);
    }

    #[test]
    fn an_anomaly_shows_the_operations_around_it() {
        let mut history: Vec<Op> = (0..30)
            .map(|i| op(&format!("x{i}"), Write, None, i as f64 * 10.0, Fail))
            .collect();
        history.push(op("a", Write, Some(1), 500.0, Ok));
        history.push(final_read(900.0, &[]));
        let verdict = check(&history, SEAT);
        let lost = &verdict.violations[0];
        assert_eq!(lost.kind, "lost_write");
        assert!(lost.ops.len() <= AROUND);
        assert!(lost.ops.iter().any(|o| o.holder == "a"));
    }
}
