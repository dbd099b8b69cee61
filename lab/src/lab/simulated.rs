//! One simulated server of a lab run: the article's protocol, one operation at a time,
//! each reported as a row ([`super::check::Action`]) with the lock as read right after.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use lease::{Lease, LeaseError, LeaseKey, LeaseStore, RedisStore};
use sqlx::PgPool;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::{Instant, sleep, sleep_until};

use super::check::{Action, WriteRule, why};
use super::net_delay::DelayedLink;
use super::own_redis::OwnRedis;
use super::unsafe_ops::{self, Observed};
use super::{
    CLOCK_JUMP, Fault, GIVE_UP, LEASE_TTL, LOCK_DELAY, PAYMENT, RETRY, SLOW_PAYMENT, Side, Step,
    TICKET, queries,
};

/// How one side's servers take, use and give back the lock: every step on, or the
/// scenario's step off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Protocol {
    /// Take a lock at all (off only for [`Step::Conditional`]).
    pub lock: bool,
    /// Step 1: `SET … NX` (off: the key is overwritten).
    pub nx: bool,
    /// Step 2: `PX ttl` (off: the key is made to never expire).
    pub px: bool,
    /// Step 3: compare-and-delete (off: a plain `DEL`).
    pub owner_check: bool,
    /// Step 4: the seat's row checks the token.
    fence: bool,
    /// [`Step::LockDelay`]: after a lease lapses, nobody is granted the lock for
    /// [`LOCK_DELAY`] (Chubby's answer instead of the fence).
    lock_delay: bool,
    /// Step 5: tokens from the Postgres ledger, failover guard on (off: a ledger in the
    /// same Redis, guard off).
    pub durable_tokens: bool,
    /// Step 5's failover guard ([`lease::LeaseClient::with_failover_guard`]): on with the
    /// durable tokens, off with them; off alone only in the model's replay
    /// ([`Protocol::without_failover_guard`]).
    pub failover_guard: bool,
    /// The conditional `UPDATE` (only for [`Step::Conditional`], on side).
    conditional: bool,
}

impl Protocol {
    /// Whether the seat's row checks the writes' fencing tokens (step 4 on).
    pub(super) fn fenced(&self) -> bool {
        self.fence
    }

    /// The protocol of `side` for a run that switches `step` off: every step on, but
    /// `step` on the `off` side; no lock at all for [`Step::Conditional`], whose `on`
    /// side writes with the conditional `UPDATE`.
    pub(super) fn of(step: Step, side: Side) -> Protocol {
        let lock = step != Step::Conditional;
        let on = |this: Step| side == Side::On || step != this;
        Protocol {
            lock,
            nx: on(Step::CreateIfAbsent),
            px: on(Step::Lease),
            owner_check: on(Step::OwnerCheck),
            fence: lock && on(Step::Fencing) && on(Step::LockDelay),
            lock_delay: !on(Step::LockDelay),
            durable_tokens: on(Step::Ledger),
            failover_guard: on(Step::Ledger),
            conditional: !lock && side == Side::On,
        }
    }

    /// This protocol with the failover guard off and everything else as it was: the
    /// model's counterexamples without the guard keep the durable ledger (`replay.rs`).
    pub(super) fn without_failover_guard(self) -> Protocol {
        Protocol {
            failover_guard: false,
            ..self
        }
    }

    /// What the seat's row checks of this side's writes.
    pub(super) fn write_rule(&self) -> WriteRule {
        if self.conditional {
            WriteRule::IfUnsold
        } else if self.fence {
            WriteRule::Fenced
        } else {
            WriteRule::Unconditional
        }
    }
}

/// One row as a server reports it, before the recorder marks and stores it.
pub(super) struct Report {
    /// When it happened, from the run's start.
    pub at: Duration,
    /// A, B, C or `lab`.
    pub server: &'static str,
    /// What happened.
    pub action: Action,
    /// The lease key right after, in words: its holder and TTL.
    pub lock_key: String,
    /// The group's fencing counter right after.
    pub counter: Option<i64>,
}

/// What the servers of one side share: the run, the lock's key, the lab's own Redis
/// connection (observations, the unsafe operations, the fault), who owns which owner
/// token, and where reports go.
pub(super) struct Arena {
    pub run_id: i64,
    pub side: Side,
    pub protocol: Protocol,
    pub key: LeaseKey,
    pub redis: Arc<RedisStore>,
    /// With [`Fault::ClockJump`], the side's Redis of its own, whose clock the fault
    /// moves; it dies with the arena, once every server is done.
    pub clock: Option<tokio::sync::Mutex<OwnRedis>>,
    pub db: PgPool,
    pub started: Instant,
    /// Owner token → server name, so the table names a key's holder.
    pub owners: Mutex<HashMap<String, &'static str>>,
    pub reports: UnboundedSender<Report>,
}

impl Arena {
    /// The server owning owner token `token`; a token no server was told of is a grant
    /// whose reply was lost (a store that stalled past the request's timeout).
    pub(super) fn owner_name(&self, token: &str) -> String {
        let owners = self.owners.lock().expect("owners");
        owners
            .get(token)
            .map_or("a grant whose reply was lost", |n| n)
            .to_string()
    }

    /// Reports `action` of `server`, with the lock as it stands now.
    pub(super) async fn report(&self, server: &'static str, action: Action) {
        // The time is the operation's (it has just returned), not the observation's.
        let at = Instant::now().saturating_duration_since(self.started);
        let (lock_key, counter) = if self.protocol.lock {
            match unsafe_ops::observe(&self.redis, &self.key).await {
                Ok(lock) => (self.describe(&lock), lock.counter),
                Err(_) => ("? (Redis did not answer)".into(), None),
            }
        } else {
            ("no lock".into(), None)
        };
        // The recorder outlives every server of its side; a send fails only if the run
        // was dropped, and then nobody reads the table.
        let _ = self.reports.send(Report {
            at,
            server,
            action,
            lock_key,
            counter,
        });
    }

    /// Moves the wall clock of the side's own Redis forward `by`; answers whether the
    /// key of `owner` (an owner token) was gone right after. Errors: the side has no
    /// Redis of its own, or it did not answer.
    async fn jump_clock(&self, by: Duration, owner: &str) -> anyhow::Result<bool> {
        let clock = self
            .clock
            .as_ref()
            .context("this run has no Redis of its own whose clock could jump")?;
        clock.lock().await.jump_clock(by).await?;
        let lock = unsafe_ops::observe(&self.redis, &self.key).await?;
        Ok(lock.owner.as_deref() != Some(owner))
    }

    /// The lock in words: its holder and TTL, "A, 1.21 s left", "A, no expiry", "none".
    fn describe(&self, lock: &Observed) -> String {
        match (&lock.owner, lock.pttl_ms) {
            (None, _) => "none".into(),
            (Some(owner), -1) => format!("{}, no expiry", self.owner_name(owner)),
            (Some(owner), ms) => {
                format!(
                    "{}, {:.2} s left",
                    self.owner_name(owner),
                    ms.max(0) as f64 / 1000.0
                )
            }
        }
    }
}

/// One simulated server: `name`, starting `start` after the run, with its own lease
/// client, and `fault` (only A has one) with `pause`.
pub(super) struct Server {
    pub name: &'static str,
    pub start: Duration,
    pub client: Arc<dyn LeaseStore>,
    pub fault: Fault,
    pub pause: Duration,
    /// With [`Fault::WriteDelayed`], the server's way to Postgres through a proxy that
    /// holds its write; otherwise it uses the side's pool.
    pub link: Option<DelayedLink>,
}

impl Server {
    /// Runs the protocol to its end; a store that fails ends it with a row saying so.
    pub(super) async fn run(self, arena: Arc<Arena>) {
        sleep_until(arena.started + self.start).await;
        if let Err(err) = self.buy(&arena).await {
            arena.report(self.name, Action::Failed(why(&err))).await;
        }
    }

    /// The article's protocol: lock, read, pay, write, send the ticket, release; with
    /// A's fault at its point.
    async fn buy(&self, arena: &Arena) -> anyhow::Result<()> {
        let lease = if arena.protocol.lock {
            match self.take(arena).await? {
                Some(lease) => Some(lease),
                None => return Ok(()),
            }
        } else {
            None
        };
        // When the lease began by this server's own clock (the clock jump's row says
        // what it has left then).
        let granted_at = Instant::now();
        // A crash leaves everything as it is: no write, no release, the key in Redis
        // (for ever, with step 2 off).
        let crashed = Action::Crashed {
            key_forever: lease.is_some() && !arena.protocol.px,
        };
        if self.fault == Fault::CrashAfterGrant {
            arena.report(self.name, crashed).await;
            return Ok(());
        }

        // Check the seat under the lock: a seat already sold is left alone.
        let sold_to = queries::read_seat(&arena.db, arena.run_id, arena.side).await?;
        let free = sold_to.is_none();
        arena.report(self.name, Action::Read { sold_to }).await;
        if free {
            match self.fault {
                // With the clock jump, A's payment is timed from its grant, as its lease
                // is: a slow read must not bring the jump nearer A's write.
                Fault::ClockJump => sleep_until(granted_at + PAYMENT).await,
                _ => sleep(PAYMENT).await,
            }
            // A's fault between the payment and the write: where the article's A stalls.
            match self.fault {
                Fault::PauseBeforeWrite => self.pause_here(arena).await,
                Fault::CrashBeforeWrite => {
                    arena.report(self.name, crashed).await;
                    return Ok(());
                }
                Fault::RedisRestart => {
                    let keys = unsafe_ops::delete_lock_keys(&arena.redis, &arena.key).await?;
                    arena.report("lab", Action::StoreLost { keys }).await;
                    self.pause_here(arena).await;
                }
                Fault::WriteDelayed => {
                    if let Some(link) = &self.link {
                        link.arm(self.pause).await;
                    }
                    arena.report(self.name, Action::Sent(self.pause)).await;
                }
                // A's card is slow: while it pays, Redis's clock jumps past A's lease. A
                // goes on paying and writes when its payment ends, inside its lease as
                // far as its own clock tells.
                Fault::ClockJump => {
                    let owner = lease.as_ref().map_or("", |l| l.owner().as_str());
                    let ended = arena.jump_clock(CLOCK_JUMP, owner).await?;
                    let left = lease
                        .as_ref()
                        .map(|_| LEASE_TTL.saturating_sub(granted_at.elapsed()));
                    let jumped = Action::ClockJumped {
                        by: CLOCK_JUMP,
                        holder: self.name.to_string(),
                        left,
                        ended,
                    };
                    arena.report("lab", jumped).await;
                    sleep_until(granted_at + SLOW_PAYMENT).await;
                }
                _ => {}
            }
            let token = lease.as_ref().map(|l| l.fencing_token().as_i64());
            let db = self.link.as_ref().map_or(&arena.db, |link| &link.db);
            let wrote = queries::write_seat(
                db,
                arena.run_id,
                arena.side,
                self.name,
                token,
                arena.protocol.write_rule(),
            )
            .await?;
            let accepted = matches!(wrote, Action::Wrote { accepted: true, .. });
            arena.report(self.name, wrote).await;
            if accepted {
                sleep(TICKET).await;
            }
            if self.fault == Fault::PauseBeforeRelease {
                self.pause_here(arena).await;
            }
        }
        if let Some(lease) = lease {
            self.release(arena, &lease).await?;
        }
        Ok(())
    }

    async fn pause_here(&self, arena: &Arena) {
        arena.report(self.name, Action::Paused(self.pause)).await;
        sleep(self.pause).await;
    }

    /// Takes the lock, retrying every [`RETRY`] while another holds it, for
    /// [`GIVE_UP`]; `None` if it gave up.
    async fn take(&self, arena: &Arena) -> anyhow::Result<Option<Lease>> {
        let (mut refused, mut delayed) = (false, false);
        // Tries on a fixed grid, every RETRY from the first: a slow round trip delays one
        // try, not every later one.
        for attempt in 1.. {
            // Step 1 off: SET without NX, which replaces whatever key is there. The lab
            // deletes the key, then takes the lease as usual (for a real fencing token).
            let overwrote = match arena.protocol.nx {
                true => None,
                false => unsafe_ops::delete_unchecked(&arena.redis, &arena.key)
                    .await?
                    .map(|owner| arena.owner_name(&owner)),
            };
            match self.client.acquire(&arena.key, self.name, LEASE_TTL).await {
                Ok(lease) => {
                    let owner = lease.owner().as_str().to_owned();
                    arena
                        .owners
                        .lock()
                        .expect("owners")
                        .insert(owner, self.name);
                    // Step 2 off: the key is made to never expire.
                    if !arena.protocol.px {
                        unsafe_ops::persist(&arena.redis, &arena.key).await?;
                    }
                    // The lock-delay: should this lease lapse, nobody is granted the lock
                    // until LOCK_DELAY after its end. It is the seat picker's cooling
                    // marker made to last that long past the lease; a release clears it,
                    // as Chubby frees a lock released cleanly at once.
                    if arena.protocol.lock_delay {
                        let until_delay_ends = LEASE_TTL + LOCK_DELAY;
                        (self.client)
                            .owned_by_paying(&arena.key, self.name, until_delay_ends)
                            .await?;
                    }
                    let token = lease.fencing_token().as_i64();
                    arena
                        .report(self.name, Action::Granted { token, overwrote })
                        .await;
                    return Ok(Some(lease));
                }
                // The key lapsed, and its lock-delay lasts on: said once, then retried.
                Err(LeaseError::Cooling { remaining, .. }) => {
                    if !std::mem::replace(&mut delayed, true) {
                        arena.report(self.name, Action::Delayed(remaining)).await;
                    }
                    let holder = "nobody (the lock-delay)".to_owned();
                    if !self.retry(arena, attempt, holder).await? {
                        return Ok(None);
                    }
                }
                Err(LeaseError::Held { holder, .. }) => {
                    if !std::mem::replace(&mut refused, true) {
                        let refusal = Action::Refused {
                            holder: holder.clone(),
                        };
                        arena.report(self.name, refusal).await;
                    }
                    if !self.retry(arena, attempt, holder).await? {
                        return Ok(None);
                    }
                }
                Err(err) => return Err(err).context("the lease store"),
            }
        }
        unreachable!("the attempts never run out")
    }

    /// After refused try `attempt`: waits for the next try on the [`RETRY`] grid and
    /// answers `true`, or past [`GIVE_UP`] reports that it gives up (`holder` kept the
    /// lock) and answers `false`.
    async fn retry(&self, arena: &Arena, attempt: u32, holder: String) -> anyhow::Result<bool> {
        let first_try = arena.started + self.start;
        let next_try = first_try + RETRY * attempt;
        if next_try > first_try + GIVE_UP {
            let lock = unsafe_ops::observe(&arena.redis, &arena.key).await?;
            let no_expiry = lock.pttl_ms == -1;
            arena
                .report(self.name, Action::GaveUp { holder, no_expiry })
                .await;
            return Ok(false);
        }
        sleep_until(next_try).await;
        Ok(true)
    }

    /// Gives the lock back: compare-and-delete (step 3), or a plain `DEL` with it off.
    async fn release(&self, arena: &Arena, lease: &Lease) -> anyhow::Result<()> {
        let (deleted, whose) = if arena.protocol.owner_check {
            let deleted = self.client.release(lease).await?;
            let whose = if deleted {
                Some(self.name.to_string())
            } else {
                let lock = unsafe_ops::observe(&arena.redis, &arena.key).await?;
                lock.owner.map(|owner| arena.owner_name(&owner))
            };
            (deleted, whose)
        } else {
            let previous = unsafe_ops::delete_unchecked(&arena.redis, &arena.key).await?;
            (
                previous.is_some(),
                previous.map(|owner| arena.owner_name(&owner)),
            )
        };
        arena
            .report(self.name, Action::Released { deleted, whose })
            .await;
        Ok(())
    }
}
