-- release.lua: step 3, compare-and-delete.
-- It deletes the lease, its holding and its cooling marker (current.lua) only if the key
-- still holds the caller's token.
-- scripts.rs also appends it to retire.lua and release_held_by.lua.
--
-- KEYS[1]  lease key      lease:{group}:<name>
-- KEYS[2]  holders hash   lease:{group}:~holders  (also the field ~paying:<name>)
-- ARGV[1]  owner token
-- ARGV[2]  resource name inside the group
-- ARGV[3]  events channel; a release is published as "released <name>"
--
-- Reply: 1 if this call released the lease. 0 if the caller is not the owner:
-- the lease expired or passed to another owner. Then nothing is touched.
local lease_key, holders_key = KEYS[1], KEYS[2]
local owner, name, channel = ARGV[1], ARGV[2], ARGV[3]
-- Compare and delete in one atomic script.
-- A GET and a DEL sent apart would leave a gap.
-- In that gap the lease could lapse and pass to another owner.
-- The DEL would then remove the other owner's lease.
if redis.call('GET', lease_key) == owner then
  redis.call('DEL', lease_key)
  redis.call('HDEL', holders_key, name, '~paying:' .. name)
  redis.call('PUBLISH', channel, 'released ' .. name)
  return 1
end
return 0
