//! # seatlock-lab
//!
//! The race lab: purchase strategies that exist ONLY to show, side by side with the
//! product path, what sells a seat twice, and the lab in the browser (`GET /lab`). It is
//! a crate of its own, so that no flag of the product binary `seatlock` can sell a seat
//! twice. Its binary, `seatlock-lab`, is the product plus the lab: `make lab`,
//! `load-test race`, `load-test nemesis` and `load-test failover` start it.
//!
//! | strategy | lock | fencing | what the resource checks |
//! |---|---|---|---|
//! | `fenced` (the product path, [`seatlock::seats::purchase`]) | Redis lease | yes | `NOT sold AND fence_token <= $token` |
//! | `race-lab-naive` | none | no | nothing: read, pay, write |
//! | `race-lab-unfenced-lease` | Redis lease, owner-checked release | no | nothing: checks the lease, pauses, writes |
//! | `race-lab-conditional` | none | no | `WHERE sold = false` (the article's lock-free answer) |
//!
//! A server refuses to start with any strategy but `fenced` unless it is also given
//! `--enable-race-lab` ([`LabSettings`]). The same flag turns on the product's pause seam
//! ([`seatlock::failpoint`]). Its `x-race-lab-pause-ms` request header asks for a
//! server-side pause between the lock check and the write: the article's step 4 failure.
//! Its `x-race-lab-pause-at` header moves a fenced confirm's pause to another
//! [`seatlock::failpoint::PausePoint`]. The fault tests kill a server parked there.
//! `POST /race-lab/events/{event}/hold-group` holds a named group of seats with the
//! product's one-script group hold, for the race of overlapping groups
//! (`load-test race --strategy groups`). Race-lab sales go to `race_lab_sales`. It has
//! no unique constraint, so a double sale is visible rather than prevented.
//!
//! [`proxy`] is the auction's row: proxy bidding resolved against a read and written
//! without the fence, where two concurrent maxima are both told they lead.
//!
//! The lab plugs into the product through one hook, [`Application::build_with`]: see
//! [`build`].

mod group;
pub mod lab;
pub mod proxy;
mod queries;
mod server;
mod settings;

pub use settings::{DEFAULT_LOCK_DELAY_MS, LabSettings, PurchaseStrategy};

use seatlock::app::{Application, Extension};
use seatlock::config::Settings;

/// The lab's migrations in `lab/migrations/`, embedded: `seatlock-lab migrate` and every
/// test database run these after the product's ([`seatlock::MIGRATOR`]).
///
/// They share the product's `_sqlx_migrations` table, numbered from 100001 so that the
/// two lists never meet. Each migrator ignores the other's rows (`ignore_missing`): sqlx
/// 0.8 has no second migrations table. The product's migration 0015 drops the tables its
/// 0005 and 0011 created, and these create them again, so the order is: product first.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate::Migrator {
    ignore_missing: true,
    ..sqlx::migrate!("./migrations")
};

/// Runs the product's migrations, then the lab's. Errors: sqlx's, for the first
/// migration that fails.
pub async fn migrate(db: &sqlx::PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    seatlock::MIGRATOR.run(db).await?;
    MIGRATOR.run(db).await
}

/// What the lab adds to the product's application: its routes, its strategy's hold and
/// confirm (none for `fenced`), the failover guard's and cooling's off switches and the
/// pause seam.
pub fn extension(lab: &LabSettings) -> Extension {
    let strategy = lab.purchase_strategy;
    Extension {
        routes: server::router(lab),
        purchase_routes: (strategy != PurchaseStrategy::Fenced)
            .then(|| server::purchase_routes(strategy, lab.lock_delay())),
        no_failover_guard: lab.lab_disable_failover_guard,
        no_cooling: lab.lab_disable_cooling,
        pauses: lab.enable_race_lab,
    }
}

/// The product's application with the lab plugged in ([`extension`]).
/// Errors: a lab-only setting without `--enable-race-lab`, or a clock server that is no
/// executable file ([`LabSettings::check`]), and [`Application::build`]'s.
pub async fn build(settings: Settings, lab: &LabSettings) -> anyhow::Result<Application> {
    lab.check()?;
    Application::build_with(settings, extension(lab)).await
}
