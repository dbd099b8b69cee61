//! The fault suite: the article's invariant (at most one accepted sale per seat, writes in
//! fencing-token order) through the faults it names, against real processes that each
//! test starts and controls by PID on loopback: `seatlock serve` children
//! ([`ServerProcess`]), a private `redis-server` ([`RedisServer`]) and a private
//! PostgreSQL ([`PostgresServer`]). Every child is killed when its guard drops, even when
//! a test panics. Servers run with `--enable-race-lab` so that a test can park a confirm
//! at a chosen point (`x-race-lab-pause-at`); the purchase path is the product's, fenced.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use lease::{LeaseClient, LeaseKey};
use rand::Rng;
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderValue};
use seatlock::config::Settings;
use seatlock::error::{HOLD_EXPIRED, SOMEONE_IS_BUYING};
use seatlock::ledger::PgFenceLedger;
use seatlock::racelab::{PAUSE_AT_HEADER, PAUSE_HEADER, PausePoint, check};
use seatlock::seats::purchase::{ALREADY_SOLD, STALE_TOKEN};
use seatlock::testkit::{
    self, HttpBuyer, PostgresServer, RedisServer, Reply, ServerProcess, eventually,
};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

const SERVER: &str = env!("CARGO_BIN_EXE_seatlock");
const SEE_OTHER: StatusCode = StatusCode::SEE_OTHER;

/// One deployment under test: a fresh seeded database, and the settings that all of its
/// server processes share (database, Redis, lease namespace, CSRF secret), plus the
/// test's own view of both stores.
struct Deployment {
    settings: Settings,
    db: PgPool,
    leases: LeaseClient<PgFenceLedger>,
    event: i64,
    seats: Vec<i64>,
}

/// An order as the test reads it back.
#[derive(Debug, sqlx::FromRow)]
struct Order {
    id: i64,
    buyer_id: String,
    fence_token: i64,
}

impl Deployment {
    /// A fresh database next to `admin_url`, seeded with `venues`, on the Redis at
    /// `redis_url`. Holds last 2 s.
    async fn new(admin_url: &str, redis_url: &str, venues: &str) -> Deployment {
        let url = testkit::fresh_database(admin_url).await.unwrap();
        testkit::seed(&url, venues).await.unwrap();
        let mut settings = testkit::settings(&url, redis_url);
        settings.hold_ttl_ms = 2_000;
        settings.enable_race_lab = true;
        let db = PgPoolOptions::new()
            .max_connections(4)
            .connect(&url)
            .await
            .unwrap();
        let redis = lease::connect(redis_url, Duration::from_millis(500)).unwrap();
        let leases = LeaseClient::new(redis, PgFenceLedger(db.clone()));
        let (event, seats) = testkit::first_event_seats(&db).await.unwrap();
        Deployment {
            settings,
            db,
            leases,
            event,
            seats,
        }
    }

    /// [`Deployment::new`] on the shared stores of `make test`, with the tiny venue.
    async fn tiny() -> Deployment {
        let (admin, redis) = testkit::store_urls().unwrap();
        Deployment::new(&admin, &redis, testkit::TINY_VENUES).await
    }

    /// A `seatlock serve` process of this deployment, its settings changed by `adjust`.
    async fn server(&self, adjust: impl FnOnce(&mut Settings)) -> ServerProcess {
        self.server_with_env(adjust, &[]).await
    }

    /// [`Deployment::server`] with extra environment variables.
    async fn server_with_env(
        &self,
        adjust: impl FnOnce(&mut Settings),
        env: &[(&str, &str)],
    ) -> ServerProcess {
        let mut settings = self.settings.clone();
        adjust(&mut settings);
        ServerProcess::start_with_env(SERVER.as_ref(), &settings, env)
            .await
            .unwrap()
    }

    /// The lease key of one seat.
    fn key(&self, seat: i64) -> LeaseKey {
        let group = format!("{}:event:{}", self.settings.lease_namespace, self.event);
        LeaseKey::new(group, seat.to_string()).unwrap()
    }

    /// Whether anyone holds `seat` (Redis `PTTL`).
    async fn held(&self, seat: i64) -> bool {
        self.leases
            .remaining(&self.key(seat))
            .await
            .unwrap()
            .is_some()
    }

    /// The orders of one seat.
    async fn orders(&self, seat: i64) -> Vec<Order> {
        sqlx::query_as(
            "SELECT id, buyer_id, fence_token FROM orders WHERE event_id = $1 AND seat_id = $2",
        )
        .bind(self.event)
        .bind(seat)
        .fetch_all(&self.db)
        .await
        .unwrap()
    }

    /// `seat` has exactly one order, bought by `buyer_id`; returns it.
    async fn assert_sold_once_to(&self, seat: i64, buyer_id: &str) -> Order {
        let mut orders = self.orders(seat).await;
        assert_eq!(orders.len(), 1, "seat {seat}: {orders:?}");
        assert_eq!(orders[0].buyer_id, buyer_id, "seat {seat}");
        orders.remove(0)
    }

    /// Every order of the event.
    async fn order_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM orders WHERE event_id = $1")
            .bind(self.event)
            .fetch_one(&self.db)
            .await
            .unwrap()
    }

    /// The invariant checker of the race lab finds nothing, and a seat is sold exactly
    /// when it has an order carrying the row's token (no sale without an order, no order
    /// without a sale).
    async fn assert_invariant(&self) {
        let report = check::check(&self.db, self.event).await.unwrap();
        assert!(report.violations.is_empty(), "{report:#?}");
        let torn: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM event_seats es
               LEFT JOIN orders o ON o.event_id = es.event_id AND o.seat_id = es.seat_id
              WHERE es.event_id = $1
                AND (es.sold <> (o.id IS NOT NULL) OR o.fence_token <> es.fence_token)",
        )
        .bind(self.event)
        .fetch_one(&self.db)
        .await
        .unwrap();
        assert_eq!(torn, 0, "seats whose sale and order disagree");
    }

    fn page(&self, server: &str) -> String {
        format!("{server}/events/{}", self.event)
    }
}

/// The public buyer id of the page's viewer (`data-buyer`).
fn buyer_id(page: &str) -> String {
    between(page, "data-buyer=\"", "\"").expect("an event page")
}

/// The fencing token of the viewer's first hold, as the page shows it.
fn hold_token(page: &str) -> Option<i64> {
    between(page, "fencing token ", "<")?.trim().parse().ok()
}

fn between(text: &str, start: &str, end: &str) -> Option<String> {
    let from = text.find(start)? + start.len();
    let to = text[from..].find(end)?;
    Some(text[from..from + to].to_owned())
}

/// Headers asking a race-lab server to pause `ms` at `point` of a confirm.
fn pause_headers(point: PausePoint, ms: u64) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(PAUSE_HEADER, HeaderValue::from(ms));
    headers.insert(
        PAUSE_AT_HEADER,
        HeaderValue::from_static(point.header_value()),
    );
    headers
}

/// A new buyer who opened the event page on `server` and holds `seat` there; returns the
/// buyer, its public id and its hold's fencing token.
async fn holder(d: &Deployment, server: &str, seat: i64) -> (HttpBuyer, String, i64) {
    let mut buyer = HttpBuyer::new();
    let page = buyer.get(&d.page(server)).await.unwrap();
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let hold = act(&buyer, server, d, seat, "hold").await;
    assert_eq!(hold.status, SEE_OTHER, "{}", hold.body);
    let page = buyer.get(&d.page(server)).await.unwrap().body;
    let token = hold_token(&page).expect("the page shows the hold");
    (buyer, buyer_id(&page), token)
}

/// A new buyer holds and buys `seat` through `server`; returns its public id.
async fn buy(d: &Deployment, server: &str, seat: i64) -> String {
    let (buyer, id, _) = holder(d, server, seat).await;
    let bought = act(&buyer, server, d, seat, "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    id
}

/// POSTs `action` on `seat` through `server` and returns the reply.
async fn act(buyer: &HttpBuyer, server: &str, d: &Deployment, seat: i64, action: &str) -> Reply {
    let url = format!("{server}/events/{}/seats/{seat}/{action}", d.event);
    buyer.post(&url, &[]).await.unwrap()
}

/// Waits until `server`'s log says a race-lab pause began `count` times: the server is
/// parked at the requested point.
async fn parked(server: &ServerProcess, count: usize) {
    eventually(Duration::from_secs(10), "the server to park", || async {
        let log = std::fs::read_to_string(&server.log).unwrap_or_default();
        log.matches("race lab: pausing").count() >= count
    })
    .await;
}

/// `reply` is a 409 page saying `says`.
fn assert_conflict(reply: &Reply, says: &str) {
    assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.body);
    assert!(reply.body.contains(says), "{}", reply.body);
}

/// `GET /healthz` through `server`: status and body, or `None` if it did not answer.
async fn health(server: &str) -> Option<(StatusCode, String)> {
    let reply = HttpBuyer::new()
        .get(&format!("{server}/healthz"))
        .await
        .ok()?;
    Some((reply.status, reply.body))
}

#[tokio::test]
async fn a_holder_stopped_past_its_lease_is_refused_by_its_fencing_token_when_it_wakes() {
    let d = Deployment::tiny().await;
    let slow = d.server(|s| s.payment_delay_ms = 1_000).await;
    let other = d.server(|_| {}).await;
    let seat = d.seats[0];
    let (first, _, first_token) = holder(&d, &slow.address, seat).await;

    let address = slow.address.clone();
    let (event, confirm_url) = (d.event, format!("/seats/{seat}/confirm"));
    let late = tokio::spawn(async move {
        let url = format!("{address}/events/{event}{confirm_url}");
        first.post(&url, &[]).await.unwrap()
    });
    // The confirm is in its 1 s payment; stop the whole process there, longer than the
    // hold's 2 s lease.
    tokio::time::sleep(Duration::from_millis(300)).await;
    slow.signal("STOP").unwrap();
    eventually(
        Duration::from_secs(10),
        "the stopped holder's lease to lapse",
        || async { !d.held(seat).await },
    )
    .await;

    let (second, second_id, second_token) = holder(&d, &other.address, seat).await;
    assert!(second_token > first_token);
    let bought = act(&second, &other.address, &d, seat, "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);

    slow.signal("CONT").unwrap();
    let late = late.await.unwrap();
    assert_conflict(&late, STALE_TOKEN);
    let order = d.assert_sold_once_to(seat, &second_id).await;
    assert_eq!(order.fence_token, second_token);
    let log = std::fs::read_to_string(&slow.log).unwrap();
    assert!(log.contains("stale fencing token"), "{log}");
    d.assert_invariant().await;
}

/// Background buyers over a set of servers, until stopped. Each buyer keeps one browser
/// session; each attempt holds a seat near a cursor that moves on every half second, then
/// confirms (one time in ten with a pause longer than the hold: a stalled holder),
/// releases, or walks away, each through a server picked at random. Counts every outcome
/// by name.
struct Traffic {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    tally: Arc<Tally>,
}

/// What the traffic saw.
#[derive(Default)]
struct Tally {
    outcomes: Mutex<BTreeMap<String, u64>>,
    /// Every confirm answered with an order: (order id, seat, buyer id).
    confirmed: Mutex<Vec<(i64, i64, String)>>,
}

impl Tally {
    fn count(&self, outcome: String) {
        *self.outcomes.lock().unwrap().entry(outcome).or_default() += 1;
    }

    fn requests(&self) -> u64 {
        self.outcomes.lock().unwrap().values().sum()
    }
}

/// Names a reply for the tally.
fn outcome(action: &str, reply: &anyhow::Result<Reply>) -> String {
    let Ok(reply) = reply else {
        return format!("{action}: no answer (server stopped or killed)");
    };
    let says = [
        (SOMEONE_IS_BUYING, "someone is buying"),
        (ALREADY_SOLD, "already sold"),
        (STALE_TOKEN, "stale fencing token"),
        (HOLD_EXPIRED, "hold expired"),
        ("Redis is unavailable", "Redis unavailable"),
        ("Postgres is unavailable", "Postgres unavailable"),
        ("You do not hold this seat", "not your hold"),
    ]
    .into_iter()
    .find(|(text, _)| reply.body.contains(text))
    .map_or("", |(_, name)| name);
    format!("{action}: {} {says}", reply.status.as_u16())
}

impl Traffic {
    fn start(
        d: &Deployment,
        servers: Arc<RwLock<Vec<String>>>,
        seats: Vec<i64>,
        buyers: usize,
    ) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        // Buyers crowd the 4 seats after `cursor`; a seat found sold moves it on.
        let cursor = Arc::new(AtomicUsize::new(0));
        let pause_ms = d.settings.hold_ttl_ms * 3 / 2;
        let tasks = (0..buyers)
            .map(|_| {
                let mut buyer = TrafficBuyer {
                    event: d.event,
                    servers: servers.clone(),
                    tally: tally.clone(),
                    http: HttpBuyer::new(),
                    id: None,
                };
                let (stop, seats, cursor) = (stop.clone(), seats.clone(), cursor.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let (at, roll) = {
                            let mut rng = rand::rng();
                            let at = cursor.load(Ordering::Relaxed) + rng.random_range(0..4);
                            (at, rng.random_range(0..100))
                        };
                        let seat = seats[at % seats.len()];
                        if buyer.attempt(seat, roll, pause_ms).await {
                            cursor.fetch_max(at + 1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        Traffic { stop, tasks, tally }
    }

    /// Stops the buyers (each finishes its attempt) and returns the tally.
    async fn stop(self) -> Arc<Tally> {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
        self.tally
    }
}

/// One background buyer: a browser session used across attempts.
struct TrafficBuyer {
    event: i64,
    servers: Arc<RwLock<Vec<String>>>,
    tally: Arc<Tally>,
    http: HttpBuyer,
    /// The public buyer id, once a page was read.
    id: Option<String>,
}

impl TrafficBuyer {
    /// A server picked at random.
    fn server(&self) -> String {
        let servers = self.servers.read().unwrap();
        servers[rand::rng().random_range(0..servers.len())].clone()
    }

    /// POSTs `action` on `seat` through a random server, with `headers`; counts it.
    async fn act(&self, seat: i64, action: &str, headers: HeaderMap) -> anyhow::Result<Reply> {
        let url = format!(
            "{}/events/{}/seats/{seat}/{action}",
            self.server(),
            self.event
        );
        let reply = self.http.another_tab(headers).post(&url, &[]).await;
        self.tally.count(outcome(action, &reply));
        reply
    }

    /// Reads the page first if the session is new; then holds `seat` and by `roll`
    /// (0..100) walks away (< 20), releases (< 35) or confirms, pausing past the hold
    /// when `roll` < 45. Returns whether the seat turned out to be sold already.
    async fn attempt(&mut self, seat: i64, roll: u32, pause_ms: u64) -> bool {
        let Some(id) = self.id.clone() else {
            let page = self
                .http
                .get(&format!("{}/events/{}", self.server(), self.event))
                .await;
            self.tally.count(outcome("page", &page));
            self.id = page
                .ok()
                .and_then(|p| between(&p.body, "data-buyer=\"", "\""));
            tokio::time::sleep(Duration::from_millis(20)).await;
            return false;
        };
        let hold = self.act(seat, "hold", HeaderMap::new()).await;
        match hold {
            Ok(hold) if hold.status == SEE_OTHER => {}
            Ok(hold) if hold.body.contains(ALREADY_SOLD) => return true,
            _ => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                return false;
            }
        }
        let (action, headers) = match roll {
            0..20 => return false,
            20..35 => ("release", HeaderMap::new()),
            35..45 => ("confirm", pause_headers(PausePoint::BeforeWrite, pause_ms)),
            _ => ("confirm", HeaderMap::new()),
        };
        let reply = self.act(seat, action, headers).await;
        if let Ok(Reply {
            status: SEE_OTHER,
            location: Some(location),
            ..
        }) = &reply
            && let Some(order) = location.strip_prefix("/orders/")
        {
            let order = order.parse().expect("an order id");
            self.tally.confirmed.lock().unwrap().push((order, seat, id));
        }
        false
    }
}

/// Every confirm that was answered with an order has that order, for that seat and
/// buyer, in Postgres: no acknowledged sale was lost.
async fn assert_no_acknowledged_sale_lost(d: &Deployment, tally: &Tally) {
    let confirmed = tally.confirmed.lock().unwrap().clone();
    for (order, seat, buyer) in confirmed {
        let row: Option<(i64, String)> =
            sqlx::query_as("SELECT seat_id, buyer_id FROM orders WHERE id = $1")
                .bind(order)
                .fetch_optional(&d.db)
                .await
                .unwrap();
        assert_eq!(row, Some((seat, buyer)), "order {order}");
    }
}

/// No reply was a 5xx other than 503 (an unavailable store, named).
fn assert_only_503s(tally: &Tally) {
    let outcomes = tally.outcomes.lock().unwrap();
    let bad: Vec<_> = outcomes
        .iter()
        .filter(|(name, _)| name.contains(": 5") && !name.contains(": 503"))
        .collect();
    assert!(bad.is_empty(), "{bad:?} in {outcomes:#?}");
}

#[tokio::test]
async fn redis_lost_mid_traffic_stops_guarded_work_then_resumes_with_higher_tokens() {
    let mut redis = RedisServer::start().await.unwrap();
    let (admin, _) = testkit::store_urls().unwrap();
    let d = Deployment::new(&admin, &redis.url(), testkit::TINY_VENUES).await;
    let servers = [d.server(|_| {}).await, d.server(|_| {}).await];
    let pids: Vec<_> = servers.iter().map(ServerProcess::pid).collect();
    let address = |i: usize| servers[i % 2].address.clone();

    // Before: seats 0 and 1 sold, seats 2..5 held.
    let mut issued = Vec::new();
    let mut holders = Vec::new();
    for (i, &seat) in d.seats[..5].iter().enumerate() {
        let (buyer, _, token) = holder(&d, &address(i), seat).await;
        issued.push(token);
        if i < 2 {
            let bought = act(&buyer, &address(i), &d, seat, "confirm").await;
            assert_eq!(bought.status, SEE_OTHER);
        } else {
            holders.push((buyer, address(i), seat));
        }
    }
    let mut newcomer = HttpBuyer::new();
    newcomer.get(&d.page(&address(0))).await.unwrap();
    let all = Arc::new(RwLock::new(vec![address(0), address(1)]));
    let traffic = Traffic::start(&d, all, d.seats[10..].to_vec(), 4);
    tokio::time::sleep(Duration::from_millis(500)).await;

    redis.kill();
    for server in &servers {
        eventually(
            Duration::from_secs(10),
            "/healthz to name redis",
            || async {
                health(&server.address).await.is_some_and(|(s, body)| {
                    s == StatusCode::SERVICE_UNAVAILABLE && body.contains("redis")
                })
            },
        )
        .await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // confirms in flight end
    let sold_while_down = d.order_count().await;
    let hold = newcomer
        .seat_action(&address(0), d.event, d.seats[6], "hold")
        .await
        .unwrap();
    let (held_buyer, held_server, held_seat) = &holders[0];
    let confirm = act(held_buyer, held_server, &d, *held_seat, "confirm").await;
    let map = newcomer.get(&d.page(&address(1))).await.unwrap();
    for reply in [&hold, &confirm, &map] {
        assert_eq!(
            reply.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            reply.body
        );
        assert!(
            reply.body.contains("Redis is unavailable"),
            "{}",
            reply.body
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        d.order_count().await,
        sold_while_down,
        "no sale while Redis is down"
    );

    redis.restart_empty().await.unwrap();
    for server in &servers {
        eventually(Duration::from_secs(10), "/healthz to recover", || async {
            health(&server.address)
                .await
                .is_some_and(|(s, _)| s == StatusCode::OK)
        })
        .await;
    }
    // The holds were lost with Redis; their buyers are told so, in words, and their
    // pages no longer count down.
    for (buyer, server, seat) in &mut holders {
        let reply = act(buyer, server, &d, *seat, "confirm").await;
        assert_conflict(&reply, HOLD_EXPIRED);
        let page = buyer.get(&d.page(server)).await.unwrap();
        assert!(!page.body.contains("held for you"), "{}", page.body);
    }
    // Work resumes in the same processes, with tokens above every token issued before.
    let before = *issued.iter().max().unwrap();
    for (i, &seat) in d.seats[2..5].iter().enumerate() {
        let (buyer, _, token) = holder(&d, &address(i), seat).await;
        assert!(
            token > before,
            "token {token} after the restart, {before} before"
        );
        let bought = act(&buyer, &address(i + 1), &d, seat, "confirm").await;
        assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    }
    let now: Vec<_> = servers.iter().map(ServerProcess::pid).collect();
    assert_eq!(pids, now, "the servers were not restarted");

    let tally = traffic.stop().await;
    println!("traffic: {:#?}", tally.outcomes.lock().unwrap());
    assert_only_503s(&tally);
    assert_no_acknowledged_sale_lost(&d, &tally).await;
    d.assert_invariant().await;
}

/// A deployment on a private Postgres (the shared Redis) and one server process of it.
async fn on_private_postgres() -> (PostgresServer, Deployment, ServerProcess) {
    let postgres = PostgresServer::start().await.unwrap();
    let (_, redis) = testkit::store_urls().unwrap();
    let d = Deployment::new(&postgres.admin_url(), &redis, testkit::TINY_VENUES).await;
    let server = d.server(|_| {}).await;
    (postgres, d, server)
}

#[tokio::test]
async fn postgres_restarted_mid_confirm_fails_cleanly_and_the_pool_recovers_by_itself() {
    let (postgres, d, server) = on_private_postgres().await;
    let base = server.address.clone();

    // Six holders confirm at once, each parked for 1.5 s at a different point: before
    // the write (in the payment), inside the transaction, between the Redis release and
    // the commit. Postgres restarts under them.
    let points = [
        PausePoint::BeforeWrite,
        PausePoint::BeforeRelease,
        PausePoint::BeforeCommit,
    ];
    let mut confirms = Vec::new();
    for (i, &seat) in d.seats[..6].iter().enumerate() {
        let (buyer, id, _) = holder(&d, &base, seat).await;
        let tab = buyer.another_tab(pause_headers(points[i % 3], 1_500));
        let url = format!("{base}/events/{}/seats/{seat}/confirm", d.event);
        let task = tokio::spawn(async move { tab.post(&url, &[]).await.unwrap() });
        confirms.push((buyer, id, seat, task));
    }
    parked(&server, 6).await;
    let all = Arc::new(RwLock::new(vec![base.clone()]));
    let traffic = Traffic::start(&d, all, d.seats[12..].to_vec(), 4);
    tokio::time::sleep(Duration::from_millis(300)).await;
    postgres.stop("fast").await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    postgres.start_again().await.unwrap();

    for (buyer, id, seat, task) in confirms {
        let reply = task.await.unwrap();
        let orders = d.orders(seat).await;
        match reply.status {
            SEE_OTHER => {
                let order = d.assert_sold_once_to(seat, &id).await;
                let location = format!("/orders/{}", order.id);
                assert_eq!(reply.location.as_deref(), Some(location.as_str()));
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                assert!(
                    reply.body.contains("Postgres is unavailable"),
                    "{}",
                    reply.body
                );
                assert!(
                    orders.is_empty(),
                    "a failed confirm wrote nothing: {orders:?}"
                );
                // The buyer tries again: bought if the hold survived, else told it lapsed.
                let again = act(&buyer, &base, &d, seat, "confirm").await;
                let orders = d.orders(seat).await;
                match again.status {
                    SEE_OTHER => assert_eq!(orders.len(), 1),
                    StatusCode::CONFLICT => {
                        assert!(again.body.contains(HOLD_EXPIRED), "{}", again.body);
                        assert!(orders.is_empty());
                    }
                    other => panic!("retry of seat {seat}: {other} {}", again.body),
                }
            }
            other => panic!("seat {seat}: {other} {}", reply.body),
        }
    }
    // The same process, never restarted, sells again: its pool reconnected by itself.
    let _ = buy(&d, &base, d.seats[10]).await;
    assert!(server.pid().is_some(), "still the first process");
    let tally = traffic.stop().await;
    println!("traffic: {:#?}", tally.outcomes.lock().unwrap());
    assert_only_503s(&tally);
    assert_no_acknowledged_sale_lost(&d, &tally).await;
    d.assert_invariant().await;
}

#[tokio::test]
async fn a_sale_whose_session_cannot_be_saved_is_a_503_page_and_a_retry_finds_the_order() {
    let (postgres, d, server) = on_private_postgres().await;
    let seat = d.seats[0];
    let (buyer, id, _) = holder(&d, &server.address, seat).await;
    let tab = buyer.another_tab(pause_headers(PausePoint::AfterCommit, 1_000));
    let url = format!("{}/events/{}/seats/{seat}/confirm", server.address, d.event);
    let confirm = tokio::spawn(async move { tab.post(&url, &[]).await.unwrap() });
    parked(&server, 1).await;
    // Committed; Postgres goes away before the session (which forgets the hold) is saved.
    postgres.stop("fast").await.unwrap();
    let reply = confirm.await.unwrap();
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        reply.body.contains("Postgres is unavailable"),
        "{}",
        reply.body
    );
    postgres.start_again().await.unwrap();
    let order = d.assert_sold_once_to(seat, &id).await;
    let again = act(&buyer, &server.address, &d, seat, "confirm").await;
    let location = format!("/orders/{}", order.id);
    assert_eq!(
        again.location.as_deref(),
        Some(location.as_str()),
        "{}",
        again.body
    );
    d.assert_invariant().await;
}

#[tokio::test]
async fn a_hold_whose_session_cannot_be_saved_is_a_503_page_and_a_retry_finds_the_hold() {
    let d = Deployment::tiny().await;
    let server = d.server(|_| {}).await;
    let seat = d.seats[0];
    let mut buyer = HttpBuyer::new();
    let page = buyer.get(&d.page(&server.address)).await.unwrap();
    let id = buyer_id(&page.body); // the session is saved from here on
    // Held and released once before: the session must not keep anything that could hide
    // the hold taken below (a leftover entry would shadow it and the confirm would fail).
    for action in ["hold", "release"] {
        let reply = act(&buyer, &server.address, &d, seat, action).await;
        assert_eq!(reply.status, SEE_OTHER, "{action}: {}", reply.body);
    }
    // Session reads go on, session writes wait on this lock until the server's
    // lock_timeout: the hold is granted in Redis, then saving its owner token fails.
    let mut blocker = d.db.begin().await.unwrap();
    sqlx::query("LOCK TABLE tower_sessions.session IN SHARE MODE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let reply = act(&buyer, &server.address, &d, seat, "hold").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        reply.body.contains("Postgres is unavailable"),
        "{}",
        reply.body
    );
    blocker.rollback().await.unwrap();
    // The lease stands under the buyer's id: trying again recovers it from Redis.
    let again = act(&buyer, &server.address, &d, seat, "hold").await;
    assert_eq!(again.status, SEE_OTHER, "{}", again.body);
    let bought = act(&buyer, &server.address, &d, seat, "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    d.assert_sold_once_to(seat, &id).await;
    d.assert_invariant().await;
}

/// A buyer of `seat` whose confirm through `doomed` is parked at `point` when `doomed` is
/// SIGKILLed; returns the buyer (to try again elsewhere) and its public id.
async fn killed_at(
    d: &Deployment,
    mut doomed: ServerProcess,
    seat: i64,
    point: PausePoint,
) -> (HttpBuyer, String) {
    let (buyer, id, _) = holder(d, &doomed.address, seat).await;
    let tab = buyer.another_tab(pause_headers(point, 30_000));
    let url = format!("{}/events/{}/seats/{seat}/confirm", doomed.address, d.event);
    let confirm = tokio::spawn(async move { tab.post(&url, &[]).await });
    parked(&doomed, 1).await;
    doomed.kill().await.unwrap();
    assert!(confirm.await.unwrap().is_err(), "the buyer got no answer");
    (buyer, id)
}

#[tokio::test]
async fn a_server_killed_between_hold_and_confirm_or_mid_payment_loses_no_sale() {
    let d = Deployment::tiny().await;
    let survivor = d.server(|_| {}).await;
    let base = &survivor.address;

    // Killed between the hold and the confirm: the hold is in Redis, the session in
    // Postgres, so the same browser confirms through the other process.
    let mut doomed = d.server(|_| {}).await;
    let (buyer, id, _) = holder(&d, &doomed.address, d.seats[0]).await;
    doomed.kill().await.unwrap();
    let bought = act(&buyer, base, &d, d.seats[0], "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    d.assert_sold_once_to(d.seats[0], &id).await;

    // Killed in the payment, before the write: nothing written, the hold still stands.
    let doomed = d.server(|_| {}).await;
    let (buyer, id) = killed_at(&d, doomed, d.seats[1], PausePoint::BeforeWrite).await;
    assert!(d.orders(d.seats[1]).await.is_empty());
    let bought = act(&buyer, base, &d, d.seats[1], "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    d.assert_sold_once_to(d.seats[1], &id).await;
    d.assert_invariant().await;
}

/// A deployment with a server that survives and one about to be killed.
async fn crash_scene() -> (Deployment, ServerProcess, ServerProcess) {
    let d = Deployment::tiny().await;
    let survivor = d.server(|_| {}).await;
    let doomed = d.server(|_| {}).await;
    (d, survivor, doomed)
}

#[tokio::test]
async fn a_server_killed_inside_the_confirm_transaction_sells_nothing_and_its_orphaned_hold_lapses()
{
    let (d, survivor, doomed) = crash_scene().await;
    let base = &survivor.address;
    let seat = d.seats[2];
    let started = Instant::now();
    let (walked_away, _) = killed_at(&d, doomed, seat, PausePoint::BeforeRelease).await;
    // Postgres rolled the open transaction back when the connection died.
    assert!(d.orders(seat).await.is_empty());
    assert!(d.held(seat).await, "the orphaned hold stays until its TTL");
    let mut next = HttpBuyer::new();
    let refused = next.seat_action(base, d.event, seat, "hold").await.unwrap();
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert!(refused.body.contains(SOMEONE_IS_BUYING));
    eventually(
        Duration::from_secs(10),
        "the orphaned hold to lapse",
        || async { !d.held(seat).await },
    )
    .await;
    assert!(started.elapsed() >= Duration::from_millis(d.settings.hold_ttl_ms));
    let id = buy(&d, base, seat).await;
    // The first buyer comes back: its token is stale now.
    let late = act(&walked_away, base, &d, seat, "confirm").await;
    assert_conflict(&late, STALE_TOKEN);
    d.assert_sold_once_to(seat, &id).await;
    d.assert_invariant().await;
}

#[tokio::test]
async fn a_server_killed_between_the_redis_release_and_the_commit_sells_nothing_and_says_so() {
    let (d, survivor, doomed) = crash_scene().await;
    let base = &survivor.address;
    let seat = d.seats[3];
    let (buyer, _) = killed_at(&d, doomed, seat, PausePoint::BeforeCommit).await;
    assert!(d.orders(seat).await.is_empty(), "the commit never happened");
    assert!(
        !d.held(seat).await,
        "the hold was released before the commit"
    );
    let again = act(&buyer, base, &d, seat, "confirm").await;
    assert_conflict(&again, HOLD_EXPIRED);
    // The seat is free at once for anyone, and sells once.
    let id = buy(&d, base, seat).await;
    d.assert_sold_once_to(seat, &id).await;
    d.assert_invariant().await;
}

#[tokio::test]
async fn a_server_killed_after_the_commit_loses_no_sale_and_a_retry_shows_the_same_order() {
    let (d, survivor, doomed) = crash_scene().await;
    let seat = d.seats[4];
    let (buyer, id) = killed_at(&d, doomed, seat, PausePoint::AfterCommit).await;
    let order = d.assert_sold_once_to(seat, &id).await; // committed before the crash
    assert!(!d.held(seat).await, "released before the commit");
    let again = act(&buyer, &survivor.address, &d, seat, "confirm").await;
    assert_eq!(again.status, SEE_OTHER, "{}", again.body);
    let location = format!("/orders/{}", order.id);
    assert_eq!(again.location.as_deref(), Some(location.as_str()));
    assert_eq!(d.orders(seat).await.len(), 1);
    d.assert_invariant().await;
}

/// The libfaketime preload library (Debian package `faketime`, which `make test`
/// installs).
fn libfaketime() -> String {
    std::fs::read_dir("/usr/lib")
        .unwrap()
        .flatten()
        .map(|dir| dir.path().join("faketime/libfaketime.so.1"))
        .find(|lib| lib.exists())
        .expect("libfaketime.so.1 not found: apt-get install faketime")
        .display()
        .to_string()
}

/// A server of `d` whose wall clock (not its monotonic clock, which only times sleeps)
/// is offset by libfaketime's `FAKETIME`, e.g. `+1h`.
async fn server_with_clock(d: &Deployment, faketime: &str) -> ServerProcess {
    let lib = libfaketime();
    let env = [
        ("LD_PRELOAD", lib.as_str()),
        ("FAKETIME", faketime),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    d.server_with_env(|_| {}, &env).await
}

#[tokio::test]
async fn app_clocks_an_hour_off_change_no_hold_expiry_and_no_sale() {
    let d = Deployment::tiny().await;
    let ahead = server_with_clock(&d, "+1h").await;
    let behind = server_with_clock(&d, "-1h").await;

    // The offsets are real: each server's Date header is an hour off this test's clock.
    for (server, hours) in [(&ahead, 1), (&behind, -1)] {
        let reply = reqwest::get(format!("{}/healthz", server.address))
            .await
            .unwrap();
        let date = reply.headers()[reqwest::header::DATE].to_str().unwrap();
        let date = chrono::DateTime::parse_from_rfc2822(date).unwrap();
        let off = (date.to_utc() - chrono::Utc::now()).num_seconds() - hours * 3_600;
        assert!(
            off.abs() < 120,
            "{} is {off} s off its offset",
            server.address
        );
    }

    // A hold through the server an hour ahead: its countdown is Redis's, not the app's.
    let seat = d.seats[0];
    let granted = Instant::now();
    let (mut first, _, _) = holder(&d, &ahead.address, seat).await;
    let page = first.get(&d.page(&ahead.address)).await.unwrap().body;
    let remaining: u64 = between(&page, "data-remaining-ms=\"", "\"")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        remaining > 0 && remaining <= d.settings.hold_ttl_ms,
        "{remaining}"
    );
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut d.leases.redis().clone())
        .await
        .unwrap();
    let redis_ms = secs * 1_000 + micros / 1_000;
    let until = between(&page, "held for you until <time>", "</time>").unwrap();
    let near = |ms: u64| {
        (0..=2)
            .any(|s| seatlock::seats::map::clock_time(ms + remaining + s * 1_000 - 1_000) == until)
    };
    assert!(
        near(redis_ms),
        "until {until}, Redis time {redis_ms} + {remaining} ms"
    );

    // The server an hour behind refuses a second buyer while the lease lives, and the
    // lease lapses on Redis's clock, after its TTL.
    let mut second = HttpBuyer::new();
    let refused = second
        .seat_action(&behind.address, d.event, seat, "hold")
        .await
        .unwrap();
    assert_eq!(refused.status, StatusCode::CONFLICT);
    eventually(Duration::from_secs(10), "the lease to lapse", || async {
        !d.held(seat).await
    })
    .await;
    assert!(granted.elapsed() >= Duration::from_millis(d.settings.hold_ttl_ms));
    let held = second
        .seat_action(&behind.address, d.event, seat, "hold")
        .await
        .unwrap();
    assert_eq!(held.status, SEE_OTHER, "{}", held.body);
    let late = act(&first, &ahead.address, &d, seat, "confirm").await;
    assert_conflict(&late, HOLD_EXPIRED);
    let bought = act(&second, &behind.address, &d, seat, "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    assert_eq!(d.orders(seat).await.len(), 1);
    d.assert_invariant().await;
}

#[tokio::test]
async fn soak_mixed_load_with_random_faults_keeps_the_invariant() {
    let secs: u64 = std::env::var("SEATLOCK_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let seed: u64 = rand::rng().random();
    println!("soak: {secs} s, seed {seed}");
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
    let mut redis = RedisServer::start().await.unwrap();
    let (admin, _) = testkit::store_urls().unwrap();
    let d = Deployment::new(&admin, &redis.url(), testkit::DEMO_VENUES).await;
    let payment = |s: &mut Settings| s.payment_delay_ms = 50;
    let mut servers = [d.server(payment).await, d.server(payment).await];
    let addresses = Arc::new(RwLock::new(
        servers
            .iter()
            .map(|s| s.address.clone())
            .collect::<Vec<_>>(),
    ));
    let traffic = Traffic::start(&d, addresses.clone(), d.seats.clone(), 8);

    let mut faults: BTreeMap<&str, u64> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(secs);
    // The three kinds take turns from a random start, so a run of three faults or more
    // has each kind.
    let mut kind = rng.random_range(0..3);
    while Instant::now() < deadline {
        kind = (kind + 1) % 3;
        tokio::time::sleep(Duration::from_millis(rng.random_range(2_000..5_000))).await;
        let victim = rng.random_range(0..servers.len());
        let down = Duration::from_millis(rng.random_range(200..3_000));
        let fault = match kind {
            0 => {
                redis.kill();
                tokio::time::sleep(down).await;
                redis.restart_empty().await.unwrap();
                "Redis killed, restarted empty"
            }
            1 => {
                servers[victim].signal("STOP").unwrap();
                tokio::time::sleep(down).await;
                servers[victim].signal("CONT").unwrap();
                "server SIGSTOP, then SIGCONT"
            }
            _ => {
                servers[victim].kill().await.unwrap();
                tokio::time::sleep(down).await;
                servers[victim] = d.server(payment).await;
                addresses.write().unwrap()[victim] = servers[victim].address.clone();
                "server SIGKILL, then a new one"
            }
        };
        *faults.entry(fault).or_default() += 1;
    }
    let tally = traffic.stop().await;

    // With the load gone, every hold lapses within its TTL: none is stuck.
    let pattern = format!("{}:*", d.key(0).lease_key().rsplit_once(':').unwrap().0);
    eventually(Duration::from_secs(10), "every hold to lapse", || async {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(&pattern)
            .query_async(&mut d.leases.redis().clone())
            .await
            .unwrap_or_default();
        keys.iter().all(|k| k.contains(":~"))
    })
    .await;

    let sold = d.order_count().await;
    let outcomes = tally.outcomes.lock().unwrap().clone();
    println!(
        "soak: {} requests, {} faults, {sold} seats sold",
        tally.requests(),
        faults.values().sum::<u64>()
    );
    println!("faults: {faults:#?}");
    println!("outcomes: {outcomes:#?}");
    assert!(sold > 0 && !faults.is_empty(), "the soak really ran");
    assert_only_503s(&tally);
    assert_no_acknowledged_sale_lost(&d, &tally).await;
    d.assert_invariant().await;
}
