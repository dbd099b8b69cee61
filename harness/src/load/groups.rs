//! The race lab's group scenario (`load-test race --strategy groups`): buyers who each
//! want a group of adjacent seats, the groups overlapping, raced two ways through the
//! real HTTP flow on the product's servers:
//!
//! * [`GroupStrategy::SeatBySeat`]: each buyer holds its seats one at a time, in an
//!   order of its own (no global lock order), with the single-seat hold. When a seat is
//!   refused it holds part of its group: it releases what it got (`release-all`), backs
//!   off and tries again, until the group is bought, a seat of it is sold, or the
//!   round's deadline (livelock: buyers who keep taking and giving back each other's
//!   seats).
//! * [`GroupStrategy::Atomic`]: each buyer holds its whole group in one request, the
//!   product's one-script group hold (`POST /race-lab/events/{id}/hold-group`): all
//!   seats or none, so nothing is ever held in part.
//!
//! After every attempt the buyer reads its cart (`GET /events/{id}/checkout`, the
//! server's record of its holds) and counts a *partial group* if the cart holds some but
//! not all of its seats; a whole group is bought with one checkout. After the race,
//! Postgres says how many seats each buyer bought (a whole group or nothing) and the
//! invariant checker looks for double sales.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use serde::Serialize;
use sqlx::PgPool;
use tokio::sync::Barrier;

use seatlock::http::error::Refusal;

use super::race::RaceConfig;
use crate::check::CheckReport;
use crate::http::{HttpBuyer, Reply};

/// How a buyer takes the seats of its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupStrategy {
    /// One single-seat hold per seat, in the buyer's own order; give back and retry.
    SeatBySeat,
    /// One group hold: all seats or none.
    Atomic,
}

impl GroupStrategy {
    /// Both, in report order.
    pub const BOTH: [GroupStrategy; 2] = [GroupStrategy::SeatBySeat, GroupStrategy::Atomic];

    /// The name in the report: `seat-by-seat` or `atomic`.
    pub fn short_name(self) -> &'static str {
        match self {
            GroupStrategy::SeatBySeat => "seat-by-seat",
            GroupStrategy::Atomic => "atomic",
        }
    }
}

/// The shape of a group race on top of a [`RaceConfig`]: each round races
/// `config.seats` adjacent seats among `buyers × seats / group_size` buyers (so about
/// `config.buyers` buyers want each seat), each wanting `group_size` adjacent seats at a
/// random offset. `config.pause` is not used.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// The race's sizes, seed and hold TTL.
    pub race: RaceConfig,
    /// Seats per group (at most the servers' `--max-seats-per-buyer`).
    pub group_size: usize,
}

impl GroupConfig {
    /// Buyers (one group each) per round: at least two.
    pub fn buyers_per_round(&self) -> usize {
        (self.race.buyers * self.race.seats / self.group_size).max(2)
    }

    /// Groups wanted over all rounds.
    pub fn groups(&self) -> usize {
        self.buyers_per_round() * self.race.rounds
    }
}

/// How one buyer's group ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// The whole group was held and bought.
    Bought,
    /// A seat of the group was sold to someone else: it can never be completed.
    LostToASale,
    /// Still not bought at the round's deadline.
    GaveUp,
    /// An unexpected status (counted, reported).
    Failed(u16),
}

/// One buyer's tally.
#[derive(Debug, Clone, Copy)]
struct Tally {
    ending: Ending,
    /// Hold attempts (a pass over the group, or one group hold).
    attempts: usize,
    /// Attempts after which the cart held some but not all of the group's seats.
    partial_groups: usize,
    /// Seat holds granted and then given back unbought.
    wasted_holds: usize,
    /// Hold requests sent (one per seat, or one per group).
    hold_requests: usize,
}

/// One side's row of the group race (the JSON shape under `groups` in `load-test
/// --json`).
#[derive(Debug, Clone, Serialize)]
pub struct GroupRow {
    /// `seat-by-seat` or `atomic`.
    pub strategy: String,
    /// Seats per group.
    pub group_size: usize,
    /// Groups wanted (one buyer each).
    pub groups: usize,
    /// Groups held whole and bought.
    pub completed: usize,
    /// Groups never completed because a seat of them was sold to another buyer.
    pub lost_to_a_sale: usize,
    /// Groups never completed by the round's deadline (livelock).
    pub gave_up: usize,
    /// Hold attempts over all buyers; `retries` = attempts beyond each buyer's first.
    pub attempts: usize,
    /// Hold attempts beyond each buyer's first.
    pub retries: usize,
    /// The most attempts one buyer made.
    pub max_attempts_one_buyer: usize,
    /// Attempts after which the buyer's cart held part of its group (the server's record).
    pub partial_groups: usize,
    /// Seat holds granted and given back unbought.
    pub wasted_holds: usize,
    /// Hold requests sent.
    pub hold_requests: usize,
    /// Seats sold (Postgres) and buyers who bought part of a group (Postgres: a buyer's
    /// orders in the event are not exactly one group).
    pub seats_sold: usize,
    /// Buyers whose orders in the event are not exactly one group.
    pub partial_purchases: usize,
    /// From the invariant checker.
    pub double_sold_seats: usize,
    /// Accepted writes out of token order, or under a token two holders wrote with.
    pub invariant_violations: usize,
    /// Outcomes that were neither a purchase nor a clean refusal.
    pub failures: usize,
    /// Wall time of all rounds, in seconds.
    pub elapsed_s: f64,
}

/// Races every round of `config` under `strategy` against `servers` for `event_id`,
/// whose first `seats × rounds` seats (in map order) are raced; then reads what
/// Postgres sold and checks the invariant. Errors: too few seats, a store or an HTTP
/// error.
pub async fn race(
    config: &GroupConfig,
    strategy: GroupStrategy,
    servers: &[String],
    db: &PgPool,
    event_id: i64,
    seat_ids: &[i64],
    progress: &ProgressBar,
) -> anyhow::Result<GroupRow> {
    let race = &config.race;
    let needed = race.seats * race.rounds;
    anyhow::ensure!(
        seat_ids.len() >= needed && race.seats >= config.group_size,
        "the event has {} seats, the race needs {needed} in rounds of at least {}",
        seat_ids.len(),
        config.group_size
    );
    let mut rng = StdRng::seed_from_u64(race.seed);
    let started = Instant::now();
    let mut tallies = Vec::new();
    for round in seat_ids[..needed].chunks(race.seats) {
        let buyers = config.buyers_per_round();
        let barrier = Arc::new(Barrier::new(buyers));
        let mut tasks = Vec::new();
        for i in 0..buyers {
            let offset = rng.random_range(0..=round.len() - config.group_size);
            let buyer = GroupBuyer {
                server: servers[i % servers.len()].clone(),
                event_id,
                group: round[offset..offset + config.group_size].to_vec(),
                start_after: Duration::from_millis(rng.random_range(0..20)),
                deadline: race.deadline(),
                rng: StdRng::seed_from_u64(rng.random()),
            };
            let barrier = barrier.clone();
            tasks.push(tokio::spawn(
                async move { buyer.run(&barrier, strategy).await },
            ));
        }
        for task in tasks {
            tallies.push(task.await??);
            progress.inc(1);
        }
    }
    let elapsed = started.elapsed();
    let bought: Vec<i64> =
        sqlx::query_scalar("SELECT count(*) FROM orders WHERE event_id = $1 GROUP BY buyer_id")
            .bind(event_id)
            .fetch_all(db)
            .await?;
    let check = crate::check::check(db, event_id).await?;
    Ok(row(config, strategy, &tallies, &bought, check, elapsed))
}

/// Sums the tallies into a row; `bought` is each buying buyer's seat count.
fn row(
    config: &GroupConfig,
    strategy: GroupStrategy,
    tallies: &[Tally],
    bought: &[i64],
    check: CheckReport,
    elapsed: Duration,
) -> GroupRow {
    let ended = |e: Ending| tallies.iter().filter(|t| t.ending == e).count();
    let sum = |f: fn(&Tally) -> usize| tallies.iter().map(f).sum::<usize>();
    GroupRow {
        strategy: strategy.short_name().to_owned(),
        group_size: config.group_size,
        groups: tallies.len(),
        completed: ended(Ending::Bought),
        lost_to_a_sale: ended(Ending::LostToASale),
        gave_up: ended(Ending::GaveUp),
        attempts: sum(|t| t.attempts),
        retries: sum(|t| t.attempts.saturating_sub(1)),
        max_attempts_one_buyer: tallies.iter().map(|t| t.attempts).max().unwrap_or(0),
        partial_groups: sum(|t| t.partial_groups),
        wasted_holds: sum(|t| t.wasted_holds),
        hold_requests: sum(|t| t.hold_requests),
        seats_sold: bought.iter().sum::<i64>() as usize,
        partial_purchases: bought
            .iter()
            .filter(|&&n| n as usize != config.group_size)
            .count(),
        double_sold_seats: check.double_sold_seats,
        invariant_violations: check.violations.len(),
        failures: tallies
            .iter()
            .filter(|t| matches!(t.ending, Ending::Failed(_)))
            .count(),
        elapsed_s: elapsed.as_secs_f64(),
    }
}

/// One virtual buyer wanting one group.
struct GroupBuyer {
    server: String,
    event_id: i64,
    /// The seat ids it wants, in row order.
    group: Vec<i64>,
    start_after: Duration,
    deadline: Duration,
    rng: StdRng,
}

/// How one attempt at holding the group ended.
enum Attempt {
    /// Every seat held.
    Whole,
    /// Refused: `held` (someone else holds a seat: try again), `sold`, or another reply.
    Refused(Reply),
}

impl GroupBuyer {
    /// Opens the page, waits for the whole round, then attempts until the group is
    /// bought, lost to a sale, or the deadline passes.
    async fn run(mut self, barrier: &Barrier, strategy: GroupStrategy) -> anyhow::Result<Tally> {
        let mut http = HttpBuyer::new();
        http.get(&format!("{}/events/{}", self.server, self.event_id))
            .await?;
        barrier.wait().await;
        let began = Instant::now();
        tokio::time::sleep(self.start_after).await;
        let mut tally = Tally {
            ending: Ending::GaveUp,
            attempts: 0,
            partial_groups: 0,
            wasted_holds: 0,
            hold_requests: 0,
        };
        loop {
            tally.attempts += 1;
            let attempt = match strategy {
                GroupStrategy::SeatBySeat => self.hold_seat_by_seat(&http, &mut tally).await?,
                GroupStrategy::Atomic => self.hold_at_once(&http, &mut tally).await?,
            };
            let held = self.held_now(&mut http).await?;
            if (1..self.group.len()).contains(&held) {
                tally.partial_groups += 1;
            }
            let refused = match attempt {
                Attempt::Whole => {
                    let checkout = self.post(&http, "checkout", &[]).await?;
                    if checkout.status == StatusCode::SEE_OTHER {
                        tally.ending = Ending::Bought;
                        return Ok(tally);
                    }
                    checkout
                }
                Attempt::Refused(reply) => reply,
            };
            // Give back what this attempt got, if anything.
            if held > 0 {
                tally.wasted_holds += held;
                self.post(&http, "release-all", &[]).await?;
            }
            if refused.is_refused(&Refusal::AlreadySold) {
                tally.ending = Ending::LostToASale;
                return Ok(tally);
            }
            let retry = refused.is_refused(&Refusal::SomeoneIsBuying)
                || refused.is_refused(&Refusal::HoldsLapsed {
                    seats: String::new(),
                });
            if !retry {
                tally.ending = Ending::Failed(refused.status.as_u16());
                return Ok(tally);
            }
            if began.elapsed() > self.deadline {
                return Ok(tally);
            }
            let backoff = self.rng.random_range(10..40);
            tokio::time::sleep(Duration::from_millis(backoff)).await;
        }
    }

    /// One single-seat hold per seat, in a fresh random order, until one is refused.
    async fn hold_seat_by_seat(
        &mut self,
        http: &HttpBuyer,
        tally: &mut Tally,
    ) -> anyhow::Result<Attempt> {
        let mut order = self.group.clone();
        order.shuffle(&mut self.rng);
        for seat in order {
            tally.hold_requests += 1;
            let url = format!("{}/events/{}/seats/{seat}/hold", self.server, self.event_id);
            let reply = http.post(&url, &[]).await?;
            if reply.status != StatusCode::SEE_OTHER {
                return Ok(Attempt::Refused(reply));
            }
        }
        Ok(Attempt::Whole)
    }

    /// The whole group in one request (the product's group hold).
    async fn hold_at_once(&self, http: &HttpBuyer, tally: &mut Tally) -> anyhow::Result<Attempt> {
        tally.hold_requests += 1;
        let seats: Vec<String> = self.group.iter().map(i64::to_string).collect();
        let url = format!(
            "{}/race-lab/events/{}/hold-group",
            self.server, self.event_id
        );
        let reply = http.post(&url, &[("seats", &seats.join(","))]).await?;
        Ok(if reply.status == StatusCode::SEE_OTHER {
            Attempt::Whole
        } else {
            Attempt::Refused(reply)
        })
    }

    /// How many seats of the group the server says this buyer holds now: the `#hold-N`
    /// rows of its checkout page.
    async fn held_now(&self, http: &mut HttpBuyer) -> anyhow::Result<usize> {
        let page = http
            .get(&format!(
                "{}/events/{}/checkout",
                self.server, self.event_id
            ))
            .await?;
        anyhow::ensure!(page.status == StatusCode::OK, "checkout page: {page:?}");
        let held = held_seats(&page.body);
        Ok(self.group.iter().filter(|s| held.contains(s)).count())
    }

    /// POSTs the cart form `action` (`checkout`, `release-all`) of the event.
    async fn post(
        &self,
        http: &HttpBuyer,
        action: &str,
        fields: &[(&str, &str)],
    ) -> anyhow::Result<Reply> {
        let url = format!("{}/events/{}/{action}", self.server, self.event_id);
        http.post(&url, fields).await
    }
}

/// The seat ids of the `id="hold-N"` rows of a checkout page.
fn held_seats(html: &str) -> HashSet<i64> {
    html.split("id=\"hold-")
        .skip(1)
        .filter_map(|rest| rest.split('"').next()?.parse().ok())
        .collect()
}

/// The group rows as a Markdown table.
pub fn table(rows: &[GroupRow]) -> String {
    let mut out = String::from(
        "| groups of N | wanted | completed | lost to a sale | gave up | attempts (max one buyer) | partial groups | wasted holds | hold requests | seats sold | partial purchases | sold twice | s |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} ({}) | {} | {} | {} | {} | {} ({}) | {} | {} | {} | {} | {} | {} | {:.1} |\n",
            r.strategy,
            r.group_size,
            r.groups,
            r.completed,
            r.lost_to_a_sale,
            r.gave_up,
            r.attempts,
            r.max_attempts_one_buyer,
            r.partial_groups,
            r.wasted_holds,
            r.hold_requests,
            r.seats_sold,
            r.partial_purchases,
            r.double_sold_seats,
            r.elapsed_s
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::held_seats;

    #[test]
    fn held_seats_reads_the_hold_rows() {
        let page = r#"<tr class="hold" id="hold-12"><td>x</td></tr><tr id="hold-13">"#;
        assert_eq!(held_seats(page), [12, 13].into());
        assert!(held_seats("<p>no holds</p>").is_empty());
    }
}
