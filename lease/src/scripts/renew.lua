-- renew.lua: compare-and-pexpire (steps 2 and 3). Extends the lease to TTL from now only
-- if the caller's owner token is still the lease key's value, and updates the expiry in
-- the holding. Preceded by now_ms.lua (scripts.rs).
--
-- KEYS[1]  lease key      lease:{group}:<name>
-- KEYS[2]  holders hash   lease:{group}:~holders
-- ARGV[1]  owner token
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  resource name inside the group
--
-- Reply: the new expires_at_ms (Unix ms, Redis clock); 0 not the owner, nothing touched.
local lease_key, holders_key = KEYS[1], KEYS[2]
local owner, ttl_ms, name = ARGV[1], tonumber(ARGV[2]), ARGV[3]
-- Only the owner extends, and a lapsed lease stays lapsed: the key is never recreated.
if redis.call('GET', lease_key) ~= owner then
  return 0
end
redis.call('PEXPIRE', lease_key, ttl_ms)
-- Keep the holding's expiry in step, so readers of the group see the renewed lease.
local expires = now_ms() + ttl_ms
local entry = redis.call('HGET', holders_key, name) or ''
local token, holder = string.match(entry, '^(%d+) %d+ (.*)$')
if token then
  redis.call('HSET', holders_key, name, token .. ' ' .. string.format('%d', expires) .. ' ' .. holder)
end
return expires
