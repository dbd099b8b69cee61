-- release_held_by.lua: step 3 for a holder that keeps no copy of its owner token.
-- Seatlock's release is one: its buyers never see the token, and the server stores none.
-- The script checks that the lease's recorded holder is the caller.
-- That check is what protects the lease here.
-- It then reads the owner token and ends in release.lua's compare-and-delete.
-- scripts.rs appends release.lua. With the token just read, the compare always holds.
-- All of it is one atomic script, so the lease cannot pass to another holder between
-- the check and the delete.
--
-- KEYS[1]  lease key      lease:{group}:<name>
-- KEYS[2]  holders hash   lease:{group}:~holders  <name> -> "<token> <expires_at_ms> <holder>"
-- ARGV[1]  holder label (public), replaced below by the owner token release.lua compares
-- ARGV[2]  resource name inside the group
-- ARGV[3]  events channel; a release is published as "released <name>"
--
-- Reply (release.lua's): 1 released by this call; 0 no live lease of this holder on the
-- resource (none, lapsed, or another holder's, which is left as it is).
local entry = redis.call('HGET', KEYS[2], ARGV[2])
-- The holder is whatever follows the second space (a label may itself contain spaces).
local recorded = entry and string.match(entry, '^%S+ %S+ (.*)$')
if recorded ~= ARGV[1] then
  return 0
end
-- The lease key's value is the owner token of that holder's grant (one grant writes both;
-- a lapsed key is gone, and release.lua then finds nothing to delete).
ARGV[1] = redis.call('GET', KEYS[1])
if not ARGV[1] then
  return 0
end
-- scripts.rs appends release.lua here: its compare-and-delete runs next, on ARGV[1].
