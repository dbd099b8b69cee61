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
-- KEYS[1]  fence hash    lease:{group}:~fence  fields counter, ceiling
-- KEYS[2]  reservation   lease:{group}:~reserving:<nonce> (deleted here)
-- ARGV[1]  new ceiling (returned by the ledger), an integer below 2^53
-- ARGV[2]  block size (tokens reserved by that ledger call)
--
-- Reply: 1 installed (or already covered by a higher ceiling); 0 refused, the marker
-- was gone: ask again.
if redis.call('DEL', KEYS[2]) == 0 then
  return 0
end
local ceiling = tonumber(redis.call('HGET', KEYS[1], 'ceiling') or '0')
local new_ceiling = tonumber(ARGV[1])
if new_ceiling > ceiling then
  local counter = tonumber(redis.call('HGET', KEYS[1], 'counter') or '0')
  local floor = new_ceiling - tonumber(ARGV[2])
  if counter < floor then redis.call('HSET', KEYS[1], 'counter', string.format('%d', floor)) end
  redis.call('HSET', KEYS[1], 'ceiling', string.format('%d', new_ceiling))
end
return 1
