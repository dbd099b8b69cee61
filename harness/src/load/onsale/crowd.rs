//! The people of an on-sale, each a browser of its own (a cookie jar, the pages' forms):
//! lookers open the event's map and its live stream and watch; buyers do the same, then
//! at the on-sale take 1-4 seats with best available and check out; some hang up, some
//! retry; bots come back with a fresh cookie jar each time. Through the waiting room when
//! the event has one: the map sends a visitor to the queue page, which they ask again
//! until they are admitted. What they see is counted in a shared [`Tally`].

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use rand::Rng;
use reqwest::StatusCode;
use seatlock::http::error::Refusal;
use tokio::sync::watch;

use super::super::throughput::histogram;
use crate::http::{HttpBuyer, Reply, between};

/// A request not answered within this long counts as unanswered (`unanswered`), and
/// the person stops waiting for it (a stream: for its opening snapshot).
pub const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// How long a buyer who is refused or not answered waits before trying again.
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// How long a buyer who found every seat held or sold waits before asking again, at
/// least and at most (drawn between, so that a crowd of them does not ask at once):
/// someone else's holds come back when they lapse.
const WAIT_FOR_SEATS: (Duration, Duration) = (Duration::from_secs(10), Duration::from_secs(30));

/// The longest queue wait recorded (an hour), µs.
const QUEUE_WAIT_MAX_US: u64 = 3_600_000_000;

/// Fresh cookie jars each bot tries, one after the other.
pub const BOT_JARS: usize = 5;

/// What one person came to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Opens the map and its stream, watches, leaves.
    Looker,
    /// Opens the map and its stream, takes `quantity` seats with best available at the
    /// on-sale (one fewer at a time while no block of that many together is left),
    /// checks out.
    Buyer {
        /// The seats they want together.
        quantity: u64,
    },
    /// [`BOT_JARS`] times: a fresh cookie jar straight to best available for the most
    /// seats a buyer may hold, past the queue if there is one.
    Bot,
}

/// One person of the crowd, drawn before the run.
#[derive(Debug, Clone)]
pub struct Person {
    /// Looker, buyer or bot.
    pub role: Role,
    /// When they arrive, from the run's start.
    pub arrival: Duration,
    /// A looker who closes the tab after this long (without pressing Leave); a buyer who
    /// closes it once their seats are held (any value: they never check out).
    pub hangs_up_after: Option<Duration>,
    /// How many times they try again after a refusal or no answer (0: they give up).
    pub retries: u32,
    /// Whether their stream records when each buyer's holds reached it (the fan-out).
    pub probe: bool,
}

/// What every person shares: where the sale is, its clock, what they count.
pub struct Sale {
    /// `http://HOST:PORT` of the proxy.
    pub base: String,
    /// The event on sale.
    pub event: i64,
    /// When the sale opens.
    pub on_sale: Instant,
    /// Whether the event has a waiting room (lookers then press Leave when they go).
    pub room: bool,
    /// How long a queued person waits before asking the queue page again when it names no
    /// refresh (an error page).
    pub poll_every: Duration,
    /// How long a looker watches (if they do not hang up first).
    pub look_for: Duration,
    /// The seats a bot asks for.
    pub max_seats: u64,
    /// One client for every live stream (a stream needs no cookie; HTTP/1.1 gives each
    /// open stream a connection of its own, as a browser's tab has).
    pub streams: reqwest::Client,
    /// The connections every browser's requests share ([`browsers`]).
    pub browsers: reqwest::Client,
    /// What the crowd counts.
    pub tally: Tally,
    /// Turns true when the run ends: everyone still watching or queued goes home.
    pub closing: watch::Receiver<bool>,
    /// Turns true when every seat is sold (the sampler reads Postgres): the buyers
    /// waiting for seats to come back go home, as the map's "sold out" sends people.
    pub sold_out: watch::Receiver<bool>,
}

/// One kind of request: the latencies of those answered within [`ANSWER_WITHIN`] (all
/// of the run, and since the sampler last looked), their statuses, and how many were
/// not answered.
pub struct Timings {
    windows: Mutex<(Histogram<u64>, Histogram<u64>)>,
    statuses: Mutex<BTreeMap<String, u64>>,
    /// Requests sent (answered or not).
    pub sent: AtomicU64,
    /// Requests not answered within [`ANSWER_WITHIN`].
    pub unanswered: AtomicU64,
    /// Requests this process could not send: it had no file descriptor left.
    pub client_out_of_files: AtomicU64,
}

impl Timings {
    fn new() -> Self {
        Timings {
            windows: Mutex::new((histogram(), histogram())),
            statuses: Mutex::new(BTreeMap::new()),
            sent: AtomicU64::new(0),
            unanswered: AtomicU64::new(0),
            client_out_of_files: AtomicU64::new(0),
        }
    }

    fn record(&self, took: Duration, outcome: String) {
        let us = took.as_micros().clamp(1, 60_000_000) as u64;
        let mut both = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let _ = both.0.record(us);
        let _ = both.1.record(us);
        drop(both);
        *self
            .statuses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(outcome)
            .or_default() += 1;
    }

    /// How many answers had each HTTP status (with the refusal's code, for a 409:
    /// `409 blocks_taken`).
    pub fn statuses(&self) -> BTreeMap<String, u64> {
        self.statuses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The latencies since the last call, and a fresh window.
    pub fn take_window(&self) -> Histogram<u64> {
        let mut both = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut both.1, histogram())
    }

    /// Every latency of the run.
    pub fn all(&self) -> Histogram<u64> {
        self.windows
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }
}

/// The crowd's counters, read by the sampler while it runs.
pub struct Tally {
    /// Seats granted to best-available requests so far.
    pub seats_held: AtomicU64,
    /// Streams whose snapshot arrived and that are still open, and the most at once.
    pub streams_open: AtomicI64,
    /// The most streams open at once.
    pub streams_peak: AtomicI64,
    /// People on the queue page right now.
    pub queued: AtomicI64,
    /// Best-available requests of bots granted, and refused `not_admitted`.
    pub bot_holds: AtomicU64,
    /// Bot requests refused `not_admitted`.
    pub bot_refused: AtomicU64,
    /// Best-available requests (`hold`), checkouts (`confirm`), map and checkout pages
    /// (`page`), queue polls and Leave (`queue`), streams to their snapshot (`stream`).
    pub hold: Timings,
    /// Checkouts.
    pub confirm: Timings,
    /// Map and checkout pages.
    pub page: Timings,
    /// Queue polls and Leave.
    pub queue: Timings,
    /// Streams, to their snapshot.
    pub stream: Timings,
    /// From joining the queue (or the on-sale, for who joined before it) to admission, µs.
    pub queue_wait: Mutex<Histogram<u64>>,
}

impl Tally {
    /// An empty tally: every count zero, every histogram empty.
    pub fn new() -> Self {
        Tally {
            seats_held: AtomicU64::new(0),
            streams_open: AtomicI64::new(0),
            streams_peak: AtomicI64::new(0),
            queued: AtomicI64::new(0),
            bot_holds: AtomicU64::new(0),
            bot_refused: AtomicU64::new(0),
            hold: Timings::new(),
            confirm: Timings::new(),
            page: Timings::new(),
            queue: Timings::new(),
            stream: Timings::new(),
            queue_wait: Mutex::new(
                Histogram::new_with_bounds(1, QUEUE_WAIT_MAX_US, 3).expect("valid bounds"),
            ),
        }
    }
}

impl Tally {
    /// Each kind of request by name, in the report's order.
    pub fn kinds(&self) -> [(&'static str, &Timings); 5] {
        [
            ("page", &self.page),
            ("stream", &self.stream),
            ("queue", &self.queue),
            ("hold", &self.hold),
            ("confirm", &self.confirm),
        ]
    }

    /// Requests of every kind sent.
    pub fn sent(&self) -> u64 {
        self.kinds()
            .iter()
            .map(|(_, t)| t.sent.load(Ordering::Relaxed))
            .sum()
    }

    /// Requests of every kind not answered within [`ANSWER_WITHIN`].
    pub fn unanswered(&self) -> u64 {
        self.kinds()
            .iter()
            .map(|(_, t)| t.unanswered.load(Ordering::Relaxed))
            .sum()
    }
}

impl Default for Tally {
    fn default() -> Self {
        Self::new()
    }
}

/// What one person leaves behind for the fan-out: who they were on the streams (their
/// public buyer id) and when their hold was answered; and, for a probe, when each
/// buyer's first `held` update reached their stream.
#[derive(Default)]
pub struct Story {
    /// The first seat the buyer held (its id, as the page lists the holds) and when the
    /// hold was answered, once it was.
    pub held: Option<(String, Instant)>,
    /// For a probe: when each seat's first `held` update reached its stream, by seat id
    /// (a stream names no holder).
    pub arrivals: HashMap<String, Instant>,
}

/// Runs `person` from their arrival (`start` + `person.arrival`) to their leaving.
pub async fn live(sale: &Sale, person: Person, start: Instant) -> Story {
    tokio::time::sleep_until((start + person.arrival).into()).await;
    match person.role {
        Role::Looker => look(sale, &person).await,
        Role::Buyer { quantity } => buy(sale, &person, quantity).await,
        Role::Bot => {
            for _ in 0..BOT_JARS {
                bot_try(sale).await;
            }
            Story::default()
        }
    }
}

/// `request`, timed into `timings` if answered within [`ANSWER_WITHIN`]; `None` if it
/// was not, or the connection failed (counted unanswered there), or this process could
/// not open a socket for it (counted in `client_out_of_files`: the client's limit, not
/// the servers').
async fn answered<T: Answer>(
    timings: &Timings,
    request: impl Future<Output = anyhow::Result<T>>,
) -> Option<T> {
    let sent = Instant::now();
    timings.sent.fetch_add(1, Ordering::Relaxed);
    let failed = match tokio::time::timeout(ANSWER_WITHIN, request).await {
        // A client too busy to look at its timer in time can see an answer late: past
        // the limit it is no answer either way.
        Ok(Ok(reply)) if sent.elapsed() <= ANSWER_WITHIN => {
            timings.record(sent.elapsed(), reply.outcome());
            return Some(reply);
        }
        Ok(Err(error)) => error,
        Ok(Ok(_)) | Err(_) => anyhow::anyhow!("no answer within {ANSWER_WITHIN:?}"),
    };
    if out_of_files(&failed) {
        timings.client_out_of_files.fetch_add(1, Ordering::Relaxed);
    } else {
        timings.unanswered.fetch_add(1, Ordering::Relaxed);
    }
    None
}

/// An answer to a request: its HTTP status, and a refusal's code.
trait Answer {
    fn outcome(&self) -> String;
}

impl Answer for Reply {
    fn outcome(&self) -> String {
        match &self.refusal {
            Some(code) => format!("{} {code}", self.status.as_u16()),
            None => self.status.as_u16().to_string(),
        }
    }
}

/// A stream's response, and the text read from it so far.
impl Answer for (reqwest::Response, String) {
    fn outcome(&self) -> String {
        self.0.status().as_u16().to_string()
    }
}

/// Whether `error` is this process running out of file descriptors (EMFILE) somewhere
/// down its chain of causes.
fn out_of_files(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(cause);
        while let Some(e) = source {
            if let Some(io) = e.downcast_ref::<std::io::Error>()
                && io.raw_os_error() == Some(libc::EMFILE)
            {
                return true;
            }
            source = e.source();
        }
        false
    })
}

fn closed(sale: &Sale) -> bool {
    *sale.closing.borrow()
}

/// Sleeps `pause`, or less if the run closes first; whether it closed.
async fn pause_or_close(sale: &Sale, pause: Duration) -> bool {
    let mut closing = sale.closing.clone();
    tokio::select! {
        _ = tokio::time::sleep(pause) => closed(sale),
        _ = closing.wait_for(|c| *c) => true,
    }
}

/// Waits for seats to come back, as a buyer who found them all taken does: a while
/// within [`WAIT_FOR_SEATS`]; whether to ask again (false once the run closes or the
/// event sells out).
async fn wait_for_seats(sale: &Sale) -> bool {
    let (least, most) = WAIT_FOR_SEATS;
    let pause = rand::rng().random_range(least..=most);
    let (mut closing, mut sold_out) = (sale.closing.clone(), sale.sold_out.clone());
    tokio::select! {
        _ = tokio::time::sleep(pause) => !closed(sale) && !*sale.sold_out.borrow(),
        _ = closing.wait_for(|c| *c) => false,
        _ = sold_out.wait_for(|s| *s) => false,
    }
}

/// Opens the event's map as a browser does, trying `retries` more times if it is not
/// answered or answers an error: the page (200), after the queue if the waiting room
/// sends them there. The page, or `None` if they never got it.
async fn open_map(sale: &Sale, buyer: &mut HttpBuyer, retries: u32) -> Option<Reply> {
    let map = format!("{}/events/{}", sale.base, sale.event);
    for attempt in 0..=retries {
        if attempt > 0 && pause_or_close(sale, RETRY_AFTER).await {
            return None;
        }
        let Some(reply) = answered(&sale.tally.page, buyer.get(&map)).await else {
            continue;
        };
        // The waiting room answers the map's address with the queue page (or sends
        // there): wait for the turn, then the map again.
        let refresh = refresh_of(&reply);
        if reply.status == StatusCode::SEE_OTHER || refresh.is_some() {
            wait_in_queue(sale, buyer, refresh.unwrap_or_default()).await?;
            return answered(&sale.tally.page, buyer.get(&map))
                .await
                .filter(|r| r.status == StatusCode::OK);
        }
        if reply.status == StatusCode::OK {
            return Some(reply);
        }
        // An error page: a retrying person reloads.
    }
    None
}

/// When a queue page says it reloads itself (`data-refresh`, seconds); `None` for any
/// other page.
fn refresh_of(reply: &Reply) -> Option<Duration> {
    let seconds = between(&reply.body, "data-refresh=\"", "\"")?;
    Some(Duration::from_secs(seconds.parse().ok()?))
}

/// Asks the queue page until it sends them to the map (their turn) or the run closes,
/// as a browser without JavaScript does: after `first`, then when each page's refresh
/// says (sooner near the head of the line), or after `poll_every` if it says nothing
/// (an error page). Records the wait. `None` if their turn never came.
async fn wait_in_queue(sale: &Sale, buyer: &mut HttpBuyer, first: Duration) -> Option<()> {
    let queue = format!("{}/events/{}/queue", sale.base, sale.event);
    let joined = Instant::now();
    sale.tally.queued.fetch_add(1, Ordering::Relaxed);
    let mut wait = first;
    let admitted = loop {
        if pause_or_close(sale, wait).await {
            break false;
        }
        wait = sale.poll_every;
        if let Some(reply) = answered(&sale.tally.queue, buyer.get(&queue)).await {
            if reply.status == StatusCode::SEE_OTHER {
                break true;
            }
            wait = refresh_of(&reply).unwrap_or(wait);
        }
    };
    sale.tally.queued.fetch_sub(1, Ordering::Relaxed);
    if admitted {
        let waited = Instant::now().saturating_duration_since(joined.max(sale.on_sale));
        let us = waited.as_micros().clamp(1, QUEUE_WAIT_MAX_US as u128) as u64;
        let _ = sale
            .tally
            .queue_wait
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .record(us);
    }
    admitted.then_some(())
}

/// Keeps the event's live stream open, as an open map does, until `until`: counted open
/// once its snapshot arrived (unanswered if not within [`ANSWER_WITHIN`]); on a probe,
/// returns when each buyer's first `held` update arrived.
async fn watch(
    sale: &Sale,
    probe: bool,
    until: impl Future<Output = ()>,
) -> HashMap<String, Instant> {
    let url = format!("{}/events/{}/stream", sale.base, sale.event);
    let tally = &sale.tally;
    let mut arrivals = HashMap::new();
    tokio::pin!(until);
    let opened = async {
        let mut response = sale.streams.get(&url).send().await?;
        let mut text = String::new();
        while response.status() == StatusCode::OK && !text.contains("event: snapshot") {
            let chunk = response.chunk().await?.context("the stream ended")?;
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        anyhow::Ok((response, text))
    };
    let first = tokio::select! {
        first = answered(&tally.stream, opened) => first,
        _ = &mut until => return arrivals,
    };
    let Some((mut response, mut text)) = first.filter(|(r, _)| r.status() == StatusCode::OK) else {
        // No live updates: the page stays open without them until they leave.
        until.await;
        return arrivals;
    };
    let open = tally.streams_open.fetch_add(1, Ordering::Relaxed) + 1;
    tally.streams_peak.fetch_max(open, Ordering::Relaxed);
    loop {
        tokio::select! {
            chunk = response.chunk() => match chunk {
                Ok(Some(bytes)) if probe => {
                    text.push_str(&String::from_utf8_lossy(&bytes));
                    record_holds(&mut text, &mut arrivals);
                }
                Ok(Some(_)) => {}
                _ => break,
            },
            _ = &mut until => break,
        }
    }
    tally.streams_open.fetch_sub(1, Ordering::Relaxed);
    arrivals
}

/// Takes the complete events off the front of `text` (server-sent events end with a
/// blank line) and notes when each seat's first `held` update arrived.
fn record_holds(text: &mut String, arrivals: &mut HashMap<String, Instant>) {
    let now = Instant::now();
    while let Some(end) = text.find("\n\n") {
        let event: String = text.drain(..end + 2).collect();
        if !event.contains("event: seat") {
            continue;
        }
        let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: ")) else {
            continue;
        };
        let Ok(update) = serde_json::from_str::<serde_json::Value>(data) else {
            continue;
        };
        if update["state"] == "held" {
            arrivals.entry(update["seat"].to_string()).or_insert(now);
        }
    }
}

/// A new browser: an empty cookie jar, on the crowd's shared connections
/// ([`HttpBuyer::in_a_crowd`]).
fn browser(sale: &Sale) -> HttpBuyer {
    HttpBuyer::in_a_crowd(&sale.browsers)
}

/// The client every browser of the crowd sends through: asking for compressed pages as
/// browsers do (the arena's map is a megabyte of HTML, some 75 kB gzipped).
pub fn browsers() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::ACCEPT_ENCODING,
        reqwest::header::HeaderValue::from_static("gzip"),
    );
    HttpBuyer::crowd_client(headers)
}

/// A looker: the map, then its stream for `look_for` (or until they hang up); with a
/// waiting room, Leave on the way out unless they hung up.
async fn look(sale: &Sale, person: &Person) -> Story {
    let mut browser = browser(sale);
    if open_map(sale, &mut browser, person.retries).await.is_none() {
        return Story::default();
    }
    let stay = person.hangs_up_after.unwrap_or(sale.look_for);
    let arrivals = watch(sale, person.probe, async {
        pause_or_close(sale, stay).await;
    })
    .await;
    if sale.room && person.hangs_up_after.is_none() {
        let leave = format!("{}/events/{}/queue/leave", sale.base, sale.event);
        answered(&sale.tally.queue, browser.post(&leave, &[])).await;
    }
    Story {
        held: None,
        arrivals,
    }
}

/// A buyer: the map and its stream (open while they shop), then [`shop`].
async fn buy(sale: &Sale, person: &Person, quantity: u64) -> Story {
    let mut browser = browser(sale);
    if open_map(sale, &mut browser, person.retries).await.is_none() {
        return Story::default();
    }
    let (done, shopped) = tokio::sync::oneshot::channel::<()>();
    let (arrivals, held) = tokio::join!(
        watch(sale, person.probe, async {
            let _ = shopped.await;
        }),
        async {
            let held = shop(sale, &mut browser, quantity, person).await;
            let _ = done.send(());
            held
        }
    );
    Story { held, arrivals }
}

/// At the on-sale (or now, if later): best available for `quantity` seats, retried
/// after a refusal or no answer; then the page the redirect names (the held section),
/// and unless they hang up, the checkout page and its purchase, retried if not answered.
/// A buyer who stays (one who does not hang up) and finds every seat held or sold waits
/// for some to come back ([`wait_for_seats`]), through the queue again if their turn
/// ended meanwhile, until the event sells out or the run ends.
/// Their public buyer id and when the hold was answered, if it was granted.
async fn shop(
    sale: &Sale,
    browser: &mut HttpBuyer,
    wanted: u64,
    person: &Person,
) -> Option<(String, Instant)> {
    tokio::time::sleep_until(sale.on_sale.into()).await;
    let base = format!("{}/events/{}", sale.base, sale.event);
    let tally = &sale.tally;
    let best_available = format!("{base}/best-available");
    let stays = person.role != Role::Bot && person.hangs_up_after.is_none();
    let mut held_at = None;
    let (mut quantity, mut attempt) = (wanted, 0);
    while attempt <= person.retries {
        let quantity_field = quantity.to_string();
        let form = [("quantity", quantity_field.as_str())];
        let hold = browser.post(&best_available, &form);
        if let Some(reply) = answered(&tally.hold, hold).await {
            if reply.status == StatusCode::SEE_OTHER {
                held_at = Some((Instant::now(), reply.location));
                break;
            }
            if person.role == Role::Bot && reply.is_refused(&Refusal::NotAdmitted) {
                tally.bot_refused.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            // No block of that many together is left (or only one that would leave a
            // seat alone): a person takes one seat fewer, as people do, and asks again.
            let apart = reply.is_refused(&Refusal::NoBlock { quantity })
                || reply.is_refused(&Refusal::StrandsSeat { quantity });
            if apart && quantity > 1 {
                quantity -= 1;
                continue;
            }
            // Not one seat free: the rest are held or sold. Held seats come back when
            // their holds lapse (a buyer who hung up), so one who stays waits for them
            // and asks again for as many as they came for.
            if apart && stays {
                if !wait_for_seats(sale).await {
                    return None;
                }
                quantity = wanted;
                continue;
            }
            // Their turn ended while they waited: back through the queue, then ask.
            if reply.is_refused(&Refusal::NotAdmitted) && stays {
                open_map(sale, browser, person.retries).await?;
                continue;
            }
        }
        attempt += 1;
        if attempt <= person.retries && pause_or_close(sale, RETRY_AFTER).await {
            return None;
        }
    }
    let (held_at, redirect) = held_at?;
    tally.seats_held.fetch_add(quantity, Ordering::Relaxed);
    if person.role == Role::Bot {
        tally.bot_holds.fetch_add(1, Ordering::Relaxed);
    }
    // The redirect's page: the arena's held section, whose panel lists the buyer's holds.
    let page_url = redirect.map_or(base.clone(), |to| format!("{}{}", sale.base, to));
    let page = answered(&tally.page, browser.get(&page_url)).await;
    let held = page
        .and_then(|p| between(&p.body, "id=\"hold-", "\""))
        .map(|seat| (seat, held_at));
    if person.hangs_up_after.is_some() {
        return held;
    }
    let checkout = format!("{base}/checkout");
    for attempt in 0..=person.retries {
        if attempt > 0 && pause_or_close(sale, RETRY_AFTER).await {
            break;
        }
        if answered(&tally.page, browser.get(&checkout))
            .await
            .is_none()
        {
            continue;
        }
        let bought = answered(&tally.confirm, browser.post(&checkout, &[])).await;
        // Answered: bought, or refused for good (the holds lapsed); either way done.
        if bought.is_some() {
            break;
        }
    }
    held
}

/// One try of a bot: a fresh cookie jar, the map (or, behind a waiting room, the queue
/// page it is sent to, for the form token) and straight to best available for the most
/// seats allowed; if granted, it checks out like a buyer.
async fn bot_try(sale: &Sale) {
    let mut jar = browser(sale);
    let map = format!("{}/events/{}", sale.base, sale.event);
    let Some(page) = answered(&sale.tally.page, jar.get(&map)).await else {
        return;
    };
    if let Some(queue) = page
        .location
        .filter(|_| page.status == StatusCode::SEE_OTHER)
    {
        let queue = format!("{}{queue}", sale.base);
        if answered(&sale.tally.queue, jar.get(&queue)).await.is_none() {
            return;
        }
    }
    let bot = Person {
        role: Role::Bot,
        arrival: Duration::ZERO,
        hangs_up_after: None,
        retries: 0,
        probe: false,
    };
    shop(sale, &mut jar, sale.max_seats, &bot).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_notes_each_seats_first_held_update_and_keeps_a_partial_event() {
        let mut text = String::from(
            "event: snapshot\ndata: {\"mine\":[],\"held\":[],\"sold\":[]}\n\n\
             event: seat\ndata: {\"seat\":1,\"state\":\"held\"}\n\n\
             event: seat\ndata: {\"seat\":2,\"state\":\"sold\"}\n\n\
             event: seat\ndata: {\"seat\":1,\"state\":\"held\"}\n\n\
             event: seat\ndata: {\"seat\":4,\"sta",
        );
        let mut arrivals = HashMap::new();
        record_holds(&mut text, &mut arrivals);
        assert_eq!(arrivals.len(), 1);
        assert!(arrivals.contains_key("1"));
        assert_eq!(text, "event: seat\ndata: {\"seat\":4,\"sta");
    }
}
