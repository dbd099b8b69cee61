-- raise_ceiling.lua: step 5, hands Redis a block of fencing tokens reserved in the
-- durable ledger: raises the ceiling to the new value and moves the counter to at least
-- the start of the block, only for a reservation whose marker survived, on this server.
-- Why (blocks, the marker, the failover guard): FenceLedger, lease/src/fence.rs.
-- Preceded by server_identity.lua (scripts.rs).
--
-- KEYS[1]  fence hash    lease:{group}:~fence  fields counter, ceiling, server
-- KEYS[2]  reservation   lease:{group}:~reserving:<nonce> (deleted here)
-- ARGV[1]  new ceiling (returned by the ledger), an integer below 2^53
-- ARGV[2]  block size (tokens reserved by that ledger call)
-- ARGV[3]  1: failover guard on; 0: off (lab only: `--lab-disable-failover-guard`)
--
-- Reply: 1 installed (or already covered by a higher ceiling); 0 refused, the marker
-- was gone or made on another server: ask again.
local fence_key, reservation_key = KEYS[1], KEYS[2]
local new_ceiling, block, guard = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1'
-- No marker: Redis lost its data since the reservation began, and this block may lie
-- below tokens another process reserved, installed and issued in between.
local marker = redis.call('GET', reservation_key)
if not marker then
  return 0
end
redis.call('DEL', reservation_key)
-- A marker written on another server (replicated from a primary that has since failed
-- over) is refused like a lost one.
local identity = guard and server_identity() or ''
if marker ~= identity then
  return 0
end
-- A block stamped by another server is replaced whatever its ceiling: a block reserved
-- after the failover lies above every block reserved before it.
local ceiling = tonumber(redis.call('HGET', fence_key, 'ceiling') or '0')
if identity ~= '' and redis.call('HGET', fence_key, 'server') ~= identity then
  ceiling = 0
  redis.call('HSET', fence_key, 'server', identity)
end
-- Only ever up: a slower concurrent reservation with a lower ceiling changes nothing. A
-- counter Redis lost restarts at the block's start, above every token issued before.
if new_ceiling > ceiling then
  local counter = tonumber(redis.call('HGET', fence_key, 'counter') or '0')
  local floor = new_ceiling - block
  if counter < floor then redis.call('HSET', fence_key, 'counter', string.format('%d', floor)) end
  redis.call('HSET', fence_key, 'ceiling', string.format('%d', new_ceiling))
end
return 1
