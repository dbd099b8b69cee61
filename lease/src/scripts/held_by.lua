-- held_by.lua: one holder's live leases in a group (seatlock: a buyer's holds, read on
-- every page view) without reading the whole group. acquire.lua adds every name it
-- grants to the holder's set; the holders hash says whether each is still the holder's
-- and unexpired (a lapsed or released name stays in the set until it expires or a
-- limited acquire prunes it, so it is checked here, not trusted). Read-only. Preceded by
-- now_ms.lua (scripts.rs).
--
-- KEYS[1]  holder's set   lease:{group}:~held-by:<holder>  names granted to the holder
-- KEYS[2]  holders hash   lease:{group}:~holders  <name> -> "<token> <expires_at_ms> <holder>"
-- ARGV[1]  holder label (public)
--
-- Reply {now_ms, {name 1, entry 1, name 2, entry 2, ...}}: the Redis time in Unix ms,
-- and each name whose holders entry "<token> <expires_at_ms> <holder>" gives it to the
-- holder and has not expired, with that entry.
local now = now_ms()
local held = {}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local entry = redis.call('HGET', KEYS[2], name)
  local expires, by
  if entry then
    -- The holder is whatever follows the second space (a label may contain spaces).
    expires, by = string.match(entry, '^%S+ (%S+) (.*)$')
  end
  if by == ARGV[1] and tonumber(expires) > now then
    held[#held + 1] = name
    held[#held + 1] = entry
  end
end
return {now, held}
