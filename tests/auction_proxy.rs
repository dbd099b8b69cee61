//! Proxy bidding, differentially: the one fenced bid statement (`queries::place_bid`, its
//! resolution `auction_resolve` in migrations/0016) against a sequential reference of
//! about fifty lines ([`Reference`]), over 10,000 random bid sequences on a real Postgres:
//! several bidders, equal maxima, lowered maxima, reserves, soft-close extensions, the
//! hard stop, bids arriving before the start and after the end. Every bid's acceptance,
//! the price, leader and end it leaves, and each item's final state must agree: 0
//! mismatches. Seeded (`SEATLOCK_PROXY_SEED` replays one run).

use std::cmp::Reverse;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use futures_util::{StreamExt, stream};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use seatlock::auction::Bid;
use seatlock::auction::increments::increment_cents;
use seatlock::auction::queries;
use seatlock::money::MAX_AMOUNT_CENTS;
use seatlock::profile::BuyerProfile;
use seatlock_harness::{auction_item, fresh_database};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

/// How many random sequences (one item each).
const SEQUENCES: usize = 10_000;
/// How many sequences run at once, each on its own connection.
const AT_ONCE: usize = 16;
/// The bidders of every sequence.
const BIDDERS: [&str; 4] = ["b0", "b1", "b2", "b3"];

/// A maximum: (bidder, maximum in cents, place in the item's order).
type Max = (usize, i64, i64);

/// The sequential reference: the rules of docs/auction.md, one bid after the other, times
/// in milliseconds after the item's start.
#[derive(Clone, Debug, PartialEq)]
struct Reference {
    start_price: i64,
    reserve: i64,
    window_ms: i64,
    ends_ms: i64,
    hard_stop_ms: i64,
    leader: Option<Max>,
    runner_up: Option<Max>,
    price: Option<i64>,
    count: i64,
}

impl Reference {
    /// Bidder `who` states `max` at `arrived_ms`: accepted or not.
    fn bid(&mut self, who: usize, max: i64, arrived_ms: i64) -> bool {
        let on_time = (0..self.ends_ms).contains(&arrived_ms);
        if !on_time || max > MAX_AMOUNT_CENTS || self.price == Some(MAX_AMOUNT_CENTS) {
            return false;
        }
        let leads = self.leader.is_some_and(|(id, ..)| id == who);
        let least = match self.price {
            None => self.start_price,
            Some(price) if leads => price,
            Some(price) => (price + increment_cents(price)).min(MAX_AMOUNT_CENTS),
        };
        if max < least {
            return false;
        }
        self.count += 1;
        let mut maxima: Vec<Max> = [self.leader, self.runner_up]
            .into_iter()
            .flatten()
            .filter(|&(id, ..)| id != who)
            .collect();
        maxima.push((who, max, self.count));
        maxima.sort_by_key(|&(_, max, place)| (Reverse(max), place));
        let top = maxima[0];
        self.leader = Some(top);
        self.runner_up = maxima.get(1).copied();
        let mut price = match (self.runner_up, self.price) {
            (_, Some(kept)) if leads && top.0 == who => kept, // no self-outbid
            (None, _) => self.start_price,
            (Some((_, second, _)), _) => top.1.min(second + increment_cents(second)),
        };
        if self.reserve > 0 && top.1 >= self.reserve {
            price = price.max(self.reserve);
        }
        self.price = Some(price);
        if self.window_ms > 0 {
            self.ends_ms = self
                .ends_ms
                .max(arrived_ms + self.window_ms)
                .min(self.hard_stop_ms);
        }
        true
    }
}

/// One random step: who, which maximum, when it arrived (ms after the start).
#[derive(Clone, Copy, Debug)]
struct Step {
    who: usize,
    max: i64,
    arrived_ms: i64,
}

/// A random item and its bids. Maxima come from a coarse grid around the increment bands'
/// edges (so that equal maxima and ties are common), now and then the site's maximum;
/// arrivals cluster around the end, so that bids extend it, meet the hard stop, or come
/// too late.
fn sequence(rng: &mut StdRng) -> (Reference, Vec<Step>) {
    let window_ms = [0, 5_000, 20_000][rng.random_range(0..3)];
    let reference = Reference {
        start_price: [1_000, 2_400][rng.random_range(0..2)],
        reserve: [0, 0, 1_500, 2_600, 5_000][rng.random_range(0..5)],
        window_ms,
        ends_ms: 60_000,
        hard_stop_ms: 60_000 + [0, 10_000, 30_000][rng.random_range(0..3)],
        leader: None,
        runner_up: None,
        price: None,
        count: 0,
    };
    let steps = (0..rng.random_range(1..=8))
        .map(|_| Step {
            who: rng.random_range(0..BIDDERS.len()),
            max: match rng.random_range(0..20) {
                0 => MAX_AMOUNT_CENTS,
                1 => MAX_AMOUNT_CENTS + 1,
                _ => 900 + 50 * rng.random_range(0..60),
            },
            arrived_ms: match rng.random_range(0..10) {
                0 => rng.random_range(-2_000..0),
                1..=4 => rng.random_range(0..50_000),
                _ => rng.random_range(50_000..100_000),
            },
        })
        .collect();
    (reference, steps)
}

/// Inserts one item per sequence, all in one statement (terms as [`auction_item`]'s,
/// times `base` plus the reference's): the items' ids, in the sequences' order.
async fn insert_items(db: &PgPool, base: DateTime<Utc>, references: &[Reference]) -> Vec<i64> {
    let at = |ms: i64| base + TimeDelta::milliseconds(ms);
    let terms = auction_item("Differential poster").terms;
    let column = |f: fn(&Reference) -> i64| references.iter().map(f).collect::<Vec<i64>>();
    let ends: Vec<_> = references.iter().map(|r| at(r.ends_ms)).collect();
    let stops: Vec<_> = references.iter().map(|r| at(r.hard_stop_ms)).collect();
    let ids: Vec<(i64, i64)> = sqlx::query_as(
        "INSERT INTO auction_items (slug, title, description, starting_price_cents,
                reserve_price_cents, soft_close_secs, starts_at, ends_at, hard_stop_at)
         SELECT 'differential-' || n, $1, $2, start_price, reserve, (window_ms / 1000)::int,
                $3, ends_at, hard_stop_at
           FROM unnest($4::bigint[], $5::bigint[], $6::bigint[], $7::timestamptz[],
                       $8::timestamptz[]) WITH ORDINALITY
                AS s(start_price, reserve, window_ms, ends_at, hard_stop_at, n)
      RETURNING id, substr(slug, 14)::bigint",
    )
    .bind(&terms.title)
    .bind(&terms.description)
    .bind(at(0))
    .bind(column(|r| r.start_price))
    .bind(column(|r| r.reserve))
    .bind(column(|r| r.window_ms))
    .bind(ends)
    .bind(stops)
    .fetch_all(db)
    .await
    .expect("inserting the items");
    let mut ids = ids;
    ids.sort_by_key(|&(_, n)| n);
    ids.into_iter().map(|(id, _)| id).collect()
}

/// Runs one sequence's steps through the statement and the reference; the first
/// disagreement. The reference is left as it ends.
async fn differ(
    db: &PgPool,
    base: DateTime<Utc>,
    item_id: i64,
    reference: &mut Reference,
    steps: &[Step],
) -> Option<String> {
    let profiles: Vec<BuyerProfile> = BIDDERS
        .iter()
        .map(|id| BuyerProfile {
            id: (*id).into(),
            name: format!("Bidder {id}"),
        })
        .collect();
    for (n, step) in steps.iter().enumerate() {
        let bid = Bid {
            bidder: &profiles[step.who],
            item_id,
            max_cents: step.max,
            arrived_at: base + TimeDelta::milliseconds(step.arrived_ms),
        };
        // The grace is a week: this test's items ended a day ago by the Postgres clock.
        let grace = Duration::from_secs(7 * 86_400);
        let placed = queries::place_bid(db, &bid, Some(n as i64 + 1), grace)
            .await
            .expect("the bid statement runs");
        let accepted = reference.bid(step.who, step.max, step.arrived_ms);
        let got = placed.map(|p| {
            (
                p.price_cents,
                p.leader_id,
                (p.ends_at - base).num_milliseconds(),
            )
        });
        let want = accepted.then(|| {
            let (leader, ..) = reference.leader.expect("a leader after a bid");
            (
                reference.price.expect("a price after a bid"),
                BIDDERS[leader].to_owned(),
                reference.ends_ms,
            )
        });
        if got != want {
            return Some(format!(
                "item {item_id}, step {n} {step:?} of {steps:?}: statement {got:?}, reference {want:?}"
            ));
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bid_statement_agrees_with_the_sequential_reference_on_10_000_random_sequences() {
    let seed = std::env::var("SEATLOCK_PROXY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    let admin = std::env::var("DATABASE_URL").expect("DATABASE_URL (source .run/env)");
    let url = fresh_database(&admin).await.unwrap();
    let db = PgPoolOptions::new()
        .max_connections(AT_ONCE as u32)
        .connect(&url)
        .await
        .unwrap();
    let base: DateTime<Utc> = sqlx::query_scalar("SELECT now() - interval '1 day'")
        .fetch_one(&db)
        .await
        .unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut references, steps): (Vec<Reference>, Vec<Vec<Step>>) =
        (0..SEQUENCES).map(|_| sequence(&mut rng)).unzip();
    let ids = insert_items(&db, base, &references).await;
    let mismatches: Vec<String> = stream::iter(ids.iter().zip(references.iter_mut().zip(&steps)))
        .map(|(&id, (reference, steps))| differ(&db, base, id, reference, steps))
        .buffer_unordered(AT_ONCE)
        .filter_map(|mismatch| async move { mismatch })
        .collect()
        .await;
    assert!(
        mismatches.is_empty(),
        "seed {seed} (SEATLOCK_PROXY_SEED={seed} replays): {} mismatches, first: {}",
        mismatches.len(),
        mismatches[0]
    );
    // Each item as it ends: the hidden maxima and the number of bids.
    let stored: Vec<(Option<i64>, Option<i64>, i32)> = sqlx::query_as(
        "SELECT leader_max_cents, runner_up_max_cents, bid_count
           FROM auction_items ORDER BY id",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    let wanted: Vec<(Option<i64>, Option<i64>, i32)> = references
        .iter()
        .map(|r| {
            (
                r.leader.map(|(_, max, _)| max),
                r.runner_up.map(|(_, max, _)| max),
                r.count as i32,
            )
        })
        .collect();
    let differing = stored.iter().zip(&wanted).filter(|(s, w)| s != w).count();
    assert_eq!(differing, 0, "seed {seed}: items whose final state differs");
    let bids: i64 = sqlx::query_scalar("SELECT count(*) FROM bids WHERE NOT automatic")
        .fetch_one(&db)
        .await
        .unwrap();
    assert!(bids > SEQUENCES as i64, "most sequences place bids: {bids}");
}
