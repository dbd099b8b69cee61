//! Retrying a busy lease: exponential backoff with full jitter, bounded in attempts and
//! in time (Marc Brooker, "Exponential Backoff And Jitter", AWS Architecture Blog, 2015).
//!
//! For short locks that serialise contenders arriving together (an auction item's bid
//! lock): the first caller wins, the others wait a random, growing delay and try again,
//! so they do not retry in lock-step; after the bounds they give up with the last
//! [`LeaseError::Held`], which callers turn into "busy, try again".

use std::time::Duration;

use rand::Rng;

use crate::error::LeaseError;
use crate::lease::Lease;
use crate::telemetry::LOCK_WAIT_SECONDS;

/// How a busy lease is retried: attempt `n` (0-based) that finds the lease held sleeps a
/// uniformly random time in `[0, min(cap, first * 2^n)]`, never longer than the holder's
/// remaining lease time (plus 1 ms). Gives up after `attempts` tries in all, or when the
/// next sleep would end more than `budget` after the first try, whichever comes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Upper bound of the first retry's delay.
    pub first: Duration,
    /// Largest upper bound of any one delay.
    pub cap: Duration,
    /// Tries in all, the first included (at least 1).
    pub attempts: u32,
    /// Longest total time spent waiting before giving up.
    pub budget: Duration,
}

impl Backoff {
    /// Upper bound of the delay after the `retry`-th busy answer (0-based): `first * 2^retry`,
    /// at most `cap`.
    pub fn ceiling(&self, retry: u32) -> Duration {
        self.first
            .checked_mul(1u32.checked_shl(retry).unwrap_or(u32::MAX))
            .unwrap_or(self.cap)
            .min(self.cap)
    }

    /// A random delay for the `retry`-th busy answer, in `[0, ceiling(retry)]`, and no longer
    /// than `remaining + 1 ms` (the holder's lease cannot outlive that).
    pub fn delay(&self, retry: u32, remaining: Duration) -> Duration {
        let ceiling = self
            .ceiling(retry)
            .min(remaining + Duration::from_millis(1));
        let micros = ceiling.as_micros() as u64;
        Duration::from_micros(rand::rng().random_range(0..=micros))
    }
}

/// Calls `attempt` until it returns anything but [`LeaseError::Held`], sleeping
/// [`Backoff::delay`] between calls, within `backoff`'s attempts and time budget; records
/// the wait under [`LOCK_WAIT_SECONDS`]. The loop behind
/// [`crate::LeaseStore::acquire_with_backoff`], for every store.
pub(crate) async fn retry_while_held<F, Fut>(
    mut attempt: F,
    backoff: Backoff,
) -> Result<Lease, LeaseError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Lease, LeaseError>>,
{
    let started = tokio::time::Instant::now();
    let mut retry = 0;
    let answer = loop {
        let attempt = attempt().await;
        let remaining = match &attempt {
            Err(LeaseError::Held { remaining, .. }) => *remaining,
            _ => break attempt,
        };
        let delay = backoff.delay(retry, remaining);
        retry += 1;
        if retry >= backoff.attempts.max(1) || started.elapsed() + delay > backoff.budget {
            break attempt;
        }
        tokio::time::sleep(delay).await;
    };
    let outcome = match &answer {
        Ok(_) => "granted",
        Err(LeaseError::Held { .. }) => "busy",
        Err(_) => "failed",
    };
    metrics::histogram!(LOCK_WAIT_SECONDS, "outcome" => outcome).record(started.elapsed());
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    const BACKOFF: Backoff = Backoff {
        first: Duration::from_millis(5),
        cap: Duration::from_millis(100),
        attempts: 10,
        budget: Duration::from_secs(1),
    };

    #[test]
    fn ceilings_double_up_to_the_cap() {
        let ceilings: Vec<u64> = (0..7)
            .map(|n| BACKOFF.ceiling(n).as_millis() as u64)
            .collect();
        assert_eq!(ceilings, [5, 10, 20, 40, 80, 100, 100]);
        assert_eq!(BACKOFF.ceiling(200), BACKOFF.cap, "no overflow");
    }

    #[test]
    fn delays_are_jittered_within_the_ceiling_and_the_holders_remaining_time() {
        let delays: Vec<Duration> = (0..200)
            .map(|_| BACKOFF.delay(4, Duration::from_secs(5)))
            .collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(80)));
        assert!(
            delays.iter().any(|d| *d != delays[0]),
            "200 draws are not all equal"
        );
        for _ in 0..100 {
            assert!(BACKOFF.delay(6, Duration::from_millis(3)) <= Duration::from_millis(4));
        }
    }
}
