-- open_sale.lua: prepended to join.lua and tick.lua (room/mod.rs); defines
-- open_sale(room_key, now, on_sale), which reads the room's hash and, once the on-sale
-- has come on the Redis clock, closes the pre-queue: its size is frozen, and the places
-- given from then on follow it. Returns the room as a table.
--
-- KEYS[1]  none of its own: the including script passes its room hash
-- ARGV[1]  none of its own
-- Reply: none (a function definition; the including script replies)
local function open_sale(room_key, now, on_sale)
  local f = redis.call('HMGET', room_key, 'epoch', 'fence', 'frontier', 'issued', 'prequeue', 'open')
  local room = {
    epoch = f[1] or '',
    fence = tonumber(f[2] or '0'),
    frontier = tonumber(f[3] or '0'),
    issued = tonumber(f[4] or '0'),
    prequeue = tonumber(f[5] or '0'),
    open = f[6] == '1',
  }
  -- The pre-queue's k-th member takes a place among 1..prequeue, drawn by the caller
  -- from the event's seed; everyone who joins later comes after them.
  if not room.open and now >= on_sale then
    room.open = true
    room.issued = math.max(room.issued, room.prequeue)
    redis.call('HSET', room_key, 'open', 1, 'issued', room.issued)
  end
  return room
end
