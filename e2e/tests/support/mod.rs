//! Harness of the browser tests. Each test gets its own world: a fresh database seeded
//! with the demo venues (the 1,642-seat hall and the 11,056-seat arena), TWO
//! `seatlock serve` processes over it (one deployment: same secret, same lease
//! namespace), and Debian's chromium driven by playwright-rs, in which every buyer is a
//! browser context of its own (its own cookies, so its own session). A world started
//! with [`run_behind_proxy`] also has HAProxy in front of the two servers, configured as
//! `make scale` configures it.
//!
//! Needs `DATABASE_URL` and `REDIS_URL` (`scripts/services.sh up && source .run/env`), a
//! Playwright driver (`scripts/e2e-driver.sh && source e2e/driver.env`) and the server
//! binary (`cargo build --workspace --bins`); `make test` does all three.
//! `E2E_SCREENSHOTS=1` saves screenshots of the main pages; a failing test always saves
//! a screenshot and the HTML of every buyer's page, and the servers' logs, under
//! `target/e2e/`.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use playwright_rs::protocol::ResponseObject;
use playwright_rs::{
    Browser, BrowserContext, BrowserContextOptions, Cookie, LaunchOptions, Locator, Page,
    Playwright, ScreenshotOptions, expect,
};
use seatlock::config::Settings;
use seatlock_harness::haproxy::{BACKEND_COOKIE, BACKEND_HEADER};
use seatlock_harness::procs::{lab_binary, seatlock_binary, target_dir};
use seatlock_harness::{DEMO_VENUES, HaProxy, ServerProcess, TestApp};
use seatlock_lab::LabSettings;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

/// Flags for a headless Debian chromium in a container: no sandbox (we run as root), no GPU,
/// and none of the background traffic a first run starts.
const CHROMIUM_ARGS: &[&str] = &[
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
];

/// How long an action or a navigation may take before the test fails.
pub(crate) const ACTION_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a change may take to reach another buyer's open page (it normally takes a
/// few milliseconds; this is generous for a loaded 2-core machine).
pub(crate) const LIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// One test's world: the database, two server processes (perhaps behind HAProxy) and a
/// browser.
pub(crate) struct World {
    name: &'static str,
    /// The test database (to check what was written).
    pub db: PgPool,
    /// The settings both servers were started with.
    pub settings: Settings,
    servers: Vec<ServerProcess>,
    proxy: Option<HaProxy>,
    browser: Browser,
    buyers: Mutex<Vec<Buyer>>,
    /// What Chromium's console said the Content-Security-Policy refused, on any page of
    /// any buyer: a test with one fails (every page must work under the policy).
    refused_by_policy: Arc<Mutex<Vec<String>>>,
}

/// The responses a page received, recorded as they come.
type Responses = Arc<Mutex<Vec<ResponseObject>>>;

/// One buyer: a browser context (its own cookies) with one page, on one server.
#[derive(Clone)]
pub(crate) struct Buyer {
    /// "A", "B", …: names the buyer in artifacts.
    pub label: &'static str,
    /// The buyer's page.
    pub page: Page,
    context: BrowserContext,
    base: String,
    /// Behind the proxy: every response this buyer's page received, in the order they
    /// came (for [`Buyer::served_by`]).
    responses: Option<Responses>,
}

impl Buyer {
    /// The absolute URL of `path` on this buyer's server.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Opens `path` on this buyer's server and checks that it answered 200.
    pub(crate) async fn open(&self, path: &str) -> anyhow::Result<()> {
        let response = self.page.goto(&self.url(path), None).await?;
        let status = response.map(|r| r.status()).unwrap_or(0);
        ensure!(
            status == 200,
            "{}: GET {path} answered {status}",
            self.label
        );
        Ok(())
    }

    /// Opens `path` and waits until its live stream is connected (the element carrying
    /// `data-live`, the seat map or the auction item, says "open").
    pub(crate) async fn open_live(&self, path: &str) -> anyhow::Result<()> {
        self.open(path).await?;
        self.wait_live()
            .await
            .with_context(|| format!("{}: the live stream of {path} did not open", self.label))
    }

    /// Waits until the page's live stream is connected (after a reload, say).
    pub(crate) async fn wait_live(&self) -> anyhow::Result<()> {
        Ok(expect(self.page.locator("[data-live]"))
            .with_timeout(LIVE_TIMEOUT)
            .to_have_attribute("data-live", "open")
            .await?)
    }

    /// Whether the page scrolls sideways (its document wider than the window).
    pub(crate) async fn scrolls_sideways(&self) -> anyhow::Result<bool> {
        Ok(self
            .page
            .evaluate(
                "() => document.documentElement.scrollWidth > document.documentElement.clientWidth",
                None::<&()>,
            )
            .await?)
    }

    /// Another tab of this buyer's browser (same context: same cookies, same connection
    /// pool), on the same server.
    pub(crate) async fn tab(&self) -> anyhow::Result<Buyer> {
        let page = self.context.new_page().await?;
        page.set_default_timeout(ACTION_TIMEOUT.as_millis() as f64)
            .await;
        page.set_default_navigation_timeout(ACTION_TIMEOUT.as_millis() as f64)
            .await;
        Ok(Buyer {
            page,
            ..self.clone()
        })
    }

    /// Behind the proxy: the backends that answered (the proxy's [`BACKEND_HEADER`]) this
    /// buyer's responses whose URL ends with `suffix` (e.g. `/stream`: its live
    /// streams), each once, in the order seen; `none` for a response without the header.
    pub(crate) async fn served_by(&self, suffix: &str) -> anyhow::Result<Vec<String>> {
        let responses = self
            .responses
            .as_ref()
            .context("not a buyer behind the proxy")?;
        let responses = responses.lock().expect("responses").clone();
        let mut backends: Vec<String> = Vec::new();
        for response in responses.iter().filter(|r| r.url().ends_with(suffix)) {
            let headers = response.raw_headers().await?;
            let backend = headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(BACKEND_HEADER))
                .map_or("none", |h| h.value.as_str());
            if !backends.iter().any(|b| b == backend) {
                backends.push(backend.to_owned());
            }
        }
        Ok(backends)
    }

    /// Seat `seat_id` on the seat map.
    pub(crate) fn seat(&self, seat_id: i64) -> Locator {
        self.page.locator(format!("#seat-{seat_id}"))
    }

    /// Starts recording in the page when each seat is first shown in each state (the
    /// live script replaces a seat's element on every change), for [`Buyer::shown_at`].
    pub(crate) async fn record_seat_changes(&self) -> anyhow::Result<()> {
        Ok(self
            .page
            .evaluate_expression(
                "window.e2eShown = {}; new MutationObserver(changes => changes.forEach(c => \
                 c.addedNodes.forEach(n => (n.classList || []).forEach(state => { \
                   const key = n.id + ' ' + state; \
                   if (!(key in window.e2eShown)) window.e2eShown[key] = Date.now(); \
                 })))).observe(document.querySelector('form.seatmap'), \
                 { childList: true, subtree: true })",
            )
            .await?)
    }

    /// When (Unix time, ms) seat `seat_id` was first shown in `state` since
    /// [`Buyer::record_seat_changes`]; `None` if it was not.
    pub(crate) async fn shown_at(&self, seat_id: i64, state: &str) -> anyhow::Result<Option<u64>> {
        let key = format!("seat-{seat_id} {state}");
        Ok(self
            .page
            .evaluate("key => window.e2eShown[key] ?? null", Some(&key))
            .await?)
    }

    /// Waits up to [`LIVE_TIMEOUT`] until seat `seat_id` has the class `state`
    /// (`available`, `held`, `mine`, `sold` or `bought`).
    pub(crate) async fn wait_for_seat(&self, seat_id: i64, state: &str) -> anyhow::Result<()> {
        self.wait_for_seat_within(seat_id, state, LIVE_TIMEOUT)
            .await
    }

    /// Waits up to `timeout` until seat `seat_id` has the class `state`.
    pub(crate) async fn wait_for_seat_within(
        &self,
        seat_id: i64,
        state: &str,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        expect(self.seat(seat_id))
            .with_timeout(timeout)
            .to_have_class_regex(&format!(r"(^|\s){state}(\s|$)"))
            .await
            .with_context(|| format!("{}: seat {seat_id} never showed {state}", self.label))
    }
}

impl World {
    /// A new buyer (a fresh browser context, JavaScript on) on server `server` (0 or 1).
    pub(crate) async fn buyer(&self, label: &'static str, server: usize) -> anyhow::Result<Buyer> {
        let base = self.servers[server].address.clone();
        self.new_buyer(label, base, true, None).await
    }

    /// A new buyer (JavaScript on) going through the proxy, kept on backend number
    /// `server` (0 or 1) by the proxy's cookie, as if its first request had been given
    /// that backend; records which backend answers each response ([`Buyer::served_by`]).
    pub(crate) async fn buyer_through_proxy(
        &self,
        label: &'static str,
        server: usize,
    ) -> anyhow::Result<Buyer> {
        let proxy = self.proxy.as_ref().context("this world has no proxy")?;
        let responses = Responses::default();
        let buyer = self
            .new_buyer(label, proxy.address.clone(), true, Some(responses.clone()))
            .await?;
        let cookie = Cookie::new(BACKEND_COOKIE, HaProxy::backend_name(server)).url(&buyer.base);
        buyer.context.add_cookies(&[cookie]).await?;
        buyer
            .page
            .on_response(move |response| {
                responses.lock().expect("responses").push(response);
                async { Ok(()) }
            })
            .await?;
        Ok(buyer)
    }

    /// A new buyer whose browser has JavaScript disabled, on server `server`.
    pub(crate) async fn buyer_without_javascript(
        &self,
        label: &'static str,
        server: usize,
    ) -> anyhow::Result<Buyer> {
        let base = self.servers[server].address.clone();
        self.new_buyer(label, base, false, None).await
    }

    /// A new buyer on `base` (a server's or the proxy's address): a fresh browser
    /// context with one page.
    async fn new_buyer(
        &self,
        label: &'static str,
        base: String,
        javascript: bool,
        responses: Option<Responses>,
    ) -> anyhow::Result<Buyer> {
        let options = BrowserContextOptions::builder()
            .javascript_enabled(javascript)
            .build();
        let context = self.browser.new_context_with_options(options).await?;
        let page = context.new_page().await?;
        let refused = self.refused_by_policy.clone();
        page.on_console(move |message| {
            if message.text().contains("Content Security Policy") {
                let text = format!("{label}: {}", message.text());
                refused.lock().expect("refused").push(text);
            }
            async { Ok(()) }
        })
        .await?;
        page.set_default_timeout(ACTION_TIMEOUT.as_millis() as f64)
            .await;
        page.set_default_navigation_timeout(ACTION_TIMEOUT.as_millis() as f64)
            .await;
        let buyer = Buyer {
            label,
            page,
            context,
            base,
            responses,
        };
        self.buyers.lock().expect("buyers").push(buyer.clone());
        Ok(buyer)
    }

    /// The id of the event whose name contains `name` (the hall's is "Mahler's Fifth…",
    /// the arena's "Championship Finals Night").
    pub(crate) async fn event_id(&self, name: &str) -> anyhow::Result<i64> {
        sqlx::query_scalar("SELECT id FROM events WHERE name LIKE '%' || $1 || '%'")
            .bind(name)
            .fetch_one(&self.db)
            .await
            .with_context(|| format!("no event named like {name:?}"))
    }

    /// The demo's waiting-room event ("Chamber Night", one shopper at a time), put on sale
    /// now (its seeded on-sale is minutes away) before any server has read it; its path.
    pub(crate) async fn on_sale_room(&self) -> anyhow::Result<String> {
        let event = self.event_id("Chamber Night").await?;
        sqlx::query("UPDATE events SET on_sale_at = now() - interval '1 minute' WHERE id = $1")
            .bind(event)
            .execute(&self.db)
            .await?;
        Ok(format!("/events/{event}"))
    }

    /// An open auction item (an hour to go, $10.00 start, the published increments); its
    /// id and page path.
    pub(crate) async fn auction_item(&self) -> anyhow::Result<(i64, String)> {
        let item = seatlock_harness::auction_item("Signed tour poster");
        let id = seatlock::auction::queries::insert_item(&self.db, &item)
            .await?
            .context("a fresh slug")?;
        Ok((id, format!("/auctions/{id}")))
    }

    /// Orders for one seat of one event, as written in the database.
    pub(crate) async fn orders_for(&self, event_id: i64, seat_id: i64) -> anyhow::Result<i64> {
        Ok(seatlock_harness::orders_for(&self.db, event_id, seat_id).await?)
    }

    /// Makes the hold on seat `seat_id` of event `event_id` lapse now, as its TTL running
    /// out would (Redis expires that one lease key; the buyer's other holds stay).
    pub(crate) async fn lapse_hold(&self, event_id: i64, seat_id: i64) -> anyhow::Result<()> {
        let key = seatlock::seats::lease_key(
            &self.settings.lease_namespace,
            seatlock::seats::SeatRef { event_id, seat_id },
        );
        seatlock_harness::lapse_lease(&self.settings.redis_url, &key).await
    }

    /// With `E2E_SCREENSHOTS=1`, saves what `buyer` sees at the top of the page (the
    /// browser window, not the whole page) as `target/e2e/<test>-<label>.png`; otherwise
    /// does nothing.
    pub(crate) async fn screenshot(&self, buyer: &Buyer, label: &str) -> anyhow::Result<()> {
        if std::env::var("E2E_SCREENSHOTS").as_deref() != Ok("1") {
            return Ok(());
        }
        let path = artifact_path(&format!("{}-{label}.png", self.name))?;
        // From the top (a hold's redirect scrolls to its seat), so the header shows.
        buyer
            .page
            .evaluate_expression("window.scrollTo(0, 0)")
            .await?;
        let options = ScreenshotOptions::builder().full_page(false).build();
        buyer
            .page
            .screenshot_to_file(&path, Some(options))
            .await
            .with_context(|| format!("screenshot {}", path.display()))?;
        eprintln!("e2e: screenshot {}", path.display());
        Ok(())
    }

    /// Saves `target/e2e/<test>-<buyer>-failure.png` and `.html` for every buyer, and
    /// `<test>-server-<n>.log`; reports, never fails.
    async fn save_failure(&self) {
        let name = self.name;
        let buyers = self.buyers.lock().expect("buyers").clone();
        for buyer in buyers {
            let label = buyer.label;
            eprintln!("e2e: {name} failed; {label} is at {}", buyer.page.url());
            let options = ScreenshotOptions::builder().full_page(true).build();
            save_artifact(&format!("{name}-{label}-failure.png"), async {
                Ok(buyer.page.screenshot(Some(options)).await?)
            })
            .await;
            save_artifact(&format!("{name}-{label}-failure.html"), async {
                Ok(buyer.page.content().await?.into_bytes())
            })
            .await;
        }
        for (n, server) in self.servers.iter().enumerate() {
            save_artifact(&format!("{name}-server-{n}.log"), async {
                Ok(std::fs::read(&server.log)?)
            })
            .await;
        }
        if let Some(proxy) = &self.proxy {
            save_artifact(&format!("{name}-haproxy.log"), async {
                Ok(std::fs::read(&proxy.log)?)
            })
            .await;
        }
    }

    /// Closes every context, then the browser.
    async fn close(&self) {
        let buyers = std::mem::take(&mut *self.buyers.lock().expect("buyers"));
        for buyer in buyers {
            if let Err(e) = buyer.context.close().await {
                eprintln!("e2e: {}: closing {}'s context: {e}", self.name, buyer.label);
            }
        }
        if let Err(e) = self.browser.close().await {
            eprintln!("e2e: {}: closing the browser: {e}", self.name);
        }
    }
}

/// Now, in Unix milliseconds (the clock the browser's `Date.now()` reads too).
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs `body` in a fresh world with the default settings (ten-minute holds).
pub(crate) async fn run(name: &'static str, body: impl AsyncFnOnce(&World) -> anyhow::Result<()>) {
    run_with(name, |_| {}, body).await
}

/// [`run`] with HAProxy in front of the two servers ([`World::buyer_through_proxy`]).
pub(crate) async fn run_behind_proxy(
    name: &'static str,
    body: impl AsyncFnOnce(&World) -> anyhow::Result<()>,
) {
    run_world(name, |_| {}, None, true, body).await
}

/// Starts a world whose servers run with the settings `adjust` makes, runs `body`, saves
/// artifacts when it fails (an error or a panic), then closes the browser and the
/// Playwright driver and stops the servers whatever happened, so no chromium, node or
/// server process outlives the test.
pub(crate) async fn run_with(
    name: &'static str,
    adjust: impl FnOnce(&mut Settings) + Send + 'static,
    body: impl AsyncFnOnce(&World) -> anyhow::Result<()>,
) {
    run_world(name, adjust, None, false, body).await
}

/// [`run`] with the lab's servers (`seatlock-lab serve`) as `lab` sets them.
pub(crate) async fn run_lab(
    name: &'static str,
    lab: LabSettings,
    body: impl AsyncFnOnce(&World) -> anyhow::Result<()>,
) {
    run_world(name, |_| {}, Some(lab), false, body).await
}

/// [`run_with`], the servers the lab's if `lab` is set, behind HAProxy if `proxied`.
async fn run_world(
    name: &'static str,
    adjust: impl FnOnce(&mut Settings) + Send + 'static,
    lab: Option<LabSettings>,
    proxied: bool,
    body: impl AsyncFnOnce(&World) -> anyhow::Result<()>,
) {
    let clock = Instant::now();
    let (db, settings, servers) = start_servers(adjust, lab)
        .await
        .unwrap_or_else(|e| panic!("{name}: starting the servers: {e:?}"));
    let proxy = if proxied {
        let addresses: Vec<&str> = servers.iter().map(|s| s.address.as_str()).collect();
        let proxy = HaProxy::start(&addresses).await;
        Some(proxy.unwrap_or_else(|e| panic!("{name}: starting HAProxy: {e:?}")))
    } else {
        None
    };
    let servers_ready = clock.elapsed();
    let playwright = Playwright::launch()
        .await
        .expect("Playwright driver (run `scripts/e2e-driver.sh && source e2e/driver.env`)");
    let browser = match launch_chromium(&playwright).await {
        Ok(browser) => browser,
        Err(e) => {
            let _ = playwright.shutdown().await;
            panic!("{name}: {e:?}");
        }
    };
    let world = World {
        name,
        db,
        settings,
        servers,
        proxy,
        browser,
        buyers: Mutex::new(Vec::new()),
        refused_by_policy: Arc::default(),
    };
    let browser_ready = clock.elapsed();
    let outcome = CatchUnwind(Box::pin(body(&world))).await;
    let refused = world.refused_by_policy.lock().expect("refused").clone();
    let outcome = match outcome {
        Ok(Ok(())) if !refused.is_empty() => Ok(Err(anyhow::anyhow!(
            "the Content-Security-Policy refused: {refused:#?}"
        ))),
        other => other,
    };
    eprintln!(
        "e2e: {name}: database + 2 servers {:.1}s, driver + browser {:.1}s, test {:.1}s",
        servers_ready.as_secs_f64(),
        (browser_ready - servers_ready).as_secs_f64(),
        (clock.elapsed() - browser_ready).as_secs_f64()
    );
    if !matches!(outcome, Ok(Ok(()))) {
        world.save_failure().await;
    }
    world.close().await;
    if let Err(e) = playwright.shutdown().await {
        eprintln!("e2e: {name}: shutting down Playwright: {e}");
    }
    world.db.close().await;
    drop(world); // kills the servers and the proxy

    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("{name}: {e:?}"),
        Err(panic) => resume_unwind(panic),
    }
}

/// A fresh database seeded with the demo venues, and two `seatlock serve` processes over
/// it with one secret and one lease namespace ([`TestApp::builder`]), as `adjust` sets.
/// With `lab`, two `seatlock-lab serve` processes with those lab settings.
async fn start_servers(
    adjust: impl FnOnce(&mut Settings) + Send + 'static,
    lab: Option<LabSettings>,
) -> anyhow::Result<(PgPool, Settings, Vec<ServerProcess>)> {
    let settings = TestApp::builder()
        .venues(DEMO_VENUES)
        // A store call that is slow only because the machine is busy (two browsers, four
        // servers, cargo) must not fail a page with 503.
        .with(|s| s.store_timeout_ms = 10_000)
        .with(adjust)
        .settings()
        .await?;
    let url = settings.database_url.clone();
    let (one, two) = match &lab {
        None => {
            let binary = seatlock_binary()?;
            tokio::try_join!(
                ServerProcess::start(&binary, &settings),
                ServerProcess::start(&binary, &settings)
            )?
        }
        Some(lab) => {
            let binary = lab_binary()?;
            tokio::try_join!(
                ServerProcess::start_lab(&binary, &settings, lab),
                ServerProcess::start_lab(&binary, &settings, lab)
            )?
        }
    };
    let db = PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await?;
    Ok((db, settings, vec![one, two]))
}

async fn launch_chromium(playwright: &Playwright) -> anyhow::Result<Browser> {
    let executable = std::env::var("E2E_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let options = LaunchOptions::new()
        .headless(true)
        .executable_path(executable.clone())
        .args(CHROMIUM_ARGS.iter().map(|a| a.to_string()).collect());
    playwright
        .chromium()
        .launch_with_options(options)
        .await
        .with_context(|| format!("launching {executable} (scripts/e2e-driver.sh installs it)"))
}

/// `target/e2e/<file>` of the workspace, created if needed.
fn artifact_path(file: &str) -> anyhow::Result<PathBuf> {
    let dir = target_dir().join("e2e");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir.join(file))
}

/// Writes `target/e2e/<file>` with what `bytes` yields; reports, never fails.
async fn save_artifact(file: &str, bytes: impl Future<Output = anyhow::Result<Vec<u8>>>) {
    let saved = async {
        let path = artifact_path(file)?;
        std::fs::write(&path, bytes.await?)?;
        anyhow::Ok(path)
    };
    match saved.await {
        Ok(path) => eprintln!("e2e: saved {}", path.display()),
        Err(e) => eprintln!("e2e: could not save {file}: {e:?}"),
    }
}

/// A future that turns a panic while it is polled into `Err`, so the harness can still
/// save artifacts and close the browser before the test fails.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = std::thread::Result<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.0.as_mut();
        match catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}
