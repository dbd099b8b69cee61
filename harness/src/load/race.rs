//! The client side of the race lab: virtual buyers racing for the same seats through the
//! real HTTP flow (session cookie, CSRF token, hold, confirm), spread over several server
//! processes.
//!
//! Each round gives every contended seat `buyers` buyers. One of them, chosen with the
//! seeded RNG, is the *pauser*: it starts first, so it wins the hold, and its confirm asks
//! the server for a pause longer than the hold's lease (the article's step 4: a holder
//! that stalls). The others keep retrying the hold and, once the lease lapses, buy.
//!
//! Every buyer records what it did into the race's [`History`]: each hold POST an
//! `acquire` (with the fencing token its page shows, under a leasing strategy), each
//! confirm a `write`; `load-test race` adds the final reads and judges it
//! ([`crate::history::check`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderValue};
use sqlx::PgPool;
use tokio::sync::Barrier;

use seatlock::failpoint::PAUSE_HEADER;
use seatlock::http::error::Refusal;
use seatlock_lab::PurchaseStrategy;

use crate::check::CheckReport;
use crate::history::check::{Model, Verdict};
use crate::history::{self, History, OpKind};
use crate::http::{HttpBuyer, Reply};

/// The shape of one race.
#[derive(Debug, Clone)]
pub struct RaceConfig {
    /// Buyers per contended seat.
    pub buyers: usize,
    /// Contended seats per round.
    pub seats: usize,
    /// Rounds (each on fresh seats).
    pub rounds: usize,
    /// The pauser's server-side pause before its write.
    pub pause: Duration,
    /// The servers' hold TTL (the lease length).
    pub hold_ttl: Duration,
    /// RNG seed: who pauses and when the others start.
    pub seed: u64,
}

impl RaceConfig {
    /// How long a buyer keeps trying in one round: the hold TTL and the pause (a holder
    /// that stalls past its lease lets the next one in), plus 5 s of slack.
    pub fn deadline(&self) -> Duration {
        self.hold_ttl + self.pause + Duration::from_secs(5)
    }
}

/// How one buyer's attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The purchase was accepted.
    Confirmed,
    /// Refused by Postgres: the fencing token was stale.
    StaleRejected,
    /// Refused: the buyer's hold had lapsed.
    HoldExpired,
    /// Refused: the seat was sold.
    SoldOut,
    /// Never got the hold before the round's deadline.
    GaveUp,
    /// An unexpected status (counted, reported).
    Failed(u16),
}

/// The numbers of one strategy's race, before the invariant check.
#[derive(Debug)]
pub struct RaceNumbers {
    /// Purchase attempts: buyers × seats × rounds.
    pub attempts: usize,
    /// Every buyer's outcome.
    pub outcomes: Vec<Outcome>,
    /// Hold + confirm time of every attempt that reached confirm, in microseconds.
    pub latency_us: Histogram<u64>,
    /// Wall time of all rounds.
    pub elapsed: Duration,
    /// Every buyer's attempt, for the report's timeline.
    pub log: Vec<Attempt>,
    /// The servers' hold TTL (how long a holder believes its lease lasts).
    pub hold_ttl: Duration,
    /// Every hold and confirm, one operation each (process `buyer <n>`, holder the page's
    /// buyer id, resource `seat <id>`), on the clock the log's times are read from. Has no
    /// final reads yet.
    pub history: History,
    /// The raced seats' ids: the first `seats × rounds` of the event's.
    pub seats: Vec<i64>,
}

/// One buyer's attempt on one seat, for the timeline ([`super::timeline`]); times are
/// ms since the race began.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The seat it was for.
    pub seat: i64,
    /// The buyer's public id (the page's `data-buyer`), as orders record it.
    pub buyer_id: String,
    /// When its hold was granted, if it was.
    pub held_ms: Option<f64>,
    /// When its last request (the confirm, or the refused hold) was answered.
    pub answered_ms: f64,
    /// How it ended.
    pub outcome: Outcome,
}

impl RaceNumbers {
    /// How many outcomes equal `outcome`.
    pub fn count(&self, outcome: Outcome) -> usize {
        self.outcomes.iter().filter(|o| **o == outcome).count()
    }

    /// Adds the final reads of the raced seats (what `checked`, the invariant check of
    /// the race's event, found Postgres accepted) to the history and judges it: a lease
    /// of the hold TTL, one sale per seat, token order where `strategy` fences its
    /// writes.
    pub fn judge_history(&self, strategy: PurchaseStrategy, checked: &CheckReport) -> Verdict {
        self.history.read_seats(checked, &self.seats);
        let model = Model {
            ttl_ms: self.hold_ttl.as_secs_f64() * 1e3,
            fenced: strategy == PurchaseStrategy::Fenced,
            exclusive: true,
            proxy_increment: None,
        };
        history::check::check(&self.history.ops(), model)
    }
}

/// Creates a new event on the grand hall for one race and returns its id and the seat
/// ids in map order.
pub async fn create_race_event(db: &PgPool, label: &str) -> anyhow::Result<(i64, Vec<i64>)> {
    let mut tx = db.begin().await?;
    let event_id: i64 = sqlx::query_scalar(
        "INSERT INTO events (venue_id, name, starts_at)
         SELECT id, $1, now() + interval '1 day' FROM venues WHERE slug = 'grand-hall'
         RETURNING id",
    )
    .bind(label)
    .fetch_optional(&mut *tx)
    .await?
    .context("the grand hall is not seeded: run `seatlock seed` on this database")?;
    seatlock::seed::create_event_seats(&mut tx, event_id).await?;
    tx.commit().await?;
    Ok((event_id, crate::stores::event_seats(db, event_id).await?))
}

/// Runs every round against `servers` for `event_id`, whose first `seats × rounds` seats
/// are raced. `strategy` only decides whether buyers must win a hold before confirming.
pub async fn race(
    config: &RaceConfig,
    strategy: PurchaseStrategy,
    servers: &[String],
    event_id: i64,
    seat_ids: &[i64],
    progress: &ProgressBar,
) -> anyhow::Result<RaceNumbers> {
    let needed = config.seats * config.rounds;
    anyhow::ensure!(
        seat_ids.len() >= needed,
        "the event has {} seats, the race needs {needed}",
        seat_ids.len()
    );
    let mut rng = StdRng::seed_from_u64(config.seed);
    let mut numbers = RaceNumbers {
        attempts: 0,
        outcomes: Vec::new(),
        // 1 µs to 1 hour, 3 significant figures.
        latency_us: Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds"),
        elapsed: Duration::ZERO,
        log: Vec::new(),
        hold_ttl: config.hold_ttl,
        history: History::new(),
        seats: seat_ids[..needed].to_vec(),
    };
    let started = Instant::now();
    for round in seat_ids[..needed].chunks(config.seats) {
        let barrier = Arc::new(Barrier::new(round.len() * config.buyers));
        let deadline = config.deadline();
        let mut tasks = Vec::new();
        for (seat_index, &seat) in round.iter().enumerate() {
            let pauser = rng.random_range(0..config.buyers);
            for i in 0..config.buyers {
                let server = servers[(seat_index * config.buyers + i) % servers.len()].clone();
                let start_after = if i == pauser {
                    Duration::ZERO
                } else {
                    Duration::from_millis(rng.random_range(5..30))
                };
                let pause = (i == pauser).then_some(config.pause);
                let barrier = barrier.clone();
                let retry_seed = rng.random::<u64>();
                let buyer = Buyer {
                    process: format!("buyer {}", numbers.attempts + tasks.len()),
                    history: numbers.history.clone(),
                    server,
                    event_id,
                    seat,
                    pause,
                    start_after,
                    deadline,
                    retry_seed,
                };
                tasks.push(tokio::spawn(
                    async move { buyer.run(&barrier, strategy).await },
                ));
            }
        }
        for task in tasks {
            let (attempt, latency) = task.await??;
            numbers.attempts += 1;
            numbers.outcomes.push(attempt.outcome);
            numbers.log.push(attempt);
            if let Some(latency) = latency {
                numbers
                    .latency_us
                    .saturating_record(latency.as_micros() as u64);
            }
            progress.inc(1);
        }
    }
    numbers.elapsed = started.elapsed();
    Ok(numbers)
}

/// One virtual buyer racing for one seat.
struct Buyer {
    /// Its name in the history (one per buyer: its requests never overlap).
    process: String,
    history: History,
    server: String,
    event_id: i64,
    seat: i64,
    pause: Option<Duration>,
    start_after: Duration,
    deadline: Duration,
    retry_seed: u64,
}

impl Buyer {
    /// Opens the page, waits for the whole round, then holds (retrying while someone else
    /// is buying) and confirms under `strategy`, recording each hold and confirm. Returns
    /// the attempt (times on the history's clock) and the hold + confirm time.
    async fn run(
        self,
        barrier: &Barrier,
        strategy: PurchaseStrategy,
    ) -> anyhow::Result<(Attempt, Option<Duration>)> {
        let holds_first = strategy.uses_lease();
        let mut headers = HeaderMap::new();
        if let Some(pause) = self.pause {
            headers.insert(PAUSE_HEADER, HeaderValue::from(pause.as_millis() as u64));
        }
        let mut http = HttpBuyer::with_headers(headers);
        let page_url = format!("{}/events/{}", self.server, self.event_id);
        let page = http.get(&page_url).await?;
        let holder = crate::http::page_buyer_id(&page.body).unwrap_or_default();
        let resource = history::seat_resource(self.seat);
        let ms = || self.history.now_ms();
        let attempt = |held_ms, outcome| Attempt {
            seat: self.seat,
            buyer_id: holder.clone(),
            held_ms,
            answered_ms: ms(),
            outcome,
        };
        barrier.wait().await;
        let began = Instant::now();
        tokio::time::sleep(self.start_after).await;
        let mut rng = StdRng::seed_from_u64(self.retry_seed);
        loop {
            let tried = Instant::now();
            let acquire = self
                .history
                .invoke(&self.process, &holder, OpKind::Acquire, &resource);
            let hold = http
                .seat_action(&self.server, self.event_id, self.seat, "hold")
                .await;
            let held_ms = ms();
            let hold_took = tried.elapsed();
            // Only a lease has a fencing token; the lock-free strategies' holds show none.
            let token = acquire
                .acquired(&hold, async {
                    if holds_first {
                        http.read_hold_token(&page_url, self.seat).await
                    } else {
                        Ok(None)
                    }
                })
                .await?;
            let hold = hold?;
            match hold.status {
                StatusCode::SEE_OTHER => {}
                // Held by another, or cooling: its lease lapsed under a confirm still in
                // flight (or inside a lock-delay). Either may come free: try again.
                _ if busy(&hold) && holds_first => {
                    if began.elapsed() > self.deadline {
                        return Ok((attempt(None, Outcome::GaveUp), None));
                    }
                    tokio::time::sleep(Duration::from_millis(rng.random_range(10..30))).await;
                    continue;
                }
                _ => return Ok((attempt(None, classify(&hold)), None)),
            }
            // Only the product's path fences its write with the hold's token.
            let fenced = strategy == PurchaseStrategy::Fenced;
            let write = self
                .history
                .invoke(&self.process, &holder, OpKind::Write, &resource)
                .token(token.filter(|_| fenced))
                .value("sold");
            let confirming = Instant::now();
            let confirm = http
                .seat_action(&self.server, self.event_id, self.seat, "confirm")
                .await;
            write.answered(&confirm);
            let confirm = confirm?;
            // The token's page GET is not the purchase's: hold + confirm, as before it.
            let latency = hold_took + confirming.elapsed();
            return Ok((attempt(Some(held_ms), classify(&confirm)), Some(latency)));
        }
    }
}

/// Whether a refused hold may come free: held by another buyer, or cooling
/// (docs/time-to-pay.md).
fn busy(hold: &Reply) -> bool {
    hold.is_refused(&Refusal::SomeoneIsBuying)
        || hold.is_refused(&Refusal::Cooling { remaining_ms: 0 })
}

/// Reads an outcome from a response: 303 is a purchase; a 409's refusal code says why
/// not.
fn classify(reply: &Reply) -> Outcome {
    if reply.status == StatusCode::SEE_OTHER {
        return Outcome::Confirmed;
    }
    match reply.refusal.as_deref() {
        Some(code) if code == Refusal::StaleToken.code() => Outcome::StaleRejected,
        Some(code) if code == Refusal::HoldExpired.code() => Outcome::HoldExpired,
        Some(code) if code == Refusal::AlreadySold.code() => Outcome::SoldOut,
        _ => Outcome::Failed(reply.status.as_u16()),
    }
}
