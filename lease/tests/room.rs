//! The waiting room (`lease::room`) against a real Redis (`REDIS_URL`): FIFO admission,
//! never more than N admitted under a burst, a lapsed or ended admission admits the next
//! member, a hold needs a live admission, the pre-queue in random order, quiet members
//! lose their place, renewal up to the cap. Each test uses its own random group.

use std::sync::Arc;
use std::time::Duration;

use lease::{
    Entry, LeaseClient, LeaseError, LeaseKey, LeaseStore, MemoryLedger, OwnerToken, RoomTerms,
};
use rand::Rng;

fn client() -> Arc<LeaseClient<MemoryLedger>> {
    let url = std::env::var("REDIS_URL").expect("REDIS_URL is set by `make test`");
    let redis = lease::connect(&url, Duration::from_secs(2)).unwrap();
    Arc::new(LeaseClient::new(redis, MemoryLedger::new()))
}

fn group() -> String {
    format!("room-test:{:x}", rand::rng().random::<u64>())
}

fn terms(shoppers: u64) -> RoomTerms {
    RoomTerms {
        shoppers,
        admission_ttl: Duration::from_secs(60),
        admission_cap: Duration::from_secs(120),
        on_sale_at_ms: 0,
        grace: Duration::from_secs(30),
        arrival_window: Duration::from_secs(60),
    }
}

fn members(n: usize) -> Vec<OwnerToken> {
    (0..n).map(|_| OwnerToken::random()).collect()
}

/// The Redis clock, Unix ms.
async fn redis_now_ms(client: &LeaseClient<MemoryLedger>) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut client.redis())
        .await
        .unwrap();
    secs * 1000 + micros / 1000
}

/// A visit of a member who is here (seatlock: a map view).
async fn entry(
    client: &LeaseClient<MemoryLedger>,
    group: &str,
    member: &OwnerToken,
    terms: &RoomTerms,
) -> Entry {
    client
        .enter(group, member, terms, true)
        .await
        .unwrap()
        .entry
}

/// A poll (seatlock: the queue page's stream): keeps a place, renews nothing.
async fn poll(
    client: &LeaseClient<MemoryLedger>,
    group: &str,
    member: &OwnerToken,
    terms: &RoomTerms,
) -> Entry {
    client
        .enter(group, member, terms, false)
        .await
        .unwrap()
        .entry
}

fn admitted(entry: &Entry) -> bool {
    matches!(entry, Entry::Admitted { .. })
}

fn position(entry: &Entry) -> u64 {
    match entry {
        Entry::Queued { position, .. } => *position,
        other => panic!("not queued: {other:?}"),
    }
}

#[tokio::test]
async fn members_are_admitted_in_the_order_they_joined() {
    let (client, group, terms) = (client(), group(), terms(2));
    let m = members(6);
    for (i, member) in m.iter().enumerate() {
        let e = entry(&client, &group, member, &terms).await;
        if i < 2 {
            assert!(admitted(&e), "member {i}: {e:?}");
        } else {
            assert_eq!(position(&e), i as u64 - 1, "member {i}");
        }
    }
    // Each admission that ends lets exactly the next one in, in join order.
    for next in 2..6 {
        assert!(client.leave(&group, &m[next - 2]).await.unwrap());
        let e = entry(&client, &group, &m[next], &terms).await;
        assert!(admitted(&e), "member {next} is next: {e:?}");
        for (later, member) in m.iter().enumerate().skip(next + 1) {
            let e = entry(&client, &group, member, &terms).await;
            assert_eq!(position(&e), (later - next) as u64, "member {later}");
        }
    }
}

#[tokio::test]
async fn a_burst_of_joins_never_admits_more_than_n() {
    let (group, terms) = (group(), terms(5));
    // Several clients (connections), as several servers would be.
    let clients: Vec<_> = (0..4).map(|_| client()).collect();
    let joins = (0..200).map(|i| {
        let (client, group, terms) = (clients[i % 4].clone(), group.clone(), terms.clone());
        tokio::spawn(async move {
            let member = OwnerToken::random();
            let entered = client.enter(&group, &member, &terms, true).await.unwrap();
            (admitted(&entered.entry), entered.admitted_waits.len())
        })
    });
    let results = futures_util::future::join_all(joins).await;
    let admitted_count = results.iter().filter(|r| r.as_ref().unwrap().0).count();
    let reported: usize = results.iter().map(|r| r.as_ref().unwrap().1).sum();
    assert_eq!(admitted_count, 5);
    assert_eq!(reported, 5, "each admission reported by exactly one call");
}

#[tokio::test]
async fn a_lapsed_admission_admits_the_next_member() {
    let (client, group) = (client(), group());
    let terms = RoomTerms {
        admission_ttl: Duration::from_millis(300),
        ..terms(1)
    };
    let m = members(2);
    assert!(admitted(&entry(&client, &group, &m[0], &terms).await));
    assert_eq!(position(&entry(&client, &group, &m[1], &terms).await), 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let next = client.enter(&group, &m[1], &terms, true).await.unwrap();
    assert!(admitted(&next.entry), "{next:?}");
    assert_eq!(next.admitted_waits.len(), 1);
    // The member whose admission lapsed queues again, at the back.
    assert_eq!(position(&entry(&client, &group, &m[0], &terms).await), 1);
}

#[tokio::test]
async fn a_hold_needs_a_live_admission_checked_in_its_own_script() {
    let (client, group) = (client(), group());
    let terms = RoomTerms {
        admission_ttl: Duration::from_millis(400),
        ..terms(1)
    };
    let seat = |n: u32| LeaseKey::new(group.clone(), n.to_string()).unwrap();
    let ttl = Duration::from_secs(10);
    let (a, b) = (OwnerToken::random(), OwnerToken::random());
    assert!(admitted(&entry(&client, &group, &a, &terms).await));
    assert_eq!(position(&entry(&client, &group, &b, &terms).await), 1);

    // Queued, never admitted: refused, nothing written.
    let refused = client
        .acquire_admitted(&[seat(1)], "b", ttl, None, &b)
        .await;
    assert!(
        matches!(refused, Err(LeaseError::NotAdmitted)),
        "{refused:?}"
    );
    assert!(client.holders(&group).await.unwrap().holdings.is_empty());

    let held = client
        .acquire_admitted(&[seat(1)], "a", ttl, None, &a)
        .await
        .unwrap();
    // The admission lapses: no more seats, but the hold keeps its own TTL.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let refused = client
        .acquire_admitted(&[seat(2)], "a", ttl, None, &a)
        .await;
    assert!(
        matches!(refused, Err(LeaseError::NotAdmitted)),
        "{refused:?}"
    );
    assert!(client.is_held(&held[0]).await.unwrap());

    // The next member is admitted, holds, and after leaving may not hold again.
    assert!(admitted(&entry(&client, &group, &b, &terms).await));
    client
        .acquire_admitted(&[seat(2)], "b", ttl, None, &b)
        .await
        .unwrap();
    assert!(client.leave(&group, &b).await.unwrap());
    let refused = client
        .acquire_admitted(&[seat(3)], "b", ttl, None, &b)
        .await;
    assert!(
        matches!(refused, Err(LeaseError::NotAdmitted)),
        "{refused:?}"
    );
}

#[tokio::test]
async fn the_pre_queue_is_shuffled_once_and_ahead_of_later_arrivals() {
    let (client, group) = (client(), group());
    let terms = RoomTerms {
        on_sale_at_ms: redis_now_ms(&client).await + 700,
        ..terms(1)
    };
    let early = members(20);
    for member in &early {
        let e = entry(&client, &group, member, &terms).await;
        assert!(matches!(e, Entry::PreQueue { .. }), "{e:?}");
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let late = OwnerToken::random();
    // The first enter after the on-sale admits the pre-queue's drawn first.
    let late_entry = entry(&client, &group, &late, &terms).await;
    assert_eq!(
        position(&late_entry),
        20,
        "after all 19 still queued early members"
    );
    let mut places = vec![];
    let mut admitted_early = 0;
    for member in &early {
        match entry(&client, &group, member, &terms).await {
            Entry::Queued { position, .. } => places.push(position),
            Entry::Admitted { .. } => admitted_early += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(admitted_early, 1);
    let mut sorted = places.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (1..=19).collect::<Vec<_>>(), "a permutation");
    assert_ne!(places, sorted, "not in join order (a 1 in 19! chance)");
}

#[tokio::test]
async fn a_queued_member_that_stops_asking_loses_its_place() {
    let (client, group) = (client(), group());
    let terms = RoomTerms {
        grace: Duration::from_millis(300),
        ..terms(1)
    };
    let m = members(3);
    assert!(admitted(&entry(&client, &group, &m[0], &terms).await));
    assert_eq!(position(&entry(&client, &group, &m[1], &terms).await), 1);
    assert_eq!(position(&entry(&client, &group, &m[2], &terms).await), 2);
    // m[1] closes its tab; m[2] keeps asking.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        entry(&client, &group, &m[2], &terms).await;
        entry(&client, &group, &m[0], &terms).await;
    }
    assert_eq!(position(&entry(&client, &group, &m[2], &terms).await), 1);
    assert!(client.leave(&group, &m[0]).await.unwrap());
    assert!(admitted(&entry(&client, &group, &m[2], &terms).await));
}

#[tokio::test]
async fn visits_renew_an_admission_up_to_its_cap() {
    let (client, group) = (client(), group());
    let terms = RoomTerms {
        admission_ttl: Duration::from_millis(1_000),
        admission_cap: Duration::from_millis(1_500),
        ..terms(1)
    };
    let member = OwnerToken::random();
    let Entry::Admitted {
        expires_at_ms: first,
        ..
    } = entry(&client, &group, &member, &terms).await
    else {
        panic!("admitted")
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let Entry::Admitted {
        expires_at_ms: renewed,
        ..
    } = entry(&client, &group, &member, &terms).await
    else {
        panic!("still admitted")
    };
    assert!(renewed >= first + 250, "renewed: {first} -> {renewed}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let Entry::Admitted {
        expires_at_ms: capped,
        ..
    } = entry(&client, &group, &member, &terms).await
    else {
        panic!("still admitted")
    };
    // Admitted at first - 1000; never past that + 1500.
    assert!(
        capped <= first + 500,
        "capped at the admission + cap: {capped} vs {first}"
    );
}

#[tokio::test]
async fn an_admitted_member_that_never_arrives_frees_its_place_after_the_arrival_window() {
    let (client, group) = (client(), group());
    let terms = RoomTerms {
        arrival_window: Duration::from_millis(1_000),
        ..terms(1)
    };
    let m = members(3);
    assert!(admitted(&entry(&client, &group, &m[0], &terms).await));
    assert_eq!(position(&entry(&client, &group, &m[1], &terms).await), 1);
    assert_eq!(position(&entry(&client, &group, &m[2], &terms).await), 2);
    // m[0] buys and leaves; m[2]'s call admits m[1], whose tab has just closed.
    assert!(client.leave(&group, &m[0]).await.unwrap());
    assert_eq!(position(&entry(&client, &group, &m[2], &terms).await), 1);
    // m[1] never arrives: after the arrival window its place passes to m[2], not after
    // a whole admission TTL (a minute here).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(position(&entry(&client, &group, &m[2], &terms).await), 1);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(admitted(&entry(&client, &group, &m[2], &terms).await));
}

#[tokio::test]
async fn a_member_admitted_by_its_own_poll_or_first_call_gets_only_the_arrival_window() {
    let (client, group) = (client(), group());
    let terms = RoomTerms {
        arrival_window: Duration::from_millis(300),
        ..terms(1)
    };
    let m = members(2);
    // A first call that is not "here" (seatlock: a crawler's cookieless visit, or a
    // frozen queue page's stream) admits for the window only, then the place passes on.
    assert!(admitted(&poll(&client, &group, &m[0], &terms).await));
    assert_eq!(position(&poll(&client, &group, &m[1], &terms).await), 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(admitted(&poll(&client, &group, &m[1], &terms).await));
    // Here within the window: the full admission (a minute), which a poll keeps.
    let Entry::Admitted { expires_at_ms, .. } = entry(&client, &group, &m[1], &terms).await else {
        panic!("admitted")
    };
    assert!(expires_at_ms > redis_now_ms(&client).await + 30_000);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(admitted(&poll(&client, &group, &m[1], &terms).await));
}

#[tokio::test]
async fn a_stall_of_the_store_longer_than_the_grace_costs_no_place() {
    let (client, group) = (client(), group());
    let terms = RoomTerms {
        grace: Duration::from_millis(600),
        ..terms(1)
    };
    let m = members(6);
    for member in &m {
        entry(&client, &group, member, &terms).await;
    }
    // Nobody calls for twice the grace, as when Redis or every server is stopped; then
    // the last member calls first.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    for (i, member) in m.iter().enumerate().skip(1).rev() {
        assert_eq!(
            position(&poll(&client, &group, member, &terms).await),
            i as u64,
            "member {i}"
        );
    }
}

#[tokio::test]
async fn leaving_the_pre_queue_and_joining_again_draws_the_same_place() {
    let (client, group) = (client(), group());
    let terms = RoomTerms {
        on_sale_at_ms: redis_now_ms(&client).await + 60_000,
        ..terms(1)
    };
    let member = OwnerToken::random();
    let queue = format!("lease:{{{group}}}:~queue");
    let place = async || -> f64 {
        redis::cmd("ZSCORE")
            .arg(&queue)
            .arg(member.as_str())
            .query_async(&mut client.redis())
            .await
            .unwrap()
    };
    assert!(matches!(
        entry(&client, &group, &member, &terms).await,
        Entry::PreQueue { .. }
    ));
    let drawn = place().await;
    assert!(drawn > 0.0 && drawn < 1.0, "{drawn}");
    for _ in 0..3 {
        assert!(!client.leave(&group, &member).await.unwrap(), "only queued");
        entry(&client, &group, &member, &terms).await;
        assert_eq!(place().await, drawn, "the same draw");
    }
}
