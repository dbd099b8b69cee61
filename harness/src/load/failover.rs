//! The failover lab (`load-test failover`, `make failover`): a Redis failover that loses
//! grants, through the real HTTP flow, on two `seatlock-lab serve` processes that follow the
//! failover through Sentinel ([`crate::sentinel::SentinelTopology`]).
//!
//! Seats: buyers A hold a few seats on server 1 while the replica is kept from applying
//! the grants, the primary is killed, Sentinel promotes the replica; buyers B then hold
//! the same seats on server 2 (a double grant: the promoted replica never saw A's), B
//! confirm, A confirm late. Auction: bidder A takes the item's bid lock in the same
//! window and stalls (the race lab's pause) across the failover; bidder B takes the lock
//! on the new primary and bids; A's bid lands last. Each runs with the failover guard
//! off (`--lab-disable-failover-guard`) and on. Expected: a double grant in every run
//! (replication is asynchronous), duplicate fencing tokens only without the guard, no
//! seat sold twice. A's late bid is refused either way, for different reasons: without
//! the guard its token is B's, and the bids table takes one bid per token
//! (`bid_lock_used`: the resource caught the repeated token); with the guard its token is
//! below B's (`stale_bid_lock`: the fence).
//!
//! Each run records a [`History`]: the seats' holds (`acquire`, with the token the page
//! shows) and confirms (`write`), the bids (`write`, with the token the bids table shows),
//! then final reads of what Postgres accepted; the history checker judges it
//! ([`crate::history::check`]), fenced, a seat sold once, an item taking many bids. The
//! bid lock is taken inside the bid's request, so the auction's history has no
//! `acquire`: its double grant is counted from the lanes only.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderValue};
use serde::Serialize;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use seatlock::auction::queries;
use seatlock::config::Settings;
use seatlock::failpoint::PAUSE_HEADER;
use seatlock::http::error::Refusal;
use seatlock_lab::LabSettings;

use super::report::linearizability;
use super::timeline::{self, Lane, Moment};
use crate::history::check::{Accepted, Model, Verdict, check as check_history};
use crate::history::linearizability::Linearizable;
use crate::history::{Answered, History, OpKind, seat_resource};
use crate::http::page_buyer_id;
use crate::procs::ServerProcess;
use crate::sentinel::SentinelTopology;
use crate::{HttpBuyer, Reply, TINY_VENUES, auction_item, check, fresh_database, seed};

/// Seats contended in the seats run.
pub const CONTENDED_SEATS: usize = 3;

/// Hold and bid-lock TTL on the lab's servers, in ms: longer than a failover, so that the
/// holder that lost its grant still believes it holds the lease when the next is granted.
pub const LAB_LEASE_TTL_MS: u64 = 10_000;

/// How long bidder A stalls after taking the bid lock, in ms: across the failover.
pub const BIDDER_STALL_MS: u64 = 5_000;

/// One run (the JSON shape `make failover` promises, plus `guard`).
#[derive(Debug, Clone, Serialize)]
pub struct FailoverRun {
    /// The run's name: the workload and whether the guard was on.
    pub name: String,
    /// Whether the failover guard was on.
    pub guard: bool,
    /// Resources granted to a second holder while the first holder's lease still ran.
    pub double_grants: usize,
    /// Fencing tokens granted to more than one holder.
    pub duplicate_tokens: usize,
    /// Seats with more than one accepted sale.
    pub double_sales: usize,
    /// Late writes the resource refused (seats: every refused late confirm; auction: bids
    /// refused by the fence, `stale_bid_lock`).
    pub stale_rejected: usize,
    /// Auction: late bids refused because a bid was already accepted under their token
    /// (`bid_lock_used`, the bids table's one bid per fencing token): the resource caught
    /// a repeated token.
    pub duplicate_token_refused: usize,
    /// Accepted writes out of token order, or under a token another holder also wrote
    /// with (the article's invariant).
    pub invariant_violations: usize,
    /// From the primary's kill to the Sentinels naming the replica, in ms.
    pub failover_ms: u64,
    /// Whether the history checker ([`crate::history::check`]) found the run's history
    /// valid: what the resource accepted is one holder at a time, in token order, no write
    /// lost or phantom.
    pub history_valid: bool,
    /// Whether the history is linearizable against the fenced row, resource by resource
    /// ([`crate::history::partitions`]): `true`, `false` or `unknown`.
    pub linearizable: Linearizable,
    /// How long that search took, ms.
    pub check_ms: f64,
    /// Double grants in the history where the resource accepted the writes of at most one
    /// of the two holders (the fence, or `NOT sold`, caught it). Seats only: the auction's
    /// history has no `acquire` (the bid lock is taken inside the bid).
    pub double_grants_caught: usize,
    /// The run's operations and final reads. Not in the JSON (`load-test failover` writes
    /// it as `history-<name>.jsonl`).
    #[serde(skip)]
    pub history: History,
    /// The timeline's lanes. Not in the JSON.
    #[serde(skip)]
    pub lanes: Vec<Lane>,
    /// The kill and the promotion, ms since the run began. Not in the JSON.
    #[serde(skip)]
    pub moments: Vec<Moment>,
}

/// `{"runs": [...]}`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FailoverReport {
    /// One entry per run, in the order they ran.
    pub runs: Vec<FailoverRun>,
}

/// What every run shares: the topology, a fresh database, two servers over Sentinel, and
/// the clock the timeline is drawn against.
struct Lab {
    topology: SentinelTopology,
    db: PgPool,
    servers: [ServerProcess; 2],
    /// The run's history; its clock is the timeline's.
    history: History,
    moments: Vec<Moment>,
}

impl Lab {
    async fn start(
        server_bin: &std::path::Path,
        admin_url: &str,
        guard: bool,
    ) -> anyhow::Result<Lab> {
        let topology = SentinelTopology::start().await?;
        let url = fresh_database(admin_url).await?;
        seed(&url, TINY_VENUES).await?;
        let db = PgPoolOptions::new()
            .max_connections(2)
            .connect(&url)
            .await?;
        let mut settings: Settings = crate::test_settings(&url, &topology.url());
        settings.hold_ttl_ms = LAB_LEASE_TTL_MS;
        settings.bid_lock_ttl_ms = LAB_LEASE_TTL_MS;
        let lab = LabSettings {
            lab_disable_failover_guard: !guard,
            ..LabSettings::enabled()
        };
        let servers = [
            ServerProcess::start_lab(server_bin, &settings, &lab).await?,
            ServerProcess::start_lab(server_bin, &settings, &lab).await?,
        ];
        Ok(Lab {
            topology,
            db,
            servers,
            history: History::new(),
            moments: Vec::new(),
        })
    }

    fn ms(&self) -> f64 {
        self.history.now_ms()
    }

    /// Judges the run's history (its final reads recorded) under the lab's lease, fenced;
    /// `exclusive` for a seat, not for an auction item.
    fn judge(&self, exclusive: bool) -> (Verdict, (Linearizable, f64)) {
        let model = Model {
            ttl_ms: LAB_LEASE_TTL_MS as f64,
            fenced: true,
            exclusive,
            proxy_increment: None,
        };
        let ops = self.history.ops();
        // The product's confirm answers a second submit with its order; a bid does not.
        let (rows, check_ms) = linearizability(&ops, exclusive, exclusive);
        (check_history(&ops, model), (rows.linearizable, check_ms))
    }

    fn address(&self, server: usize) -> &str {
        &self.servers[server].address
    }

    /// Kills the primary, waits for the promotion, and marks both on the timeline.
    async fn fail_over(&mut self) -> anyhow::Result<u64> {
        let killed = self.ms();
        let took = self.topology.fail_over().await?;
        self.moments.push((killed, "primary killed".into()));
        self.moments.push((self.ms(), "replica promoted".into()));
        Ok(took.as_millis() as u64)
    }
}

/// Whether to stop retrying `reply`: it is not a 5xx (a server that has not yet followed
/// the failover answers 503 once), or the 10 s from `since` are over.
fn served(reply: &anyhow::Result<Reply>, since: Instant) -> bool {
    matches!(reply, Ok(r) if !r.status.is_server_error())
        || since.elapsed() > Duration::from_secs(10)
}

/// GETs `url` until [`served`].
async fn get_served(buyer: &mut HttpBuyer, url: &str) -> anyhow::Result<Reply> {
    let since = Instant::now();
    loop {
        let reply = buyer.get(url).await;
        if served(&reply, since) {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// POSTs a form to `url` until [`served`].
async fn post_served(
    buyer: &HttpBuyer,
    url: &str,
    fields: &[(&str, &str)],
) -> anyhow::Result<Reply> {
    let since = Instant::now();
    loop {
        let reply = buyer.post(url, fields).await;
        if served(&reply, since) {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One browser of a run, with its names in the run's history.
struct Client {
    http: HttpBuyer,
    /// The history's process (`buyer A, seat 3`, `bidder B`).
    process: String,
    /// The buyer id its pages show (`data-buyer`), as orders and bids record it.
    holder: String,
}

impl Client {
    /// `http`, named `process`, opens the event page `page` ([`get_served`]) for its buyer
    /// id. Errors: the page's, or a page without a buyer id.
    async fn open(mut http: HttpBuyer, process: &str, page: &str) -> anyhow::Result<Client> {
        let body = get_served(&mut http, page).await?.body;
        let holder =
            page_buyer_id(&body).ok_or_else(|| anyhow::anyhow!("{page} shows no buyer id"))?;
        Ok(Client {
            http,
            process: process.into(),
            holder,
        })
    }

    /// Holds `seat` with a POST to `url` ([`post_served`]) and reads its fencing token from
    /// the event page `page`, recorded as an `acquire`. Returns the token and when the hold
    /// was answered (ms on the history's clock).
    async fn hold(
        &mut self,
        history: &History,
        url: &str,
        page: &str,
        seat: i64,
    ) -> anyhow::Result<(Option<i64>, f64)> {
        let acquire = history.invoke(
            &self.process,
            &self.holder,
            OpKind::Acquire,
            &seat_resource(seat),
        );
        let reply = post_served(&self.http, url, &[]).await;
        let answered_ms = history.now_ms();
        let token = acquire
            .acquired(&reply, self.http.read_hold_token(page, seat))
            .await?;
        reply?;
        Ok((token, answered_ms))
    }

    /// Confirms `seat` with a POST to `url`, recorded as a `write` with the hold's
    /// `token`. Returns whether it was accepted (a 303).
    async fn confirm(
        &self,
        history: &History,
        url: &str,
        seat: i64,
        token: Option<i64>,
    ) -> anyhow::Result<bool> {
        let write = history
            .invoke(
                &self.process,
                &self.holder,
                OpKind::Write,
                &seat_resource(seat),
            )
            .token(token)
            .value("sold");
        let reply = self.http.post(url, &[]).await;
        write.answered(&reply);
        Ok(reply?.status == StatusCode::SEE_OTHER)
    }

    /// Bids `cents` on `item` (`item <id>`) with a POST to `url` (once, or [`post_served`]
    /// when `served`), a `write` answered and not yet recorded: its token is the one the
    /// bids table shows, read after the run.
    async fn bid(
        &self,
        history: &History,
        item: &str,
        url: &str,
        cents: u64,
        served: bool,
    ) -> (anyhow::Result<Reply>, Answered) {
        let write = history
            .invoke(&self.process, &self.holder, OpKind::Write, item)
            .value(cents.to_string());
        let amount = format!("{}.{:02}", cents / 100, cents % 100);
        let fields = [("amount", amount.as_str())];
        let reply = if served {
            post_served(&self.http, url, &fields).await
        } else {
            self.http.post(url, &fields).await
        };
        let answered = write.answered_later(&reply);
        (reply, answered)
    }
}

/// Counts the tokens granted to more than one holder.
fn duplicate_tokens(lanes: &[Lane]) -> usize {
    let mut holders: HashMap<i64, Vec<&str>> = HashMap::new();
    for lane in lanes {
        if let Some(token) = lane.fencing_token {
            holders.entry(token).or_default().push(&lane.holder);
        }
    }
    holders.values().filter(|h| h.len() > 1).count()
}

/// Counts the resources granted to a second holder while the first one's lease ran.
fn double_grants(lanes: &[Lane]) -> usize {
    let mut by_resource: HashMap<&str, Vec<&Lane>> = HashMap::new();
    for lane in lanes {
        by_resource.entry(&lane.resource).or_default().push(lane);
    }
    by_resource
        .values()
        .filter(|l| l.windows(2).any(|w| w[1].lease_ms.0 < w[0].lease_ms.1))
        .count()
}

/// The seats run: see the module docs.
pub async fn seats_run(
    server_bin: &std::path::Path,
    admin_url: &str,
    guard: bool,
) -> anyhow::Result<FailoverRun> {
    let mut lab = Lab::start(server_bin, admin_url, guard).await?;
    let (event, seats) = crate::first_event_seats(&lab.db).await?;
    let base = [lab.address(0).to_owned(), lab.address(1).to_owned()];
    let page = |server: usize| format!("{}/events/{event}", base[server]);
    let action = |server: usize, seat: i64, action: &str| {
        format!("{}/events/{event}/seats/{seat}/{action}", base[server])
    };
    let history = lab.history.clone();
    let contended = &seats[1..=CONTENDED_SEATS];
    // A grant the replica applies (the block installed), then the buyers A, ready.
    let mut warm = Client::open(HttpBuyer::new(), "warm-up buyer", &page(0)).await?;
    warm.hold(&history, &action(0, seats[0], "hold"), &page(0), seats[0])
        .await?;
    let mut first = Vec::new();
    for &seat in contended {
        let process = format!("buyer A, seat {seat}");
        first.push(Client::open(HttpBuyer::new(), &process, &page(0)).await?);
    }
    lab.topology.lose_next_write().await?;
    let mut lanes = Vec::new();
    let mut tokens = Vec::new();
    for (a, &seat) in first.iter_mut().zip(contended) {
        let (token, granted) = a
            .hold(&history, &action(0, seat, "hold"), &page(0), seat)
            .await?;
        lanes.push(lane(seat, "buyer A (server 1)", granted, token));
        tokens.push(token);
    }
    let failover_ms = lab.fail_over().await?;
    let mut second = Vec::new();
    for &seat in contended {
        let process = format!("buyer B, seat {seat}");
        let mut b = Client::open(HttpBuyer::new(), &process, &page(1)).await?;
        let (token, granted) = b
            .hold(&history, &action(1, seat, "hold"), &page(1), seat)
            .await?;
        lanes.push(lane(seat, "buyer B (server 2)", granted, token));
        tokens.push(token);
        second.push(b);
    }
    let mut stale_rejected = 0;
    for (i, &seat) in contended.iter().enumerate() {
        let b_token = tokens[CONTENDED_SEATS + i];
        let b = second[i]
            .confirm(&history, &action(1, seat, "confirm"), seat, b_token)
            .await?;
        lanes[CONTENDED_SEATS + i].writes.push((lab.ms(), b));
        let accepted = first[i]
            .confirm(&history, &action(0, seat, "confirm"), seat, tokens[i])
            .await?;
        stale_rejected += usize::from(!accepted);
        lanes[i].writes.push((lab.ms(), accepted));
    }
    // Per seat: A then B, as the timeline reads best.
    let lanes: Vec<Lane> = (0..CONTENDED_SEATS)
        .flat_map(|i| [lanes[i].clone(), lanes[CONTENDED_SEATS + i].clone()])
        .collect();
    let checked = check::check(&lab.db, event).await?;
    history.read_seats(&checked, contended);
    let (verdict, (linearizable, check_ms)) = lab.judge(true);
    Ok(FailoverRun {
        name: format!("seats, guard {}", if guard { "on" } else { "off" }),
        guard,
        double_grants: double_grants(&lanes),
        duplicate_tokens: duplicate_tokens(&lanes),
        double_sales: checked.double_sold_seats,
        stale_rejected,
        duplicate_token_refused: 0, // a seat is written once: `NOT sold` refuses the rest
        invariant_violations: checked.violations.len(),
        failover_ms,
        history_valid: verdict.valid,
        linearizable,
        check_ms,
        double_grants_caught: verdict.double_grants_caught,
        history,
        lanes,
        moments: lab.moments,
    })
}

fn lane(seat: i64, holder: &str, granted_ms: f64, fencing_token: Option<i64>) -> Lane {
    Lane {
        resource: seat_resource(seat),
        holder: holder.into(),
        lease_ms: (granted_ms, granted_ms + LAB_LEASE_TTL_MS as f64),
        fencing_token,
        writes: Vec::new(),
    }
}

/// One accepted bid, as the `bids` table keeps it.
#[derive(sqlx::FromRow)]
struct AcceptedBid {
    bidder_id: String,
    fence_token: Option<i64>,
}

/// Accepted writes that break "at most one holder at a time, in token order": a token
/// lower than the one before, or the one before's token from another holder.
fn bid_violations(bids: &[AcceptedBid]) -> usize {
    bids.windows(2)
        .filter(|w| match (w[0].fence_token, w[1].fence_token) {
            (Some(a), Some(b)) => b < a || (b == a && w[0].bidder_id != w[1].bidder_id),
            _ => false,
        })
        .count()
}

/// The auction run: see the module docs.
pub async fn auction_run(
    server_bin: &std::path::Path,
    admin_url: &str,
    guard: bool,
) -> anyhow::Result<FailoverRun> {
    let mut lab = Lab::start(server_bin, admin_url, guard).await?;
    let history = lab.history.clone();
    let item = queries::insert_item(&lab.db, &auction_item("Failover lab poster"))
        .await?
        .ok_or_else(|| anyhow::anyhow!("the lab's auction item was not inserted"))?;
    // The bidders' ids are read from an event page: the auction's shows only their names.
    let (event, _) = crate::first_event_seats(&lab.db).await?;
    let base = [lab.address(0).to_owned(), lab.address(1).to_owned()];
    let event_page = |server: usize| format!("{}/events/{event}", base[server]);
    let item_page = |server: usize| format!("{}/auctions/{item}", base[server]);
    let bids = |server: usize| format!("{}/auctions/{item}/bids", base[server]);
    let resource = format!("item {item}");
    // A bid the replica applies (the block installed), then bidder A, ready to stall.
    let mut warm = Client::open(HttpBuyer::new(), "warm-up bidder", &event_page(0)).await?;
    warm.http.get(&item_page(0)).await?;
    let (warm_reply, warm_bid) = warm.bid(&history, &resource, &bids(0), 1_100, false).await;
    warm_reply?;
    let mut stall = HeaderMap::new();
    stall.insert(PAUSE_HEADER, HeaderValue::from(BIDDER_STALL_MS));
    let mut a = Client::open(HttpBuyer::with_headers(stall), "bidder A", &event_page(0)).await?;
    a.http.get(&item_page(0)).await?;
    let a_holder = a.holder.clone();
    lab.topology.lose_next_write().await?;
    let a_sent = lab.ms();
    let a_bid = {
        let (history, resource, url) = (history.clone(), resource.clone(), bids(0));
        tokio::spawn(async move { a.bid(&history, &resource, &url, 5_000, false).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await; // A holds the bid lock, stalled
    let failover_ms = lab.fail_over().await?;
    let mut b = Client::open(HttpBuyer::new(), "bidder B", &event_page(1)).await?;
    get_served(&mut b.http, &item_page(1)).await?;
    let b_sent = lab.ms();
    let (b_reply, b_bid) = b.bid(&history, &resource, &bids(1), 2_000, true).await;
    let b_reply = b_reply?;
    let b_at = lab.ms();
    let b_ok = b_reply.status == StatusCode::SEE_OTHER;
    let (a_reply, a_bid) = a_bid.await?;
    let a_reply = a_reply?;
    let a_at = lab.ms();
    let accepted: Vec<AcceptedBid> = sqlx::query_as(
        // In the order the item took them: `id` is drawn by the INSERT, under the
        // item's row lock (`created_at` is the transaction's start). The bidders' own
        // rows: an automatic one (proxy bidding) shares its bid's token and is no write.
        "SELECT bidder_id, fence_token FROM bids WHERE item_id = $1 AND NOT automatic
          ORDER BY id",
    )
    .bind(item)
    .fetch_all(&lab.db)
    .await?;
    // The tokens the bidders were granted, read from what the item accepted (a refused
    // bid's token is not shown to its bidder). A bid refused as `bid_lock_used` carried a
    // token a bid was already accepted under (`bids_one_per_fencing_token`): A bid once,
    // so that token was granted twice, and the only bid since the warm-up is B's.
    let accepted_token = |holder: &str| {
        accepted
            .iter()
            .find(|bid| bid.bidder_id == holder)
            .and_then(|bid| bid.fence_token)
    };
    let b_token = b_ok.then(|| accepted_token(&b.holder)).flatten();
    let reused = a_reply.is_refused(&Refusal::BidLockUsed);
    let a_ok = a_reply.status == StatusCode::SEE_OTHER;
    let a_token = if a_ok {
        accepted_token(&a_holder)
    } else {
        b_token.filter(|_| reused)
    };
    warm_bid.token(accepted_token(&warm.holder)).record();
    a_bid.token(a_token).record();
    b_bid.token(b_token).record();
    let accepted_writes: Vec<Accepted> = accepted
        .iter()
        .map(|bid| Accepted::of(&bid.bidder_id, bid.fence_token))
        .collect();
    history.read_accepted(&resource, &accepted_writes);
    let (verdict, (linearizable, check_ms)) = lab.judge(false);
    let lanes = vec![
        Lane {
            resource: resource.clone(),
            holder: "bidder A (server 1)".into(),
            lease_ms: (a_sent, a_sent + LAB_LEASE_TTL_MS as f64),
            fencing_token: a_token,
            writes: vec![(a_at, a_ok)],
        },
        Lane {
            resource,
            holder: "bidder B (server 2)".into(),
            lease_ms: (b_sent, b_sent + LAB_LEASE_TTL_MS as f64),
            fencing_token: b_token,
            writes: vec![(b_at, b_ok)],
        },
    ];
    Ok(FailoverRun {
        name: format!("auction, guard {}", if guard { "on" } else { "off" }),
        guard,
        double_grants: double_grants(&lanes),
        duplicate_tokens: duplicate_tokens(&lanes),
        double_sales: 0, // nothing is sold until the close
        stale_rejected: usize::from(a_reply.is_refused(&Refusal::StaleBidLock)),
        duplicate_token_refused: usize::from(reused),
        invariant_violations: bid_violations(&accepted),
        failover_ms,
        history_valid: verdict.valid,
        linearizable,
        check_ms,
        double_grants_caught: verdict.double_grants_caught,
        history,
        lanes,
        moments: lab.moments,
    })
}

/// The four runs, one after another (each its own topology, database and servers): seats
/// and auction, guard off then on.
pub async fn run(server_bin: &std::path::Path, admin_url: &str) -> anyhow::Result<FailoverReport> {
    let mut report = FailoverReport::default();
    for guard in [false, true] {
        report
            .runs
            .push(seats_run(server_bin, admin_url, guard).await?);
    }
    for guard in [false, true] {
        report
            .runs
            .push(auction_run(server_bin, admin_url, guard).await?);
    }
    Ok(report)
}

const HEADER: [&str; 11] = [
    "run",
    "double grants",
    "duplicate tokens",
    "double sales",
    "stale rejected",
    "repeated token refused",
    "violations",
    "failover ms",
    "history valid",
    "double grants caught",
    "linearizable",
];

fn cells(run: &FailoverRun) -> [String; 11] {
    [
        run.name.clone(),
        run.double_grants.to_string(),
        run.duplicate_tokens.to_string(),
        run.double_sales.to_string(),
        run.stale_rejected.to_string(),
        run.duplicate_token_refused.to_string(),
        run.invariant_violations.to_string(),
        run.failover_ms.to_string(),
        run.history_valid.to_string(),
        run.double_grants_caught.to_string(),
        run.linearizable.name().into(),
    ]
}

/// The table as Markdown.
pub fn table(report: &FailoverReport) -> String {
    super::report::markdown_table(&HEADER, report.runs.iter().map(cells))
}

/// A self-contained HTML page: the table and a timeline per run.
pub fn html(report: &FailoverReport) -> Result<String, String> {
    let table = super::report::html_table(&HEADER, report.runs.iter().map(cells));
    let mut timelines = String::new();
    for run in &report.runs {
        let title = format!("{}: holders, leases, tokens, writes", run.name);
        timelines.push_str(&format!(
            "<figure>{}</figure>\n",
            timeline::svg(&title, &run.lanes, &run.moments)?
        ));
    }
    Ok(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>seatlock failover lab</title>\
         <style>body{{font:15px system-ui,sans-serif;margin:2rem}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}}td:first-child{{text-align:left}}</style>\
         </head><body><h1>Failover lab: what a Redis failover does to a sale</h1>\
         {table}<h2>Timelines</h2>{}{timelines}</body></html>",
        timeline::LEGEND_HTML
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(holder: &str, start: f64, token: i64) -> Lane {
        Lane {
            resource: "seat 1".into(),
            holder: holder.into(),
            lease_ms: (start, start + 1_000.0),
            fencing_token: Some(token),
            writes: Vec::new(),
        }
    }

    #[test]
    fn counts_overlapping_grants_and_shared_tokens() {
        let overlapping = [lane("a", 0.0, 41), lane("b", 500.0, 41)];
        assert_eq!(double_grants(&overlapping), 1);
        assert_eq!(duplicate_tokens(&overlapping), 1);
        let apart = [lane("a", 0.0, 41), lane("b", 1_500.0, 42)];
        assert_eq!(double_grants(&apart), 0);
        assert_eq!(duplicate_tokens(&apart), 0);
    }

    #[test]
    fn bids_from_two_holders_under_one_token_break_the_invariant() {
        let bid = |bidder: &str, token| AcceptedBid {
            bidder_id: bidder.into(),
            fence_token: Some(token),
        };
        assert_eq!(
            bid_violations(&[bid("w", 40), bid("b", 41), bid("a", 41)]),
            1
        );
        assert_eq!(
            bid_violations(&[bid("w", 40), bid("b", 42), bid("b", 42)]),
            0
        );
        assert_eq!(bid_violations(&[bid("b", 42), bid("a", 41)]), 1);
    }
}
