//! The lease-store contract ([`lease::LeaseStore`]), the same assertions against every
//! store: Redis (`REDIS_URL`, the [`LeaseClient`] with a [`MemoryLedger`]), with the
//! `etcd` feature etcd (`ETCD_URL`, a one-member etcd), and with the `zookeeper` feature
//! ZooKeeper (`ZK_URL`, a one-member ZooKeeper), all started by `make test`
//! (scripts/services.sh; `cargo test -p lease --features etcd,zookeeper`). Each test uses
//! its own random group, so tests can share the stores. TTLs are 2 s, the shortest etcd
//! keeps as asked (`lease::etcd::ETCD_TTL_LIMITS`).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use lease::changes::LeaseChange;
use lease::{
    Extension, Grant, LeaseClient, LeaseError, LeaseKey, LeaseStore, MemoryLedger, OwnerToken,
    Watchdog, WatchdogEvent,
};
use rand::Rng;

const TTL: Duration = Duration::from_secs(2);

/// Every store, Redis first (etcd and ZooKeeper with their features only).
async fn stores() -> Vec<Arc<dyn LeaseStore>> {
    let redis_url = std::env::var("REDIS_URL").expect("REDIS_URL is set by `make test`");
    let redis = lease::connect(&redis_url, Duration::from_secs(2)).unwrap();
    #[allow(unused_mut)]
    let mut stores: Vec<Arc<dyn LeaseStore>> =
        vec![Arc::new(LeaseClient::new(redis, MemoryLedger::new()))];
    #[cfg(feature = "etcd")]
    {
        let etcd_url = std::env::var("ETCD_URL").expect("ETCD_URL is set by `make test`");
        let etcd = lease::etcd::EtcdStore::connect(&etcd_url, Duration::from_secs(2))
            .await
            .unwrap();
        stores.push(Arc::new(etcd));
    }
    #[cfg(feature = "zookeeper")]
    {
        let zk_url = std::env::var("ZK_URL").expect("ZK_URL is set by `make test`");
        let zookeeper = lease::zookeeper::ZooKeeperStore::connect(&zk_url, Duration::from_secs(2))
            .await
            .unwrap();
        stores.push(Arc::new(zookeeper));
    }
    stores
}

/// Runs `check` against every store at once; a failure names the store.
async fn on_every_store<F, Fut>(check: F)
where
    F: Fn(Arc<dyn LeaseStore>, String) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let runs = stores().await.into_iter().map(|store| {
        let name = store.name();
        let group = format!("contract:{:x}", rand::rng().random::<u64>());
        (name, tokio::spawn(check(store, group)))
    });
    for (name, run) in runs.collect::<Vec<_>>() {
        if let Err(err) = run.await {
            panic!("the {name} store broke the contract: {err}");
        }
    }
}

fn key(group: &str, name: &str) -> LeaseKey {
    LeaseKey::new(group, name).unwrap()
}

/// Waits (at most 10 s) for the next change, skipping none.
async fn next_change(changes: &mut lease::LeaseChanges) -> LeaseChange {
    tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .expect("a change within 10 s")
        .expect("the stream is open")
}

#[tokio::test]
async fn one_holder_at_a_time_and_tokens_increase() {
    on_every_store(|store, group| async move {
        let seat = key(&group, "14C");
        let alice = store.acquire(&seat, "alice", TTL).await.unwrap();
        match store.acquire(&seat, "bob", TTL).await {
            Err(LeaseError::Held { holder, remaining }) => {
                assert_eq!(holder, "alice");
                assert!(remaining <= TTL);
            }
            other => panic!("expected Held, got {other:?}"),
        }
        assert!(store.is_held(&alice).await.unwrap());
        assert!(store.release(&alice).await.unwrap());
        assert!(!store.is_held(&alice).await.unwrap());
        let bob = store.acquire(&seat, "bob", TTL).await.unwrap();
        assert!(bob.fencing_token() > alice.fencing_token());
        assert!(
            !store.release(&alice).await.unwrap(),
            "a stale release deletes nothing"
        );
        assert!(
            store.is_held(&bob).await.unwrap(),
            "and leaves bob's lease alone"
        );
        assert!(store.release(&bob).await.unwrap());
    })
    .await;
}

#[tokio::test]
async fn group_holds_are_all_or_none_with_one_token() {
    on_every_store(|store, group| async move {
        let seats: Vec<LeaseKey> = ["1", "2", "3"].iter().map(|n| key(&group, n)).collect();
        let held = store
            .acquire_all(&Grant::new(&seats, "alice", TTL))
            .await
            .unwrap();
        assert_eq!(held.len(), 3);
        assert!(
            held.iter()
                .all(|l| l.fencing_token() == held[0].fencing_token())
        );
        assert!(held.iter().all(|l| l.owner() == held[0].owner()));
        let overlapping = [key(&group, "3"), key(&group, "4")];
        assert!(matches!(
            store
                .acquire_all(&Grant::new(&overlapping, "bob", TTL))
                .await,
            Err(LeaseError::Held { .. })
        ));
        let four = store.acquire(&key(&group, "4"), "bob", TTL).await.unwrap();
        assert!(
            four.fencing_token() > held[0].fencing_token(),
            "nothing of the refused hold was kept"
        );
        let mut listed: Vec<(String, String)> = store
            .holders(&group)
            .await
            .unwrap()
            .holdings
            .into_iter()
            .map(|h| (h.name, h.holder))
            .collect();
        listed.sort();
        let expected: Vec<(String, String)> =
            [("1", "alice"), ("2", "alice"), ("3", "alice"), ("4", "bob")]
                .iter()
                .map(|(n, h)| (n.to_string(), h.to_string()))
                .collect();
        assert_eq!(listed, expected);
        assert!(
            store.release(&held[1]).await.unwrap(),
            "one seat of a group hold is released alone"
        );
        assert!(store.is_held(&held[0]).await.unwrap());
        let twice = [key(&group, "5"), key(&group, "5")];
        assert!(matches!(
            store.acquire_all(&Grant::new(&twice, "bob", TTL)).await,
            Err(LeaseError::NotOneGroup)
        ));
    })
    .await;
}

#[tokio::test]
async fn a_holder_limit_counts_the_holders_live_leases() {
    on_every_store(|store, group| async move {
        let pair = [key(&group, "1"), key(&group, "2")];
        let first = store
            .acquire_all(&Grant::new(&pair, "alice", TTL).limit(3))
            .await
            .unwrap();
        let more = [key(&group, "3"), key(&group, "4")];
        match store
            .acquire_all(&Grant::new(&more, "alice", TTL).limit(3))
            .await
        {
            Err(LeaseError::OverLimit { held, limit }) => assert_eq!((held, limit), (2, 3)),
            other => panic!("expected OverLimit, got {other:?}"),
        }
        store
            .acquire_all(&Grant::new(&more, "bob", TTL).limit(3))
            .await
            .unwrap();
        assert!(store.release(&first[0]).await.unwrap());
        store
            .acquire_all(&Grant::new(&[key(&group, "5"), key(&group, "6")], "alice", TTL).limit(3))
            .await
            .unwrap();
    })
    .await;
}

/// The names of `holder`'s live leases in `group`, sorted.
async fn held_by(store: &dyn LeaseStore, group: &str, holder: &str) -> Vec<String> {
    let snapshot = store.held_by(group, holder).await.unwrap();
    assert!(snapshot.holdings.iter().all(|h| h.holder == holder));
    let mut names: Vec<String> = snapshot.holdings.into_iter().map(|h| h.name).collect();
    names.sort();
    names
}

#[tokio::test]
async fn held_by_lists_one_holders_live_leases_and_nothing_else() {
    on_every_store(|store, group| async move {
        assert!(held_by(&*store, &group, "alice").await.is_empty());
        let pair = [key(&group, "1"), key(&group, "2")];
        let alices = store
            .acquire_all(&Grant::new(&pair, "alice", TTL))
            .await
            .unwrap();
        store.acquire(&key(&group, "3"), "bob", TTL).await.unwrap();
        store
            .acquire_all(&Grant::new(&[key(&group, "4")], "alice", TTL).limit(4))
            .await
            .unwrap();
        assert_eq!(held_by(&*store, &group, "alice").await, ["1", "2", "4"]);
        assert_eq!(held_by(&*store, &group, "bob").await, ["3"]);
        assert!(store.release(&alices[0]).await.unwrap());
        assert_eq!(
            held_by(&*store, &group, "alice").await,
            ["2", "4"],
            "a released lease is not listed"
        );
        // A lease that lapsed and passed to another holder is the new holder's only.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while store.remaining(&pair[1]).await.unwrap().is_some() {
            assert!(tokio::time::Instant::now() < deadline, "the lease lapses");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        store.acquire(&pair[1], "bob", TTL).await.unwrap();
        assert!(
            !held_by(&*store, &group, "alice")
                .await
                .contains(&"2".to_owned())
        );
        assert!(
            held_by(&*store, &group, "bob")
                .await
                .contains(&"2".to_owned())
        );
    })
    .await;
}

#[tokio::test]
async fn a_retired_resource_is_never_granted_again() {
    on_every_store(|store, group| async move {
        let seat = key(&group, "9");
        let sold = store.acquire(&seat, "alice", TTL).await.unwrap();
        assert!(store.retire(&sold).await.unwrap());
        assert!(matches!(
            store.acquire(&seat, "bob", TTL).await,
            Err(LeaseError::Retired)
        ));
        assert!(store.holders(&group).await.unwrap().holdings.is_empty());
    })
    .await;
}

#[tokio::test]
async fn renew_remaining_and_recover_by_holder_are_owner_checked() {
    on_every_store(|store, group| async move {
        let seat = key(&group, "7");
        let mut lease = store.acquire(&seat, "alice", TTL).await.unwrap();
        let granted_until = lease.expires_at_ms();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(store.renew(&mut lease).await.unwrap());
        assert!(lease.expires_at_ms() > granted_until);
        let left = store.remaining(&seat).await.unwrap().expect("a live lease");
        assert!(left <= TTL);
        assert!(store.owned_by(&seat, "bob").await.unwrap().is_none());
        let recovered = store
            .owned_by(&seat, "alice")
            .await
            .unwrap()
            .expect("alice's lease");
        assert_eq!(recovered.owner(), lease.owner());
        assert_eq!(recovered.fencing_token(), lease.fencing_token());
        assert!(store.release(&recovered).await.unwrap());
        assert!(
            !store.renew(&mut lease).await.unwrap(),
            "a released lease is not renewed"
        );
        assert_eq!(store.remaining(&seat).await.unwrap(), None);
        assert!(store.owned_by(&seat, "alice").await.unwrap().is_none());
    })
    .await;
}

#[tokio::test]
async fn a_lapsed_lease_passes_on_and_its_holder_is_stale() {
    on_every_store(|store, group| async move {
        let seat = key(&group, "3");
        let mut alice = store.acquire(&seat, "alice", TTL).await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while store.remaining(&seat).await.unwrap().is_some() {
            assert!(tokio::time::Instant::now() < deadline, "the lease lapses");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let bob = store.acquire(&seat, "bob", TTL).await.unwrap();
        assert!(bob.fencing_token() > alice.fencing_token());
        assert!(!store.renew(&mut alice).await.unwrap());
        assert!(!store.release(&alice).await.unwrap());
        assert!(store.is_held(&bob).await.unwrap());
    })
    .await;
}

/// A grant behind a waiting room is never granted on an admission the store did not
/// check: Redis checks it (none is live in this group), etcd and ZooKeeper cannot and
/// say so.
#[tokio::test]
async fn an_admission_is_checked_or_refused_never_ignored() {
    on_every_store(|store, group| async move {
        let seat = key(&group, "1");
        let grant = Grant::new([seat.clone()], "alice", TTL).admission(OwnerToken::random());
        match store.acquire_all(&grant).await {
            Err(LeaseError::NotAdmitted) => assert_eq!(store.name(), "redis"),
            Err(LeaseError::AdmissionUnchecked { store: name }) => {
                assert_ne!(store.name(), "redis");
                assert_eq!(name, store.name());
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(store.remaining(&seat).await.unwrap(), None);
    })
    .await;
}

#[tokio::test]
async fn ttls_the_store_cannot_express_are_refused_before_anything_is_sent() {
    on_every_store(|store, group| async move {
        for ttl_ms in [1_500, 2_000, 3_000] {
            let ttl = Duration::from_millis(ttl_ms);
            let seat = key(&group, &ttl_ms.to_string());
            let expressible = store.ttl_limits().check(store.name(), ttl).is_ok();
            match store.acquire(&seat, "alice", ttl).await {
                Ok(_) => assert!(expressible, "{ttl:?}"),
                Err(LeaseError::TtlNotExpressible { .. }) => {
                    assert!(!expressible, "{ttl:?}");
                    assert_eq!(store.remaining(&seat).await.unwrap(), None);
                }
                Err(other) => panic!("{other:?}"),
            }
        }
    })
    .await;
}

#[tokio::test]
async fn changes_report_grants_releases_and_lapses() {
    on_every_store(|store, group| async move {
        let mut changes = store.changes(&group).await.unwrap();
        let seats = [key(&group, "1"), key(&group, "2")];
        let held = store
            .acquire_all(&Grant::new(&seats, "alice", TTL))
            .await
            .unwrap();
        for seat in &seats {
            match next_change(&mut changes).await {
                LeaseChange::Acquired {
                    key,
                    holder,
                    fencing_token,
                    ..
                } => {
                    assert_eq!((&key, holder.as_str()), (seat, "alice"));
                    assert_eq!(fencing_token, held[0].fencing_token());
                }
                other => panic!("expected a grant of {seat:?}, got {other:?}"),
            }
        }
        assert!(store.release(&held[0]).await.unwrap());
        assert_eq!(
            next_change(&mut changes).await,
            LeaseChange::Released {
                key: seats[0].clone()
            }
        );
        // The other seat is left to lapse. Redis reports a lapse when it expires the key:
        // on a read, or when its expiry cycle samples the key, which among thousands of
        // other keys with a TTL (the sessions of every test sharing this Redis) can take
        // longer than the wait. A reader, as an open seat map is, makes it prompt.
        let reader = {
            let (store, seat) = (store.clone(), seats[1].clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    let _ = store.remaining(&seat).await;
                }
            })
        };
        let lapsed = next_change(&mut changes).await;
        reader.abort();
        assert_eq!(
            lapsed,
            LeaseChange::Expired {
                key: seats[1].clone()
            }
        );
    })
    .await;
}

/// The change stream is long-lived: it still reports a grant made after 8 s, longer than a
/// store's connection lasts when it breaks the server's rules (an etcd client pinging
/// more often than `--grpc-keepalive-min-time` is cut off after ~4 s).
#[tokio::test]
async fn the_change_stream_stays_open_while_nothing_changes() {
    on_every_store(|store, group| async move {
        let mut changes = store.changes(&group).await.unwrap();
        tokio::time::sleep(Duration::from_secs(8)).await;
        let seat = key(&group, "late");
        store.acquire(&seat, "alice", TTL).await.unwrap();
        match next_change(&mut changes).await {
            LeaseChange::Acquired { key, .. } => assert_eq!(key, seat),
            other => panic!("expected the grant of {seat:?}, got {other:?}"),
        }
    })
    .await;
}

#[tokio::test]
async fn a_watchdog_keeps_a_lease_past_its_ttl_on_either_store() {
    on_every_store(|store, group| async move {
        let seat = key(&group, "closer");
        let lease = store.acquire(&seat, "closer-a", TTL).await.unwrap();
        let watchdog = Watchdog::start(store.clone(), lease);
        tokio::time::sleep(TTL * 2).await;
        assert!(matches!(watchdog.status(), WatchdogEvent::Held { .. }));
        assert!(store.is_held(watchdog.lease()).await.unwrap());
        assert!(matches!(
            store.acquire(&seat, "closer-b", TTL).await,
            Err(LeaseError::Held { .. })
        ));
        assert!(watchdog.release(&*store).await.unwrap());
    })
    .await;
}

/// Nothing is granted before a grant's `not_before_ms` (an event's on-sale, issue 43),
/// judged in the grant's own step: a minute ahead of the store's clock the grant is refused
/// (`NotYet`) and nothing is written; once the time has passed it is granted.
#[tokio::test]
async fn nothing_is_granted_before_its_time_and_then_it_is() {
    on_every_store(|store, group| async move {
        let seat = key(&group, "1");
        let now_ms = store.holders(&group).await.unwrap().now_ms;
        let early = Grant::new([seat.clone()], "alice", TTL).not_before(now_ms + 60_000);
        match store.acquire_all(&early).await {
            Err(LeaseError::NotYet { not_before_ms }) => assert_eq!(not_before_ms, now_ms + 60_000),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            store.remaining(&seat).await.unwrap(),
            None,
            "nothing written"
        );
        assert!(store.holders(&group).await.unwrap().holdings.is_empty());
        let open = Grant::new([seat.clone()], "alice", TTL).not_before(now_ms - 1_000);
        let leases = store.acquire_all(&open).await.unwrap();
        assert!(store.is_held(&leases[0]).await.unwrap());
        assert_eq!(store.holders(&group).await.unwrap().holdings.len(), 1);
    })
    .await;
}

/// "Need more time?": an extension is a renew of the same lease, owner-checked. The owner
/// and fencing tokens stay, the expiry moves, and after ten extensions the eleventh is
/// refused, leaving the lease as it was.
#[tokio::test]
async fn an_extension_keeps_the_lease_and_its_token_and_the_eleventh_is_refused() {
    on_every_store(|store, group| async move {
        let seats = [key(&group, "1"), key(&group, "2")];
        let grant = Grant::new(&seats, "alice", TTL);
        let leases = store.acquire_all(&grant).await.unwrap();
        let more = Extension::new("alice", TTL);
        let mut last = leases.clone();
        for n in 1..=10 {
            let extended = store.extend_all(&last, &more).await.unwrap();
            assert_eq!(extended.extensions, n);
            for (before, after) in last.iter().zip(&extended.leases) {
                assert_eq!(after.owner(), before.owner());
                assert_eq!(after.fencing_token(), leases[0].fencing_token());
                assert!(after.expires_at_ms() >= before.expires_at_ms());
                assert!(store.is_held(after).await.unwrap());
            }
            last = extended.leases;
        }
        let refused = store.extend_all(&last, &more).await;
        assert!(
            matches!(&refused, Err(LeaseError::ExtensionLimit { limit: 10, .. })),
            "{refused:?}"
        );
        let holding = store.owned_by(&seats[0], "alice").await.unwrap().unwrap();
        assert_eq!(holding.expires_at_ms(), last[0].expires_at_ms());
        assert_eq!(holding.fencing_token(), leases[0].fencing_token());
        // Another label cannot extend alice's leases, even with her owner tokens.
        let mallory = store
            .extend_all(&last, &Extension::new("mallory", TTL))
            .await;
        assert!(
            matches!(mallory, Err(LeaseError::Expired { .. })),
            "{mallory:?}"
        );
    })
    .await;
}

/// An extension never outlasts the lease's budget from its grant: with a life of one TTL,
/// nothing is left to add, and nothing is extended.
#[tokio::test]
async fn an_extension_past_the_life_from_the_grant_is_refused() {
    on_every_store(|store, group| async move {
        let seat = key(&group, "1");
        let lease = store.acquire(&seat, "alice", TTL).await.unwrap();
        let more = Extension {
            max_life: TTL,
            ..Extension::new("alice", TTL)
        };
        let refused = store.extend_all(std::slice::from_ref(&lease), &more).await;
        assert!(
            matches!(refused, Err(LeaseError::LifeLimit { .. })),
            "{refused:?}"
        );
        let holding = store.owned_by(&seat, "alice").await.unwrap().unwrap();
        assert_eq!(holding.expires_at_ms(), lease.expires_at_ms());
    })
    .await;
}

/// A lapsed lease stays lapsed: its extension answers `Expired`, the key stays absent,
/// and the holder's other lease in the same request is not extended (all or none).
#[tokio::test]
async fn an_extension_after_a_lapse_answers_expired_and_leaves_the_key_absent() {
    on_every_store(|store, group| async move {
        let (lapsing, kept) = (key(&group, "1"), key(&group, "2"));
        let lapses = store.acquire(&lapsing, "alice", TTL).await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while store.remaining(&lapsing).await.unwrap().is_some() {
            assert!(tokio::time::Instant::now() < deadline, "the lease lapses");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let stays = store.acquire(&kept, "alice", TTL).await.unwrap();
        let more = Extension::new("alice", TTL);
        let refused = store.extend_all(&[stays.clone(), lapses], &more).await;
        assert!(
            matches!(&refused, Err(LeaseError::Expired { name }) if name == "1"),
            "{refused:?}"
        );
        assert_eq!(store.remaining(&lapsing).await.unwrap(), None);
        assert!(store.owned_by(&lapsing, "alice").await.unwrap().is_none());
        let held = store.owned_by(&kept, "alice").await.unwrap().unwrap();
        assert_eq!(held.expires_at_ms(), stays.expires_at_ms());
    })
    .await;
}
