-- acquire.lua: steps 1, 2 and 4, and the Redis side of step 5, in one atomic script.
-- It grants leases on one or more resources of ONE group, all or none.
-- All of them get ONE owner token and ONE fencing token.
-- One resource is the ordinary acquire. Several are a group hold, like four seats.
-- The script runs alone on the server, and touches one slot.
-- So callers racing for the same resources cannot each get a part.
-- Nothing is locked one by one, so nothing can deadlock.
-- The steps and the key layout are in lease/src/lib.rs.
-- The fence block and the failover guard are on FenceLedger, in lease/src/fence.rs.
-- scripts.rs puts server_identity.lua and now_ms.lua in front of this file.
-- They define the functions server_identity() and now_ms() used below.
--
-- KEYS[1]  fence hash     lease:{group}:~fence    fields counter, ceiling, server
-- KEYS[2]  holders hash   lease:{group}:~holders  <name> -> "<token> <expires_at_ms> <holder>",
--                         and ~paying:<name> -> "<token> <until_ms>" (current.lua: cooling)
-- KEYS[3]  reservation    lease:{group}:~reserving:<nonce>  written (PX ARGV[5]) only when a
--                         block is needed, to this server's identity ('' without the guard)
-- KEYS[4]  retired set    lease:{group}:~retired  names never leased again (retire.lua)
-- KEYS[5]  holder's set   lease:{group}:~held-by:<holder>  names granted to this holder
--                         (PX: the longest grant in it), counted under a limit and
--                         read by held_by.lua
-- KEYS[6]  admitted zset  lease:{group}:~admitted  the group's waiting room (room/arrive.lua):
--                         member -> expires_at_ms; read only when ARGV[8] names one
-- KEYS[7..6+N]  lease keys  lease:{group}:<name>  string: owner token, with a PX TTL
-- ARGV[1]  owner token (every lease key's value)
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  holder label (public)
-- ARGV[4]  events channel; a grant of one resource is published as
--          "acquired <name> <token> <expires_at_ms> <holder>", of N > 1 as
--          "acquired-group <N> <name 1> … <name N> <token> <expires_at_ms> <holder>"
-- ARGV[5]  the reservation marker's TTL in milliseconds
-- ARGV[6]  limit: the most leases the holder may have in the group, this grant
--          included. 0: no limit, and the holder's set is not counted.
-- ARGV[7]  1: failover guard on. 0: off, in the failover lab only.
-- ARGV[8]  admission: the owner token of the holder's admission to the waiting room
--          (room/arrive.lua). It must be live for anything to be granted. '': no room.
-- ARGV[9]  not before: Unix ms (an event's on-sale) before which nothing is granted, on
--          this server's clock. 0: no such time.
-- ARGV[9+i]  the resource name of KEYS[6+i]
--
-- Reply {status, a, b, holder, name}:
--   {'granted', token, expires_at_ms, '', ''}  all granted (expires_at_ms: Unix ms, Redis
--                                      clock), or all already granted to this owner
--                                      token (a request sent twice: idempotent)
--   {'held', pttl_ms, 0, holder, name}  name is held by another owner (or, after a
--                                      partial lapse, by this one): nothing granted
--   {'retired', 0, 0, '', name}        name is retired: nothing granted or written
--   {'cooling', left_ms, 0, '', name}  name's lease lapsed while a confirm paid for it:
--                                      nobody is granted it for left_ms more, or until
--                                      that confirm ends (end_paying.lua)
--   {'not_yet', not_before, 0, '', ''}  the clock is before ARGV[9]: nothing granted or
--                                      written
--   {'not_admitted', 0, 0, '', ''}     ARGV[8] names no live admission: nothing granted
--                                      or written
--   {'over_limit', held, limit, '', ''}  the holder has `held` live leases in the group;
--                                      N more would pass `limit`: nothing granted or
--                                      written
--   {'needs_block', 0, 0, '', ''}      the counter reached the ceiling: no token left.
--                                      Or, guard on, another server installed the block.
--                                      Only the reservation marker was written. Reserve
--                                      a block, install it, and call again.
local fence_key, holders_key, reservation_key = KEYS[1], KEYS[2], KEYS[3]
local retired_key, held_by_key, admitted_key = KEYS[4], KEYS[5], KEYS[6]
local owner, ttl_ms, holder, channel = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local reservation_ttl_ms, limit, guard = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7] == '1'
local admission, not_before = ARGV[8], tonumber(ARGV[9])
local lease_keys, names = {}, {}
for i = 1, #KEYS - 6 do
  lease_keys[i], names[i] = KEYS[6 + i], ARGV[9 + i]
end
local n = #names

-- A holders-hash entry, split: fencing token, expiry in Unix ms, holder label.
-- nil if there is none.
local function holding(name)
  local entry = redis.call('HGET', holders_key, name) or ''
  return string.match(entry, '^(%d+) (%d+) (.*)$')
end

local now = now_ms()

-- The on-sale comes first, on this server's clock, in the step that grants.
-- So no server whose own clock runs fast can sell early.
if now < not_before then
  return {'not_yet', not_before, 0, '', ''}
end

-- The waiting room's gate comes first. The admission must be live now, on this clock.
-- The check and the SET are one atomic step, so no lapse slips in between.
-- It runs before anything else is read.
-- So a holder not admitted learns nothing of who holds what.
-- A granted lease keeps its own TTL and fence.
-- The admission gates taking leases, not keeping them.
if admission ~= '' then
  local admitted_until = redis.call('ZSCORE', admitted_key, admission)
  if not admitted_until or tonumber(admitted_until) <= now then
    return {'not_admitted', 0, 0, '', ''}
  end
end

-- Retired keys next. A retired key is refused for good, whoever holds it now.
for i = 1, n do
  if redis.call('SISMEMBER', retired_key, names[i]) == 1 then
    return {'retired', 0, 0, '', names[i]}
  end
end

-- Step 1, create-if-absent. Who holds each key now?
-- The whole group is checked before anything is written: all or none.
local ours, other, first_ours = 0, nil, nil
for i, key in ipairs(lease_keys) do
  local value = redis.call('GET', key)
  if value == owner then
    ours = ours + 1
    first_ours = first_ours or i
  elseif value then
    other = other or i
  end
end
-- Every key already holds our owner token. So this request was sent twice:
-- its connection dropped before the reply. Answer with the grant it made.
if ours == n then
  local token, expires = holding(names[1])
  if token then return {'granted', tonumber(token), tonumber(expires), '', ''} end
end
-- A key held by another owner refuses the grant.
-- So does a group we hold only in part, after some keys lapsed.
local blocker = other or first_ours
if blocker then
  local _, _, by = holding(names[blocker])
  local pttl = math.max(redis.call('PTTL', lease_keys[blocker]), 0)
  return {'held', pttl, 0, by or '', names[blocker]}
end

-- Cooling (docs/time-to-pay.md). Every key is absent here. One that lapsed while a
-- confirm paid for it left that confirm's marker: nobody else is granted the name until
-- the confirm ends or until_ms passes. A lapse with no confirm in flight left none.
for i = 1, n do
  local marker = redis.call('HGET', holders_key, '~paying:' .. names[i]) or ''
  local until_ms = tonumber(string.match(marker, '^%d+ (%d+)$') or '0')
  if until_ms > now then
    return {'cooling', until_ms - now, 0, '', names[i]}
  end
end

-- The per-holder limit is counted in this same script.
-- So two concurrent requests cannot both pass it.
-- Names that lapsed or passed to another holder are pruned as they are counted.
if limit > 0 then
  local held = 0
  for _, name in ipairs(redis.call('SMEMBERS', held_by_key)) do
    local _, expires, by = holding(name)
    if by == holder and tonumber(expires) > now then
      held = held + 1
    else
      redis.call('SREM', held_by_key, name)
    end
  end
  if held + n > limit then
    return {'over_limit', held, limit, '', ''}
  end
end

-- Step 5: tokens come from a block the durable ledger reserved.
-- The counter may rise up to the ceiling, and not past it.
-- With the guard on, the block must also be one this very server installed.
-- Otherwise leave a marker naming this server, and ask the client for a block.
local fence = redis.call('HMGET', fence_key, 'counter', 'ceiling', 'server')
local counter, ceiling = tonumber(fence[1] or '0'), tonumber(fence[2] or '0')
local identity = guard and server_identity() or ''
local foreign = identity ~= '' and fence[3] ~= identity
if counter >= ceiling or foreign then
  redis.call('SET', reservation_key, identity, 'PX', reservation_ttl_ms)
  return {'needs_block', 0, 0, '', ''}
end

-- Steps 1 and 2, the article's `SET lock:14C owner NX PX ttl`.
-- NX creates each key only if it is absent. PX gives it its lease.
-- The checks above found every key absent, and nothing runs in between.
-- So every SET succeeds. The assert says so instead of assuming it.
for _, key in ipairs(lease_keys) do
  assert(redis.call('SET', key, owner, 'NX', 'PX', ttl_ms), 'lease key created concurrently')
end

-- Step 4: the next fencing token, one for the whole grant.
-- It is recorded beside each lease, with the expiry and the holder.
-- Readers of the group use the record, and so does a resent request.
local token = redis.call('HINCRBY', fence_key, 'counter', 1)
local expires = now + ttl_ms
local entry = string.format('%d %d %s', token, expires, holder)
for _, name in ipairs(names) do
  redis.call('HSET', holders_key, name, entry)
  -- A cooling marker left of an earlier grant is past its time: the new grant drops it.
  redis.call('HDEL', holders_key, '~paying:' .. name)
end

-- Record the grant in the holder's set. The limit counts it.
-- held_by.lua reads it, to list one holder's leases without reading the whole group.
-- The set lives as long as its longest grant. GT lengthens its TTL, never shortens it:
-- one call while grants follow each other. It refuses a set with no TTL yet (a new one),
-- which NX then gives this grant's.
redis.call('SADD', held_by_key, unpack(names))
if redis.call('PEXPIRE', held_by_key, ttl_ms, 'GT') == 0 then
  redis.call('PEXPIRE', held_by_key, ttl_ms, 'NX')
end

-- Tell the group's watchers. changes.rs parses these messages.
if n == 1 then
  redis.call('PUBLISH', channel, 'acquired ' .. names[1] .. ' ' .. entry)
else
  redis.call('PUBLISH', channel,
    'acquired-group ' .. n .. ' ' .. table.concat(names, ' ') .. ' ' .. entry)
end
return {'granted', token, expires, '', ''}
