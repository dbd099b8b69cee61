-- admission_ended.lua: prepended to enter.lua and leave.lua (see scripts.rs); defines
-- admission_ended(member, ended_at), which ends one admission of a waiting room: its
-- place is free at once, and its length (from its admission to `ended_at`, Unix ms: a
-- leave's now, a lapse's expiry) is added to the room's tally, from which enter.lua
-- estimates a queued buyer's wait.
--
-- KEYS[1]  none of its own: it uses the including script's KEYS[3] (admitted) and
--          KEYS[4] (room hash)
-- ARGV[1]  none of its own
-- Reply: none (a function definition; the including script replies)
local function admission_ended(member, ended_at)
  local since = tonumber(redis.call('HGET', KEYS[4], 'since:' .. member) or ended_at)
  redis.call('ZREM', KEYS[3], member)
  redis.call('HDEL', KEYS[4], 'since:' .. member)
  redis.call('HINCRBY', KEYS[4], 'ended', 1)
  redis.call('HINCRBY', KEYS[4], 'ended_ms', math.max(ended_at - since, 0))
end
