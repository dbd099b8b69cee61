//! The race lab: purchase strategies that exist ONLY to show, side by side with the
//! product path, what sells a seat twice. `load-test race` starts servers with each one.
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
//! [`PausePoint`] (the fault tests kill a server parked there).
//! Race-lab sales go to `race_lab_sales`, which has no unique constraint, so a double sale
//! is visible rather than prevented.

pub mod check;
pub mod holds;
pub mod lab;
mod queries;
pub mod report;
mod server;

pub use server::{
    PAUSE_AT_HEADER, PAUSE_HEADER, Pause, PausePoint, RaceLabPause, confirm, hold, router,
};

use serde::{Deserialize, Serialize};

/// How a server makes a purchase. Only `Fenced` is the product.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum PurchaseStrategy {
    /// Lease + fencing token checked by Postgres: the product path.
    #[default]
    Fenced,
    /// No lock at all: read the seat, payment delay, write "sold".
    RaceLabNaive,
    /// A Redis lease with owner-checked release, but the write carries no fencing token.
    RaceLabUnfencedLease,
    /// No lock service: one `UPDATE … WHERE sold = false`.
    RaceLabConditional,
}

impl PurchaseStrategy {
    /// The short name used by `load-test --strategy` and in reports.
    pub fn short_name(self) -> &'static str {
        match self {
            PurchaseStrategy::Fenced => "fenced",
            PurchaseStrategy::RaceLabNaive => "naive",
            PurchaseStrategy::RaceLabUnfencedLease => "lease",
            PurchaseStrategy::RaceLabConditional => "conditional",
        }
    }

    /// The value of `seatlock serve --purchase-strategy`.
    pub fn flag_value(self) -> &'static str {
        match self {
            PurchaseStrategy::Fenced => "fenced",
            PurchaseStrategy::RaceLabNaive => "race-lab-naive",
            PurchaseStrategy::RaceLabUnfencedLease => "race-lab-unfenced-lease",
            PurchaseStrategy::RaceLabConditional => "race-lab-conditional",
        }
    }

    /// Whether holds take a Redis lease under this strategy.
    pub fn uses_lease(self) -> bool {
        matches!(
            self,
            PurchaseStrategy::Fenced | PurchaseStrategy::RaceLabUnfencedLease
        )
    }

    /// All four, in report order.
    pub const ALL: [PurchaseStrategy; 4] = [
        PurchaseStrategy::RaceLabNaive,
        PurchaseStrategy::RaceLabUnfencedLease,
        PurchaseStrategy::Fenced,
        PurchaseStrategy::RaceLabConditional,
    ];
}
