//! Seats for everyone, in a real browser (issue 47; docs/venue.md, "Seats for
//! everyone"): axe-core's WCAG 2.2 A and AA rules on every kind of page, the page never
//! scrolling sideways on a phone or at 200 % zoom, and a keyboard alone holding two
//! seats together from the event's page through the list, keystrokes counted.
//!
//! axe-core is the npm package `scripts/e2e-driver.sh` installs beside the Playwright
//! driver (`E2E_AXE` in `e2e/driver.env` names its `axe.min.js`); run as `browser.rs` is
//! (`make test`, or its module docs).

// Each test binary compiles the shared harness and uses a part of it.
#[allow(dead_code)]
mod support;

use anyhow::{Context as _, ensure};
use playwright_rs::expect;
use playwright_rs::protocol::Viewport;
use serde::Deserialize;
use support::Buyer;

/// The rules run: axe-core's tags for WCAG 2.0, 2.1 and 2.2, levels A and AA (2.2 added
/// AA rules only; axe-core has no `wcag22a` tag).
const WCAG_TAGS: [&str; 5] = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"];

/// The sizes at which no page may scroll sideways: a 390x844 phone, and a 1280x720
/// window at 200 % zoom, whose layout viewport is 640x360 CSS pixels (zoom divides
/// the window's width in CSS pixels: the page lays out as at 640 px).
const NARROW: [(&str, Viewport); 2] = [
    (
        "390x844",
        Viewport {
            width: 390,
            height: 844,
        },
    ),
    (
        "200 % zoom",
        Viewport {
            width: 640,
            height: 360,
        },
    ),
];

/// The window the pages are checked in first (and go back to).
const DESKTOP: Viewport = Viewport {
    width: 1280,
    height: 720,
};

/// One axe-core violation: a rule broken, and where (CSS selectors of the nodes).
#[derive(Debug, Deserialize)]
struct Violation {
    id: String,
    impact: Option<String>,
    help: String,
    targets: Vec<String>,
}

/// Runs axe-core on `buyer`'s page with [`WCAG_TAGS`]; its violations, each with the
/// first few nodes that break it.
async fn axe(buyer: &Buyer) -> anyhow::Result<Vec<Violation>> {
    let path = std::env::var("E2E_AXE")
        .context("E2E_AXE is not set: run scripts/e2e-driver.sh and source e2e/driver.env")?;
    let source = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // Injected through the driver, not a <script> tag: the pages' Content-Security-Policy
    // refuses inline scripts, and the driver's evaluation is not subject to it.
    buyer.page.evaluate_expression(&source).await?;
    let run = "async (tags) => {
        const result = await axe.run(document, { runOnly: { type: 'tag', values: tags } });
        return result.violations.map(v => ({
            id: v.id, impact: v.impact, help: v.help,
            targets: v.nodes.slice(0, 5).map(n => n.target.join(' ')),
        }));
    }";
    Ok(buyer.page.evaluate(run, Some(&WCAG_TAGS)).await?)
}

/// What is wrong with `buyer`'s page, named `page`: axe-core's violations at the desktop
/// size, and sideways scrolling at each [`NARROW`] size; the page is left at the desktop
/// size.
async fn check_page(buyer: &Buyer, page: &str) -> anyhow::Result<Vec<String>> {
    let mut found: Vec<String> = (axe(buyer).await?.into_iter())
        .map(|v| {
            format!(
                "{page}: {} ({}): {} at {}",
                v.id,
                v.impact.unwrap_or_default(),
                v.help,
                v.targets.join(" | ")
            )
        })
        .collect();
    for (size, viewport) in NARROW {
        buyer.page.set_viewport_size(viewport).await?;
        if buyer.scrolls_sideways().await? {
            found.push(format!("{page}: scrolls sideways at {size}"));
        }
    }
    buyer.page.set_viewport_size(DESKTOP).await?;
    Ok(found)
}

/// Scenario: every kind of page, as a buyer meets it, has no axe-core violation of WCAG
/// 2.2 A and AA and does not scroll sideways on a phone or at 200 % zoom: the events,
/// an event's overview, a section, the list, the cart (a section with a hold) and the
/// checkout, an order, the waiting room's queue, an auction item, and the lab.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_passes_axe_core_and_fits_a_phone_and_200_percent_zoom() {
    support::run_lab("axe", seatlock_lab::LabSettings::enabled(), async |w| {
        let arena = w.event_id("Championship").await?;
        let hall = w.event_id("Mahler").await?;
        let a = w.buyer("A", 0).await?;
        a.page.set_viewport_size(DESKTOP).await?;
        let mut found = Vec::new();
        for (page, path) in [
            ("events", "/".to_owned()),
            ("the arena's overview", format!("/events/{arena}")),
            ("the hall's overview", format!("/events/{hall}")),
            ("section 101", format!("/events/{arena}/sections/101")),
            ("the list", format!("/events/{arena}/list")),
            (
                "the list of section 101",
                format!("/events/{arena}/list?section=101"),
            ),
            ("the lab", "/lab".to_owned()),
            ("the lab's challenges", "/lab/challenges".to_owned()),
            ("the model's counterexamples", "/lab/replay".to_owned()),
            ("the auctions", "/auctions".to_owned()),
            ("an auction item", w.auction_item().await?.1),
        ] {
            a.open(&path).await?;
            found.extend(check_page(&a, page).await?);
        }

        // Step mode, a session with an event taken (lab/templates/lab_step.html).
        a.open("/lab/step").await?;
        found.extend(check_page(&a, "step mode's form").await?);
        a.page.locator("#start").click(None).await?;
        a.page.locator("#step-A-grant").click(None).await?;
        expect(a.page.locator("#step-body"))
            .to_have_attribute("data-last", "1")
            .await
            .context("step mode: A's grant was not taken")?;
        found.extend(check_page(&a, "a step session").await?);

        // A counterexample of the model, replayed on real servers (lab_replay_run.html).
        a.open("/lab/replay").await?;
        a.page.locator("#replay-fence-button").click(None).await?;
        expect(a.page.locator("#replay-verdict"))
            .to_have_attribute("data-agree", "true")
            .await
            .context("the replay of step 4 off did not agree")?;
        found.extend(check_page(&a, "a replayed counterexample").await?);

        // The cart (a section with a hold), the checkout, then the order.
        a.open(&format!("/events/{arena}/sections/101")).await?;
        a.page
            .locator("button.seat.available")
            .first()
            .click(None)
            .await?;
        expect(a.page.locator("#cart-countdown"))
            .to_be_visible()
            .await?;
        found.extend(check_page(&a, "a section with a hold (the cart)").await?);
        a.open(&format!("/events/{arena}/checkout")).await?;
        found.extend(check_page(&a, "the checkout").await?);
        a.page.locator("#buy-all").click(None).await?;
        expect(a.page.locator("#tickets")).to_be_visible().await?;
        let order: i64 = sqlx::query_scalar("SELECT id FROM orders ORDER BY id DESC LIMIT 1")
            .fetch_one(&w.db)
            .await?;
        a.open(&format!("/orders/{order}")).await?;
        found.extend(check_page(&a, "an order").await?);

        // The queue: the waiting room lets one buyer shop at a time; B waits behind A.
        let room = w.on_sale_room().await?;
        a.open(&room).await?;
        let b = w.buyer("B", 1).await?;
        b.page.set_viewport_size(DESKTOP).await?;
        b.open(&room).await?;
        expect(b.page.locator("#queue")).to_be_visible().await?;
        found.extend(check_page(&b, "the queue").await?);

        ensure!(
            found.is_empty(),
            "{} problem(s):\n{}",
            found.len(),
            found.join("\n")
        );
        Ok(())
    })
    .await;
}

/// The keys a keyboard user presses on the hall's event page to hold two seats together
/// (docs/venue.md, "The list way to choose", says them): Tab past the header's three
/// links to "Choose seats from a list", Enter; the list opens at its blocks of two
/// (`#seats`), so one Tab reaches the first block's "Hold", and Enter holds it.
const KEYS: [&str; 7] = ["Tab", "Tab", "Tab", "Tab", "Enter", "Tab", "Enter"];

/// Whether the focused element shows it: an outline at least 2 px wide (the pages'
/// `:focus-visible` rule; the browser's own ring is 1 px).
const FOCUS_SHOWN: &str = "() => { const el = document.activeElement; const s = getComputedStyle(el); \
    return el !== document.body && s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2; }";

/// Scenario: from the hall's event page, the keyboard alone holds two adjacent seats
/// through the list in at most 10 keystrokes, each focus shown; a block taken meanwhile
/// is refused on a page whose focus is the refusal (`role=alert`), so it is read out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keyboard_alone_holds_two_seats_together_from_the_list_in_10_keys() {
    support::run("keyboard_list", async |w| {
        let hall = w.event_id("Mahler").await?;
        let a = w.buyer("A", 0).await?;
        a.open(&format!("/events/{hall}")).await?;
        let mut pressed = 0;
        for key in KEYS {
            if key == "Enter" {
                a.page.evaluate_expression("window.e2eKeys = true").await?;
            }
            a.page.keyboard().press(key, None).await?;
            pressed += 1;
            if key == "Enter" {
                // The next page, loaded (Enter follows a link or sends a form).
                let loaded = "() => window.e2eKeys !== true && document.readyState === 'complete'";
                a.page.wait_for_function(loaded, None).await?;
            } else {
                let shown: bool = a.page.evaluate(FOCUS_SHOWN, None::<&()>).await?;
                let at: String = (a.page)
                    .evaluate(
                        "() => document.activeElement.outerHTML.slice(0, 80)",
                        None::<&()>,
                    )
                    .await?;
                ensure!(
                    shown,
                    "key {pressed} ({key}): the focus on {at} is not shown"
                );
            }
        }
        ensure!(pressed <= 10, "{pressed} keystrokes");
        let docs =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/venue.md"))?;
        ensure!(
            docs.contains(&KEYS.join(", ")),
            "docs/venue.md does not say the keys {:?}",
            KEYS.join(", ")
        );

        // Two seats held, side by side in one row: the cart's seats, as the seats table has them.
        let ids = (a.page.locator("#cart input[name=seats]"))
            .get_attribute("value")
            .await?
            .context("no cart after the keys")?;
        let ids: Vec<i64> = ids.split(',').map(str::parse).collect::<Result<_, _>>()?;
        let seats: Vec<(i64, String, i32)> = sqlx::query_as(
            "SELECT section_id, row_label, number FROM seats WHERE id = ANY($1) ORDER BY number",
        )
        .bind(&ids)
        .fetch_all(&w.db)
        .await?;
        ensure!(
            seats.len() == 2
                && seats[0].0 == seats[1].0
                && seats[0].1 == seats[1].1
                && seats[0].2 + 1 == seats[1].2,
            "held {seats:?}, not two seats together"
        );

        // B holds the first seat of the block the list now offers first; A, whose list
        // still shows it, asks for it: refused, and the focus is on the refusal.
        let block = a.page.locator("#blocks button[name=first]").first();
        let first = block
            .get_attribute("value")
            .await?
            .context("a block's first seat")?;
        let b = w.buyer("B", 1).await?;
        b.open(&format!("/events/{hall}")).await?;
        b.page.locator(format!("#seat-{first}")).click(None).await?;
        expect(b.page.locator(format!("#hold-{first}")))
            .to_be_visible()
            .await?;
        block.focus().await?;
        a.page.keyboard().press("Enter", None).await?;
        expect(a.page.locator(".error[role=alert]:focus"))
            .to_contain_text("fit your choice")
            .await
            .context("the refusal is not where the focus is")?;
        Ok(())
    })
    .await;
}
