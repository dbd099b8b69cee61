//! The waiting room (`lease::room`) against a real Redis (`REDIS_URL`): one place per
//! holder in join order, the ticker's frontier never admitting more than N, lapsed
//! admissions and missed turns freeing their places, places left before their turn
//! skipped, a hold needing a live admission, the pre-queue, the fence on a late ticker,
//! the room's message on the channel, and a room Redis lost. Each test uses its own
//! random group.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::join_all;
use lease::{
    Arrival, Extension, FencingToken, Grant, LeaseClient, LeaseError, LeaseKey, LeaseStore,
    MemoryLedger, OwnerToken, Place, RoomTerms, RoomView, Tick,
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
        arrival_window: Duration::from_secs(60),
        on_sale_at_ms: 0,
    }
}

/// A holder of the room: its label, its admission's owner token, and its ticket.
struct Holder {
    label: String,
    member: OwnerToken,
    place: u64,
    epoch: String,
}

/// `n` holders join in turn; each gets the next place in line.
async fn join_in_turn(
    client: &LeaseClient<MemoryLedger>,
    group: &str,
    n: usize,
    terms: &RoomTerms,
) -> Vec<Holder> {
    let mut holders = Vec::new();
    for i in 0..n {
        let label = format!("h{i}");
        let joined = client.join(group, &label, terms).await.unwrap();
        assert_eq!(joined.place, Place::Line(i as u64 + 1), "{label}");
        holders.push(Holder {
            label,
            member: OwnerToken::random(),
            place: i as u64 + 1,
            epoch: joined.epoch,
        });
    }
    holders
}

async fn arrive(
    client: &LeaseClient<MemoryLedger>,
    group: &str,
    h: &Holder,
    terms: &RoomTerms,
) -> Arrival {
    let ticket = (Place::Line(h.place), h.place, h.epoch.as_str());
    (client
        .arrive(group, &h.label, &h.member, ticket, terms)
        .await)
        .unwrap()
}

/// One tick by the ticker holding `token`; the view it published.
async fn tick(
    client: &LeaseClient<MemoryLedger>,
    group: &str,
    token: u64,
    terms: &RoomTerms,
) -> RoomView {
    match client
        .tick(group, FencingToken(token), terms)
        .await
        .unwrap()
    {
        Tick::Ticked(view) => view,
        fenced => panic!("token {token}: {fenced:?}"),
    }
}

fn admitted(arrival: &Arrival) -> bool {
    matches!(arrival, Arrival::Admitted { .. })
}

#[tokio::test]
async fn holders_get_one_place_each_in_join_order_and_turns_come_in_that_order() {
    let (client, group, terms) = (client(), group(), terms(2));
    let h = join_in_turn(&client, &group, 5, &terms).await;
    // A second join (another tab, a lost ticket) gets the same place.
    let again = client.join(&group, &h[3].label, &terms).await.unwrap();
    assert_eq!(again.place, Place::Line(4));

    let view = tick(&client, &group, 1, &terms).await;
    assert_eq!((view.frontier, view.issued, view.shopping), (2, 5, 2));
    assert_eq!(view.waiting(), 3);
    assert_eq!(
        arrive(&client, &group, &h[2], &terms).await,
        Arrival::Waiting
    );
    assert!(admitted(&arrive(&client, &group, &h[0], &terms).await));
    assert!(admitted(&arrive(&client, &group, &h[1], &terms).await));
    // Full: a tick moves nothing.
    assert_eq!(tick(&client, &group, 1, &terms).await.frontier, 2);

    // One leaves: the next tick gives the next place its turn.
    let ticket = (h[0].place, h[0].epoch.as_str());
    assert!(
        client
            .leave(&group, &h[0].label, &h[0].member, ticket)
            .await
            .unwrap()
    );
    assert_eq!(tick(&client, &group, 1, &terms).await.frontier, 3);
    assert!(admitted(&arrive(&client, &group, &h[2], &terms).await));
    assert_eq!(
        arrive(&client, &group, &h[3], &terms).await,
        Arrival::Waiting
    );
    // A holder who left and comes back with the old ticket is at the back.
    assert_eq!(
        arrive(&client, &group, &h[0], &terms).await,
        Arrival::Spent { place: 6 }
    );
}

#[tokio::test]
async fn a_burst_of_joins_and_ticks_never_has_more_than_n_shopping() {
    let (client, group, terms) = (client(), group(), terms(3));
    let joins = (0..50).map(|i| {
        let (client, group, terms) = (client.clone(), group.clone(), terms.clone());
        async move { client.join(&group, &format!("h{i}"), &terms).await.unwrap() }
    });
    let mut places: Vec<u64> = join_all(joins)
        .await
        .into_iter()
        .map(|j| match j.place {
            Place::Line(n) => n,
            pre => panic!("{pre:?}"),
        })
        .collect();
    places.sort_unstable();
    assert_eq!(places, (1..=50).collect::<Vec<_>>(), "one place each");
    let ticks = (0..10).map(|_| {
        let (client, group, terms) = (client.clone(), group.clone(), terms.clone());
        async move { tick(&client, &group, 1, &terms).await }
    });
    for view in join_all(ticks).await {
        assert!(view.shopping <= 3, "{view:?}");
        assert_eq!(view.frontier, 3, "{view:?}");
    }
}

#[tokio::test]
async fn a_lapsed_admission_frees_its_place_at_the_next_tick() {
    let (client, group) = (client(), group());
    let terms = RoomTerms {
        admission_ttl: Duration::from_millis(1_000),
        admission_cap: Duration::from_millis(2_000),
        ..terms(1)
    };
    let h = join_in_turn(&client, &group, 2, &terms).await;
    tick(&client, &group, 1, &terms).await;
    assert!(admitted(&arrive(&client, &group, &h[0], &terms).await));
    assert_eq!(tick(&client, &group, 1, &terms).await.frontier, 1);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let view = tick(&client, &group, 1, &terms).await;
    assert_eq!((view.frontier, view.shopping), (2, 1), "{view:?}");
    assert!(admitted(&arrive(&client, &group, &h[1], &terms).await));
    // The lapsed holder's old ticket puts it at the back.
    assert_eq!(
        arrive(&client, &group, &h[0], &terms).await,
        Arrival::Spent { place: 3 }
    );
}

#[tokio::test]
async fn a_turn_not_taken_within_the_arrival_window_is_over_and_frees_its_place() {
    let (client, group) = (client(), group());
    let terms = RoomTerms {
        arrival_window: Duration::from_millis(1_000),
        ..terms(1)
    };
    let h = join_in_turn(&client, &group, 2, &terms).await;
    assert_eq!(tick(&client, &group, 1, &terms).await.shopping, 1);
    // Half the window on: still h0's turn.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(tick(&client, &group, 1, &terms).await.frontier, 1);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let view = tick(&client, &group, 1, &terms).await;
    assert_eq!((view.frontier, view.shopping), (2, 1), "{view:?}");
    assert_eq!(
        arrive(&client, &group, &h[0], &terms).await,
        Arrival::Spent { place: 3 }
    );
    assert!(admitted(&arrive(&client, &group, &h[1], &terms).await));
}

#[tokio::test]
async fn a_place_left_before_its_turn_is_skipped() {
    let (client, group, terms) = (client(), group(), terms(1));
    let h = join_in_turn(&client, &group, 3, &terms).await;
    tick(&client, &group, 1, &terms).await;
    let ticket = (h[1].place, h[1].epoch.as_str());
    assert!(
        !client
            .leave(&group, &h[1].label, &h[1].member, ticket)
            .await
            .unwrap()
    );
    // The leaver joins again at the back.
    let back = client.join(&group, &h[1].label, &terms).await.unwrap();
    assert_eq!(back.place, Place::Line(4));
    assert!(admitted(&arrive(&client, &group, &h[0], &terms).await));
    let ticket = (h[0].place, h[0].epoch.as_str());
    client
        .leave(&group, &h[0].label, &h[0].member, ticket)
        .await
        .unwrap();
    // Place 2 was left: place 3's turn comes next, and only it.
    let view = tick(&client, &group, 1, &terms).await;
    assert_eq!((view.frontier, view.shopping), (3, 1), "{view:?}");
    assert!(admitted(&arrive(&client, &group, &h[2], &terms).await));
}

#[tokio::test]
async fn a_ticket_kept_from_a_place_left_admits_nobody_and_a_leave_without_a_ticket_skips_the_place()
 {
    let (client, group, terms) = (client(), group(), terms(1));
    let h = join_in_turn(&client, &group, 3, &terms).await;
    // h0 shops; h1 keeps its ticket for place 2 but leaves without showing it.
    tick(&client, &group, 1, &terms).await;
    assert!(admitted(&arrive(&client, &group, &h[0], &terms).await));
    let no_ticket = (0, "");
    client
        .leave(&group, &h[1].label, &h[1].member, no_ticket)
        .await
        .unwrap();
    // Its next join is at the back: one place per holder, and the new one counts.
    let back = client.join(&group, &h[1].label, &terms).await.unwrap();
    assert_eq!(back.place, Place::Line(4));
    // h0 is done; the room's record skipped place 2, so place 3 is next.
    client
        .leave(&group, &h[0].label, &h[0].member, (1, h[0].epoch.as_str()))
        .await
        .unwrap();
    let view = tick(&client, &group, 1, &terms).await;
    assert_eq!((view.frontier, view.shopping), (3, 1), "{view:?}");
    // The kept ticket names a place h1 no longer has: stale, nothing admitted.
    let kept = arrive(&client, &group, &h[1], &terms).await;
    assert_eq!(kept, Arrival::OtherEpoch, "the kept ticket is refused");
    assert!(admitted(&arrive(&client, &group, &h[2], &terms).await));
}

#[tokio::test]
async fn a_hold_and_its_extension_need_a_live_admission_checked_in_their_own_scripts() {
    let (client, group) = (client(), group());
    let terms = RoomTerms {
        admission_ttl: Duration::from_millis(1_000),
        ..terms(1)
    };
    let seat = |n: u32| LeaseKey::new(group.clone(), n.to_string()).unwrap();
    let ttl = Duration::from_secs(10);
    let h = join_in_turn(&client, &group, 2, &terms).await;
    tick(&client, &group, 1, &terms).await;

    // A turn that came is not an admission until the holder arrives; one in line never
    // is: refused, nothing written.
    for holder in &h {
        let refused = client
            .acquire_all(
                &Grant::new(&[seat(1)], &holder.label, ttl).admission(holder.member.clone()),
            )
            .await;
        assert!(
            matches!(refused, Err(LeaseError::NotAdmitted)),
            "{refused:?}"
        );
    }
    assert!(client.holders(&group).await.unwrap().holdings.is_empty());

    assert!(admitted(&arrive(&client, &group, &h[0], &terms).await));
    let held = client
        .acquire_all(&Grant::new(&[seat(1)], &h[0].label, ttl).admission(h[0].member.clone()))
        .await
        .unwrap();
    // While admitted, the holder may ask for more time.
    let more = Extension::new(&h[0].label, ttl).admission(h[0].member.clone());
    let held = client.extend_all(&held, &more).await.unwrap().leases;
    // The admission lapses: no more seats, and no more time, but the hold keeps its own TTL.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let refused = client
        .acquire_all(&Grant::new(&[seat(2)], &h[0].label, ttl).admission(h[0].member.clone()))
        .await;
    assert!(
        matches!(refused, Err(LeaseError::NotAdmitted)),
        "{refused:?}"
    );
    let refused = client.extend_all(&held, &more).await;
    assert!(
        matches!(refused, Err(LeaseError::NotAdmitted)),
        "{refused:?}"
    );
    let kept = client
        .owned_by(&seat(1), &h[0].label)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.expires_at_ms(), held[0].expires_at_ms());
    assert!(client.is_held(&held[0]).await.unwrap());
}

#[tokio::test]
async fn the_pre_queue_joins_in_order_and_the_sale_opens_on_the_redis_clock() {
    let (client, group) = (client(), group());
    let now_ms = {
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut client.redis())
            .await
            .unwrap();
        secs * 1000 + micros / 1000
    };
    let terms = RoomTerms {
        on_sale_at_ms: now_ms + 1_000,
        ..terms(2)
    };
    for k in 1..=3 {
        let joined = client
            .join(&group, &format!("early{k}"), &terms)
            .await
            .unwrap();
        assert_eq!(joined.place, Place::PreQueue(k));
    }
    let view = tick(&client, &group, 1, &terms).await;
    assert_eq!((view.on_sale, view.frontier, view.prequeue), (false, 0, 3));
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    // After the on-sale the next holder comes after the pre-queue's three places.
    let late = client.join(&group, "late", &terms).await.unwrap();
    assert_eq!(late.place, Place::Line(4));
    let view = tick(&client, &group, 1, &terms).await;
    assert_eq!((view.on_sale, view.frontier, view.issued), (true, 2, 4));
}

#[tokio::test]
async fn a_paused_tickers_late_step_is_refused_by_the_fence() {
    let (client, group, terms) = (client(), group(), terms(1));
    let h = join_in_turn(&client, &group, 3, &terms).await;
    assert_eq!(tick(&client, &group, 41, &terms).await.frontier, 1);
    // A newer ticker takes over (token 42) and steps after h0 left.
    let ticket = (h[0].place, h[0].epoch.as_str());
    client
        .leave(&group, &h[0].label, &h[0].member, ticket)
        .await
        .unwrap();
    assert_eq!(tick(&client, &group, 42, &terms).await.frontier, 2);
    let ticket = (h[1].place, h[1].epoch.as_str());
    client
        .leave(&group, &h[1].label, &h[1].member, ticket)
        .await
        .unwrap();
    // The old ticker wakes: refused, nothing written though a place is free.
    let late = client.tick(&group, FencingToken(41), &terms).await.unwrap();
    assert_eq!(
        late,
        Tick::Fenced {
            highest: FencingToken(42)
        }
    );
    assert_eq!(client.room(&group).await.unwrap().unwrap().frontier, 2);
    assert_eq!(tick(&client, &group, 42, &terms).await.frontier, 3);
}

#[tokio::test]
async fn each_tick_publishes_the_room_on_the_groups_channel_as_it_reads() {
    let (client, group, terms) = (client(), group(), terms(2));
    let url = std::env::var("REDIS_URL").unwrap();
    let mut pubsub = redis::Client::open(url)
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    let channel = LeaseKey::new(group.clone(), "x").unwrap().events_channel();
    pubsub.subscribe(&channel).await.unwrap();
    join_in_turn(&client, &group, 3, &terms).await;
    let view = tick(&client, &group, 1, &terms).await;
    let message = tokio::time::timeout(Duration::from_secs(5), pubsub.on_message().next())
        .await
        .unwrap()
        .unwrap();
    let payload: String = message.get_payload().unwrap();
    assert_eq!(RoomView::parse(&payload), Some(view.clone()));
    let read = client.room(&group).await.unwrap().unwrap();
    assert_eq!(
        (read.epoch, read.frontier, read.issued, read.shopping),
        (view.epoch, 2, 3, 2)
    );
}

#[tokio::test]
async fn visits_renew_an_admission_up_to_its_cap() {
    let (client, group) = (client(), group());
    let terms = RoomTerms {
        admission_ttl: Duration::from_millis(1_000),
        admission_cap: Duration::from_millis(1_500),
        ..terms(1)
    };
    let h = join_in_turn(&client, &group, 1, &terms).await;
    tick(&client, &group, 1, &terms).await;
    let Arrival::Admitted {
        expires_at_ms: first,
        arrived: true,
    } = arrive(&client, &group, &h[0], &terms).await
    else {
        panic!("admitted");
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    let Arrival::Admitted {
        expires_at_ms: renewed,
        arrived: false,
    } = arrive(&client, &group, &h[0], &terms).await
    else {
        panic!("renewed");
    };
    // Renewed, but to the cap (admitted + 1.5 s), not to now + 1 s.
    assert!(
        renewed > first && renewed <= first + 500,
        "{first} {renewed}"
    );
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(
        arrive(&client, &group, &h[0], &terms).await,
        Arrival::Spent { place: 2 },
        "past the cap the admission is over"
    );
}

#[tokio::test]
async fn a_ticket_of_a_room_redis_lost_is_of_another_epoch() {
    let (client, group, terms) = (client(), group(), terms(1));
    let h = join_in_turn(&client, &group, 1, &terms).await;
    tick(&client, &group, 1, &terms).await;
    let _: () = redis::cmd("DEL")
        .arg(format!("lease:{{{group}}}:~room"))
        .query_async(&mut client.redis())
        .await
        .unwrap();
    assert_eq!(
        arrive(&client, &group, &h[0], &terms).await,
        Arrival::OtherEpoch
    );
    let joined = client.join(&group, &h[0].label, &terms).await.unwrap();
    assert_ne!(joined.epoch, h[0].epoch);
}
