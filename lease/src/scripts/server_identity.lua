-- server_identity.lua: prepended to acquire.lua and raise_ceiling.lua (see scripts.rs);
-- defines server_identity(), the identity of the Redis server running the script,
-- "<run_id>:<master_replid>": what the failover guard stamps a block with (explained once,
-- on FenceLedger in lease/src/fence.rs).
--
-- KEYS[1]  none of its own (it reads no key)
-- ARGV[1]  none of its own
-- Reply: none (a function definition; the including script replies)
local function server_identity()
  -- run_id changes on every start (a restart that reloads an RDB or AOF included),
  -- master_replid when a replica is promoted.
  local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  local replid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)')
  return run_id .. ':' .. replid
end
