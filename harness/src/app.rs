//! The one test entry point: [`TestApp::builder`] gives a test a fresh database (migrated
//! and seeded), the shared stores, [`Settings`] with the test's own lease namespace, and
//! a server on port 0 inside the test process (zero-to-production's `spawn_app`, over
//! seatlock's [`Application::build`]). Tests that need several server processes take
//! [`TestAppBuilder::settings`] and start [`crate::ServerProcess`]es with them. A test of
//! the race lab asks for it ([`TestAppBuilder::race_lab`]): its server is then the lab's
//! application ([`seatlock_lab::build`]), the product with the lab plugged in.

use std::time::Duration;

use lease::LeaseKey;
use seatlock::app::Application;
use seatlock::config::Settings;
use seatlock::http::error::Refusal;
use seatlock::seats::{self, SeatRef};
use seatlock::state::AppState;
use seatlock_lab::LabSettings;
use sqlx::PgPool;

use crate::http::HttpBuyer;
use crate::stores::{TINY_VENUES, fresh_database, seed, store_urls, unique_name};

/// A CSRF secret shared by every server of one test, so forms cross processes.
pub const TEST_SECRET: &str = "seatlock-test-secret-at-least-32-bytes";

/// Settings for a test server on port 0 over `database_url`, with its own lease
/// namespace (tests share one Redis) and the shared test secret.
pub fn test_settings(database_url: &str, redis_url: &str) -> Settings {
    let mut settings = Settings::new(database_url, redis_url, "127.0.0.1:0");
    settings.metrics_bind = "127.0.0.1:0".into();
    settings.lease_namespace = unique_name("test")
        .parse()
        .expect("a unique name is a valid namespace");
    settings.secret = Some(TEST_SECRET.into());
    settings
}

/// How a test wants its stores and server: which venues to seed, which Redis and which
/// Postgres server (the shared ones by default), and changes to the settings.
#[must_use]
pub struct TestAppBuilder {
    venues: Option<String>,
    admin_url: Option<String>,
    redis_url: Option<String>,
    adjust: Vec<Adjustment>,
    lab: Option<LabSettings>,
}

/// One change to a test's settings.
type Adjustment = Box<dyn FnOnce(&mut Settings) + Send>;

impl TestAppBuilder {
    /// Seeds the venues of folder `dir` ([`TINY_VENUES`] by default; see also
    /// [`crate::DEMO_VENUES`]).
    pub fn venues(mut self, dir: &str) -> Self {
        self.venues = Some(dir.into());
        self
    }

    /// Seeds nothing (auction tests insert their own items).
    pub fn no_venues(mut self) -> Self {
        self.venues = None;
        self
    }

    /// Uses the Redis at `url` (a private [`crate::RedisServer`]) instead of `REDIS_URL`.
    pub fn redis(mut self, url: String) -> Self {
        self.redis_url = Some(url);
        self
    }

    /// Creates the test database on the Postgres server of `admin_url` (a private
    /// [`crate::PostgresServer`], or a proxy in front of one) instead of `DATABASE_URL`'s.
    pub fn postgres(mut self, admin_url: String) -> Self {
        self.admin_url = Some(admin_url);
        self
    }

    /// The lab's server (`seatlock-lab serve`) with `--enable-race-lab`: the race lab's
    /// routes and pause headers, and the lab.
    pub fn race_lab(self) -> Self {
        self.lab(|lab| lab.enable_race_lab = true)
    }

    /// The lab's server (`seatlock-lab serve`), its lab settings changed by `adjust`
    /// (from [`LabSettings::default`]: the lab off; with the clock server of
    /// `SEATLOCK_LAB_CLOCK_SERVER`, which `scripts/services.sh up` writes to .run/env, as
    /// `seatlock-lab serve` reads it).
    pub fn lab(mut self, adjust: impl FnOnce(&mut LabSettings)) -> Self {
        adjust(self.lab.get_or_insert_with(|| LabSettings {
            lab_clock_server: std::env::var("SEATLOCK_LAB_CLOCK_SERVER").ok(),
            ..LabSettings::default()
        }));
        self
    }

    /// Changes the settings (applied in order, after the test defaults).
    pub fn with(mut self, adjust: impl FnOnce(&mut Settings) + Send + 'static) -> Self {
        self.adjust.push(Box::new(adjust));
        self
    }

    /// Creates the fresh database, seeds it, and returns the settings of a server over
    /// it, without starting one.
    pub async fn settings(self) -> anyhow::Result<Settings> {
        let (admin_url, redis_url) = match (self.admin_url, self.redis_url) {
            (Some(admin), Some(redis)) => (admin, redis),
            (admin, redis) => {
                let (shared_admin, shared_redis) = store_urls()?;
                (admin.unwrap_or(shared_admin), redis.unwrap_or(shared_redis))
            }
        };
        let url = fresh_database(&admin_url).await?;
        if let Some(venues) = &self.venues {
            seed(&url, venues).await?;
        }
        let mut settings = test_settings(&url, &redis_url);
        for adjust in self.adjust {
            adjust(&mut settings);
        }
        Ok(settings)
    }

    /// [`TestAppBuilder::settings`], and a server over them inside this process: the
    /// lab's if the test asked for it, else the product's.
    pub async fn spawn(mut self) -> anyhow::Result<TestApp> {
        let lab = self.lab.take();
        let settings = self.settings().await?;
        match lab {
            Some(lab) => TestApp::spawn_lab(settings, &lab).await,
            None => TestApp::spawn(settings).await,
        }
    }
}

/// A plain auction item for tests, `title`, with a fresh slug: open from an hour ago for
/// another hour (hard stop an hour after that), starting price $10.00, no reserve, no
/// soft close. Change what a test needs, then insert it with
/// [`seatlock::auction::queries::insert_item`].
pub fn auction_item(title: &str) -> seatlock::auction::queries::NewItem {
    let now = chrono::Utc::now();
    seatlock::auction::queries::NewItem {
        slug: unique_name("item"),
        terms: seatlock::auction::queries::ItemTerms {
            title: title.into(),
            description: format!("{title}, for a test."),
            starting_price_cents: 1_000,
            reserve_price_cents: 0,
            soft_close_secs: 0,
        },
        starts_at: now - chrono::TimeDelta::hours(1),
        ends_at: now + chrono::TimeDelta::hours(1),
        hard_stop_at: now + chrono::TimeDelta::hours(2),
    }
}

/// Moves auction item `item`'s end a minute into the past, past the arrival grace in
/// which bids that arrived before the end may still be written
/// ([`seatlock::auction::bid::arrival_grace`]), so that the closer may close it at once
/// (tests do not wait for auctions to end); its start too if needed.
pub async fn end_auction_now(db: &PgPool, item: i64) {
    sqlx::query(
        "UPDATE auction_items SET ends_at = now() - interval '1 minute',
                starts_at = least(starts_at, now() - interval '2 minutes') WHERE id = $1",
    )
    .bind(item)
    .execute(db)
    .await
    .expect("moving an auction's end into the past");
}

/// A running application server inside the test process.
pub struct TestApp {
    /// `http://127.0.0.1:PORT`.
    pub address: String,
    /// `http://127.0.0.1:PORT/metrics`, on the server's metrics listener.
    pub metrics_url: String,
    /// The server's state (pool, lease client, settings).
    pub state: AppState,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TestApp {
    /// The test entry point: the tiny venue on the shared stores unless told otherwise.
    pub fn builder() -> TestAppBuilder {
        TestAppBuilder {
            venues: Some(TINY_VENUES.into()),
            admin_url: None,
            redis_url: None,
            adjust: Vec::new(),
            lab: None,
        }
    }

    /// Builds the application with `settings` and serves it on a background task (a
    /// second server over the same settings shares the database and the lease
    /// namespace, like a second process of one deployment).
    pub async fn spawn(settings: Settings) -> anyhow::Result<TestApp> {
        Self::serve(Application::build(settings).await?)
    }

    /// [`TestApp::spawn`] of the lab's application: the product with the race lab
    /// plugged in as `lab` says ([`seatlock_lab::build`]).
    pub async fn spawn_lab(settings: Settings, lab: &LabSettings) -> anyhow::Result<TestApp> {
        Self::serve(seatlock_lab::build(settings, lab).await?)
    }

    /// Serves `app` on a background task.
    fn serve(app: Application) -> anyhow::Result<TestApp> {
        let address = format!("http://{}", app.address());
        let metrics_url = format!("http://{}/metrics", app.metrics_address());
        let state = app.state().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        tokio::spawn(app.run_until(async {
            let _ = stopped.await;
        }));
        Ok(TestApp {
            address,
            metrics_url,
            state,
            stop: Some(stop),
        })
    }

    /// The pool of the test database.
    pub fn db(&self) -> &PgPool {
        &self.state.db
    }

    /// Seat 14C's row of lab run `run` with one side (a step session's, or a model
    /// replay's): sold to whom, the highest token it accepted, how many sales.
    pub async fn lab_seat(&self, run: i64) -> (Option<String>, i64, i32) {
        sqlx::query_as("SELECT sold_to, fence_token, sales FROM lab_seats WHERE run_id = $1")
            .bind(run)
            .fetch_one(self.db())
            .await
            .expect("a lab run with one seat row")
    }

    /// The first event's id and the ids of its seats, in map order.
    pub async fn first_event_seats(&self) -> anyhow::Result<(i64, Vec<i64>)> {
        crate::stores::first_event_seats(self.db()).await
    }

    /// How many orders seat `seat_id` of event `event_id` has ([`crate::orders_for`]).
    pub async fn orders_for(&self, event_id: i64, seat_id: i64) -> i64 {
        crate::stores::orders_for(self.db(), event_id, seat_id)
            .await
            .expect("counting a seat's orders")
    }

    /// How many seats of event `event_id` are held now, by anyone (one read of the
    /// event's group).
    pub async fn held_count(&self, event_id: i64) -> usize {
        let group = seats::event_group(&self.state.settings.lease_namespace, event_id);
        let holders = self.state.leases.holders(&group).await;
        holders.expect("reading the holds").holdings.len()
    }

    /// Puts event `event_id` on sale `seconds` from now on Postgres's clock, to the whole
    /// second (before any hold of it: a server reads an event once): the on-sale.
    pub async fn on_sale_in(&self, event_id: i64, seconds: i64) -> chrono::DateTime<chrono::Utc> {
        sqlx::query_scalar(
            "UPDATE events SET on_sale_at = date_trunc('second', now()) + make_interval(secs => $2)
              WHERE id = $1 RETURNING on_sale_at",
        )
        .bind(event_id)
        .bind(seconds as f64)
        .fetch_one(self.db())
        .await
        .expect("setting the on-sale")
    }

    /// Puts event `event_id` on sale `seconds` from now ([`TestApp::on_sale_in`]) and
    /// checks a hold of its seat `seat_id` over HTTP: refused `not_on_sale` before the
    /// on-sale, holding nothing; granted once it has passed (within 15 s).
    pub async fn check_no_hold_before_the_on_sale(
        &self,
        event_id: i64,
        seat_id: i64,
        seconds: i64,
    ) {
        self.on_sale_in(event_id, seconds).await;
        let mut buyer = crate::HttpBuyer::new();
        let early = buyer
            .seat_action(&self.address, event_id, seat_id, "hold")
            .await;
        let early = early.expect("a hold answered");
        assert_eq!(early.refusal.as_deref(), Some("not_on_sale"), "{early:?}");
        assert_eq!(self.held_count(event_id).await, 0, "nothing held");
        let hold = format!("{}/events/{event_id}/seats/{seat_id}/hold", self.address);
        eventually(Duration::from_secs(15), "the sale to open", || async {
            let reply = buyer.post(&hold, &[]).await.expect("a hold answered");
            reply.status == reqwest::StatusCode::SEE_OTHER
        })
        .await;
        assert_eq!(self.held_count(event_id).await, 1);
    }

    /// The lease key of seat `seat_id` of event `event_id` in this server's namespace.
    pub fn seat_key(&self, event_id: i64, seat_id: i64) -> LeaseKey {
        seats::lease_key(
            &self.state.settings.lease_namespace,
            SeatRef { event_id, seat_id },
        )
    }

    /// The Redis key of the browser session whose cookie value is `session_id`, in this
    /// server's namespace ([`seatlock::http::sessions`]).
    pub fn session_key(&self, session_id: &str) -> String {
        self.state.settings.lease_namespace.session_key(session_id)
    }

    /// The lease group of event `event_id`'s seats in this server's namespace.
    pub fn event_group(&self, event_id: i64) -> String {
        seats::event_group(&self.state.settings.lease_namespace, event_id)
    }

    /// POSTs `action` for `seat` as `buyer` and returns the reply's status (503 when no
    /// reply came) and whether it is the "someone else holds it" refusal.
    pub async fn act(
        &self,
        buyer: &mut HttpBuyer,
        event: i64,
        seat: i64,
        action: &str,
    ) -> (reqwest::StatusCode, bool) {
        match buyer.seat_action(&self.address, event, seat, action).await {
            Ok(reply) => (reply.status, reply.is_refused(&Refusal::SomeoneIsBuying)),
            Err(_) => (reqwest::StatusCode::SERVICE_UNAVAILABLE, false),
        }
    }

    /// The first seat of the first event, held and sold over HTTP, asserting each step:
    /// alice holds it (the store lists her hold), bob is refused, alice's page shows the
    /// hold, alice buys it (the seat is sold), bob cannot hold it then, and the invariant
    /// checker finds nothing. Whatever store backs the leases.
    pub async fn hold_and_sell_one_seat(&self) {
        use reqwest::StatusCode;
        let (event, seats) = self.first_event_seats().await.unwrap();
        let (mut alice, mut bob) = (HttpBuyer::new(), HttpBuyer::new());
        assert_eq!(
            self.act(&mut alice, event, seats[0], "hold").await.0,
            StatusCode::SEE_OTHER
        );
        let holdings = self
            .state
            .leases
            .holders(&self.event_group(event))
            .await
            .unwrap()
            .holdings;
        assert_eq!(holdings.len(), 1);
        assert_eq!(holdings[0].name, seats[0].to_string());
        let (status, held) = self.act(&mut bob, event, seats[0], "hold").await;
        assert!(held, "bob is refused while alice holds the seat: {status}");
        let page = alice
            .get(&format!("{}/events/{event}", self.address))
            .await
            .unwrap();
        assert!(page.body.contains("held for you until"), "{}", page.body);

        self.confirm(&mut alice, event, seats[0]).await;
        let sold: bool =
            sqlx::query_scalar("SELECT sold FROM event_seats WHERE event_id = $1 AND seat_id = $2")
                .bind(event)
                .bind(seats[0])
                .fetch_one(self.db())
                .await
                .unwrap();
        assert!(sold);
        let (status, _) = self.act(&mut bob, event, seats[0], "hold").await;
        assert_ne!(
            status,
            StatusCode::SEE_OTHER,
            "a sold seat is not held again"
        );
        let report = crate::check::check(self.db(), event).await.unwrap();
        assert_eq!(report.double_sold_seats, 0);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
    }

    /// Confirms `seat` for `buyer`, asserting it sold, and returns the new order's path.
    pub async fn confirm(&self, buyer: &mut HttpBuyer, event: i64, seat: i64) -> String {
        let reply = buyer
            .seat_action(&self.address, event, seat, "confirm")
            .await
            .unwrap();
        assert_eq!(
            reply.status,
            reqwest::StatusCode::SEE_OTHER,
            "{}",
            reply.body
        );
        let order = reply.location.unwrap();
        assert!(order.starts_with("/orders/"), "{order}");
        order
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Polls `check` every 20 ms until it is true; panics naming `what` after `limit`.
pub async fn eventually<F: std::future::Future<Output = bool>>(
    limit: Duration,
    what: &str,
    check: impl Fn() -> F,
) {
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
