//! The lease protocol, model-checked: with every article step on, every property holds;
//! with one step off, the checker finds the counterexample, and the test checks its
//! shape. Each test prints the states explored, the time taken and the trace
//! (`cargo test -p seatlock-model -- --nocapture`).
//!
//! Bounds: two holders with one grant each, blocks of two tokens, at most one failover
//! and one empty restart. A test that switches a step off uses the same bounds or fewer
//! faults, so the check with everything on covers every trace it finds.

use std::time::Instant;

use seatlock_model::{
    Action, Counterexample, Fence, HolderId, LATE_WRITE_REFUSED, LOST_LEASE_REGRANTED, LeaseId,
    ONE_HOLDER_PER_TOKEN, Phase, Protocol, Standing, State, SwitchedOff, TOKEN_ORDER, TOKENS_GROW,
    WRITE_AFTER_FAILOVER, switched_off,
};
use stateright::{Checker, Model};

/// Explores every reachable state of `model` breadth first.
fn check_all(name: &str, model: Protocol) -> impl Checker<Protocol> {
    let started = Instant::now();
    let checker = model.checker().spawn_bfs().join();
    println!(
        "{name}: {} states ({} unique), depth {}, checked in {:.0?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    assert!(checker.is_done(), "{name}: the search was not exhaustive");
    checker
}

/// The shortest counterexample of the listed step switched off named `slug`
/// ([`seatlock_model::counterexample`]), printed step by step; and its model.
fn counterexample(slug: &str) -> (Counterexample, Protocol) {
    let SwitchedOff {
        title,
        model,
        property,
        ..
    } = switched_off()
        .into_iter()
        .find(|s| s.slug == slug)
        .expect("a listed step");
    let started = Instant::now();
    let found = seatlock_model::counterexample(&model, property)
        .unwrap_or_else(|| panic!("{title}: no counterexample to \"{property}\""));
    println!(
        "{title}: \"{property}\" fails after {} steps ({} states explored in {:.0?}):",
        found.trace.clone().into_actions().len(),
        found.states_explored,
        started.elapsed()
    );
    for (state, action) in found.trace.clone().into_vec() {
        println!("    {state}");
        if let Some(action) = action {
            println!("  {action:?}");
        }
    }
    (found, model)
}

/// The holder's lease and token, if it is holding.
fn holding(state: &State, holder: HolderId) -> Option<(LeaseId, u32, Standing)> {
    match state.holders[usize::from(holder.0)].phase {
        Phase::Holding {
            lease,
            token,
            standing,
            ..
        } => Some((lease, token, standing)),
        _ => None,
    }
}

/// Everything on: two holders, one failover and one empty restart. Every `always`
/// property holds in every reachable state, and a holder granted after a failover does
/// get a write accepted (so the properties are not true of a model that does nothing).
/// The failover still grants a lost lease twice (asynchronous replication); the fence is
/// what keeps the resource safe.
#[test]
fn with_every_step_on_every_property_holds_and_a_write_is_accepted_after_a_failover() {
    let checker = check_all("everything on", Protocol::new(2, 1, 1, 1));
    checker.assert_properties();
    let example = checker.assert_any_discovery(WRITE_AFTER_FAILOVER);
    let actions = example.clone().into_actions();
    let failover = actions.iter().position(|a| *a == Action::Failover);
    let write = actions.iter().rposition(|a| matches!(a, Action::Write(_)));
    assert!(
        matches!((failover, write), (Some(f), Some(w)) if f < w),
        "a write after the failover: {actions:?}"
    );
    assert!(
        example
            .last_state()
            .resource
            .accepted
            .iter()
            .any(|w| w.after_failover)
    );
    checker.assert_any_discovery(LATE_WRITE_REFUSED);

    // The known non-promise is reachable too: Redis loses a live lease and grants it
    // again while its first holder still holds it in its own eyes.
    let regrant = checker.assert_any_discovery(LOST_LEASE_REGRANTED);
    let actions = regrant.clone().into_actions();
    assert!(
        actions.contains(&Action::Failover) || actions.contains(&Action::RestartEmpty),
        "Redis lost it: {actions:?}"
    );
}

/// Step 3 off (release is a plain `DEL`): a holder whose lease lapsed while it paused
/// releases, and deletes the live lease of the holder granted after it. With the fence
/// on, the resource is still safe: every resource property holds.
#[test]
fn without_the_owner_check_a_paused_holder_deletes_the_next_holders_lease() {
    let (found, model) = counterexample("owner-check");
    let steps = found.steps();
    let (before, last, after) = steps.last().unwrap();
    let Action::Release(stale) = *last else {
        panic!("ends with a release, not {last:?}")
    };
    let (lease, _, standing) = holding(before, stale).expect("the releaser was holding");
    assert_eq!(
        standing,
        Standing::Expired,
        "the releaser's own lease had lapsed"
    );
    assert!(
        steps.iter().any(|(_, a, _)| *a == Action::Expire(lease)),
        "it lapsed while its holder paused"
    );
    let taken = before
        .primary
        .lease
        .expect("someone else's lease was there");
    assert_ne!(taken.holder, stale);
    assert_eq!(after.primary.lease, None, "the release deleted it");
    assert_eq!(
        holding(after, taken.holder).map(|h| h.2),
        Some(Standing::Live),
        "the holder it was taken from still holds it"
    );

    let checker = check_all("no owner check, all traces", model);
    for property in [TOKEN_ORDER, ONE_HOLDER_PER_TOKEN, TOKENS_GROW] {
        checker.assert_no_discovery(property);
    }
}

/// Step 4 off (the resource accepts every write): a holder pauses past its lease, the
/// next holder writes with a higher token, and the paused holder's late write with the
/// lower token is accepted after it.
#[test]
fn without_the_fence_a_paused_holders_late_write_is_accepted_out_of_token_order() {
    let (found, model) = counterexample("fence");
    assert_eq!(model.fence, Fence::Off);
    let steps = found.steps();
    let (before, last, after) = steps.last().unwrap();
    let Action::Write(stale) = *last else {
        panic!("ends with a write, not {last:?}")
    };
    let (lease, token, standing) = holding(before, stale).expect("the writer was holding");
    assert_eq!(
        standing,
        Standing::Expired,
        "the late writer's lease had lapsed"
    );
    assert!(steps.iter().any(|(_, a, _)| *a == Action::Expire(lease)));
    let accepted = &after.resource.accepted;
    assert_eq!(accepted.len(), 2);
    assert_ne!(accepted[0].holder, stale);
    assert!(accepted[0].token > token, "the newer holder wrote first");
    assert_eq!((accepted[1].holder, accepted[1].token), (stale, token));
}

/// Step 5 off (no durable ledger: tokens come from the Redis counter alone): Redis
/// restarts empty and the next grant repeats a token already granted. The fence that
/// refuses an equal token from another holder keeps the resource safe all the same.
#[test]
fn without_the_durable_ledger_a_token_repeats_after_redis_restarts_empty() {
    let (found, model) = counterexample("durable-ledger");
    let steps = found.steps();
    let restart = steps
        .iter()
        .position(|(_, a, _)| *a == Action::RestartEmpty)
        .expect("Redis restarted empty");
    let (before, last, after) = steps.last().unwrap();
    let Action::Acquire(second) = *last else {
        panic!("ends with a grant, not {last:?}")
    };
    let (_, token, _) = holding(after, second).expect("granted");
    assert!(
        before.granted.iter().any(|(t, _)| *t == token),
        "token {token} was granted before"
    );
    assert!(
        steps[..restart]
            .iter()
            .any(|(_, _, s)| s.granted.iter().any(|(t, _)| *t == token)),
        "the first grant of {token} came before the restart"
    );

    let checker = check_all("no durable ledger, all traces", model);
    for property in [TOKEN_ORDER, ONE_HOLDER_PER_TOKEN] {
        checker.assert_no_discovery(property);
    }
}

/// Step 5's failover guard off (the lab's `--lab-disable-failover-guard`): the primary
/// grants a token, fails over before the replica saw it, and the promoted replica grants
/// the same token again from its older counter (token 41, twice). The durable ledger
/// alone does not help: the replica's ceiling is still ahead of its counter. The refusing
/// fence keeps the resource safe all the same.
#[test]
fn without_the_failover_guard_a_promoted_replica_repeats_a_token() {
    let (found, model) = counterexample("failover-guard");
    let steps = found.steps();
    let (before_failover, _, _) = steps
        .iter()
        .find(|(_, a, _)| *a == Action::Failover)
        .expect("a failover");
    assert!(
        before_failover.replica.counter < before_failover.primary.counter,
        "the replica was behind when it was promoted"
    );
    let (before, last, after) = steps.last().unwrap();
    let Action::Acquire(second) = *last else {
        panic!("ends with a grant, not {last:?}")
    };
    let (_, token, _) = holding(after, second).expect("granted");
    assert!(before.granted.iter().any(|(t, _)| *t == token));
    assert!(
        token <= after.primary.ceiling,
        "granted from the old block, without asking the ledger"
    );

    let checker = check_all("no failover guard, all traces", model);
    for property in [TOKEN_ORDER, ONE_HOLDER_PER_TOKEN] {
        checker.assert_no_discovery(property);
    }
}

/// The equal-token decision. Without the failover guard, today's fence
/// (`fence_token <= $token`, [`Fence::AcceptEqual`]) accepts the repeated token from a
/// second holder: two holders' writes under one token, which a resource written more
/// than once (a high bid) cannot tell apart.
#[test]
fn without_the_guard_todays_fence_accepts_one_token_from_two_holders() {
    let (found, model) = counterexample("failover-guard-todays-fence");
    assert_eq!(model.fence, Fence::AcceptEqual);
    let trace = found.trace;
    let actions = trace.clone().into_actions();
    assert!(actions.contains(&Action::Failover), "{actions:?}");
    let accepted = &trace.last_state().resource.accepted;
    assert_eq!(accepted.len(), 2);
    assert_eq!(accepted[0].token, accepted[1].token);
    assert_ne!(accepted[0].holder, accepted[1].holder);
}

/// With the guard, tokens never repeat, so today's fence (accepting equal tokens) is
/// safe too: refusing an equal token from another holder is a second line of defence,
/// which never fires while the lock service keeps its promise.
#[test]
fn with_the_guard_todays_fence_accepting_equal_tokens_keeps_every_property() {
    let model = Protocol::new(2, 1, 1, 1).with_fence(Fence::AcceptEqual);
    check_all("everything on, today's fence", model).assert_properties();
}

/// A guard whose reservation markers do not name their server (today's markers) lets a
/// token repeat: a holder's marker reaches the replica, the old primary installs a newer
/// block and grants from it, then fails over before the replica saw the grant; on the
/// promoted replica the holder installs its older block under the old marker, which
/// stamps the new server without moving the counter, and the next grant repeats the
/// token. (Stamping only when the ceiling rose turns the repeat into a token that goes
/// backwards; [`TOKENS_GROW`] catches both.) The marker must record its server.
#[test]
fn a_guard_with_markers_that_do_not_name_their_server_repeats_a_token() {
    let (found, _) = counterexample("plain-markers");
    let steps = found.steps();
    let failover = steps
        .iter()
        .position(|(_, a, _)| *a == Action::Failover)
        .expect("a failover");
    let (before, last, after) = steps.last().unwrap();
    let Action::Acquire(late) = *last else {
        panic!("ends with a grant, not {last:?}")
    };
    let (_, token, _) = holding(after, late).expect("granted");
    assert!(
        before.granted.iter().any(|(t, _)| *t >= token),
        "token {token} or a higher one was granted before"
    );
    let stale_install = steps[failover..].iter().any(|(before, action, _)| {
        matches!(action, Action::Install(h)
            if before.primary.markers.get(h).is_some_and(|on| *on != before.server))
    });
    assert!(
        stale_install,
        "after the failover, a block was installed under a marker written on the old primary"
    );
}
