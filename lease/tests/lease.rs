//! The lease library against a real Redis (`REDIS_URL`, started by `make test`).
//! Each test uses its own random group, so tests can share one Redis. The fence ledger is
//! [`MemoryLedger`]: enough here, where Redis does not lose its data. (The application's
//! ledger is Postgres; see the app's tests for tokens surviving a Redis restart.)

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lease::{
    Backoff, FenceLedger, FencingToken, LeaseClient, LeaseError, LeaseKey, LeaseStore,
    MemoryLedger, WatchdogEvent,
};
use rand::Rng;
use redis::AsyncCommands;
use tokio::sync::Mutex;

fn client() -> Arc<LeaseClient<MemoryLedger>> {
    guarded_client(true)
}

/// A client with blocks of 100 tokens, its failover guard on or off.
fn guarded_client(failover_guard: bool) -> Arc<LeaseClient<MemoryLedger>> {
    let url = std::env::var("REDIS_URL").expect("REDIS_URL is set by `make test`");
    let redis = lease::connect(&url, Duration::from_secs(2)).unwrap();
    Arc::new(
        LeaseClient::new(redis, MemoryLedger::new())
            .with_block_size(100)
            .with_failover_guard(failover_guard),
    )
}

fn key(name: &str) -> LeaseKey {
    let group = format!("test:{:x}", rand::rng().random::<u64>());
    LeaseKey::new(group, name).unwrap()
}

async fn exists(client: &LeaseClient<MemoryLedger>, key: &LeaseKey) -> bool {
    let mut conn = client.redis().clone();
    conn.exists(key.lease_key()).await.unwrap()
}

#[tokio::test]
async fn only_one_caller_gets_the_lease() {
    let client = client();
    let key = key("14C");
    let a = client
        .acquire(&key, "buyer-a", Duration::from_secs(10))
        .await
        .unwrap();
    match client
        .acquire(&key, "buyer-b", Duration::from_secs(10))
        .await
    {
        Err(LeaseError::Held { holder, remaining }) => {
            assert_eq!(holder, "buyer-a");
            assert!(remaining > Duration::ZERO && remaining <= Duration::from_secs(10));
        }
        other => panic!("expected Held, got {other:?}"),
    }
    assert_eq!(a.owner().as_str().len(), 32, "128-bit owner token as hex");
}

#[tokio::test]
async fn pttl_right_after_a_grant_is_within_the_ttl() {
    let client = client();
    for ttl_ms in [1_000, 10_000, 600_000] {
        let key = key("1");
        let ttl = Duration::from_millis(ttl_ms);
        client.acquire(&key, "a", ttl).await.unwrap();
        let remaining = client
            .remaining(&key)
            .await
            .unwrap()
            .expect("a TTL is set, never -1");
        assert!(
            remaining > Duration::ZERO && remaining <= ttl,
            "{remaining:?} of {ttl:?}"
        );
    }
}

#[tokio::test]
async fn release_checks_the_owner() {
    let client = client();
    let key = key("1");
    let lease = client
        .acquire(&key, "a", Duration::from_secs(10))
        .await
        .unwrap();
    let forged = lease::Lease::from_parts(
        lease.key().clone(),
        lease::OwnerToken::random(),
        lease.fencing_token(),
        lease.ttl(),
        lease.expires_at_ms(),
    );
    assert!(
        !client.release(&forged).await.unwrap(),
        "a forged owner token releases nothing"
    );
    assert!(exists(&client, &key).await);
    assert!(client.release(&lease).await.unwrap());
    assert!(!exists(&client, &key).await);
    assert!(
        !client.release(&lease).await.unwrap(),
        "a second release is a no-op"
    );
    assert!(
        client
            .holders(key.group())
            .await
            .unwrap()
            .holdings
            .is_empty()
    );
}

#[tokio::test]
async fn an_expired_lease_goes_to_the_next_caller_with_a_larger_token() {
    let client = client();
    let key = key("1");
    let a = client
        .acquire(&key, "a", Duration::from_millis(300))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let b = client
        .acquire(&key, "b", Duration::from_secs(10))
        .await
        .unwrap();
    assert!(b.fencing_token() > a.fencing_token());
    assert!(
        !client.release(&a).await.unwrap(),
        "A's late release must not delete B's lease"
    );
    assert!(exists(&client, &key).await);
    let holders = client.holders(key.group()).await.unwrap();
    assert_eq!(holders.holdings.len(), 1);
    assert_eq!(holders.holdings[0].holder, "b");
    assert_eq!(holders.holdings[0].fencing_token, b.fencing_token());
}

#[tokio::test]
async fn renew_extends_a_live_lease_and_never_recreates_an_expired_one() {
    let client = client();
    let key = key("1");
    // A 2 s TTL, renewed halfway, checked halfway between the first expiry and the
    // renewed one: each check has half a second to spare on a busy machine.
    let mut lease = client
        .acquire(&key, "a", Duration::from_millis(2_000))
        .await
        .unwrap();
    let first_expiry = lease.expires_at_ms();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(client.renew(&mut lease).await.unwrap());
    assert!(lease.expires_at_ms() > first_expiry);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        exists(&client, &key).await,
        "renewed: still held after the first TTL"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!exists(&client, &key).await);
    assert!(!client.renew(&mut lease).await.unwrap());
    assert!(
        !exists(&client, &key).await,
        "renew must not recreate the key"
    );
}

#[tokio::test]
async fn grants_under_contention_carry_strictly_increasing_tokens() {
    let client = client();
    let key = key("14C");
    let order = Arc::new(Mutex::new(Vec::new()));
    let inside = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..500)
        .map(|i| {
            let (client, key, order, inside) =
                (client.clone(), key.clone(), order.clone(), inside.clone());
            tokio::spawn(async move {
                loop {
                    match client
                        .acquire(&key, &format!("buyer-{i}"), Duration::from_secs(5))
                        .await
                    {
                        Ok(lease) => {
                            assert_eq!(
                                inside.fetch_add(1, Ordering::SeqCst),
                                0,
                                "two holders at once"
                            );
                            order.lock().await.push(lease.fencing_token());
                            inside.fetch_sub(1, Ordering::SeqCst);
                            assert!(client.release(&lease).await.unwrap());
                            return;
                        }
                        Err(LeaseError::Held { .. }) => tokio::task::yield_now().await,
                        Err(other) => panic!("{other}"),
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let order = order.lock().await;
    assert_eq!(order.len(), 500);
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "tokens in grant order must strictly increase"
    );
}

#[tokio::test]
async fn concurrent_holds_on_different_seats_get_distinct_tokens() {
    let client = client();
    let group = key("x").group().to_owned();
    let tasks: Vec<_> = (0..500)
        .map(|seat| {
            let client = client.clone();
            let key = LeaseKey::new(group.clone(), seat.to_string()).unwrap();
            tokio::spawn(async move {
                client
                    .acquire(&key, "a", Duration::from_secs(5))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut tokens: Vec<FencingToken> = Vec::new();
    for task in tasks {
        tokens.push(task.await.unwrap().fencing_token());
    }
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 500);
    assert_eq!(
        client.holders(&group).await.unwrap().holdings.len(),
        500,
        "one round trip lists them all"
    );
}

#[tokio::test]
async fn the_watchdog_keeps_a_lease_past_its_ttl_and_release_stops_it() {
    let client = client();
    let key = key("1");
    // Renewals every 400 ms, each with most of a TTL to spare on a busy machine.
    let lease = client
        .acquire(&key, "a", Duration::from_millis(1_200))
        .await
        .unwrap();
    let watchdog = client.watch(lease);
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    assert!(exists(&client, &key).await, "renewed every ttl/3");
    assert!(matches!(watchdog.status(), WatchdogEvent::Held { .. }));
    assert!(watchdog.release(&*client).await.unwrap());
    assert!(!exists(&client, &key).await);
}

#[tokio::test]
async fn the_watchdog_reports_a_lost_lease() {
    let client = client();
    let key = key("1");
    let lease = client
        .acquire(&key, "a", Duration::from_millis(300))
        .await
        .unwrap();
    let mut watchdog = client.watch(lease.clone());
    let _: () = client.redis().clone().del(key.lease_key()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), watchdog.lost())
        .await
        .expect("loss reported within a TTL");
    assert_eq!(watchdog.status(), WatchdogEvent::Lost);
    assert!(
        !exists(&client, &key).await,
        "the watchdog did not recreate it"
    );
}

/// Whether `key` still has an entry in its group's holders hash.
async fn listed(client: &LeaseClient<MemoryLedger>, key: &LeaseKey) -> bool {
    let mut conn = client.redis().clone();
    conn.hexists(key.holders_key(), key.name()).await.unwrap()
}

/// The group's last issued fencing token (the `~fence` hash's counter).
async fn fence_counter(client: &LeaseClient<MemoryLedger>, key: &LeaseKey) -> u64 {
    let mut conn = client.redis().clone();
    let counter: Option<u64> = conn.hget(key.fence_key(), "counter").await.unwrap();
    counter.unwrap_or(0)
}

#[tokio::test]
async fn a_retired_resource_is_never_granted_again_and_retire_releases_only_its_owners_lease() {
    let client = client();
    let ttl = Duration::from_secs(10);
    let key = key("1");
    let a = client.acquire(&key, "a", ttl).await.unwrap();
    assert!(
        client.retire(&a).await.unwrap(),
        "the owner's lease is released"
    );
    assert!(!exists(&client, &key).await && !listed(&client, &key).await);
    let issued = fence_counter(&client, &key).await;
    for _ in 0..2 {
        let refused = client.acquire(&key, "b", ttl).await;
        assert!(matches!(refused, Err(LeaseError::Retired)), "{refused:?}");
        // Idempotent: retiring again changes nothing and releases nothing.
        assert!(!client.retire(&a).await.unwrap());
    }
    assert!(!exists(&client, &key).await, "a refusal writes no lease");
    assert_eq!(
        fence_counter(&client, &key).await,
        issued,
        "nor takes a token"
    );

    // Retired by a holder whose lease lapsed: the next holder's lease is left alone (to
    // lapse or be released), and nobody is granted the resource any more.
    let other = LeaseKey::new(key.group(), "2").unwrap();
    let stale = client
        .acquire(&other, "a", Duration::from_millis(100))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let current = client.acquire(&other, "b", ttl).await.unwrap();
    assert!(!client.retire(&stale).await.unwrap());
    assert!(client.is_held(&current).await.unwrap());
    let refused = client.acquire(&other, "c", ttl).await;
    assert!(matches!(refused, Err(LeaseError::Retired)), "{refused:?}");
    assert!(client.release(&current).await.unwrap());
    // Other resources of the group are not retired.
    let third = LeaseKey::new(key.group(), "3").unwrap();
    assert!(client.acquire(&third, "c", ttl).await.is_ok());
}

/// The release and the renewal go out on two connections, one of them after a random
/// head start of up to 300 µs, so either can reach Redis first.
#[tokio::test]
async fn a_release_racing_a_renewal_never_leaves_a_key_behind() {
    let client = client();
    let renewer = self::client();
    let mut renewed_first = 0;
    for round in 0..200 {
        let key = key(&round.to_string());
        let lease = client
            .acquire(&key, "a", Duration::from_secs(5))
            .await
            .unwrap();
        let mut renewing = lease.clone();
        let head_start = Duration::from_micros(rand::rng().random_range(0..300));
        let release_late = round % 2 == 0;
        let renew = async {
            if !release_late {
                tokio::time::sleep(head_start).await;
            }
            renewer.renew(&mut renewing).await.unwrap()
        };
        let release = async {
            if release_late {
                tokio::time::sleep(head_start).await;
            }
            client.release(&lease).await.unwrap()
        };
        let (renewed, released) = tokio::join!(renew, release);
        renewed_first += u32::from(renewed);
        assert!(
            released,
            "round {round}: the owner's release always deletes"
        );
        assert!(
            !exists(&client, &key).await && !listed(&client, &key).await,
            "round {round}: key or holding left behind"
        );
    }
    println!("renewal reached Redis first in {renewed_first} of 200 rounds");
}

/// A watchdog renewing every 300 ms while someone releases its lease at a random moment
/// within two renewals: the watchdog reports the loss and never brings the key back. (The
/// 900 ms TTL leaves the watchdog half a second of slack on a loaded machine: with 30 ms,
/// a renewal late by one scheduling hiccup let the lease lapse before the release.)
#[tokio::test]
async fn a_watchdog_renewing_while_its_lease_is_released_never_recreates_it() {
    let client = client();
    for round in 0..30 {
        let key = key(&round.to_string());
        let lease = client
            .acquire(&key, "a", Duration::from_millis(900))
            .await
            .unwrap();
        let mut watchdog = client.watch(lease.clone());
        tokio::time::sleep(Duration::from_micros(rand::rng().random_range(0..600_000))).await;
        assert!(client.release(&lease).await.unwrap(), "round {round}");
        tokio::time::timeout(Duration::from_secs(2), watchdog.lost())
            .await
            .expect("the loss is reported");
        assert!(
            !exists(&client, &key).await && !listed(&client, &key).await,
            "round {round}: the watchdog recreated the lease"
        );
    }
}

#[tokio::test]
async fn tokens_come_from_ledger_blocks() {
    let client = client();
    let key = key("1");
    // Block size 100: 150 grants need two reservations and stay strictly increasing.
    let mut last = FencingToken(0);
    for _ in 0..150 {
        let lease = client
            .acquire(&key, "a", Duration::from_secs(5))
            .await
            .unwrap();
        assert!(lease.fencing_token() > last);
        last = lease.fencing_token();
        client.release(&lease).await.unwrap();
    }
    assert_eq!(last, FencingToken(150));
}

/// Makes the group's fence hash look like what a replica promoted by Sentinel holds when
/// it missed the last grant: the counter one behind, the block stamped by the old primary.
async fn rewind_as_a_promoted_replica(client: &LeaseClient<MemoryLedger>, key: &LeaseKey) {
    let mut conn = client.redis().clone();
    let counter = fence_counter(client, key).await;
    let () = conn
        .hset_multiple(
            key.fence_key(),
            &[
                ("counter", (counter - 1).to_string()),
                ("server", "old-primary-run-id:old-replid".to_owned()),
            ],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_block_stamped_by_another_server_is_never_issued_from() {
    for guard in [true, false] {
        let client = guarded_client(guard);
        let key = key("14");
        let a = client
            .acquire(&key, "a", Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(a.fencing_token(), FencingToken(1));
        let mut conn = client.redis().clone();
        let () = conn.del(key.lease_key()).await.unwrap(); // lost with the failover
        rewind_as_a_promoted_replica(&client, &key).await;
        let b = client
            .acquire(&key, "b", Duration::from_secs(5))
            .await
            .unwrap();
        if guard {
            // A fresh block from the ledger (its second: 101..=200), above every token.
            assert_eq!(b.fencing_token(), FencingToken(101), "guard on");
        } else {
            // The lab's bug: the same token for a second holder.
            assert_eq!(b.fencing_token(), a.fencing_token(), "guard off");
        }
    }
}

#[tokio::test]
async fn a_busy_lease_is_retried_with_backoff_then_given_up_or_granted() {
    let client = client();
    let key = key("item-7");
    let ttl = Duration::from_secs(10);
    let a = client.acquire(&key, "a", ttl).await.unwrap();
    let brief = Backoff {
        first: Duration::from_millis(1),
        cap: Duration::from_millis(10),
        attempts: 4,
        budget: Duration::from_secs(5),
    };
    match client.acquire_with_backoff(&key, "b", ttl, brief).await {
        Err(LeaseError::Held { holder, .. }) => assert_eq!(holder, "a"),
        other => panic!("expected Held after the attempts, got {other:?}"),
    }
    assert!(exists(&client, &key).await, "A still holds it");

    // B keeps retrying while A works, and gets the lease once A releases it.
    let patient = Backoff {
        attempts: 1_000,
        ..brief
    };
    let waiting = {
        let (client, key) = (Arc::clone(&client), key.clone());
        tokio::spawn(async move { client.acquire_with_backoff(&key, "b", ttl, patient).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(client.release(&a).await.unwrap());
    let b = waiting.await.unwrap().expect("granted after A's release");
    assert!(b.fencing_token() > a.fencing_token());
}

/// A ledger that cannot reserve anything, to see its error come back as the source.
struct BrokenLedger;

#[derive(Debug, thiserror::Error)]
#[error("ledger offline")]
struct Offline;

impl FenceLedger for BrokenLedger {
    type Error = Offline;

    async fn raise_ceiling(&self, _group: &str, _block: u64) -> Result<u64, Offline> {
        Err(Offline)
    }
}

#[tokio::test]
async fn a_ledger_failure_is_returned_with_the_ledgers_error_as_source() {
    let url = std::env::var("REDIS_URL").expect("REDIS_URL is set by `make test`");
    let redis = lease::connect(&url, Duration::from_secs(2)).unwrap();
    let client = LeaseClient::new(redis, BrokenLedger);
    let key = key("1");
    match client.acquire(&key, "a", Duration::from_secs(5)).await {
        Err(err @ LeaseError::Ledger(_)) => {
            let source = std::error::Error::source(&err).expect("the ledger's error");
            assert!(source.downcast_ref::<Offline>().is_some(), "{source:?}");
            assert_eq!(err.to_string(), "fence ledger unavailable: ledger offline");
        }
        other => panic!("expected Ledger, got {other:?}"),
    }
    let granted: bool = client
        .redis()
        .clone()
        .exists(key.lease_key())
        .await
        .unwrap();
    assert!(!granted, "nothing was granted");
}

/// A ledger shared by several clients (several server processes of one deployment),
/// optionally holding back the answer of its first reservation until `gate` opens: a
/// process whose block reservation commits in the ledger but reaches Redis late.
struct SharedLedger {
    ledger: Arc<MemoryLedger>,
    base: u64,
    gate: Option<(Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>)>,
    held_back: std::sync::atomic::AtomicBool,
}

impl SharedLedger {
    fn new(ledger: Arc<MemoryLedger>) -> Self {
        SharedLedger {
            ledger,
            base: 0,
            gate: None,
            held_back: false.into(),
        }
    }
}

impl FenceLedger for SharedLedger {
    type Error = std::convert::Infallible;

    async fn raise_ceiling(&self, group: &str, block: u64) -> Result<u64, Self::Error> {
        let ceiling = self.base + self.ledger.raise_ceiling(group, block).await?;
        if let Some((reserved, open)) = &self.gate
            && !self.held_back.swap(true, Ordering::SeqCst)
        {
            reserved.notify_one();
            open.notified().await;
        }
        Ok(ceiling)
    }
}

/// Deletes every key of `key`'s group: Redis losing the group's data (a restart without
/// persistence, a failover to a replica that never saw it), with clients' connections
/// alive.
async fn lose_group_data(key: &LeaseKey) {
    let url = std::env::var("REDIS_URL").expect("REDIS_URL is set by `make test`");
    let mut conn = lease::connect(&url, Duration::from_secs(2))
        .unwrap()
        .connection();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("lease:{{{}}}:*", key.group()))
        .query_async(&mut conn)
        .await
        .unwrap();
    if !keys.is_empty() {
        let _: () = conn.del(keys).await.unwrap();
    }
}

#[tokio::test]
async fn a_block_reserved_before_redis_lost_its_data_is_never_installed_after() {
    let url = std::env::var("REDIS_URL").expect("REDIS_URL is set by `make test`");
    let ledger = Arc::new(MemoryLedger::new());
    let (reserved, open) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let late = Arc::new(
        LeaseClient::new(
            lease::connect(&url, Duration::from_secs(2)).unwrap(),
            SharedLedger {
                gate: Some((reserved.clone(), open.clone())),
                ..SharedLedger::new(ledger.clone())
            },
        )
        .with_block_size(100),
    );
    let prompt = LeaseClient::new(
        lease::connect(&url, Duration::from_secs(2)).unwrap(),
        SharedLedger::new(ledger),
    )
    .with_block_size(100);
    let a_key = key("a");
    let b_key = LeaseKey::new(a_key.group(), "b").unwrap();

    // A reserves the first block (ceiling 100) but its install is held back.
    let a = tokio::spawn({
        let (late, a_key) = (late.clone(), a_key.clone());
        async move { late.acquire(&a_key, "a", Duration::from_secs(30)).await }
    });
    reserved.notified().await;
    // B reserves the next block (ceiling 200), installs it and is granted token 101.
    let b = prompt
        .acquire(&b_key, "b", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(b.fencing_token(), FencingToken(101));
    // Redis loses the group's data; then A's old block arrives.
    lose_group_data(&a_key).await;
    open.notify_one();
    let a = a.await.unwrap().unwrap();
    assert!(
        a.fencing_token() > b.fencing_token(),
        "a token granted after B's must be higher: {:?} after {:?}",
        a.fencing_token(),
        b.fencing_token()
    );
    let again = prompt
        .acquire(&b_key, "b", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(again.fencing_token() > a.fencing_token());
}

#[tokio::test]
async fn fencing_tokens_stay_exact_up_to_2_pow_53_and_stop_there() {
    let url = std::env::var("REDIS_URL").expect("REDIS_URL is set by `make test`");
    // The ledger's first ceiling is 2^53 - 50: one block of 100 tokens below the bound,
    // and the next block would cross it.
    let client = LeaseClient::new(
        lease::connect(&url, Duration::from_secs(2)).unwrap(),
        SharedLedger {
            base: lease::MAX_FENCING_TOKEN - 149,
            ..SharedLedger::new(Arc::new(MemoryLedger::new()))
        },
    )
    .with_block_size(100);
    let group = key("0");
    let mut tokens = Vec::new();
    let exhausted = loop {
        let key = LeaseKey::new(group.group(), tokens.len().to_string()).unwrap();
        match client.acquire(&key, "a", Duration::from_secs(30)).await {
            Ok(lease) => tokens.push(lease.fencing_token().0),
            Err(err) => break (err, key),
        }
        assert!(tokens.len() <= 200, "the bound stops grants");
    };
    let first = lease::MAX_FENCING_TOKEN - 148;
    assert_eq!(
        tokens,
        (first..first + 100).collect::<Vec<_>>(),
        "exact, unique, in order"
    );
    let (err, key) = exhausted;
    assert!(
        matches!(err, LeaseError::TokensExhausted { ceiling } if ceiling > lease::MAX_FENCING_TOKEN),
        "{err:?}"
    );
    assert!(!exists_on(&client, &key).await, "no orphan lease was left");
}

async fn exists_on<L: FenceLedger>(client: &LeaseClient<L>, key: &LeaseKey) -> bool {
    let mut conn = client.redis().clone();
    conn.exists(key.lease_key()).await.unwrap()
}

/// The holder's set (`~held-by:<holder>`, which the limit counts and `held_by.lua` reads)
/// lives as long as the holder's longest grant: a new set gets its first grant's TTL, a
/// longer grant lengthens it, a shorter one never shortens it.
#[tokio::test]
async fn the_holders_set_lives_as_long_as_its_longest_grant() {
    let client = client();
    let first = key("1");
    let second = LeaseKey::new(first.group(), "2").unwrap();
    let third = LeaseKey::new(first.group(), "3").unwrap();
    let set = first.held_by_key("buyer-a");
    let pttl = || async {
        let mut conn = client.redis().clone();
        let ms: i64 = conn.pttl(&set).await.unwrap();
        ms
    };
    client
        .acquire(&first, "buyer-a", Duration::from_secs(10))
        .await
        .unwrap();
    let new_set = pttl().await;
    assert!(new_set > 0 && new_set <= 10_000, "a new set: {new_set} ms");
    client
        .acquire(&second, "buyer-a", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(pttl().await > 10_000, "lengthened by the longer grant");
    client
        .acquire(&third, "buyer-a", Duration::from_secs(1))
        .await
        .unwrap();
    assert!(pttl().await > 10_000, "not shortened by the shorter grant");
}

/// Waits, by reading Redis, until `key`'s lease key has lapsed (it is absent).
async fn lapsed(client: &LeaseClient<MemoryLedger>, key: &LeaseKey) {
    for _ in 0..500 {
        if !exists(client, key).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{key:?} did not lapse within 5 s");
}

/// The group's cooling marker of `key` (`~paying:<name>`), if there is one.
async fn paying_marker(client: &LeaseClient<MemoryLedger>, key: &LeaseKey) -> Option<String> {
    let mut conn = client.redis().clone();
    let field = format!("~paying:{}", key.name());
    conn.hget(key.holders_key(), field).await.unwrap()
}

/// Cooling adds 0 ms to a lapse with no confirm in flight: a lease never marked, one
/// whose confirm ended, one released and one retired leave no marker, and the next
/// acquire right after each (measured by Redis's state: the key is absent) is granted at
/// its first try, never refused `cooling`.
#[tokio::test]
async fn a_clean_lapse_cools_for_0_ms() {
    let client = client();
    let short = Duration::from_millis(150);
    let cooling = Duration::from_secs(30);
    let mut cooling_refusals = 0;
    for end in ["never marked", "ended", "released", "retired"] {
        let key = key("14C");
        let a = client.acquire(&key, "a", short).await.unwrap();
        let paying = match end {
            "never marked" => client.owned_by(&key, "a").await.unwrap(),
            _ => client.owned_by_paying(&key, "a", cooling).await.unwrap(),
        };
        let paying = paying.expect("the holder's own lease");
        assert_eq!(paying.owner(), a.owner(), "{end}");
        match end {
            "ended" => assert!(client.end_paying(&a).await.unwrap()),
            "released" => assert!(client.release(&a).await.unwrap()),
            "retired" => assert!(client.retire(&a).await.unwrap()),
            _ => {}
        }
        assert_eq!(paying_marker(&client, &key).await, None, "{end}: no marker");
        lapsed(&client, &key).await;
        match client.acquire(&key, "b", short).await {
            Ok(b) => assert!(b.fencing_token() > a.fencing_token(), "{end}"),
            Err(LeaseError::Cooling { .. }) => cooling_refusals += 1,
            Err(LeaseError::Retired) => assert_eq!(end, "retired"),
            Err(other) => panic!("{end}: {other:?}"),
        }
    }
    assert_eq!(
        cooling_refusals, 0,
        "no cooling without a confirm in flight"
    );
}

/// A lease that lapses while its confirm is paying cools: the next acquire is refused
/// `cooling` with the milliseconds left, the group lists the resource as held (by no
/// label) until then, and once the confirm ends the next acquire is granted. A confirm of
/// the earlier grant never ends a later grant's cooling.
#[tokio::test]
async fn a_lease_that_lapses_while_paying_cools_until_its_confirm_ends() {
    let client = client();
    let key = key("14C");
    let cooling = Duration::from_secs(30);
    let a = client
        .acquire(&key, "a", Duration::from_millis(150))
        .await
        .unwrap();
    let paying = client.owned_by_paying(&key, "a", cooling).await.unwrap();
    assert_eq!(paying.map(|l| l.fencing_token()), Some(a.fencing_token()));
    assert!(
        client
            .owned_by_paying(&key, "b", cooling)
            .await
            .unwrap()
            .is_none(),
        "another label finds nothing"
    );
    lapsed(&client, &key).await;
    match client.acquire(&key, "b", Duration::from_secs(10)).await {
        Err(LeaseError::Cooling { name, remaining }) => {
            assert_eq!(name, "14C");
            assert!(
                remaining > Duration::ZERO && remaining <= cooling,
                "{remaining:?}"
            );
        }
        other => panic!("expected Cooling, got {other:?}"),
    }
    let group = client.holders(key.group()).await.unwrap();
    let shown: Vec<_> = group.holdings.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(
        shown,
        ["14C"],
        "the cooling seat is listed, and no marker field"
    );
    assert_eq!(
        group.holdings[0].holder, "",
        "held by no label: the lease lapsed"
    );
    assert_eq!(group.holdings[0].fencing_token, a.fencing_token());
    assert!(group.holdings[0].expires_at_ms > group.now_ms);
    // The confirm ends without a sale: the resource is free at once.
    assert!(client.end_paying(&a).await.unwrap());
    assert!(!client.end_paying(&a).await.unwrap(), "once");
    let b = client
        .acquire(&key, "b", Duration::from_millis(150))
        .await
        .unwrap();
    assert!(b.fencing_token() > a.fencing_token());
    // b pays and lapses; a's late end touches nothing of b's.
    client.owned_by_paying(&key, "b", cooling).await.unwrap();
    lapsed(&client, &key).await;
    assert!(!client.end_paying(&a).await.unwrap());
    assert!(matches!(
        client.acquire(&key, "c", Duration::from_secs(10)).await,
        Err(LeaseError::Cooling { .. })
    ));
}

/// Cooling lasts at most its time: with no end of the confirm (it crashed), the
/// resource is granted again once the marker's time has passed.
#[tokio::test]
async fn cooling_ends_by_itself_at_its_time() {
    let client = client();
    let key = key("7");
    let a = client
        .acquire(&key, "a", Duration::from_millis(100))
        .await
        .unwrap();
    client
        .owned_by_paying(&key, "a", Duration::from_millis(400))
        .await
        .unwrap();
    lapsed(&client, &key).await;
    let Err(LeaseError::Cooling { remaining, .. }) =
        client.acquire(&key, "b", Duration::from_secs(10)).await
    else {
        panic!("cooling");
    };
    tokio::time::sleep(remaining + Duration::from_millis(20)).await;
    let b = client
        .acquire(&key, "b", Duration::from_secs(10))
        .await
        .unwrap();
    assert!(b.fencing_token() > a.fencing_token());
    assert_eq!(
        paying_marker(&client, &key).await,
        None,
        "the grant dropped it"
    );
}
