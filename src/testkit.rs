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
        first_event_seats(self.db()).await
    }
}

/// The first event's id in `db` and the ids of its seats, in map order.
pub async fn first_event_seats(db: &PgPool) -> anyhow::Result<(i64, Vec<i64>)> {
    let event: i64 = sqlx::query_scalar("SELECT min(id) FROM events")
        .fetch_one(db)
        .await?;
    Ok((event, event_seats(db, event).await?))
}

/// The ids of the seats of `event`, in map order.
pub async fn event_seats(db: &PgPool, event: i64) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar(
        "SELECT es.seat_id FROM event_seats es JOIN seats s ON s.id = es.seat_id
          WHERE es.event_id = $1 ORDER BY s.section_id, s.row_position, s.number",
    )
    .bind(event)
    .fetch_all(db)
    .await
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
    jar: std::sync::Arc<reqwest::cookie::Jar>,
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
        Self::build(headers, Default::default(), String::new())
    }

    /// Another client of the same browser (the same cookie jar and CSRF token, like a
    /// second tab) that sends `headers` with every request.
    pub fn another_tab(&self, headers: reqwest::header::HeaderMap) -> Self {
        Self::build(headers, self.jar.clone(), self.token.clone())
    }

    fn build(
        headers: reqwest::header::HeaderMap,
        jar: std::sync::Arc<reqwest::cookie::Jar>,
        token: String,
    ) -> Self {
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .cookie_provider(jar.clone())
            .redirect(Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .expect("a plain HTTP client builds");
        HttpBuyer { client, jar, token }
    }

    /// The value of cookie `name` this buyer would send to `base` (`http://host:port`).
    pub fn cookie(&self, base: &str, name: &str) -> Option<String> {
        self.cookie_header(base)?.split("; ").find_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            (key == name).then(|| value.to_owned())
        })
    }

    /// The `Cookie` header this buyer would send to `base`, if it has cookies there.
    pub fn cookie_header(&self, base: &str) -> Option<String> {
        use reqwest::cookie::CookieStore;
        let header = self.jar.cookies(&base.parse().ok()?)?;
        header.to_str().ok().map(str::to_owned)
    }

    /// Puts cookie `name=value` in the jar for `base`, as if the site had set it (a
    /// planted or stolen cookie, in session tests).
    pub fn set_cookie(&self, base: &str, name: &str, value: &str) -> anyhow::Result<()> {
        let url = base.parse()?;
        self.jar
            .add_cookie_str(&format!("{name}={value}; Path=/; HttpOnly"), &url);
        Ok(())
    }

    /// The CSRF token of the last page read (empty before any).
    pub fn csrf_token(&self) -> &str {
        &self.token
    }

    /// POSTs `body` to `url` as a urlencoded form, exactly as given (no token added):
    /// for oversized or hand-made bodies.
    pub async fn post_raw(&self, url: &str, body: String) -> anyhow::Result<Reply> {
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
        self.post_raw(url, serde_urlencoded::to_string(&form)?)
            .await
    }

    /// POSTs `action` (`hold`, `release` or `confirm`) for one seat, first opening the
    /// event page (session + CSRF token) if this buyer has read no page yet.
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

/// A free loopback port (free when asked) and a new, empty temporary folder named after
/// `prefix`, for a private server.
fn port_and_folder(prefix: &str) -> anyhow::Result<(u16, std::path::PathBuf)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let dir = std::env::temp_dir().join(unique_name(prefix));
    std::fs::create_dir_all(&dir)?;
    Ok((port, dir))
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
        let (port, dir) = port_and_folder("seatlock-redis")?;
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
        Self::start_with_env(binary, settings, &[]).await
    }

    /// [`ServerProcess::start`] with extra environment variables (e.g. `LD_PRELOAD` of
    /// libfaketime, to run the server with an offset clock).
    pub async fn start_with_env(
        binary: &std::path::Path,
        settings: &Settings,
        env: &[(&str, &str)],
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
            .env("SEATLOCK_DB_POOL_SIZE", settings.db_pool_size.to_string())
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
        command.envs(env.iter().copied());
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

    /// Sends `signal` (`STOP`, `CONT`, `KILL`, …) to the server with `kill(1)`.
    pub fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let pid = self.pid().context("the server has exited")?;
        send_signal(pid, signal)
    }

    /// Kills the server at once (SIGKILL: no graceful shutdown, in-flight requests die)
    /// and reaps it.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        self.child.kill().await?;
        Ok(())
    }
}

/// Sends `signal` (`STOP`, `CONT`, `KILL`, …) to process `pid` with `kill(1)`.
pub fn send_signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .context("running kill")?;
    anyhow::ensure!(status.success(), "kill -{signal} {pid} failed");
    Ok(())
}

/// A private PostgreSQL server on a free loopback port, owned by one test: for tests that
/// stop or restart the database under a running application. Made like
/// `scripts/services.sh` does (`initdb`, `pg_ctl`, as the `postgres` user through
/// `runuser` when the tests run as root), trusting loopback connections, `fsync=off`.
/// Stopped (immediate mode) and deleted when dropped.
pub struct PostgresServer {
    /// The port it listens on.
    pub port: u16,
    dir: std::path::PathBuf,
    bin: std::path::PathBuf,
}

impl PostgresServer {
    /// Creates a cluster in a temporary folder and starts it.
    pub async fn start() -> anyhow::Result<PostgresServer> {
        let (port, dir) = port_and_folder("seatlock-pg")?;
        std::fs::create_dir_all(dir.join("sock"))?;
        let server = PostgresServer {
            port,
            bin: postgres_bin_dir()?,
            dir,
        };
        if running_as_root() {
            let chown = tokio::process::Command::new("chown")
                .args(["-R", "postgres"])
                .arg(&server.dir)
                .status()
                .await?;
            anyhow::ensure!(chown.success(), "chown to postgres failed");
        }
        server
            .run(
                "initdb",
                &[
                    "-U",
                    "postgres",
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                    "--auth=trust",
                ],
            )
            .await?;
        server.start_again().await?;
        Ok(server)
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`, a role that may create databases
    /// (for [`fresh_database`]).
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server: `mode` is `pg_ctl`'s `fast` (roll back open transactions,
    /// disconnect everyone) or `immediate` (like a crash: recovery on the next start).
    pub async fn stop(&self, mode: &str) -> anyhow::Result<()> {
        self.run("pg_ctl", &["-m", mode, "-w", "stop"]).await
    }

    /// Starts the (stopped) server again on the same port and waits until it accepts
    /// connections.
    pub async fn start_again(&self) -> anyhow::Result<()> {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -c unix_socket_directories={} -c fsync=off",
            self.port,
            self.dir.join("sock").display()
        );
        let log = self.dir.join("log");
        let log = log.to_str().context("temporary folder path is not UTF-8")?;
        self.run("pg_ctl", &["-l", log, "-w", "-o", &options, "start"])
            .await
    }

    /// `bin` (`initdb`, `pg_ctl`) of the Postgres installation on the data folder, as
    /// `postgres` when root (Postgres refuses to run as root).
    fn command(&self, bin: &str) -> std::process::Command {
        let program = self.bin.join(bin);
        let mut command = if running_as_root() {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            std::process::Command::new(program)
        };
        command.arg("-D").arg(self.dir.join("data"));
        command
    }

    /// Runs [`Self::command`] with `args`; fails with its output unless it succeeds.
    async fn run(&self, bin: &str, args: &[&str]) -> anyhow::Result<()> {
        let output = tokio::process::Command::from(self.command(bin))
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .with_context(|| format!("running {bin}"))?;
        anyhow::ensure!(
            output.status.success(),
            "{bin} {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(())
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether this process runs as root (Postgres refuses to, hence `runuser`).
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The folder of `initdb` and `pg_ctl`: `PG_BIN`, else the newest
/// `/usr/lib/postgresql/*/bin` (Debian), else the folder of `initdb` on the `PATH`.
fn postgres_bin_dir() -> anyhow::Result<std::path::PathBuf> {
    if let Ok(dir) = std::env::var("PG_BIN") {
        return Ok(dir.into());
    }
    let mut versions: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin)| bin.join("initdb").exists())
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).find(|dir| dir.join("initdb").exists()))
        .context("initdb not found: apt-get install postgresql (or set PG_BIN)")
}
