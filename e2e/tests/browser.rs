//! End-to-end tests in a real browser (Debian's chromium, headless, via playwright-rs).
//!
//! Run with `make test`, or by hand:
//!
//! ```sh
//! scripts/services.sh up && source .run/env
//! scripts/e2e-driver.sh && source e2e/driver.env
//! cargo test -p e2e            # E2E_SCREENSHOTS=1 also saves screenshots in target/e2e/
//! ```

mod support;

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use playwright_rs::expect;
use support::ACTION_TIMEOUT;

/// Seconds left in a countdown's `.left` text, "(mm:ss left)".
fn seconds_left(text: &str) -> anyhow::Result<u64> {
    let parse = || {
        let clock = text.trim().strip_prefix('(')?.strip_suffix(" left)")?;
        let (m, s) = clock.split_once(':')?;
        let (m, s): (u64, u64) = (m.parse().ok()?, s.parse().ok()?);
        (s < 60).then_some(m * 60 + s)
    };
    parse().with_context(|| format!("countdown text {text:?} is not \"(mm:ss left)\""))
}

#[test]
fn countdown_text_parses() {
    assert_eq!(seconds_left("(09:58 left)").unwrap(), 598);
    assert_eq!(seconds_left(" (00:01 left) ").unwrap(), 1);
    assert!(seconds_left("hold expired").is_err());
    assert!(seconds_left("(1:75 left)").is_err());
}

/// From the event list to the hall's seat map, one click on a free seat: the seat is held
/// for this browser, shown in "Your holds" with a countdown that runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_a_seat_and_watch_its_countdown() {
    support::run("hold_a_seat", async |s| {
        let page = &s.page;

        // The event list links to the hall's concert.
        page.goto(&s.url("/"), None).await?;
        let link = page.locator("ul.events a:has-text(\"Mahler\")");
        expect(link.clone()).to_have_count(1).await?;
        link.click(None).await?;

        // Its seat map, with nothing held yet.
        expect(page.locator("h1")).to_contain_text("Mahler").await?;
        expect(page.locator("#no-holds")).to_be_visible().await?;
        let available = page.locator("#available-count");
        let before: u64 = available
            .inner_text()
            .await?
            .trim()
            .parse()
            .context("available count")?;
        ensure!(before > 0, "the fresh hall has no available seat");
        s.snapshot("seat-map").await?;

        // Hold the first available seat.
        let seat = page.locator("button.seat.available").first();
        let id = seat
            .get_attribute("id")
            .await?
            .context("an available seat has no id")?;
        let seat_id = id
            .strip_prefix("seat-")
            .context("seat ids look like seat-N")?
            .to_owned();
        seat.click(None).await?;

        // Back on the map: the hold is listed, with its countdown, and the seat is ours.
        let hold = page.locator(format!("#hold-{seat_id}"));
        expect(hold.clone())
            .with_timeout(ACTION_TIMEOUT)
            .to_be_visible()
            .await?;
        ensure!(
            page.url().contains("/events/"),
            "after the hold the page is {}",
            page.url()
        );
        let countdown = hold.locator(".countdown");
        expect(countdown.clone()).to_be_visible().await?;
        expect(countdown.clone())
            .to_contain_text("held for you until")
            .await?;
        expect(page.locator(format!("#seat-{seat_id}")))
            .to_have_class_regex(r"(^|\s)mine(\s|$)")
            .await?;
        expect(page.locator("#no-holds")).to_have_count(0).await?;
        expect(available.clone())
            .to_have_text(&(before - 1).to_string())
            .await?;

        // The countdown runs: about 2 seconds less after 2 seconds.
        let left = countdown.locator(".left");
        expect(left.clone())
            .to_contain_text_regex(r"^\(\d\d:\d\d left\)$")
            .await?;
        let first = seconds_left(&left.inner_text().await?)?;
        let hold_ttl = s.app.state.settings.hold_ttl().as_secs();
        ensure!(
            first > 0 && first <= hold_ttl,
            "countdown starts at {first}s, the hold lasts {hold_ttl}s"
        );
        s.snapshot("hold").await?;
        let started = Instant::now();
        tokio::time::sleep(Duration::from_millis(2200)).await;
        let second = seconds_left(&left.inner_text().await?)?;
        let waited = started.elapsed().as_secs_f64();
        ensure!(
            second < first,
            "countdown did not decrease: {first}s then {second}s"
        );
        let drop = (first - second) as f64;
        ensure!(
            drop >= waited - 1.5 && drop <= waited + 1.5,
            "countdown went from {first}s to {second}s in {waited:.1}s"
        );
        Ok(())
    })
    .await;
}
