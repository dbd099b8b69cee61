-- release.lua: step 3, compare-and-delete. Deletes the lease and its holding only if the
-- caller's owner token is still the lease key's value. Also the end of retire.lua, which
-- scripts.rs appends it to.
--
-- KEYS[1]  lease key      lease:{group}:<name>
-- KEYS[2]  holders hash   lease:{group}:~holders
-- ARGV[1]  owner token
-- ARGV[2]  resource name inside the group
-- ARGV[3]  events channel; a release is published as "released <name>"
--
-- Reply: 1 released by this call; 0 not the owner (expired, or passed to another
-- owner), nothing touched.
local lease_key, holders_key = KEYS[1], KEYS[2]
local owner, name, channel = ARGV[1], ARGV[2], ARGV[3]
-- Compare and delete in one atomic script: between a GET and a DEL sent apart, the lease
-- could lapse and pass to another owner, whose lease the DEL would then remove.
if redis.call('GET', lease_key) == owner then
  redis.call('DEL', lease_key)
  redis.call('HDEL', holders_key, name)
  redis.call('PUBLISH', channel, 'released ' .. name)
  return 1
end
return 0
