//! The closer: a background task in every server process that closes auctions whose end
//! has passed, each exactly once however many processes run it.
//!
//! Every `--close-interval-ms` (default 1 s; 0 = this process never closes) it lists the
//! open items past their end by the arrival grace ([`super::bid::arrival_grace`]: a bid
//! that arrived before the end may still take its turn until then;
//! [`queries::due_items`]) and for each one:
//!
//! 1. claims the closing job: a lease on `<namespace>:auction:<id>` / `close`
//!    (`--close-lease-ttl-ms`, default 6 s) from the `lease` crate. Another process that
//!    holds it is left to do the job;
//! 2. starts a [`lease::Watchdog`] that renews the lease every TTL/3 and reports its loss;
//! 3. takes a Postgres connection, giving up (nothing sent) if the watchdog reports the
//!    lease lost first; then writes the result with the lease's fencing token in ONE
//!    statement ([`queries::close_item`]: still open, end passed, no higher token
//!    accepted) and AWAITS its answer, lost lease or not;
//! 4. stops the watchdog and releases the lease, owner-checked.
//!
//! Why await once sent: abandoning the statement's future (say in a `tokio::select!`
//! against the watchdog) does not withdraw it from Postgres, which runs it and commits it
//! anyway; a closer that then said "lease lost, gave up" would be reporting a write that
//! happened. Awaiting is safe because the statement is fenced: if a
//! newer holder has written, its higher token refuses ours; if none has, the row has
//! accepted no higher token and the close stands. So the outcome is what Postgres
//! did. The wait is bounded by the store timeout (`statement_timeout` and
//! `lock_timeout`, `--store-timeout-ms`).
//!
//! Two processes never both close an item (the statement requires `status = 'open'`), and
//! a closer that paused past its lease cannot write over a newer holder's write (the
//! fence). The result is computed inside the statement from the row at that instant, so
//! it cannot be stale either.

use lease::{Lease, LeaseError, WatchdogEvent};
use rand::Rng;
use tokio::task::JoinHandle;

use super::queries;
use crate::http::error::Result;
use crate::state::AppState;

/// Most items one pass closes; the rest wait for the next pass.
const BATCH: i64 = 100;

/// What one attempt to close an item ended in: always what Postgres did with this
/// closer's statement, or that no statement was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CloseOutcome {
    /// This closer's statement wrote the result (`sold`, `reserve_not_met` or
    /// `no_bids`) and it committed. Also when the watchdog reported the lease lost while
    /// the statement was in flight: the fence admitted it, so no newer holder had written.
    Closed(String),
    /// Another closer holds the closing job's lease: it is doing the job. Nothing sent.
    ClaimedElsewhere,
    /// The statement ran and wrote nothing: already closed, the end moved later (a
    /// soft-close bid), or the row accepted a higher fencing token (this closer's lease
    /// lapsed and a newer holder wrote first).
    Refused,
    /// The watchdog reported the lease lost before the statement was sent (while this
    /// closer waited for a Postgres connection): nothing sent, nothing written. The next
    /// pass, here or elsewhere, finishes the job.
    LeaseLost,
}

/// The running closer task; dropping it stops the task (a closing job in flight is
/// abandoned: its lease lapses and the next pass, here or elsewhere, finishes it; a close
/// statement already sent still runs in Postgres, fenced, and may commit unreported).
pub struct Closer(JoinHandle<()>);

impl Drop for Closer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the closer on the Tokio runtime, or returns `None` when
/// `--close-interval-ms` is 0. Its first pass runs one interval after the start.
pub fn spawn(state: AppState) -> Option<Closer> {
    let every = state.settings.close_interval()?;
    let label = format!("closer-{:08x}", rand::rng().random::<u32>());
    Some(Closer(tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // A pass caught on a store that stopped answering is cut off like a request.
            let pass = crate::http::deadline::within(
                state.settings.request_deadline(),
                close_due(&state, &label),
            );
            if let Err(err) = pass.await.and_then(|closed| closed) {
                tracing::warn!(closer = label, error = %err, "closing pass failed");
            }
        }
    })))
}

/// One pass: tries to close every open item past its end (at most 100), one after the
/// other; returns each item's outcome. `label` names this closer in the lease's holder
/// entry. Errors: 503 when Postgres or Redis is unavailable (the pass stops there).
pub async fn close_due(state: &AppState, label: &str) -> Result<Vec<(i64, CloseOutcome)>> {
    let due = queries::due_items(&state.db, BATCH, grace(state)).await?;
    let mut outcomes = Vec::with_capacity(due.len());
    for item_id in due {
        outcomes.push((item_id, close_item(state, item_id, label).await?));
    }
    Ok(outcomes)
}

/// Claims item `item_id`'s closing job: the lease, or `None` if another closer holds it.
/// One Redis round trip.
pub async fn claim(state: &AppState, item_id: i64, label: &str) -> Result<Option<Lease>> {
    let key = super::closing_key(&state.settings.lease_namespace, item_id);
    match state
        .leases
        .acquire(&key, label, state.settings.close_lease_ttl())
        .await
    {
        Ok(lease) => Ok(Some(lease)),
        Err(LeaseError::Held { .. }) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// Closes one item: claim, watchdog, fenced write, release. Gives up only before the
/// statement is sent ([`CloseOutcome::LeaseLost`]: the watchdog reported the loss while
/// this closer waited for a Postgres connection); once sent, the statement's answer is
/// awaited and reported ([`CloseOutcome::Closed`] or [`CloseOutcome::Refused`]), since
/// Postgres runs it whether or not anyone listens. Round trips: claim and release (1 Redis
/// each), one renewal per TTL/3 while writing, and one Postgres statement.
///
/// Errors: 503 when Redis (claim) or Postgres is unavailable, or the statement ran past
/// the store timeout (Postgres cancelled it: nothing written). A connection lost after the
/// statement was sent leaves its fate unknown to this closer; the row says, and the next
/// pass acts on it.
pub async fn close_item(state: &AppState, item_id: i64, label: &str) -> Result<CloseOutcome> {
    let Some(lease) = claim(state, item_id, label).await? else {
        return Ok(CloseOutcome::ClaimedElsewhere);
    };
    let token = lease.fencing_token();
    let mut watchdog = lease::Watchdog::start(state.leases.clone(), lease);
    let outcome = async {
        let mut conn = tokio::select! {
            biased;
            () = watchdog.lost() => return Ok(CloseOutcome::LeaseLost),
            conn = state.db.acquire() => conn?,
        };
        // Sent from here on: Postgres runs (and commits) the statement even if this
        // future were dropped, so its answer is awaited, lease lost or not. The fence
        // makes a late write safe.
        Ok(written(
            queries::close_item(&mut *conn, item_id, token.0 as i64, grace(state)).await?,
        ))
    }
    .await;
    let sent = matches!(outcome, Ok(CloseOutcome::Closed(_) | CloseOutcome::Refused));
    if sent && watchdog.status() == WatchdogEvent::Lost {
        tracing::warn!(
            item = item_id,
            closer = label,
            fencing_token = token.0,
            ?outcome,
            "closing lease lost while the close was in flight; reporting what Postgres did"
        );
    }
    if let Err(err) = watchdog.release(&*state.leases).await {
        tracing::warn!(item = item_id, error = %err, "closing lease release failed");
    }
    if let Ok(outcome) = &outcome {
        tracing::info!(
            item = item_id,
            closer = label,
            fencing_token = token.0,
            ?outcome,
            "closing job done"
        );
    }
    outcome
}

/// The closing write under the fencing token `token` ([`queries::close_item`]), one
/// statement: [`CloseOutcome::Closed`] with the result written, or
/// [`CloseOutcome::Refused`]. Errors: 503 Postgres unavailable or too slow.
pub async fn write_result(state: &AppState, item_id: i64, token: u64) -> Result<CloseOutcome> {
    Ok(written(
        queries::close_item(&state.db, item_id, token as i64, grace(state)).await?,
    ))
}

/// How long past its end an item stays open for bids that arrived before the end
/// ([`super::bid::arrival_grace`]).
fn grace(state: &AppState) -> std::time::Duration {
    super::bid::arrival_grace(&state.settings)
}

/// The outcome of a closing statement that returned `result` (`None`: it wrote nothing).
fn written(result: Option<String>) -> CloseOutcome {
    match result {
        Some(result) => CloseOutcome::Closed(result),
        None => CloseOutcome::Refused,
    }
}
