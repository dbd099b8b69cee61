-- renew.lua: compare-and-pexpire. Extends the lease to TTL from now only if the
-- caller's owner token is still the lease key's value, and updates the expiry in the
-- holding. An expired key is never recreated.
--
-- KEYS[1]  lease key      lease:{group}:<name>
-- KEYS[2]  holders hash   lease:{group}:~holders
-- ARGV[1]  owner token
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  resource name inside the group
--
-- Reply: the new expires_at_ms (Unix ms, Redis clock); 0 not the owner, nothing touched.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local t = redis.call('TIME')
local expires = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
local entry = redis.call('HGET', KEYS[2], ARGV[3]) or ''
local token, holder = string.match(entry, '^(%d+) %d+ (.*)$')
if token then
  redis.call('HSET', KEYS[2], ARGV[3], token .. ' ' .. string.format('%d', expires) .. ' ' .. holder)
end
return expires
