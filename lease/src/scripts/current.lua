-- current.lua: reads a lease's owner token and its holding together (atomically), with
-- the Redis time.
--
-- KEYS[1]  lease key      lease:{group}:<name>
-- KEYS[2]  holders hash   lease:{group}:~holders
-- ARGV[1]  resource name inside the group
--
-- Reply {owner, entry, now_ms}: the owner token or false (no lease), the holders entry
-- "<token> <expires_at_ms> <holder>" or false, and the Redis time in Unix ms.
local t = redis.call('TIME')
return {redis.call('GET', KEYS[1]), redis.call('HGET', KEYS[2], ARGV[1]),
        tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
