//! The race lab: purchase strategies that exist ONLY to show, side by side with the
//! product path, what sells a seat twice. `load-test race` (in the `seatlock-harness`
//! crate) starts servers with each one.
//!
//! | strategy | lock | fencing | what the resource checks |
//! |---|---|---|---|
//! | `fenced` (the product path, [`crate::seats::purchase`]) | Redis lease | yes | `NOT sold AND fence_token <= $token` |
//! | `race-lab-naive` | none | no | nothing: read, pay, write |
//! | `race-lab-unfenced-lease` | Redis lease, owner-checked release | no | nothing: checks the lease, pauses, writes |
//! | `race-lab-conditional` | none | no | `WHERE sold = false` (the article's lock-free answer) |
//!
//! A server refuses to start with any strategy but `fenced` unless it is also given
//! `--enable-race-lab`; the same flag enables the `x-race-lab-pause-ms` request header, a
//! server-side pause between the lock check and the write (the article's step 4 failure),
//! and `x-race-lab-pause-at`, which moves a fenced confirm's pause to another
//! [`crate::racelab::pause::PausePoint`] (the fault tests kill a server parked there).
//! `POST /race-lab/events/{event}/hold-group` (also behind `--enable-race-lab`) holds a
//! named group of seats with the product's one-script group hold, for the race of
//! overlapping groups (`load-test race --strategy groups`).
//! Race-lab sales go to `race_lab_sales`, which has no unique constraint, so a double sale
//! is visible rather than prevented.

mod group;
pub mod lab;
pub mod pause;
mod queries;
mod server;

pub use server::{purchase_routes, router};

use crate::http::error::{Error, Result};
use crate::state::AppState;

/// 404 unless the server runs with `--enable-race-lab`.
fn require_race_lab(state: &AppState) -> Result<()> {
    if state.settings.enable_race_lab {
        Ok(())
    } else {
        Err(Error::NotFound(
            "The race lab is not enabled on this server: start it with `make lab` (or \
             `seatlock serve --enable-race-lab`)."
                .into(),
        ))
    }
}
