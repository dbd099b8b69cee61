-- retire.lua: retires a resource for good (its protected write was final: a sold seat),
-- so that no later acquire grants it, then releases the caller's lease on it: scripts.rs
-- appends release.lua, whose compare-and-delete ends this script. Retiring is idempotent
-- and needs no lease: whoever learns that the resource is done may record it.
--
-- KEYS[1]  lease key      lease:{group}:<name>
-- KEYS[2]  holders hash   lease:{group}:~holders  (also the field ~paying:<name>)
-- KEYS[3]  retired set    lease:{group}:~retired  (no TTL: retirement is forever)
-- ARGV[1]  owner token
-- ARGV[2]  resource name inside the group
-- ARGV[3]  events channel; a release is published as "released <name>"
--
-- Reply (release.lua's): 1 retired and the caller's lease released by this call; 0
-- retired, and there was no lease of the caller's to release (expired, released, or
-- another owner's, which is left as it is).
local retired_key, retired_name = KEYS[3], ARGV[2]
-- Recorded whatever the owner check below finds: another owner's lease is left to lapse,
-- but no new grant follows it.
redis.call('SADD', retired_key, retired_name)
-- The sale is final, so no confirm of the resource is left to wait for: its cooling
-- marker goes too, even when the lease lapsed before this retire (release.lua then
-- finds nothing of the caller's to delete).
redis.call('HDEL', KEYS[2], '~paying:' .. retired_name)
