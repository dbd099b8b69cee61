//! The lab's pages: `GET /lab` (the form), `POST /lab/runs` (start a run),
//! `GET /lab/runs/{id}` (the run's table: live while it runs, its permalink after),
//! `GET /lab/runs/{id}/stream` (its rows as server-sent events) and
//! `GET /lab/runs/{id}/history.json` (the run and every row). All 404 unless the server
//! runs with `--enable-race-lab` and its leases in Redis.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use futures_util::Stream;
use serde::Deserialize;
use tokio::sync::Semaphore;

use super::queries::{self, Row, Run};
use super::{
    ClockServer, DEFAULT_PAUSE, DEFAULT_SEED, Fault, LEASE_TTL, MAX_PAUSE, SEAT, STAGGER, Scenario,
    Side, Step,
};
use seatlock::http::csrf::{CsrfForm, FormToken};
use seatlock::http::error::{Error, Result};
use seatlock::http::ids::parse_id;
use seatlock::state::AppState;

/// Runs going at once on this server, at most: each holds eight Redis connections (four
/// a side) for a few seconds (a clock jump's, two Redis servers of its own too).
const MAX_RUNS: usize = 4;
pub(super) static RUNS: Semaphore = Semaphore::const_new(MAX_RUNS);

/// Run streams open at once on this server, at most: each asks Postgres once per
/// [`STREAM_POLL`], and the runs' own rows must not queue behind them for one of the
/// pool's connections. Past it a stream is refused (503; the page's script tries again
/// later, and the page without it reloads).
const MAX_STREAMS: usize = 32;
static STREAMS: Semaphore = Semaphore::const_new(MAX_STREAMS);

/// How often a run's stream looks for new rows.
const STREAM_POLL: Duration = Duration::from_millis(250);

/// The timed lab's routes (merged with step mode's by [`super::router`]).
pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/lab", get(form))
        .route("/lab/runs", post(start))
        .route("/lab/runs/{run}", get(show))
        .route("/lab/runs/{run}/stream", get(stream))
        .route("/lab/runs/{run}/history.json", get(history))
}

/// 404 unless the leases are in Redis: the lab races Redis leases, and on etcd or
/// ZooKeeper there is nothing to switch off. Without `--enable-race-lab` the route never
/// gets here (`crate::server::router`).
pub(super) fn require_lab(state: &AppState) -> Result<()> {
    if let Some(store) = state.settings.consensus_lease_store() {
        return Err(Error::NotFound(format!(
            "The lab races Redis leases, and this server keeps its leases in {store}."
        )));
    }
    Ok(())
}

/// `GET /lab`'s query: a run to preselect, as the README's links and "Run it again" do.
#[derive(Deserialize)]
struct Preselect {
    step: Option<String>,
    fault: Option<String>,
    pause_ms: Option<u64>,
    seed: Option<u32>,
}

/// The form, the five steps and the latest runs.
#[derive(Template, WebTemplate)]
#[template(path = "lab.html")]
struct LabPage {
    step: Step,
    fault: Fault,
    pause_ms: u64,
    seed: u32,
    seat: &'static str,
    steps: &'static [Step],
    /// Every fault, and whether this server offers it (the clock jump needs
    /// `--lab-clock-server`: listed, but disabled, without it).
    faults: Vec<(Fault, bool)>,
    recent: Vec<(Run, String)>,
    authenticity_token: String,
}

async fn form(
    State(state): State<AppState>,
    Extension(clock): Extension<ClockServer>,
    csrf: FormToken,
    Query(pre): Query<Preselect>,
) -> Result<Response> {
    require_lab(&state)?;
    let step = pre
        .step
        .as_deref()
        .and_then(Step::parse)
        .unwrap_or(Step::Fencing);
    // A fault this server does not offer is not preselected: a disabled option is not
    // sent, and the form would come back without one.
    let fault = pre
        .fault
        .as_deref()
        .and_then(Fault::parse)
        .filter(|f| clock.offers(*f))
        .unwrap_or(step.default_fault());
    let recent = queries::recent_runs(&state.db, 10)
        .await?
        .into_iter()
        .map(|run| {
            let title = title(&run);
            (run, title)
        })
        .collect();
    let page = LabPage {
        step,
        fault,
        pause_ms: pre
            .pause_ms
            .unwrap_or(DEFAULT_PAUSE.as_millis() as u64)
            .min(MAX_PAUSE.as_millis() as u64),
        seed: pre.seed.unwrap_or(DEFAULT_SEED),
        seat: SEAT,
        steps: &Step::ALL,
        faults: Fault::ALL.map(|f| (f, clock.offers(f))).to_vec(),
        recent,
        authenticity_token: csrf.authenticity.clone(),
    };
    Ok((csrf, page).into_response())
}

/// A run's title: "Step 4 off: no fencing token check · A pauses before its write".
fn title(run: &Run) -> String {
    match run.scenario() {
        Some(s) => format!("{} · {}", s.step.off_title(), s.fault.title()),
        None => format!("{} · {}", run.step, run.fault),
    }
}

/// The form's fields.
#[derive(Deserialize)]
struct RunForm {
    step: String,
    fault: String,
    pause_ms: String,
    seed: String,
}

impl RunForm {
    /// The scenario the form asks for, or a 400 naming the field.
    fn scenario(&self) -> Result<Scenario> {
        let bad = |what: &str| Error::BadRequest(format!("The lab has no such {what}."));
        let pause_ms: u64 = self.pause_ms.trim().parse().map_err(|_| {
            Error::BadRequest("The pause must be a whole number of milliseconds.".into())
        })?;
        let pause = Duration::from_millis(pause_ms);
        if pause > MAX_PAUSE {
            return Err(Error::BadRequest(format!(
                "The pause may be at most {} ms.",
                MAX_PAUSE.as_millis()
            )));
        }
        Ok(Scenario {
            step: Step::parse(&self.step).ok_or_else(|| bad("step"))?,
            fault: Fault::parse(&self.fault).ok_or_else(|| bad("fault"))?,
            pause,
            seed: self
                .seed
                .trim()
                .parse::<u32>()
                .map(u64::from)
                .map_err(|_| {
                    Error::BadRequest(format!(
                        "The seed must be a whole number from 0 to {}.",
                        u32::MAX
                    ))
                })?,
        })
    }
}

/// `POST /lab/runs`: records the run, starts it in the background (it outlives the
/// request: a reader who closes the page still gets a whole recorded run) and goes to
/// its page. 400 for a fault this server does not offer; 503 when [`MAX_RUNS`] are going.
async fn start(
    State(state): State<AppState>,
    Extension(clock): Extension<ClockServer>,
    CsrfForm(form): CsrfForm<RunForm>,
) -> Result<Redirect> {
    require_lab(&state)?;
    let scenario = form.scenario()?;
    clock.refuse_unless_offered(scenario.fault)?;
    let permit = RUNS
        .try_acquire()
        .map_err(|_| Error::Unavailable("The lab (it runs as many races as it may at once)"))?;
    // Recorded and started on a task of its own: a reader who hangs up between the two
    // must not leave a run that was recorded and never started.
    let run_id = tokio::spawn(async move {
        let run_id = queries::create_run(&state.db, &scenario, false).await?;
        tokio::spawn(async move {
            super::run::run(state, run_id, scenario, clock).await;
            drop(permit);
        });
        Ok::<_, Error>(run_id)
    })
    .await
    .map_err(|_| Error::Unavailable("The lab"))??;
    Ok(Redirect::to(&format!("/lab/runs/{run_id}")))
}

/// A run's page: both sides' tables, the rows so far.
#[derive(Template, WebTemplate)]
#[template(path = "lab_run.html")]
struct RunPage {
    run: Run,
    scenario: Scenario,
    /// The step-off side, then the step-on side.
    sides: [SideView; 2],
    /// The stream's `after`: the last row shown of each side, "<off>,<on>".
    after: String,
    ttl_ms: u128,
    stagger_ms: u128,
    seat: &'static str,
}

/// One side of a run's page.
struct SideView {
    name: &'static str,
    title: &'static str,
    rows: Vec<Row>,
    /// Once the run is finished: [`verdicts`].
    verdict: String,
}

/// One row of a run's table, as the page and the stream render it.
#[derive(Template)]
#[template(path = "lab_row.html")]
struct RowHtml<'a> {
    row: &'a Row,
}

impl Row {
    /// Seconds from the start: "1.604 s".
    pub(super) fn t(&self) -> String {
        format!("{:.3} s", self.at_ms as f64 / 1000.0)
    }

    /// The row's class: its mark's (`violation`, `saved`, `failed`), or ''.
    pub(super) fn class(&self) -> &str {
        self.mark.as_deref().unwrap_or("")
    }

    /// The fencing counter, or "—".
    pub(super) fn counter(&self) -> String {
        self.fence_counter.map_or("—".into(), |c| c.to_string())
    }
}

/// The verdict of a run whose server stopped before it finished.
const CUT_OFF: &str = "Cut off: the server running it stopped before the run finished.";

/// Each side's verdict (step off, step on), once the run is finished: the first
/// violation's sentence, that a store failed, that it was cut off, or that it held; ''
/// while it runs. Then what the history checker (`history.rs`: the nemesis's judge) found
/// on the side's whole history, from `judged` (`queries::history_verdicts`).
fn verdicts(run: &Run, rows: &[Row], judged: &[(Option<bool>, String); 2]) -> [String; 2] {
    let by_rows = verdicts_by_rows(run, rows);
    [0, 1].map(|i| match &judged[i] {
        (Some(true), _) => format!("{} The history checker: valid.", by_rows[i]),
        (Some(false), broken) => format!(
            "{} The history checker: not valid ({}).",
            by_rows[i],
            broken.replace(',', ", ")
        ),
        (None, _) => by_rows[i].clone(),
    })
}

/// [`verdicts`] from the rows' marks alone.
fn verdicts_by_rows(run: &Run, rows: &[Row]) -> [String; 2] {
    [Side::Off, Side::On].map(|side| {
        let rows: Vec<&Row> = rows.iter().filter(|r| r.side == side.as_str()).collect();
        if run.cut_off {
            return CUT_OFF.into();
        }
        if !run.finished {
            return String::new();
        }
        if let Some(row) = rows.iter().find(|r| r.class() == "violation") {
            return format!(
                "Broken at {}: {}",
                row.t(),
                row.sentence.as_deref().unwrap_or("")
            );
        }
        if let Some(row) = rows.iter().find(|r| r.class() == "failed") {
            return format!("Incomplete at {}: {}", row.t(), row.did);
        }
        let saved = rows.iter().filter(|r| r.class() == "saved").count();
        format!(
            "Held: no violation in {} rows; {saved} refused what would have broken it.",
            rows.len()
        )
    })
}

/// The highest `seq` of each side among `rows`, "(off, on)".
fn last_seq(rows: &[Row], seen: (i32, i32)) -> (i32, i32) {
    rows.iter()
        .fold(seen, |(off, on), r| match r.side.as_str() {
            "off" => (off.max(r.seq), on),
            _ => (off, on.max(r.seq)),
        })
}

async fn show(State(state): State<AppState>, Path(run): Path<String>) -> Result<Response> {
    require_lab(&state)?;
    let (run, scenario) = find(&state, &run).await?;
    let rows = queries::rows_after(&state.db, run.id, (0, 0)).await?;
    let (off_seen, on_seen) = last_seq(&rows, (0, 0));
    let judged = queries::history_verdicts(&state.db, run.id).await?;
    let [verdict_off, verdict_on] = verdicts(&run, &rows, &judged);
    let (off, on): (Vec<Row>, Vec<Row>) = rows.into_iter().partition(|r| r.side == "off");
    let side = |name, title, rows, verdict| SideView {
        name,
        title,
        rows,
        verdict,
    };
    let sides = [
        side("off", scenario.step.off_title(), off, verdict_off),
        side("on", scenario.step.on_title(), on, verdict_on),
    ];
    Ok(RunPage {
        run,
        scenario,
        sides,
        after: format!("{off_seen},{on_seen}"),
        ttl_ms: LEASE_TTL.as_millis(),
        stagger_ms: STAGGER.as_millis(),
        seat: SEAT,
    }
    .into_response())
}

/// Run `id` as it stands, if it exists. A run found unfinished long after its limit (its
/// server stopped mid-way) is marked cut off here, once, and what it left in the stores
/// deleted: every reader of a run (its page, its history, an open stream) sees it end.
pub(super) async fn current_run(state: &AppState, id: i64) -> Result<Option<Run>> {
    let run = queries::run(&state.db, id).await?;
    if !run.as_ref().is_some_and(|r| r.stale) {
        return Ok(run);
    }
    if queries::cut_off_if_stale(&state.db, id).await? {
        for side in [Side::Off, Side::On] {
            if let Err(err) = super::run::clean_up(state, id, side).await {
                tracing::warn!(run_id = id, "lab clean-up: {err:#}");
            }
        }
    }
    Ok(queries::run(&state.db, id).await?)
}

/// Run `id` (a path segment) and its scenario ([`current_run`]): 404 if there is none,
/// or if this build no longer knows its step or fault.
async fn find(state: &AppState, id: &str) -> Result<(Run, Scenario)> {
    let id = parse_id(id, "run")?;
    let run = current_run(state, id)
        .await?
        .ok_or_else(|| Error::NotFound("The lab has no such run.".into()))?;
    let scenario = run
        .scenario()
        .ok_or_else(|| Error::NotFound("This run's step or fault is not known here.".into()))?;
    Ok((run, scenario))
}

/// `GET /lab/runs/{id}/stream`: every row not yet sent as a `row` event
/// (`{"side": "off", "html": "<tr …>"}`), polled from Postgres every [`STREAM_POLL`]
/// (so any server of a deployment can stream any run); once the run is finished and
/// every row sent, one `done` event with both verdicts (`{"off": …, "on": …}`), and the
/// stream ends (also if the run is gone). `?after=<off>,<on>` skips rows the page
/// already shows. 503 past [`MAX_STREAMS`].
async fn stream(
    State(state): State<AppState>,
    Path(run): Path<String>,
    Query(after): Query<After>,
) -> Result<Sse<impl Stream<Item = std::result::Result<Event, Infallible>>>> {
    require_lab(&state)?;
    let (run, _) = find(&state, &run).await?;
    let permit = STREAMS
        .try_acquire()
        .map_err(|_| Error::Unavailable("The lab's live table (too many are open)"))?;
    let seen = after.seen();
    let steps = futures_util::stream::unfold(Some((seen, VecDeque::new())), move |progress| {
        let (state, run_id) = (state.clone(), run.id);
        // The stream holds its permit until it ends or its reader hangs up.
        let _open = &permit;
        async move {
            let (mut seen, mut pending): ((i32, i32), VecDeque<Row>) = progress?;
            loop {
                if let Some(row) = pending.pop_front() {
                    let html = RowHtml { row: &row }.render().unwrap_or_default();
                    let event = Event::default()
                        .event("row")
                        .json_data(serde_json::json!({ "side": row.side, "html": html }));
                    match event {
                        Ok(event) => return Some((Ok(event), Some((seen, pending)))),
                        Err(_) => continue,
                    }
                }
                // Finished first, rows second: rows read after it said finished are all.
                // A store error is a skipped poll; a run that is gone ends the stream.
                let Ok(run) = current_run(&state, run_id).await else {
                    tokio::time::sleep(STREAM_POLL).await;
                    continue;
                };
                let run = run?;
                let rows = queries::rows_after(&state.db, run_id, seen)
                    .await
                    .unwrap_or_default();
                seen = last_seq(&rows, seen);
                pending.extend(rows);
                if !pending.is_empty() {
                    continue;
                }
                if run.finished {
                    let rows = queries::rows_after(&state.db, run_id, (0, 0))
                        .await
                        .unwrap_or_default();
                    let judged = queries::history_verdicts(&state.db, run_id)
                        .await
                        .unwrap_or_default();
                    let [off, on] = verdicts(&run, &rows, &judged);
                    let done = Event::default()
                        .event("done")
                        .json_data(serde_json::json!({ "off": off, "on": on }))
                        .ok()?;
                    return Some((Ok(done), None));
                }
                tokio::time::sleep(STREAM_POLL).await;
            }
        }
    });
    Ok(Sse::new(steps).keep_alive(KeepAlive::default()))
}

/// The stream's `?after=<off>,<on>`: the last `seq` of each side the page shows.
#[derive(Deserialize)]
struct After {
    after: Option<String>,
}

impl After {
    fn seen(&self) -> (i32, i32) {
        self.after
            .as_deref()
            .and_then(|a| a.split_once(','))
            .and_then(|(off, on)| Some((off.parse().ok()?, on.parse().ok()?)))
            .unwrap_or((0, 0))
    }
}

/// `GET /lab/runs/{id}/history.json`: `{"run": {…}, "rows": [{"side", "seq", "at_ms",
/// "server", "did", "lock_key", "fence_counter", "seat", "mark_kind", "mark",
/// "sentence"}, …]}`, every row in the order recorded.
async fn history(
    State(state): State<AppState>,
    Path(run): Path<String>,
) -> Result<Json<serde_json::Value>> {
    require_lab(&state)?;
    let (run, _) = find(&state, &run).await?;
    let rows = queries::rows_after(&state.db, run.id, (0, 0)).await?;
    Ok(Json(serde_json::json!({ "run": run, "rows": rows })))
}
