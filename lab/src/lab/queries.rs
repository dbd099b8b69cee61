//! The lab's Postgres side (migrations/0011): its runs, seat 14C's row per run and side
//! (the protected resource), and the recorded rows.

use serde::Serialize;
use sqlx::PgPool;

use super::check::{Action, Mark, WriteRule};
use super::{CUT_OFF_AFTER, Fault, Scenario, Side, Step};

/// When a run is taken for one whose server stopped, in SQL on `lab_runs` (`$1` is
/// [`CUT_OFF_AFTER`] in seconds): unfinished, and started more than that ago; or a
/// challenge's run still waiting for its turn (`started_at` is infinity until
/// [`start_clocks`]) 15 minutes after its attempt was sent. The turns are handed out by
/// the process that took the attempt, so a server that stopped leaves its queued runs
/// waiting for good (found by a hostile test); 15 minutes is far more than a full queue
/// of four runs at a time takes.
macro_rules! stale {
    () => {
        "finished_at IS NULL AND (started_at < now() - make_interval(secs => $1)
          OR (started_at = 'infinity' AND EXISTS (
                SELECT 1 FROM lab_challenge_runs c
                  JOIN lab_challenge_attempts a ON a.id = c.attempt_id
                 WHERE c.run_id = lab_runs.id AND a.created_at < now() - interval '15 minutes')))"
    };
}

/// The columns of a [`Run`]; `$1` is [`CUT_OFF_AFTER`] in seconds.
const RUN_COLUMNS: &str = concat!(
    "id, step, fault, pause_ms, seed, finished_at IS NOT NULL AS finished, cut_off, ",
    stale!(),
    " AS stale"
);

/// A recorded run, as its page and its history show it.
#[derive(Clone, Debug, Serialize, sqlx::FromRow)]
pub(super) struct Run {
    /// `lab_runs.id`: the permalink is `/lab/runs/{id}`.
    pub(super) id: i64,
    /// The step switched off (its slug).
    pub(super) step: String,
    /// A's fault (its slug).
    pub(super) fault: String,
    /// A's pause, in milliseconds.
    pub(super) pause_ms: i32,
    /// The seed of B's and C's start offsets.
    pub(super) seed: i64,
    /// Whether the run has finished, or was cut off.
    pub(super) finished: bool,
    /// Found unfinished [`CUT_OFF_AFTER`] after it started: the server running it stopped.
    pub(super) cut_off: bool,
    /// Unfinished, and started more than [`CUT_OFF_AFTER`] ago: to be cut off
    /// ([`cut_off_if_stale`]).
    #[serde(skip)]
    pub(super) stale: bool,
}

impl Run {
    /// The run's question, parsed back (`None` for a slug this build does not know).
    pub(super) fn scenario(&self) -> Option<Scenario> {
        Some(Scenario {
            step: Step::parse(&self.step)?,
            fault: Fault::parse(&self.fault)?,
            pause: std::time::Duration::from_millis(self.pause_ms as u64),
            seed: self.seed as u64,
        })
    }
}

/// One recorded row of a run's table.
#[derive(Clone, Debug, Serialize, sqlx::FromRow)]
pub(super) struct Row {
    /// `off` or `on`.
    pub(super) side: String,
    /// Its place in its side's table, from 1.
    pub(super) seq: i32,
    /// Milliseconds from the run's start.
    pub(super) at_ms: i64,
    /// A, B, C or `lab`.
    pub(super) server: String,
    /// What the server did.
    pub(super) did: String,
    /// The lease key after the operation: holder and TTL, in words.
    pub(super) lock_key: String,
    /// The fencing counter after the operation.
    pub(super) fence_counter: Option<i64>,
    /// What the seat's row accepted or refused.
    pub(super) seat: String,
    /// The checker's mark kind, if any.
    pub(super) mark_kind: Option<String>,
    /// The mark's class: `violation`, `saved` or `failed`.
    pub(super) mark: Option<String>,
    /// The mark's sentence.
    pub(super) sentence: Option<String>,
}

/// Records a new run and its two seat rows (14C unsold, no token accepted); returns its id.
/// A `queued` run (a challenge's, waiting for its turn among the runs going) starts its
/// clock only at [`start_clocks`]: until then its `started_at` is `infinity`, so no page
/// judges it stale and cuts it off while it waits.
pub(super) async fn create_run(
    db: &PgPool,
    scenario: &Scenario,
    queued: bool,
) -> sqlx::Result<i64> {
    let mut tx = db.begin().await?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO lab_runs (step, fault, pause_ms, seed, started_at)
         VALUES ($1, $2, $3, $4, CASE WHEN $5 THEN 'infinity'::timestamptz ELSE now() END)
         RETURNING id",
    )
    .bind(scenario.step.slug())
    .bind(scenario.fault.slug())
    .bind(scenario.pause.as_millis() as i32)
    .bind(scenario.seed as i64)
    .bind(queued)
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query("INSERT INTO lab_seats (run_id, side) VALUES ($1, 'off'), ($1, 'on')")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(id)
}

/// `lab_runs.fault` of a replay of the model's counterexample (`replay.rs`), which no
/// list of timed runs shows.
pub(super) const REPLAY: &str = "replay";

/// Records a replay of the counterexample `slug` (finished as it starts: nothing runs in
/// the background) and its one seat row, on the `off` side; returns its id.
pub(super) async fn create_replay_run(db: &PgPool, slug: &str) -> sqlx::Result<i64> {
    let mut tx = db.begin().await?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO lab_runs (step, fault, pause_ms, seed, finished_at)
         VALUES ($1, $2, 0, 0, now()) RETURNING id",
    )
    .bind(slug)
    .bind(REPLAY)
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query("INSERT INTO lab_seats (run_id, side) VALUES ($1, 'off')")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(id)
}

/// Starts the clocks of the queued runs `ids` ([`create_run`]): their turn has come.
/// Returns those started: not one a reader's page cut off meanwhile, as a run whose
/// queue outlasted [`stale!`]'s bound is (it has its verdict; found by a hostile test).
pub(super) async fn start_clocks(db: &PgPool, ids: &[i64]) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar(
        "UPDATE lab_runs SET started_at = now()
          WHERE id = ANY($1) AND finished_at IS NULL RETURNING id",
    )
    .bind(ids)
    .fetch_all(db)
    .await
}

/// Marks run `id` finished and cut off if it is stale ([`stale!`]: its server stopped
/// mid-way, or before its turn came); returns whether this call did, so that the
/// one caller that did cleans up after it.
pub(super) async fn cut_off_if_stale(db: &PgPool, id: i64) -> sqlx::Result<bool> {
    sqlx::query(concat!(
        "UPDATE lab_runs SET finished_at = now(), cut_off = true WHERE id = $2 AND ",
        stale!()
    ))
    .bind(CUT_OFF_AFTER.as_secs_f64())
    .bind(id)
    .execute(db)
    .await
    .map(|done| done.rows_affected() == 1)
}

/// Deletes lease group `group`'s ceiling from the product's fence ledger
/// (`fence_ceilings`). Only for a group that will never be granted again: a finished
/// run's. A live group's next block would start again at 1.
pub(super) async fn forget_fence_ceiling(db: &PgPool, group: &str) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM fence_ceilings WHERE lease_group = $1")
        .bind(group)
        .execute(db)
        .await
        .map(drop)
}

/// Marks run `id` finished: its stream ends.
pub(super) async fn finish_run(db: &PgPool, id: i64) -> sqlx::Result<()> {
    sqlx::query("UPDATE lab_runs SET finished_at = now() WHERE id = $1")
        .bind(id)
        .execute(db)
        .await
        .map(drop)
}

/// Run `id`, if it exists.
pub(super) async fn run(db: &PgPool, id: i64) -> sqlx::Result<Option<Run>> {
    sqlx::query_as(&format!("SELECT {RUN_COLUMNS} FROM lab_runs WHERE id = $2"))
        .bind(CUT_OFF_AFTER.as_secs_f64())
        .bind(id)
        .fetch_optional(db)
        .await
}

/// The latest `limit` timed runs (not step sessions, `stepper.rs`, nor replays,
/// `replay.rs`), newest first.
pub(super) async fn recent_runs(db: &PgPool, limit: i64) -> sqlx::Result<Vec<Run>> {
    sqlx::query_as(&format!(
        "SELECT {RUN_COLUMNS} FROM lab_runs
          WHERE id NOT IN (SELECT run_id FROM lab_step_sessions) AND fault <> $3
          ORDER BY id DESC LIMIT $2"
    ))
    .bind(CUT_OFF_AFTER.as_secs_f64())
    .bind(limit)
    .bind(REPLAY)
    .fetch_all(db)
    .await
}

/// Rows of run `id` past `after` on each side (`after`: the highest `seq` already seen
/// of `off` and of `on`): the `off` side's, then the `on` side's, each in the order
/// recorded.
pub(super) async fn rows_after(db: &PgPool, id: i64, after: (i32, i32)) -> sqlx::Result<Vec<Row>> {
    sqlx::query_as(
        "SELECT side, seq, at_ms, server, did, lock_key, fence_counter, seat,
                mark_kind, mark, sentence
           FROM lab_rows
          WHERE run_id = $1 AND ((side = 'off' AND seq > $2) OR (side = 'on' AND seq > $3))
          ORDER BY side, seq",
    )
    .bind(id)
    .bind(after.0)
    .bind(after.1)
    .fetch_all(db)
    .await
}

/// The columns of one row to record, as the recorder assembled them.
pub(super) struct NewRow<'a> {
    pub(super) side: Side,
    pub(super) seq: i32,
    pub(super) at_ms: i64,
    pub(super) server: &'a str,
    pub(super) action: &'a Action,
    pub(super) lock_key: &'a str,
    pub(super) fence_counter: Option<i64>,
    pub(super) mark: Option<&'a Mark>,
}

/// Records one row of run `id`, on `db` (the pool, or a step session's transaction).
pub(super) async fn insert_row(
    db: impl sqlx::PgExecutor<'_>,
    id: i64,
    row: NewRow<'_>,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO lab_rows (run_id, side, seq, at_ms, server, did, lock_key, fence_counter,
                               seat, mark_kind, mark, sentence)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(id)
    .bind(row.side.as_str())
    .bind(row.seq)
    .bind(row.at_ms)
    .bind(row.server)
    .bind(row.action.did())
    .bind(row.lock_key)
    .bind(row.fence_counter)
    .bind(row.action.seat(row.server))
    .bind(row.mark.map(|m| m.kind))
    .bind(row.mark.map(|m| m.class.as_str()))
    .bind(row.mark.map(|m| m.sentence.as_str()))
    .execute(db)
    .await
    .map(drop)
}

/// What the history checker found on one side of a run (`history.rs`), as its seat row
/// keeps it.
pub(super) struct HistoryVerdict {
    pub valid: bool,
    /// The kinds of promise broken, comma-separated.
    pub anomalies: String,
    /// Leases granted while another holder's may still have run.
    pub double_grants: i32,
}

/// Keeps `verdict` on run `id`'s `side` with its seat row.
pub(super) async fn keep_verdict(
    db: &PgPool,
    id: i64,
    side: Side,
    verdict: &HistoryVerdict,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE lab_seats
            SET history_valid = $3, history_anomalies = $4, history_double_grants = $5
          WHERE run_id = $1 AND side = $2",
    )
    .bind(id)
    .bind(side.as_str())
    .bind(verdict.valid)
    .bind(&verdict.anomalies)
    .bind(verdict.double_grants)
    .execute(db)
    .await
    .map(drop)
}

/// The history checker's verdicts on run `id`'s sides (off, on): whether valid (`None`:
/// not judged), and what broke ([`keep_verdict`]).
pub(super) async fn history_verdicts(
    db: &PgPool,
    id: i64,
) -> sqlx::Result<[(Option<bool>, String); 2]> {
    let mut judged: [(Option<bool>, String); 2] = Default::default();
    let rows: Vec<(String, Option<bool>, String)> = sqlx::query_as(
        "SELECT side, history_valid, history_anomalies FROM lab_seats WHERE run_id = $1",
    )
    .bind(id)
    .fetch_all(db)
    .await?;
    for (side, valid, anomalies) in rows {
        judged[usize::from(side == Side::On.as_str())] = (valid, anomalies);
    }
    Ok(judged)
}

/// Reads seat 14C of run `id`, side `side`: who it is sold to, if anyone.
pub(super) async fn read_seat(db: &PgPool, id: i64, side: Side) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar("SELECT sold_to FROM lab_seats WHERE run_id = $1 AND side = $2")
        .bind(id)
        .bind(side.as_str())
        .fetch_one(db)
        .await
}

/// Seat 14C's row of run `id`, side `side`: sold to whom, the highest token it accepted
/// (0: none yet), and how many writes it accepted.
pub(super) async fn seat_row(
    db: &PgPool,
    id: i64,
    side: Side,
) -> sqlx::Result<(Option<String>, i64, i32)> {
    sqlx::query_as(
        "SELECT sold_to, fence_token, sales FROM lab_seats WHERE run_id = $1 AND side = $2",
    )
    .bind(id)
    .bind(side.as_str())
    .fetch_one(db)
    .await
}

/// Writes "14C sold to `server`" to the seat's row under `rule`, with `token` (the
/// row's highest accepted token moves up to it when accepted). One transaction: the row
/// is locked and read first only so that the table can say what the write met; the
/// decision is the `UPDATE`'s own `WHERE`. Returns the [`Action::Wrote`].
pub(super) async fn write_seat(
    db: &PgPool,
    id: i64,
    side: Side,
    server: &str,
    token: Option<i64>,
    rule: WriteRule,
) -> sqlx::Result<Action> {
    let mut tx = db.begin().await?;
    let (before_sold_to, before_token): (Option<String>, i64) = sqlx::query_as(
        "SELECT sold_to, fence_token FROM lab_seats WHERE run_id = $1 AND side = $2 FOR UPDATE",
    )
    .bind(id)
    .bind(side.as_str())
    .fetch_one(&mut *tx)
    .await?;
    let check = match rule {
        WriteRule::Unconditional => "true",
        WriteRule::Fenced => "fence_token <= $4",
        WriteRule::IfUnsold => "sold_to IS NULL",
    };
    let accepted = sqlx::query(&format!(
        "UPDATE lab_seats
            SET sold_to = $3, sales = sales + 1,
                fence_token = GREATEST(fence_token, COALESCE($4, 0))
          WHERE run_id = $1 AND side = $2 AND {check}"
    ))
    .bind(id)
    .bind(side.as_str())
    .bind(server)
    .bind(token)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    tx.commit().await?;
    Ok(Action::Wrote {
        token,
        accepted,
        rule,
        before_sold_to,
        before_token,
    })
}
