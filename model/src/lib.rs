//! # seatlock-model: the lease protocol, model-checked
//!
//! A small [`stateright`] model of the protocol that the `lease` crate and the app
//! implement (the article's five steps). The checker explores every
//! interleaving of a few holders, a Redis primary with an asynchronous replica
//! that can fail over or restart empty, the durable fence ledger, and one fenced
//! resource, and checks the article's invariant in every reachable state: *writes
//! accepted by the resource come from at most one holder at a time, in token order*.
//! Each article step is a switch of [`Protocol`]; [`switched_off`] lists one model per
//! step switched off, [`counterexample`] finds its shortest counterexample, and the tests
//! in `model/tests/protocol.rs` assert each one's shape. The lab replays them on real
//! Redis servers (`GET /lab/replay`, docs/race-lab.md, "The model's counterexamples, replayed").
//!
//! ## Actors and their state ([`State`])
//!
//! * **Holders** ([`Holder`]), each allowed a bounded number of grants: idle; asking for
//!   the lease ([`Action::Acquire`]); when the group is out of tokens, installing a block
//!   reserved in the ledger ([`Phase::Installing`], [`Action::Install`]); holding the
//!   lease with a fencing token ([`Phase::Holding`]), writing to the resource once
//!   ([`Action::Write`]) and releasing ([`Action::Release`]). A holder may pause at any
//!   point for as long as it likes: the checker simply runs its next step later, after
//!   its lease lapsed ([`Action::Expire`]) or Redis failed over.
//! * **The lease service**: the Redis primary and its replica, each a [`Store`] holding
//!   the lease key with its owner, the fence hash (`counter`, `ceiling`, and the failover
//!   guard's `stamp`: the server that installed the block) and the reservation markers.
//!   The replica is a copy of the primary taken at some earlier moment
//!   ([`Action::Replicate`] brings it up to date): asynchronous replication. The primary
//!   can [fail over](Action::Failover) (the replica, possibly behind, is promoted) or
//!   [restart empty](Action::RestartEmpty). Each fault makes a new server id
//!   ([`State::server`]): Redis's `run_id` changes on every start, `master_replid` on
//!   every promotion.
//! * **The ledger** ([`State::ledger`]): the ceiling kept in Postgres. Reserving a block
//!   adds the block size and returns the new ceiling; no Redis fault touches it.
//! * **The resource** ([`Resource`]): the protected row. It keeps the highest fencing
//!   token it accepted and who wrote it, and the accepted and refused writes in order.
//!
//! The model starts cold (no fence hash, no ledger row), as a new lease group does, so
//! the first grant already goes through the ledger.
//!
//! ## Properties
//!
//! | name | kind | promise |
//! |---|---|---|
//! | [`LEASE_KEPT`] | always | steps 1–3: while a lease is live (its TTL has not passed, its owner has not released it, Redis has not lost it in a failover or restart), the lease key is its holder's, so nobody else can be granted |
//! | [`TOKENS_GROW`] | always | steps 4–5: every grant's fencing token is above every token granted before it, whatever Redis does (so none repeats) |
//! | [`TOKEN_ORDER`] | always | the resource accepts writes in token order |
//! | [`ONE_HOLDER_PER_TOKEN`] | always | the resource never accepts one token from two holders |
//! | [`LOST_LEASE_REGRANTED`] | sometimes | the known non-promise: a failover (or an empty restart) loses a live lease and grants it to another holder while the first still holds it in its own eyes; the fence must keep the resource safe |
//! | [`WRITE_AFTER_FAILOVER`] | sometimes | a holder granted after a failover writes and is accepted (the model is not vacuous) |
//! | [`LATE_WRITE_REFUSED`] | sometimes | the fence refuses a write |
//!
//! [`TOKEN_ORDER`] and [`ONE_HOLDER_PER_TOKEN`] together are the article's invariant:
//! accepted tokens never decrease and each one belongs to one holder, so the accepted
//! writes form runs, one holder at a time, in token order. The first two are the lease
//! service's own promises. A failover can lose a live lease (asynchronous replication:
//! the article's step 5 and the non-promises of `docs/guarantees.md`), so the model counts a lease lost
//! with Redis as no longer live; the fencing token is what must keep the resource safe
//! then.
//!
//! ## Equal tokens: the fence refuses one from a different holder
//!
//! Today's statements (`fence_token <= $token` in `src/seats/queries.rs` and
//! `src/auction/queries.rs`) accept a token *equal* to the highest one from anybody
//! ([`Fence::AcceptEqual`]). This model's default is [`Fence::RefuseEqualFromOther`]: the
//! resource records who wrote its highest token and refuses the same token from a
//! different holder (the same holder's retry is still accepted, so idempotent writes stay
//! idempotent). Why: with the ledger and the failover guard, tokens never repeat, so in a
//! healthy system the rule never fires; an equal token from someone else is proof that
//! the lock service granted one token twice (a failover to a replica that was behind),
//! and accepting it lets two holders write under one token, interleaved. Refusing it turns
//! that safety failure into a refused write (the valid holder must acquire again), the
//! right trade for a resource written more than once (the auction's high bid, the
//! closer). The checker shows both sides: without the failover guard, today's fence
//! accepts one token from two holders; the refusing fence keeps the resource safe, and
//! only the service's own promise ([`TOKENS_GROW`]) fails.
//!
//! ## How it maps to the real code
//!
//! | model | real code |
//! |---|---|
//! | [`Action::Acquire`] | `lease/src/scripts/acquire.lua`: `SET key owner NX PX ttl`, then `HINCRBY counter`; with `counter >= ceiling` it only writes a reservation marker and answers "needs a block", and the client (`Fence::replenish` in `lease/src/fence.rs`) reserves one with `FenceLedger::raise_ceiling`, backed by `src/ledger.rs` (`INSERT … ON CONFLICT DO UPDATE SET ceiling = ceiling + block RETURNING ceiling`) |
//! | [`Action::Install`] | `lease/src/scripts/raise_ceiling.lua`: refused if the marker is gone (Redis lost its data since); else raises the ceiling and moves the counter up to the block's start. A marker copied to the replica before a failover is not gone: see [`Guard::StampPlainMarkers`] |
//! | [`Action::Release`] | `lease/src/scripts/release.lua`: compare-and-delete on the owner token |
//! | [`Action::Write`] | the fenced statements: `sell` in `src/seats/queries.rs`, `place_bid` and `close_item` in `src/auction/queries.rs` |
//! | [`Action::Expire`] | the key's `PX` TTL on Redis's clock, while its holder paused (GC, `SIGSTOP`, a slow network) |
//! | [`Action::Replicate`], [`Action::Failover`] | Redis's asynchronous replication; Sentinel promoting the replica (`../shared/notes/failover-and-etcd.md`) |
//! | [`Action::RestartEmpty`] | a Redis restart without persistence (the fault tests in `tests/faults/`) |
//! | [`Guard::Stamp`] | the scripts' failover guard, on unless the lab turns it off (`--lab-disable-failover-guard`): raise_ceiling.lua stamps the fence hash with the server (`run_id` and `master_replid`, which `INFO` gives a script: a restart changes the first, a promotion the second, and a former primary promoted again keeps its `run_id`) and acquire.lua asks for a fresh block when the stamp names another server; the reservation marker's value is the server it was written on, and raise_ceiling.lua refuses a marker written on another server |
//!
//! ## What is abstracted away
//!
//! Time: a lease lapses by an [`Action::Expire`] event; there are no lease lengths,
//! renewals or clocks. Owner tokens: a grant's [`LeaseId`]. The holders hash and pub/sub
//! events. The reservation marker's own TTL. The acquire's "needs a block" answer and the
//! ledger reservation are one step, so blocks are reserved in the order their markers
//! were written (with the designed guard a marker counts only on the server it was
//! written on, which makes that order irrelevant). The confirm's second owner check before `COMMIT`
//! (`src/seats/purchase.rs`), a seat's `NOT sold` and its retirement after the sale
//! (`lease/src/scripts/retire.lua`, itself lost with Redis's data): the resource here is
//! written more than once, like the auction's high bid, so only the fence decides. Retried scripts
//! (acquire is idempotent for its owner token). An old primary that keeps accepting
//! writes after it was replaced (split brain, bounded in Redis by `min-replicas-to-write`).
//! After a failover the replica is at once a full copy of the new primary. One lease
//! group and one resource; no token exhaustion at 2^53.
//!
//! ## Bounds
//!
//! The tests check two holders with one grant each, blocks of two tokens, at most one
//! failover and one empty restart: about 86,000 distinct states (280,000 visits) with everything on, a
//! fraction of a second. Larger bounds were checked once with everything on (release
//! build), every `always` property holding: two holders with one failover and two
//! restarts (190,000 states), two failovers and one restart (461,000), two and two
//! (949,000); two holders with two grants each, one failover and one restart
//! (10.7 million, 2 min); three holders with one grant each, one failover and one restart
//! (26.3 million, 6 min), also with today's fence.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex};

use stateright::{Checker, HasDiscoveries, Model, Path, Property};

/// Steps 1–3: a live lease stays its holder's (so at most one holder has one).
pub const LEASE_KEPT: &str = "a live lease is never taken from its holder";
/// Steps 4–5: fencing tokens never repeat nor go backwards.
pub const TOKENS_GROW: &str = "every grant's token is above all earlier ones";
/// The article's invariant, first half: accepted tokens never decrease.
pub const TOKEN_ORDER: &str = "writes accepted in token order";
/// The article's invariant, second half: one holder per accepted token.
pub const ONE_HOLDER_PER_TOKEN: &str = "no token accepted from two holders";
/// The known non-promise, shown: Redis loses a live lease and grants it to another
/// holder while the first still holds it in its own eyes.
pub const LOST_LEASE_REGRANTED: &str = "a lease lost with Redis is granted again";
/// Not vacuous: a holder granted after a failover has its write accepted.
pub const WRITE_AFTER_FAILOVER: &str = "a write granted after a failover is accepted";
/// Not vacuous: the fence refuses some write.
pub const LATE_WRITE_REFUSED: &str = "the fence refuses a late write";

/// How the resource checks a write's fencing token against the highest it accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fence {
    /// Step 4 off: every write is accepted.
    Off,
    /// Today's SQL (`fence_token <= $token`): a token at least the highest is accepted,
    /// from anybody.
    AcceptEqual,
    /// The stricter fence: a higher token is accepted; an equal one only from the holder
    /// that wrote it.
    RefuseEqualFromOther,
}

/// Step 5's failover guard: the fence hash remembers which Redis server installed
/// its current block, so a promoted replica takes a fresh block before granting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Guard {
    /// No guard (the scripts with `--lab-disable-failover-guard`): a promoted replica keeps granting from its copy of the
    /// counter, which may be behind; a reservation marker counts wherever it is found.
    Off,
    /// The guard as designed, in two parts. One: every install stamps the fence hash
    /// with the server, and acquire asks for a fresh block while the stamp names another
    /// server. Two: the reservation marker records the server it was written on, and an
    /// install is refused on any other server.
    Stamp,
    /// Part two missing: an install is accepted on whatever server holds its marker, so
    /// a marker that reached the replica before a failover installs, on the promoted
    /// replica, a block reserved before a newer one whose tokens the old primary issued.
    StampPlainMarkers,
}

/// The model: the bounds of the search and which article steps are on. Build it with
/// [`Protocol::new`] (everything on) and switch steps off with the `without_*` methods.
#[derive(Clone, Debug)]
pub struct Protocol {
    /// Number of holders (2–3 keeps the search small).
    pub holders: u8,
    /// Grants each holder may take.
    pub leases_per_holder: u8,
    /// Tokens per ledger block.
    pub block: u32,
    /// Failovers the environment may cause.
    pub failovers: u8,
    /// Empty restarts of the primary the environment may cause.
    pub restarts: u8,
    /// Step 3: release deletes the lease only if the caller owns it.
    pub owner_check: bool,
    /// Step 4: the resource's fence.
    pub fence: Fence,
    /// Step 5: tokens come from blocks reserved in the durable ledger. Without it the
    /// counter in Redis is the only source of tokens (as after step 4 alone).
    pub durable_ledger: bool,
    /// Step 5: the failover guard (needs the ledger to take a block from).
    pub failover_guard: Guard,
}

impl Protocol {
    /// Everything on, with the given number of holders, grants per holder, failovers and
    /// empty restarts; blocks of two tokens.
    pub fn new(holders: u8, leases_per_holder: u8, failovers: u8, restarts: u8) -> Self {
        assert!((1..=8).contains(&holders), "1 to 8 holders");
        Protocol {
            holders,
            leases_per_holder,
            block: 2,
            failovers,
            restarts,
            owner_check: true,
            fence: Fence::RefuseEqualFromOther,
            durable_ledger: true,
            failover_guard: Guard::Stamp,
        }
    }

    /// Step 3 off: release is a plain `DEL`.
    pub fn without_owner_check(self) -> Self {
        Protocol {
            owner_check: false,
            ..self
        }
    }

    /// Replaces the resource's fence (step 4 off is [`Fence::Off`]).
    pub fn with_fence(self, fence: Fence) -> Self {
        Protocol { fence, ..self }
    }

    /// Step 5 off: no durable ledger, tokens from the Redis counter alone.
    pub fn without_durable_ledger(self) -> Self {
        Protocol {
            durable_ledger: false,
            ..self
        }
    }

    /// Replaces the failover guard (off is [`Guard::Off`]).
    pub fn with_guard(self, failover_guard: Guard) -> Self {
        Protocol {
            failover_guard,
            ..self
        }
    }
}

/// A holder, shown as a letter (A, B, C…).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HolderId(pub u8);

impl fmt::Debug for HolderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", char::from(b'A' + self.0))
    }
}

/// One grant of the lease: its holder and the holder's grant number. Stands for the
/// random owner token stored as the lease key's value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId {
    /// Who was granted the lease.
    pub holder: HolderId,
    /// The holder's grant number, from 1.
    pub grant: u8,
}

impl fmt::Debug for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}{}", self.holder, self.grant)
    }
}

/// What a holder is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not holding; may acquire while it has grants left.
    Idle,
    /// Acquire answered "needs a block" (and left a reservation marker); the holder
    /// reserved a block ending at `ceiling` in the ledger and is about to install it.
    Installing {
        /// The ceiling the ledger returned.
        ceiling: u32,
    },
    /// Granted: the holder believes it holds the lease (even after it lapsed).
    Holding {
        /// The grant.
        lease: LeaseId,
        /// Its fencing token.
        token: u32,
        /// Whether the holder has made its one write.
        wrote: bool,
        /// Ghost: whether the lease is still live, and if not, why. Only properties
        /// read it.
        standing: Standing,
        /// Ghost: granted after a failover (for [`WRITE_AFTER_FAILOVER`]).
        after_failover: bool,
    },
}

/// Ghost: where a holder's lease stands, as the lease service sees it (the holder
/// itself cannot tell).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Standing {
    /// Granted and still in Redis: its TTL has not passed, its owner has not released it.
    Live,
    /// Its TTL passed while the holder paused.
    Expired,
    /// Redis lost it: a failover to a replica that never had it, or an empty restart.
    Lost,
}

/// A holder's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Holder {
    /// What it is doing.
    pub phase: Phase,
    /// Grants taken so far.
    pub grants: u8,
}

/// What one Redis server holds for the lease group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Store {
    /// The lease key and its owner (`lease:{group}:<name>`).
    pub lease: Option<LeaseId>,
    /// The fence hash's `counter`: the last token issued.
    pub counter: u32,
    /// The fence hash's `ceiling`: the highest token the ledger allows.
    pub ceiling: u32,
    /// The server that installed the current block (the failover guard's stamp).
    pub stamp: Option<u8>,
    /// Reservation markers (`~reserving:<nonce>`): each holder's, with the server it
    /// was written on.
    pub markers: BTreeMap<HolderId, u8>,
}

/// One write to the resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Write {
    /// The writer.
    pub holder: HolderId,
    /// The fencing token it sent.
    pub token: u32,
    /// Ghost: the writer's grant came after a failover.
    pub after_failover: bool,
}

/// The protected resource (a seat's or an auction item's row).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Resource {
    /// The highest token accepted (0: never written) and who wrote it.
    pub highest: (u32, Option<HolderId>),
    /// Accepted writes, in order.
    pub accepted: Vec<Write>,
    /// Refused writes, in order.
    pub refused: Vec<Write>,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The holders.
    pub holders: Vec<Holder>,
    /// The Redis primary.
    pub primary: Store,
    /// Its asynchronous replica: a copy of the primary at some earlier moment.
    pub replica: Store,
    /// Id of the server now primary; every failover or restart makes a new one.
    pub server: u8,
    /// The durable ledger's ceiling (Postgres `fence_ceilings`).
    pub ledger: u32,
    /// The resource.
    pub resource: Resource,
    /// Failovers left to the environment.
    pub failovers_left: u8,
    /// Empty restarts left to the environment.
    pub restarts_left: u8,
    /// Ghost: every grant made, as (token, lease), in the order made.
    pub granted: Vec<(u32, LeaseId)>,
}

/// A step of one actor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The holder runs acquire.lua on the primary; if that answers "needs a block", the
    /// holder also reserves one in the ledger.
    Acquire(HolderId),
    /// The holder runs raise_ceiling.lua on the primary.
    Install(HolderId),
    /// The holder writes to the resource with its fencing token.
    Write(HolderId),
    /// The holder runs release.lua (or a plain `DEL` without step 3).
    Release(HolderId),
    /// The lease's TTL passes, on the primary and the replica alike.
    Expire(LeaseId),
    /// The replica catches up with the primary.
    Replicate,
    /// The primary dies; the replica is promoted.
    Failover,
    /// The primary restarts with no data.
    RestartEmpty,
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.start()]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, holder) in state.holders.iter().enumerate() {
            let id = HolderId(i as u8);
            match holder.phase {
                Phase::Idle if holder.grants < self.leases_per_holder => {
                    actions.push(Action::Acquire(id))
                }
                Phase::Idle => {}
                Phase::Installing { .. } => actions.push(Action::Install(id)),
                Phase::Holding { wrote, .. } => {
                    if !wrote {
                        actions.push(Action::Write(id));
                    }
                    actions.push(Action::Release(id));
                }
            }
        }
        if let Some(lease) = state.primary.lease {
            actions.push(Action::Expire(lease));
        }
        if let Some(lease) = state.replica.lease
            && state.primary.lease != Some(lease)
        {
            actions.push(Action::Expire(lease));
        }
        if state.replica != state.primary {
            actions.push(Action::Replicate);
        }
        if state.failovers_left > 0 {
            actions.push(Action::Failover);
        }
        if state.restarts_left > 0 {
            actions.push(Action::RestartEmpty);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Acquire(h) => self.acquire(&mut s, h)?,
            Action::Install(h) => self.install(&mut s, h),
            Action::Write(h) => self.write(&mut s, h),
            Action::Release(h) => {
                let holder = &mut s.holders[usize::from(h.0)];
                let Phase::Holding { lease, .. } = holder.phase else {
                    unreachable!("release is offered to holders only")
                };
                holder.phase = Phase::Idle;
                if !self.owner_check || s.primary.lease == Some(lease) {
                    s.primary.lease = None;
                }
            }
            Action::Expire(lease) => {
                for store in [&mut s.primary, &mut s.replica] {
                    if store.lease == Some(lease) {
                        store.lease = None;
                    }
                }
                s.holders[usize::from(lease.holder.0)]
                    .lapse_if(Standing::Expired, |held| held == lease);
            }
            Action::Replicate => s.replica = s.primary.clone(),
            Action::Failover => {
                s.failovers_left -= 1;
                s.server += 1;
                s.primary = s.replica.clone();
                let kept = s.primary.lease;
                for holder in &mut s.holders {
                    holder.lapse_if(Standing::Lost, |held| Some(held) != kept);
                }
            }
            Action::RestartEmpty => {
                s.restarts_left -= 1;
                s.server += 1;
                s.primary = Store::default();
                s.replica = Store::default();
                for holder in &mut s.holders {
                    holder.lapse_if(Standing::Lost, |_| true);
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(LEASE_KEPT, |_, s: &State| {
                s.holders.iter().all(|h| match h.phase {
                    Phase::Holding {
                        lease,
                        standing: Standing::Live,
                        ..
                    } => s.primary.lease == Some(lease),
                    _ => true,
                })
            }),
            Property::always(TOKENS_GROW, |_, s: &State| {
                s.granted.windows(2).all(|w| w[0].0 < w[1].0)
            }),
            Property::always(TOKEN_ORDER, |_, s: &State| {
                s.resource
                    .accepted
                    .windows(2)
                    .all(|w| w[0].token <= w[1].token)
            }),
            Property::always(ONE_HOLDER_PER_TOKEN, |_, s: &State| {
                let accepted = &s.resource.accepted;
                accepted.iter().all(|a| {
                    accepted
                        .iter()
                        .all(|b| a.token != b.token || a.holder == b.holder)
                })
            }),
            Property::sometimes(LOST_LEASE_REGRANTED, |_, s: &State| {
                let standing = |wanted| {
                    s.holders.iter().any(|h| {
                        matches!(h.phase, Phase::Holding { standing, .. } if standing == wanted)
                    })
                };
                standing(Standing::Lost) && standing(Standing::Live)
            }),
            Property::sometimes(WRITE_AFTER_FAILOVER, |_, s: &State| {
                s.resource.accepted.iter().any(|w| w.after_failover)
            }),
            Property::sometimes(LATE_WRITE_REFUSED, |_, s: &State| {
                !s.resource.refused.is_empty()
            }),
        ]
    }
}

impl Holder {
    /// Ghost bookkeeping: a live lease for which `ended` is true becomes `why`.
    fn lapse_if(&mut self, why: Standing, ended: impl Fn(LeaseId) -> bool) {
        if let Phase::Holding {
            lease, standing, ..
        } = &mut self.phase
            && *standing == Standing::Live
            && ended(*lease)
        {
            *standing = why;
        }
    }
}

impl Protocol {
    /// acquire.lua; `None` when the lease is held by someone (nothing changes).
    fn acquire(&self, s: &mut State, h: HolderId) -> Option<()> {
        if s.primary.lease.is_some() {
            return None;
        }
        let holder = &mut s.holders[usize::from(h.0)];
        if self.durable_ledger {
            let foreign_block =
                self.failover_guard != Guard::Off && s.primary.stamp != Some(s.server);
            if s.primary.counter >= s.primary.ceiling || foreign_block {
                s.primary.markers.insert(h, s.server);
                s.ledger += self.block;
                holder.phase = Phase::Installing { ceiling: s.ledger };
                return Some(());
            }
        }
        s.primary.counter += 1;
        let token = s.primary.counter;
        holder.grants += 1;
        let lease = LeaseId {
            holder: h,
            grant: holder.grants,
        };
        holder.phase = Phase::Holding {
            lease,
            token,
            wrote: false,
            standing: Standing::Live,
            after_failover: s.failovers_left < self.failovers,
        };
        s.primary.lease = Some(lease);
        s.granted.push((token, lease));
        Some(())
    }

    /// raise_ceiling.lua, with the failover guard's stamp.
    fn install(&self, s: &mut State, h: HolderId) {
        let holder = &mut s.holders[usize::from(h.0)];
        let Phase::Installing { ceiling } = holder.phase else {
            unreachable!("install is offered to installing holders only")
        };
        holder.phase = Phase::Idle;
        let store = &mut s.primary;
        let Some(marked_on) = store.markers.remove(&h) else {
            return; // Redis lost the marker: refused, the holder asks again
        };
        if self.failover_guard == Guard::Stamp && marked_on != s.server {
            return; // written on another server: refused, the holder asks again
        }
        if ceiling > store.ceiling {
            store.counter = store.counter.max(ceiling - self.block);
            store.ceiling = ceiling;
        }
        if self.failover_guard != Guard::Off {
            store.stamp = Some(s.server);
        }
    }

    /// The fenced write.
    fn write(&self, s: &mut State, h: HolderId) {
        let Phase::Holding {
            token,
            wrote,
            after_failover,
            ..
        } = &mut s.holders[usize::from(h.0)].phase
        else {
            unreachable!("write is offered to holders only")
        };
        *wrote = true;
        let write = Write {
            holder: h,
            token: *token,
            after_failover: *after_failover,
        };
        let (highest, by) = s.resource.highest;
        let accept = match self.fence {
            Fence::Off => true,
            Fence::AcceptEqual => write.token >= highest,
            Fence::RefuseEqualFromOther => {
                write.token > highest || (write.token == highest && by.is_none_or(|b| b == h))
            }
        };
        if accept {
            if write.token >= highest {
                s.resource.highest = (write.token, Some(h));
            }
            s.resource.accepted.push(write);
        } else {
            s.resource.refused.push(write);
        }
    }
}

/// One article step switched off: the model without it, and the property whose
/// counterexample shows why the step is there. [`switched_off`] lists them all.
#[derive(Clone, Debug)]
pub struct SwitchedOff {
    /// Its name in URLs (`owner-check`, `fence`, …).
    pub slug: &'static str,
    /// What is switched off, for a person.
    pub title: &'static str,
    /// The model: two holders with one grant each, and only the faults the
    /// counterexample needs.
    pub model: Protocol,
    /// The `always` property that fails without the step (one of the constants above).
    pub property: &'static str,
    /// What the counterexample shows, in one sentence.
    pub story: &'static str,
}

/// One entry per step the model can switch off, in the article's order, each with the
/// property that fails without it: step 3's owner check, step 4's fence, step 5's durable
/// ledger and failover guard, today's fence without the guard, and the guard with markers
/// that do not name their server. The tests in `model/tests/protocol.rs` check each
/// counterexample's shape; the lab replays them on real Redis servers.
pub fn switched_off() -> Vec<SwitchedOff> {
    vec![
        SwitchedOff {
            slug: "owner-check",
            title: "Step 3 off: release is a plain DEL",
            model: Protocol::new(2, 1, 0, 0).without_owner_check(),
            property: LEASE_KEPT,
            story: "A holder whose lease lapsed while it paused releases, and deletes the live lease of the holder granted after it.",
        },
        SwitchedOff {
            slug: "fence",
            title: "Step 4 off: the resource accepts every write",
            model: Protocol::new(2, 1, 0, 0).with_fence(Fence::Off),
            property: TOKEN_ORDER,
            story: "A holder pauses past its lease, the next holder writes with a higher token, and the paused holder's late write with the lower token is accepted after it.",
        },
        SwitchedOff {
            slug: "durable-ledger",
            title: "Step 5 off: tokens from the Redis counter alone",
            model: Protocol::new(2, 1, 0, 1).without_durable_ledger(),
            property: TOKENS_GROW,
            story: "Redis restarts empty, and the next grant repeats a token already granted.",
        },
        SwitchedOff {
            slug: "failover-guard",
            title: "Step 5's failover guard off",
            model: Protocol::new(2, 1, 1, 0).with_guard(Guard::Off),
            property: TOKENS_GROW,
            story: "The primary grants a token and fails over before its replica saw it; the promoted replica grants the same token again from its older counter.",
        },
        SwitchedOff {
            slug: "failover-guard-todays-fence",
            title: "The failover guard off, with today's fence (an equal token accepted from anybody)",
            model: Protocol::new(2, 1, 1, 0)
                .with_guard(Guard::Off)
                .with_fence(Fence::AcceptEqual),
            property: ONE_HOLDER_PER_TOKEN,
            story: "After the failover the repeated token is granted to a second holder, and the fence accepts its write beside the first holder's: two holders under one token.",
        },
        SwitchedOff {
            slug: "plain-markers",
            title: "The failover guard with reservation markers that do not name their server",
            model: Protocol::new(2, 1, 1, 0).with_guard(Guard::StampPlainMarkers),
            property: TOKENS_GROW,
            story: "A marker copied to the replica installs, after the failover, a block reserved before a newer one the old primary issued from, and the next grant repeats a token.",
        },
    ]
}

impl Protocol {
    /// The one initial state: every holder idle, both Redis servers and the ledger empty
    /// (a cold lease group), the resource never written.
    pub fn start(&self) -> State {
        State {
            holders: vec![
                Holder {
                    phase: Phase::Idle,
                    grants: 0,
                };
                usize::from(self.holders)
            ],
            primary: Store::default(),
            replica: Store::default(),
            server: 0,
            ledger: 0,
            resource: Resource::default(),
            failovers_left: self.failovers,
            restarts_left: self.restarts,
            granted: Vec::new(),
        }
    }

    /// The `always` properties that `state` breaks (their names, in the order of
    /// [`Model::properties`]): the model's own judgement, for a state the model reached or
    /// one built from what a real run showed (the lab's replay).
    pub fn broken(&self, state: &State) -> Vec<&'static str> {
        self.properties()
            .into_iter()
            .filter(|p| p.expectation == stateright::Expectation::Always)
            .filter(|p| !(p.condition)(self, state))
            .map(|p| p.name)
            .collect()
    }
}

/// A shortest counterexample: the trace from the initial state to the first state where
/// the property fails, and how many states the search visited to find it.
#[derive(Clone, Debug)]
pub struct Counterexample {
    /// The states and the actions between them, from the initial state.
    pub trace: Path<State, Action>,
    /// States visited by the breadth-first search (repeats included).
    pub states_explored: usize,
}

impl Counterexample {
    /// The trace's steps as (state before, action, state after), in order.
    pub fn steps(&self) -> Vec<(State, Action, State)> {
        let states = self.trace.clone().into_states();
        let actions = self.trace.clone().into_actions();
        actions
            .into_iter()
            .enumerate()
            .map(|(i, action)| (states[i].clone(), action, states[i + 1].clone()))
            .collect()
    }
}

/// Searches `model` breadth first until the `always` property named `property` fails, and
/// returns the first trace where it does: a shortest one, since breadth first visits
/// every shorter trace before. `None` if no reachable state breaks it (or `model` has no
/// such property). Takes milliseconds for the bounds of [`switched_off`] (a few thousand
/// states); it blocks the calling thread, so async code calls it from a blocking task.
pub fn counterexample(model: &Protocol, property: &'static str) -> Option<Counterexample> {
    let condition = model
        .properties()
        .into_iter()
        .find(|p| p.name == property)?
        .condition;
    // The checker reports that the property failed, not where first: the visitor keeps
    // the first path (in breadth-first order) whose last state breaks it.
    let first: Arc<Mutex<Option<Path<State, Action>>>> = Arc::default();
    let seen = Arc::clone(&first);
    let judge = model.clone();
    let checker = model
        .clone()
        .checker()
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
        .visitor(move |path: Path<State, Action>| {
            let mut first = seen.lock().expect("the visitor does not panic");
            if first.is_none() && !condition(&judge, path.last_state()) {
                *first = Some(path);
            }
        })
        .spawn_bfs()
        .join();
    checker.discovery(property)?;
    let trace = first.lock().expect("the visitor does not panic").take()?;
    Some(Counterexample {
        trace,
        states_explored: checker.state_count(),
    })
}

/// One line per state, for traces: each holder, both Redis servers, the ledger and the
/// resource.
impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, holder) in self.holders.iter().enumerate() {
            write!(f, "{:?} ", HolderId(i as u8))?;
            match holder.phase {
                Phase::Idle => write!(f, "idle")?,
                Phase::Installing { ceiling } => write!(f, "installing block to {ceiling}")?,
                Phase::Holding {
                    lease,
                    token,
                    wrote,
                    standing,
                    ..
                } => {
                    write!(f, "holds {lease:?} token {token}")?;
                    match standing {
                        Standing::Live => {}
                        Standing::Expired => write!(f, " (expired)")?,
                        Standing::Lost => write!(f, " (lost with Redis)")?,
                    }
                    if wrote {
                        write!(f, " (wrote)")?;
                    }
                }
            }
            write!(f, "; ")?;
        }
        let writes = |writes: &[Write]| {
            let list: Vec<String> = writes.iter().map(Write::to_string).collect();
            list.join(" ")
        };
        write!(
            f,
            "primary s{} {}; replica {}; ledger {}; resource accepted [{}] refused [{}]",
            self.server,
            self.primary,
            self.replica,
            self.ledger,
            writes(&self.resource.accepted),
            writes(&self.resource.refused),
        )
    }
}

/// `A:3`: the writer and the token it sent.
impl fmt::Display for Write {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}:{}", self.holder, self.token)
    }
}

/// `{lease, counter/ceiling, stamp, markers}`.
impl fmt::Display for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.lease {
            Some(lease) => write!(f, "{{lease {lease:?}")?,
            None => write!(f, "{{no lease")?,
        }
        write!(f, ", counter {}/{}", self.counter, self.ceiling)?;
        if let Some(stamp) = self.stamp {
            write!(f, ", stamp s{stamp}")?;
        }
        for (holder, server) in &self.markers {
            write!(f, ", marker {holder:?}@s{server}")?;
        }
        write!(f, "}}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `model` switches off, against everything on.
    fn differences(model: &Protocol) -> Vec<&'static str> {
        let on = Protocol::new(model.holders, model.leases_per_holder, 0, 0);
        let mut off = Vec::new();
        if model.owner_check != on.owner_check {
            off.push("owner check");
        }
        match model.fence {
            Fence::Off => off.push("fence"),
            Fence::AcceptEqual => off.push("today's fence"),
            Fence::RefuseEqualFromOther => {}
        }
        if model.durable_ledger != on.durable_ledger {
            off.push("durable ledger");
        }
        match model.failover_guard {
            Guard::Off => off.push("failover guard"),
            Guard::StampPlainMarkers => off.push("markers naming their server"),
            Guard::Stamp => {}
        }
        off
    }

    /// One entry per step switched off: each of the model's switches off alone in
    /// exactly one entry, today's fence only beside the guard it needs, every slug
    /// distinct, and every property an `always` one of the model.
    #[test]
    fn the_listing_has_one_entry_per_step_switched_off() {
        let listed = switched_off();
        let off: Vec<Vec<&str>> = listed.iter().map(|s| differences(&s.model)).collect();
        assert_eq!(
            off,
            [
                vec!["owner check"],
                vec!["fence"],
                vec!["durable ledger"],
                vec!["failover guard"],
                vec!["today's fence", "failover guard"],
                vec!["markers naming their server"],
            ]
        );
        let slugs: BTreeSet<&str> = listed.iter().map(|s| s.slug).collect();
        assert_eq!(slugs.len(), listed.len());
        for entry in &listed {
            let property = entry
                .model
                .properties()
                .into_iter()
                .find(|p| p.name == entry.property);
            assert!(
                property.is_some_and(|p| p.expectation == stateright::Expectation::Always),
                "{}: {} is an always property",
                entry.slug,
                entry.property
            );
        }
    }

    #[test]
    fn with_every_step_on_there_is_no_counterexample() {
        let model = Protocol::new(2, 1, 0, 1);
        for property in [LEASE_KEPT, TOKENS_GROW, TOKEN_ORDER, ONE_HOLDER_PER_TOKEN] {
            assert!(counterexample(&model, property).is_none(), "{property}");
        }
        assert!(counterexample(&model, "no such property").is_none());
    }
}
