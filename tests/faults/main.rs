//! The fault suite: the article's invariant (at most one accepted sale per seat, writes in
//! fencing-token order) through the faults it names, against real processes that each
//! test starts and controls by PID on loopback: `seatlock serve` children
//! ([`ServerProcess`](seatlock_harness::ServerProcess)), a private `redis-server` and a
//! private PostgreSQL. Every child is killed when its guard drops, even when a test
//! panics. Servers are the lab's (`seatlock-lab serve --enable-race-lab`), so that a test
//! can park a confirm at a chosen point (`x-race-lab-pause-at`). Their purchase path is
//! the product's, fenced.
//!
//! One module per fault family; [`deployment`] and [`traffic`] are the suite's harness.

mod clocks;
mod cluster;
mod connections;
mod cooling;
mod crashes;
mod deployment;
mod failover;
mod hangups;
mod health;
mod payments;
mod poolers;
mod rotation;
mod scale_out;
mod shared_redis;
mod soak;
mod stalls;
mod store_loss;
mod tabs;
mod tls_proxy;
mod traffic;
mod waiting_room;
