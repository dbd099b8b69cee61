//! The lab as an instrument the reader acts on (issue 48; docs/race-lab.md, "Step
//! mode"), in Chromium against the lab's servers and their real Redis and Postgres: the
//! keyboard alone walks A and B into the double sale with the fence off, sees the fence
//! refuse it with every step on, scrubs back along the timeline, and passes a challenge;
//! the faults of the Kleppmann–antirez debate run from the form. Run as `browser.rs`
//! is (`make test`, or its module docs).

// Each test binary compiles the shared harness and uses a part of it.
#[allow(dead_code)]
mod support;

use anyhow::{Context as _, ensure};
use playwright_rs::expect;
use playwright_rs::protocol::Viewport;
use seatlock_lab::lab::STALLED_HOLDER;
use support::Buyer;

/// The reader, on a projector's screen (1280x720), as the timed lab's test has it.
async fn projector_reader(w: &support::World) -> anyhow::Result<Buyer> {
    let reader = w.buyer("A", 0).await?;
    let projector = Viewport {
        width: 1280,
        height: 720,
    };
    reader.page.set_viewport_size(projector).await?;
    Ok(reader)
}

/// Starts a step session switching `step` off (`none`: every step on) from the form,
/// and takes each of `events` with the keyboard alone: focus the server's button, press
/// Enter, and wait until the row is on the page (sent without leaving it). After each,
/// focus must be back on a button and the live region must say what happened.
async fn walk(reader: &Buyer, step: &str, events: &[(&str, &str)]) -> anyhow::Result<()> {
    reader.open(&format!("/lab/step?step={step}")).await?;
    reader.page.locator("#start").press("Enter", None).await?;
    expect(reader.page.locator("#step-body"))
        .to_have_attribute("data-last", "0")
        .await
        .with_context(|| format!("{step}: no step session"))?;
    for (n, (server, event)) in events.iter().enumerate() {
        let button = reader.page.locator(format!("#step-{server}-{event}"));
        button.focus().await?;
        button.press("Enter", None).await?;
        let last = (n + 1).to_string();
        expect(reader.page.locator("#step-body"))
            .to_have_attribute("data-last", &last)
            .await
            .with_context(|| format!("{step}: {server} {event} was not taken"))?;
        expect(reader.page.locator("#step-status"))
            .to_contain_text(&format!("After event {last}: {server}"))
            .await
            .with_context(|| format!("{step}: the live region did not say {server} {event}"))?;
        let focused: String = reader
            .page
            .evaluate("() => document.activeElement.id", None::<&()>)
            .await?;
        ensure!(
            focused.starts_with("step-"),
            "{step}: after {server} {event} focus is on {focused:?}"
        );
    }
    Ok(())
}

/// How long a one-run challenge may take here (a run takes about 4 s).
const CHALLENGE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

#[tokio::test]
async fn the_keyboard_steps_a_and_b_into_a_double_sale_the_fence_refuses_it_scrubs_back_and_passes_a_challenge()
 {
    support::run_lab(
        "lab_step",
        seatlock_lab::LabSettings::enabled(),
        async |w| {
            let reader = projector_reader(w).await?;
            let url_before = reader.page.url();

            // The fence off: A's late write with token 1 is accepted after B's with 2.
            walk(&reader, "fencing", &STALLED_HOLDER).await?;
            expect(
                reader
                    .page
                    .locator("#step-body tr.violation[data-kind=stale-write-accepted]"),
            )
            .to_be_visible()
            .await
            .context("fence off: A's stale write is not marked accepted")?;
            expect(reader.page.locator("#snapshot-11 .snap-seat"))
                .to_contain_text("sold to A; highest token accepted 2; sales 2")
                .await
                .context("fence off: the seat's row is not sold twice")?;
            ensure!(reader.page.url() != url_before, "never left the form");

            // Every step on: the same events, and the fence refuses A's write.
            walk(&reader, "none", &STALLED_HOLDER).await?;
            expect(
                reader
                    .page
                    .locator("#step-body tr.saved[data-kind=stale-write-refused]"),
            )
            .to_be_visible()
            .await
            .context("fence on: A's stale write is not refused")?;
            let broken = reader
                .page
                .locator("#step-body tr.violation")
                .count()
                .await?;
            ensure!(broken == 0, "fence on: {broken} violations");
            expect(reader.page.locator("#snapshot-11 .snap-seat"))
                .to_contain_text("sold to B; highest token accepted 2; sales 1")
                .await
                .context("fence on: the seat's row is not B's alone")?;
            w.screenshot(&reader, "lab-step").await?;

            // Scrub back with the keyboard to event 6, B's grant: the lock was B's with
            // token 2 and the seat still free; later rows are hidden; the live region says so.
            let scrub = reader.page.locator("#scrub");
            scrub.focus().await?;
            for _ in 0..5 {
                scrub.press("ArrowLeft", None).await?;
            }
            expect(scrub.clone()).to_have_value("6").await?;
            expect(reader.page.locator("#snapshot-6"))
                .to_be_visible()
                .await
                .context("scrubbed to 6: its state is not shown")?;
            expect(reader.page.locator("#snapshot-6 .snap-lock"))
                .to_contain_text("B (token 2)")
                .await?;
            expect(reader.page.locator("#snapshot-6 .snap-seat"))
                .to_contain_text("free")
                .await?;
            expect(reader.page.locator("#snapshot-11"))
                .to_be_hidden()
                .await?;
            expect(reader.page.locator("#step-body tbody[data-seq='7']"))
                .to_be_hidden()
                .await
                .context("scrubbed to 6: event 7 is still shown")?;
            expect(reader.page.locator("#step-status"))
                .to_contain_text("B takes the lock: token 2")
                .await?;
            w.screenshot(&reader, "lab-step-scrubbed").await?;

            // A challenge, by keyboard: A's pause inside its lease keeps the unfenced
            // lease from selling twice; the verdict comes to the open page and its live
            // region.
            reader.open("/lab/challenges").await?;
            let answer = reader.page.locator("#answer-slow-holder");
            answer.fill("300", None).await?;
            answer.press("Enter", None).await?;
            expect(reader.page.locator("#attempt"))
                .with_timeout(CHALLENGE_TIMEOUT)
                .to_have_attribute("data-state", "done")
                .await
                .context("the challenge's attempt did not finish")?;
            expect(reader.page.locator("#attempt-verdict"))
                .to_contain_text("Pass: 1 of 1 runs passed: 14C sold 1 time(s); 0 violation(s)")
                .await?;
            w.screenshot(&reader, "lab-challenge").await?;
            Ok(())
        },
    )
    .await;
}

/// How long a timed lab run may take here (each takes about 6 s).
const RUN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Runs `fault` with step 4 switched off from the form (the fault chosen, the run started
/// by keyboard) and checks the fence decides it: both sides show A's fault happening
/// (`happened`), the step-off side accepts A's write with its older token (sold twice),
/// every step on refuses it and breaks nothing. Saves the screenshot `screenshot`.
async fn the_fence_decides(
    w: &support::World,
    fault: &str,
    happened: &str,
    screenshot: &str,
) -> anyhow::Result<()> {
    let reader = projector_reader(w).await?;
    reader.open("/lab?step=fencing").await?;
    reader
        .page
        .locator("#fault")
        .select_option(fault, None)
        .await?;
    reader.page.locator("#run").press("Enter", None).await?;
    expect(reader.page.locator("#lab-run"))
        .with_timeout(RUN_TIMEOUT)
        .to_have_attribute("data-state", "done")
        .await
        .context("the run did not finish")?;
    for side in ["off", "on"] {
        expect(reader.page.locator(format!("#rows-{side}")))
            .to_contain_text(happened)
            .await
            .with_context(|| format!("{side}: A's fault did not happen ({happened})"))?;
    }
    expect(
        reader
            .page
            .locator("#rows-off tr.violation[data-kind=stale-write-accepted]"),
    )
    .to_be_visible()
    .await
    .context("fence off: A's late write is not accepted")?;
    expect(
        reader
            .page
            .locator("#rows-on tr.saved[data-kind=stale-write-refused]"),
    )
    .to_be_visible()
    .await
    .context("fence on: A's late write is not refused")?;
    let broken = reader.page.locator("#rows-on tr.violation").count().await?;
    ensure!(broken == 0, "fence on: {broken} violations");
    w.screenshot(&reader, screenshot).await
}

#[tokio::test]
async fn a_write_delayed_in_the_network_sells_twice_unfenced_and_the_fence_refuses_it() {
    support::run_lab(
        "lab_delay",
        seatlock_lab::LabSettings::enabled(),
        async |w| {
            let held = "sends its write, inside its lease; the network holds it 2.30 s";
            the_fence_decides(w, "write-delayed", held, "lab-write-delayed").await
        },
    )
    .await;
}

/// Redis's clock jumps forward while A pays, from the form (the lab's server gets its
/// clock server from `SEATLOCK_LAB_CLOCK_SERVER`, which .run/env exports). Without the
/// jump A's lease would outlast its write and nobody else would buy: the double sale
/// with step 4 off is there only if the clock jumped.
#[tokio::test]
async fn a_clock_jump_on_redis_sells_twice_unfenced_and_the_fence_refuses_it() {
    std::env::var("SEATLOCK_LAB_CLOCK_SERVER")
        .expect("SEATLOCK_LAB_CLOCK_SERVER (scripts/services.sh up writes it to .run/env)");
    support::run_lab(
        "lab_clock",
        seatlock_lab::LabSettings::enabled(),
        async |w| {
            let jumped = "Redis's clock jumps forward 2.00 s: A's lease ends by Redis's clock";
            the_fence_decides(w, "clock-jump", jumped, "lab-clock-jump").await
        },
    )
    .await;
}

/// The model's counterexample with the failover guard off and today's fence, replayed on
/// real servers from `GET /lab/replay` by keyboard alone (docs/race-lab.md, "The model's
/// counterexamples, replayed"): the page says the real run agrees, and its last step shows
/// both holders' writes accepted under one token.
#[tokio::test]
async fn the_keyboard_replays_a_counterexample_of_the_model_and_the_real_run_agrees() {
    support::run_lab(
        "lab_replay",
        seatlock_lab::LabSettings::enabled(),
        async |w| {
            let reader = projector_reader(w).await?;
            reader.open("/lab").await?;
            let link = reader.page.locator("#replay");
            link.focus().await?;
            link.press("Enter", None).await?;
            let button = reader
                .page
                .locator("#replay-failover-guard-todays-fence-button");
            expect(button.clone())
                .to_be_visible()
                .await
                .context("the list of counterexamples")?;
            button.focus().await?;
            button.press("Enter", None).await?;
            let verdict = reader.page.locator("#replay-verdict");
            expect(verdict.clone())
                .to_have_attribute("data-agree", "true")
                .await
                .context("the replay did not agree with the model")?;
            expect(verdict)
                .to_contain_text("They agree.")
                .await
                .context("the verdict in words")?;
            expect(reader.page.locator("tr[data-agree=false]"))
                .to_have_count(0)
                .await
                .context("a step disagrees")?;
            expect(reader.page.locator("tbody tr").last())
                .to_contain_text("breaks:")
                .await
                .context("the last step breaks a property on both sides")?;
            w.screenshot(&reader, "lab-replay").await?;
            Ok(())
        },
    )
    .await;
}
