//! The pause seam of confirm and bid: a server-side sleep at a named point of a purchase
//! or a bid, asked for by request headers, honoured only by a server started with
//! `--enable-race-lab`. The race lab uses it to make a holder stall past its lease (the
//! article's step 4 failure); the fault tests park a confirm at a [`PausePoint`] and kill
//! the server there.
//!
//! A fail point in the style of tikv/fail-rs: nothing is threaded through the product's
//! signatures. The handler installs the requested [`Pause`] around the work
//! ([`Pause::over`]; [`crate::http::detached`] carries it onto the work's own task), and the code
//! names the point in one line, `pause::point(PausePoint::BeforeWrite).await`. Outside the
//! race lab nothing is installed and a point costs nothing.

use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::config::Settings;
use crate::http::error::{Error, Result};
use crate::state::AppState;

/// Header naming a pause, in milliseconds, between the lock check and the write.
pub const PAUSE_HEADER: &str = "x-race-lab-pause-ms";
/// Header moving the pause of a (fenced) confirm elsewhere: a [`PausePoint`] name.
pub const PAUSE_AT_HEADER: &str = "x-race-lab-pause-at";
/// Longest pause honoured.
pub const MAX_PAUSE: Duration = Duration::from_secs(60);

tokio::task_local! {
    /// The pause the current request's work runs under, if the race lab installed one.
    static INSTALLED: Pause;
}

/// Sleeps for the installed pause if it happens at `at`; returns at once otherwise (and
/// always outside the race lab, where nothing is installed).
pub async fn point(at: PausePoint) {
    let duration = INSTALLED.try_with(|pause| pause.at(at)).unwrap_or_default();
    if !duration.is_zero() {
        tracing::warn!(point = ?at, ?duration, "race lab: pausing");
        tokio::time::sleep(duration).await;
    }
}

/// The pause installed around the current task's work ([`Pause::NONE`] if none), for
/// [`crate::http::detached`] to install it again on the task it spawns.
pub(crate) fn installed() -> Pause {
    INSTALLED.try_with(|pause| *pause).unwrap_or_default()
}

/// Runs `work` with no pause at any point, whatever is installed around it: a second
/// attempt is not the lab's stalled holder.
pub async fn without<F: Future>(work: F) -> F::Output {
    Pause::NONE.over(work).await
}

impl Settings {
    /// The longest a request may wait on the stores, together with the purchase or bid it
    /// runs detached: [`Settings::store_deadline`], plus the longest race-lab pause
    /// ([`MAX_PAUSE`]) when the race lab is enabled. On expiry the request answers 503 and
    /// its work is dropped ([`crate::http::deadline`]).
    pub fn request_deadline(&self) -> Duration {
        let pauses = if self.enable_race_lab {
            MAX_PAUSE
        } else {
            Duration::ZERO
        };
        self.store_deadline() + pauses
    }
}

/// The value of race-lab header `name` parsed by `parse`, when the server runs with
/// `--enable-race-lab`; `None` otherwise (the header is ignored) or when absent. 400 if
/// malformed, with `expected` in the message.
fn race_lab_header<T>(
    parts: &Parts,
    state: &AppState,
    name: &str,
    expected: &str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<Option<T>> {
    let Some(value) = parts
        .headers
        .get(name)
        .filter(|_| state.settings.enable_race_lab)
    else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(parse)
        .map(Some)
        .ok_or_else(|| Error::BadRequest(format!("{name} must be {expected}")))
}

/// The pause of a bid: the `x-race-lab-pause-ms` header when the server runs with
/// `--enable-race-lab` (none otherwise: the header is ignored), always at
/// [`PausePoint::BeforeWrite`]. 400 if malformed.
pub struct RaceLabPause(pub Pause);

impl FromRequestParts<AppState> for RaceLabPause {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let ms = race_lab_header(parts, state, PAUSE_HEADER, "milliseconds", |v| {
            v.parse::<u64>().ok()
        })?;
        Ok(RaceLabPause(Pause {
            duration: Duration::from_millis(ms.unwrap_or(0)).min(MAX_PAUSE),
            at: PausePoint::BeforeWrite,
        }))
    }
}

/// Where in a fenced confirm ([`crate::seats::purchase::confirm`]) the race-lab pause
/// happens (a bid's is always [`PausePoint::BeforeWrite`]). The fault tests park a server
/// at one of these points and kill it there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PausePoint {
    /// After the payment, before the fenced write: a holder that stalls (the default).
    #[default]
    BeforeWrite,
    /// After the fenced write, inside the open transaction (the row locked), before the
    /// Redis owner check.
    BeforeOwnerCheck,
    /// After the owner check, before `COMMIT`.
    BeforeCommit,
    /// After `COMMIT`, before the hold's release in Redis and the reply.
    AfterCommit,
}

impl PausePoint {
    /// Every point, in the order a confirm reaches them.
    const ALL: [PausePoint; 4] = [
        PausePoint::BeforeWrite,
        PausePoint::BeforeOwnerCheck,
        PausePoint::BeforeCommit,
        PausePoint::AfterCommit,
    ];

    /// The header value naming this point (`before-write`, `before-owner-check`, …).
    pub fn header_value(self) -> &'static str {
        match self {
            PausePoint::BeforeWrite => "before-write",
            PausePoint::BeforeOwnerCheck => "before-owner-check",
            PausePoint::BeforeCommit => "before-commit",
            PausePoint::AfterCommit => "after-commit",
        }
    }

    fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.header_value() == value)
    }
}

/// A race-lab pause and where it happens: the `x-race-lab-pause-ms` and
/// `x-race-lab-pause-at` headers (both ignored without `--enable-race-lab`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pause {
    /// How long.
    pub duration: Duration,
    /// Where.
    pub at: PausePoint,
}

impl Pause {
    /// No pause at all (outside the race lab).
    pub const NONE: Pause = Pause {
        duration: Duration::ZERO,
        at: PausePoint::BeforeWrite,
    };

    /// The pause's length if it happens at `point`, else zero.
    fn at(&self, point: PausePoint) -> Duration {
        if self.at == point {
            self.duration
        } else {
            Duration::ZERO
        }
    }

    /// Runs `work` with this pause installed: every [`point`] it reaches on this task
    /// (and on the task [`crate::http::detached`] spawns for it) sleeps if the pause is there.
    pub async fn over<F: Future>(self, work: F) -> F::Output {
        INSTALLED.scope(self, work).await
    }
}

impl FromRequestParts<AppState> for Pause {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let RaceLabPause(Pause { duration, .. }) =
            RaceLabPause::from_request_parts(parts, state).await?;
        let at = race_lab_header(
            parts,
            state,
            PAUSE_AT_HEADER,
            "before-write, before-owner-check, before-commit or after-commit",
            PausePoint::parse,
        )?;
        Ok(Pause {
            duration,
            at: at.unwrap_or_default(),
        })
    }
}
