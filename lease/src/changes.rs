//! Watching a group's leases: each grant, release and lapse as a [`LeaseChange`].
//!
//! The script that grants or releases a lease also publishes it, on the group's pub/sub
//! channel `lease:{group}:~events`. Lapses come from Redis keyspace notifications
//! (`__keyevent@<db>__:expired`). So a watcher sees every change without polling.
//!
//! Pub/sub is fire-and-forget. A watcher that disconnects misses messages. After a
//! reconnect it must re-read the state ([`LeaseStore::holders`](crate::LeaseStore::holders)).

use crate::keys::LeaseKey;
use crate::keys::events_channel;
use crate::scripts::parse_holding;
use crate::token::FencingToken;

/// A change to one lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseChange {
    /// A grant: who holds `key` now, with which token, until when (Unix ms, Redis clock).
    Acquired {
        /// The resource granted.
        key: LeaseKey,
        /// The public label the new holder gave to `acquire`.
        holder: String,
        /// The grant's fencing token.
        fencing_token: FencingToken,
        /// When the lease ends, Unix milliseconds on the Redis clock (as granted; a
        /// renewal is not announced).
        expires_at_ms: u64,
    },
    /// An owner-checked release (compare-and-delete).
    Released {
        /// The resource released.
        key: LeaseKey,
    },
    /// Redis expired the lease (its TTL ran out).
    Expired {
        /// The resource whose lease expired.
        key: LeaseKey,
    },
}

impl LeaseChange {
    /// The lease the change is about.
    pub fn key(&self) -> &LeaseKey {
        match self {
            LeaseChange::Acquired { key, .. }
            | LeaseChange::Released { key }
            | LeaseChange::Expired { key } => key,
        }
    }
}

/// The two `PSUBSCRIBE` patterns that deliver every event of the groups matching
/// `group_glob` (Redis glob syntax, e.g. `seatlock:event:*`): the events channels and the
/// keyspace expiry notifications (these carry every expired key; [`parse`] keeps leases).
pub fn patterns(group_glob: &str) -> [String; 2] {
    [
        events_channel(group_glob),
        "__keyevent@*__:expired".to_owned(),
    ]
}

/// One pub/sub connection per server in `nodes` (a store's
/// [`RedisStore::pubsub_nodes`](crate::RedisStore::pubsub_nodes)), together hearing
/// every event of the groups matching `group_glob` once: the first connection subscribes
/// to both [`patterns`], the others (the other nodes of a cluster, which forward every
/// `PUBLISH` to each other) to the expiry notifications only. Each connection is made
/// within `timeout`. Errors: a node did not answer (the caller starts again: pub/sub
/// keeps nothing for a watcher that was away).
pub async fn subscribe(
    nodes: Vec<redis::Client>,
    group_glob: &str,
    timeout: std::time::Duration,
) -> redis::RedisResult<Vec<redis::aio::PubSub>> {
    let [events, expiries] = patterns(group_glob);
    let mut subscribed = Vec::new();
    for node in nodes {
        let mut pubsub = tokio::time::timeout(timeout, node.get_async_pubsub())
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        if subscribed.is_empty() {
            pubsub.psubscribe(&events).await?;
        }
        pubsub.psubscribe(&expiries).await?;
        subscribed.push(pubsub);
    }
    Ok(subscribed)
}

/// Turns on keyspace expiry notifications, adding the two flags it needs (`E`: keyevent
/// events, `x`: expiries) to whatever the server's `notify-keyspace-events` already has
/// (a Redis shared with other applications keeps their flags): `CONFIG GET`, then
/// `CONFIG SET` only if a flag is missing. Returns the flags found before. Errors: a
/// Redis that refuses `CONFIG` (managed services often do): then expiries are not
/// pushed, and watchers learn of them only when they re-read the group.
///
/// On a cluster connection the `CONFIG GET` is answered by one node and the `CONFIG SET`
/// goes to every node; a watcher that asks now and then (seatlock's live feed, every few
/// seconds) reaches each node in time.
pub async fn enable_expiry_notifications(
    redis: &mut impl redis::aio::ConnectionLike,
) -> redis::RedisResult<String> {
    let (_, before): (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("notify-keyspace-events")
        .query_async(redis)
        .await?;
    let flags = with_expiry_flags(&before);
    if flags != before {
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("notify-keyspace-events")
            .arg(&flags)
            .query_async(redis)
            .await?;
    }
    Ok(before)
}

/// `flags` plus `E` and `x` where missing (`A` stands for every event class, `x`
/// included).
fn with_expiry_flags(flags: &str) -> String {
    let mut merged = flags.to_owned();
    if !merged.contains('E') {
        merged.push('E');
    }
    if !merged.contains('x') && !merged.contains('A') {
        merged.push('x');
    }
    merged
}

/// The server's `maxmemory-policy` if it lets Redis evict keys that have a TTL, which
/// every lease has: under memory pressure a hold could vanish before its TTL (the
/// owner's next renew or owner check answers `false`, and fencing keeps writes safe). Every
/// policy but `noeviction` may (`volatile-*` pick among keys with a TTL, `allkeys-*` among
/// all keys). `None` for `noeviction`. Errors: `CONFIG` refused.
pub async fn eviction_risk(
    redis: &mut impl redis::aio::ConnectionLike,
) -> redis::RedisResult<Option<String>> {
    let (_, policy): (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(redis)
        .await?;
    Ok((policy != "noeviction").then_some(policy))
}

/// How long `key`'s resource still cools, its lease lapsed under a confirm still paying
/// ([`LeaseStore::owned_by_paying`](crate::LeaseStore::owned_by_paying)): zero when it
/// does not, or when it was granted again. For a watcher that heard the lapse
/// ([`LeaseChange::Expired`]) and shows the resource: a cooling one is not free. One
/// script, `scripts/cooling.lua`, read-only.
pub async fn cooling_left(
    redis: &mut impl redis::aio::ConnectionLike,
    key: &LeaseKey,
) -> redis::RedisResult<std::time::Duration> {
    static COOLING: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
        redis::Script::new(concat!(
            include_str!("scripts/now_ms.lua"),
            include_str!("scripts/cooling.lua")
        ))
    });
    let left_ms: u64 = COOLING
        .key(key.holders_key())
        .key(key.lease_key())
        .arg(key.name())
        .invoke_async(redis)
        .await?;
    Ok(std::time::Duration::from_millis(left_ms))
}

/// Parses one pub/sub message received through [`patterns`] into the change of each
/// lease it announces: one event for a grant of one resource, a release or an expiry,
/// one [`LeaseChange::Acquired`] per resource for a group grant (`acquired-group`, one
/// message from [`LeaseStore::acquire_all`](crate::LeaseStore::acquire_all)), none for anything that is not a
/// lease event (e.g. the expiry of some other key) or does not parse.
pub fn parse(channel: &str, payload: &str) -> Vec<LeaseChange> {
    parse_all(channel, payload).unwrap_or_default()
}

fn parse_all(channel: &str, payload: &str) -> Option<Vec<LeaseChange>> {
    if channel.starts_with("__keyevent@") {
        return LeaseKey::from_lease_key(payload).map(|key| vec![LeaseChange::Expired { key }]);
    }
    let group = channel.strip_prefix("lease:{")?.strip_suffix("}:~events")?;
    let (kind, rest) = payload.split_once(' ')?;
    let (names, entry): (Vec<&str>, &str) = match kind {
        "acquired" => {
            let (name, entry) = rest.split_once(' ')?;
            (vec![name], entry)
        }
        "acquired-group" => {
            let mut parts = rest.splitn(2, ' ');
            let n: usize = parts.next()?.parse().ok()?;
            let mut parts = parts.next()?.splitn(n + 1, ' ');
            let names: Vec<&str> = parts.by_ref().take(n).collect();
            (names, parts.next()?)
        }
        "released" => {
            return Some(vec![LeaseChange::Released {
                key: LeaseKey::new(group, rest).ok()?,
            }]);
        }
        _ => return None,
    };
    let holding = parse_holding(String::new(), entry)?;
    names
        .into_iter()
        .map(|name| {
            Some(LeaseChange::Acquired {
                key: LeaseKey::new(group, name).ok()?,
                holder: holding.holder.clone(),
                fencing_token: holding.fencing_token,
                expires_at_ms: holding.expires_at_ms,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_flags_are_added_to_those_of_others() {
        assert_eq!(with_expiry_flags(""), "Ex");
        assert_eq!(with_expiry_flags("Kl"), "KlEx");
        assert_eq!(with_expiry_flags("KEA"), "KEA");
        assert_eq!(with_expiry_flags("Egx"), "Egx");
    }

    #[test]
    fn parses_grants_releases_and_expiries() {
        let key = LeaseKey::new("ns:event:1", "14").unwrap();
        let acquired = |name: &str| LeaseChange::Acquired {
            key: LeaseKey::new("ns:event:1", name).unwrap(),
            holder: "buyer a".into(),
            fencing_token: FencingToken(42),
            expires_at_ms: 1_700_000_000_000,
        };
        assert_eq!(
            parse(
                &key.events_channel(),
                "acquired 14 42 1700000000000 buyer a"
            ),
            vec![acquired("14")]
        );
        assert_eq!(
            parse(
                &key.events_channel(),
                "acquired-group 3 14 15 16 42 1700000000000 buyer a"
            ),
            vec![acquired("14"), acquired("15"), acquired("16")]
        );
        assert!(parse(&key.events_channel(), "acquired-group 3 14 15").is_empty());
        assert_eq!(
            parse(&key.events_channel(), "released 14"),
            vec![LeaseChange::Released { key: key.clone() }]
        );
        assert_eq!(
            parse("__keyevent@0__:expired", &key.lease_key()),
            vec![LeaseChange::Expired { key }]
        );
        assert!(parse("__keyevent@0__:expired", "tower:session").is_empty());
        assert!(parse("other", "released 14").is_empty());
    }
}
