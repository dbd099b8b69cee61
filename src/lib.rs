//! # seatlock
//!
//! A reference application for distributed locks and leases: a seat picker whose holds
//! are Redis leases (the `lease` crate in this workspace) and whose purchases are
//! accepted by Postgres only with a current fencing token. See the README for the design,
//! step by step along the article *Distributed locks and leases*.
//!
//! Layout: [`app`] builds the HTTP application once for `main`, the tests, the end-to-end
//! suite and the load test; [`config`] is every setting and its one default; [`seats`]
//! and [`auction`] own their rules and queries; [`buyer`] is the anonymous browser
//! session; [`error`] maps every failure to a status and a page, and every refusal to a
//! stable [`error::Refusal`] code; [`pause`] is the test seam of confirm and bid;
//! [`racelab`] serves the unsafe strategies the race lab compares. Test support and the
//! load-test client live in the `seatlock-harness` crate, not here.

pub mod app;
pub mod auction;
pub mod buyer;
pub mod config;
pub mod csrf;
pub mod db;
pub mod deadline;
pub mod detached;
pub mod error;
pub mod events;
pub mod health;
pub mod ledger;
pub mod live;
pub mod money;
pub mod orders;
pub mod pause;
pub mod racelab;
pub mod seats;
pub mod seed;
pub mod serve;
pub mod sessions;
pub mod state;
pub mod telemetry;

/// The migrations in `migrations/`, embedded: `seatlock migrate` and every test database
/// run these.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");
