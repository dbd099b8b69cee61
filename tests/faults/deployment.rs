//! One deployment under test (a fresh seeded database, the settings its server processes
//! share, the test's own view of both stores) and the helpers every fault test uses.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease::{LeaseClient, LeaseKey, LeaseStore};
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderValue};
use seatlock::config::Settings;
use seatlock::failpoint::{PAUSE_AT_HEADER, PAUSE_HEADER, PausePoint};
use seatlock::http::error::Refusal;
use seatlock::ledger::PgFenceLedger;
use seatlock::seats::{self, SeatRef};
pub(crate) use seatlock_harness::http::{between, hold_token, page_buyer_id};
use seatlock_harness::{
    HttpBuyer, Reply, ServerProcess, TestApp, check, eventually, first_event_seats,
};
use seatlock_lab::LabSettings;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

/// The product's server: no race lab, no pause seam installed.
pub(crate) const SERVER: &str = env!("CARGO_BIN_EXE_seatlock");
pub(crate) const SEE_OTHER: StatusCode = StatusCode::SEE_OTHER;

/// One deployment under test: a fresh seeded database, and the settings that all of its
/// server processes share (database, Redis, lease namespace, CSRF secret), plus the
/// test's own view of both stores. Its servers are the lab's (`seatlock-lab serve
/// --enable-race-lab`): a test parks a confirm with the pause headers ([`pause_headers`]).
pub(crate) struct Deployment {
    pub(crate) settings: Settings,
    pub(crate) lab: LabSettings,
    pub(crate) db: PgPool,
    pub(crate) leases: LeaseClient<PgFenceLedger>,
    pub(crate) event: i64,
    pub(crate) seats: Vec<i64>,
}

/// An order as the test reads it back.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct Order {
    pub(crate) id: i64,
    pub(crate) buyer_id: String,
    pub(crate) fence_token: i64,
}

impl Deployment {
    /// A fresh database on the Postgres server of `admin_url`, seeded with `venues`, on
    /// the Redis at `redis_url`. Holds last 2 s.
    pub(crate) async fn new(admin_url: &str, redis_url: &str, venues: &str) -> Deployment {
        let builder = TestApp::builder()
            .venues(venues)
            .postgres(admin_url.into())
            .redis(redis_url.into());
        Deployment::from(builder).await
    }

    /// [`Deployment::new`] on the shared stores of `make test`, with the tiny venue.
    pub(crate) async fn tiny() -> Deployment {
        Deployment::from(TestApp::builder()).await
    }

    pub(crate) async fn from(builder: seatlock_harness::TestAppBuilder) -> Deployment {
        let settings = builder
            .with(|s| s.hold_ttl_ms = 2_000)
            .settings()
            .await
            .unwrap();
        let db = PgPoolOptions::new()
            .max_connections(4)
            .connect(&settings.database_url)
            .await
            .unwrap();
        let redis = lease::connect(&settings.redis_url, Duration::from_millis(500)).unwrap();
        let leases = LeaseClient::new(redis, PgFenceLedger(db.clone()));
        let (event, seats) = first_event_seats(&db).await.unwrap();
        Deployment {
            settings,
            lab: LabSettings::enabled(),
            db,
            leases,
            event,
            seats,
        }
    }

    /// A `seatlock-lab serve` process of this deployment, its settings changed by `adjust`.
    pub(crate) async fn server(&self, adjust: impl FnOnce(&mut Settings)) -> ServerProcess {
        self.server_with_env(adjust, &[]).await
    }

    /// [`Deployment::server`], its lab settings changed by `adjust_lab` too.
    pub(crate) async fn lab_server(
        &self,
        adjust: impl FnOnce(&mut Settings),
        adjust_lab: impl FnOnce(&mut LabSettings),
    ) -> ServerProcess {
        let mut settings = self.settings.clone();
        adjust(&mut settings);
        let mut lab = self.lab.clone();
        adjust_lab(&mut lab);
        let binary = seatlock_harness::procs::lab_binary().unwrap();
        ServerProcess::start_lab(&binary, &settings, &lab)
            .await
            .unwrap()
    }

    /// A `seatlock serve` process of this deployment, the product without the lab, its
    /// settings changed by `adjust`.
    pub(crate) async fn product_server(&self, adjust: impl FnOnce(&mut Settings)) -> ServerProcess {
        let mut settings = self.settings.clone();
        adjust(&mut settings);
        ServerProcess::start(SERVER.as_ref(), &settings)
            .await
            .unwrap()
    }

    /// [`Deployment::server`] with extra environment variables.
    pub(crate) async fn server_with_env(
        &self,
        adjust: impl FnOnce(&mut Settings),
        env: &[(&str, &str)],
    ) -> ServerProcess {
        let mut settings = self.settings.clone();
        adjust(&mut settings);
        let binary = seatlock_harness::procs::lab_binary().unwrap();
        ServerProcess::start_lab_with_env(&binary, &settings, &self.lab, env)
            .await
            .unwrap()
    }

    /// The lease key of one seat.
    pub(crate) fn key(&self, seat: i64) -> LeaseKey {
        let seat = SeatRef {
            event_id: self.event,
            seat_id: seat,
        };
        seats::lease_key(&self.settings.lease_namespace, seat)
    }

    /// Whether anyone holds `seat` (Redis `PTTL`).
    pub(crate) async fn held(&self, seat: i64) -> bool {
        self.leases
            .remaining(&self.key(seat))
            .await
            .unwrap()
            .is_some()
    }

    /// The orders of one seat.
    pub(crate) async fn orders(&self, seat: i64) -> Vec<Order> {
        sqlx::query_as(
            "SELECT id, buyer_id, fence_token FROM orders WHERE event_id = $1 AND seat_id = $2",
        )
        .bind(self.event)
        .bind(seat)
        .fetch_all(&self.db)
        .await
        .unwrap()
    }

    /// The status of every payment of `seat`, oldest first.
    pub(crate) async fn payments(&self, seat: i64) -> Vec<String> {
        sqlx::query_scalar(
            "SELECT status FROM payments WHERE event_id = $1 AND seat_id = $2 ORDER BY created_at",
        )
        .bind(self.event)
        .bind(seat)
        .fetch_all(&self.db)
        .await
        .unwrap()
    }

    /// `seat` has exactly one order, bought by `buyer_id`; returns it.
    pub(crate) async fn assert_sold_once_to(&self, seat: i64, buyer_id: &str) -> Order {
        let mut orders = self.orders(seat).await;
        assert_eq!(orders.len(), 1, "seat {seat}: {orders:?}");
        assert_eq!(orders[0].buyer_id, buyer_id, "seat {seat}");
        orders.remove(0)
    }

    /// Every order of the event.
    pub(crate) async fn order_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM orders WHERE event_id = $1")
            .bind(self.event)
            .fetch_one(&self.db)
            .await
            .unwrap()
    }

    /// The invariant checker of the race lab finds nothing (no seat sold twice, tokens in
    /// order, no order without its captured payment nor a capture without its order),
    /// and a seat is sold exactly when it has an order carrying the row's token (no sale
    /// without an order, no order without a sale).
    pub(crate) async fn assert_invariant(&self) {
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

    /// No payment of the event is still authorized: every attempt has answered, and the
    /// last one to leave each payment it did not capture voided it.
    pub(crate) async fn assert_no_authorization_left_open(&self, case: &str) {
        let open: Vec<(i64, i32)> = sqlx::query_as(
            "SELECT seat_id, open_attempts FROM payments
              WHERE event_id = $1 AND status = 'authorized'",
        )
        .bind(self.event)
        .fetch_all(&self.db)
        .await
        .unwrap();
        assert!(open.is_empty(), "{case}: authorizations left open {open:?}");
    }

    /// Eventually no session of this deployment's database sits idle inside a
    /// transaction (a purchase cut off or abandoned holds no row lock for long).
    pub(crate) async fn assert_no_transaction_left_open(&self) {
        eventually(
            Duration::from_secs(10),
            "no transaction left open",
            || async {
                let open: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity
                  WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
                )
                .fetch_one(&self.db)
                .await
                .unwrap();
                open == 0
            },
        )
        .await;
    }

    pub(crate) fn page(&self, server: &str) -> String {
        format!("{server}/events/{}", self.event)
    }
}

/// The public buyer id of the page's viewer (`data-buyer`).
pub(crate) fn buyer_id(page: &str) -> String {
    page_buyer_id(page).expect("an event page")
}

/// Headers asking a race-lab server to pause `ms` at `point` of a confirm.
pub(crate) fn pause_headers(point: PausePoint, ms: u64) -> HeaderMap {
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
pub(crate) async fn holder(d: &Deployment, server: &str, seat: i64) -> (HttpBuyer, String, i64) {
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
pub(crate) async fn buy(d: &Deployment, server: &str, seat: i64) -> String {
    let (buyer, id, _) = holder(d, server, seat).await;
    let bought = act(&buyer, server, d, seat, "confirm").await;
    assert_eq!(bought.status, SEE_OTHER, "{}", bought.body);
    id
}

/// The confirm URL of `seat` through `server`.
pub(crate) fn confirm_url(d: &Deployment, server: &str, seat: i64) -> String {
    format!("{server}/events/{}/seats/{seat}/confirm", d.event)
}

/// The URL of an event-wide `action` (`checkout`, `release-all`) through `server`.
pub(crate) fn event_url(d: &Deployment, server: &str, action: &str) -> String {
    format!("{server}/events/{}/{action}", d.event)
}

/// None of `replies` is a 5xx.
pub(crate) fn assert_no_5xx(case: &str, replies: &[&Reply]) {
    for reply in replies {
        assert!(!reply.status.is_server_error(), "{case}: {reply:?}");
    }
}

/// POSTs `action` on `seat` through `server` and returns the reply.
pub(crate) async fn act(
    buyer: &HttpBuyer,
    server: &str,
    d: &Deployment,
    seat: i64,
    action: &str,
) -> Reply {
    let url = format!("{server}/events/{}/seats/{seat}/{action}", d.event);
    buyer.post(&url, &[]).await.unwrap()
}

/// Waits until `server`'s log says a pause of the pause seam began `count` times
/// (`seatlock::failpoint::point` logs it): the server is parked at the requested point.
pub(crate) async fn parked(server: &ServerProcess, count: usize) {
    eventually(Duration::from_secs(10), "the server to park", || async {
        let log = std::fs::read_to_string(&server.log).unwrap_or_default();
        log.matches("fail point: pausing").count() >= count
    })
    .await;
}

/// `reply` is a 409 page refused for `refusal`.
pub(crate) fn assert_conflict(reply: &Reply, refusal: Refusal) {
    assert!(
        reply.is_refused(&refusal),
        "expected {refusal:?}: {reply:?}"
    );
}

/// `GET {server}{path}` from a fresh buyer: status and body, or `None` if nothing
/// answered.
pub(crate) async fn probe(server: &str, path: &str) -> Option<(StatusCode, String)> {
    let reply = HttpBuyer::new()
        .get(&format!("{server}{path}"))
        .await
        .ok()?;
    Some((reply.status, reply.body))
}

/// `GET /healthz` through `server` ([`probe`]).
pub(crate) async fn health(server: &str) -> Option<(StatusCode, String)> {
    probe(server, "/healthz").await
}

/// Whether an event stream's text shows `seat` sold: as a `seat` change, or in a fresh
/// snapshot's `sold` list.
pub(crate) fn shows_sold(stream: &str, seat: i64) -> bool {
    stream
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<serde_json::Value>(data.trim()).ok())
        .any(|data| {
            (data["seat"] == seat && data["state"] == "sold")
                || data["sold"]
                    .as_array()
                    .is_some_and(|sold| sold.contains(&seat.into()))
        })
}

/// Reads the event stream at `url` into a shared text until the task is aborted (or the
/// stream ends): what an open page has been sent so far.
pub(crate) fn follow(url: String) -> (Arc<Mutex<String>>, tokio::task::JoinHandle<()>) {
    let text = Arc::new(Mutex::new(String::new()));
    let reader = tokio::spawn({
        let text = text.clone();
        async move {
            let mut stream = reqwest::get(url).await.unwrap();
            while let Ok(Some(chunk)) = stream.chunk().await {
                let chunk = String::from_utf8_lossy(&chunk).into_owned();
                text.lock().unwrap().push_str(&chunk);
            }
        }
    });
    (text, reader)
}
