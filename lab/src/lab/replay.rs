//! The model's counterexamples, replayed on real servers (`GET /lab/replay`). The model
//! (`model/`, crate `seatlock-model`) switches one article step off at a time and finds a
//! shortest trace that breaks a property ([`seatlock_model::switched_off`],
//! [`seatlock_model::counterexample`]). Here each of the trace's actions is made a real
//! operation, by the lab's own code paths, on a Redis primary and replica of the lab's
//! own ([`OwnRedis`]) and on the seat's row in Postgres; after each, what both sides can
//! observe is compared, and the model's own properties judge the real run too.
//!
//! **The mapping** (docs/race-lab.md, "The model's counterexamples, replayed"):
//! - `Acquire` that answers "needs a block": nothing is sent. The lease crate reserves
//!   and installs a block only inside a grant (`Fence::replenish` in lease/src/fence.rs
//!   is crate-private, and so are its scripts), so the install happens at `Install`.
//! - `Install`: a real grant of a side name of the same lease group ([`INSTALL_NAME`]),
//!   released at once. The grant asks for a block, reserves it in the ledger and installs
//!   it with raise_ceiling.lua, as the model's install does, and takes one token of it,
//!   which no holder of the model gets (the real tokens are offset; only their order and
//!   equality are compared).
//! - `Acquire` that grants: [`lease::LeaseStore::acquire`] on the current primary.
//! - `Write`: [`queries::write_seat`] under the protocol's rule (fenced: today's
//!   `fence_token <= $token`; off: unconditional).
//! - `Release`: release.lua with the owner check, [`unsafe_ops::delete_unchecked`]
//!   without.
//! - `Expire`: [`unsafe_ops::lapse`] (lapse.lua) on the primary and the replica.
//! - `Replicate`: [`OwnRedis::copy_from`]; `Failover`: the clients switch to the replica
//!   and the old primary is dropped (killed), a new replica copied from the new primary;
//!   `RestartEmpty`: [`OwnRedis::restart_empty`] of both, as the model empties both.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use lease::{Lease, LeaseError, LeaseKey, LeaseStore, RedisStore};
use seatlock::state::AppState;
use seatlock_model::{
    Action as ModelAction, Fence, Guard, HolderId, LeaseId, Phase, Protocol as Model, Standing,
    State, SwitchedOff, Write,
};

use super::own_redis::OwnRedis;
use super::run::{connect_to, lease_client_on, lock_key};
use super::simulated::Protocol;
use super::{SERVERS, Side, Step, queries, unsafe_ops};

/// Why a counterexample has no real code path to replay, by its model's switches.
pub(super) const PLAIN_MARKERS_NOT_REPLAYABLE: &str = "The real scripts always name the server a reservation marker was written on (acquire.lua writes it, raise_ceiling.lua refuses a marker of another server): there is no real code path with plain markers to replay.";

/// The side name whose grant installs a block at the model's `Install` (a name of the
/// lease group other than the seat's, so the seat's lease key is untouched).
pub(super) const INSTALL_NAME: &str = "install-block";

/// A grant's TTL in a replay: long enough that only the model's `Expire` ends a lease.
const REPLAY_LEASE_TTL: Duration = Duration::from_secs(600);

/// Replays at once, process-wide: each starts two or three Redis servers. A replay asked
/// for past it is refused (503), not queued: a crowd would otherwise wait in line for
/// minutes (found by a hostile test).
pub(super) static REPLAYS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// The lab's protocol for the model's switches, or why there is no real code path. The
/// lab's [`Step`]s switch one article step off ([`Protocol::of`]); the failover guard
/// alone is switched off by [`Protocol::without_failover_guard`]. The model's default
/// fence (an equal token refused from another holder) is the lab's fenced write, which
/// accepts an equal token from anybody (today's SQL): the two differ only on an equal
/// token from another holder, which the agreement check would show.
pub(super) fn lab_protocol(model: &Model) -> Result<Protocol, &'static str> {
    if model.failover_guard == Guard::StampPlainMarkers {
        return Err(PLAIN_MARKERS_NOT_REPLAYABLE);
    }
    let off: Vec<Step> = [
        (!model.owner_check, Step::OwnerCheck),
        (model.fence == Fence::Off, Step::Fencing),
        (!model.durable_ledger, Step::Ledger),
    ]
    .into_iter()
    .filter_map(|(off, step)| off.then_some(step))
    .collect();
    let protocol = match off[..] {
        [] => Protocol::of(Step::Fencing, Side::On),
        [step] => Protocol::of(step, Side::Off),
        _ => return Err("The lab switches one article step off at a time."),
    };
    Ok(match model.failover_guard {
        Guard::Off => protocol.without_failover_guard(),
        _ => protocol,
    })
}

/// One step of a replay, both sides after it.
pub(super) struct ReplayStep {
    /// The model's action (`Acquire(A)`, `Failover`, …).
    pub action: String,
    /// What the real run did for it, in words.
    pub real_did: String,
    /// The model's state after it ([`State`]'s one line).
    pub model: String,
    /// What the real run showed after it, in words.
    pub real: String,
    /// Whether every observation agrees.
    pub agree: bool,
    /// The properties the model's state breaks ([`Model::broken`]).
    pub model_broken: Vec<&'static str>,
    /// The properties the real run's observations break, by the same judge.
    pub real_broken: Vec<&'static str>,
}

/// A replay: the counterexample, each step on both sides, and the verdict.
pub(super) struct Replayed {
    /// The lab run whose seat row (`lab_seats`, side `off`) the real writes went to.
    pub run_id: i64,
    /// States the model's search visited.
    pub states_explored: usize,
    /// The model's initial state.
    pub start_model: String,
    /// What the real run showed before its first step.
    pub start_real: String,
    /// Each step, both sides after it.
    pub steps: Vec<ReplayStep>,
    /// The same properties fail first at the same steps on both sides, the listed one
    /// among them at the last step, and every step's observation agrees.
    pub agree: bool,
    /// The verdict in words.
    pub verdict: String,
}

/// Replays the counterexample of `entry` on servers of `binary` (`--lab-redis-server`),
/// holding one of [`REPLAYS`]' permits (the caller's).
/// Errors: no counterexample (a model that keeps its property), no real code path
/// ([`lab_protocol`]'s why), a server that does not start, a store that fails.
pub(super) async fn replay(
    state: &AppState,
    binary: &str,
    entry: &SwitchedOff,
) -> anyhow::Result<Replayed> {
    let protocol = lab_protocol(&entry.model).map_err(anyhow::Error::msg)?;
    let (model, property) = (entry.model.clone(), entry.property);
    // The search takes milliseconds, on a thread that may block.
    let found =
        tokio::task::spawn_blocking(move || seatlock_model::counterexample(&model, property))
            .await?
            .with_context(|| format!("the model has no counterexample to \"{property}\""))?;
    let run_id = queries::create_replay_run(&state.db, entry.slug).await?;
    let key = lock_key(state, run_id, Side::Off);
    let mut real = Real::start(&entry.model, state, binary, protocol, run_id, key.clone()).await?;
    let played = real.play(&entry.model, &found).await;
    // The ledger's row of this one-off group goes whatever happened; the servers die
    // with `real`.
    drop(real);
    queries::forget_fence_ceiling(&state.db, key.group()).await?;
    let (start_real, steps) = played?;
    let (agree, verdict) = judge(&steps, property);
    Ok(Replayed {
        run_id,
        states_explored: found.states_explored,
        start_model: entry.model.start().to_string(),
        start_real,
        steps,
        agree,
        verdict,
    })
}

/// The verdict on a replay's `steps`, and in words: they agree when every step's
/// observation agrees and each property fails first at the same step on both sides,
/// `property` (the listed one) at the last.
fn judge(steps: &[ReplayStep], property: &'static str) -> (bool, String) {
    // Each property broken, with the first step (from 1) that breaks it.
    let first = |broken: fn(&ReplayStep) -> &Vec<&'static str>| {
        let mut first: Vec<(&'static str, usize)> = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            for name in broken(step) {
                if !first.iter().any(|(n, _)| n == name) {
                    first.push((name, i + 1));
                }
            }
        }
        first
    };
    let (model_first, real_first) = (first(|s| &s.model_broken), first(|s| &s.real_broken));
    let every_step = steps.iter().all(|s| s.agree);
    let reproduced = real_first.contains(&(property, steps.len()));
    let agree = every_step && reproduced && model_first == real_first;
    let said = |first: &[(&str, usize)]| {
        let list: Vec<String> = first
            .iter()
            .map(|(name, at)| format!("\u{201c}{name}\u{201d} at step {at}"))
            .collect();
        if list.is_empty() {
            "no property fails".to_string()
        } else {
            list.join(", ")
        }
    };
    let verdict = if agree {
        let others: Vec<(&str, usize)> = model_first
            .iter()
            .filter(|(name, _)| *name != property)
            .copied()
            .collect();
        let too = match others[..] {
            [] => String::new(),
            _ => format!(" ({} too)", said(&others)),
        };
        format!(
            "They agree. On both sides \u{201c}{property}\u{201d} fails first at step {}, the last{too}, and every step's observation agrees.",
            steps.len()
        )
    } else {
        let steps_words = match steps.iter().position(|s| !s.agree) {
            Some(i) => format!("the observations first disagree after step {}", i + 1),
            None => "every step's observation agrees".into(),
        };
        format!(
            "They disagree. In the model {}; in the real run {}; {steps_words}.",
            said(&model_first),
            said(&real_first)
        )
    };
    (agree, verdict)
}

/// The real side of a replay: the servers, the clients' protocol, and what the run
/// showed so far in the model's terms (a [`State`] with the fields the properties read:
/// the holders, the primary's lease key, the grants and the seat row's writes).
struct Real<'a> {
    state: &'a AppState,
    binary: &'a str,
    protocol: Protocol,
    run_id: i64,
    key: LeaseKey,
    primary: OwnRedis,
    replica: OwnRedis,
    /// Each holder's real lease, by the model's holder number.
    leases: HashMap<HolderId, Lease>,
    /// Owner token → the model's name of that grant.
    owners: HashMap<String, LeaseId>,
    /// Whether a failover happened (a grant after it is marked so, as in the model).
    failed_over: bool,
    seen: State,
}

impl<'a> Real<'a> {
    async fn start(
        model: &Model,
        state: &'a AppState,
        binary: &'a str,
        protocol: Protocol,
        run_id: i64,
        key: LeaseKey,
    ) -> anyhow::Result<Real<'a>> {
        let (primary, replica) =
            tokio::try_join!(OwnRedis::start(binary), OwnRedis::start(binary))?;
        Ok(Real {
            state,
            binary,
            protocol,
            run_id,
            key,
            primary,
            replica,
            leases: HashMap::new(),
            owners: HashMap::new(),
            failed_over: false,
            seen: model.start(),
        })
    }

    /// Takes every step of `found` on the real servers; returns the real start's words
    /// and each step, both sides.
    async fn play(
        &mut self,
        model: &Model,
        found: &seatlock_model::Counterexample,
    ) -> anyhow::Result<(String, Vec<ReplayStep>)> {
        let steps = found.steps();
        let start_real = self.observe().await?;
        let mut played = Vec::new();
        for (_, action, after) in &steps {
            let real_did = self.take(*action, after).await?;
            let real = self.observe().await?;
            played.push(ReplayStep {
                action: format!("{action:?}"),
                real_did,
                model: after.to_string(),
                real,
                agree: agree(after, &self.seen),
                model_broken: model.broken(after),
                real_broken: model.broken(&self.seen),
            });
        }
        Ok((start_real, played))
    }

    /// A connection of its own to `server`.
    fn store(&self, server: &OwnRedis) -> anyhow::Result<RedisStore> {
        connect_to(self.state, &server.url())
    }

    /// A lease client on the current primary, as the lab's servers make theirs.
    fn client(&self) -> anyhow::Result<Arc<dyn LeaseStore>> {
        let ledger = Arc::new(self.store(&self.primary)?);
        Ok(lease_client_on(
            self.state,
            self.protocol,
            self.store(&self.primary)?,
            &ledger,
        ))
    }

    /// The real operation of the model's `action`; `after` is the model's state after it
    /// (only to tell an acquire that asks for a block from one that grants). Returns
    /// what was done, in words.
    async fn take(&mut self, action: ModelAction, after: &State) -> anyhow::Result<String> {
        Ok(match action {
            ModelAction::Acquire(h)
                if matches!(
                    after.holders[usize::from(h.0)].phase,
                    Phase::Installing { .. }
                ) =>
            {
                self.seen.holders[usize::from(h.0)].phase = Phase::Installing { ceiling: 0 };
                "nothing sent: the real grant reserves and installs its block itself (at Install)"
                    .into()
            }
            ModelAction::Acquire(h) => self.acquire(h).await?,
            ModelAction::Install(h) => {
                let client = self.client()?;
                let side_key = LeaseKey::new(self.key.group(), INSTALL_NAME)?;
                let lease = client.acquire(&side_key, name(h), REPLAY_LEASE_TTL).await?;
                client.release(&lease).await?;
                self.seen.holders[usize::from(h.0)].phase = Phase::Idle;
                format!(
                    "{} installed a block: its grant of {INSTALL_NAME} took token {} from it, released at once",
                    name(h),
                    lease.fencing_token().as_i64()
                )
            }
            ModelAction::Write(h) => self.write(h).await?,
            ModelAction::Release(h) => {
                let lease = self.leases.remove(&h).context("release without a lease")?;
                let deleted = if self.protocol.owner_check {
                    self.client()?.release(&lease).await?
                } else {
                    let store = self.store(&self.primary)?;
                    unsafe_ops::delete_unchecked(&store, &self.key)
                        .await?
                        .is_some()
                };
                self.seen.holders[usize::from(h.0)].phase = Phase::Idle;
                let how = if self.protocol.owner_check {
                    "release.lua (compare-and-delete)"
                } else {
                    "a plain DEL"
                };
                format!(
                    "{} released by {how}: {}",
                    name(h),
                    if deleted {
                        "a key deleted"
                    } else {
                        "nothing deleted"
                    }
                )
            }
            ModelAction::Expire(id) => {
                let owner = self
                    .owners
                    .iter()
                    .find_map(|(owner, of)| (*of == id).then(|| owner.clone()))
                    .context("a lapse of a lease never granted")?;
                let mut lapsed = Vec::new();
                for server in [&self.primary, &self.replica] {
                    let store = self.store(server)?;
                    lapsed.push(unsafe_ops::lapse(&store, &self.key, &owner).await?);
                }
                self.lapse(Standing::Expired, |lease| lease == id);
                format!("lapse.lua on the primary and the replica: {lapsed:?}")
            }
            ModelAction::Replicate => {
                self.replica.copy_from(&self.primary).await?;
                "the replica caught up with the primary (REPLICAOF, then REPLICAOF NO ONE)".into()
            }
            ModelAction::Failover => {
                let fresh = OwnRedis::start(self.binary).await?;
                let promoted = std::mem::replace(&mut self.replica, fresh);
                // The old primary is dropped: killed, and nobody talks to it again.
                drop(std::mem::replace(&mut self.primary, promoted));
                self.replica.copy_from(&self.primary).await?;
                self.failed_over = true;
                let kept = self.key_holder(&self.primary).await?;
                self.lapse(Standing::Lost, |lease| Some(lease) != kept);
                "the primary killed; the clients switch to the replica (a new replica copies it)"
                    .into()
            }
            ModelAction::RestartEmpty => {
                self.primary.restart_empty().await?;
                self.replica.restart_empty().await?;
                self.lapse(Standing::Lost, |_| true);
                "the primary and the replica killed and started again empty".into()
            }
        })
    }

    /// A real grant of the seat's lease to holder `h`.
    async fn acquire(&mut self, h: HolderId) -> anyhow::Result<String> {
        match self
            .client()?
            .acquire(&self.key, name(h), REPLAY_LEASE_TTL)
            .await
        {
            Ok(lease) => {
                let token = u32::try_from(lease.fencing_token().as_i64())?;
                let holder = &mut self.seen.holders[usize::from(h.0)];
                holder.grants += 1;
                let id = LeaseId {
                    holder: h,
                    grant: holder.grants,
                };
                holder.phase = Phase::Holding {
                    lease: id,
                    token,
                    wrote: false,
                    standing: Standing::Live,
                    after_failover: self.failed_over,
                };
                self.seen.granted.push((token, id));
                self.owners.insert(lease.owner().as_str().to_owned(), id);
                self.leases.insert(h, lease);
                Ok(format!("{} granted the lease, token {token}", name(h)))
            }
            Err(LeaseError::Held { holder, .. }) => Ok(format!(
                "{} refused: the lease is held by {holder}",
                name(h)
            )),
            Err(err) => Err(err.into()),
        }
    }

    /// A real write of the seat's row by holder `h` with its token, under the protocol's
    /// rule; accepted or refused as the row shows it after.
    async fn write(&mut self, h: HolderId) -> anyhow::Result<String> {
        let lease = self.leases.get(&h).context("a write without a lease")?;
        let token = lease.fencing_token().as_i64();
        let db = &self.state.db;
        let (_, _, sales_before) = queries::seat_row(db, self.run_id, Side::Off).await?;
        let rule = self.protocol.write_rule();
        let action =
            queries::write_seat(db, self.run_id, Side::Off, name(h), Some(token), rule).await?;
        let (_, _, sales_after) = queries::seat_row(db, self.run_id, Side::Off).await?;
        let Phase::Holding {
            wrote,
            after_failover,
            ..
        } = &mut self.seen.holders[usize::from(h.0)].phase
        else {
            anyhow::bail!("a write of a holder that holds nothing");
        };
        *wrote = true;
        let write = Write {
            holder: h,
            token: u32::try_from(token)?,
            after_failover: *after_failover,
        };
        let accepted = sales_after > sales_before;
        if accepted {
            self.seen.resource.accepted.push(write);
        } else {
            self.seen.resource.refused.push(write);
        }
        // The lab's table's words for the write and what the row did with it.
        Ok(format!(
            "{} {}: {}",
            name(h),
            action.did(),
            action.seat(name(h))
        ))
    }

    /// Ghost bookkeeping, as the model's: a live lease for which `ended` is true becomes
    /// `why`.
    fn lapse(&mut self, why: Standing, ended: impl Fn(LeaseId) -> bool) {
        for holder in &mut self.seen.holders {
            if let Phase::Holding {
                lease, standing, ..
            } = &mut holder.phase
                && *standing == Standing::Live
                && ended(*lease)
            {
                *standing = why;
            }
        }
    }

    /// The grant whose owner token the seat's lease key holds on `server`, if any.
    async fn key_holder(&self, server: &OwnRedis) -> anyhow::Result<Option<LeaseId>> {
        let lock = unsafe_ops::observe(&self.store(server)?, &self.key).await?;
        Ok(lock
            .owner
            .and_then(|owner| self.owners.get(&owner).copied()))
    }

    /// Reads what the real run shows now: the lease key and the fence counter on both
    /// servers, and the seat's row; keeps the primary's key holder in `seen`. In words.
    async fn observe(&mut self) -> anyhow::Result<String> {
        let mut servers = Vec::new();
        for server in [&self.primary, &self.replica] {
            let lock = unsafe_ops::observe(&self.store(server)?, &self.key).await?;
            let holder = match &lock.owner {
                None => Ok(None),
                Some(owner) => self.owners.get(owner).copied().map(Some).ok_or(()),
            };
            let key = match holder {
                Ok(None) => "no lease".to_string(),
                Ok(Some(id)) => format!("lease {id:?}"),
                Err(()) => "a lease nobody was granted".to_string(),
            };
            let counter = lock
                .counter
                .map_or("no counter".into(), |c| format!("counter {c}"));
            servers.push((holder, format!("{{{key}, {counter}}}")));
        }
        let (primary_holder, primary_words) = servers.remove(0);
        let (_, replica_words) = servers.remove(0);
        // A key nobody was granted cannot be named in the model's terms: it shows as
        // "no lease" to the properties, and as a disagreement in the words.
        self.seen.primary.lease = primary_holder.unwrap_or(None);
        let (sold_to, highest, sales) =
            queries::seat_row(&self.state.db, self.run_id, Side::Off).await?;
        let grants: Vec<String> = self
            .seen
            .granted
            .iter()
            .map(|(token, id)| format!("{id:?}:{token}"))
            .collect();
        // Written as the model writes its own (`Write`'s Display).
        let writes = |writes: &[Write]| {
            let list: Vec<String> = writes.iter().map(Write::to_string).collect();
            list.join(" ")
        };
        Ok(format!(
            "primary {primary_words}; replica {replica_words}; grants [{}]; seat row: sold to {}, highest token {highest}, sales {sales}; accepted [{}] refused [{}]",
            grants.join(" "),
            sold_to.as_deref().unwrap_or("nobody"),
            writes(&self.seen.resource.accepted),
            writes(&self.seen.resource.refused),
        ))
    }
}

/// The holder's name in the lab: A, B, C.
fn name(h: HolderId) -> &'static str {
    SERVERS[usize::from(h.0)]
}

/// Whether what both sides can observe agrees: who holds the lease key on the primary;
/// the grants, by whom and in what order; the seat row's accepted and refused writes, by
/// whom; and every token against every other (the real ones are the ledger's, offset
/// from the model's 1, 2, …: their order and equality are compared, not their values).
fn agree(model: &State, real: &State) -> bool {
    let leases = |s: &State| s.granted.iter().map(|(_, id)| *id).collect::<Vec<_>>();
    let writers = |w: &[Write]| w.iter().map(|w| w.holder).collect::<Vec<_>>();
    let tokens = |s: &State| {
        let granted = s.granted.iter().map(|(t, _)| *t);
        let written = s.resource.accepted.iter().chain(&s.resource.refused);
        granted
            .chain(written.map(|w| w.token))
            .collect::<Vec<u32>>()
    };
    let (m, r) = (tokens(model), tokens(real));
    let same_order = m.len() == r.len()
        && (0..m.len()).all(|i| (0..m.len()).all(|j| m[i].cmp(&m[j]) == r[i].cmp(&r[j])));
    model.primary.lease == real.primary.lease
        && leases(model) == leases(real)
        && writers(&model.resource.accepted) == writers(&real.resource.accepted)
        && writers(&model.resource.refused) == writers(&real.resource.refused)
        && same_order
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every listed counterexample maps to the lab's protocol with the same switches,
    /// but the plain markers, which no real script has.
    #[test]
    fn each_model_maps_to_the_labs_protocol_with_its_step_off() {
        for entry in seatlock_model::switched_off() {
            let model = &entry.model;
            match lab_protocol(model) {
                Err(why) => {
                    assert_eq!(model.failover_guard, Guard::StampPlainMarkers, "{why}");
                }
                Ok(protocol) => {
                    assert_eq!(protocol.owner_check, model.owner_check, "{}", entry.slug);
                    assert_eq!(
                        protocol.write_rule() == super::super::check::WriteRule::Unconditional,
                        model.fence == Fence::Off,
                        "{}",
                        entry.slug
                    );
                    assert_eq!(
                        protocol.durable_tokens, model.durable_ledger,
                        "{}",
                        entry.slug
                    );
                    assert_eq!(
                        protocol.failover_guard,
                        model.durable_ledger && model.failover_guard == Guard::Stamp,
                        "{}",
                        entry.slug
                    );
                }
            }
        }
    }

    fn granted(tokens: &[(u32, u8)]) -> State {
        let mut state = Model::new(2, 1, 0, 0).start();
        state.granted = tokens
            .iter()
            .map(|(t, h)| {
                let holder = HolderId(*h);
                (*t, LeaseId { holder, grant: 1 })
            })
            .collect();
        state
    }

    /// Tokens agree by order and equality, whatever their offset; a repeat on one side
    /// only is a disagreement.
    #[test]
    fn tokens_are_compared_by_order_and_equality_not_value() {
        assert!(agree(
            &granted(&[(1, 0), (1, 1)]),
            &granted(&[(10002, 0), (10002, 1)])
        ));
        assert!(agree(
            &granted(&[(1, 0), (2, 1)]),
            &granted(&[(7, 0), (30001, 1)])
        ));
        assert!(!agree(
            &granted(&[(1, 0), (1, 1)]),
            &granted(&[(10002, 0), (10003, 1)])
        ));
        assert!(!agree(
            &granted(&[(1, 0), (2, 1)]),
            &granted(&[(2, 0), (1, 1)])
        ));
        assert!(!agree(
            &granted(&[(1, 0), (2, 1)]),
            &granted(&[(1, 1), (2, 0)])
        ));
    }

    /// The verdict: the same properties fail first at the same steps on both sides, the
    /// listed one at the last, and every step agrees; else it says where they part.
    #[test]
    fn the_verdict_needs_the_same_first_failures_and_every_step_agreeing() {
        use seatlock_model::{ONE_HOLDER_PER_TOKEN, TOKENS_GROW};
        let step = |agree, model: &[&'static str], real: &[&'static str]| ReplayStep {
            action: String::new(),
            real_did: String::new(),
            model: String::new(),
            real: String::new(),
            agree,
            model_broken: model.to_vec(),
            real_broken: real.to_vec(),
        };
        let (p, q) = (TOKENS_GROW, ONE_HOLDER_PER_TOKEN);
        let (agree, words) = judge(&[step(true, &[], &[]), step(true, &[p], &[p])], p);
        assert!(agree && words.starts_with("They agree."), "{words}");
        // The real run keeps the property.
        let (agree, words) = judge(&[step(true, &[], &[]), step(true, &[p], &[])], p);
        assert!(
            !agree && words.contains("in the real run no property fails"),
            "{words}"
        );
        // The same property, first broken a step earlier on one side.
        assert!(!judge(&[step(true, &[p], &[]), step(true, &[p, q], &[p, q])], q).0);
        // A step whose observations disagree.
        let (agree, words) = judge(&[step(false, &[], &[]), step(true, &[p], &[p])], p);
        assert!(
            !agree && words.contains("first disagree after step 1"),
            "{words}"
        );
    }
}
