//! The model's counterexamples, replayed ([`super::replay`]): `GET /lab/replay` (one per
//! article step the model switches off, each with a button) and `POST /lab/replay/{slug}`
//! (replays it on real servers and shows the model's trace beside the real run's; the
//! page is rendered at once, nothing is kept but the run's seat row).

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Extension, Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use seatlock::http::csrf::{CsrfForm, FormToken};
use seatlock::http::error::{Error, Result};
use seatlock::state::AppState;
use seatlock_model::SwitchedOff;

use super::replay::{self, Replayed};
use super::routes::require_lab;
use crate::LabSettings;

/// The replay's routes (merged by [`super::router`]).
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/lab/replay", get(list))
        .route("/lab/replay/{slug}", post(run))
}

/// One listed counterexample, and why it cannot be replayed, if it cannot.
struct Listed {
    entry: SwitchedOff,
    not_replayable: Option<&'static str>,
}

/// The list.
#[derive(Template, WebTemplate)]
#[template(path = "lab_replay.html")]
struct ListPage {
    listed: Vec<Listed>,
    authenticity_token: String,
}

async fn list(State(state): State<AppState>, csrf: FormToken) -> Result<Response> {
    require_lab(&state)?;
    let listed = seatlock_model::switched_off()
        .into_iter()
        .map(|entry| Listed {
            not_replayable: replay::lab_protocol(&entry.model).err(),
            entry,
        })
        .collect();
    let page = ListPage {
        listed,
        authenticity_token: csrf.authenticity.clone(),
    };
    Ok((csrf, page).into_response())
}

/// A replay's page.
#[derive(Template, WebTemplate)]
#[template(path = "lab_replay_run.html")]
struct RunPage {
    entry: SwitchedOff,
    replayed: Replayed,
}

async fn run(
    State(state): State<AppState>,
    Extension(lab): Extension<LabSettings>,
    Path(slug): Path<String>,
    CsrfForm(_): CsrfForm<serde::de::IgnoredAny>,
) -> Result<Response> {
    require_lab(&state)?;
    let entry = seatlock_model::switched_off()
        .into_iter()
        .find(|e| e.slug == slug)
        .ok_or_else(|| Error::NotFound("The model has no such counterexample.".into()))?;
    if let Err(why) = replay::lab_protocol(&entry.model) {
        return Err(Error::BadRequest(format!(
            "This counterexample cannot be replayed. {why}"
        )));
    }
    let turn = replay::REPLAYS
        .try_acquire()
        .map_err(|_| Error::Unavailable("The lab's replay (two go at once)"))?;
    // On a task of its own, so that a reader who hangs up does not cut it short before
    // it deletes what it wrote to the stores (found by a hostile test).
    let (task_state, task_entry) = (state.clone(), entry.clone());
    let replayed = tokio::spawn(async move {
        let _turn = turn;
        replay::replay(&task_state, &lab.lab_redis_server, &task_entry).await
    })
    .await
    .map_err(anyhow::Error::from)
    .and_then(|replayed| replayed)
    .map_err(|err| {
        tracing::warn!("lab replay of {slug}: {err:#}");
        Error::Unavailable("The lab's replay (its own Redis servers, or Postgres)")
    })?;
    Ok(RunPage { entry, replayed }.into_response())
}
