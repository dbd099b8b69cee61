-- current.lua: reads a lease's owner token and its holding together (atomically), with
-- the Redis time. Preceded by now_ms.lua (scripts.rs). Called with a holder and a
-- cooling time, it also marks the holder's live lease as paying: a confirm begins.
--
-- KEYS[1]  lease key      lease:{group}:<name>
-- KEYS[2]  holders hash   lease:{group}:~holders  <name> -> "<token> <expires_at_ms> <holder>",
--                         and the marker ~paying:<name> -> "<token> <until_ms>" written here
-- ARGV[1]  resource name inside the group
-- ARGV[2]  optional: the holder label whose confirm begins paying
-- ARGV[3]  optional: the cooling time in milliseconds (until_ms is now plus this)
--
-- Reply {owner, entry, now_ms}: the owner token or false (no lease), the holders entry
-- "<token> <expires_at_ms> <holder>" or false, and the Redis time in Unix ms.
local lease_key, holders_key, name = KEYS[1], KEYS[2], ARGV[1]
local owner, entry, now = redis.call('GET', lease_key), redis.call('HGET', holders_key, name), now_ms()
-- A confirm begins paying (docs/time-to-pay.md). Should the lease lapse before the
-- confirm ends, acquire.lua refuses the name until until_ms: the marker says so. It is
-- written only on the holder's live lease, and carries its fencing token, so the
-- confirm's end (end_paying.lua) removes its own marker and no later grant's.
if ARGV[3] and owner and entry then
  local token, expires, by = string.match(entry, '^(%d+) (%d+) (.*)$')
  if by == ARGV[2] and tonumber(expires) > now then
    local marker = string.format('%s %d', token, now + tonumber(ARGV[3]))
    redis.call('HSET', holders_key, '~paying:' .. name, marker)
  end
end
return {owner, entry, now}
