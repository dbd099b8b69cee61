//! Watching a group's leases: every grant and release is published by the same script
//! that makes it (Redis pub/sub, channel `lease:{group}:~events`), and expiries come from
//! Redis keyspace notifications (`__keyevent@<db>__:expired`), so a watcher sees every
//! change without polling.
//!
//! Pub/sub is fire-and-forget: a watcher that disconnects misses messages, so after a
//! reconnect it must re-read the state ([`crate::LeaseClient::holders`]).

use crate::keys::events_channel;
use crate::scripts::parse_holding;
use crate::{FencingToken, LeaseKey};

/// A change to one lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseEvent {
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

impl LeaseEvent {
    /// The lease the event is about.
    pub fn key(&self) -> &LeaseKey {
        match self {
            LeaseEvent::Acquired { key, .. }
            | LeaseEvent::Released { key }
            | LeaseEvent::Expired { key } => key,
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

/// Turns on keyspace expiry notifications (`CONFIG SET notify-keyspace-events Ex`).
/// Managed Redis services may refuse `CONFIG`; then expiries are not pushed and watchers
/// learn of them only when they re-read the group.
pub async fn enable_expiry_notifications(
    redis: &mut redis::aio::ConnectionManager,
) -> redis::RedisResult<()> {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Ex")
        .query_async(redis)
        .await
}

/// Parses one pub/sub message received through [`patterns`]; `None` for anything that is
/// not a lease event (e.g. the expiry of some other key).
pub fn parse(channel: &str, payload: &str) -> Option<LeaseEvent> {
    if channel.starts_with("__keyevent@") {
        return LeaseKey::from_lease_key(payload).map(|key| LeaseEvent::Expired { key });
    }
    let group = channel.strip_prefix("lease:{")?.strip_suffix("}:~events")?;
    let (kind, rest) = payload.split_once(' ')?;
    match kind {
        "acquired" => {
            let (name, entry) = rest.split_once(' ')?;
            let holding = parse_holding(name.to_owned(), entry)?;
            Some(LeaseEvent::Acquired {
                key: LeaseKey::new(group, name).ok()?,
                holder: holding.holder,
                fencing_token: holding.fencing_token,
                expires_at_ms: holding.expires_at_ms,
            })
        }
        "released" => Some(LeaseEvent::Released {
            key: LeaseKey::new(group, rest).ok()?,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_grants_releases_and_expiries() {
        let key = LeaseKey::new("ns:event:1", "14").unwrap();
        assert_eq!(
            parse(
                &key.events_channel(),
                "acquired 14 42 1700000000000 buyer a"
            ),
            Some(LeaseEvent::Acquired {
                key: key.clone(),
                holder: "buyer a".into(),
                fencing_token: FencingToken(42),
                expires_at_ms: 1_700_000_000_000
            })
        );
        assert_eq!(
            parse(&key.events_channel(), "released 14"),
            Some(LeaseEvent::Released { key: key.clone() })
        );
        assert_eq!(
            parse("__keyevent@0__:expired", &key.lease_key()),
            Some(LeaseEvent::Expired { key })
        );
        assert_eq!(parse("__keyevent@0__:expired", "tower:session"), None);
        assert_eq!(parse("other", "released 14"), None);
    }
}
