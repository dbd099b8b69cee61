-- raise_ceiling.lua: hands Redis a block of fencing tokens reserved in the durable
-- ledger. Raises the ceiling to the new value and moves the counter to at least
-- `ceiling - block` (the start of the block), so a group whose counter Redis lost
-- restarts above every token issued before. A ceiling lower than the stored one (a
-- slower concurrent reservation) changes nothing.
--
-- Only a reservation begun on the data Redis still has is installed: the acquire that
-- asked for the block left a marker (KEYS[2]); if Redis lost its data since, the marker
-- is gone with it and the block is refused, since it may lie below tokens that another
-- process reserved, installed and issued in between. A lost fence hash is thus only ever
-- re-seeded from a reservation made after the loss, which the ledger puts above every
-- block reserved before it.
--
-- Failover guard (ARGV[3] = 1): the marker must also name THIS server (its identity,
-- server_identity.lua): a marker replicated from a primary that has since failed over is
-- refused like a lost one. The block installed is stamped with this server's identity
-- (the fence hash's `server`), which acquire.lua requires before issuing from it; a
-- fence hash stamped by another server is replaced whatever its ceiling (a block
-- reserved after the failover lies above every block reserved before it).
--
-- KEYS[1]  fence hash    lease:{group}:~fence  fields counter, ceiling, server
-- KEYS[2]  reservation   lease:{group}:~reserving:<nonce> (deleted here)
-- ARGV[1]  new ceiling (returned by the ledger), an integer below 2^53
-- ARGV[2]  block size (tokens reserved by that ledger call)
-- ARGV[3]  1: failover guard on; 0: off (lab only: `--lab-disable-failover-guard`)
--
-- Reply: 1 installed (or already covered by a higher ceiling); 0 refused, the marker
-- was gone or made on another server: ask again.
local marker = redis.call('GET', KEYS[2])
if not marker then
  return 0
end
redis.call('DEL', KEYS[2])
local identity = ARGV[3] == '1' and server_identity() or ''
if marker ~= identity then
  return 0
end
local ceiling = tonumber(redis.call('HGET', KEYS[1], 'ceiling') or '0')
local new_ceiling = tonumber(ARGV[1])
if identity ~= '' and redis.call('HGET', KEYS[1], 'server') ~= identity then
  ceiling = 0
  redis.call('HSET', KEYS[1], 'server', identity)
end
if new_ceiling > ceiling then
  local counter = tonumber(redis.call('HGET', KEYS[1], 'counter') or '0')
  local floor = new_ceiling - tonumber(ARGV[2])
  if counter < floor then redis.call('HSET', KEYS[1], 'counter', string.format('%d', floor)) end
  redis.call('HSET', KEYS[1], 'ceiling', string.format('%d', new_ceiling))
end
return 1
