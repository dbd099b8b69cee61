//! Recording histories (the recorder the loads share: one monotonic clock, operations
//! invoked and completed by many tasks), over the checker's types and judges in
//! [`seatlock_history`], re-exported here.

pub use seatlock_history::{
    Op, OpKind, Outcome, check, linearizability, models, partitions, porcupine, seat_resource,
};

use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A history being recorded by many tasks at once; cheap to clone (one shared log).
#[derive(Debug, Clone)]
pub struct History {
    started: Instant,
    ops: Arc<Mutex<Vec<Op>>>,
}

/// An operation sent and not yet answered: [`Pending::complete`] records it.
#[must_use = "an invoked operation is recorded only when completed"]
pub struct Pending {
    history: History,
    op: Op,
}

impl History {
    /// A new, empty history whose clock starts now.
    pub fn new() -> History {
        History {
            started: Instant::now(),
            ops: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// A new, empty history on this one's clock (several workloads, one timeline).
    pub fn sharing_clock(&self) -> History {
        History {
            started: self.started,
            ops: Arc::default(),
        }
    }

    /// Milliseconds since the history began (its one monotonic clock).
    pub fn now_ms(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1e3
    }

    /// Marks the invocation of `op` by `process` on behalf of `holder`, on `resource`.
    pub fn invoke(&self, process: &str, holder: &str, op: OpKind, resource: &str) -> Pending {
        let invoke_ms = self.now_ms();
        Pending {
            history: self.clone(),
            op: Op {
                process: process.into(),
                holder: holder.into(),
                op,
                resource: resource.into(),
                fencing_token: None,
                value: None,
                invoke_ms,
                complete_ms: invoke_ms,
                outcome: Outcome::Unknown,
                reason: None,
            },
        }
    }

    /// Every operation recorded so far, in the order they completed.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().expect("history lock").clone()
    }

    /// Writes the history as JSON lines (one [`Op`] per line) to `path`, creating its folder.
    pub fn write_jsonl(&self, path: &std::path::Path) -> anyhow::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut text = String::new();
        for op in self.ops() {
            text.push_str(&serde_json::to_string(&op)?);
            text.push('\n');
        }
        std::fs::write(path, text)?;
        Ok(())
    }
}

impl Default for History {
    fn default() -> Self {
        History::new()
    }
}

impl Pending {
    /// Sets the fencing token the operation carries (a write's, a release's).
    pub fn token(mut self, fencing_token: Option<i64>) -> Pending {
        self.op.fencing_token = fencing_token;
        self
    }

    /// Sets the value written or read.
    pub fn value(mut self, value: impl Into<String>) -> Pending {
        self.op.value = Some(value.into());
        self
    }

    /// Records the operation as completed now with `outcome` (and `reason`, for a `fail`
    /// or an `unknown`).
    pub fn complete(self, outcome: Outcome, reason: Option<String>) {
        self.completed(outcome, reason).record();
    }

    /// Records an acquire as granted now, with the fencing token it was given.
    pub fn granted(self, fencing_token: Option<i64>) {
        self.token(fencing_token).complete(Outcome::Ok, None);
    }

    /// Records the operation as completed now, as `reply` answered it ([`outcome_of`]).
    pub fn answered(self, reply: &anyhow::Result<crate::Reply>) {
        self.answered_later(reply).record();
    }

    /// Marks the operation completed now, as `reply` answered it, without recording it
    /// yet: for a write whose fencing token is learned only afterwards (a bid's, read from
    /// what the resource accepted). Set it with [`Answered::token`], then
    /// [`Answered::record`].
    pub fn answered_later(self, reply: &anyhow::Result<crate::Reply>) -> Answered {
        let (outcome, reason) = outcome_of(reply);
        self.completed(outcome, reason)
    }

    /// Records an acquire as `reply` answered it. A grant (`ok`) completes once the client
    /// has read its fencing token with `token` (a browser follows the hold's redirect to
    /// the page that shows it), so the operation ends when the client knows its token; a
    /// refusal or no answer completes now. Returns the token granted, if any. Errors:
    /// `token`'s (the acquire is not recorded then).
    pub async fn acquired(
        self,
        reply: &anyhow::Result<crate::Reply>,
        token: impl Future<Output = anyhow::Result<Option<i64>>>,
    ) -> anyhow::Result<Option<i64>> {
        match outcome_of(reply) {
            (Outcome::Ok, _) => {
                let token = token.await?;
                self.granted(token);
                Ok(token)
            }
            (outcome, reason) => {
                self.complete(outcome, reason);
                Ok(None)
            }
        }
    }

    fn completed(mut self, outcome: Outcome, reason: Option<String>) -> Answered {
        self.op.complete_ms = self.history.now_ms();
        self.op.outcome = outcome;
        self.op.reason = reason;
        Answered(self)
    }
}

/// An operation answered and not yet recorded ([`Pending::answered_later`]): its
/// completion time and outcome are fixed, its fencing token may still be set.
#[must_use = "an answered operation is recorded only by `record`"]
pub struct Answered(Pending);

impl Answered {
    /// Sets the fencing token the operation carried, learned after its answer.
    pub fn token(mut self, fencing_token: Option<i64>) -> Answered {
        self.0.op.fencing_token = fencing_token;
        self
    }

    /// Records the operation, with the completion time it was answered at.
    pub fn record(self) {
        let Pending { history, op } = self.0;
        history.ops.lock().expect("history lock").push(op);
    }
}

/// How a client reads an HTTP answer: a 2xx or 3xx is `ok`; a 4xx is `fail`, its reason
/// the refusal code (`stale`, `expired`, …) or the status; a 5xx, a timeout or a broken
/// connection is `unknown` (the server may have done it before it failed to say so).
pub fn outcome_of(reply: &anyhow::Result<crate::Reply>) -> (Outcome, Option<String>) {
    match reply {
        Ok(r) if r.status.is_success() || r.status.is_redirection() => (Outcome::Ok, None),
        Ok(r) if r.status.is_client_error() => (
            Outcome::Fail,
            Some(
                r.refusal
                    .clone()
                    .unwrap_or_else(|| r.status.as_u16().to_string()),
            ),
        ),
        Ok(r) => (Outcome::Unknown, Some(r.status.as_u16().to_string())),
        Err(e) => (Outcome::Unknown, Some(unknown_reason(e))),
    }
}

/// A short reason for an answer that never came: `timeout`, `connection`, or the error.
fn unknown_reason(error: &anyhow::Error) -> String {
    match error.downcast_ref::<reqwest::Error>() {
        Some(e) if e.is_timeout() => "timeout".into(),
        Some(e) if e.is_connect() || e.is_request() => "connection".into(),
        _ => error.to_string(),
    }
}

impl History {
    /// Records, as process `checker`, one final `read` per seat of `report` (what the
    /// resource accepted, in the order it landed: [`check::accepted_value`]), resource
    /// `seat <id>`; `seats` lists every seat the run wrote to, so a seat with no
    /// accepted write reads as empty.
    pub fn read_seats(&self, report: &crate::check::CheckReport, seats: &[i64]) {
        for &seat in seats {
            let accepted: Vec<check::Accepted> = report
                .writes
                .iter()
                .filter(|w| w.seat_id == seat)
                .map(|w| check::Accepted::of(&w.buyer_id, w.fence_token))
                .collect();
            self.read_accepted(&seat_resource(seat), &accepted);
        }
    }

    /// Records, as process `checker`, a final `read` of `resource` that found `accepted`:
    /// every write it accepted, in the order they landed ([`check::accepted_value`]).
    pub fn read_accepted(&self, resource: &str, accepted: &[check::Accepted]) {
        self.invoke("checker", "checker", OpKind::Read, resource)
            .value(check::accepted_value(accepted))
            .complete(Outcome::Ok, None);
    }
}
