-- current.lua: reads a lease's owner token and its holding together (atomically), with
-- the Redis time. Preceded by now_ms.lua (scripts.rs).
--
-- KEYS[1]  lease key      lease:{group}:<name>
-- KEYS[2]  holders hash   lease:{group}:~holders
-- ARGV[1]  resource name inside the group
--
-- Reply {owner, entry, now_ms}: the owner token or false (no lease), the holders entry
-- "<token> <expires_at_ms> <holder>" or false, and the Redis time in Unix ms.
local lease_key, holders_key, name = KEYS[1], KEYS[2], ARGV[1]
return {redis.call('GET', lease_key), redis.call('HGET', holders_key, name), now_ms()}
