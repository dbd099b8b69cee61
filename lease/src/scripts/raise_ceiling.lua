-- raise_ceiling.lua: hands Redis a block of fencing tokens reserved in the durable
-- ledger. Raises the ceiling to the new value and moves the counter to at least
-- `ceiling - block` (the start of the block), so a group whose counter Redis lost
-- restarts above every token issued before. A ceiling lower than the stored one (a
-- slower concurrent reservation) changes nothing.
--
-- KEYS[1]  fence hash   lease:{group}:~fence  fields counter, ceiling
-- ARGV[1]  new ceiling (returned by the ledger)
-- ARGV[2]  block size (tokens reserved by that ledger call)
--
-- Reply: 1, always.
local ceiling = tonumber(redis.call('HGET', KEYS[1], 'ceiling') or '0')
local new_ceiling = tonumber(ARGV[1])
if new_ceiling > ceiling then
  local counter = tonumber(redis.call('HGET', KEYS[1], 'counter') or '0')
  local floor = new_ceiling - tonumber(ARGV[2])
  if counter < floor then redis.call('HSET', KEYS[1], 'counter', floor) end
  redis.call('HSET', KEYS[1], 'ceiling', new_ceiling)
end
return 1
