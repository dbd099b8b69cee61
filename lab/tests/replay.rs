//! The model's counterexamples replayed on real servers over HTTP (`GET /lab/replay`,
//! lab/src/lab/replay.rs): every replayable one is replayed on a Redis primary and
//! replica of the lab's own and the seat's row in Postgres, and the page must say that
//! the real run agrees with the model step by step. Each is also checked against what the
//! real run left: the property must really fail in the real run's last observation, and
//! where the seat's row is the victim, the row itself must show it (two accepted writes,
//! the later one's token below the row's highest, or both under one token). The plain
//! markers have no real code path: refused with a 400 that says why. Bad input: 404.

use reqwest::StatusCode;
use seatlock_harness::{HttpBuyer, TestApp};
use seatlock_model::{LEASE_KEPT, ONE_HOLDER_PER_TOKEN, TOKEN_ORDER, TOKENS_GROW, switched_off};

/// The text between `start` and the next `end` after it, in `text`.
fn between<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let from = text
        .find(start)
        .unwrap_or_else(|| panic!("no {start:?} in {text}"))
        + start.len();
    let len = text[from..]
        .find(end)
        .unwrap_or_else(|| panic!("no {end:?} after {start:?}"));
    &text[from..from + len]
}

/// `A1:3 B1:3` (or `B:3 A:2`) as (name, token) pairs.
fn tokens(list: &str) -> Vec<(String, i64)> {
    list.split_whitespace()
        .map(|pair| {
            let (who, token) = pair.split_once(':').expect("name:token");
            (who.to_owned(), token.parse().expect("a token"))
        })
        .collect()
}

#[tokio::test]
async fn every_replayable_counterexample_agrees_with_its_real_run_and_really_breaks() {
    let app = TestApp::builder().race_lab().spawn().await.unwrap();
    let mut reader = HttpBuyer::new();
    let list = reader
        .get(&format!("{}/lab/replay", app.address))
        .await
        .unwrap();
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    let lab = reader.get(&format!("{}/lab", app.address)).await.unwrap();
    assert!(
        lab.body.contains("href=\"/lab/replay\""),
        "/lab links to it"
    );

    let mut replayed = 0;
    for entry in switched_off() {
        assert!(
            list.body.contains(&html_escaped(entry.title)),
            "{} is listed",
            entry.slug
        );
        let reply = reader
            .post(&format!("{}/lab/replay/{}", app.address, entry.slug), &[])
            .await
            .unwrap();
        if entry.slug == "plain-markers" {
            assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.body);
            assert!(reply.body.contains("cannot be replayed"), "{}", reply.body);
            assert!(!list.body.contains("replay-plain-markers-button"));
            assert!(list.body.contains("Not replayable"));
            continue;
        }
        replayed += 1;
        let page = reply.body;
        assert_eq!(reply.status, StatusCode::OK, "{}: {page}", entry.slug);
        let verdict = between(&page, "id=\"replay-verdict\"", "</p>");
        assert!(
            verdict.contains("data-agree=\"true\"") && verdict.contains("They agree."),
            "{}: {verdict}\n{page}",
            entry.slug
        );
        assert!(
            !page.contains("data-agree=\"false\""),
            "{}: {page}",
            entry.slug
        );

        // What the real run showed after its last step, and its seat row.
        let last_real = page
            .rsplit("<td class=\"real-state\">")
            .next()
            .and_then(|cell| cell.split("</td>").next())
            .unwrap();
        assert!(
            between(last_real, "breaks: ", "</strong>").contains(&html_escaped(entry.property)),
            "{}: the real run breaks {}: {last_real}",
            entry.slug,
            entry.property
        );
        let run: i64 = between(&page, "data-run=\"", "\"").parse().unwrap();
        let (sold_to, highest, sales) = app.lab_seat(run).await;
        let grants = tokens(between(last_real, "grants [", "]"));
        let accepted = tokens(between(last_real, "accepted [", "]"));
        match entry.property {
            // The paused holder's plain DEL took the next holder's lease: the primary has
            // no lease key while B was granted one and never released it.
            LEASE_KEPT => {
                assert!(last_real.starts_with("primary {no lease,"), "{last_real}");
                assert_eq!(grants.len(), 2, "{last_real}");
            }
            // Two accepted writes, the later (A's) with a token below the row's highest.
            TOKEN_ORDER => {
                assert_eq!((sold_to.as_deref(), sales), (Some("A"), 2));
                assert_eq!(accepted.len(), 2);
                assert_eq!(accepted[1].0, "A");
                assert!(accepted[1].1 < accepted[0].1 && accepted[0].1 == highest);
            }
            // One token granted twice, to two holders.
            TOKENS_GROW => {
                assert_eq!(grants.len(), 2, "{last_real}");
                assert_eq!(grants[0].1, grants[1].1, "{last_real}");
                assert_ne!(grants[0].0, grants[1].0);
            }
            // Both holders' writes accepted under one token, in the row: two sales, the
            // last to B, the highest token the one both sent.
            ONE_HOLDER_PER_TOKEN => {
                assert_eq!((sold_to.as_deref(), sales), (Some("B"), 2));
                assert_eq!(accepted.len(), 2);
                assert_eq!((accepted[0].1, accepted[1].1), (highest, highest));
                assert_ne!(accepted[0].0, accepted[1].0);
            }
            other => panic!("a property this test does not check: {other}"),
        }
    }
    assert_eq!(replayed, 5, "five replayable counterexamples");
}

/// Askama escapes quotes and apostrophes in text (today's fence's "writes accepted …").
fn html_escaped(text: &str) -> String {
    text.replace('\'', "&#39;").replace('"', "&#34;")
}

#[tokio::test]
async fn an_unknown_counterexample_is_a_404_in_words() {
    let app = TestApp::builder().race_lab().spawn().await.unwrap();
    let mut reader = HttpBuyer::new();
    reader
        .get(&format!("{}/lab/replay", app.address))
        .await
        .unwrap();
    let reply = reader
        .post(&format!("{}/lab/replay/no-such-step", app.address), &[])
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert!(reply.body.contains("The model has no such counterexample."));
}
