//! Test support shared by the integration tests, the end-to-end suite and the load test:
//! a fresh Postgres database per test, an application server on port 0, and a buyer that
//! drives the real HTTP flow (session cookie, CSRF token, forms).
//!
//! The stores come from `DATABASE_URL` (a role allowed to create databases) and
//! `REDIS_URL`, which `make test` exports after starting private instances.

use std::time::Duration;

use anyhow::{Context, bail};
use rand::Rng;
use reqwest::StatusCode;
use reqwest::redirect::Policy;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};

use crate::app::Application;
use crate::config::Settings;
use crate::state::AppState;

/// `DATABASE_URL` and `REDIS_URL`, or an error saying to run under `make test`.
pub fn store_urls() -> anyhow::Result<(String, String)> {
    let db = std::env::var("DATABASE_URL")
        .context("DATABASE_URL is not set: run the tests with `make test`")?;
    let redis = std::env::var("REDIS_URL")
        .context("REDIS_URL is not set: run the tests with `make test`")?;
    Ok((db, redis))
}

/// A random lowercase name with `prefix`, e.g. `t_3f9a1c20b7`.
pub fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}_{:010x}",
        rand::rng().random::<u64>() & 0xff_ffff_ffff
    )
}

/// Creates an empty database next to the one `admin_url` names, applies the migrations,
/// and returns its URL.
pub async fn fresh_database(admin_url: &str) -> anyhow::Result<String> {
    let name = unique_name("t");
    let mut admin = PgConnection::connect(admin_url)
        .await
        .context("connecting to DATABASE_URL")?;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await?;
    let url = match admin_url.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{name}"),
        None => bail!("DATABASE_URL has no database name"),
    };
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await?;
    sqlx::migrate!("./migrations").run(&pool).await?;
    pool.close().await;
    Ok(url)
}

/// Loads the venues of `dir` into the database at `url`.
pub async fn seed(url: &str, dir: &str) -> anyhow::Result<()> {
    let pool = PgPoolOptions::new().max_connections(1).connect(url).await?;
    crate::seed::seed(&pool, std::path::Path::new(dir)).await?;
    pool.close().await;
    Ok(())
}

/// The tiny test venue (one event, 32 seats): tests/venues.
pub const TINY_VENUES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/venues");
/// The real venues (the 1,642-seat hall and the 11,056-seat arena): data/venues.
pub const DEMO_VENUES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/venues");
/// A CSRF secret shared by every server of one test, so forms cross processes.
pub const TEST_SECRET: &str = "seatlock-test-secret-at-least-32-bytes";

/// Settings for a test server on port 0 over `database_url`, with its own lease
/// namespace (tests share one Redis) and the shared test secret.
pub fn settings(database_url: &str, redis_url: &str) -> Settings {
    let mut settings = Settings::new(database_url, redis_url, "127.0.0.1:0");
    settings.lease_namespace = unique_name("test");
    settings.secret = Some(TEST_SECRET.into());
    settings
}

/// A plain auction item for tests, `title`, with a fresh slug: open from an hour ago for
/// another hour, starting price $10.00, minimum increment $1.00, no reserve, no soft
/// close. Change what a test needs, then insert it with
/// [`crate::auction::queries::insert_item`].
pub fn auction_item(title: &str) -> crate::auction::queries::NewItem {
    let now = chrono::Utc::now();
    crate::auction::queries::NewItem {
        slug: unique_name("item"),
        terms: crate::auction::queries::ItemTerms {
            title: title.into(),
            description: format!("{title}, for a test."),
            starting_price_cents: 1_000,
            min_increment_cents: 100,
            reserve_price_cents: 0,
            soft_close_secs: 0,
        },
        starts_at: now - chrono::TimeDelta::hours(1),
        ends_at: now + chrono::TimeDelta::hours(1),
    }
}

/// A running application server inside the test process.
pub struct TestApp {
    /// `http://127.0.0.1:PORT`.
    pub address: String,
    /// The server's state (pool, lease client, settings).
    pub state: AppState,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TestApp {
    /// Builds the application with `settings` and serves it on a background task.
    pub async fn spawn(settings: Settings) -> anyhow::Result<TestApp> {
        let app = Application::build(settings).await?;
        let address = format!("http://{}", app.address());
        let state = app.state().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        tokio::spawn(app.run_until(async {
            let _ = stopped.await;
        }));
        Ok(TestApp {
            address,
            state,
            stop: Some(stop),
        })
    }

    /// A fresh database seeded with `venues`, and a server over it.
    pub async fn with_venues(venues: &str) -> anyhow::Result<TestApp> {
        let (admin, redis) = store_urls()?;
        let url = fresh_database(&admin).await?;
        seed(&url, venues).await?;
        TestApp::spawn(settings(&url, &redis)).await
    }

    /// The pool of the test database.
    pub fn db(&self) -> &PgPool {
        &self.state.db
    }

    /// The first event's id and the ids of its seats, in map order.
    pub async fn first_event_seats(&self) -> anyhow::Result<(i64, Vec<i64>)> {
        let event: i64 = sqlx::query_scalar("SELECT min(id) FROM events")
            .fetch_one(self.db())
            .await?;
        let seats = sqlx::query_scalar(
            "SELECT es.seat_id FROM event_seats es JOIN seats s ON s.id = es.seat_id
              WHERE es.event_id = $1 ORDER BY s.section_id, s.row_position, s.number",
        )
        .bind(event)
        .fetch_all(self.db())
        .await?;
        Ok((event, seats))
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// One browser's worth of HTTP: a cookie jar (session and CSRF cookies), no automatic
/// redirects (tests look at the 303s), and the CSRF token of the last page read.
pub struct HttpBuyer {
    client: reqwest::Client,
    token: String,
}

/// A response reduced to what tests look at.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: StatusCode,
    /// `Location` header of a redirect, if any.
    pub location: Option<String>,
    /// Body text.
    pub body: String,
}

impl HttpBuyer {
    /// A new buyer with an empty cookie jar.
    pub fn new() -> Self {
        Self::with_headers(reqwest::header::HeaderMap::new())
    }

    /// A new buyer that sends `headers` with every request (the race lab's pause header).
    pub fn with_headers(headers: reqwest::header::HeaderMap) -> Self {
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .cookie_store(true)
            .redirect(Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .expect("a plain HTTP client builds");
        HttpBuyer {
            client,
            token: String::new(),
        }
    }

    async fn reply(response: reqwest::Response) -> anyhow::Result<Reply> {
        let status = response.status();
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .map(str::to_owned);
        Ok(Reply {
            status,
            location,
            body: response.text().await?,
        })
    }

    /// GETs `url` and remembers the page's CSRF token, if it has a form.
    pub async fn get(&mut self, url: &str) -> anyhow::Result<Reply> {
        let reply = Self::reply(self.client.get(url).send().await?).await?;
        if let Some(token) = authenticity_token(&reply.body) {
            self.token = token;
        }
        Ok(reply)
    }

    /// POSTs a form to `url` with the remembered CSRF token and the extra `fields`.
    pub async fn post(&self, url: &str, fields: &[(&str, &str)]) -> anyhow::Result<Reply> {
        let mut form: Vec<(&str, &str)> = vec![("authenticity_token", &self.token)];
        form.extend_from_slice(fields);
        let body = serde_urlencoded::to_string(&form)?;
        let response = self
            .client
            .post(url)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await?;
        Self::reply(response).await
    }

    /// Opens the event page (session + CSRF token) then POSTs `action` (`hold`, `release`
    /// or `confirm`) for one seat.
    pub async fn seat_action(
        &mut self,
        base: &str,
        event: i64,
        seat: i64,
        action: &str,
    ) -> anyhow::Result<Reply> {
        if self.token.is_empty() {
            self.get(&format!("{base}/events/{event}")).await?;
        }
        self.post(&format!("{base}/events/{event}/seats/{seat}/{action}"), &[])
            .await
    }
}

impl Default for HttpBuyer {
    fn default() -> Self {
        Self::new()
    }
}

/// The value of the first `authenticity_token` hidden field in an HTML page.
pub fn authenticity_token(html: &str) -> Option<String> {
    let start = html.find("name=\"authenticity_token\" value=\"")? + 33;
    let end = html[start..].find('"')?;
    Some(html[start..start + end].to_owned())
}

/// A private `redis-server` on a free loopback port, owned by one test: for tests that
/// kill or restart the lock store. Stopped when dropped.
pub struct RedisServer {
    /// The port it listens on.
    pub port: u16,
    dir: std::path::PathBuf,
    child: Option<std::process::Child>,
}

impl RedisServer {
    /// Starts one (no persistence: a restart comes back empty) and waits until it answers.
    pub async fn start() -> anyhow::Result<RedisServer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let dir = std::env::temp_dir().join(unique_name("seatlock-redis"));
        std::fs::create_dir_all(&dir)?;
        let mut server = RedisServer {
            port,
            dir,
            child: None,
        };
        server.restart_empty().await?;
        Ok(server)
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server (SIGKILL: nothing is saved).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server if running and starts a new, empty one on the same port.
    pub async fn restart_empty(&mut self) -> anyhow::Result<()> {
        self.kill();
        let child = std::process::Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(&self.dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .context("starting redis-server (apt-get install redis-server)")?;
        self.child = Some(child);
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!("redis-server did not start on port {}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `seatlock serve` child process on a free loopback port: for tests and the load test
/// that need separate server processes (to pause them with SIGSTOP, or to race them).
/// Its log (stderr) goes to [`ServerProcess::log`]. Killed when dropped.
pub struct ServerProcess {
    /// `http://127.0.0.1:PORT`.
    pub address: String,
    /// The file the server logs to.
    pub log: std::path::PathBuf,
    child: tokio::process::Child,
}

impl ServerProcess {
    /// Starts `binary serve` with `settings` passed as environment variables (bind is
    /// forced to `127.0.0.1:0`) and waits for the line announcing its address.
    pub async fn start(
        binary: &std::path::Path,
        settings: &Settings,
    ) -> anyhow::Result<ServerProcess> {
        use tokio::io::AsyncBufReadExt;
        let log = std::env::temp_dir().join(format!("{}.log", unique_name("seatlock-serve")));
        let mut command = tokio::process::Command::new(binary);
        command
            .arg("serve")
            .env("DATABASE_URL", &settings.database_url)
            .env("REDIS_URL", &settings.redis_url)
            .env("SEATLOCK_BIND", "127.0.0.1:0")
            .env("SEATLOCK_HOLD_TTL_MS", settings.hold_ttl_ms.to_string())
            .env(
                "SEATLOCK_PAYMENT_DELAY_MS",
                settings.payment_delay_ms.to_string(),
            )
            .env("SEATLOCK_LEASE_NAMESPACE", &settings.lease_namespace)
            .env(
                "SEATLOCK_STORE_TIMEOUT_MS",
                settings.store_timeout_ms.to_string(),
            )
            .env(
                "SEATLOCK_PURCHASE_STRATEGY",
                settings.purchase_strategy.flag_value(),
            )
            .env(
                "SEATLOCK_ENABLE_RACE_LAB",
                settings.enable_race_lab.to_string(),
            )
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true);
        if let Some(secret) = &settings.secret {
            command.env("SEATLOCK_SECRET", secret);
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let stdout = child.stdout.take().context("server stdout")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let announced = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .context("server did not announce its address within 30 s")??
            .with_context(|| {
                format!(
                    "server exited before announcing its address: see {}",
                    log.display()
                )
            })?;
        let address = announced
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .with_context(|| format!("unexpected first line {announced:?}"))?
            .to_owned();
        // Keep draining stdout so the server never writes into a closed pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(ServerProcess {
            address,
            log,
            child,
        })
    }

    /// The child's process id (for SIGSTOP / SIGCONT / SIGKILL in fault tests).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}
