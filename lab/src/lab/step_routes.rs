//! Step mode's pages ([`super::stepper`]): `GET /lab/step` (choose what to switch off),
//! `POST /lab/step` (start a session), `GET /lab/step/{id}` (the controls, the table and
//! the timeline; `?at=<seq>` scrubs back), `POST /lab/step/{id}` (take one event, fields
//! `server` and `event`) and `POST /lab/step/{id}/end` (delete its keys).

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use super::queries::{self, Row};
use super::stepper::{self, Event, MAX_EVENTS, Refused, STEP_LEASE_TTL, StepState};
use super::{SEAT, SERVERS, Side, Step};
use seatlock::http::csrf::{CsrfForm, FormToken};
use seatlock::http::error::{Error, Result};
use seatlock::http::ids::parse_id;
use seatlock::state::AppState;

/// Step mode's routes (merged by [`super::router`]).
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/lab/step", get(choose).post(start))
        .route("/lab/step/{run}", get(show).post(take))
        .route("/lab/step/{run}/end", post(end))
}

/// The start form: what to switch off.
#[derive(Template, WebTemplate)]
#[template(path = "lab_step_new.html")]
struct ChoosePage {
    steps: &'static [Step],
    /// [`stepper::STALLED_HOLDER`], as the buttons say it: "A: take the lock".
    story: Vec<String>,
    chosen: String,
    authenticity_token: String,
}

/// `GET /lab/step`'s query: `?step=fencing` preselects it.
#[derive(Deserialize)]
struct Preselect {
    step: Option<String>,
}

async fn choose(
    State(state): State<AppState>,
    csrf: FormToken,
    Query(pre): Query<Preselect>,
) -> Result<Response> {
    super::routes::require_lab(&state)?;
    let story = stepper::STALLED_HOLDER
        .iter()
        .filter_map(|(server, event)| Some(format!("{server}: {}", Event::parse(event)?.label())))
        .collect();
    let page = ChoosePage {
        steps: stepper::STEPPABLE,
        story,
        chosen: pre.step.unwrap_or_else(|| Step::Fencing.slug().into()),
        authenticity_token: csrf.authenticity.clone(),
    };
    Ok((csrf, page).into_response())
}

/// The start form's field: a step's slug, or `none` for every step on.
#[derive(Deserialize)]
struct StartForm {
    step: String,
}

async fn start(
    State(state): State<AppState>,
    CsrfForm(form): CsrfForm<StartForm>,
) -> Result<Redirect> {
    super::routes::require_lab(&state)?;
    let step = match form.step.as_str() {
        "none" => None,
        slug => Some(
            Step::parse(slug)
                .filter(|step| stepper::STEPPABLE.contains(step))
                .ok_or_else(|| Error::BadRequest("Step mode has no such step.".into()))?,
        ),
    };
    let run_id = stepper::start(&state, step).await.map_err(store_error)?;
    Ok(Redirect::to(&format!("/lab/step/{run_id}")))
}

/// A store that failed: the lab's 503, with the error in the log.
fn store_error(err: anyhow::Error) -> Error {
    tracing::warn!("lab step mode: {err:#}");
    Error::Unavailable("The lab's step mode")
}

/// One server's controls.
struct ServerView {
    name: &'static str,
    words: &'static str,
    next: Vec<Event>,
}

/// The state after one event, for the timeline.
struct Snapshot {
    seq: i32,
    /// "After 3: B takes the lock: token 3" (the start: "At the start").
    heading: String,
    lock: String,
    counter: String,
    seat: String,
}

/// A session's page.
#[derive(Template, WebTemplate)]
#[template(path = "lab_step.html")]
struct StepPage {
    run_id: i64,
    title: &'static str,
    lesson: &'static str,
    locked: bool,
    ended: bool,
    servers: Vec<ServerView>,
    rows: Vec<Row>,
    snapshots: Vec<Snapshot>,
    /// The step shown (scrubbed to), and the last.
    at: i32,
    last: i32,
    max_events: i32,
    ttl_s: u64,
    seat: &'static str,
    authenticity_token: String,
}

/// `GET /lab/step/{id}`'s query: `?at=<seq>`, the timeline's step shown.
#[derive(Deserialize)]
struct At {
    at: Option<String>,
}

async fn show(
    State(state): State<AppState>,
    csrf: FormToken,
    Path(run): Path<String>,
    Query(at): Query<At>,
) -> Result<Response> {
    super::routes::require_lab(&state)?;
    let run_id = parse_id(&run, "step session")?;
    let mut conn = state.db.acquire().await?;
    let session = stepper::load(&mut conn, run_id, false)
        .await
        .map_err(store_error)?
        .ok_or_else(no_session)?;
    drop(conn);
    let rows = queries::rows_after(&state.db, run_id, (0, 0)).await?;
    let last = session.states.len() as i32 - 1;
    let at = at
        .at
        .and_then(|a| a.trim().parse::<i32>().ok())
        .unwrap_or(last)
        .clamp(0, last);
    let servers = session.servers();
    let servers = SERVERS
        .into_iter()
        .map(|name| {
            let me = servers.get(name).cloned().unwrap_or_default();
            ServerView {
                name,
                words: me.words(),
                next: if session.ended || last >= MAX_EVENTS {
                    vec![]
                } else {
                    me.next(session.protocol)
                },
            }
        })
        .collect();
    let snapshots = session.states.iter().map(|s| snapshot(s, &rows)).collect();
    let (title, lesson) = match session.side {
        Side::Off => (session.step.off_title(), session.step.lesson()),
        Side::On => (
            "Every step on",
            "The lease library as the seat picker uses it, and the seat's row checks the token.",
        ),
    };
    let page = StepPage {
        run_id,
        title,
        lesson,
        locked: session.protocol.lock,
        ended: session.ended,
        servers,
        rows,
        snapshots,
        at,
        last,
        max_events: MAX_EVENTS,
        ttl_s: STEP_LEASE_TTL.as_secs(),
        seat: SEAT,
        authenticity_token: csrf.authenticity.clone(),
    };
    Ok((csrf, page).into_response())
}

fn no_session() -> Error {
    Error::NotFound("The lab has no such step session.".into())
}

/// The state after `state`'s event, in words, headed by its row's.
fn snapshot(state: &StepState, rows: &[Row]) -> Snapshot {
    let heading = match rows.iter().find(|r| r.seq == state.seq) {
        Some(row) => format!("After event {}: {} {}", state.seq, row.server, row.did),
        None => "At the start: nothing has happened".into(),
    };
    Snapshot {
        seq: state.seq,
        heading,
        lock: state.lock_words(),
        counter: state
            .fence_counter
            .map_or("none in Redis".into(), |c| c.to_string()),
        seat: state.seat_words(),
    }
}

/// One event's fields.
#[derive(Deserialize)]
struct EventForm {
    server: String,
    event: String,
}

async fn take(
    State(state): State<AppState>,
    Path(run): Path<String>,
    CsrfForm(form): CsrfForm<EventForm>,
) -> Result<Redirect> {
    super::routes::require_lab(&state)?;
    let run_id = parse_id(&run, "step session")?;
    let server = SERVERS
        .into_iter()
        .find(|s| *s == form.server)
        .ok_or_else(|| Error::BadRequest("The lab has servers A, B and C only.".into()))?;
    let event = Event::parse(&form.event)
        .ok_or_else(|| Error::BadRequest("The lab has no such event.".into()))?;
    match stepper::take(&state, run_id, server, event).await {
        Ok(()) => Ok(Redirect::to(&format!("/lab/step/{run_id}"))),
        Err(Refused::NoSession) => Err(no_session()),
        Err(Refused::Over(why) | Refused::NotNow(why)) => Err(Error::BadRequest(why)),
        Err(Refused::Store(err)) => Err(store_error(err)),
    }
}

async fn end(
    State(state): State<AppState>,
    Path(run): Path<String>,
    CsrfForm(_): CsrfForm<serde::de::IgnoredAny>,
) -> Result<Redirect> {
    super::routes::require_lab(&state)?;
    let run_id = parse_id(&run, "step session")?;
    stepper::end(&state, run_id).await.map_err(store_error)?;
    Ok(Redirect::to(&format!("/lab/step/{run_id}")))
}
