-- end_paying.lua: a confirm that ends without its sale ends its resource's cooling.
-- current.lua wrote the marker when the confirm began. A lease that lapsed meanwhile is
-- then free at once, not at the marker's until_ms (docs/time-to-pay.md).
--
-- KEYS[1]  lease key      lease:{group}:<name>
-- KEYS[2]  holders hash   lease:{group}:~holders  field ~paying:<name> -> "<token> <until_ms>"
-- ARGV[1]  resource name inside the group
-- ARGV[2]  the fencing token of the confirm's lease
-- ARGV[3]  events channel; a cooled lease now free is published as "released <name>"
--
-- Reply: 1 if this call removed the confirm's marker. 0 if there was none of this token
-- (a later grant's marker, or none): then nothing is touched.
local lease_key, holders_key = KEYS[1], KEYS[2]
local name, token, channel = ARGV[1], ARGV[2], ARGV[3]
-- The token check: a confirm of an earlier grant never ends a later grant's cooling.
local marker = redis.call('HGET', holders_key, '~paying:' .. name) or ''
if string.match(marker, '^(%d+) ') ~= token then
  return 0
end
redis.call('HDEL', holders_key, '~paying:' .. name)
-- With the lease lapsed, the seat was shown taken while it cooled: tell the watchers
-- it is free now.
if redis.call('EXISTS', lease_key) == 0 then
  redis.call('PUBLISH', channel, 'released ' .. name)
end
return 1
