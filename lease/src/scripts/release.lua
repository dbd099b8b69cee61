-- release.lua: compare-and-delete. Deletes the lease and its holding only if the
-- caller's owner token is still the lease key's value.
--
-- KEYS[1]  lease key      lease:{group}:<name>
-- KEYS[2]  holders hash   lease:{group}:~holders
-- ARGV[1]  owner token
-- ARGV[2]  resource name inside the group
-- ARGV[3]  events channel; a release is published as "released <name>"
--
-- Reply: 1 released by this call; 0 not the owner (expired, or passed to another
-- owner), nothing touched.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('HDEL', KEYS[2], ARGV[2])
  redis.call('PUBLISH', ARGV[3], 'released ' .. ARGV[2])
  return 1
end
return 0
