//! The Lua scripts. Each runs atomically on the Redis server (`EVALSHA`, falling back to
//! `EVAL` once per connection), so each public operation is one round trip.

use std::sync::LazyLock;

use redis::Script;
use redis::aio::ConnectionManager;

use crate::keys::holders_key;
use crate::telemetry::redis_round_trip;
use crate::{FencingToken, GroupSnapshot, Holding, LeaseKey, OwnerToken};

/// KEYS: lease, fence hash, holders hash. ARGV: owner token, ttl_ms, name, holder label,
/// events channel (a grant is announced there: `acquired <name> <token> <expires> <holder>`).
/// Reply `{status, a, b, holder}`: `{1, token, expires_at_ms, ""}` granted;
/// `{0, pttl_ms, 0, holder}` held by another; `{-1, 0, 0, ""}` no tokens left below the
/// ceiling (nothing was written: reserve a block and call again).
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local counter = tonumber(redis.call('HGET', KEYS[2], 'counter') or '0')
local ceiling = tonumber(redis.call('HGET', KEYS[2], 'ceiling') or '0')
if redis.call('EXISTS', KEYS[1]) == 0 and counter >= ceiling then
  return {-1, 0, 0, ''}
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local token = redis.call('HINCRBY', KEYS[2], 'counter', 1)
  local t = redis.call('TIME')
  local expires = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
  local entry = string.format('%d %d %s', token, expires, ARGV[4])
  redis.call('HSET', KEYS[3], ARGV[3], entry)
  redis.call('PUBLISH', ARGV[5], 'acquired ' .. ARGV[3] .. ' ' .. entry)
  return {1, token, expires, ''}
end
local entry = redis.call('HGET', KEYS[3], ARGV[3]) or ''
local holder = string.match(entry, '^%d+ %d+ (.*)$') or ''
return {0, math.max(redis.call('PTTL', KEYS[1]), 0), 0, holder}
",
    )
});

/// KEYS: fence hash. ARGV: new ceiling, block size. Raises the ceiling to the new value
/// and moves the counter to at least `ceiling - block` (the start of the block), so a
/// group whose counter Redis lost restarts above every token issued before. A ceiling
/// lower than the stored one (a slower concurrent reservation) changes nothing.
static RAISE_CEILING: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local ceiling = tonumber(redis.call('HGET', KEYS[1], 'ceiling') or '0')
local new_ceiling = tonumber(ARGV[1])
if new_ceiling > ceiling then
  local counter = tonumber(redis.call('HGET', KEYS[1], 'counter') or '0')
  local floor = new_ceiling - tonumber(ARGV[2])
  if counter < floor then redis.call('HSET', KEYS[1], 'counter', floor) end
  redis.call('HSET', KEYS[1], 'ceiling', new_ceiling)
end
return 1
",
    )
});

/// KEYS: lease, holders hash. ARGV: owner token, name, events channel. Compare-and-delete;
/// a release is announced as `released <name>`.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('HDEL', KEYS[2], ARGV[2])
  redis.call('PUBLISH', ARGV[3], 'released ' .. ARGV[2])
  return 1
end
return 0
",
    )
});

/// KEYS: lease, holders hash. ARGV: owner token, ttl_ms, name. Compare-and-pexpire;
/// replies the new expiry (Unix ms, Redis clock) or 0 when the caller is not the owner.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local t = redis.call('TIME')
local expires = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
local entry = redis.call('HGET', KEYS[2], ARGV[3]) or ''
local token, holder = string.match(entry, '^(%d+) %d+ (.*)$')
if token then
  redis.call('HSET', KEYS[2], ARGV[3], token .. ' ' .. string.format('%d', expires) .. ' ' .. holder)
end
return expires
",
    )
});

pub(crate) enum AcquireReply {
    Granted {
        fencing_token: u64,
        expires_at_ms: u64,
    },
    Held {
        holder: String,
        remaining_ms: u64,
    },
    NeedsCeiling,
}

pub(crate) async fn acquire(
    redis: &mut ConnectionManager,
    key: &LeaseKey,
    owner: &OwnerToken,
    ttl_ms: u64,
    holder: &str,
) -> redis::RedisResult<AcquireReply> {
    let (status, a, b, holder): (i64, i64, i64, String) = redis_round_trip(
        "acquire",
        ACQUIRE
            .key(key.lease_key())
            .key(key.fence_key())
            .key(key.holders_key())
            .arg(owner.as_str())
            .arg(ttl_ms)
            .arg(key.name())
            .arg(holder)
            .arg(key.events_channel())
            .invoke_async(redis),
    )
    .await?;
    Ok(match status {
        1 => AcquireReply::Granted {
            fencing_token: a as u64,
            expires_at_ms: b as u64,
        },
        0 => AcquireReply::Held {
            holder,
            remaining_ms: a as u64,
        },
        _ => AcquireReply::NeedsCeiling,
    })
}

pub(crate) async fn raise_ceiling(
    redis: &mut ConnectionManager,
    key: &LeaseKey,
    ceiling: u64,
    block: u64,
) -> redis::RedisResult<()> {
    let _: i64 = redis_round_trip(
        "raise_ceiling",
        RAISE_CEILING
            .key(key.fence_key())
            .arg(ceiling)
            .arg(block)
            .invoke_async(redis),
    )
    .await?;
    Ok(())
}

pub(crate) async fn release(
    redis: &mut ConnectionManager,
    key: &LeaseKey,
    owner: &OwnerToken,
) -> Result<bool, crate::LeaseError> {
    let deleted: i64 = redis_round_trip(
        "release",
        RELEASE
            .key(key.lease_key())
            .key(key.holders_key())
            .arg(owner.as_str())
            .arg(key.name())
            .arg(key.events_channel())
            .invoke_async(redis),
    )
    .await?;
    Ok(deleted == 1)
}

pub(crate) async fn renew(
    redis: &mut ConnectionManager,
    key: &LeaseKey,
    owner: &OwnerToken,
    ttl_ms: u64,
) -> Result<Option<u64>, crate::LeaseError> {
    let expires_at_ms: i64 = redis_round_trip(
        "renew",
        RENEW
            .key(key.lease_key())
            .key(key.holders_key())
            .arg(owner.as_str())
            .arg(ttl_ms)
            .arg(key.name())
            .invoke_async(redis),
    )
    .await?;
    Ok((expires_at_ms > 0).then_some(expires_at_ms as u64))
}

/// KEYS: lease, holders hash. ARGV: name. Reads the owner token and the holders entry
/// together (atomically), with the Redis time: `{owner or false, entry or false, now_ms}`.
static CURRENT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
return {redis.call('GET', KEYS[1]), redis.call('HGET', KEYS[2], ARGV[1]),
        tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
",
    )
});

/// The live lease on `key` with its owner token and holding, if any.
pub(crate) async fn current(
    redis: &mut ConnectionManager,
    key: &LeaseKey,
) -> redis::RedisResult<Option<(OwnerToken, Holding, u64)>> {
    let (owner, entry, now_ms): (Option<String>, Option<String>, u64) = redis_round_trip(
        "current",
        CURRENT
            .key(key.lease_key())
            .key(key.holders_key())
            .arg(key.name())
            .invoke_async(redis),
    )
    .await?;
    Ok(match (owner, entry) {
        (Some(owner), Some(entry)) => parse_holding(key.name().to_owned(), &entry)
            .filter(|h| h.expires_at_ms > now_ms)
            .map(|h| (OwnerToken::from_string(owner), h, now_ms)),
        _ => None,
    })
}

pub(crate) async fn holders(
    redis: &mut ConnectionManager,
    group: &str,
) -> redis::RedisResult<GroupSnapshot> {
    let ((secs, micros), entries): ((u64, u64), Vec<(String, String)>) = redis_round_trip(
        "holders",
        redis::pipe()
            .cmd("TIME")
            .cmd("HGETALL")
            .arg(holders_key(group))
            .query_async(redis),
    )
    .await?;
    let now_ms = secs * 1000 + micros / 1000;
    let holdings = entries
        .into_iter()
        .filter_map(|(name, entry)| parse_holding(name, &entry))
        .filter(|h| h.expires_at_ms > now_ms)
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
    fn parses_holding_entries() {
        let h = parse_holding("14".into(), "42 1700000000123 buyer a1").unwrap();
        assert_eq!(h.fencing_token, FencingToken(42));
        assert_eq!(h.expires_at_ms, 1_700_000_000_123);
        assert_eq!(h.holder, "buyer a1");
        assert!(parse_holding("14".into(), "garbage").is_none());
    }
}
