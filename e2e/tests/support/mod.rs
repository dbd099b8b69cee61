//! Harness of the browser tests: the application in-process over a fresh database, Debian's
//! chromium driven by playwright-rs, and artifacts under `target/e2e/`.
//!
//! Needs `DATABASE_URL` and `REDIS_URL` (`scripts/services.sh up && source .run/env`) and a
//! Playwright driver (`scripts/e2e-driver.sh && source e2e/driver.env`); `make test` does
//! both. `E2E_SCREENSHOTS=1` saves screenshots of the main pages; a failing test always
//! saves a screenshot and the page's HTML.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use playwright_rs::{Browser, LaunchOptions, Page, Playwright, ScreenshotOptions};
use seatlock::testkit::{DEMO_VENUES, TestApp};

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
pub const ACTION_TIMEOUT: Duration = Duration::from_secs(10);

/// One test's world: the application and a page in a fresh browser.
pub struct Session {
    /// The application server, over its own database.
    pub app: TestApp,
    /// A page of a fresh browser (its own cookies, so its own buyer).
    pub page: Page,
    name: &'static str,
}

impl Session {
    /// The absolute URL of `path` on the test server.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.app.address)
    }

    /// With `E2E_SCREENSHOTS=1`, saves a full-page screenshot as
    /// `target/e2e/<test>-<label>.png`; otherwise does nothing.
    pub async fn snapshot(&self, label: &str) -> anyhow::Result<()> {
        if std::env::var("E2E_SCREENSHOTS").as_deref() != Ok("1") {
            return Ok(());
        }
        let path = artifact_path(&format!("{}-{label}.png", self.name))?;
        let options = ScreenshotOptions::builder().full_page(true).build();
        self.page
            .screenshot_to_file(&path, Some(options))
            .await
            .with_context(|| format!("screenshot {}", path.display()))?;
        eprintln!("e2e: screenshot {}", path.display());
        Ok(())
    }
}

/// Runs `body` against the demo venues (the hall and the arena) in a fresh database.
pub async fn run(name: &'static str, body: impl AsyncFnOnce(&Session) -> anyhow::Result<()>) {
    run_with_venues(name, DEMO_VENUES, body).await
}

/// Starts the application over `venues` and a browser, runs `body`, saves a screenshot and
/// the HTML when it fails (an error or a panic), then closes the browser and the Playwright
/// driver whatever happened, so no chromium or node process outlives the test.
pub async fn run_with_venues(
    name: &'static str,
    venues: &str,
    body: impl AsyncFnOnce(&Session) -> anyhow::Result<()>,
) {
    let clock = Instant::now();
    let app = TestApp::with_venues(venues)
        .await
        .expect("test application (needs `scripts/services.sh up && source .run/env`)");
    let playwright = Playwright::launch()
        .await
        .expect("Playwright driver (run `scripts/e2e-driver.sh && source e2e/driver.env`)");
    let app_ready = clock.elapsed();
    let browser = match launch_chromium(&playwright).await {
        Ok(browser) => browser,
        Err(e) => {
            let _ = playwright.shutdown().await;
            panic!("{name}: {e:?}");
        }
    };

    let outcome = match browser.new_page().await {
        Ok(page) => {
            let timeout_ms = ACTION_TIMEOUT.as_millis() as f64;
            page.set_default_timeout(timeout_ms).await;
            let session = Session { app, page, name };
            let browser_ready = clock.elapsed();
            let outcome = CatchUnwind(Box::pin(body(&session))).await;
            let body_done = clock.elapsed();
            eprintln!(
                "e2e: {name}: app + driver {:.1}s, browser {:.1}s, test {:.1}s",
                app_ready.as_secs_f64(),
                (browser_ready - app_ready).as_secs_f64(),
                (body_done - browser_ready).as_secs_f64()
            );
            if !matches!(outcome, Ok(Ok(()))) {
                save_failure(&session).await;
            }
            outcome
        }
        Err(e) => Ok(Err(anyhow::Error::new(e).context("opening a page"))),
    };

    if let Err(e) = browser.close().await {
        eprintln!("e2e: {name}: closing the browser: {e}");
    }
    if let Err(e) = playwright.shutdown().await {
        eprintln!("e2e: {name}: shutting down Playwright: {e}");
    }

    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("{name}: {e:?}"),
        Err(panic) => resume_unwind(panic),
    }
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
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_dir().join("target"));
    let dir = target.join("e2e");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir.join(file))
}

/// The workspace root: the parent of this crate.
fn workspace_dir() -> PathBuf {
    let e2e = Path::new(env!("CARGO_MANIFEST_DIR"));
    e2e.parent().unwrap_or(e2e).to_path_buf()
}

/// Saves `target/e2e/<test>-failure.png` and `.html`; reports, never fails.
async fn save_failure(session: &Session) {
    let name = session.name;
    eprintln!("e2e: {name} failed at {}", session.page.url());
    match artifact_path(&format!("{name}-failure.png")) {
        Ok(path) => {
            let options = ScreenshotOptions::builder().full_page(true).build();
            match session.page.screenshot_to_file(&path, Some(options)).await {
                Ok(_) => eprintln!("e2e: screenshot {}", path.display()),
                Err(e) => eprintln!("e2e: no screenshot: {e}"),
            }
        }
        Err(e) => eprintln!("e2e: no screenshot: {e:?}"),
    }
    match artifact_path(&format!("{name}-failure.html")) {
        Ok(path) => match session.page.content().await {
            Ok(html) => match std::fs::write(&path, html) {
                Ok(()) => eprintln!("e2e: page HTML {}", path.display()),
                Err(e) => eprintln!("e2e: no page HTML: {e}"),
            },
            Err(e) => eprintln!("e2e: no page HTML: {e}"),
        },
        Err(e) => eprintln!("e2e: no page HTML: {e:?}"),
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
