//! Group holds (`LeaseClient::acquire_all`) against a real Redis (`REDIS_URL`): all or
//! none, one fencing token per group, a per-holder limit counted by Redis, no partial
//! group under races. Each test uses its own random group.

use std::sync::Arc;
use std::time::Duration;

use lease::{
    Extension, FencingToken, Grant, Lease, LeaseClient, LeaseError, LeaseKey, LeaseStore,
    MemoryLedger,
};
use rand::Rng;
use redis::AsyncCommands;

fn client(block_size: u64) -> Arc<LeaseClient<MemoryLedger>> {
    let url = std::env::var("REDIS_URL").expect("REDIS_URL is set by `make test`");
    let redis = lease::connect(&url, Duration::from_secs(2)).unwrap();
    Arc::new(LeaseClient::new(redis, MemoryLedger::new()).with_block_size(block_size))
}

/// Keys `names` of one fresh random group.
fn keys(names: &[u32]) -> Vec<LeaseKey> {
    let group = format!("test:{:x}", rand::rng().random::<u64>());
    names
        .iter()
        .map(|n| LeaseKey::new(group.clone(), n.to_string()).unwrap())
        .collect()
}

async fn exists(client: &LeaseClient<MemoryLedger>, key: &LeaseKey) -> bool {
    let mut conn = client.redis();
    conn.exists(key.lease_key()).await.unwrap()
}

/// One token and one owner for every lease of a group grant, in the order asked.
fn assert_one_grant(leases: &[Lease], keys: &[LeaseKey]) {
    assert_eq!(leases.len(), keys.len());
    for (lease, key) in leases.iter().zip(keys) {
        assert_eq!(lease.key(), key);
        assert_eq!(lease.fencing_token(), leases[0].fencing_token());
        assert_eq!(lease.owner(), leases[0].owner());
    }
}

#[tokio::test]
async fn a_group_hold_is_all_or_none_when_one_seat_is_held() {
    let client = client(100);
    let ttl = Duration::from_secs(10);
    let seats = keys(&[1, 2, 3, 4]);
    let b = client.acquire(&seats[2], "b", ttl).await.unwrap();
    let refused = client
        .acquire_all(&Grant::new(&seats, "a", ttl).limit(8))
        .await;
    assert!(
        matches!(&refused, Err(LeaseError::Held { holder, .. }) if holder == "b"),
        "{refused:?}"
    );
    for seat in [&seats[0], &seats[1], &seats[3]] {
        assert!(!exists(&client, seat).await, "{seat:?} was not granted");
    }
    let snapshot = client.holders(seats[0].group()).await.unwrap();
    assert_eq!(snapshot.holdings.len(), 1, "only b's hold is listed");

    assert!(client.release(&b).await.unwrap());
    let group = client
        .acquire_all(&Grant::new(&seats, "a", ttl).limit(8))
        .await
        .unwrap();
    assert_one_grant(&group, &seats);
    assert!(group[0].fencing_token() > b.fencing_token());
    let snapshot = client.holders(seats[0].group()).await.unwrap();
    assert_eq!(snapshot.holdings.len(), 4);
    assert!(snapshot.holdings.iter().all(|h| h.holder == "a"
        && h.fencing_token == group[0].fencing_token()
        && h.expires_at_ms == group[0].expires_at_ms()));
}

#[tokio::test]
async fn owners_racing_for_overlapping_groups_get_all_or_nothing_never_part_of_one() {
    let client = client(100);
    let ttl = Duration::from_secs(10);
    for round in 0..60 {
        // a wants 1-4, b wants 3-6: they overlap on 3 and 4.
        let seats = keys(&[1, 2, 3, 4, 5, 6]);
        let want_a = seats[0..4].to_vec();
        let want_b = seats[2..6].to_vec();
        let race = |want: Vec<LeaseKey>, who: &'static str| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .acquire_all(&Grant::new(&want, who, ttl).limit(8))
                    .await
            })
        };
        let (a, b) = tokio::join!(race(want_a.clone(), "a"), race(want_b.clone(), "b"));
        let (a, b) = (a.unwrap(), b.unwrap());
        let (winner, loser_only, loser_err) = match (&a, &b) {
            (Ok(won), Err(err)) => (won, &seats[4..6], err),
            (Err(err), Ok(won)) => (won, &seats[0..2], err),
            _ => panic!("round {round}: exactly one group is granted: {a:?} {b:?}"),
        };
        assert!(
            matches!(loser_err, LeaseError::Held { .. }),
            "{loser_err:?}"
        );
        assert_eq!(winner.len(), 4);
        for seat in loser_only {
            assert!(
                !exists(&client, seat).await,
                "round {round}: no part of the losing group is held"
            );
        }
        let snapshot = client.holders(seats[0].group()).await.unwrap();
        assert_eq!(snapshot.holdings.len(), 4, "round {round}");
        let holder = &snapshot.holdings[0].holder;
        assert!(
            snapshot
                .holdings
                .iter()
                .all(|h| &h.holder == holder && h.fencing_token == winner[0].fencing_token())
        );
    }
}

#[tokio::test]
async fn the_holder_limit_refuses_past_it_and_frees_with_releases_and_lapses() {
    let client = client(100);
    let ttl = Duration::from_secs(10);
    let seats = keys(&(1..=12).collect::<Vec<_>>());
    // 4 together and 4 one by one: 8, the limit.
    let group = client
        .acquire_all(&Grant::new(&seats[0..4], "a", ttl).limit(8))
        .await
        .unwrap();
    let mut singles = Vec::new();
    for seat in &seats[4..8] {
        let mut one = client
            .acquire_all(&Grant::new(std::slice::from_ref(seat), "a", ttl).limit(8))
            .await
            .unwrap();
        singles.push(one.remove(0));
    }
    let ninth = client
        .acquire_all(&Grant::new(&seats[8..9], "a", ttl).limit(8))
        .await;
    assert!(
        matches!(ninth, Err(LeaseError::OverLimit { held: 8, limit: 8 })),
        "{ninth:?}"
    );
    assert!(!exists(&client, &seats[8]).await);
    // Another holder is not counted against a.
    client
        .acquire_all(&Grant::new(&seats[9..10], "b", ttl).limit(8))
        .await
        .unwrap();

    // A release frees one place, not two: a pair is still refused, with the count.
    assert!(client.release(&group[0]).await.unwrap());
    let pair = client
        .acquire_all(&Grant::new(&seats[8..10], "a", ttl).limit(8))
        .await;
    assert!(
        matches!(pair, Err(LeaseError::Held { .. })),
        "seat 10 is b's: {pair:?}"
    );
    let pair = client
        .acquire_all(&Grant::new(&[seats[8].clone(), seats[10].clone()], "a", ttl).limit(8))
        .await;
    assert!(
        matches!(pair, Err(LeaseError::OverLimit { held: 7, limit: 8 })),
        "{pair:?}"
    );
    client
        .acquire_all(&Grant::new(&seats[8..9], "a", ttl).limit(8))
        .await
        .unwrap();

    // A lapsed lease is not counted (Redis's clock), nor one that was retired.
    let short = keys(&[1, 2, 3]);
    client
        .acquire_all(&Grant::new(&short[0..2], "c", Duration::from_millis(1_000)).limit(2))
        .await
        .unwrap();
    let refused = client
        .acquire_all(&Grant::new(&short[2..3], "c", ttl).limit(2))
        .await;
    assert!(matches!(
        refused,
        Err(LeaseError::OverLimit { held: 2, limit: 2 })
    ));
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let granted = client
        .acquire_all(&Grant::new(&short[1..3], "c", ttl).limit(2))
        .await
        .unwrap();
    assert!(client.retire(&granted[0]).await.unwrap());
    client
        .acquire_all(&Grant::new(&short[0..1], "c", ttl).limit(2))
        .await
        .unwrap();
}

#[tokio::test]
async fn group_tokens_never_go_backwards_across_a_ceiling_boundary() {
    // Blocks of 3 tokens: the grants below cross a ceiling every few calls, each time
    // through the "reserve a block" reply.
    let client = client(3);
    let seats = keys(&(1..=8).collect::<Vec<_>>());
    let ttl = Duration::from_secs(10);
    let mut last = FencingToken(0);
    for round in 0..12 {
        let want = if round % 3 == 0 {
            &seats[0..1]
        } else {
            &seats[round % 2 * 4..round % 2 * 4 + 4]
        };
        let leases = client
            .acquire_all(&Grant::new(want, "a", ttl))
            .await
            .unwrap();
        assert_one_grant(&leases, want);
        assert!(
            leases[0].fencing_token() > last,
            "round {round}: {:?} after {last:?}",
            leases[0].fencing_token()
        );
        last = leases[0].fencing_token();
        for lease in &leases {
            assert!(client.release(lease).await.unwrap());
        }
    }
    assert_eq!(last, FencingToken(12), "one token per grant, none skipped");
}

#[tokio::test]
async fn a_group_of_several_groups_or_a_name_twice_is_refused_before_redis() {
    let client = client(100);
    let ttl = Duration::from_secs(10);
    let (a, b) = (keys(&[1]), keys(&[2]));
    for bad in [
        vec![],
        vec![a[0].clone(), b[0].clone()],
        vec![a[0].clone(), a[0].clone()],
    ] {
        let refused = client.acquire_all(&Grant::new(&bad, "a", ttl)).await;
        assert!(
            matches!(refused, Err(LeaseError::NotOneGroup)),
            "{refused:?}"
        );
    }
    assert!(!exists(&client, &a[0]).await);
}

/// The holder's set, which a limited grant counts and `held_by` lists, follows an
/// extension: it lives as long as the longest extended lease, not the grant's TTL. Before
/// the fix it expired at the grant's TTL, and an extended hold fell out of the buyer's
/// cart and out of their limit while still held.
#[tokio::test]
async fn the_holders_set_lives_as_long_as_its_extended_leases() {
    let client = client(100);
    let keys = keys(&[1]);
    let ttl = Duration::from_millis(400);
    let grant = Grant::new(&keys, "alice", ttl).limit(4);
    let leases = client.acquire_all(&grant).await.unwrap();
    let more = Extension::new("alice", Duration::from_secs(30));
    let extended = client.extend_all(&leases, &more).await.unwrap();
    let mut conn = client.redis();
    let set_ttl: i64 = conn.pttl(keys[0].held_by_key("alice")).await.unwrap();
    let lease_ttl: i64 = conn.pttl(keys[0].lease_key()).await.unwrap();
    let record_ttl: i64 = conn.pttl(keys[0].extension_key()).await.unwrap();
    assert!(
        lease_ttl > 400,
        "extended past the grant's TTL: {lease_ttl} ms"
    );
    assert!(set_ttl >= lease_ttl, "{set_ttl} ms < {lease_ttl} ms");
    assert!(
        record_ttl <= lease_ttl + 1,
        "the record lapses with the lease"
    );
    assert_eq!(
        extended.leases[0].fencing_token(),
        leases[0].fencing_token()
    );
    let listed = client.held_by(keys[0].group(), "alice").await.unwrap();
    assert_eq!(listed.holdings.len(), 1);
}
