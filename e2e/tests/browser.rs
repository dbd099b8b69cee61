//! End-to-end tests in a real browser (Debian's chromium, headless, via playwright-rs),
//! against two `seatlock serve` processes of one deployment: buyer A's pages are served
//! by one process and buyer B's by the other, so every live update shown here crossed
//! processes (Redis pub/sub for holds, Postgres NOTIFY for sales and bids).
//!
//! Run with `make test`, or by hand:
//!
//! ```sh
//! scripts/services.sh up && source .run/env
//! scripts/e2e-driver.sh && source e2e/driver.env
//! cargo build --workspace --bins && cargo test -p e2e
//! ```
//!
//! `E2E_SCREENSHOTS=1` also saves screenshots of the main pages in `target/e2e/`.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use playwright_rs::expect;
use support::{Buyer, LIVE_TIMEOUT, World, unix_ms};

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

/// The hall's seat map ("Mahler's Fifth" at The Grand Hall).
async fn hall(world: &World) -> anyhow::Result<(i64, String)> {
    let event = world.event_id("Mahler").await?;
    Ok((event, format!("/events/{event}")))
}

/// The `n`-th available seat on `buyer`'s seat map (0 = the first).
async fn available_seat(buyer: &Buyer, n: i32) -> anyhow::Result<i64> {
    let id = buyer
        .page
        .locator("button.seat.available")
        .nth(n)
        .get_attribute("id")
        .await?
        .context("an available seat has no id")?;
    id.strip_prefix("seat-")
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("seat id {id:?} is not seat-N"))
}

/// Clicks seat `seat` on `buyer`'s map and waits for the map to list the hold.
async fn hold(buyer: &Buyer, seat: i64) -> anyhow::Result<()> {
    buyer.seat(seat).click(None).await?;
    expect(buyer.page.locator(format!("#hold-{seat}")))
        .to_be_visible()
        .await
        .with_context(|| format!("{}: the hold on seat {seat} is not listed", buyer.label))
}

/// Clicks "Buy now" on `buyer`'s hold of seat `seat` and waits for the order page;
/// returns the seat as the order names it.
async fn buy(buyer: &Buyer, seat: i64) -> anyhow::Result<String> {
    buyer
        .page
        .locator(format!("#hold-{seat} button.buy"))
        .click(None)
        .await?;
    expect(buyer.page.locator("h1"))
        .to_have_text("Order confirmed")
        .await
        .with_context(|| format!("{}: no order page after buying seat {seat}", buyer.label))?;
    Ok(buyer.page.locator("#order-seat").inner_text().await?)
}

/// Types `amount` into the bid form of `buyer`'s item page and submits it.
async fn place_bid(buyer: &Buyer, amount: &str) -> anyhow::Result<()> {
    buyer.page.locator("#amount").fill(amount, None).await?;
    Ok(buyer
        .page
        .locator("#bid button[type=submit]")
        .click(None)
        .await?)
}

/// Marks `buyer`'s page so that [`not_reloaded`] can tell it is still the same document.
async fn mark_page(buyer: &Buyer) -> anyhow::Result<()> {
    Ok(buyer
        .page
        .evaluate_expression("window.e2eSamePage = true")
        .await?)
}

/// Fails if `buyer`'s page was reloaded or left since [`mark_page`].
async fn not_reloaded(buyer: &Buyer) -> anyhow::Result<()> {
    let same: bool = buyer
        .page
        .evaluate("() => window.e2eSamePage === true", None::<&()>)
        .await?;
    ensure!(same, "{}'s page was reloaded", buyer.label);
    Ok(())
}

/// `holder` clicks seat `seat`; waits until `watcher`'s open map shows it held, and
/// returns how long after the click it was shown, in ms (the page's `Date.now()`).
async fn shown_held_after_click(holder: &Buyer, watcher: &Buyer, seat: i64) -> anyhow::Result<u64> {
    watcher.record_seat_changes().await?;
    let clicked = unix_ms();
    holder.seat(seat).click(None).await?;
    watcher.wait_for_seat(seat, "held").await?;
    let shown = watcher.shown_at(seat, "held").await?.context("recorded")?;
    Ok(shown.saturating_sub(clicked))
}

/// Scenario 1: B's open map shows A's hold at once, and B's own attempt is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_shows_on_the_other_buyers_open_map_and_refuses_their_attempt() {
    support::run("hold_shows_live", async |w| {
        let (event, hall) = hall(w).await?;
        let (a, b) = (w.buyer("A", 0).await?, w.buyer("B", 1).await?);
        a.open(&hall).await?;
        b.open_live(&hall).await?;
        mark_page(&b).await?;

        let seat = available_seat(&a, 0).await?;
        let ms = shown_held_after_click(&a, &b, seat).await?;
        eprintln!("e2e: B's map (other server) showed A's hold {ms} ms after A's click");
        not_reloaded(&b).await?;
        a.wait_for_seat(seat, "mine").await?;

        // B tries anyway: post the hold form for that seat, as a click that raced the
        // update would have.
        b.page
            .evaluate_expression(&format!(
                "setTimeout(() => {{ const f = document.querySelector('form.seatmap'); \
                 f.action = '/events/{event}/seats/{seat}/hold'; f.submit(); }}, 0)"
            ))
            .await?;
        expect(b.page.locator(".error .message"))
            .to_contain_text("Someone is buying this seat")
            .await?;
        Ok(())
    })
    .await;
}

/// Scenario 2: the holder's countdown is shown and runs down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holders_countdown_is_visible_and_decreasing() {
    support::run("countdown", async |w| {
        let a = w.buyer("A", 0).await?;
        let page = &a.page;

        // From the event list to the hall's seat map, nothing held yet.
        a.open("/").await?;
        page.locator("ul.events a:has-text(\"Mahler\")")
            .click(None)
            .await?;
        expect(page.locator("h1")).to_contain_text("Mahler").await?;
        expect(page.locator("#no-holds")).to_be_visible().await?;
        let available = page.locator("#available-count");
        let before: u64 = available.inner_text().await?.trim().parse()?;
        w.screenshot(&a, "seat-map").await?;

        let seat = available_seat(&a, 0).await?;
        hold(&a, seat).await?;
        let countdown = page.locator(format!("#hold-{seat} .countdown"));
        expect(countdown.clone())
            .to_contain_text("held for you until")
            .await?;
        expect(available.clone())
            .to_have_text(&(before - 1).to_string())
            .await?;
        // "Need more time?" waits for the hold's last minute (docs/time-to-pay.md).
        expect(page.locator("#need-more-time"))
            .to_be_hidden()
            .await
            .context("Need more time? shown with minutes left")?;

        // The countdown shows the time left, no more than the hold lasts.
        let left = countdown.locator(".left");
        expect(left.clone())
            .to_contain_text_regex(r"^\(\d\d:\d\d left\)$")
            .await?;
        let first = seconds_left(&left.inner_text().await?)?;
        let hold_ttl = w.settings.hold_ttl().as_secs();
        ensure!(
            first > 0 && first <= hold_ttl,
            "countdown starts at {first}s, the hold lasts {hold_ttl}s"
        );

        // It runs: a lower number within a few seconds, on the same page.
        let started = Instant::now();
        let second = loop {
            let now = seconds_left(&left.inner_text().await?)?;
            if now < first || started.elapsed() > LIVE_TIMEOUT {
                break now;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        ensure!(
            second < first,
            "the countdown stayed at {first}s for {:.1}s",
            started.elapsed().as_secs_f64()
        );
        w.screenshot(&a, "hold-countdown").await?;
        Ok(())
    })
    .await;
}

/// Scenario 3: with 3-second holds, A's hold lapses and both maps show the seat free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_hold_turns_the_seat_available_on_both_maps() {
    support::run_with(
        "hold_lapses",
        |s| s.hold_ttl_ms = 3_000,
        async |w| {
            let (_, hall) = hall(w).await?;
            let (a, b) = (w.buyer("A", 0).await?, w.buyer("B", 1).await?);
            a.open(&hall).await?;
            b.open_live(&hall).await?;
            mark_page(&b).await?;

            let seat = available_seat(&a, 0).await?;
            b.record_seat_changes().await?;
            a.seat(seat).click(None).await?;
            b.wait_for_seat(seat, "held").await?;

            // Nobody releases it: Redis expires the lease, and its expiry notification
            // reaches both processes.
            let lapse = w.settings.hold_ttl() + LIVE_TIMEOUT;
            b.wait_for_seat_within(seat, "available", lapse).await?;
            let held = b.shown_at(seat, "held").await?.context("recorded")?;
            let freed = b.shown_at(seat, "available").await?.context("recorded")?;
            eprintln!(
                "e2e: B's map showed the 3 s hold lapse {} ms after it showed the hold",
                freed.saturating_sub(held)
            );
            a.wait_for_seat_within(seat, "available", lapse).await?;
            not_reloaded(&b).await?;
            expect(a.page.locator(format!("#hold-{seat} .countdown")))
                .to_contain_text("hold expired")
                .await?;

            // And it is free indeed: B can hold it now.
            hold(&b, seat).await?;
            Ok(())
        },
    )
    .await;
}

/// Focuses `button` on `buyer`'s page and presses Enter, as a keyboard user does, then
/// waits until the page its form was sent to has replaced this one.
async fn press_for_a_new_page(
    buyer: &Buyer,
    button: &playwright_rs::protocol::Locator,
) -> anyhow::Result<()> {
    mark_page(buyer).await?;
    button.focus().await?;
    button.press("Enter", None).await?;
    let started = Instant::now();
    loop {
        // While the page is replaced, a script may find no page to run in: ask again.
        let same = buyer
            .page
            .evaluate::<(), bool>("() => window.e2eSamePage === true", None)
            .await;
        if matches!(same, Ok(false)) {
            return Ok(());
        }
        ensure!(started.elapsed() < LIVE_TIMEOUT, "no new page after Enter");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Scenario 3b: "Need more time?" With 25-second holds the cart warns at once, in a polite
/// live region, and shows the button. The region speaks again at 20 seconds left, not
/// every second. The button, pressed from the keyboard, moves the countdown back up with
/// the same fencing token. Ten presses are taken, and the eleventh is refused in words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn need_more_time_warns_extends_by_keyboard_and_refuses_the_eleventh() {
    support::run_with(
        "need_more_time",
        |s| s.hold_ttl_ms = 25_000,
        async |w| {
            let (_, hall) = hall(w).await?;
            let a = w.buyer("A", 0).await?;
            a.open(&hall).await?;
            let seat = available_seat(&a, 0).await?;
            hold(&a, seat).await?;
            let page = &a.page;
            let token = page
                .locator(format!("#hold-{seat} .muted"))
                .inner_text()
                .await?;

            // The warning, in a polite live region, and the button beside it.
            let warning = page.locator("#hold-warning");
            expect(warning.clone())
                .to_have_attribute("aria-live", "polite")
                .await?;
            expect(warning.clone())
                .to_contain_text("less than a minute")
                .await?;
            let button = page.locator("#need-more-time");
            expect(button.clone()).to_be_visible().await?;

            // At 20 seconds left the region speaks once more.
            let left = page.locator("#cart-countdown .left");
            expect(warning.clone())
                .to_contain_text("20 seconds")
                .await
                .context("the region speaks at 20 seconds left")?;
            let before = seconds_left(&left.inner_text().await?)?;
            ensure!(before <= 20, "the region spoke at {before} s left");
            w.screenshot(&a, "need-more-time").await?;

            // From the keyboard: focus the button, press Enter. The countdown moves up.
            for n in 1..=10 {
                press_for_a_new_page(&a, &button)
                    .await
                    .with_context(|| format!("extension {n}"))?;
                expect(button.clone()).to_be_visible().await?;
                ensure!(
                    page.url().ends_with("#cart"),
                    "extension {n} landed on {}",
                    page.url()
                );
                let mine = page.locator(format!("#hold-{seat} .muted"));
                ensure!(
                    mine.inner_text().await? == token,
                    "extension {n} changed the hold's fencing token"
                );
            }
            expect(left.clone())
                .to_contain_text_regex(r"^\(\d\d:\d\d left\)$")
                .await?;
            let after = seconds_left(&left.inner_text().await?)?;
            ensure!(
                after > before,
                "the countdown stayed at {after} s after extending from {before} s"
            );

            // The eleventh is refused, in words, and the hold stands.
            press_for_a_new_page(&a, &button).await?;
            let refusal = page.locator("[data-refusal=extension_limit]");
            expect(refusal.clone())
                .to_contain_text("the most a hold allows")
                .await
                .context("the eleventh extension is refused")?;
            a.open(&hall).await?;
            expect(page.locator(format!("#hold-{seat}")))
                .to_be_visible()
                .await?;
            Ok(())
        },
    )
    .await;
}

/// Scenario 4: A buys; the seat shows sold on both maps and A's order is listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purchase_shows_sold_on_both_maps_and_lists_the_order() {
    support::run("purchase", async |w| {
        let (event, hall) = hall(w).await?;
        let (a, b) = (w.buyer("A", 0).await?, w.buyer("B", 1).await?);
        a.open(&hall).await?;
        b.open_live(&hall).await?;
        mark_page(&b).await?;

        // A holds two seats and buys the first.
        let (seat, other) = (available_seat(&a, 0).await?, available_seat(&a, 1).await?);
        hold(&a, seat).await?;
        hold(&a, other).await?;
        let bought = buy(&a, seat).await?;

        b.wait_for_seat(seat, "sold").await?;
        b.wait_for_seat(other, "held").await?;
        not_reloaded(&b).await?;
        w.screenshot(&b, "seat-map").await?;

        // Back on A's map: the seat is A's, listed under "Your tickets".
        a.page
            .locator("a:has-text(\"Back to the seat map\")")
            .click(None)
            .await?;
        a.wait_for_seat(seat, "bought").await?;
        expect(a.page.locator("ul.tickets"))
            .to_contain_text(&bought)
            .await?;
        ensure!(
            w.orders_for(event, seat).await? == 1,
            "one order for the seat"
        );
        Ok(())
    })
    .await;
}

/// Scenario 5: a double click on "Buy now" makes exactly one order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_double_clicked_buy_button_makes_exactly_one_order() {
    support::run("double_click", async |w| {
        let (event, hall) = hall(w).await?;
        let a = w.buyer("A", 0).await?;
        a.open(&hall).await?;
        let seat = available_seat(&a, 0).await?;
        hold(&a, seat).await?;

        let confirms = Arc::new(AtomicUsize::new(0));
        let counter = confirms.clone();
        a.page
            .on_request(move |request| {
                let counter = counter.clone();
                async move {
                    if request.method() == "POST" && request.url().ends_with("/confirm") {
                        counter.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(())
                }
            })
            .await?;
        a.page
            .locator(format!("#hold-{seat} button.buy"))
            .dblclick(None)
            .await?;
        expect(a.page.locator("#order-id")).to_be_visible().await?;

        let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
            .fetch_one(&w.db)
            .await?;
        ensure!(
            orders == 1 && w.orders_for(event, seat).await? == 1,
            "{orders} orders"
        );
        let sent = confirms.load(Ordering::SeqCst);
        ensure!(sent == 1, "the page sent {sent} confirm requests");
        Ok(())
    })
    .await;
}

/// Scenario 6: B's bid (other server) shows on A's open item page without reload, and
/// A's half-typed bid stays; when the auction closes, the form goes and the result shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bid_shows_on_the_other_buyers_open_item_page_and_so_does_the_close() {
    support::run("bid_shows_live", async |w| {
        let (item, path) = w.auction_item().await?;
        let (a, b) = (w.buyer("A", 0).await?, w.buyer("B", 1).await?);
        a.open_live(&path).await?;
        let amount = a.page.locator("#amount");
        amount.fill("12.50", None).await?;
        mark_page(&a).await?;

        b.open(&path).await?;
        let b_name = b.page.locator("#bid .muted strong").inner_text().await?;
        place_bid(&b, "10").await?;
        expect(b.page.locator("#high-bid"))
            .to_contain_text("(you)")
            .await?;

        let high = a.page.locator("#high-bid");
        expect(high.clone())
            .with_timeout(LIVE_TIMEOUT)
            .to_contain_text(&format!("Price: $10.00 by {b_name}"))
            .await?;
        expect(a.page.locator("#bid-count"))
            .to_have_text("Bids (1)")
            .await?;
        expect(a.page.locator("#next-bid"))
            .to_contain_text("at least $10.50")
            .await?;
        expect(a.page.locator("table.bids tbody tr"))
            .to_have_count(1)
            .await?;
        not_reloaded(&a).await?;
        expect(amount.clone()).to_have_value("12.50").await?;
        expect(amount.clone())
            .to_have_attribute("placeholder", "10.50")
            .await?;
        w.screenshot(&a, "auction").await?;

        // The end (and the arrival grace) passes; a server's closer writes the result, and
        // both pages show it.
        seatlock_harness::end_auction_now(&w.db, item).await;
        let closing = w.settings.close_interval().unwrap_or_default() + LIVE_TIMEOUT;
        expect(a.page.locator("#result"))
            .with_timeout(closing)
            .to_contain_text(&format!("Sold to {b_name} for $10.00."))
            .await?;
        expect(a.page.locator("#bid")).to_have_count(0).await?;
        not_reloaded(&a).await?;
        expect(b.page.locator("#result"))
            .with_timeout(LIVE_TIMEOUT)
            .to_contain_text("You won.")
            .await?;
        Ok(())
    })
    .await;
}

/// Scenario 6b: proxy bidding in two browsers on two servers. A's maximum leads at the
/// starting price; B's lower maximum is outbid at once by an automatic bid for A (B's
/// page says outbid, A's shows the new price live and still "You are leading"); B's
/// higher maximum takes the lead at A's maximum plus the increment, and A's open page
/// turns to "Outbid" live. Neither page ever shows the other's leading maximum. The item
/// closes in two minutes with a five-minute soft close: B's bid extends the end, and A's
/// open page says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_browsers_bid_by_maxima_and_both_pages_show_the_leader_and_price_live() {
    support::run("proxy_bids_live", async |w| {
        let (id, path) = w.auction_item().await?;
        sqlx::query(
            "UPDATE auction_items SET soft_close_secs = 300,
                    ends_at = now() + interval '2 minutes' WHERE id = $1",
        )
        .bind(id)
        .execute(&w.db)
        .await?;
        let (a, b) = (w.buyer("A", 0).await?, w.buyer("B", 1).await?);
        a.open_live(&path).await?;
        let a_name = a.page.locator("#bid .muted strong").inner_text().await?;
        place_bid(&a, "20").await?;
        expect(a.page.locator("#standing"))
            .to_contain_text("Your maximum: $20.00")
            .await?;
        expect(a.page.locator("#standing"))
            .to_contain_text("You are leading.")
            .await?;
        a.open_live(&path).await?;
        mark_page(&a).await?;

        b.open(&path).await?;
        let b_name = b.page.locator("#bid .muted strong").inner_text().await?;
        expect(b.page.locator("#high-bid"))
            .to_contain_text(&format!("Price: $10.00 by {a_name}"))
            .await?;
        place_bid(&b, "15").await?;
        // B is outbid at once: A's automatic bid at B's maximum plus $0.50.
        expect(b.page.locator("#high-bid"))
            .to_contain_text(&format!("Price: $15.50 by {a_name}"))
            .await?;
        expect(b.page.locator("#standing"))
            .to_contain_text("Outbid")
            .await?;
        expect(b.page.locator("#standing"))
            .to_contain_text("Your maximum: $15.00")
            .await?;
        expect(b.page.locator("em.auto-bid"))
            .to_have_count(1)
            .await?;
        let a_high = a.page.locator("#high-bid");
        expect(a_high.clone())
            .with_timeout(LIVE_TIMEOUT)
            .to_contain_text(&format!("Price: $15.50 by {a_name} (you)"))
            .await?;
        expect(a.page.locator("#standing"))
            .to_contain_text("You are leading.")
            .await?;
        expect(a.page.locator("em.auto-bid"))
            .to_have_count(1)
            .await?;
        expect(a.page.locator("#extended"))
            .to_contain_text("extended by a late bid")
            .await?;

        // B's higher maximum leads at A's $20.00 plus $0.50; A's open page turns.
        place_bid(&b, "40").await?;
        expect(b.page.locator("#high-bid"))
            .to_contain_text(&format!("Price: $20.50 by {b_name} (you)"))
            .await?;
        expect(b.page.locator("#standing"))
            .to_contain_text("Your maximum: $40.00")
            .await?;
        expect(a_high)
            .with_timeout(LIVE_TIMEOUT)
            .to_contain_text(&format!("Price: $20.50 by {b_name}"))
            .await?;
        expect(a.page.locator("#standing"))
            .to_contain_text("Outbid")
            .await?;
        expect(a.page.locator("#auction-live"))
            .not()
            .to_contain_text("$40.00")
            .await?;
        not_reloaded(&a).await?;
        w.screenshot(&a, "auction_proxy").await?;
        Ok(())
    })
    .await;
}

/// Scenario 7: a bid below the minimum is refused inside the form, the amount kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bid_below_the_minimum_is_refused_in_the_form_with_the_amount_kept() {
    support::run("bid_too_low", async |w| {
        let (_, path) = w.auction_item().await?;
        let a = w.buyer("A", 0).await?;
        a.open(&path).await?;
        place_bid(&a, "9.99").await?;
        expect(a.page.locator("#bid .bid-error"))
            .to_contain_text("the first bid must be at least $10.00")
            .await?;
        expect(a.page.locator("#amount"))
            .to_have_value("9.99")
            .await?;
        expect(a.page.locator("#bid-count"))
            .to_have_text("Bids (0)")
            .await?;
        Ok(())
    })
    .await;
}

/// Scenario 8: with JavaScript disabled, a seat is held and bought with plain forms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_javascript_a_seat_is_held_and_bought_with_plain_forms() {
    support::run("no_javascript", async |w| {
        let (event, hall) = hall(w).await?;
        let c = w.buyer_without_javascript("C", 1).await?;
        c.open(&hall).await?;
        expect(c.page.locator("[data-live]"))
            .to_have_count(0)
            .await
            .context("no script runs, so no live stream")?;

        let seat = available_seat(&c, 0).await?;
        hold(&c, seat).await?;
        expect(c.page.locator(format!("#hold-{seat} .countdown")))
            .to_contain_text("held for you until")
            .await?;
        c.wait_for_seat(seat, "mine").await?;

        buy(&c, seat).await?;
        ensure!(
            w.orders_for(event, seat).await? == 1,
            "one order for the seat"
        );
        Ok(())
    })
    .await;
}

/// The navigation timings of `buyer`'s page, read once it has loaded: the page's time
/// origin (Unix ms, the browser's clock), its first byte, last byte, DOM interactive and
/// load (ms from its navigation start), and its body's bytes as sent and decoded.
async fn timings(buyer: &Buyer) -> anyhow::Result<(f64, [f64; 4], (f64, f64))> {
    Ok(buyer
        .page
        .evaluate(
            "() => new Promise(done => { const read = () => { \
               const n = performance.getEntriesByType('navigation')[0]; \
               done([performance.timeOrigin, \
                     [n.responseStart, n.responseEnd, n.domInteractive, n.loadEventEnd], \
                     [n.encodedBodySize, n.decodedBodySize]]); }; \
             if (document.readyState === 'complete' && \
                 performance.getEntriesByType('navigation')[0].loadEventEnd > 0) read(); \
             else addEventListener('load', () => setTimeout(read)); })",
            None::<&()>,
        )
        .await?)
}

/// Scenario 9: the 11,056-seat arena opens on its overview, a page of at
/// most 100 kB before compression with no seat on it; section 101 is picked, and one of
/// its seats is held by keyboard and bought. Prints the first view's bytes and timings and the time to
/// interactive (navigation start to the first click served: the section's page, then
/// the hold), never asserting a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_arena_opens_on_its_overview_and_a_seat_of_a_section_is_held_and_bought() {
    support::run("arena", async |w| {
        let event = w.event_id("Championship").await?;
        let a = w.buyer("A", 0).await?;
        a.open(&format!("/events/{event}")).await?;
        let (overview_origin, overview, bytes) = timings(&a).await?;
        let drawn = a.page.locator("svg.venue a.sec").count().await?;
        ensure!(drawn == 36, "the arena's overview draws {drawn} sections");
        let seats = a.page.locator(".seat").count().await?;
        ensure!(seats == 0, "the arena's overview has {seats} seats on it");
        ensure!(
            bytes.1 <= 100_000.0,
            "the arena's first view is {} bytes before compression",
            bytes.1
        );
        // The zones' colours come from the event's stylesheet (no inline style under
        // the Content-Security-Policy): the key's Floor swatch is the Floor's #c0392b.
        let floor: String = a
            .page
            .evaluate(
                "() => getComputedStyle(document.querySelector('.swatch.zone-FL')).backgroundColor",
                None::<&()>,
            )
            .await?;
        ensure!(floor == "rgb(192, 57, 43)", "the Floor's swatch is {floor}");
        // The first click comes as soon as the overview has loaded.
        a.page.locator("#section-101").click(None).await?;
        expect(a.page.locator("#seats-101")).to_be_visible().await?;
        let (section_origin, section_page, section_bytes) = timings(&a).await?;
        let seat = available_seat(&a, 0).await?;
        let name = a.seat(seat).get_attribute("aria-label").await?;
        ensure!(
            name.as_deref() == Some("Section 101, row 1, seat 1, $90.00, available"),
            "seat {seat} is named {name:?}"
        );
        a.seat(seat).focus().await?;
        a.seat(seat).press("Enter", None).await?;
        expect(a.page.locator(format!("#hold-{seat}")))
            .to_be_visible()
            .await
            .context("the hold is not listed")?;
        a.wait_for_seat(seat, "mine").await?;
        expect(a.page.locator("#seats-101")).to_be_visible().await?;
        let (held_origin, _, _) = timings(&a).await?;
        w.screenshot(&a, "section").await?;
        let fetch_start: f64 = a
            .page
            .evaluate(
                "() => performance.getEntriesByType('navigation')[0].fetchStart",
                None::<&()>,
            )
            .await?;
        let order_seat = buy(&a, seat).await?;
        ensure!(
            order_seat.contains("Section 101"),
            "the order names {order_seat:?}"
        );
        ensure!(
            w.orders_for(event, seat).await? == 1,
            "no order for seat {seat}"
        );
        eprintln!(
            "e2e: arena overview (36 sections): {:.1} kB sent for {:.1} kB of HTML; from \
             navigation start: first byte {:.0} ms, last byte {:.0} ms, DOM interactive {:.0} \
             ms, load {:.0} ms; time to interactive (navigation start to the first click \
             served, the section's page's last byte) {:.0} ms. Section 101 (320 seats): \
             {:.1} kB sent for {:.1} kB; first byte {:.0} ms, DOM interactive {:.0} ms, load \
             {:.0} ms; navigation start to the first seat click served {:.0} ms; overview's \
             navigation start to the seat held {:.0} ms",
            bytes.0 / 1e3,
            bytes.1 / 1e3,
            overview[0],
            overview[1],
            overview[2],
            overview[3],
            section_origin + section_page[1] - overview_origin,
            section_bytes.0 / 1e3,
            section_bytes.1 / 1e3,
            section_page[0],
            section_page[2],
            section_page[3],
            held_origin + fetch_start - section_origin,
            held_origin + fetch_start - overview_origin,
        );
        Ok(())
    })
    .await;
}

/// The codes of the sections of `event`'s venue, in drawing order.
async fn section_codes(world: &World, event: i64) -> anyhow::Result<Vec<String>> {
    Ok(sqlx::query_scalar(
        "SELECT sec.code FROM sections sec JOIN events e ON e.venue_id = sec.venue_id
          WHERE e.id = $1 ORDER BY sec.position",
    )
    .bind(event)
    .fetch_all(&world.db)
    .await?)
}

/// The codes of the sections drawn on `buyer`'s overview (a shape of non-zero size),
/// in the page's order.
async fn drawn_sections(buyer: &Buyer) -> anyhow::Result<Vec<String>> {
    Ok(buyer
        .page
        .evaluate(
            "() => [...document.querySelectorAll('svg.venue a.sec')] \
               .filter(a => { const r = a.querySelector('path').getBoundingClientRect(); \
                              return r.width > 0 && r.height > 0; }) \
               .map(a => a.id.slice('section-'.length))",
            None::<&()>,
        )
        .await?)
}

/// Scenario: the overview of each demo venue draws every one of its sections,
/// each a link to its seats named with its counts and prices; by keyboard, focus shows
/// a section's counts and prices under the map and Enter opens its seats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_draws_every_section_of_both_venues() {
    support::run("overview", async |w| {
        let a = w.buyer("A", 0).await?;
        for name in ["Mahler", "Championship"] {
            let event = w.event_id(name).await?;
            a.open(&format!("/events/{event}")).await?;
            let codes = section_codes(w, event).await?;
            let drawn = drawn_sections(&a).await?;
            ensure!(
                drawn == codes,
                "{name}: drawn {drawn:?}, the venue has {codes:?}"
            );
            for code in &codes {
                let link = a.page.locator(format!("#section-{code}"));
                let href = link.get_attribute("href").await?;
                ensure!(
                    href == Some(format!("/events/{event}/sections/{code}")),
                    "{name}: section {code} links to {href:?}"
                );
                let label = link.get_attribute("aria-label").await?.unwrap_or_default();
                ensure!(
                    label.contains("seats available, $"),
                    "{name}: section {code} is named {label:?}"
                );
            }
            w.screenshot(&a, &format!("overview-{}", name.to_lowercase()))
                .await?;
        }
        let section = a.page.locator("#section-101");
        section.focus().await?;
        expect(a.page.locator("#section-info"))
            .to_have_text("Section 101: 320 of 320 seats available, $90.00, 2 wheelchair places")
            .await?;
        section.press("Enter", None).await?;
        expect(a.page.locator("#seats-101")).to_be_visible().await?;
        Ok(())
    })
    .await;
}

/// Section `code`'s count of available seats and its shade on `buyer`'s overview.
async fn section_shade(buyer: &Buyer, code: &str) -> anyhow::Result<(String, String)> {
    let section = buyer.page.locator(format!("#section-{code}"));
    let available = section.get_attribute("data-available").await?;
    let shade = section
        .locator("path")
        .get_attribute("fill-opacity")
        .await?;
    Ok((available.unwrap_or_default(), shade.unwrap_or_default()))
}

/// Scenario: buyer A holds a seat of section 101 on its page (server 0); B's
/// open overview of the arena (server 1) counts it and shades the section lighter, live;
/// when the hold lapses (a 3 s hold), the section is back as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_by_another_browser_changes_a_sections_shade_live() {
    support::run_with(
        "overview_live",
        |s| s.hold_ttl_ms = 3_000,
        async |w| {
            let event = w.event_id("Championship").await?;
            let (a, b) = (w.buyer("A", 0).await?, w.buyer("B", 1).await?);
            b.open_live(&format!("/events/{event}")).await?;
            mark_page(&b).await?;
            let before = section_shade(&b, "101").await?;
            ensure!(
                before == ("320".into(), "1.000".into()),
                "section 101 starts {before:?}"
            );
            a.open_live(&format!("/events/{event}/sections/101"))
                .await?;
            let seat = available_seat(&a, 0).await?;
            hold(&a, seat).await?;
            expect(b.page.locator("#section-101"))
                .with_timeout(LIVE_TIMEOUT)
                .to_have_attribute("data-available", "319")
                .await
                .context("B's overview did not count A's hold")?;
            let (_, shade) = section_shade(&b, "101").await?;
            ensure!(shade != before.1, "section 101's shade stayed {shade}");
            // An SVG text has no innerText: its text content says what is left.
            let left = b
                .page
                .locator("#section-101 text.left")
                .text_content()
                .await?;
            ensure!(
                left.as_deref() == Some("319 left"),
                "section 101 says {left:?}"
            );
            // Nobody releases it: Redis expires the lease, and its expiry notification
            // reaches B's server.
            expect(b.page.locator("#section-101"))
                .with_timeout(w.settings.hold_ttl() + LIVE_TIMEOUT)
                .to_have_attribute("data-available", "320")
                .await
                .context("B's overview did not count the lapse")?;
            ensure!(
                section_shade(&b, "101").await? == before,
                "section 101 is not back"
            );
            not_reloaded(&b).await?;
            Ok(())
        },
    )
    .await;
}

/// Sets best available's filters on `buyer`'s page: the accessible places only, or not.
async fn only_accessible(buyer: &Buyer, on: bool) -> anyhow::Result<()> {
    Ok(buyer
        .page
        .evaluate_expression(&format!(
            "document.getElementById('accessible').checked = {on}"
        ))
        .await?)
}

/// A seat as the database has it: (section, row, number, price in cents, access).
type Place = (String, String, i32, i64, Option<String>);

/// `buyer` asks best available for `quantity` seats of `event` on its open page; the
/// seats it then holds and their places, in seat order.
async fn held_by_best_available(
    world: &World,
    buyer: &Buyer,
    event: i64,
    quantity: u64,
) -> anyhow::Result<(Vec<i64>, Vec<Place>)> {
    ask_best_available(buyer, quantity).await?;
    expect(buyer.page.locator("#cart-total"))
        .to_be_visible()
        .await?;
    let held = cart_seats(buyer).await?;
    let places = sqlx::query_as(
        "SELECT sec.code, s.row_label, s.number, es.price_cents, s.access
           FROM event_seats es JOIN seats s ON s.id = es.seat_id
           JOIN sections sec ON sec.id = s.section_id
          WHERE es.event_id = $1 AND es.seat_id = ANY($2) ORDER BY s.number",
    )
    .bind(event)
    .bind(&held)
    .fetch_all(&world.db)
    .await?;
    Ok((held, places))
}

/// Scenario: every Premium seat of the hall is sold but three together, row D
/// of the Stalls, seats 10 to 12, between sold ones. Asked for 2, best available does not
/// take two of the three (the third would be left alone): it holds two seats together in
/// the next band, leaving no single seat; the page says the rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn best_available_2_does_not_strand_the_third_of_three_free_seats() {
    support::run("orphan", async |w| {
        let (event, hall) = hall(w).await?;
        sqlx::query(
            "UPDATE event_seats es SET sold = true
               FROM seats s JOIN sections sec ON sec.id = s.section_id
              WHERE es.event_id = $1 AND s.id = es.seat_id AND es.price_cents = 12500
                AND NOT (sec.code = 'STALLS' AND s.row_label = 'D' AND s.number IN (10, 11, 12))",
        )
        .bind(event)
        .execute(&w.db)
        .await?;
        let a = w.buyer("A", 0).await?;
        a.open_live(&hall).await?;
        expect(a.page.locator("#orphan-rule"))
            .to_contain_text("leaves no single seat alone")
            .await?;
        let (_, places) = held_by_best_available(w, &a, event, 2).await?;
        ensure!(places.len() == 2, "held {places:?}");
        for (code, row, number, price, _) in &places {
            ensure!(
                !(code == "STALLS" && row == "D"),
                "best available took {code} {row}{number}, stranding a seat of D10-D12"
            );
            ensure!(
                *price == 9_500,
                "held {code} {row}{number} at {price} cents"
            );
        }
        ensure!(
            places[0].1 == places[1].1 && places[0].2 + 1 == places[1].2,
            "not together: {places:?}"
        );
        Ok(())
    })
    .await;
}

/// Scenario: with the accessible filter on, best available 2 in the hall
/// holds a wheelchair place and its companion seat (marked in the venue's data), each
/// named so on the map.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_accessible_filter_finds_the_wheelchair_places() {
    support::run("accessible", async |w| {
        let (event, hall) = hall(w).await?;
        let a = w.buyer("A", 0).await?;
        a.open_live(&hall).await?;
        only_accessible(&a, true).await?;
        let (held, places) = held_by_best_available(w, &a, event, 2).await?;
        let access: Vec<_> = places.iter().map(|p| p.4.as_deref()).collect();
        ensure!(
            access == [Some("wheelchair"), Some("companion")],
            "held {places:?}"
        );
        let name = a.seat(held[0]).get_attribute("aria-label").await?;
        ensure!(
            name.as_deref()
                .is_some_and(|n| n.contains("wheelchair place") && n.ends_with("held by you")),
            "the wheelchair place is named {name:?}"
        );
        Ok(())
    })
    .await;
}

/// Scenario: on a 390x844 phone the arena's overview, a section with a hold
/// (its cart and countdown) and the hall's page with every seat do not scroll sideways
/// (the seat grid may pan inside its box).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_390_by_844_phone_has_no_horizontal_page_scroll() {
    support::run("phone", async |w| {
        let event = w.event_id("Championship").await?;
        let (_, hall) = hall(w).await?;
        let a = w.buyer("A", 0).await?;
        a.page
            .set_viewport_size(playwright_rs::protocol::Viewport {
                width: 390,
                height: 844,
            })
            .await?;
        a.open_live(&format!("/events/{event}")).await?;
        ensure!(
            !a.scrolls_sideways().await?,
            "the overview scrolls sideways"
        );
        w.screenshot(&a, "overview").await?;
        a.open_live(&format!("/events/{event}/sections/101"))
            .await?;
        let seat = available_seat(&a, 0).await?;
        hold(&a, seat).await?;
        expect(a.page.locator("#cart-countdown"))
            .to_be_visible()
            .await?;
        ensure!(!a.scrolls_sideways().await?, "the section scrolls sideways");
        w.screenshot(&a, "section").await?;
        a.open_live(&hall).await?;
        ensure!(!a.scrolls_sideways().await?, "the hall scrolls sideways");
        Ok(())
    })
    .await;
}

/// Scenario: a buyer clicks a seat and the hold's navigation is cancelled (Stop pressed,
/// or the request aborted: Chromium then keeps the page, as it does for Stop). The page
/// stays, and its next click is served: the double-click guard lapses once no request
/// could still be in flight (10 s) instead of locking the map until a reload (a page the
/// back button restores from the browser's cache is let go at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_hold_is_cancelled_mid_flight_the_next_click_is_served() {
    support::run("cancelled_hold", async |w| {
        let (_, hall) = hall(w).await?;
        let a = w.buyer("A", 0).await?;
        a.open(&hall).await?;
        let sent = Arc::new(AtomicUsize::new(0));
        a.page
            .route("**/hold", {
                let sent = sent.clone();
                move |route| {
                    let first = sent.fetch_add(1, Ordering::SeqCst) == 0;
                    async move {
                        match first {
                            true => route.abort(Some("aborted")).await,
                            false => route.continue_(None).await,
                        }
                    }
                }
            })
            .await?;
        let (first, second) = (available_seat(&a, 0).await?, available_seat(&a, 1).await?);
        a.seat(first).click(None).await?;
        seatlock_harness::eventually(Duration::from_secs(5), "the first hold sent", || async {
            sent.load(Ordering::SeqCst) == 1
        })
        .await;
        // Past the double-click guard (longer than any request may take), as a person
        // who pressed Stop and waited would be.
        tokio::time::sleep(Duration::from_millis(10_500)).await;
        ensure!(
            a.seat(second).is_visible().await?,
            "the map is no longer shown"
        );
        hold(&a, second).await?;
        let sent = sent.load(Ordering::SeqCst);
        ensure!(sent == 2, "{sent} holds sent");
        Ok(())
    })
    .await;
}

/// Scenario: the seat map's stream is refused once with an error status (a store briefly
/// down), which makes a browser give up on it for good. The page says it is not live,
/// reopens the stream after a moment, takes a fresh snapshot, and shows changes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_refused_once_says_not_live_then_reconnects_and_catches_up() {
    support::run("stream_refused_once", async |w| {
        let (_, hall) = hall(w).await?;
        let (a, b) = (w.buyer("A", 0).await?, w.buyer("B", 1).await?);
        let refused = Arc::new(AtomicUsize::new(0));
        b.page
            .route("**/stream", {
                let refused = refused.clone();
                move |route| {
                    let first = refused.fetch_add(1, Ordering::SeqCst) == 0;
                    async move {
                        if first {
                            let unavailable = playwright_rs::FulfillOptions::builder()
                                .status(503)
                                .body(b"Redis is unavailable".to_vec())
                                .build();
                            route.fulfill(unavailable).await
                        } else {
                            route.continue_(None).await
                        }
                    }
                }
            })
            .await?;
        // "offline" lasts half a second to a second before the retry: every state the
        // page shows is recorded as it is set, so a busy machine cannot make the test
        // look between two of them.
        b.page
            .add_init_script(
                "window.liveStates = []; new MutationObserver(function (changes) { \
                 changes.forEach(function (c) { window.liveStates.push(c.target.dataset.live); }); \
                 }).observe(document, { subtree: true, attributeFilter: ['data-live'] });",
            )
            .await?;
        b.open(&hall).await?;
        expect(b.page.locator("[data-live]"))
            .with_timeout(LIVE_TIMEOUT)
            .to_have_attribute("data-live", "open")
            .await
            .context("the stream reopens")?;
        let shown = b.page.evaluate_value("window.liveStates.join(' ')").await?;
        let offline_then_open = shown
            .split(' ')
            .skip_while(|state| *state != "offline")
            .any(|state| state == "open");
        ensure!(
            offline_then_open,
            "the page said it was not live, then live: {shown}"
        );
        ensure!(
            refused.load(Ordering::SeqCst) >= 2,
            "reopened through the route"
        );
        a.open(&hall).await?;
        let seat = available_seat(&a, 0).await?;
        a.seat(seat).click(None).await?;
        b.wait_for_seat(seat, "held").await?;
        Ok(())
    })
    .await;
}

/// Scenario: one buyer has the same seat map open in eight visible tabs. A browser opens
/// at most six connections per site over HTTP/1.1, so eight tabs each holding a stream
/// would leave none for the next click, which would stall. The tabs share one stream
/// (one tab holds it and relays to the others), so the click in the last tab is served,
/// and every tab shows the hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_tabs_of_one_map_share_a_stream_and_a_click_in_the_last_is_served() {
    support::run("eight_tabs", async |w| {
        let (_, hall) = hall(w).await?;
        let first = w.buyer("A", 0).await?;
        first.open_live(&hall).await?;
        let mut tabs = vec![first];
        for _ in 1..8 {
            let tab = tabs[0].tab().await?;
            tab.open_live(&hall).await?;
            tabs.push(tab);
        }
        let last = tabs.last().context("eight tabs")?;
        let seat = available_seat(last, 0).await?;
        last.seat(seat).click(None).await?;
        for tab in &tabs {
            tab.wait_for_seat(seat, "mine").await?;
        }
        Ok(())
    })
    .await;
}

/// The seat ids of `buyer`'s cart (the `#hold-N` entries of the panel).
async fn cart_seats(buyer: &Buyer) -> anyhow::Result<Vec<i64>> {
    let ids: Vec<String> = buyer
        .page
        .evaluate(
            "() => [...document.querySelectorAll('ul.holds li.hold')].map(li => li.id)",
            None::<&()>,
        )
        .await?;
    ids.iter()
        .map(|id| {
            id.strip_prefix("hold-")
                .and_then(|n| n.parse().ok())
                .with_context(|| format!("hold id {id:?} is not hold-N"))
        })
        .collect()
}

/// `buyer`'s cart as shown: its total, each held seat's price (from the seat's title,
/// "Stalls, row C, seat 14 ($85.00)"), all in cents, and how many countdowns the cart
/// shows.
async fn cart_sums(buyer: &Buyer) -> anyhow::Result<(i64, Vec<i64>, usize)> {
    let (total, titles, countdowns): (String, Vec<String>, usize) = buyer
        .page
        .evaluate(
            "() => [document.getElementById('cart-total').textContent, \
                    [...document.querySelectorAll('ul.holds li.hold > div:first-child')] \
                      .map(d => d.textContent), \
                    document.querySelectorAll('#cart .countdown').length]",
            None::<&()>,
        )
        .await?;
    let cents = |text: &str| {
        let amount = text.rsplit('$').next().unwrap_or("").trim_end_matches(')');
        seatlock::money::parse_amount(amount).with_context(|| format!("no price in {text:?}"))
    };
    let prices = titles
        .iter()
        .map(|t| cents(t))
        .collect::<anyhow::Result<_>>()?;
    Ok((cents(&total)?, prices, countdowns))
}

/// The error page's refusal: its code (`data-refusal`) and its message.
async fn refusal(buyer: &Buyer) -> anyhow::Result<(String, String)> {
    let message = buyer.page.locator("p.message");
    expect(message.clone()).to_be_visible().await?;
    let code = message
        .get_attribute("data-refusal")
        .await?
        .context("the message has no refusal code")?;
    Ok((code, message.inner_text().await?))
}

/// Picks `quantity` in `buyer`'s best-available form and submits it.
async fn ask_best_available(buyer: &Buyer, quantity: u64) -> anyhow::Result<()> {
    buyer
        .page
        .evaluate_expression(&format!(
            "document.querySelector('#best-available select').value = '{quantity}'"
        ))
        .await?;
    Ok(buyer
        .page
        .locator("#best-available button")
        .click(None)
        .await?)
}

/// Scenario: two buyers ask for the best 4 seats at once, on two servers: each gets four
/// seats together, the two groups disjoint; a third buyer's open map shows every seat of
/// both groups held, live (one message per group, one change per seat); each cart shows
/// the total and one countdown within the hold's length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn best_available_4_in_two_browsers_at_once_gives_disjoint_groups_and_a_cart() {
    support::run("best_available", async |w| {
        let (_, hall) = hall(w).await?;
        let (a, b, c) = (
            w.buyer("A", 0).await?,
            w.buyer("B", 1).await?,
            w.buyer("C", 0).await?,
        );
        a.open(&hall).await?;
        b.open(&hall).await?;
        c.open_live(&hall).await?;
        mark_page(&c).await?;
        let (asked_a, asked_b) = tokio::join!(ask_best_available(&a, 4), ask_best_available(&b, 4));
        asked_a?;
        asked_b?;
        let hold_ttl = w.settings.hold_ttl().as_secs();
        let mut groups = Vec::new();
        for buyer in [&a, &b] {
            expect(buyer.page.locator("#cart-total"))
                .to_be_visible()
                .await
                .with_context(|| format!("{}: no cart after best available", buyer.label))?;
            let seats = cart_seats(buyer).await?;
            ensure!(seats.len() == 4, "{}: cart {seats:?}", buyer.label);
            let left = buyer.page.locator("#cart-countdown .left");
            expect(left.clone())
                .to_contain_text_regex(r"^\(\d\d:\d\d left\)$")
                .await?;
            let secs = seconds_left(&left.inner_text().await?)?;
            ensure!(
                secs > 0 && secs <= hold_ttl,
                "countdown {secs}s, hold {hold_ttl}s"
            );
            let (total, prices, countdowns) = cart_sums(buyer).await?;
            ensure!(
                prices.len() == 4 && total == prices.iter().sum::<i64>(),
                "{}: the cart's total is {total} cents for seats of {prices:?}",
                buyer.label
            );
            ensure!(
                countdowns == 1,
                "{}: {countdowns} cart countdowns",
                buyer.label
            );
            groups.push(seats);
        }
        ensure!(
            groups[0].iter().all(|s| !groups[1].contains(s)),
            "the groups overlap: {groups:?}"
        );
        for seat in groups.concat() {
            c.wait_for_seat(seat, "held").await?;
        }
        not_reloaded(&c).await?;
        w.screenshot(&a, "cart").await?;
        Ok(())
    })
    .await;
}

/// Scenario: one seat of a group lapses before checkout (Redis expires that one hold).
/// Buy all buys nothing and the page names the lapsed seat; the other three stay held
/// (the checkout page lists them) and buying again buys exactly those three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_seat_of_a_group_lapsing_at_checkout_is_named_and_the_rest_stay_held() {
    support::run("group_lapse", async |w| {
        let (event, hall) = hall(w).await?;
        let a = w.buyer("A", 0).await?;
        a.open(&hall).await?;
        ask_best_available(&a, 4).await?;
        expect(a.page.locator("#cart-total"))
            .to_be_visible()
            .await?;
        let seats = cart_seats(&a).await?;
        ensure!(seats.len() == 4, "cart {seats:?}");
        let lapsing = seats[1];
        let named: String = sqlx::query_scalar(
            "SELECT sec.name || ' row ' || s.row_label || ' seat ' || s.number
               FROM seats s JOIN sections sec ON sec.id = s.section_id WHERE s.id = $1",
        )
        .bind(lapsing)
        .fetch_one(&w.db)
        .await?;
        w.lapse_hold(event, lapsing).await?;

        a.page.locator("#buy-all").click(None).await?;
        let (code, message) = refusal(&a).await?;
        ensure!(code == "holds_lapsed", "refused as {code:?}: {message}");
        ensure!(message.contains(&named), "names {named:?}: {message}");
        for &seat in &seats {
            ensure!(w.orders_for(event, seat).await? == 0, "seat {seat} bought");
        }

        a.open(&format!("{hall}/checkout")).await?;
        let rest: Vec<i64> = seats.iter().copied().filter(|&s| s != lapsing).collect();
        for &seat in &rest {
            expect(a.page.locator(format!("#hold-{seat}")))
                .to_be_visible()
                .await
                .with_context(|| format!("seat {seat} is no longer held"))?;
        }
        expect(a.page.locator(format!("#hold-{lapsing}")))
            .to_have_count(0)
            .await?;
        w.screenshot(&a, "checkout").await?;
        a.page.locator("#buy-all").click(None).await?;
        expect(a.page.locator("#tickets")).to_be_visible().await?;
        for &seat in &seats {
            let bought = w.orders_for(event, seat).await?;
            ensure!(
                bought == i64::from(seat != lapsing),
                "seat {seat}: {bought} orders"
            );
        }
        Ok(())
    })
    .await;
}

/// Waits until `buyer`'s page (reloaded by its own hold) has its live stream open again,
/// then marks it for [`not_reloaded`].
async fn live_again(buyer: &Buyer) -> anyhow::Result<()> {
    buyer
        .wait_live()
        .await
        .with_context(|| format!("{}: the live stream did not reopen", buyer.label))?;
    mark_page(buyer).await
}

/// Scenario: behind HAProxy, configured as `make scale` configures it. A's browser is
/// kept on the first backend and B's on the second (the proxy's cookie); each map's live
/// stream passes through the proxy, and each buyer sees the other's hold at once, without
/// a reload. Every response names the backend that answered it: all of A's came from
/// the first, all of B's from the second, so each hold crossed both processes (Redis
/// pub/sub) and the proxy (no buffering of the stream: `option http-no-delay`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_haproxy_buyers_on_two_backends_see_each_others_holds_live() {
    support::run_behind_proxy("behind_haproxy", async |w| {
        let (_, hall) = hall(w).await?;
        let a = w.buyer_through_proxy("A", 0).await?;
        let b = w.buyer_through_proxy("B", 1).await?;
        a.open_live(&hall).await?;
        b.open_live(&hall).await?;
        mark_page(&b).await?;

        let (first, second) = (available_seat(&a, 0).await?, available_seat(&b, 1).await?);
        let ms = shown_held_after_click(&a, &b, first).await?;
        eprintln!(
            "e2e: through HAProxy, B's map (app2) showed A's hold (app1) {ms} ms after A's click"
        );
        not_reloaded(&b).await?;
        a.wait_for_seat(first, "mine").await?;
        live_again(&a).await?;

        b.seat(second).click(None).await?;
        a.wait_for_seat(second, "held").await?;
        not_reloaded(&a).await?;
        b.wait_for_seat(second, "mine").await?;

        for (buyer, backend) in [(&a, "app1"), (&b, "app2")] {
            let streams = buyer.served_by("/stream").await?;
            ensure!(
                streams == [backend],
                "{}'s live streams were served by {streams:?}, not {backend}",
                buyer.label
            );
            let all = buyer.served_by("").await?;
            ensure!(
                all == [backend],
                "{}'s responses came from {all:?}, not only {backend}",
                buyer.label
            );
        }
        Ok(())
    })
    .await;
}

/// Scenario: the per-buyer limit. A buyer holding 8 seats (best available 8) clicks a
/// ninth: the page refuses it with the limit's message and nothing changes; another
/// buyer may hold that seat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_buyer_limit_refuses_seat_9_with_a_clear_message() {
    support::run("seat_limit", async |w| {
        let (_, hall) = hall(w).await?;
        let limit = w.settings.max_seats_per_buyer;
        ensure!(limit == 8, "the default limit is 8, not {limit}");
        let (a, b) = (w.buyer("A", 0).await?, w.buyer("B", 1).await?);
        a.open(&hall).await?;
        ask_best_available(&a, limit).await?;
        expect(a.page.locator("#cart-total"))
            .to_be_visible()
            .await?;
        ensure!(cart_seats(&a).await?.len() == 8, "8 seats held");

        let ninth = available_seat(&a, 0).await?;
        a.seat(ninth).click(None).await?;
        let (code, message) = refusal(&a).await?;
        ensure!(code == "seat_limit", "refused as {code:?}: {message}");
        ensure!(message.contains("at most 8 seats"), "{message}");
        w.screenshot(&a, "limit").await?;

        a.open(&hall).await?;
        ensure!(cart_seats(&a).await?.len() == 8, "still 8 seats held");
        a.wait_for_seat(ninth, "available").await?;
        b.open(&hall).await?;
        hold(&b, ninth).await?;
        Ok(())
    })
    .await;
}

/// The `data-position` of `buyer`'s queue page, once it equals `position`.
async fn queued_at(buyer: &Buyer, position: u64) -> anyhow::Result<()> {
    expect(buyer.page.locator("#queue"))
        .with_timeout(LIVE_TIMEOUT * 2)
        .to_have_attribute("data-position", &position.to_string())
        .await
        .with_context(|| format!("{}: not at place {position} of the queue", buyer.label))
}

/// Waits until `buyer`'s page is the seat map of `event` (`form.seatmap`).
async fn on_the_map(buyer: &Buyer) -> anyhow::Result<()> {
    expect(buyer.page.locator("form.seatmap"))
        .with_timeout(LIVE_TIMEOUT * 2)
        .to_be_visible()
        .await
        .with_context(|| format!("{}: not taken to the seat map", buyer.label))
}

#[tokio::test]
async fn a_queued_browser_watches_its_place_fall_and_lands_on_the_map() {
    support::run("waiting_room", async |w| {
        let room = w.on_sale_room().await?;
        let (a, b, c) = (
            w.buyer("A", 0).await?,
            w.buyer("B", 1).await?,
            w.buyer("C", 0).await?,
        );
        a.open(&room).await?;
        on_the_map(&a).await?;
        // B is shown the queue page at the map's own address, as the waiting rooms in
        // front of a site do.
        b.open(&room).await?;
        queued_at(&b, 1).await?;
        c.open(&room).await?;
        queued_at(&c, 2).await?;
        mark_page(&c).await?;
        w.screenshot(&c, "queue").await?;

        // A leaves: B is admitted and taken to the map; C's place falls to 1 live, on the
        // same page (its stream, served by the other process than A's leave).
        a.page.locator("#admission button").click(None).await?;
        on_the_map(&b).await?;
        queued_at(&c, 1).await?;
        not_reloaded(&c).await?;

        // B buys a seat: the purchase ends B's turn, and C lands on the map and holds.
        let seat = available_seat(&b, 0).await?;
        hold(&b, seat).await?;
        buy(&b, seat).await?;
        on_the_map(&c).await?;
        let seat = available_seat(&c, 0).await?;
        hold(&c, seat).await?;
        Ok(())
    })
    .await;
}

/// Each of the lab's scenarios ([`seatlock_lab::lab`]): the step switched off, and
/// the marks its run must show, on the step-off side (a violation: with the lock-delay,
/// whichever write the row took first, so either kind of a seat sold twice) and on the
/// step-on side (the refusal that kept the invariant).
const LAB_RUNS: [(&str, &[&str], &str); 7] = [
    ("create-if-absent", &["second-sale"], "create-refused"),
    ("lease", &["locked-forever"], "lapse-freed"),
    ("owner-check", &["foreign-release"], "release-refused"),
    ("fencing", &["stale-write-accepted"], "stale-write-refused"),
    ("ledger", &["token-repeated"], "fresh-token"),
    ("conditional", &["second-sale"], "conditional-refused"),
    (
        "lock-delay",
        &["second-sale", "stale-write-accepted"],
        "stale-write-refused",
    ),
];

/// How long a lab run may take here (each takes about 6 s).
const LAB_RUN_TIMEOUT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn the_lab_builds_each_steps_table_live_and_marks_where_it_breaks() {
    support::run_lab("lab", seatlock_lab::LabSettings::enabled(), async |w| {
        let reader = w.buyer("A", 0).await?;
        // A projector's screen: the two tables side by side, nothing cut off.
        let projector = playwright_rs::protocol::Viewport {
            width: 1280,
            height: 720,
        };
        reader.page.set_viewport_size(projector).await?;
        for (step, broken, refused) in LAB_RUNS {
            reader.open(&format!("/lab?step={step}")).await?;
            reader.page.locator("#run").click(None).await?;
            expect(reader.page.locator("#lab-run"))
                .to_be_visible()
                .await
                .with_context(|| format!("{step}: no run page"))?;
            // Rows arrive over the stream: the page is never reloaded.
            mark_page(&reader).await?;
            expect(reader.page.locator("#lab-run"))
                .with_timeout(LAB_RUN_TIMEOUT)
                .to_have_attribute("data-state", "done")
                .await
                .with_context(|| format!("{step}: the run did not finish"))?;
            not_reloaded(&reader).await?;
            let off: Vec<String> = (broken.iter())
                .map(|kind| format!("#rows-off tr.violation[data-kind={kind}]"))
                .collect();
            let off = off.join(", ");
            expect(reader.page.locator(&off).first())
                .to_be_visible()
                .await
                .with_context(|| format!("{step}: the step-off side has no {broken:?} row"))?;
            let on = format!("#rows-on tr.saved[data-kind={refused}]");
            expect(reader.page.locator(&on).first())
                .to_be_visible()
                .await
                .with_context(|| format!("{step}: the step-on side has no {refused} row"))?;
            let broken_on = reader.page.locator("#rows-on tr.violation").count().await?;
            ensure!(
                broken_on == 0,
                "{step}: the step-on side has {broken_on} violations"
            );
            let verdict = reader.page.locator("#verdict-off").inner_text().await?;
            ensure!(
                verdict.starts_with("Broken at"),
                "{step}: off verdict {verdict:?}"
            );
            let width: u32 = reader
                .page
                .evaluate("() => document.documentElement.scrollWidth", None::<&()>)
                .await?;
            ensure!(
                width <= 1280,
                "{step}: the page is {width} px wide at 1280x720"
            );
            w.screenshot(&reader, step).await?;
        }

        // The permalink replays what was recorded: the rows are on the page as loaded,
        // and Replay shows them again.
        let url = reader.page.url();
        reader.page.reload(None).await?;
        ensure!(
            reader.page.url() == url,
            "reloading moved to {}",
            reader.page.url()
        );
        let rows = reader.page.locator("#rows-off tr[data-at]").count().await?;
        ensure!(rows > 3, "the permalink shows {rows} rows");
        reader.page.locator("#replay").click(None).await?;
        let last = reader.page.locator("#rows-off tr[data-at]").last();
        let hidden: bool = last.evaluate("tr => tr.hidden", None::<&()>).await?;
        ensure!(hidden, "Replay did not hide the rows it replays");
        expect(reader.page.locator("#rows-off tr[data-at]").last())
            .with_timeout(LAB_RUN_TIMEOUT)
            .to_be_visible()
            .await
            .context("the replay never showed the last row")?;
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn without_the_race_lab_flag_the_lab_is_404_and_says_how_to_start_it() {
    // The lab's servers without `--enable-race-lab`.
    let lab_off = seatlock_lab::LabSettings::default();
    support::run_lab("lab_off", lab_off, async |w| {
        let reader = w.buyer("A", 0).await?;
        let response = reader.page.goto(&reader.url("/lab"), None).await?;
        let status = response.map(|r| r.status()).unwrap_or(0);
        ensure!(status == 404, "GET /lab answered {status}");
        expect(reader.page.locator("main"))
            .to_contain_text("make lab")
            .await
            .context("the 404 page does not say how to start the lab")?;
        Ok(())
    })
    .await;
}
