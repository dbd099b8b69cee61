-- server_identity.lua: prepended to acquire.lua and raise_ceiling.lua (see scripts.rs);
-- defines server_identity(), the identity of the Redis server running the script:
-- "<run_id>:<master_replid>". `run_id` (INFO server) changes on every start, restarts
-- that reload an RDB or AOF included; `master_replid` (INFO replication) changes when a
-- replica is promoted. A fence hash stamped with another identity was written (or
-- replicated) by another server, which may have issued tokens this copy never saw.
--
-- KEYS[1]  none of its own (it reads no key)
-- ARGV[1]  none of its own
-- Reply: none (a function definition; the including script replies)
local function server_identity()
  local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  local replid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)')
  return run_id .. ':' .. replid
end
