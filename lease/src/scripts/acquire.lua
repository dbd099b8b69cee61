-- acquire.lua: grants leases on one or more resources of ONE group, all or none, under
-- ONE fencing token, and records each holding, all in one atomic step. One resource is
-- the ordinary acquire; several are a group hold (seatlock: four seats together). The
-- script runs alone on the server and touches one slot (every key carries the group's
-- hash tag), so two callers racing for overlapping resources cannot each get a part of
-- what they asked for, and cannot deadlock: nothing is locked one by one, there is no
-- order to get wrong.
--
-- Failover guard (ARGV[7] = 1): tokens are issued only from a block installed on THIS
-- server (the fence hash's `server` field is this server's identity, see
-- server_identity.lua). After a failover to a replica that missed the last grants, or a
-- restart that reloaded an older snapshot, the counter may be behind tokens already
-- issued; the stamp then names another server and a fresh block is asked for, which the
-- durable ledger puts above every token issued before.
--
-- KEYS[1]  fence hash     lease:{group}:~fence    fields counter, ceiling, server
-- KEYS[2]  holders hash   lease:{group}:~holders  <name> -> "<token> <expires_at_ms> <holder>"
-- KEYS[3]  reservation    lease:{group}:~reserving:<nonce>  set (PX ARGV[5]) when a block
--                         is needed, to this server's identity (empty without the guard);
--                         only a reservation whose marker survives until its install, on
--                         the same server, is installed (raise_ceiling.lua)
-- KEYS[4]  retired set    lease:{group}:~retired  names never leased again (retire.lua)
-- KEYS[5]  holder's set   lease:{group}:~held-by:<holder>  names this holder was granted
--                         under a limit; a member counts while the holders hash still
--                         gives it to this holder, unexpired (Redis clock), and is
--                         removed when counted otherwise. PX: the longest grant in it.
-- KEYS[6..5+N]  lease keys  lease:{group}:<name>  string: owner token, with a PX TTL
-- ARGV[1]  owner token (every lease key's value)
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  holder label (public)
-- ARGV[4]  events channel; a grant of one resource is published as
--          "acquired <name> <token> <expires_at_ms> <holder>", of N > 1 as
--          "acquired-group <N> <name 1> … <name N> <token> <expires_at_ms> <holder>"
-- ARGV[5]  the reservation marker's TTL in milliseconds
-- ARGV[6]  limit: the most leases the holder may have in the group at once, this grant
--          included; 0 for none (then the holder's set is neither read nor written)
-- ARGV[7]  1: failover guard on; 0: off (lab only: `--lab-disable-failover-guard`)
-- ARGV[7+i]  the resource name of KEYS[5+i]
--
-- Reply {status, a, b, holder, name}:
--   {-2, 0, 0, "", name}                   name is retired: nothing granted or written
--   {1, fencing token, expires_at_ms, "", ""}  all granted (expires_at_ms: Unix ms, Redis
--                                          clock), or all already granted to this owner
--                                          token (a request sent twice: idempotent)
--   {0, pttl_ms, 0, holder label, name}    name is held by another owner (or, after a
--                                          partial lapse, by this one): nothing granted
--   {-3, held, limit, "", ""}              the holder has `held` live leases in the
--                                          group; N more would pass `limit`: nothing
--                                          granted or written
--   {-1, 0, 0, "", ""}                     no token left below the ceiling, or (guard
--                                          on) the block was installed on another
--                                          server; only the reservation marker was
--                                          written: reserve a block, install it, and
--                                          call again
local n = #KEYS - 5
for i = 1, n do
  if redis.call('SISMEMBER', KEYS[4], ARGV[7 + i]) == 1 then
    return {-2, 0, 0, '', ARGV[7 + i]}
  end
end
local taken, ours = 0, 0
for i = 1, n do
  local owner = redis.call('GET', KEYS[5 + i])
  if owner == ARGV[1] then
    ours = ours + 1
  elseif owner and taken == 0 then
    taken = i
  end
end
if ours == n then
  -- Our own grant, asked for again (a request resent after its connection dropped).
  local entry = redis.call('HGET', KEYS[2], ARGV[8]) or ''
  local token, expires = string.match(entry, '^(%d+) (%d+) ')
  if token then return {1, tonumber(token), tonumber(expires), '', ''} end
end
if taken > 0 or ours > 0 then
  if taken == 0 then
    for i = 1, n do
      if redis.call('EXISTS', KEYS[5 + i]) == 1 then taken = i break end
    end
  end
  local entry = redis.call('HGET', KEYS[2], ARGV[7 + taken]) or ''
  local holder = string.match(entry, '^%d+ %d+ (.*)$') or ''
  return {0, math.max(redis.call('PTTL', KEYS[5 + taken]), 0), 0, holder, ARGV[7 + taken]}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[6])
if limit > 0 then
  local held = 0
  for _, name in ipairs(redis.call('SMEMBERS', KEYS[5])) do
    local entry = redis.call('HGET', KEYS[2], name) or ''
    local expires, holder = string.match(entry, '^%d+ (%d+) (.*)$')
    if holder == ARGV[3] and tonumber(expires) > now then
      held = held + 1
    else
      redis.call('SREM', KEYS[5], name)
    end
  end
  if held + n > limit then
    return {-3, held, limit, '', ''}
  end
end
local counter = tonumber(redis.call('HGET', KEYS[1], 'counter') or '0')
local ceiling = tonumber(redis.call('HGET', KEYS[1], 'ceiling') or '0')
local identity = ARGV[7] == '1' and server_identity() or ''
local foreign = identity ~= '' and redis.call('HGET', KEYS[1], 'server') ~= identity
if counter >= ceiling or foreign then
  redis.call('SET', KEYS[3], identity, 'PX', ARGV[5])
  return {-1, 0, 0, '', ''}
end
local token = redis.call('HINCRBY', KEYS[1], 'counter', 1)
local expires = now + tonumber(ARGV[2])
local entry = string.format('%d %d %s', token, expires, ARGV[3])
local names = {}
for i = 1, n do
  redis.call('SET', KEYS[5 + i], ARGV[1], 'PX', ARGV[2])
  redis.call('HSET', KEYS[2], ARGV[7 + i], entry)
  names[i] = ARGV[7 + i]
end
if limit > 0 then
  redis.call('SADD', KEYS[5], unpack(names))
  if redis.call('PTTL', KEYS[5]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[5], ARGV[2])
  end
end
if n == 1 then
  redis.call('PUBLISH', ARGV[4], 'acquired ' .. names[1] .. ' ' .. entry)
else
  redis.call('PUBLISH', ARGV[4],
    'acquired-group ' .. n .. ' ' .. table.concat(names, ' ') .. ' ' .. entry)
end
return {1, token, expires, '', ''}
