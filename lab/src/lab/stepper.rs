//! Step mode (`GET /lab/step`): the reader is the scheduler. Servers A, B and C follow
//! the article's protocol as in a timed run (`simulated.rs`), but each moves one event
//! at a time, when the reader says: grant, read, pay, pause, wake, write, release, and
//! lapse (the holder's lease runs out now: in step mode the reader is the clock too).
//! Every event is a real operation on the server's Redis and Postgres, made by the same
//! code paths as a timed run (the lease library with a step on, `unsafe_ops.rs` with it
//! off, `queries::write_seat` for the seat's row), and marked by the same checker
//! (`check.rs`). After each, the seat's row and the lease key are read and kept
//! (`lab_step_states`), so that the reader can scrub back along the timeline.
//!
//! A session is a lab run with one side ([`Side::Off`]: its step switched off, or
//! [`Side::On`]: every step on), finished at its start (nothing runs in the background):
//! its rows are `lab_rows`, its seat row `lab_seats`. Where each server stands is
//! folded from the recorded events ([`ServerState`]), so any server of a deployment can
//! take the next event, and two events of one session never interleave (the session's
//! row is locked while one is taken).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lease::{FencingToken, Lease, LeaseError, LeaseKey, OwnerToken, RedisStore};
use seatlock::state::AppState;
use sqlx::{PgPool, Postgres, Transaction};

use super::check::{Action, Checker, Mark};
use super::queries::{self, NewRow};
use super::run::{clean_up, connect, lease_client, lock_key};
use super::simulated::Protocol;
use super::unsafe_ops;
use super::{SERVERS, Side, Step};

/// A lease granted in step mode: long enough that it never runs out while the reader
/// thinks (ten minutes). It ends when the reader says so ([`Event::Lapse`]), or with the
/// session.
pub(super) const STEP_LEASE_TTL: Duration = Duration::from_secs(600);
/// The most events one session takes (a table one can still scrub along).
pub(super) const MAX_EVENTS: i32 = 60;
/// A session left this long without an event is ended (its keys deleted) when the next
/// session starts.
pub(super) const IDLE_AFTER: Duration = Duration::from_secs(30 * 60);

/// Presses handled at once, process-wide: each holds at most two pooled Postgres
/// connections, so two leave the rest of the pool to the product.
static PRESSES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// The steps step mode can switch off: the article's five and the conditional write.
/// Not the lock-delay ([`Step::LockDelay`]): it is a wait measured in milliseconds after
/// a lapse, and step mode moves only when the learner presses, so it is shown in timed
/// runs only.
pub(super) const STEPPABLE: &[Step] = match Step::ALL.split_last() {
    Some((Step::LockDelay, steppable)) => steppable,
    _ => panic!("Step::ALL ends with the lock-delay"),
};

/// The article's step-4 story as step-mode events, (server, event slug): A takes the
/// lock, reads the seat free, pays and pauses; its lease lapses; B takes the lock, reads,
/// pays and writes; A wakes and writes with its older token. With the fence off A's
/// write is accepted (14C sold twice), with it on refused. The start page offers it as a
/// walk-through; the tests take it.
pub const STALLED_HOLDER: [(&str, &str); 11] = [
    ("A", "grant"),
    ("A", "read"),
    ("A", "pay"),
    ("A", "pause"),
    ("A", "lapse"),
    ("B", "grant"),
    ("B", "read"),
    ("B", "pay"),
    ("B", "write"),
    ("A", "wake"),
    ("A", "write"),
];

/// What the reader can make a server do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Event {
    /// Take the lock: `SET … NX PX` through the lease library (step 1 or 2 off: the
    /// unsafe variant); refused while another holds it.
    Grant,
    /// Read seat 14C's row.
    Read,
    /// Charge the card (nothing is written).
    Pay,
    /// Stall: a GC pause, a stalled VM. The server still believes it holds the lock.
    Pause,
    /// Go on where it stopped, without looking at its lease again.
    Wake,
    /// Write "14C sold" with the server's fencing token.
    Write,
    /// Give the lock back: compare-and-delete (step 3 off: a plain `DEL`).
    Release,
    /// The server's lease runs out now (`lapse.lua`): Redis expires the key.
    Lapse,
}

impl Event {
    /// Every event, in the order a server meets them.
    pub(super) const ALL: [Event; 8] = [
        Event::Grant,
        Event::Read,
        Event::Pay,
        Event::Pause,
        Event::Wake,
        Event::Write,
        Event::Release,
        Event::Lapse,
    ];

    /// The value in forms and in `lab_step_states.event`.
    pub(super) fn slug(self) -> &'static str {
        match self {
            Event::Grant => "grant",
            Event::Read => "read",
            Event::Pay => "pay",
            Event::Pause => "pause",
            Event::Wake => "wake",
            Event::Write => "write",
            Event::Release => "release",
            Event::Lapse => "lapse",
        }
    }

    /// The event named by `slug`, if any.
    pub(super) fn parse(slug: &str) -> Option<Event> {
        Event::ALL.into_iter().find(|e| e.slug() == slug)
    }

    /// The button's words.
    pub(super) fn label(self) -> &'static str {
        match self {
            Event::Grant => "take the lock",
            Event::Read => "read the seat",
            Event::Pay => "charge the card",
            Event::Pause => "pause",
            Event::Wake => "wake",
            Event::Write => "write \"sold\"",
            Event::Release => "release",
            Event::Lapse => "let its lease lapse",
        }
    }
}

/// Where a server is in the protocol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    /// Not started, or refused the lock.
    #[default]
    Idle,
    /// Holds the lock, has not read the seat.
    Holding,
    /// Read the seat free: it will charge the card.
    Free,
    /// Read the seat sold: it leaves.
    Sold,
    /// Charged the card: it writes next (or stalls first).
    Paid,
    /// Stalled.
    Paused,
    /// Woke from its stall: it writes.
    Woke,
    /// Wrote (accepted or refused).
    Wrote,
    /// Released the lock: finished.
    Done,
}

/// One server as the recorded events leave it.
#[derive(Clone, Debug, Default)]
pub(super) struct ServerState {
    phase: Phase,
    /// The lease it was granted: owner token and fencing token.
    lease: Option<(String, i64)>,
    /// Its lease was made to lapse (once is enough).
    lapsed: bool,
}

impl ServerState {
    /// The server after `event` (as recorded: `refused` is a grant that failed).
    fn after(mut self, state: &StepState) -> ServerState {
        self.phase = match state.event.as_str() {
            "grant" => {
                self.lease = state.owner_token.clone().zip(state.fencing_token);
                self.lapsed = false;
                Phase::Holding
            }
            "read" if state.seat_free == Some(true) => Phase::Free,
            "read" => Phase::Sold,
            "pay" => Phase::Paid,
            "pause" => Phase::Paused,
            "wake" => Phase::Woke,
            "write" => Phase::Wrote,
            "release" => Phase::Done,
            "lapse" => {
                self.lapsed = true;
                self.phase
            }
            _ => self.phase,
        };
        self
    }

    /// The events the reader may ask of this server now, under `protocol`.
    pub(super) fn next(&self, protocol: Protocol) -> Vec<Event> {
        let mut next = match (self.phase, protocol.lock) {
            (Phase::Idle, true) => vec![Event::Grant],
            (Phase::Idle, false) | (Phase::Holding, _) => vec![Event::Read],
            (Phase::Free, _) => vec![Event::Pay],
            (Phase::Paid, _) => vec![Event::Pause, Event::Write],
            (Phase::Paused, _) => vec![Event::Wake],
            (Phase::Woke, _) => vec![Event::Write],
            (Phase::Sold | Phase::Wrote, true) => vec![Event::Release],
            (Phase::Sold | Phase::Wrote, false) | (Phase::Done, _) => vec![],
        };
        if self.lease.is_some() && !self.lapsed && self.phase != Phase::Done {
            next.push(Event::Lapse);
        }
        next
    }

    /// Where the server is, in words, for its controls.
    pub(super) fn words(&self) -> &'static str {
        match self.phase {
            Phase::Idle => "waiting to start",
            Phase::Holding => "holds the lock",
            Phase::Free => "read 14C free",
            Phase::Sold => "read 14C sold; leaving",
            Phase::Paid => "has charged the card",
            Phase::Paused => "paused, and believes it still holds the lock",
            Phase::Woke => "awake, about to write",
            Phase::Wrote => "has written",
            Phase::Done => "done",
        }
    }
}

/// One recorded event and the state it left (`lab_step_states`).
#[derive(Clone, Debug, sqlx::FromRow)]
pub(super) struct StepState {
    /// Its row's `seq` (0: the session's start).
    pub seq: i32,
    /// A, B, C (`lab` for the start).
    pub server: String,
    /// The event's slug, or `refused` for a grant that failed, `start` for seq 0.
    pub event: String,
    owner_token: Option<String>,
    fencing_token: Option<i64>,
    seat_free: Option<bool>,
    /// Seat 14C's row: sold to whom, its highest accepted token, how many sales.
    pub seat_sold_to: Option<String>,
    pub seat_token: i64,
    pub seat_sales: i32,
    /// The lease key: its holder, its PTTL (-1 no expiry, -2 absent).
    pub lock_holder: Option<String>,
    pub lock_pttl_ms: i64,
    /// The group's fencing counter.
    pub fence_counter: Option<i64>,
}

impl StepState {
    /// The lease key in words: "B (token 3), 599.9 s left", "A, no expiry", "none".
    pub(super) fn lock_words(&self) -> String {
        match (&self.lock_holder, self.lock_pttl_ms) {
            (None, _) | (_, -2) => "none".into(),
            (Some(holder), -1) => format!("{holder}, no expiry"),
            (Some(holder), ms) => format!("{holder}, {:.1} s left", ms.max(0) as f64 / 1000.0),
        }
    }

    /// Seat 14C's row in words.
    pub(super) fn seat_words(&self) -> String {
        match &self.seat_sold_to {
            None => "free; no token accepted yet".into(),
            Some(who) => format!(
                "sold to {who}; highest token accepted {}; sales {}",
                self.seat_token, self.seat_sales
            ),
        }
    }
}

/// A session: its run, side and protocol, and the events so far.
pub(super) struct Session {
    pub run_id: i64,
    pub side: Side,
    pub step: Step,
    pub protocol: Protocol,
    pub ended: bool,
    /// Every recorded state, from seq 0.
    pub states: Vec<StepState>,
}

impl Session {
    /// Each server as the events leave it, by name.
    pub(super) fn servers(&self) -> HashMap<&'static str, ServerState> {
        let mut servers: HashMap<&'static str, ServerState> =
            SERVERS.map(|s| (s, ServerState::default())).into();
        for state in &self.states {
            if let Some(name) = SERVERS.into_iter().find(|s| *s == state.server) {
                let now = servers.remove(name).unwrap_or_default().after(state);
                servers.insert(name, now);
            }
        }
        servers
    }

    /// The server owning `owner` token, and the token it was granted with.
    fn owner_of(&self, owner: &str) -> Option<(String, i64)> {
        self.states
            .iter()
            .filter(|s| s.owner_token.as_deref() == Some(owner))
            .find_map(|s| Some((s.server.clone(), s.fencing_token?)))
    }

    /// A checker that has seen every grant and refusal so far, so that it marks the next
    /// event as a timed run's checker would.
    fn checker(&self) -> Checker {
        let mut checker = Checker::default();
        for state in &self.states {
            let seen = match (state.event.as_str(), state.fencing_token) {
                ("grant", Some(token)) => Action::Granted {
                    token,
                    overwrote: None,
                },
                ("refused", _) => Action::Refused {
                    holder: String::new(),
                },
                _ => continue,
            };
            checker.mark(&state.server, &seen);
        }
        checker
    }
}

/// Why an event was not taken: a 4xx for the reader.
#[derive(Debug)]
pub(super) enum Refused {
    /// No such session.
    NoSession,
    /// The session ended, or has taken [`MAX_EVENTS`].
    Over(String),
    /// The server cannot do that now.
    NotNow(String),
    /// A store failed.
    Store(anyhow::Error),
}

impl From<anyhow::Error> for Refused {
    fn from(err: anyhow::Error) -> Self {
        Refused::Store(err)
    }
}

impl From<sqlx::Error> for Refused {
    fn from(err: sqlx::Error) -> Self {
        Refused::Store(err.into())
    }
}

/// Starts a session that switches `step` off (`None`: every step on): its run, its seat
/// row and its start state. Ends sessions idle for [`IDLE_AFTER`] first. Returns the run id.
pub(super) async fn start(state: &AppState, step: Option<Step>) -> anyhow::Result<i64> {
    end_idle(state).await?;
    let side = if step.is_some() { Side::Off } else { Side::On };
    // Every step on is any step's "on" side: fencing's, the lab's default.
    let step = step.unwrap_or(Step::Fencing);
    let mut tx = state.db.begin().await?;
    let run_id: i64 = sqlx::query_scalar(
        "INSERT INTO lab_runs (step, fault, pause_ms, seed, finished_at)
         VALUES ($1, 'stepped', 0, 0, now()) RETURNING id",
    )
    .bind(step.slug())
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query("INSERT INTO lab_seats (run_id, side) VALUES ($1, $2)")
        .bind(run_id)
        .bind(side.as_str())
        .execute(&mut *tx)
        .await?;
    sqlx::query("INSERT INTO lab_step_sessions (run_id, side) VALUES ($1, $2)")
        .bind(run_id)
        .bind(side.as_str())
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO lab_step_states (run_id, seq, server, event, seat_token, seat_sales,
                                      lock_pttl_ms)
         VALUES ($1, 0, 'lab', 'start', 0, 0, -2)",
    )
    .bind(run_id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(run_id)
}

/// Session `run_id` as recorded, if it is one (and its step one this build knows); with `lock`, its row locked until the
/// transaction `db` is in ends.
pub(super) async fn load(
    db: &mut sqlx::PgConnection,
    run_id: i64,
    lock: bool,
) -> anyhow::Result<Option<Session>> {
    let lock = if lock { "FOR UPDATE OF s" } else { "" };
    let found: Option<(String, String, bool)> = sqlx::query_as(&format!(
        "SELECT r.step, s.side, s.ended_at IS NOT NULL
           FROM lab_step_sessions s JOIN lab_runs r ON r.id = s.run_id
          WHERE s.run_id = $1 {lock}"
    ))
    .bind(run_id)
    .fetch_optional(&mut *db)
    .await?;
    let Some((step, side, ended)) = found else {
        return Ok(None);
    };
    // A step this build no longer knows: no session it can replay.
    let Some(step) = Step::parse(&step) else {
        return Ok(None);
    };
    let side = if side == "off" { Side::Off } else { Side::On };
    let states = sqlx::query_as(
        "SELECT seq, server, event, owner_token, fencing_token, seat_free, seat_sold_to,
                seat_token, seat_sales, lock_holder, lock_pttl_ms, fence_counter
           FROM lab_step_states WHERE run_id = $1 ORDER BY seq",
    )
    .bind(run_id)
    .fetch_all(db)
    .await?;
    Ok(Some(Session {
        run_id,
        side,
        step,
        protocol: Protocol::of(step, side),
        ended,
        states,
    }))
}

/// Takes `event` of `server` in session `run_id`: the real operation, its row marked by
/// the checker, and the state after it, recorded whole or not at all.
pub(super) async fn take(
    state: &AppState,
    run_id: i64,
    server: &'static str,
    event: Event,
) -> Result<(), Refused> {
    // Presses wait their turn here, not on the pool (found by a hostile test): a press
    // holds a pooled connection in its transaction and its event needs a second one, so
    // a crowd of presses took every connection and each waited for a second, until
    // they and the product's requests on this server answered 503.
    let _turn = PRESSES.acquire().await;
    let mut tx = state.db.begin().await?;
    let session = load(&mut tx, run_id, true)
        .await?
        .ok_or(Refused::NoSession)?;
    let seq = session.states.len() as i32;
    if session.ended {
        return Err(Refused::Over(
            "This session has ended: start a new one.".into(),
        ));
    }
    if seq > MAX_EVENTS {
        return Err(Refused::Over(format!(
            "A session takes at most {MAX_EVENTS} events: start a new one."
        )));
    }
    let me = session.servers().remove(server).unwrap_or_default();
    if !me.next(session.protocol).contains(&event) {
        return Err(Refused::NotNow(format!(
            "{server} cannot {} now: it {}.",
            event.label(),
            me.words()
        )));
    }
    let key = lock_key(state, run_id, session.side);
    let redis = Arc::new(connect(state)?);
    let done = operate(state, &session, &redis, &key, server, &me, event).await?;
    let mark = session.checker().mark(server, &done.action);
    let after = observe(&state.db, &session, &redis, &key, server, &done).await?;
    record(&mut tx, &session, seq, server, &done, mark.as_ref(), &after).await?;
    tx.commit().await?;
    Ok(())
}

/// What an event did: its row's action, and what the next events need.
struct Done {
    /// The recorded event (`refused` for a failed grant).
    event: &'static str,
    /// The row: its words, and the checker's mark, come from it.
    action: Action,
    owner_token: Option<String>,
    fencing_token: Option<i64>,
    seat_free: Option<bool>,
}

impl Done {
    fn acted(event: &'static str, action: Action) -> Done {
        Done {
            event,
            action,
            owner_token: None,
            fencing_token: None,
            seat_free: None,
        }
    }
}

/// The real operation of `event` for `server` (`me`).
async fn operate(
    state: &AppState,
    session: &Session,
    redis: &Arc<RedisStore>,
    key: &LeaseKey,
    server: &'static str,
    me: &ServerState,
    event: Event,
) -> anyhow::Result<Done> {
    let protocol = session.protocol;
    let lease = me.lease.as_ref().map(|(owner, token)| {
        Lease::from_parts(
            key.clone(),
            OwnerToken::from_string(owner.clone()),
            FencingToken(*token as u64),
            STEP_LEASE_TTL,
            0,
        )
    });
    let name = |owner: Option<String>| owner.map(|o| session.owner_of(&o).map_or(o, |(s, _)| s));
    Ok(match event {
        Event::Grant => {
            // Step 1 off: SET without NX replaces whatever key is there.
            let overwrote = match protocol.nx {
                true => None,
                false => name(unsafe_ops::delete_unchecked(redis, key).await?),
            };
            let client = lease_client(state, protocol, redis)?;
            match client.acquire(key, server, STEP_LEASE_TTL).await {
                Ok(lease) => {
                    // Step 2 off: the key never expires.
                    if !protocol.px {
                        unsafe_ops::persist(redis, key).await?;
                    }
                    let token = lease.fencing_token().as_i64();
                    Done {
                        owner_token: Some(lease.owner().as_str().to_owned()),
                        fencing_token: Some(token),
                        ..Done::acted("grant", Action::Granted { token, overwrote })
                    }
                }
                Err(LeaseError::Held { holder, .. }) => {
                    Done::acted("refused", Action::Refused { holder })
                }
                Err(err) => return Err(err.into()),
            }
        }
        Event::Read => {
            let sold_to = queries::read_seat(&state.db, session.run_id, session.side).await?;
            Done {
                seat_free: Some(sold_to.is_none()),
                ..Done::acted("read", Action::Read { sold_to })
            }
        }
        Event::Pay => Done::acted("pay", Action::Paid),
        Event::Pause => Done::acted("pause", Action::Stalled),
        Event::Wake => Done::acted("wake", Action::Woke),
        Event::Write => {
            let token = lease.as_ref().map(|l| l.fencing_token().as_i64());
            let wrote = queries::write_seat(
                &state.db,
                session.run_id,
                session.side,
                server,
                token,
                protocol.write_rule(),
            )
            .await?;
            Done::acted("write", wrote)
        }
        Event::Release => {
            let lease = lease.ok_or_else(|| anyhow::anyhow!("{server} holds no lease"))?;
            let (deleted, whose) = if protocol.owner_check {
                let deleted = lease_client(state, protocol, redis)?
                    .release(&lease)
                    .await?;
                let whose = if deleted {
                    Some(server.to_string())
                } else {
                    name(unsafe_ops::observe(redis, key).await?.owner)
                };
                (deleted, whose)
            } else {
                let previous = name(unsafe_ops::delete_unchecked(redis, key).await?);
                (previous.is_some(), previous)
            };
            Done::acted("release", Action::Released { deleted, whose })
        }
        Event::Lapse => {
            let owner = me.lease.as_ref().map(|(o, _)| o.as_str()).unwrap_or("");
            let lapse = unsafe_ops::lapse(redis, key, owner).await?;
            Done::acted("lapse", Action::Lapsed(lapse))
        }
    })
}

/// The seat's row and the lease key right after the event.
async fn observe(
    db: &PgPool,
    session: &Session,
    redis: &RedisStore,
    key: &LeaseKey,
    server: &str,
    done: &Done,
) -> anyhow::Result<StepState> {
    let (seat_sold_to, seat_token, seat_sales) =
        queries::seat_row(db, session.run_id, session.side).await?;
    let lock = if session.protocol.lock {
        unsafe_ops::observe(redis, key).await?
    } else {
        unsafe_ops::Observed {
            pttl_ms: -2,
            ..Default::default()
        }
    };
    // The holder by name: a grant of this session, this very event's too, with its token.
    let lock_holder = lock.owner.map(|owner| {
        let this = done
            .fencing_token
            .filter(|_| done.owner_token.as_deref() == Some(owner.as_str()))
            .map(|token| (server.to_string(), token));
        match session.owner_of(&owner).or(this) {
            Some((server, token)) => format!("{server} (token {token})"),
            None => "a grant nobody was told of".into(),
        }
    });
    Ok(StepState {
        seq: 0,
        server: String::new(),
        event: done.event.into(),
        owner_token: done.owner_token.clone(),
        fencing_token: done.fencing_token,
        seat_free: done.seat_free,
        seat_sold_to,
        seat_token,
        seat_sales,
        lock_holder,
        lock_pttl_ms: lock.pttl_ms,
        fence_counter: lock.counter,
    })
}

/// Records the event's row (`lab_rows`) and the state after it, in `tx`.
async fn record(
    tx: &mut Transaction<'_, Postgres>,
    session: &Session,
    seq: i32,
    server: &'static str,
    done: &Done,
    mark: Option<&Mark>,
    after: &StepState,
) -> anyhow::Result<()> {
    let at_ms: i64 = sqlx::query_scalar(
        "SELECT (extract(epoch FROM clock_timestamp() - started_at) * 1000)::bigint
           FROM lab_runs WHERE id = $1",
    )
    .bind(session.run_id)
    .fetch_one(&mut **tx)
    .await?;
    let lock_words = after.lock_words();
    let row = NewRow {
        side: session.side,
        seq,
        at_ms,
        server,
        action: &done.action,
        lock_key: if session.protocol.lock {
            &lock_words
        } else {
            "no lock"
        },
        fence_counter: after.fence_counter,
        mark,
    };
    queries::insert_row(&mut **tx, session.run_id, row).await?;
    sqlx::query(
        "INSERT INTO lab_step_states (run_id, seq, server, event, owner_token, fencing_token,
             seat_free, seat_sold_to, seat_token, seat_sales, lock_holder, lock_pttl_ms,
             fence_counter)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
    )
    .bind(session.run_id)
    .bind(seq)
    .bind(server)
    .bind(&after.event)
    .bind(&after.owner_token)
    .bind(after.fencing_token)
    .bind(after.seat_free)
    .bind(&after.seat_sold_to)
    .bind(after.seat_token)
    .bind(after.seat_sales)
    .bind(&after.lock_holder)
    .bind(after.lock_pttl_ms)
    .bind(after.fence_counter)
    .execute(&mut **tx)
    .await?;
    sqlx::query("UPDATE lab_step_sessions SET last_event_at = now() WHERE run_id = $1")
        .bind(session.run_id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Ends session `run_id`: deletes its keys in Redis (with step 2 off one never expires)
/// and its fence ceiling, and takes no event after. Idempotent.
pub(super) async fn end(state: &AppState, run_id: i64) -> anyhow::Result<()> {
    let side: Option<String> = sqlx::query_scalar(
        "UPDATE lab_step_sessions SET ended_at = coalesce(ended_at, now())
          WHERE run_id = $1 RETURNING side",
    )
    .bind(run_id)
    .fetch_optional(&state.db)
    .await?;
    if let Some(side) = side {
        let side = if side == "off" { Side::Off } else { Side::On };
        clean_up(state, run_id, side).await?;
    }
    Ok(())
}

/// Ends every session left without an event for [`IDLE_AFTER`].
async fn end_idle(state: &AppState) -> anyhow::Result<()> {
    let idle: Vec<i64> = sqlx::query_scalar(
        "SELECT run_id FROM lab_step_sessions
          WHERE ended_at IS NULL AND last_event_at < now() - make_interval(secs => $1)",
    )
    .bind(IDLE_AFTER.as_secs_f64())
    .fetch_all(&state.db)
    .await?;
    for run_id in idle {
        end(state, run_id).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(server: &str, event: &str, token: Option<i64>, free: Option<bool>) -> StepState {
        StepState {
            seq: 0,
            server: server.into(),
            event: event.into(),
            owner_token: token.map(|t| format!("owner-{t}")),
            fencing_token: token,
            seat_free: free,
            seat_sold_to: None,
            seat_token: 0,
            seat_sales: 0,
            lock_holder: None,
            lock_pttl_ms: -2,
            fence_counter: None,
        }
    }

    #[test]
    fn a_server_walks_the_protocol_and_may_lapse_while_it_holds_a_lease() {
        let locked = Protocol::of(Step::Fencing, Side::On);
        let mut a = ServerState::default();
        assert_eq!(a.next(locked), [Event::Grant]);
        a = a.after(&state("A", "refused", None, None));
        assert_eq!(
            a.next(locked),
            [Event::Grant],
            "a refusal leaves it to retry"
        );
        for (event, token, free, next) in [
            ("grant", Some(2), None, vec![Event::Read, Event::Lapse]),
            ("read", None, Some(true), vec![Event::Pay, Event::Lapse]),
            (
                "pay",
                None,
                None,
                vec![Event::Pause, Event::Write, Event::Lapse],
            ),
            ("pause", None, None, vec![Event::Wake, Event::Lapse]),
            ("lapse", None, None, vec![Event::Wake]),
            ("wake", None, None, vec![Event::Write]),
            ("write", None, None, vec![Event::Release]),
            ("release", None, None, vec![]),
        ] {
            a = a.after(&state("A", event, token, free));
            assert_eq!(a.next(locked), next, "after {event}");
        }
        assert_eq!(a.lease, Some(("owner-2".into(), 2)));
    }

    #[test]
    fn without_a_lock_a_server_reads_first_and_a_sold_seat_ends_it() {
        let no_lock = Protocol::of(Step::Conditional, Side::Off);
        let b = ServerState::default();
        assert_eq!(b.next(no_lock), [Event::Read]);
        let b = b.after(&state("B", "read", None, Some(false)));
        assert!(b.next(no_lock).is_empty());
        for event in Event::ALL {
            assert_eq!(Event::parse(event.slug()), Some(event));
        }
    }
}
