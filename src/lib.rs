//! # seatlock
//!
//! A reference application for distributed locks and leases: a seat picker whose holds
//! are Redis leases (the `lease` crate in this workspace) and whose purchases are
//! accepted by Postgres only with a current fencing token. See the README for the design,
//! step by step along the article *Distributed locks and leases*.
//!
//! Layout: [`app`] builds the HTTP application once for `main`, the tests, the end-to-end
//! suite and the load test; [`seats`] owns the seat picker's rules and queries; [`buyer`]
//! is the anonymous browser session; [`error`] maps every failure to a status and a page.

pub mod app;
pub mod auction;
pub mod buyer;
pub mod config;
pub mod csrf;
pub mod error;
pub mod events;
pub mod health;
pub mod ledger;
pub mod live;
pub mod money;
pub mod orders;
pub mod racelab;
pub mod seats;
pub mod seed;
pub mod state;
pub mod telemetry;
pub mod testkit;
