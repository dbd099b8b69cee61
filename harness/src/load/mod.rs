//! The race lab's client side and the throughput runs, used by the `load-test` binary and
//! `make bench`.
//!
//! * [`race`]: virtual buyers racing for the same seats through the real HTTP flow, one
//!   strategy at a time (`load-test race`).
//! * [`groups`]: buyers racing for overlapping groups of seats, seat by seat against
//!   the one-script group hold (`load-test race --strategy groups`).
//! * [`throughput`]: hold+release pairs and confirms per second at N buyers
//!   (`load-test holds`, the bench's HTTP rows): closed loop, each buyer sends its next
//!   request when the last one is answered.
//! * [`open_loop`]: holds sent at a fixed arrival rate, whatever the answers (the
//!   bench's `hold_open_loop_p99_ms`).
//! * [`queue`]: a crowd through an on-sale's waiting room across several servers
//!   (`load-test queue`): never more than N shopping, admission in arrival order.
//! * [`nemesis`]: buyers, tabs and bidders under a seeded schedule of faults, every
//!   operation in a history judged by [`crate::history::check`] (`load-test nemesis`).
//! * [`onsale`]: the opening minute of an on-sale (`load-test onsale`, `make onsale`):
//!   a crowd of lookers, buyers, hang-ups, retriers and bots in a burst against N servers
//!   behind HAProxy, through the waiting room when there is one; checked in Postgres,
//!   plotted over time.
//! * [`report`]: the JSON report, the Markdown table and the HTML page with its charts.

pub mod bids;
pub mod failover;
pub mod groups;
pub mod nemesis;
pub mod onsale;
pub mod open_loop;
pub mod queue;
pub mod race;
pub mod report;
pub mod throughput;
pub mod timeline;
