-- acquire.lua: grants a lease if the resource is free and not retired, then takes the
-- group's next fencing token and records the holding, all in one atomic step.
--
-- KEYS[1]  lease key      lease:{group}:<name>    string: owner token, with a PX TTL
-- KEYS[2]  fence hash     lease:{group}:~fence    fields counter, ceiling
-- KEYS[3]  holders hash   lease:{group}:~holders  <name> -> "<token> <expires_at_ms> <holder>"
-- KEYS[4]  reservation    lease:{group}:~reserving:<nonce>  set (PX ARGV[6]) when a block
--                         is needed; only a reservation whose marker survives until its
--                         install is installed (raise_ceiling.lua)
-- KEYS[5]  retired set    lease:{group}:~retired  names never leased again (retire.lua)
-- ARGV[1]  owner token (the lease key's value)
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  resource name inside the group
-- ARGV[4]  holder label (public)
-- ARGV[5]  events channel; a grant is published as
--          "acquired <name> <token> <expires_at_ms> <holder>"
-- ARGV[6]  the reservation marker's TTL in milliseconds
--
-- Reply {status, a, b, holder}:
--   {-2, 0, 0, ""}                         retired: never granted again, nothing written
--   {1, fencing token, expires_at_ms, ""}  granted (expires_at_ms: Unix ms, Redis clock),
--                                          or already granted to this owner token (the
--                                          same request sent twice: idempotent)
--   {0, pttl_ms, 0, holder label}          held by another owner
--   {-1, 0, 0, ""}                         no token left below the ceiling; only the
--                                          reservation marker was written: reserve a
--                                          block, install it, and call again
if redis.call('SISMEMBER', KEYS[5], ARGV[3]) == 1 then
  return {-2, 0, 0, ''}
end
local counter = tonumber(redis.call('HGET', KEYS[2], 'counter') or '0')
local ceiling = tonumber(redis.call('HGET', KEYS[2], 'ceiling') or '0')
if redis.call('EXISTS', KEYS[1]) == 0 and counter >= ceiling then
  redis.call('SET', KEYS[4], '1', 'PX', ARGV[6])
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
if redis.call('GET', KEYS[1]) == ARGV[1] then
  -- Our own grant, asked for again (a request resent after its connection dropped).
  local token, expires = string.match(entry, '^(%d+) (%d+) ')
  if token then return {1, tonumber(token), tonumber(expires), ''} end
end
local holder = string.match(entry, '^%d+ %d+ (.*)$') or ''
return {0, math.max(redis.call('PTTL', KEYS[1]), 0), 0, holder}
