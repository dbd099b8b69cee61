-- now_ms.lua: prepended to acquire.lua, renew.lua and current.lua (see scripts.rs);
-- defines now_ms(), the Redis server's clock in Unix milliseconds. Every time the crate
-- keeps is read from this clock, never from the caller's.
--
-- KEYS[1]  none of its own (it reads no key)
-- ARGV[1]  none of its own
-- Reply: none (a function definition; the including script replies)
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
