//! # seatlock
//!
//! A reference application for distributed locks and leases: a seat picker whose holds
//! are Redis leases (the `lease` crate in this workspace) and whose purchases are
//! accepted by Postgres only with a current fencing token. See the README for the design,
//! step by step along the article *Distributed locks and leases*.
//!
//! Layout, top to bottom:
//!
//! * **Wiring.** [`app`] builds the HTTP application once, for `main`, the tests, the
//!   end-to-end suite, the load test and the race lab. [`config`] holds every setting
//!   and its one default. Then [`state`], `db`, `telemetry`, [`ledger`] and [`seed`].
//! * **The core.** [`seats`]: hold, release and the fenced purchase. Read it first.
//! * **Features around it**, each with its rules and queries. [`venue`] draws the seat
//!   map and picks best available. [`waiting_room`] lets buyers in a few at a time.
//!   Then [`auction`], [`live`], `events`, `orders` and [`profile`].
//! * **The pause seam** of confirm and bid: [`failpoint`]. It is empty without the
//!   `failpoints` feature.
//! * **HTTP plumbing** shared by them all: [`http`]. The buyer is a signed cookie. The
//!   error type maps every failure to a status and a page, and every refusal to a stable
//!   [`http::error::Refusal`] code.
//! * **A leaf**: [`money`].
//!
//! Test support and the load-test client live in the `seatlock-harness` crate, not here.
//! The race lab is the `seatlock-lab` crate in `lab/`: its unsafe strategies, the lab in
//! the browser, their flags and tables. It plugs in through
//! [`app::Application::build_with`].

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
pub mod venue;
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
