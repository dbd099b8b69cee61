//! # seatlock
//!
//! A reference application for distributed locks and leases: a seat picker whose holds
//! are Redis leases (the `lease` crate in this workspace) and whose purchases are
//! accepted by Postgres only with a current fencing token. See the README for the design,
//! step by step along the article *Distributed locks and leases*.
//!
//! Layout, top to bottom: **wiring** ([`app`] builds the HTTP application once for
//! `main`, the tests, the end-to-end suite and the load test; [`config`] is every setting
//! and its one default; [`state`], `db`, `telemetry`, [`ledger`], [`seed`]);
//! **features**, each owning its rules and queries ([`seats`], its [`waiting_room`], [`auction`], [`live`],
//! `events`, `orders`); the [`failpoint`] seam of confirm and bid, empty without the
//! `failpoints` feature; **HTTP plumbing** shared by them
//! ([`http`]: the buyer's session, CSRF, the error type that maps every failure to a
//! status and a page and every refusal to a stable [`http::error::Refusal`] code, the
//! request deadline); and two leaves, [`money`] and [`profile`]. Test support and the
//! load-test client live in the `seatlock-harness` crate, not here. The race lab (its
//! unsafe strategies, the lab in the browser, their flags and tables) is the
//! `seatlock-lab` crate in `lab/`: it plugs into [`app::Application::build_with`].

pub mod app;
pub mod auction;
pub mod config;
pub(crate) mod db;
pub(crate) mod events;
pub mod failpoint;
pub mod http;
pub mod ledger;
pub mod live;
pub mod money;
pub(crate) mod orders;
pub mod profile;
pub mod seats;
pub mod seed;
pub mod state;
pub(crate) mod telemetry;
pub mod waiting_room;

/// The migrations in `migrations/`, embedded: `seatlock migrate` and every test database
/// run these.
///
/// The race lab's tables have their own migrations (`lab/migrations/`), in the same
/// `_sqlx_migrations` table, numbered from 100001. This migrator ignores them
/// (`ignore_missing`): a database the lab migrated still migrates here. sqlx 0.8 has no
/// second migrations table, and this is the one switch it offers.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate::Migrator {
    ignore_missing: true,
    ..sqlx::migrate!("./migrations")
};
