//! The pause seam of confirm and bid: a server-side sleep at a chosen point of a purchase,
//! asked for by request headers, honoured only by a server started with
//! `--enable-race-lab`. The race lab uses it to make a holder stall past its lease (the
//! article's step 4 failure); the fault tests park a confirm at a [`PausePoint`] and kill
//! the server there. Without the flag the headers are ignored and [`Pause::NONE`] applies.

use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::error::{Error, Result};
use crate::state::AppState;

/// Header naming a pause, in milliseconds, between the lock check and the write.
pub const PAUSE_HEADER: &str = "x-race-lab-pause-ms";
/// Header moving the pause of a (fenced) confirm elsewhere: a [`PausePoint`] name.
pub const PAUSE_AT_HEADER: &str = "x-race-lab-pause-at";
/// Longest pause honoured.
pub const MAX_PAUSE: Duration = Duration::from_secs(60);

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

/// The requested pause: the `x-race-lab-pause-ms` header when the server runs with
/// `--enable-race-lab`, zero otherwise (the header is ignored). 400 if malformed.
pub struct RaceLabPause(pub Duration);

impl FromRequestParts<AppState> for RaceLabPause {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let ms = race_lab_header(parts, state, PAUSE_HEADER, "milliseconds", |v| {
            v.parse::<u64>().ok()
        })?;
        Ok(RaceLabPause(
            Duration::from_millis(ms.unwrap_or(0)).min(MAX_PAUSE),
        ))
    }
}

/// Where in a fenced confirm ([`crate::seats::purchase::confirm`]) the race-lab pause happens. The
/// fault tests park a server at one of these points and kill it there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PausePoint {
    /// After the payment, before the fenced write: a holder that stalls (the default).
    #[default]
    BeforeWrite,
    /// After the fenced write, inside the open transaction (the row locked), before the
    /// Redis owner check.
    BeforeRelease,
    /// After the owner check, before `COMMIT`.
    BeforeCommit,
    /// After `COMMIT`, before the hold's release in Redis and the reply.
    AfterCommit,
}

impl PausePoint {
    /// The header value naming this point (`before-write`, `before-release`, …).
    pub fn header_value(self) -> &'static str {
        match self {
            PausePoint::BeforeWrite => "before-write",
            PausePoint::BeforeRelease => "before-release",
            PausePoint::BeforeCommit => "before-commit",
            PausePoint::AfterCommit => "after-commit",
        }
    }

    fn parse(value: &str) -> Option<Self> {
        [
            PausePoint::BeforeWrite,
            PausePoint::BeforeRelease,
            PausePoint::BeforeCommit,
            PausePoint::AfterCommit,
        ]
        .into_iter()
        .find(|p| p.header_value() == value)
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
    pub fn at(&self, point: PausePoint) -> Duration {
        if self.at == point {
            self.duration
        } else {
            Duration::ZERO
        }
    }

    /// Sleeps for the pause if it happens at `point`.
    pub async fn sleep_at(&self, point: PausePoint) {
        let duration = self.at(point);
        if !duration.is_zero() {
            tracing::warn!(?point, ?duration, "race lab: pausing");
            tokio::time::sleep(duration).await;
        }
    }
}

impl FromRequestParts<AppState> for Pause {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        let RaceLabPause(duration) = RaceLabPause::from_request_parts(parts, state).await?;
        let at = race_lab_header(
            parts,
            state,
            PAUSE_AT_HEADER,
            "before-write, before-release, before-commit or after-commit",
            PausePoint::parse,
        )?;
        Ok(Pause {
            duration,
            at: at.unwrap_or_default(),
        })
    }
}
