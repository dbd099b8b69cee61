-- retire.lua: retires a resource for good (its protected write was final: a sold seat),
-- so that no later acquire grants it, and releases the caller's lease on it if the
-- caller's owner token is still the lease key's value (compare-and-delete, as
-- release.lua). Retiring is idempotent and needs no lease: whoever learns that the
-- resource is done may record it.
--
-- KEYS[1]  lease key      lease:{group}:<name>
-- KEYS[2]  holders hash   lease:{group}:~holders
-- KEYS[3]  retired set    lease:{group}:~retired  (no TTL: retirement is forever)
-- ARGV[1]  owner token
-- ARGV[2]  resource name inside the group
-- ARGV[3]  events channel; a release is published as "released <name>"
--
-- Reply: 1 retired and the caller's lease released by this call; 0 retired, and there
-- was no lease of the caller's to release (expired, released, or another owner's, which
-- is left as it is).
redis.call('SADD', KEYS[3], ARGV[2])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('HDEL', KEYS[2], ARGV[2])
  redis.call('PUBLISH', ARGV[3], 'released ' .. ARGV[2])
  return 1
end
return 0
