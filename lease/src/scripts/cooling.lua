-- cooling.lua: how long a name whose lease lapsed still cools (current.lua's marker), for
-- a watcher that heard the lapse (docs/time-to-pay.md). Read-only. Preceded by now_ms.lua
-- (changes.rs).
--
-- KEYS[1]  holders hash   lease:{group}:~holders  field ~paying:<name> -> "<token> <until_ms>"
-- KEYS[2]  lease key      lease:{group}:<name>
-- ARGV[1]  resource name inside the group
--
-- Reply: the milliseconds the name still cools; 0 if it does not (no marker, one past its
-- time, or a live lease again: granted anew).
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
local marker = redis.call('HGET', KEYS[1], '~paying:' .. ARGV[1]) or ''
local until_ms = tonumber(string.match(marker, '^%d+ (%d+)$') or '0')
return math.max(until_ms - now_ms(), 0)
