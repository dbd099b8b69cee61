//! The online auction over HTTP and through its domain functions, against real Redis and
//! Postgres: one fresh database per test, servers on port 0 ([`TestApp::builder`]).

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use reqwest::StatusCode;
use seatlock::auction::bid::AcceptedBid;
use seatlock::auction::close::{self, CloseOutcome};
use seatlock::auction::queries::{self, NewItem};
use seatlock::auction::{Bid, bid};
use seatlock::config::{BidStrategy, Settings};
use seatlock::http::error::BidRefusal;
use seatlock::http::error::{Error, Refusal};
use seatlock::profile::BuyerProfile;
use seatlock_harness::{HttpBuyer, Reply, TestApp, auction_item, end_auction_now, eventually};

/// Settings over a fresh, empty database, changed by `adjust`. The background closer is
/// off unless a test turns it on, so tests that close by hand are not raced by it.
async fn settings(adjust: impl FnOnce(&mut Settings) + Send + 'static) -> Settings {
    TestApp::builder()
        .no_venues()
        .with(|s| s.close_interval_ms = 0)
        .with(adjust)
        .settings()
        .await
        .unwrap()
}

/// A server with [`settings`].
async fn app(adjust: impl FnOnce(&mut Settings) + Send + 'static) -> TestApp {
    TestApp::spawn(settings(adjust).await).await.unwrap()
}

/// [`app`] with the race lab on: its pause headers stall a bid ([`stalling_bidder`]).
async fn race_lab_app(adjust: impl FnOnce(&mut Settings) + Send + 'static) -> TestApp {
    let lab = seatlock_lab::LabSettings::enabled();
    TestApp::spawn_lab(settings(adjust).await, &lab)
        .await
        .unwrap()
}

/// Two servers over one database and one lease namespace: two processes of one
/// deployment.
async fn two_apps(adjust: impl FnOnce(&mut Settings) + Send + 'static) -> (TestApp, TestApp) {
    let settings = settings(adjust).await;
    let one = TestApp::spawn(settings.clone()).await.unwrap();
    (one, TestApp::spawn(settings).await.unwrap())
}

/// Inserts [`auction_item`] (open for another hour, $10.00 start, $1.00 increment, no
/// reserve, no soft close) after `adjust` changed what the test needs.
async fn item(app: &TestApp, adjust: impl FnOnce(&mut NewItem)) -> i64 {
    let mut new = auction_item("Signed poster");
    adjust(&mut new);
    queries::insert_item(app.db(), &new).await.unwrap().unwrap()
}

/// Opens the item page once (session and CSRF token), then POSTs a bid of `amount`.
async fn bid_on(buyer: &mut HttpBuyer, base: &str, item: i64, amount: &str) -> Reply {
    let page = format!("{base}/auctions/{item}");
    buyer.get(&page).await.unwrap();
    buyer
        .post(&format!("{page}/bids"), &[("amount", amount)])
        .await
        .unwrap()
}

/// Asserts that a bid of `amount` was refused with `status` on the item page itself: the
/// message containing `says` inside the form, and the typed amount kept in the field.
fn assert_refused(reply: &Reply, status: StatusCode, amount: &str, says: &str) {
    assert_eq!(reply.status, status, "{amount:?}: {}", reply.body);
    let error = "<p class=\"bid-error\" role=\"alert\" data-refusal=";
    assert!(reply.body.contains(error), "{amount:?}: {}", reply.body);
    assert!(reply.body.contains(says), "{amount:?}: {}", reply.body);
    let kept = format!("name=\"amount\" value=\"{amount}\"");
    assert!(
        reply.body.contains(&kept),
        "{amount:?}: the typed amount is kept"
    );
}

async fn fetch(app: &TestApp, item: i64) -> queries::Item {
    queries::item(app.db(), item).await.unwrap().unwrap()
}

/// How many bids were accepted on `item` (the bidders' own rows, not the automatic ones).
async fn bid_count(app: &TestApp, item: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM bids WHERE item_id = $1 AND NOT automatic")
        .bind(item)
        .fetch_one(app.db())
        .await
        .unwrap()
}

/// Moves an item's end into the past ([`end_auction_now`]).
async fn end_now(app: &TestApp, item: i64) {
    end_auction_now(app.db(), item).await;
}

/// Bidder `who`'s maximum of `max_cents` on `item`, arriving now, through the domain
/// function, with the app's strategy.
async fn place(app: &TestApp, who: &str, item: i64, max_cents: i64) -> Result<AcceptedBid, Error> {
    let bidder = profile(who);
    let new_bid = Bid {
        bidder: &bidder,
        item_id: item,
        max_cents,
        arrived_at: Utc::now(),
    };
    bid::place_bid(&app.state, &new_bid).await
}

fn profile(id: &str) -> BuyerProfile {
    BuyerProfile {
        id: id.into(),
        name: format!("Bidder {id}"),
    }
}

/// Waits until the lease on `key` has lapsed (no renewal: its holder is "paused").
async fn wait_for_lapse(app: &TestApp, key: &lease::LeaseKey) {
    eventually(Duration::from_secs(5), "the lease to lapse", || async {
        app.state.leases.remaining(key).await.unwrap().is_none()
    })
    .await;
}

/// 20 rounds of two buyers, on two server processes, stating the same maximum at once:
/// every round the price rises to that maximum, and the leader is the one whose maximum
/// came first in the item's own order (its bid lock's, or its row lock's,
/// serialisation), whichever server received it first.
async fn equal_maxima_race(strategy: BidStrategy) {
    let (one, two) = two_apps(move |s| s.bid_strategy = strategy).await;
    let id = item(&one, |_| {}).await;
    let (mut a, mut b) = (HttpBuyer::new(), HttpBuyer::new());
    a.get(&format!("{}/auctions/{id}", one.address))
        .await
        .unwrap();
    b.get(&format!("{}/auctions/{id}", two.address))
        .await
        .unwrap();
    let (url_one, url_two) = (
        format!("{}/auctions/{id}/bids", one.address),
        format!("{}/auctions/{id}/bids", two.address),
    );
    for round in 0..20_i64 {
        let amount = format!("{}.00", 10 + round);
        let form = [("amount", amount.as_str())];
        let (ra, rb) = tokio::join!(a.post(&url_one, &form), b.post(&url_two, &form));
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        let accepted = [&ra, &rb]
            .into_iter()
            .filter(|r| r.status == StatusCode::SEE_OTHER)
            .count();
        // Round 0: the second must beat the first's price by an increment. Later: if the
        // leader's raise comes first, both are accepted (the leader keeps the tie); if
        // the other's comes first, it leads at the new maximum and the raise, now from
        // a bidder who does not lead, may fall short of price plus increment.
        let expected = if round == 0 { 1..=1 } else { 1..=2 };
        assert!(
            expected.contains(&accepted),
            "round {round}: {} / {}",
            ra.status,
            rb.status
        );
        for refused in [&ra, &rb]
            .into_iter()
            .filter(|r| r.status != StatusCode::SEE_OTHER)
        {
            assert_eq!(
                refused.refusal.as_deref(),
                Some("too_low"),
                "round {round}: {refused:?}"
            );
        }
        let maximum = 1_000 + 100 * round;
        // The leader: the bidder of the earlier accepted row at this maximum.
        let first: String = sqlx::query_scalar(
            "SELECT bidder_id FROM bids WHERE item_id = $1 AND max_cents = $2
              ORDER BY id LIMIT 1",
        )
        .bind(id)
        .bind(maximum)
        .fetch_one(one.db())
        .await
        .unwrap();
        let item = fetch(&one, id).await;
        let price = if round == 0 { 1_000 } else { maximum };
        assert_eq!(
            (item.high_bid_cents, item.high_bidder_id.as_deref()),
            (Some(price), Some(first.as_str())),
            "round {round}"
        );
    }
    // The bidders' own rows carry strictly increasing fencing tokens in the item's order
    // (lease), or none at all (conditional).
    let tokens: Vec<Option<i64>> = sqlx::query_scalar(
        "SELECT fence_token FROM bids WHERE item_id = $1 AND NOT automatic ORDER BY id",
    )
    .bind(id)
    .fetch_all(one.db())
    .await
    .unwrap();
    match strategy {
        BidStrategy::Lease => {
            let tokens: Vec<i64> = tokens.into_iter().map(Option::unwrap).collect();
            assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
        }
        BidStrategy::Conditional => assert!(tokens.iter().all(Option::is_none)),
    }
}

#[tokio::test]
async fn equal_maxima_at_the_same_instant_the_earlier_leads_each_of_twenty_rounds_under_the_bid_lock()
 {
    equal_maxima_race(BidStrategy::Lease).await;
}

#[tokio::test]
async fn equal_maxima_at_the_same_instant_the_earlier_leads_each_of_twenty_rounds_with_the_conditional_update()
 {
    equal_maxima_race(BidStrategy::Conditional).await;
}

/// Proxy bidding through the pages: A's maximum of $10.00 opens at the starting price; B
/// must beat the price by its band's increment ($0.50 from $5.00); B's $20.00 leads at
/// A's maximum plus the increment, $10.50, and B's page shows B's maximum and "You are
/// leading", A's says outbid. A's equal $20.00 is accepted and loses to B's earlier
/// one: the price becomes $20.00 by an automatic bid for B. B raising the maximum moves
/// nothing (no self-outbid); B lowering it below the price is refused.
#[tokio::test]
async fn proxy_bidding_bids_for_the_leader_up_to_the_hidden_maximum() {
    let app = app(|_| {}).await;
    let id = item(&app, |_| {}).await;
    let (mut a, mut b) = (HttpBuyer::new(), HttpBuyer::new());
    let base = &app.address;
    let url = format!("{base}/auctions/{id}");

    let low = bid_on(&mut a, base, id, "9.99").await;
    assert_refused(
        &low,
        StatusCode::CONFLICT,
        "9.99",
        "below the starting price",
    );
    assert_eq!(
        bid_on(&mut a, base, id, "10").await.status,
        StatusCode::SEE_OTHER
    );
    let equal = bid_on(&mut b, base, id, "10.00").await;
    assert_refused(
        &equal,
        StatusCode::CONFLICT,
        "10.00",
        "no longer high enough",
    );
    assert!(equal.body.contains("at least $10.50"), "{}", equal.body);
    let enough = bid_on(&mut b, base, id, "20.00").await;
    assert_eq!(enough.status, StatusCode::SEE_OTHER, "{}", enough.body);
    let item = fetch(&app, id).await;
    assert_eq!(
        (item.high_bid_cents, item.leader_max_cents),
        (Some(1_050), Some(2_000))
    );

    let theirs = b.get(&url).await.unwrap().body;
    assert!(theirs.contains("Price: $10.50 by Guest"), "{theirs}");
    assert!(
        theirs.contains("Your maximum: <strong id=\"your-max\">$20.00</strong>"),
        "{theirs}"
    );
    assert!(theirs.contains("You are leading."), "{theirs}");
    let mine = a.get(&url).await.unwrap().body;
    assert!(mine.contains("Outbid"), "{mine}");
    assert!(
        !mine.contains("$20.00"),
        "B's maximum is hidden from A: {mine}"
    );

    // A's equal maximum: accepted, and the earlier one (B's) leads at it.
    assert_eq!(
        bid_on(&mut a, base, id, "20").await.status,
        StatusCode::SEE_OTHER
    );
    let item = fetch(&app, id).await;
    let first_at_20: String = sqlx::query_scalar(
        "SELECT bidder_id FROM bids WHERE item_id = $1 AND max_cents = 2000 ORDER BY id LIMIT 1",
    )
    .bind(id)
    .fetch_one(app.db())
    .await
    .unwrap();
    assert_eq!(
        (item.high_bid_cents, item.high_bidder_id),
        (Some(2_000), Some(first_at_20))
    );
    let history = a.get(&url).await.unwrap().body;
    assert!(
        history.contains("<em class=\"auto-bid\">automatic</em>"),
        "{history}"
    );

    // B raises: the price stays (nobody outbids themself); lowering below it is refused.
    assert_eq!(
        bid_on(&mut b, base, id, "50").await.status,
        StatusCode::SEE_OTHER
    );
    assert_eq!(fetch(&app, id).await.high_bid_cents, Some(2_000));
    let lowered = bid_on(&mut b, base, id, "19.99").await;
    assert_refused(
        &lowered,
        StatusCode::CONFLICT,
        "19.99",
        "cannot be lowered below the price",
    );
    assert_eq!(lowered.refusal.as_deref(), Some("below_price"));
    assert_eq!(bid_count(&app, id).await, 4);
}

/// The reserve rule: a lone bidder whose maximum meets the reserve stands at the reserve,
/// not the starting price, so that the item sells; below it, the starting price.
#[tokio::test]
async fn a_maximum_that_meets_the_reserve_raises_the_price_to_it() {
    let app = app(|_| {}).await;
    let id = item(&app, |i| i.terms.reserve_price_cents = 3_000).await;
    place(&app, "a", id, 2_999).await.unwrap();
    assert_eq!(fetch(&app, id).await.high_bid_cents, Some(1_000));
    // A raises past the reserve: the price goes to the reserve, and no further.
    let raised = place(&app, "a", id, 5_000).await.unwrap();
    assert_eq!((raised.price_cents, raised.leading), (3_000, true));
    // B beats the reserve price but not A's maximum: A leads at B's plus the increment.
    let beaten = place(&app, "b", id, 4_000).await.unwrap();
    assert_eq!((beaten.price_cents, beaten.leading), (4_100, false));
}

/// The most the site takes is $1,000,000.00. Two maxima at it put the price at it (the
/// earlier leads); the item is then at its limit: the bid form is withdrawn, the page
/// says why, and a bid is refused as `at_limit`.
#[tokio::test]
async fn at_the_maximum_amount_the_item_says_it_is_at_its_limit() {
    let app = app(|_| {}).await;
    let id = item(&app, |_| {}).await;
    let (mut a, mut b) = (HttpBuyer::new(), HttpBuyer::new());
    let base = &app.address;
    let near = bid_on(&mut a, base, id, "1000000").await;
    assert_eq!(near.status, StatusCode::SEE_OTHER, "{}", near.body);
    let page = b.get(&format!("{base}/auctions/{id}")).await.unwrap();
    assert!(page.body.contains("at least $10.50"), "{}", page.body);
    let top = bid_on(&mut b, base, id, "1000000").await;
    assert_eq!(top.status, StatusCode::SEE_OTHER, "{}", top.body);

    let refused = bid_on(&mut a, base, id, "1000000.00").await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
    assert_eq!(refused.refusal.as_deref(), Some("at_limit"));
    assert!(
        refused.body.contains("cannot be outbid"),
        "{}",
        refused.body
    );
    let page = a.get(&format!("{base}/auctions/{id}")).await.unwrap();
    assert!(
        page.body.contains("Bidding is at its limit"),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("id=\"bid\""),
        "no bid form: {}",
        page.body
    );
    let item = fetch(&app, id).await;
    assert_eq!(
        (item.high_bid_cents, item.bid_count),
        (Some(100_000_000), 2)
    );
}

#[tokio::test]
async fn a_bid_lock_lapsing_mid_bid_is_fenced_off_and_the_newer_bid_stands() {
    let app = app(|s| s.bid_lock_ttl_ms = 200).await;
    let id = item(&app, |_| {}).await;
    let key = seatlock::auction::bid_lock_key(&app.state.settings.lease_namespace, id);

    // A takes the bid lock, then stalls (a GC pause) past its lease.
    let lease_a = bid::lock_item(&app.state, id, "a").await.unwrap();
    wait_for_lapse(&app, &key).await;

    // Meanwhile B bids through the web and is accepted under a newer grant.
    let mut b = HttpBuyer::new();
    let accepted = bid_on(&mut b, &app.address, id, "12.00").await;
    assert_eq!(accepted.status, StatusCode::SEE_OTHER, "{}", accepted.body);

    // A wakes up and writes a bid that is high enough, on the strength of a lock it no
    // longer holds: Postgres refuses it by its fencing token.
    let a = profile("a");
    let late_bid = Bid {
        bidder: &a,
        item_id: id,
        max_cents: 2_000,
        arrived_at: Utc::now(),
    };
    let late = bid::bid_under_lease(&app.state, &lease_a, &late_bid).await;
    match late {
        Err(Error::Refused(Refusal::StaleBidLock)) => {}
        other => panic!("expected a stale-token refusal, got {other:?}"),
    }
    let item = fetch(&app, id).await;
    assert_eq!(
        (item.high_bid_cents, item.leader_max_cents),
        (Some(1_000), Some(1_200)),
        "B's bid stands"
    );
    assert!(item.fence_token > lease_a.fencing_token().0 as i64);
    assert_eq!(bid_count(&app, id).await, 1);
    assert!(
        !app.state.leases.release(&lease_a).await.unwrap(),
        "A's owner-checked release touches nothing"
    );
}

#[tokio::test]
async fn a_busy_bid_lock_is_answered_409_busy_never_5xx() {
    let app = app(|_| {}).await;
    let id = item(&app, |_| {}).await;
    let key = seatlock::auction::bid_lock_key(&app.state.settings.lease_namespace, id);
    let squatter = app
        .state
        .leases
        .acquire(&key, "squatter", Duration::from_secs(60))
        .await
        .unwrap();
    let mut a = HttpBuyer::new();
    let busy = bid_on(&mut a, &app.address, id, "15.00").await;
    assert_refused(&busy, StatusCode::CONFLICT, "15.00", "busy");
    assert_eq!(bid_count(&app, id).await, 0);

    assert!(app.state.leases.release(&squatter).await.unwrap());
    let placed = bid_on(&mut a, &app.address, id, "15.00").await;
    assert_eq!(placed.status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn two_closers_close_each_item_once_with_the_right_result() {
    let (one, two) = two_apps(|_| {}).await;
    let sold = item(&one, |i| i.terms.reserve_price_cents = 1_500).await;
    let short = item(&one, |i| i.terms.reserve_price_cents = 5_000).await;
    let unbid = item(&one, |_| {}).await;
    place(&one, "a", sold, 1_500).await.unwrap();
    place(&one, "b", short, 4_999).await.unwrap();
    let mut items = vec![sold, short, unbid];
    for _ in 0..5 {
        items.push(item(&one, |_| {}).await);
    }
    for &id in &items {
        end_now(&one, id).await;
    }

    let (a, b) = tokio::join!(
        close::close_due(&one.state, "closer-one"),
        close::close_due(&two.state, "closer-two"),
    );
    let outcomes: Vec<(i64, CloseOutcome)> = a.unwrap().into_iter().chain(b.unwrap()).collect();
    for &id in &items {
        let closed = outcomes
            .iter()
            .filter(|(i, o)| *i == id && matches!(o, CloseOutcome::Closed(_)))
            .count();
        assert_eq!(closed, 1, "item {id}: {outcomes:?}");
        assert_eq!(fetch(&one, id).await.status, "closed");
    }
    let result = |id| {
        let app = &one;
        async move { fetch(app, id).await }
    };
    let won = result(sold).await;
    assert_eq!(won.result.as_deref(), Some("sold"));
    assert_eq!(won.winner_id.as_deref(), Some("a"));
    assert_eq!(
        result(short).await.result.as_deref(),
        Some("reserve_not_met")
    );
    assert_eq!(result(short).await.winner_id, None);
    assert_eq!(result(unbid).await.result.as_deref(), Some("no_bids"));
    assert!(
        close::close_due(&one.state, "closer-one")
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_closer_paused_past_its_lease_cannot_write() {
    // Long enough for B's own close, watchdog and all, on a busy machine; A's lapse is
    // waited for.
    let app = app(|s| s.close_lease_ttl_ms = 1_000).await;
    let id = item(&app, |_| {}).await;
    end_now(&app, id).await;

    // Closer A claims the job, then freezes: no watchdog runs, its lease lapses.
    let lease_a = close::claim(&app.state, id, "closer-a")
        .await
        .unwrap()
        .unwrap();
    let key = seatlock::auction::closing_key(&app.state.settings.lease_namespace, id);
    wait_for_lapse(&app, &key).await;
    // Closer B claims the job with a newer token and closes.
    let closed = close::close_item(&app.state, id, "closer-b").await.unwrap();
    assert_eq!(closed, CloseOutcome::Closed("no_bids".into()));
    let token_b = fetch(&app, id).await.fence_token;
    assert!(token_b > lease_a.fencing_token().0 as i64);

    // A wakes up and writes: refused, and B's write is untouched.
    let late = close::write_result(&app.state, id, lease_a.fencing_token().0)
        .await
        .unwrap();
    assert_eq!(late, CloseOutcome::Refused);
    let item = fetch(&app, id).await;
    assert_eq!(
        (item.fence_token, item.result.as_deref()),
        (token_b, Some("no_bids"))
    );

    // The fence alone: an open, ended item whose row accepted token 42 refuses 41.
    let other = item_ended_with_token(&app, 42).await;
    assert_eq!(
        queries::close_item(app.db(), other, 41, grace(&app))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        queries::close_item(app.db(), other, 42, grace(&app))
            .await
            .unwrap()
            .as_deref(),
        Some("no_bids")
    );
}

/// The app's arrival grace ([`bid::arrival_grace`]).
fn grace(app: &TestApp) -> Duration {
    bid::arrival_grace(&app.state.settings)
}

async fn item_ended_with_token(app: &TestApp, token: i64) -> i64 {
    let id = item(app, |_| {}).await;
    end_now(app, id).await;
    sqlx::query("UPDATE auction_items SET fence_token = $2 WHERE id = $1")
        .bind(id)
        .bind(token)
        .execute(app.db())
        .await
        .unwrap();
    id
}

#[tokio::test]
async fn the_background_closer_shows_the_winner_or_reserve_not_met() {
    let app = app(|s| s.close_interval_ms = 50).await;
    let sold = item(&app, |i| i.terms.reserve_price_cents = 1_500).await;
    let short = item(&app, |i| i.terms.reserve_price_cents = 1_500).await;
    let (mut a, mut b) = (HttpBuyer::new(), HttpBuyer::new());
    assert_eq!(
        bid_on(&mut a, &app.address, sold, "20").await.status,
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        bid_on(&mut b, &app.address, short, "12.50").await.status,
        StatusCode::SEE_OTHER
    );
    end_now(&app, sold).await;
    end_now(&app, short).await;
    eventually(Duration::from_secs(10), "the closer", || async {
        fetch(&app, sold).await.status == "closed" && fetch(&app, short).await.status == "closed"
    })
    .await;

    let page = a
        .get(&format!("{}/auctions/{sold}", app.address))
        .await
        .unwrap();
    assert!(page.body.contains("Sold to Guest"), "{}", page.body);
    assert!(
        page.body.contains("for $15.00"),
        "the reserve: {}",
        page.body
    );
    assert!(page.body.contains("You won."));
    assert!(
        !page.body.contains("name=\"amount\""),
        "no bid form once closed"
    );
    let theirs = b
        .get(&format!("{}/auctions/{sold}", app.address))
        .await
        .unwrap();
    assert!(!theirs.body.contains("You won."));
    let page = b
        .get(&format!("{}/auctions/{short}", app.address))
        .await
        .unwrap();
    assert!(page.body.contains("Reserve not met"), "{}", page.body);
    let list = b.get(&format!("{}/auctions", app.address)).await.unwrap();
    assert!(list.body.contains("Recently ended"));
}

#[tokio::test]
async fn bids_after_the_end_are_refused_before_and_after_the_close() {
    let app = app(|_| {}).await;
    let id = item(&app, |_| {}).await;
    end_now(&app, id).await;
    let mut a = HttpBuyer::new();
    // The page of an ended auction has no form: take the CSRF token from the home page,
    // as a bidder whose page was open before the end would have one.
    a.get(&format!("{}/", app.address)).await.unwrap();
    for when in ["ended, not yet closed", "closed"] {
        let late = bid_on(&mut a, &app.address, id, "50.00").await;
        assert!(
            late.is_refused(&Refusal::Bid(BidRefusal::Ended)),
            "{when}: {late:?}"
        );
        assert_eq!(bid_count(&app, id).await, 0, "{when}");
        let written = place(&app, "x", id, 5_000).await;
        assert!(matches!(written, Err(Error::Refused(_))), "{when}");
        close::close_due(&app.state, "closer").await.unwrap();
    }
    assert_eq!(fetch(&app, id).await.result.as_deref(), Some("no_bids"));
}

/// When bid `bid_id` arrived, by the receiving server's clock.
async fn arrived_at(app: &TestApp, bid_id: i64) -> chrono::DateTime<Utc> {
    sqlx::query_scalar("SELECT arrived_at FROM bids WHERE id = $1")
        .bind(bid_id)
        .fetch_one(app.db())
        .await
        .unwrap()
}

/// Soft close that ends: a bid arriving in the window sets the end to its arrival plus
/// the window (not the end plus a full window per bid, as before), never past the hard
/// stop; a bid outside the window moves nothing.
#[tokio::test]
async fn a_bid_in_the_soft_close_window_moves_the_end_to_its_arrival_plus_the_window_up_to_the_hard_stop()
 {
    let app = app(|_| {}).await;
    let closing = |i: &mut NewItem| {
        i.terms.soft_close_secs = 300;
        i.ends_at = Utc::now() + TimeDelta::seconds(120);
    };
    let soft = item(&app, closing).await;
    let stopped = item(&app, |i| {
        closing(i);
        i.hard_stop_at = i.ends_at + TimeDelta::seconds(60);
    })
    .await;
    let far = item(&app, |i| i.terms.soft_close_secs = 300).await;
    let far_end = fetch(&app, far).await.ends_at;

    let placed = place(&app, "a", soft, 1_000).await.unwrap();
    let arrival = arrived_at(&app, placed.bid_id).await;
    assert_eq!(
        fetch(&app, soft).await.ends_at,
        arrival + TimeDelta::seconds(300)
    );
    // A second bid moves it to ITS arrival plus the window: not a window more each time.
    let again = place(&app, "b", soft, 2_000).await.unwrap();
    let second = arrived_at(&app, again.bid_id).await;
    assert_eq!(
        fetch(&app, soft).await.ends_at,
        second + TimeDelta::seconds(300)
    );

    place(&app, "a", stopped, 1_000).await.unwrap();
    let row = fetch(&app, stopped).await;
    assert_eq!(row.ends_at, row.hard_stop_at, "never past the hard stop");

    place(&app, "b", far, 1_000).await.unwrap();
    assert_eq!(
        fetch(&app, far).await.ends_at,
        far_end,
        "outside the window: unchanged"
    );
}

/// Judged at arrival: a bid the server received before the end is on time though its
/// write comes after the end (here it stalls 3 s under its bid lock, as a bid queued
/// behind others would wait for its turn), within the arrival grace; before, the write
/// was judged by the clock at the write and refused "ended".
#[tokio::test]
async fn a_bid_received_before_the_end_is_on_time_though_its_turn_comes_after() {
    let app = race_lab_app(|s| s.bid_lock_ttl_ms = 10_000).await;
    let mut a = stalling_bidder(3_000);
    a.get(&format!("{}/", app.address)).await.unwrap(); // the CSRF token
    let id = item(&app, |i| i.ends_at = Utc::now() + TimeDelta::seconds(2)).await;
    let end = fetch(&app, id).await.ends_at;
    let url = format!("{}/auctions/{id}/bids", app.address);
    let reply = a.post(&url, &[("amount", "20.00")]).await.unwrap();
    assert_eq!(
        reply.status,
        StatusCode::SEE_OTHER,
        "{:?} {:?}",
        reply.refusal,
        reply.body
    );
    let row = fetch(&app, id).await;
    assert!(row.now > end, "the reply came after the end");
    assert_eq!(
        (row.high_bid_cents, row.leader_max_cents),
        (Some(1_000), Some(2_000))
    );
    let arrival: chrono::DateTime<Utc> =
        sqlx::query_scalar("SELECT arrived_at FROM bids WHERE item_id = $1")
            .bind(id)
            .fetch_one(app.db())
            .await
            .unwrap();
    assert!(
        arrival < end,
        "it arrived before the end: {arrival} vs {end}"
    );
}

#[tokio::test]
async fn bad_amounts_and_ids_get_clear_4xx_pages_and_write_nothing() {
    let app = app(|_| {}).await;
    let id = item(&app, |_| {}).await;
    let base = &app.address;
    let mut a = HttpBuyer::new();
    let huge = "9".repeat(300);
    for (amount, says) in [
        ("-5", "must be positive"),
        ("0", "more than $0.00"),
        ("0.00", "more than $0.00"),
        ("abc", "not an amount"),
        ("1e3", "not an amount"),
        ("12.345", "whole cents"),
        ("0.001", "whole cents"),
        ("1000000.01", "not accepted"),
        ("99999999999999999999999", "not accepted"),
        (huge.as_str(), "not accepted"),
        ("", "Enter an amount"),
    ] {
        let reply = bid_on(&mut a, base, id, amount).await;
        assert_refused(&reply, StatusCode::BAD_REQUEST, amount, says);
    }
    let markup = bid_on(&mut a, base, id, "<b>5</b>").await;
    assert_eq!(markup.status, StatusCode::BAD_REQUEST);
    assert!(
        !markup.body.contains("<b>5</b>"),
        "the typed amount is escaped"
    );
    assert_eq!(bid_count(&app, id).await, 0);

    // (path, amount): GET without an amount, POST a bid with one.
    let page = format!("/auctions/{id}x");
    for (path, amount, status) in [
        ("/auctions/999999", None, StatusCode::NOT_FOUND),
        ("/auctions/abc", None, StatusCode::BAD_REQUEST),
        ("/auctions/-1", None, StatusCode::BAD_REQUEST),
        ("/auctions/0", None, StatusCode::BAD_REQUEST),
        (page.as_str(), None, StatusCode::BAD_REQUEST),
        ("/auctions/999999/bids", Some("50"), StatusCode::NOT_FOUND),
        ("/auctions/999999/bids", Some("-1"), StatusCode::NOT_FOUND),
        ("/auctions/x1/bids", Some("50"), StatusCode::BAD_REQUEST),
        (
            "/auctions/99999999999999999999/bids",
            Some("50"),
            StatusCode::BAD_REQUEST,
        ),
    ] {
        a.get(&format!("{base}/auctions/{id}")).await.unwrap();
        let url = format!("{base}{path}");
        let reply = match amount {
            None => a.get(&url).await,
            Some(amount) => a.post(&url, &[("amount", amount)]).await,
        }
        .unwrap();
        assert_eq!(reply.status, status, "{path} {amount:?}: {}", reply.body);
        assert!(
            reply.body.contains("class=\"message\""),
            "{path}: an HTML page with a message"
        );
    }
    let missing = a
        .post(&format!("{base}/auctions/{id}/bids"), &[])
        .await
        .unwrap();
    assert_eq!(missing.status, StatusCode::BAD_REQUEST, "no amount field");
    let forged = HttpBuyer::new()
        .post(&format!("{base}/auctions/{id}/bids"), &[("amount", "50")])
        .await
        .unwrap();
    assert_eq!(forged.status, StatusCode::FORBIDDEN, "no CSRF token");
    assert_eq!(bid_count(&app, id).await, 0);
}

#[tokio::test]
async fn the_list_shows_open_items_and_seeding_is_idempotent() {
    let app = app(|_| {}).await;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/auctions.json");
    let added = seatlock::seed::seed_auctions(app.db(), path.as_ref())
        .await
        .unwrap();
    assert!(added >= 3, "a handful: {added}");
    let again = seatlock::seed::seed_auctions(app.db(), path.as_ref())
        .await
        .unwrap();
    assert_eq!(again, 0, "seeding twice adds nothing");
    let open = queries::open_items(app.db()).await.unwrap();
    assert_eq!(open.len(), added);
    for item in &open {
        assert!(
            item.ends_at - item.now >= TimeDelta::hours(24),
            "{}",
            item.terms.title
        );
        assert!(
            item.hard_stop_at - item.ends_at >= TimeDelta::hours(1),
            "{}",
            item.terms.title
        );
    }

    let first = open[0].id;
    let mut a = HttpBuyer::new();
    let amount = format!("{}", open[0].terms.starting_price_cents / 100);
    assert_eq!(
        bid_on(&mut a, &app.address, first, &amount).await.status,
        StatusCode::SEE_OTHER
    );
    let list = a.get(&format!("{}/auctions", app.address)).await.unwrap();
    assert_eq!(list.status, StatusCode::OK);
    for item in &open {
        let link = format!("<a href=\"/auctions/{}\"><strong>", item.id);
        assert!(list.body.contains(&link), "{}", item.terms.title);
    }
    assert!(list.body.contains("Signed tour poster"));
    assert!(list.body.contains(&format!(
        "High bid: {} by Guest",
        seatlock::money::format_cents(open[0].terms.starting_price_cents)
    )));
    assert!(list.body.contains(" left</span>"));
    let home = a.get(&format!("{}/", app.address)).await.unwrap();
    assert!(
        home.body.contains("href=\"/auctions\""),
        "the header links the auctions"
    );
}

#[tokio::test]
async fn the_item_stream_pushes_bids_and_the_close_made_through_another_server() {
    let (one, two) = two_apps(|_| {}).await;
    let id = item(&one, |_| {}).await;
    let mut stream =
        seatlock_harness::http::EventStream::open(&format!("{}/auctions/{id}/stream", one.address))
            .await;
    let (name, html) = stream.next().await;
    assert_eq!(name, "snapshot");
    assert!(html.contains("no bids yet (opens at $10.00)"), "{html}");
    assert!(html.contains("data-accepts-bids=\"true\""), "{html}");

    let mut bidder = HttpBuyer::new();
    let placed = bid_on(&mut bidder, &two.address, id, "11").await;
    assert_eq!(placed.status, StatusCode::SEE_OTHER, "{}", placed.body);
    let (name, html) = stream.next().await;
    assert_eq!(name, "bid");
    assert!(html.contains("Price: $10.00 by Guest"), "{html}");
    assert!(html.contains("at least $10.50"), "{html}");
    assert!(!html.contains("$11.00"), "the maximum is hidden: {html}");
    assert!(html.contains("Bids (1)"), "{html}");
    assert!(
        !html.contains("(you)"),
        "the viewer is not the bidder: {html}"
    );

    end_now(&one, id).await;
    let closed = close::close_due(&two.state, "test-closer").await.unwrap();
    assert_eq!(closed, vec![(id, CloseOutcome::Closed("sold".into()))]);
    let (name, html) = stream.next().await;
    assert_eq!(name, "closed");
    assert!(html.contains("Sold to Guest"), "{html}");
    assert!(html.contains("data-accepts-bids=\"false\""), "{html}");

    let missing = reqwest::get(format!("{}/auctions/999999/stream", one.address))
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

/// A browser whose bids stall `ms` milliseconds between the rules check and the write
/// (the race lab's `x-race-lab-pause-ms`; honoured only by [`race_lab_app`]).
fn stalling_bidder(ms: u64) -> HttpBuyer {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(seatlock::failpoint::PAUSE_HEADER, ms.into());
    HttpBuyer::with_headers(headers)
}

/// When the transactions of this test's database that sit idle inside a transaction
/// (a stalled bid, between its read and its write) began, by the Postgres clock.
async fn stalled_transactions_began(app: &TestApp) -> Vec<chrono::DateTime<Utc>> {
    sqlx::query_scalar(
        "SELECT xact_start FROM pg_stat_activity
          WHERE datname = current_database() AND state = 'idle in transaction'",
    )
    .fetch_all(app.db())
    .await
    .unwrap()
}

/// Issue 18, defect 2: the end (and the soft-close window) is decided at the moment of the
/// write, not at the start of the bid's transaction. Two bidders read an item ending in
/// ~3 s, pass the rules, and stall 7 s (their bid locks lapse); meanwhile a newer bid lock
/// holder is told "ended". When they wake, their writes are refused as `ended` and write
/// nothing; the soft-close item is not extended, so later bids stay refused.
#[tokio::test]
async fn a_bid_stalled_past_the_end_is_refused_and_extends_nothing() {
    let app = race_lab_app(|s| {
        s.bid_lock_ttl_ms = 500;
    })
    .await;
    let base = app.address.clone();
    let ending_soon = |i: &mut NewItem| i.ends_at = Utc::now() + TimeDelta::seconds(3);
    let plain = item(&app, ending_soon).await;
    let soft = item(&app, |i| {
        ending_soon(i);
        i.terms.soft_close_secs = 60;
    })
    .await;
    let ends = [
        fetch(&app, plain).await.ends_at,
        fetch(&app, soft).await.ends_at,
    ];

    let (mut a_plain, mut a_soft) = (stalling_bidder(7_000), stalling_bidder(7_000));
    let stalled = async {
        tokio::join!(
            bid_on(&mut a_plain, &base, plain, "20.00"),
            bid_on(&mut a_soft, &base, soft, "20.00"),
        )
    };
    let mut b = HttpBuyer::new();
    let meanwhile = async {
        // Both stalled bids are inside transactions that began before the end.
        eventually(Duration::from_secs(10), "both bids to stall", || async {
            stalled_transactions_began(&app).await.len() == 2
        })
        .await;
        let began = stalled_transactions_began(&app).await;
        assert!(
            began.iter().all(|t| ends.iter().all(|end| t < end)),
            "the stalled transactions began before the end: {began:?} vs {ends:?}"
        );
        b.get(&format!("{base}/")).await.unwrap(); // a CSRF token without an item form
        eventually(Duration::from_secs(10), "the end", || async {
            fetch(&app, plain).await.has_ended() && fetch(&app, soft).await.has_ended()
        })
        .await;
        // B takes each (lapsed) bid lock with a newer token and is told "ended".
        for id in [plain, soft] {
            let told = bid_on(&mut b, &base, id, "30.00").await;
            assert!(
                told.is_refused(&Refusal::Bid(BidRefusal::Ended)),
                "item {id}: {:?} {:?}",
                told.status,
                told.refusal
            );
        }
    };
    let ((late_plain, late_soft), ()) = tokio::join!(stalled, meanwhile);

    // (item, the stalled bid's status and refusal, bids written, ends_at moved)
    let mut seen = Vec::new();
    for (id, reply, end) in [(plain, &late_plain, ends[0]), (soft, &late_soft, ends[1])] {
        let row = fetch(&app, id).await;
        seen.push((
            id,
            reply.status,
            reply.refusal.clone(),
            bid_count(&app, id).await,
            row.ends_at - end,
        ));
    }
    let expected: Vec<_> = [plain, soft]
        .map(|id| {
            (
                id,
                StatusCode::CONFLICT,
                Some("ended".to_owned()),
                0,
                TimeDelta::zero(),
            )
        })
        .into();
    assert_eq!(
        seen, expected,
        "(item, status, refusal, bids, end moved by)"
    );

    // The soft-close item was not reopened: a later bid is refused too, and the closer
    // closes both items with no bids.
    let later = bid_on(&mut b, &base, soft, "40.00").await;
    assert!(
        later.is_refused(&Refusal::Bid(BidRefusal::Ended)),
        "{:?} {:?}",
        later.status,
        later.refusal
    );
    let mut closed = close::close_due(&app.state, "closer").await.unwrap();
    closed.sort_by_key(|(id, _)| *id);
    assert_eq!(
        closed,
        vec![
            (plain, CloseOutcome::Closed("no_bids".into())),
            (soft, CloseOutcome::Closed("no_bids".into())),
        ]
    );
}
/// The value of the Prometheus sample `name` on this process's `GET /metrics`, 0 if absent.
async fn metric(app: &TestApp, name: &str) -> f64 {
    seatlock_harness::http::metric(&app.metrics_url, name)
        .await
        .unwrap()
}

/// How many statements starting with `prefix` run in this test's database, and how many
/// of those wait for a lock.
async fn statements_running(app: &TestApp, prefix: &str) -> (i64, i64) {
    sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock')
           FROM pg_stat_activity
          WHERE datname = current_database() AND state = 'active'
            AND pid <> pg_backend_pid() AND query LIKE $1 || '%'",
    )
    .bind(prefix)
    .fetch_one(app.db())
    .await
    .unwrap()
}

/// Issue 18, defect 5: the closer reports what Postgres did. Its close statement waits
/// for a row lock held elsewhere while its lease is deleted and claimed by closer B (who
/// writes nothing) and its watchdog reports the loss; then the row lock is released. The
/// statement was already sent, so the closer awaits it: the fence admits it (no newer
/// token has written) and the closer reports exactly what the row says.
#[tokio::test]
async fn a_closer_whose_lease_is_lost_mid_write_reports_what_postgres_did() {
    let app = app(|s| {
        s.close_lease_ttl_ms = 300;
        s.store_timeout_ms = 30_000; // the close statement may wait for the row lock
    })
    .await;
    let id = item(&app, |_| {}).await;
    end_now(&app, id).await;

    // Another transaction holds the item's row lock: the close statement will wait.
    let mut blocker = app.db().begin().await.unwrap();
    sqlx::query("SELECT 1 FROM auction_items WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(&mut *blocker)
        .await
        .unwrap();
    let losses = "lease_watchdog_losses_total";
    let losses_before = metric(&app, losses).await;
    let state = app.state.clone();
    let closer = tokio::spawn(async move { close::close_item(&state, id, "closer-a").await });
    eventually(
        Duration::from_secs(10),
        "the close statement to wait",
        || async { statements_running(&app, "UPDATE auction_items").await == (1, 1) },
    )
    .await;

    // Its lease is lost: deleted, and the job claimed by closer B with a newer token.
    let key = seatlock::auction::closing_key(&app.state.settings.lease_namespace, id);
    let _: i64 = redis::cmd("DEL")
        .arg(key.lease_key())
        .query_async(&mut app.state.redis.connection().clone())
        .await
        .unwrap();
    let lease_b = close::claim(&app.state, id, "closer-b")
        .await
        .unwrap()
        .expect("B gets the job once A's lease is gone");
    eventually(
        Duration::from_secs(10),
        "A's watchdog to report the loss",
        || async { metric(&app, losses).await > losses_before },
    )
    .await;

    // The row lock goes; whatever the closer reports must be what Postgres did.
    blocker.rollback().await.unwrap();
    let reported = tokio::time::timeout(Duration::from_secs(30), closer)
        .await
        .expect("the closer finishes")
        .unwrap()
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "no close statement in flight",
        || async { statements_running(&app, "UPDATE auction_items").await == (0, 0) },
    )
    .await;
    let row = fetch(&app, id).await;
    let in_postgres = (row.status.as_str(), row.result.as_deref());
    match &reported {
        CloseOutcome::Closed(result) => {
            assert_eq!(
                in_postgres,
                ("closed", Some(result.as_str())),
                "{reported:?}"
            )
        }
        _ => assert_eq!(in_postgres, ("open", None), "{reported:?}"),
    }
    // B wrote nothing, so the fence admitted A's older token: A closed the item.
    assert_eq!(reported, CloseOutcome::Closed("no_bids".into()));
    assert!(row.fence_token < lease_b.fencing_token().0 as i64);
    // B, the newer holder, finds the job done.
    assert_eq!(
        close::write_result(&app.state, id, lease_b.fencing_token().0)
            .await
            .unwrap(),
        CloseOutcome::Refused
    );
    assert!(app.state.leases.release(&lease_b).await.unwrap());
}

/// A bidder who hangs up while the bid is under way (after the lock, inside the bid's
/// transaction) cancels nothing: the bid is written and the bid lock released at once,
/// not left to lapse by its TTL.
#[tokio::test]
async fn a_bidder_who_hangs_up_mid_bid_leaves_the_bid_and_no_bid_lock() {
    let app = race_lab_app(|s| {
        s.bid_lock_ttl_ms = 30_000;
    })
    .await;
    let id = item(&app, |_| {}).await;
    let page = format!("{}/auctions/{id}", app.address);
    let mut bidder = stalling_bidder(800);
    bidder.get(&page).await.unwrap();
    let url = format!("{page}/bids");
    let bid = tokio::spawn(async move { bidder.post(&url, &[("amount", "20.00")]).await });
    eventually(Duration::from_secs(10), "the bid to stall", || async {
        stalled_transactions_began(&app).await.len() == 1
    })
    .await;
    bid.abort(); // the bidder hangs up
    assert!(bid.await.is_err(), "the bidder got no answer");
    eventually(Duration::from_secs(10), "the bid to be written", || async {
        bid_count(&app, id).await == 1
    })
    .await;
    let key = seatlock::auction::bid_lock_key(&app.state.settings.lease_namespace, id);
    eventually(Duration::from_secs(5), "the bid lock's release", || async {
        app.state.leases.remaining(&key).await.unwrap().is_none()
    })
    .await;
    let item = fetch(&app, id).await;
    assert_eq!(
        (item.high_bid_cents, item.leader_max_cents),
        (Some(1_000), Some(2_000))
    );
}
