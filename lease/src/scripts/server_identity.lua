-- server_identity.lua: the prelude of the guarded function library (redis/library.rs),
-- which holds acquire.lua and raise_ceiling.lua; defines server_identity(), the identity
-- of the Redis server running the call, "<run_id>:<master_replid>": what the failover
-- guard stamps a block with (explained once, on FenceLedger in lease/src/fence.rs).
--
-- KEYS[1]  none of its own (it reads no key)
-- ARGV[1]  none of its own
-- Reply: none (a function definition; the including function replies)

-- run_id changes on every start (a restart that reloads an RDB or AOF included), and
-- never while the process runs. A function library's Lua state lives in the process
-- that loaded it, so a value kept here is forgotten by every restart: the run_id is
-- read once per process, not once per grant (INFO server is the costliest call a
-- grant would make: docs/performance.md, "What each script costs").
local run_id = nil

local function server_identity()
  run_id = run_id or string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  -- master_replid changes when a replica is promoted, in the same process. So it is
  -- read on every call: a server that was a primary, then a replica, then a primary
  -- again has kept its Lua state but has a new master_replid.
  local replid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)')
  return run_id .. ':' .. replid
end
