//! # seatlock-history: the history checker
//!
//! Histories, as Jepsen records them: one line per client operation (who, what, on which
//! resource, with which fencing token, when it was invoked and when it completed on one
//! monotonic clock, and how it ended), written by the race lab, the failover lab and the
//! nemesis run (the harness's recorder, `seatlock_harness::history`) and by the lab's
//! timed runs (its challenges are judged here), then judged by [`check`] (necessary
//! conditions, pair by pair) and by a search for a linearization ([`linearizability`], against the
//! [`models`], one resource at a time: [`partitions`]; cross-checked against Porcupine on
//! its own test histories: [`porcupine`]).
//!
//! The outcome is what the client *knows*: `ok` (the server said yes), `fail` (the
//! server said no, with a reason), `unknown` (no answer came back: a timeout, a closed
//! connection, a 5xx). An unknown write may or may not have been applied; the checker
//! never assumes either way, it asks the resource (a final `read`).

pub mod check;
pub mod linearizability;
pub mod models;
pub mod partitions;
pub mod porcupine;

use serde::{Deserialize, Serialize};

/// What an operation did, in the fenced-lock vocabulary (Hazelcast's `FencedMutex`,
/// the article's steps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// Take the lease (a seat hold, a bid lock); `ok` carries the fencing token granted.
    Acquire,
    /// Extend a lease the holder has.
    Renew,
    /// Give the lease back (compare-and-delete on the owner token).
    Release,
    /// Write to the resource behind the lease (a purchase, a bid), with the holder's token.
    Write,
    /// Read the resource: who it accepted (`value`), e.g. the final state after a run.
    Read,
}

/// How an operation ended, as the client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The server said it was done.
    Ok,
    /// The server said it was not done, and why (`Op::reason`).
    Fail,
    /// No answer the client can trust: it may or may not have been done.
    Unknown,
}

/// One operation of a history: a line of `history.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Op {
    /// Who sent it: one single-threaded client (a buyer's tab, a bidder), as Jepsen's
    /// processes are: its operations never overlap.
    pub process: String,
    /// Whose lease it is: the buyer (several tabs share one buyer cookie, so one holder).
    pub holder: String,
    /// What the operation was: acquire, write, release or a final read.
    pub op: OpKind,
    /// The lock's resource: `seat 12`, `item 3`.
    pub resource: String,
    /// The fencing token granted (acquire) or carried (write, release), when known.
    pub fencing_token: Option<i64>,
    /// A write's or a read's value: what was written (`sold`, a bid's cents), or the
    /// holders a final read found, comma-separated.
    pub value: Option<String>,
    /// When the client sent it, ms on the history's monotonic clock.
    pub invoke_ms: f64,
    /// When the client had its answer (or gave up), same clock.
    pub complete_ms: f64,
    /// How it ended: ok, failed, or unknown.
    pub outcome: Outcome,
    /// Why it failed (the refusal code: `stale`, `expired`, …) or why it is
    /// unknown (`timeout`, `503`, `hung up`).
    pub reason: Option<String>,
}

/// The resource name of a seat in histories: `seat <id>`.
pub fn seat_resource(seat: i64) -> String {
    format!("seat {seat}")
}
