//! The challenges' pages ([`super::challenge`]): `GET /lab/challenges` (the tasks, a
//! form each), `POST /lab/challenges/{slug}` (field `answer`: start an attempt) and
//! `GET /lab/challenges/attempts/{id}` (its runs, and the verdict once they finish).

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde::Deserialize;

use super::challenge::{self, Answer, Attempt, CHALLENGES, Challenge};
use super::routes::{current_run, require_lab};
use super::{ClockServer, DEFAULT_PAUSE, Step};
use seatlock::http::csrf::{CsrfForm, FormToken};
use seatlock::http::error::{Error, Result};
use seatlock::http::ids::parse_id;
use seatlock::state::AppState;

/// The challenges' routes (merged by [`super::router`]).
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/lab/challenges", get(list))
        .route("/lab/challenges/{slug}", post(try_it))
        .route("/lab/challenges/attempts/{id}", get(show))
}

/// The tasks.
#[derive(Template, WebTemplate)]
#[template(path = "lab_challenges.html")]
struct ListPage {
    challenges: [Challenge; 2],
    steps: &'static [Step],
    default_pause_ms: u128,
    seed: u64,
    authenticity_token: String,
}

async fn list(State(state): State<AppState>, csrf: FormToken) -> Result<Response> {
    require_lab(&state)?;
    let page = ListPage {
        challenges: CHALLENGES,
        steps: &Step::ALL,
        default_pause_ms: DEFAULT_PAUSE.as_millis(),
        seed: challenge::SEED,
        authenticity_token: csrf.authenticity.clone(),
    };
    Ok((csrf, page).into_response())
}

/// The answer.
#[derive(Deserialize)]
struct AnswerForm {
    answer: String,
}

async fn try_it(
    State(state): State<AppState>,
    Extension(clock): Extension<ClockServer>,
    Path(slug): Path<String>,
    CsrfForm(form): CsrfForm<AnswerForm>,
) -> Result<Redirect> {
    require_lab(&state)?;
    let challenge = Challenge::find(&slug)
        .ok_or_else(|| Error::NotFound("The lab has no such challenge.".into()))?;
    // Every fault this server offers (the clock jump only with a clock server).
    let runs = challenge
        .runs(&form.answer, &clock.offered())
        .map_err(Error::BadRequest)?;
    let id = challenge::attempt(&state, challenge, &form.answer, runs, clock).await?;
    Ok(Redirect::to(&format!("/lab/challenges/attempts/{id}")))
}

/// An attempt's page.
#[derive(Template, WebTemplate)]
#[template(path = "lab_attempt.html")]
struct AttemptPage {
    id: i64,
    attempt: Attempt,
    verdict: Option<bool>,
}

async fn show(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response> {
    require_lab(&state)?;
    let id = parse_id(&id, "attempt")?;
    let attempt = challenge::judge(&state.db, id)
        .await?
        .ok_or_else(|| Error::NotFound("The lab has no such attempt.".into()))?;
    // A run whose server stopped (mid-way, or before its turn) is cut off as its own
    // page would cut it off, so that the attempt still comes to a verdict.
    let mut cut_off = false;
    for run in attempt.runs.iter().filter(|r| !r.finished) {
        cut_off |= current_run(&state, run.run_id)
            .await?
            .is_some_and(|r| r.cut_off);
    }
    let attempt = if cut_off {
        challenge::judge(&state.db, id)
            .await?
            .ok_or_else(|| Error::NotFound("The lab has no such attempt.".into()))?
    } else {
        attempt
    };
    let verdict = attempt.verdict();
    Ok(AttemptPage {
        id,
        attempt,
        verdict,
    }
    .into_response())
}

impl Challenge {
    /// Whether the answer is a pause (the form's field), for the template.
    fn asks_pause(&self) -> bool {
        self.answer == Answer::PauseMs
    }
}
