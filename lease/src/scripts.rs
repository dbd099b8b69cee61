//! The lease scripts: one Lua file each under `scripts/`, and a Rust wrapper each here.
//!
//! Each file's header names its KEYS, ARGV and reply. Redis runs each script atomically
//! (`EVALSHA`, falling back to `SCRIPT LOAD` once per server). The two the failover
//! guard runs in, `acquire.lua` and `raise_ceiling.lua`, are functions of one library
//! instead (`FCALL`, [`crate::redis::library`] says why). So each operation is one
//! round trip. Each script is safe to send twice: the store resends a request whose
//! connection dropped (`redis/connection.rs`).
//!
//! What two scripts share is written once and joined here with `concat!`:
//!
//! * `now_ms.lua`: the Redis clock.
//! * `server_identity.lua`: the server's identity, for the failover guard (the library's
//!   prelude, with `now_ms.lua`).
//! * `release.lua`: the compare-and-delete, which also ends `retire.lua`.
//!
//! The waiting room's scripts live in `room/`.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{ErrorKind, RedisError, Script};

use crate::error::LeaseError;
use crate::keys::{LeaseKey, admitted_key, held_by_key, holders_key};
use crate::lease::{Extension, Grant, GroupSnapshot, Holding, Lease};
use crate::redis::RedisStore;
use crate::redis::library::Library;
use crate::token::{FencingToken, OwnerToken};

/// The scripts the failover guard runs in: one function library (`redis/library.rs` says
/// why), `server_identity.lua` and `now_ms.lua` before its functions.
///
/// * `acquire`: grant, one resource or several of one group, all or none: refused if one
///   is retired, held, or over the holder's limit, else `SET NX PX` each, then one
///   fencing token for all and their holdings (see the file's header for KEYS, ARGV and
///   the reply).
/// * `raise_ceiling`: hands Redis a block of tokens reserved in the ledger, stamped with
///   the server's identity.
static GUARDED: LazyLock<Library> = LazyLock::new(|| {
    Library::new(
        concat!(
            include_str!("scripts/server_identity.lua"),
            include_str!("scripts/now_ms.lua")
        ),
        &[
            ("acquire", include_str!("scripts/acquire.lua")),
            ("raise_ceiling", include_str!("scripts/raise_ceiling.lua")),
        ],
    )
});

/// Compare-and-delete.
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/release.lua")));

/// Retire for good, then the compare-and-delete of `release.lua`.
static RETIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/retire.lua"),
        include_str!("scripts/release.lua")
    ))
});

/// Compare-and-pexpire.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/now_ms.lua"),
        include_str!("scripts/renew.lua")
    ))
});

/// Extends one holder's leases, all or none, within their budget (see the file's header
/// for KEYS, ARGV and the reply).
static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/now_ms.lua"),
        include_str!("scripts/extend.lua")
    ))
});

/// `acquire.lua`'s answer, one variant per reply status.
pub(crate) enum AcquireReply {
    Granted {
        fencing_token: u64,
        expires_at_ms: u64,
    },
    Held {
        holder: String,
        remaining_ms: u64,
    },
    OverLimit {
        held: u64,
        limit: u64,
    },
    NeedsBlock,
    Retired,
    Cooling {
        name: String,
        remaining_ms: u64,
    },
    NotAdmitted,
    NotYet {
        not_before_ms: u64,
    },
}

/// How long a block reservation may take, from the acquire that asked for it to its
/// install, before the install is refused and the reservation made again.
pub(crate) const RESERVATION_TTL_MS: u64 = 30_000;

/// One try at a grant: what [`acquire`] sends besides the [`Grant`].
pub(crate) struct Attempt<'a> {
    /// The grant's owner token, the same on every try.
    pub(crate) owner: &'a OwnerToken,
    /// Names the fence block reservation this grant may make (step 5).
    pub(crate) reservation: &'a str,
    /// Whether the failover guard is on. It is off only in the failover lab.
    pub(crate) failover_guard: bool,
}

/// One run of `acquire.lua` for `grant`. The caller checks that its keys are one group.
pub(crate) async fn acquire(
    redis: &RedisStore,
    grant: &Grant,
    attempt: &Attempt<'_>,
) -> redis::RedisResult<AcquireReply> {
    let first = &grant.keys[0];
    let mut invocation = GUARDED.call("acquire");
    invocation
        .key(first.fence_key())
        .key(first.holders_key())
        .key(first.reservation_key(attempt.reservation))
        .key(first.retired_key())
        .key(first.held_by_key(&grant.holder))
        .key(admitted_key(first.group()))
        .arg(attempt.owner.as_str())
        .arg(ttl_ms(grant))
        .arg(&grant.holder)
        .arg(first.events_channel())
        .arg(RESERVATION_TTL_MS)
        // 0: no limit. A limit of 0 would refuse everything, so it counts as 1.
        .arg(grant.limit.map_or(0, |n| n.max(1)))
        .arg(u8::from(attempt.failover_guard))
        // "": no waiting room.
        .arg(grant.admission.as_ref().map_or("", OwnerToken::as_str))
        // 0: no on-sale time.
        .arg(grant.not_before_ms.unwrap_or(0));
    for key in &grant.keys {
        invocation.key(key.lease_key()).arg(key.name());
    }
    let (status, a, b, holder, name): (String, u64, u64, String, String) =
        redis.fcall("acquire", &GUARDED, &invocation).await?;
    Ok(match status.as_str() {
        "granted" => AcquireReply::Granted {
            fencing_token: a,
            expires_at_ms: b,
        },
        "held" => AcquireReply::Held {
            holder,
            remaining_ms: a,
        },
        "retired" => AcquireReply::Retired,
        "cooling" => AcquireReply::Cooling {
            name,
            remaining_ms: a,
        },
        "over_limit" => AcquireReply::OverLimit { held: a, limit: b },
        "needs_block" => AcquireReply::NeedsBlock,
        "not_admitted" => AcquireReply::NotAdmitted,
        "not_yet" => AcquireReply::NotYet { not_before_ms: a },
        _ => {
            return Err(RedisError::from((
                ErrorKind::UnexpectedReturnType,
                "acquire.lua: unknown status",
                status,
            )));
        }
    })
}

/// The grant's TTL in whole milliseconds, at least 1.
pub(crate) fn ttl_ms(grant: &Grant) -> u64 {
    (grant.ttl.as_millis() as u64).max(1)
}

/// Installs a reserved block; `false` if the reservation's marker was gone (Redis lost
/// its data since the reservation began) or, with `failover_guard`, made on another
/// server (a failover since): reserve again.
pub(crate) async fn raise_ceiling(
    redis: &RedisStore,
    key: &LeaseKey,
    reservation: &str,
    ceiling: u64,
    block: u64,
    failover_guard: bool,
) -> redis::RedisResult<bool> {
    let mut invocation = GUARDED.call("raise_ceiling");
    invocation
        .key(key.fence_key())
        .key(key.reservation_key(reservation))
        .arg(ceiling)
        .arg(block)
        .arg(u8::from(failover_guard));
    let installed: i64 = redis.fcall("raise_ceiling", &GUARDED, &invocation).await?;
    Ok(installed == 1)
}

pub(crate) async fn release(
    redis: &RedisStore,
    key: &LeaseKey,
    owner: &OwnerToken,
) -> Result<bool, LeaseError> {
    let mut invocation = RELEASE.prepare_invoke();
    invocation
        .key(key.lease_key())
        .key(key.holders_key())
        .arg(owner.as_str())
        .arg(key.name())
        .arg(key.events_channel());
    let deleted: i64 = redis.invoke("release", &invocation).await?;
    Ok(deleted == 1)
}

/// Release by holder: release_held_by.lua finds the owner token, then release.lua's
/// compare-and-delete.
static RELEASE_HELD_BY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/release_held_by.lua"),
        include_str!("scripts/release.lua")
    ))
});

pub(crate) async fn release_held_by(
    redis: &RedisStore,
    key: &LeaseKey,
    holder: &str,
) -> Result<bool, LeaseError> {
    let mut invocation = RELEASE_HELD_BY.prepare_invoke();
    invocation
        .key(key.lease_key())
        .key(key.holders_key())
        .arg(holder)
        .arg(key.name())
        .arg(key.events_channel());
    let deleted: i64 = redis.invoke("release_held_by", &invocation).await?;
    Ok(deleted == 1)
}

pub(crate) async fn retire(
    redis: &RedisStore,
    key: &LeaseKey,
    owner: &OwnerToken,
) -> Result<bool, LeaseError> {
    let mut invocation = RETIRE.prepare_invoke();
    invocation
        .key(key.lease_key())
        .key(key.holders_key())
        .key(key.retired_key())
        .arg(owner.as_str())
        .arg(key.name())
        .arg(key.events_channel());
    let released: i64 = redis.invoke("retire", &invocation).await?;
    Ok(released == 1)
}

pub(crate) async fn renew(
    redis: &RedisStore,
    key: &LeaseKey,
    owner: &OwnerToken,
    ttl_ms: u64,
) -> Result<Option<u64>, LeaseError> {
    let mut invocation = RENEW.prepare_invoke();
    invocation
        .key(key.lease_key())
        .key(key.holders_key())
        .arg(owner.as_str())
        .arg(ttl_ms)
        .arg(key.name());
    let expires_at_ms: i64 = redis.invoke("renew", &invocation).await?;
    Ok((expires_at_ms > 0).then_some(expires_at_ms as u64))
}

/// `extend.lua`'s answer: the new expiries (Unix ms, Redis clock) in the order of the
/// leases, and the most extensions any has had; or why nothing was extended.
pub(crate) async fn extend(
    redis: &RedisStore,
    leases: &[Lease],
    extension: &Extension,
) -> Result<(Vec<u64>, u32), LeaseError> {
    let group = leases[0].key.group();
    let mut invocation = EXTEND.prepare_invoke();
    invocation
        .key(holders_key(group))
        .key(held_by_key(group, &extension.holder))
        .key(admitted_key(group))
        .arg((extension.ttl.as_millis() as u64).max(1))
        .arg(extension.max_extensions)
        .arg(extension.max_life.as_millis() as u64)
        .arg(&extension.holder)
        // "": no waiting room.
        .arg(extension.admission.as_ref().map_or("", OwnerToken::as_str));
    for lease in leases {
        invocation
            .key(lease.key.lease_key())
            .key(lease.key.extension_key())
            .arg(lease.key.name())
            .arg(lease.owner.as_str());
    }
    let (status, a, name, expiries): (String, u64, String, Vec<u64>) =
        redis.invoke("extend", &invocation).await?;
    match status.as_str() {
        "extended" => Ok((expiries, a as u32)),
        "expired" => Err(LeaseError::Expired { name }),
        "extension_limit" => Err(LeaseError::ExtensionLimit {
            name,
            limit: a as u32,
        }),
        "life_limit" => Err(LeaseError::LifeLimit {
            name,
            max_life: Duration::from_millis(a),
        }),
        "not_admitted" => Err(LeaseError::NotAdmitted),
        _ => Err(RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "extend.lua: unknown status",
            status,
        ))
        .into()),
    }
}

/// Owner token and holding read together, with the Redis time.
static CURRENT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/now_ms.lua"),
        include_str!("scripts/current.lua")
    ))
});

/// The live lease on `key` with its owner token and holding, if any. With `paying`
/// (a holder label and a cooling time), the same script marks that holder's live lease
/// as paying for the cooling time (`current.lua`, docs/time-to-pay.md).
pub(crate) async fn current(
    redis: &RedisStore,
    key: &LeaseKey,
    paying: Option<(&str, Duration)>,
) -> redis::RedisResult<Option<(OwnerToken, Holding, u64)>> {
    let mut invocation = CURRENT.prepare_invoke();
    invocation
        .key(key.lease_key())
        .key(key.holders_key())
        .arg(key.name());
    if let Some((holder, cooling)) = paying {
        invocation.arg(holder).arg(cooling.as_millis() as u64);
    }
    let (owner, entry, now_ms): (Option<String>, Option<String>, u64) =
        redis.invoke("current", &invocation).await?;
    Ok(match (owner, entry) {
        (Some(owner), Some(entry)) => parse_holding(key.name().to_owned(), &entry)
            .filter(|h| h.expires_at_ms > now_ms)
            .map(|h| (OwnerToken::from_string(owner), h, now_ms)),
        _ => None,
    })
}

/// Ends the cooling marker of `lease`'s confirm (`end_paying.lua`): whether this call
/// removed it.
static END_PAYING: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/end_paying.lua")));

pub(crate) async fn end_paying(redis: &RedisStore, lease: &Lease) -> Result<bool, LeaseError> {
    let mut invocation = END_PAYING.prepare_invoke();
    invocation
        .key(lease.key.lease_key())
        .key(lease.key.holders_key())
        .arg(lease.key.name())
        .arg(lease.fencing_token.0)
        .arg(lease.key.events_channel());
    let ended: i64 = redis.invoke("end_paying", &invocation).await?;
    Ok(ended == 1)
}

/// The group's live holdings, and its cooling resources as held until their marker's
/// `until_ms` (by no holder label: the lease lapsed; `current.lua` writes the marker).
pub(crate) async fn holders(redis: &RedisStore, group: &str) -> redis::RedisResult<GroupSnapshot> {
    let mut pipe = redis::pipe();
    pipe.cmd("TIME").cmd("HGETALL").arg(holders_key(group));
    let ((secs, micros), entries): ((u64, u64), Vec<(String, String)>) = redis
        .round_trip("holders", |mut conn| {
            let pipe = &pipe;
            async move { pipe.query_async(&mut conn).await }
        })
        .await?;
    let now_ms = secs * 1000 + micros / 1000;
    // The hash's `~` fields are the group's bookkeeping, not resources: the cooling
    // markers, "<token> <until_ms>", which parse as holdings with no holder label.
    let (markers, entries): (Vec<_>, Vec<_>) = entries
        .into_iter()
        .partition(|(name, _)| name.starts_with('~'));
    let mut holdings: Vec<Holding> = entries
        .into_iter()
        .filter_map(|(name, entry)| parse_holding(name, &entry))
        .filter(|h| h.expires_at_ms > now_ms)
        .collect();
    // A cooling resource is refused to every acquire until its marker's time, so the
    // group shows it held until then. A marker on a live lease changes nothing.
    for (field, marker) in markers {
        let Some(name) = field.strip_prefix(PAYING_FIELD) else {
            continue;
        };
        if let Some(cooling) = parse_holding(name.to_owned(), &marker)
            && cooling.expires_at_ms > now_ms
            && !holdings.iter().any(|h| h.name == cooling.name)
        {
            holdings.push(cooling);
        }
    }
    Ok(GroupSnapshot { now_ms, holdings })
}

/// The holders-hash field prefix of a cooling marker: `~paying:<name>`.
const PAYING_FIELD: &str = "~paying:";

/// One holder's live leases in a group, with the Redis time.
static HELD_BY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/now_ms.lua"),
        include_str!("scripts/held_by.lua")
    ))
});

/// `holder`'s live leases in `group` (`held_by.lua`): one script, whatever the group's
/// size.
pub(crate) async fn held_by(
    redis: &RedisStore,
    group: &str,
    holder: &str,
) -> redis::RedisResult<GroupSnapshot> {
    let mut invocation = HELD_BY.prepare_invoke();
    invocation
        .key(held_by_key(group, holder))
        .key(holders_key(group))
        .arg(holder);
    let (now_ms, held): (u64, Vec<String>) = redis.invoke("held_by", &invocation).await?;
    let holdings = held
        .chunks_exact(2)
        .filter_map(|pair| parse_holding(pair[0].clone(), &pair[1]))
        .collect();
    Ok(GroupSnapshot { now_ms, holdings })
}

/// Parses a holders-hash entry `"<token> <expires_at_ms> <holder>"`.
pub(crate) fn parse_holding(name: String, entry: &str) -> Option<Holding> {
    let mut parts = entry.splitn(3, ' ');
    let fencing_token = FencingToken(parts.next()?.parse().ok()?);
    let expires_at_ms = parts.next()?.parse().ok()?;
    let holder = parts.next().unwrap_or_default().to_owned();
    Some(Holding {
        name,
        holder,
        fencing_token,
        expires_at_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_script_file_opens_with_its_name_keys_argv_and_reply() {
        for (file, text) in [
            ("acquire.lua", include_str!("scripts/acquire.lua")),
            (
                "raise_ceiling.lua",
                include_str!("scripts/raise_ceiling.lua"),
            ),
            ("release.lua", include_str!("scripts/release.lua")),
            ("retire.lua", include_str!("scripts/retire.lua")),
            ("renew.lua", include_str!("scripts/renew.lua")),
            ("extend.lua", include_str!("scripts/extend.lua")),
            ("current.lua", include_str!("scripts/current.lua")),
            ("end_paying.lua", include_str!("scripts/end_paying.lua")),
            ("cooling.lua", include_str!("scripts/cooling.lua")),
            ("held_by.lua", include_str!("scripts/held_by.lua")),
            ("now_ms.lua", include_str!("scripts/now_ms.lua")),
            (
                "server_identity.lua",
                include_str!("scripts/server_identity.lua"),
            ),
        ] {
            let header: String = text
                .lines()
                .take_while(|line| line.starts_with("--"))
                .collect();
            assert!(text.starts_with(&format!("-- {file}: ")), "{file}");
            for part in ["KEYS[1]", "ARGV[1]", "Reply"] {
                assert!(header.contains(part), "{file} header names {part}");
            }
        }
    }

    #[test]
    fn parses_holding_entries() {
        let h = parse_holding("14".into(), "42 1700000000123 buyer a1").unwrap();
        assert_eq!(h.fencing_token, FencingToken(42));
        assert_eq!(h.expires_at_ms, 1_700_000_000_123);
        assert_eq!(h.holder, "buyer a1");
        assert!(parse_holding("14".into(), "garbage").is_none());
    }
}
