//! The lab's challenges (`GET /lab/challenges`): tasks with a numeric pass or fail, in
//! the way of Gossip Glomers. The reader gives an answer (A's pause, or which step to
//! switch off); the answer becomes timed lab runs (`run.rs`, each with its permalink),
//! and each run is judged on one side by the history checker that judges the nemesis
//! (`history.rs`, the seatlock-history crate) and by what seat 14C's row counted: sold
//! exactly once, the history valid, no store failure.

use std::time::Duration;

use sqlx::PgPool;

use super::routes::RUNS;
use super::{ClockServer, DEFAULT_PAUSE, Fault, MAX_PAUSE, Scenario, Side, Step, queries};
use seatlock::state::AppState;

/// The seed of every challenge's runs (B's and C's start offsets).
pub(super) const SEED: u64 = 21;
/// How many of an attempt's runs go at once (each takes one of the server's run permits):
/// two, so that an attempt's own runs slow each other little (the schedule keeps its
/// events a quarter second apart, `SLACK`; a loaded machine can eat that).
const AT_ONCE: usize = 2;

/// What the reader answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Answer {
    /// A's pause, in milliseconds.
    PauseMs,
    /// The step to switch off, or `none`.
    Step,
}

/// One challenge.
#[derive(Clone, Copy, Debug)]
pub(super) struct Challenge {
    /// Its URL segment.
    pub slug: &'static str,
    /// Its task, for a person.
    pub task: &'static str,
    /// What the reader answers.
    pub answer: Answer,
    /// A hint: what to think about.
    pub hint: &'static str,
}

/// Every challenge.
pub(super) const CHALLENGES: [Challenge; 2] = [
    Challenge {
        slug: "slow-holder",
        task: "Keep the unfenced lease (step 4 off) from selling 14C twice under seed 21, when A pauses before its write: choose A's pause.",
        answer: Answer::PauseMs,
        hint: "The lease is 1.8 s; A pays for 0.6 s before it pauses. Without a fence, only time protects the seat.",
    },
    Challenge {
        slug: "every-fault",
        task: "Sell 14C exactly once under every fault (seed 21): choose the one step you may switch off, or none.",
        answer: Answer::Step,
        hint: "Each fault breaks some step: the answer is checked against every one. What is judged is the seat (sold once, a valid history), not the lock.",
    },
];

impl Challenge {
    /// The challenge named `slug`, if any.
    pub(super) fn find(slug: &str) -> Option<Challenge> {
        CHALLENGES.into_iter().find(|c| c.slug == slug)
    }

    /// The runs `answer` asks for, each with the side it is judged on, on a server that
    /// offers `faults`; or why the answer is not one (a sentence for a 400).
    pub(super) fn runs(
        &self,
        answer: &str,
        faults: &[Fault],
    ) -> Result<Vec<(Scenario, Side)>, String> {
        match self.answer {
            Answer::PauseMs => {
                let pause_ms: u64 = answer
                    .trim()
                    .parse()
                    .map_err(|_| "The pause must be a whole number of milliseconds.".to_string())?;
                let pause = Duration::from_millis(pause_ms);
                if pause > MAX_PAUSE {
                    return Err(format!(
                        "The pause may be at most {} ms.",
                        MAX_PAUSE.as_millis()
                    ));
                }
                let scenario = Scenario {
                    step: Step::Fencing,
                    fault: Fault::PauseBeforeWrite,
                    pause,
                    seed: SEED,
                };
                Ok(vec![(scenario, Side::Off)])
            }
            Answer::Step => {
                // "none": every step on, any step's `on` side (fencing's, the lab's default).
                let (step, side) = match answer.trim() {
                    "none" => (Step::Fencing, Side::On),
                    slug => (
                        Step::parse(slug).ok_or("The lab has no such step.")?,
                        Side::Off,
                    ),
                };
                let run = |fault| Scenario {
                    step,
                    fault,
                    pause: DEFAULT_PAUSE,
                    seed: SEED,
                };
                Ok(faults.iter().map(|f| (run(*f), side)).collect())
            }
        }
    }
}

/// Records an attempt at `challenge` with `answer` and its runs, and starts the runs in
/// the background ([`AT_ONCE`] at a time, each with a run permit, waiting for one if
/// the server is busy; `clock` for a clock jump's). Returns the attempt's id.
pub(super) async fn attempt(
    state: &AppState,
    challenge: Challenge,
    answer: &str,
    runs: Vec<(Scenario, Side)>,
    clock: ClockServer,
) -> sqlx::Result<i64> {
    let mut tx = state.db.begin().await?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO lab_challenge_attempts (challenge, answer) VALUES ($1, $2) RETURNING id",
    )
    .bind(challenge.slug)
    .bind(answer.trim())
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    let mut started = Vec::new();
    for (scenario, side) in runs {
        let run_id = queries::create_run(&state.db, &scenario, true).await?;
        sqlx::query(
            "INSERT INTO lab_challenge_runs (attempt_id, run_id, side) VALUES ($1, $2, $3)",
        )
        .bind(id)
        .bind(run_id)
        .bind(side.as_str())
        .execute(&state.db)
        .await?;
        started.push((run_id, scenario));
    }
    let state = state.clone();
    tokio::spawn(async move {
        for batch in started.chunks(AT_ONCE) {
            let Ok(permits) = RUNS.acquire_many(batch.len() as u32).await else {
                return;
            };
            // Their turn: their clocks start now, not when the answer was sent (a run
            // page would cut off a run that waited long enough, and delete its keys
            // while it runs: found by a hostile test).
            // A run cut off while it waited has its verdict and does not run.
            let ids: Vec<i64> = batch.iter().map(|(run_id, _)| *run_id).collect();
            let started = queries::start_clocks(&state.db, &ids)
                .await
                .unwrap_or_else(|err| {
                    tracing::warn!(error = %err, "lab challenge: the runs' clocks not started");
                    Vec::new()
                });
            let mut going = tokio::task::JoinSet::new();
            for (run_id, scenario) in batch.iter().copied() {
                if !started.contains(&run_id) {
                    continue;
                }
                going.spawn(super::run::run(
                    state.clone(),
                    run_id,
                    scenario,
                    clock.clone(),
                ));
            }
            while going.join_next().await.is_some() {}
            drop(permits);
        }
    });
    Ok(id)
}

/// One run of an attempt, as judged.
#[derive(Clone, Debug, sqlx::FromRow)]
pub(super) struct Judged {
    pub run_id: i64,
    /// The run's fault (its slug).
    pub fault: String,
    /// The side judged.
    pub side: String,
    pub finished: bool,
    /// How many times seat 14C's row on that side accepted a sale.
    pub sales: i32,
    /// The history checker's verdict on that side (`None` until the side ended), and
    /// the kinds of promise it found broken, comma-separated.
    pub history_valid: Option<bool>,
    pub history_anomalies: String,
    /// Leases the checker saw granted while another holder's may still have run: a lock
    /// broken (step 3 off) or a lease lost with Redis. Counted, not judged: the fence
    /// is there for them.
    pub history_double_grants: i32,
    /// Rows marked as a store that failed, on that side.
    pub failures: i64,
}

impl Judged {
    /// Passed: finished, sold exactly once, a valid history, no failure.
    pub(super) fn passed(&self) -> bool {
        self.finished && self.sales == 1 && self.history_valid == Some(true) && self.failures == 0
    }

    /// How many promises the history checker found broken.
    pub(super) fn violations(&self) -> usize {
        self.history_anomalies
            .split(',')
            .filter(|k| !k.is_empty())
            .count()
    }

    /// The fault for a person.
    pub(super) fn fault_title(&self) -> &'static str {
        Fault::parse(&self.fault).map_or("?", Fault::title)
    }
}

/// An attempt: its challenge and answer, and each run judged.
pub(super) struct Attempt {
    pub challenge: Challenge,
    pub answer: String,
    pub runs: Vec<Judged>,
}

impl Attempt {
    /// `None` while a run goes; then whether every run passed.
    pub(super) fn verdict(&self) -> Option<bool> {
        self.runs
            .iter()
            .all(|r| r.finished)
            .then(|| self.runs.iter().all(Judged::passed))
    }

    /// The numbers: "6 runs: 14C sold 1, 1, 1, 1, 1, 1 times; 0 violations".
    pub(super) fn numbers(&self) -> String {
        let sales: Vec<String> = self.runs.iter().map(|r| r.sales.to_string()).collect();
        let violations: usize = self.runs.iter().map(Judged::violations).sum();
        let passed = self.runs.iter().filter(|r| r.passed()).count();
        format!(
            "{passed} of {} runs passed: 14C sold {} time(s); {violations} violation(s)",
            self.runs.len(),
            sales.join(", "),
        )
    }
}

/// Attempt `id`, judged as its runs stand now, if it exists.
pub(super) async fn judge(db: &PgPool, id: i64) -> sqlx::Result<Option<Attempt>> {
    let found: Option<(String, String)> =
        sqlx::query_as("SELECT challenge, answer FROM lab_challenge_attempts WHERE id = $1")
            .bind(id)
            .fetch_optional(db)
            .await?;
    let Some((slug, answer)) = found else {
        return Ok(None);
    };
    let Some(challenge) = Challenge::find(&slug) else {
        return Ok(None);
    };
    let runs = sqlx::query_as(
        "SELECT r.id AS run_id, r.fault, c.side, r.finished_at IS NOT NULL AS finished,
                s.sales, s.history_valid, s.history_anomalies, s.history_double_grants,
                (SELECT count(*) FROM lab_rows w
                  WHERE w.run_id = r.id AND w.side = c.side AND w.mark = 'failed') AS failures
           FROM lab_challenge_runs c
           JOIN lab_runs r ON r.id = c.run_id
           JOIN lab_seats s ON s.run_id = c.run_id AND s.side = c.side
          WHERE c.attempt_id = $1
          ORDER BY r.id",
    )
    .bind(id)
    .fetch_all(db)
    .await?;
    Ok(Some(Attempt {
        challenge,
        answer,
        runs,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_answer_asks_for_its_runs_and_a_bad_one_is_refused() {
        let all = &Fault::ALL;
        let slow = Challenge::find("slow-holder").unwrap();
        let runs = slow.runs("300", all).unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].0.pause, Duration::from_millis(300));
        assert_eq!(runs[0].1, Side::Off);
        assert!(slow.runs("10001", all).unwrap_err().contains("at most"));
        assert!(slow.runs("soon", all).is_err());
        let every = Challenge::find("every-fault").unwrap();
        let all_on = every.runs("none", all).unwrap();
        assert_eq!(all_on.len(), Fault::ALL.len());
        assert!(all_on.iter().all(|(_, side)| *side == Side::On));
        assert!(
            every
                .runs("ledger", all)
                .unwrap()
                .iter()
                .all(|(s, side)| { s.step == Step::Ledger && *side == Side::Off })
        );
        assert!(every.runs("step-9", all).is_err());
        // Without a clock server, every fault but the clock jump.
        let offered = ClockServer::default().offered();
        let without_clock = every.runs("none", &offered).unwrap();
        assert_eq!(without_clock.len(), Fault::ALL.len() - 1);
        assert!(
            without_clock
                .iter()
                .all(|(s, _)| s.fault != Fault::ClockJump)
        );
    }
}
