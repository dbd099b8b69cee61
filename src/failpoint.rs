//! The pause seam of confirm, checkout and bid, in the shape of tikv/fail-rs's `fail_point!`.
//!
//! A point is one line in the product's code: `failpoint::point(PausePoint::BeforeWrite).await`.
//! Without the `failpoints` cargo feature a point is an empty function, and nothing else
//! here exists. The product binary is built without it.
//!
//! With the feature, the middleware `layer` reads a pause from a request's headers and
//! installs it around the request's work. A point then sleeps if the installed pause is there.
//! Only the race lab (the `seatlock-lab` crate) adds the layer, through
//! [`crate::app::Extension`]. The fault tests use it to park a confirm at a point and kill
//! the server there.

#[cfg(feature = "failpoints")]
use std::time::Duration;

/// Where in a fenced confirm ([`crate::seats::purchase::confirm`]) a pause happens. A
/// bid's points are all [`PausePoint::BeforeWrite`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PausePoint {
    /// After the payment, before the fenced write: a holder that stalls (the default).
    #[default]
    BeforeWrite,
    /// After the fenced write, inside the open transaction, before the Redis owner check.
    /// The seat's row is locked.
    BeforeOwnerCheck,
    /// After the owner check, before `COMMIT`.
    BeforeCommit,
    /// After `COMMIT`, before the hold's release in Redis and the reply.
    AfterCommit,
}

/// Sleeps for the installed pause if it happens at `at`. Returns at once otherwise.
/// Without the `failpoints` feature it does nothing.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub async fn point(_at: PausePoint) {}

/// Runs `work` with no pause at any point: a second attempt is not the stalled holder.
/// Without the `failpoints` feature it is `work` itself.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub async fn without<F: Future>(work: F) -> F::Output {
    work.await
}

/// `work` under the pause installed around the caller, for the task that will run it:
/// [`crate::http::detached`] spawns it. Without the `failpoints` feature it is `work`.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn carried<F: Future>(work: F) -> impl Future<Output = F::Output> {
    work
}

#[cfg(feature = "failpoints")]
pub use enabled::*;

/// The seam itself, compiled only with the `failpoints` feature.
#[cfg(feature = "failpoints")]
mod enabled {
    use super::{Duration, PausePoint};
    use axum::extract::Request;
    use axum::http::HeaderMap;
    use axum::middleware::Next;
    use axum::response::{IntoResponse, Response};

    use crate::http::error::Error;

    /// Header naming a pause, in milliseconds, between the lock check and the write.
    pub const PAUSE_HEADER: &str = "x-race-lab-pause-ms";
    /// Header moving the pause elsewhere: a [`PausePoint`] name, such as `before-commit`.
    pub const PAUSE_AT_HEADER: &str = "x-race-lab-pause-at";
    /// Longest pause honoured. A request's deadline grows by this much
    /// ([`crate::config::Settings::request_deadline`]).
    pub const MAX_PAUSE: Duration = Duration::from_secs(60);

    tokio::task_local! {
        /// The pause the current request's work runs under, if [`layer`] installed one.
        static INSTALLED: Pause;
    }

    /// Sleeps for the installed pause if it happens at `at`. Returns at once otherwise,
    /// and always where nothing is installed.
    pub async fn point(at: PausePoint) {
        let duration = INSTALLED.try_with(|pause| pause.at(at)).unwrap_or_default();
        if !duration.is_zero() {
            tracing::warn!(point = ?at, ?duration, "fail point: pausing");
            tokio::time::sleep(duration).await;
        }
    }

    /// Runs `work` with no pause at any point, whatever is installed around it. A second
    /// attempt is not the lab's stalled holder.
    pub async fn without<F: Future>(work: F) -> F::Output {
        Pause::NONE.over(work).await
    }

    /// `work` under the pause installed around the caller. The caller spawns it: a
    /// task-local does not cross `tokio::spawn` by itself.
    pub(crate) fn carried<F: Future>(work: F) -> impl Future<Output = F::Output> {
        let pause = INSTALLED.try_with(|pause| *pause).unwrap_or_default();
        pause.over(work)
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

    /// A pause and where it happens.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Pause {
        /// How long.
        pub duration: Duration,
        /// Where.
        pub at: PausePoint,
    }

    impl Pause {
        /// No pause at all.
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

        /// Runs `work` with this pause installed. Every [`point`] it reaches sleeps if the
        /// pause is there, on this task and on the task [`crate::http::detached`] spawns.
        pub async fn over<F: Future>(self, work: F) -> F::Output {
            INSTALLED.scope(self, work).await
        }

        /// The pause the headers ask for: [`PAUSE_HEADER`] and [`PAUSE_AT_HEADER`].
        /// [`Pause::NONE`] without them. The length is capped at [`MAX_PAUSE`].
        /// Errors: 400 naming the malformed header.
        pub fn from_headers(headers: &HeaderMap) -> Result<Pause, Error> {
            let header = |name: &str, expected: &str| {
                let Some(value) = headers.get(name) else {
                    return Ok(None);
                };
                value
                    .to_str()
                    .map(Some)
                    .map_err(|_| Error::BadRequest(format!("{name} must be {expected}")))
            };
            let ms = match header(PAUSE_HEADER, "milliseconds")? {
                None => 0,
                Some(v) => v.parse::<u64>().map_err(|_| {
                    Error::BadRequest(format!("{PAUSE_HEADER} must be milliseconds"))
                })?,
            };
            let names = "before-write, before-owner-check, before-commit or after-commit";
            let at = match header(PAUSE_AT_HEADER, names)? {
                None => PausePoint::default(),
                Some(v) => PausePoint::parse(v).ok_or_else(|| {
                    Error::BadRequest(format!("{PAUSE_AT_HEADER} must be {names}"))
                })?,
            };
            Ok(Pause {
                duration: Duration::from_millis(ms).min(MAX_PAUSE),
                at,
            })
        }
    }

    /// Middleware: runs the request under the pause its headers ask for.
    /// Answers 400 if a pause header is malformed.
    pub async fn layer(req: Request, next: Next) -> Response {
        match Pause::from_headers(req.headers()) {
            Ok(pause) => pause.over(next.run(req)).await,
            Err(err) => err.into_response(),
        }
    }
}
