//! The lab in the browser, `GET /lab` (served only with `--enable-race-lab`): the
//! article's table built live. A reader switches off one of the article's five steps (or
//! uses no lock at all), picks the fault that breaks it, and presses Run; three simulated
//! servers, A, B and C, race for seat 14C, and every operation they make becomes a row of
//! the table, pushed to the page as it happens. The same race runs beside it with every
//! step on, so the row where one side goes wrong is the row where the other refuses.
//!
//! **Real, not animated.** The servers are tasks of this process, each with its own Redis
//! connection and its own [`lease::LeaseClient`]: with a step on they call the lease
//! library exactly as the seat picker does (`acquire.lua`, `release.lua`, the fence block
//! reserved in Postgres, the failover guard). With a step off, only that operation is
//! replaced, by the unsafe thing a first attempt would do (`unsafe_ops.rs`): `SET` without
//! `NX`, a key without `PX`, a plain `DEL`, a write nobody fences, fencing tokens whose
//! ledger lives in the Redis that loses them. The seat's row is a Postgres row
//! (`lab_seats`, migrations/0011), the article's seat database: with fencing on it
//! rejects a write whose token is lower than the last one it accepted, and checks nothing
//! else. `check.rs` marks each row as it is recorded: a violation of the article's
//! invariant, or a refusal that kept it.
//!
//! **The schedule** (`simulated.rs`): A starts at 0, B and C one and two [`STAGGER`]s
//! later (plus up to [`JITTER_MS`] drawn from the seed). Each takes the lock (retrying
//! every [`RETRY`] while someone holds it, giving up after [`GIVE_UP`]), reads the seat,
//! charges the card ([`PAYMENT`]), writes "sold", sends the ticket ([`TICKET`]) and
//! releases; the lease is [`LEASE_TTL`]; the fault happens to A. Why these numbers put
//! each step's default fault ([`Step::default_fault`]) where the article puts it, and the
//! warm-up before the start line: docs/race-lab.md, "The lab in the browser".

mod challenge;
mod challenge_routes;
mod check;
mod history;
mod net_delay;
mod own_redis;
mod queries;
mod replay;
mod replay_routes;
mod routes;
mod run;
mod simulated;
mod step_routes;
mod stepper;
mod unsafe_ops;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use seatlock::http::error::{Error, Result};

pub use own_redis::{die_with_parent, free_port, libfaketime};
pub use stepper::STALLED_HOLDER;

/// The lab's routes: the timed runs', step mode's, the challenges' and the model's
/// replay's (merged by `crate::server::router`). `clock_server` is `--lab-clock-server`, for the runs whose
/// Redis's clock jumps (`ClockServer`).
pub fn router(clock_server: Option<&str>) -> axum::Router<seatlock::state::AppState> {
    routes::router()
        .merge(step_routes::routes())
        .merge(challenge_routes::routes())
        .merge(replay_routes::routes())
        .layer(axum::Extension(ClockServer(clock_server.map(Arc::from))))
}

/// `--lab-clock-server`, as the handlers that start runs see it: the Redis-protocol
/// server that runs under libfaketime, from which a run with [`Fault::ClockJump`] starts
/// a Redis of its own (`own_redis.rs`). `None`: this server does not offer that fault.
#[derive(Clone, Debug, Default)]
pub(crate) struct ClockServer(Option<Arc<str>>);

impl ClockServer {
    /// Whether this server can run `fault`: every fault, but the clock jump only with a
    /// clock server.
    fn offers(&self, fault: Fault) -> bool {
        fault != Fault::ClockJump || self.0.is_some()
    }

    /// The faults this server offers, in [`Fault::ALL`]'s order.
    fn offered(&self) -> Vec<Fault> {
        Fault::ALL.into_iter().filter(|f| self.offers(*f)).collect()
    }

    /// A 400 that says what is missing, for a `fault` this server does not offer.
    fn refuse_unless_offered(&self, fault: Fault) -> Result<()> {
        if self.offers(fault) {
            return Ok(());
        }
        Err(Error::BadRequest(format!(
            "\"{}\" needs a Redis whose clock the lab can move, and this server was started \
             without one: start it with --lab-clock-server (SEATLOCK_LAB_CLOCK_SERVER; \
             `scripts/services.sh clock-server` fetches it, and `make lab` passes it).",
            fault.title()
        )))
    }

    /// The binary, for a run of [`Fault::ClockJump`]. Errors: there is none.
    fn binary(&self) -> anyhow::Result<&str> {
        self.0
            .as_deref()
            .ok_or_else(|| anyhow::anyhow!("this server has no --lab-clock-server"))
    }
}

/// The simulated servers of each side, by name (each its holder label).
pub(crate) const SERVERS: [&str; 3] = ["A", "B", "C"];

/// The lease on 14C: longer than a holder's payment and ticket ([`SLACK`] to spare), so
/// a server that does not pause finishes inside it.
pub const LEASE_TTL: Duration = Duration::from_millis(1800);
/// How long a refused server waits before it tries `SET … NX` again.
pub const RETRY: Duration = Duration::from_millis(100);
/// How long a refused server keeps trying before it gives up, from its start.
pub const GIVE_UP: Duration = Duration::from_secs(5);
/// Charging the card: between reading the seat and writing "sold".
pub const PAYMENT: Duration = Duration::from_millis(600);
/// Sending the ticket: between writing "sold" and releasing the lock.
pub const TICKET: Duration = Duration::from_millis(900);
/// A's pause when the reader does not choose one: past its lease, waking after B's
/// write and before B's release, [`SLACK`] from each.
pub const DEFAULT_PAUSE: Duration = Duration::from_millis(2300);
/// The least time between any two events the default faults put in order (a test below
/// checks it for every start delay): on a busy machine each round trip may be slow, and
/// the story must not change with it.
pub const SLACK: Duration = Duration::from_millis(250);
/// The longest pause a reader may ask for.
pub const MAX_PAUSE: Duration = Duration::from_secs(10);
/// The longest a run may take (the longest pause, then the longest give-up, with room to
/// spare): a run still unfinished then is cut short, and one whose server stopped is
/// shown as cut off.
pub const RUN_LIMIT: Duration = Duration::from_secs(30);
/// How long after its start an unfinished run is taken for one whose server stopped: its
/// limit, plus time for its preparation (connections, the warm-up) on slow stores.
pub const CUT_OFF_AFTER: Duration = Duration::from_secs(45);
/// How much later than A each next server starts: B one stagger after A, C two (not a
/// multiple of [`RETRY`], so B's and C's tries never coincide).
pub const STAGGER: Duration = Duration::from_millis(140);
/// The most the seed adds to B's and C's start, in milliseconds.
pub const JITTER_MS: u64 = 20;
/// The seed the form offers.
pub const DEFAULT_SEED: u32 = 42;
/// [`Fault::ClockJump`]: how far the wall clock of the run's Redis jumps forward, more
/// than the whole lease, so that A's lease ends at once by Redis's clock.
pub const CLOCK_JUMP: Duration = Duration::from_secs(2);
/// [`Fault::ClockJump`]: A's payment, from its grant to its write (its card is slow).
/// The jump comes [`PAYMENT`] into it, and A writes [`SLACK`] before its lease ends by
/// its own clock: after the next holder's write (a test below checks it for every
/// start delay), and inside the lease as far as A can tell.
pub const SLOW_PAYMENT: Duration = Duration::from_millis(1550);
/// The seat the servers race for (the article's).
pub const SEAT: &str = "14C";
/// [`Step::LockDelay`]'s lock-delay: after a lease lapses, nobody is granted the lock
/// for this long. The default pause outlasts the lease by more (the next holder reads 14C
/// free before A writes: both writes land, in either order); a pause of 1.5 s does not (A
/// writes first, and the next holder finds 14C sold).
pub const LOCK_DELAY: Duration = Duration::from_millis(700);

/// Which of the article's steps a run switches off, or [`Step::Conditional`]: no lock at
/// all, a read-then-write against the article's lock-free answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Step 1: `SET` without `NX` overwrites the key another server created.
    CreateIfAbsent,
    /// Step 2: the key is created without `PX`: it never expires.
    Lease,
    /// Step 3: release is a plain `DEL`, whoever holds the key.
    OwnerCheck,
    /// Step 4: the seat's row accepts a write whatever its token.
    Fencing,
    /// Step 5: tokens come from blocks recorded in the same Redis (lost with it), and
    /// the failover guard is off.
    Ledger,
    /// No lock: read, pay, write (off) against `UPDATE … WHERE sold = false` (on).
    Conditional,
    /// Chubby's answer instead of step 4, for a resource that cannot check a sequencer:
    /// no fence, but after a lease lapses nobody is granted the lock for [`LOCK_DELAY`].
    LockDelay,
}

impl Step {
    /// Every choice, in the article's order, then the lock-delay beside the fence.
    pub const ALL: [Step; 7] = [
        Step::CreateIfAbsent,
        Step::Lease,
        Step::OwnerCheck,
        Step::Fencing,
        Step::Ledger,
        Step::Conditional,
        Step::LockDelay,
    ];

    /// The value in URLs and forms (`create-if-absent`, `lease`, …).
    pub fn slug(self) -> &'static str {
        match self {
            Step::CreateIfAbsent => "create-if-absent",
            Step::Lease => "lease",
            Step::OwnerCheck => "owner-check",
            Step::Fencing => "fencing",
            Step::Ledger => "ledger",
            Step::Conditional => "conditional",
            Step::LockDelay => "lock-delay",
        }
    }

    /// What is switched off, for a person.
    pub fn off_title(self) -> &'static str {
        match self {
            Step::CreateIfAbsent => "Step 1 off: SET without NX",
            Step::Lease => "Step 2 off: a key without expiry",
            Step::OwnerCheck => "Step 3 off: release is a plain DEL",
            Step::Fencing => "Step 4 off: no fencing token check",
            Step::Ledger => "Step 5 off: tokens kept only in Redis",
            Step::Conditional => "No lock: read, then write",
            Step::LockDelay => "Step 4 swapped for a lock-delay",
        }
    }

    /// The other side's title.
    pub fn on_title(self) -> &'static str {
        match self {
            Step::Conditional => "No lock: UPDATE … WHERE sold = false",
            // Step 5 as this project has it: a durable token ledger over one Redis, which
            // can still lose a lease and grant it again (etcd would not).
            _ => "All five steps on (step 5 in part: tokens from Postgres, one Redis)",
        }
    }

    /// The article's lesson for this step, after its words (step 5 as this project has
    /// it: durable tokens over one Redis; the article goes on to a consensus store).
    pub fn lesson(self) -> &'static str {
        match self {
            Step::CreateIfAbsent => {
                "A key that only one can create: SET lock:14C owner NX. A's command succeeds; B's fails."
            }
            Step::Lease => {
                "A lease, so crashes do not hold the seat forever: with PX the key vanishes on its own."
            }
            Step::OwnerCheck => {
                "Release only your own lock: a slow A's plain delete would remove B's lock, so the delete checks the owner."
            }
            Step::Fencing => {
                "Fence the slow holder: the seat's row rejects a write whose token is lower than the last one it saw."
            }
            Step::Ledger => {
                "Make the lock service survive: tokens must never go backwards when Redis restarts empty or fails over."
            }
            Step::Conditional => {
                "Can you avoid the lock? UPDATE seats SET sold = 1 WHERE id = '14C' AND sold = 0 is atomic without any lock service; the lock is only worth it when the work spans several steps or services."
            }
            Step::LockDelay => {
                "Chubby's answer for a server that cannot check a sequencer: after a lease lapses, nobody is granted the lock for a lock-delay, so the old holder's work drains first. A pause that outlasts the lease by more than the delay still sells 14C twice; the fence does not care how long the pause was."
            }
        }
    }

    /// The fault that breaks this step, preselected on the form.
    pub fn default_fault(self) -> Fault {
        match self {
            Step::CreateIfAbsent | Step::Conditional => Fault::None,
            Step::Lease => Fault::CrashAfterGrant,
            Step::OwnerCheck | Step::Fencing | Step::LockDelay => Fault::PauseBeforeWrite,
            Step::Ledger => Fault::RedisRestart,
        }
    }

    /// The step named by `slug`, if any.
    pub fn parse(slug: &str) -> Option<Step> {
        Step::ALL.into_iter().find(|s| s.slug() == slug)
    }
}

/// What happens to server A during a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Nothing: the servers simply race.
    None,
    /// A pauses (a GC pause, a stalled VM) after charging the card, before its write.
    PauseBeforeWrite,
    /// A pauses after its write (and the ticket), before its release.
    PauseBeforeRelease,
    /// A crashes right after it takes the lock: it never writes nor releases.
    CrashAfterGrant,
    /// A crashes after charging the card, before its write.
    CrashBeforeWrite,
    /// Redis loses every key of the lock (a restart without persistence) while A pauses
    /// before its write.
    RedisRestart,
    /// A sends its write inside its lease, and the network holds it for the pause
    /// (`net_delay.rs`: a proxy between A and Postgres).
    WriteDelayed,
    /// While A pays (slowly: [`SLOW_PAYMENT`]), the wall clock of the run's Redis jumps
    /// forward [`CLOCK_JUMP`]: A's lease ends by Redis's clock while A's own says it has
    /// time left. The run's lock lives on a Redis of its own, under libfaketime
    /// (`own_redis.rs`); offered only with `--lab-clock-server` (`ClockServer`).
    ClockJump,
}

impl Fault {
    /// Every choice.
    pub const ALL: [Fault; 8] = [
        Fault::None,
        Fault::PauseBeforeWrite,
        Fault::PauseBeforeRelease,
        Fault::CrashAfterGrant,
        Fault::CrashBeforeWrite,
        Fault::RedisRestart,
        Fault::WriteDelayed,
        Fault::ClockJump,
    ];

    /// The value in URLs and forms.
    pub fn slug(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::PauseBeforeWrite => "pause-before-write",
            Fault::PauseBeforeRelease => "pause-before-release",
            Fault::CrashAfterGrant => "crash-after-grant",
            Fault::CrashBeforeWrite => "crash-before-write",
            Fault::RedisRestart => "redis-restart",
            Fault::WriteDelayed => "write-delayed",
            Fault::ClockJump => "clock-jump",
        }
    }

    /// The fault for a person.
    pub fn title(self) -> &'static str {
        match self {
            Fault::None => "none: three servers race",
            Fault::PauseBeforeWrite => "A pauses before its write",
            Fault::PauseBeforeRelease => "A pauses before its release",
            Fault::CrashAfterGrant => "A crashes holding the lock",
            Fault::CrashBeforeWrite => "A crashes before its write",
            Fault::RedisRestart => "Redis restarts empty while A pauses",
            Fault::WriteDelayed => "A's write is delayed in the network",
            Fault::ClockJump => "Redis's clock jumps forward while A pays",
        }
    }

    /// Whether A pauses (for [`Scenario::fault_pause`], and the run page's terms).
    fn pauses(self) -> bool {
        matches!(
            self,
            Fault::PauseBeforeWrite
                | Fault::PauseBeforeRelease
                | Fault::RedisRestart
                | Fault::WriteDelayed
        )
    }

    /// The fault named by `slug`, if any.
    pub fn parse(slug: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.slug() == slug)
    }
}

/// One run's question: the step switched off, A's fault, how long A pauses, and the seed
/// that draws B's and C's start offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// Switched off on the run's `off` side.
    pub step: Step,
    /// What happens to A, on both sides.
    pub fault: Fault,
    /// A's pause (used by the pausing faults), at most [`MAX_PAUSE`].
    pub pause: Duration,
    /// Draws B's and C's extra start offsets, 0 to 20 ms.
    pub seed: u64,
}

impl Scenario {
    /// A's pause for this run's fault, zero if it does not pause.
    fn fault_pause(&self) -> Duration {
        if self.fault.pauses() {
            self.pause
        } else {
            Duration::ZERO
        }
    }
}

/// A run's two sides: the step switched off, and every step on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The scenario's step is switched off.
    Off,
    /// Every step on (for [`Step::Conditional`]: the conditional `UPDATE`).
    On,
}

impl Side {
    /// `off` or `on`, as stored in `lab_rows.side`.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Off => "off",
            Side::On => "on",
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the schedule puts the next holder for the default pause (steps 3 and 4),
    /// if A's grant comes `late` after the start line and the seed draws `jitter_ms` for
    /// B and C: its lease from the first try, B's or C's on the [`RETRY`] grid, after
    /// A's lapses; its write after the payment, its release after the ticket; and when
    /// A wakes.
    fn pause_story(late: Duration, jitter_ms: [u64; 2]) -> (Duration, Duration, Duration) {
        let lapse = late + LEASE_TTL;
        let first_try_after = |start: Duration| {
            let mut tries = (0..).map(|n| start + RETRY * n);
            tries.find(|t| *t >= lapse).unwrap()
        };
        let b = first_try_after(STAGGER + Duration::from_millis(jitter_ms[0]));
        let c = first_try_after(STAGGER * 2 + Duration::from_millis(jitter_ms[1]));
        let granted = b.min(c);
        let a_wakes = late + PAYMENT + DEFAULT_PAUSE;
        (granted + PAYMENT, a_wakes, granted + PAYMENT + TICKET)
    }

    #[test]
    fn the_default_pause_wakes_a_between_the_next_write_and_release_however_late_a_was() {
        for late_ms in (0..=600).step_by(5) {
            for b_ms in (0..=JITTER_MS).step_by(4) {
                for c_ms in (0..=JITTER_MS).step_by(4) {
                    let late = Duration::from_millis(late_ms);
                    let (writes, a_wakes, releases) = pause_story(late, [b_ms, c_ms]);
                    assert!(
                        a_wakes >= writes + SLACK && a_wakes + SLACK <= releases,
                        "A granted {late_ms} ms late, jitter {b_ms}/{c_ms}: the next holder \
                         writes at {writes:?}, A wakes at {a_wakes:?}, it releases at \
                         {releases:?}"
                    );
                }
            }
        }
    }

    /// The clock jump's story, wherever A's grant came (`late` after the start line) and
    /// whatever the seed draws for B and C: Redis's clock jumps [`PAYMENT`] after A's
    /// grant, by more than the lease has left, so the next holder is granted at its first
    /// try after the jump (on the [`RETRY`] grid) and writes after its payment; A writes
    /// at the end of its [`SLOW_PAYMENT`]. [`SLACK`] between the next holder's write and
    /// A's, and between A's write and the end of its lease by its own clock.
    #[test]
    fn the_clock_jump_lets_the_next_holder_write_before_a_however_late_a_was() {
        assert!(CLOCK_JUMP > LEASE_TTL, "the jump ends a whole lease");
        assert!(
            SLOW_PAYMENT + SLACK <= LEASE_TTL,
            "A writes inside its lease"
        );
        assert!(
            PAYMENT + SLACK <= SLOW_PAYMENT,
            "the jump comes while A pays"
        );
        for late_ms in (0..=600).step_by(5) {
            for b_ms in (0..=JITTER_MS).step_by(4) {
                for c_ms in (0..=JITTER_MS).step_by(4) {
                    let late = Duration::from_millis(late_ms);
                    let jump = late + PAYMENT;
                    let first_try_after = |start: Duration| {
                        let mut tries = (0..).map(|n| start + RETRY * n);
                        tries.find(|t| *t >= jump).unwrap()
                    };
                    let b = first_try_after(STAGGER + Duration::from_millis(b_ms));
                    let c = first_try_after(STAGGER * 2 + Duration::from_millis(c_ms));
                    let next_writes = b.min(c) + PAYMENT;
                    let a_writes = late + SLOW_PAYMENT;
                    assert!(
                        next_writes + SLACK <= a_writes,
                        "A granted {late_ms} ms late, jitter {b_ms}/{c_ms}: the next holder \
                         writes at {next_writes:?}, A at {a_writes:?}"
                    );
                }
            }
        }
    }

    /// The lock-delay's story, wherever A's grant came: with the default pause, the next
    /// holder's first try after the delay (on the [`RETRY`] grid) reads 14C before A
    /// writes; with a 1.5 s pause A writes before anyone may be granted the lock.
    /// [`SLACK`] from each.
    #[test]
    fn the_default_pause_outlasts_the_lock_delay_and_a_short_one_does_not() {
        let a_writes = |pause: Duration| PAYMENT + pause;
        let delay_ends = LEASE_TTL + LOCK_DELAY;
        assert!(delay_ends + RETRY + SLACK <= a_writes(DEFAULT_PAUSE));
        assert!(a_writes(Duration::from_millis(1500)) + SLACK <= delay_ends);
    }

    #[test]
    fn b_and_c_arrive_while_a_holds_and_a_holder_finishes_inside_its_lease() {
        assert!(PAYMENT + TICKET + SLACK <= LEASE_TTL);
        // B and C try while A holds the lock (steps 1 and 2, and the conditional write's
        // reads before A's write).
        assert!(STAGGER * 2 + Duration::from_millis(JITTER_MS) + SLACK <= PAYMENT);
        assert_ne!(STAGGER.as_millis() % RETRY.as_millis(), 0);
    }
}
