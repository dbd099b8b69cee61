-- tick.lua: one step of a waiting room, run about once a second by one server at a
-- time: the ticker, which holds a lease on the room's ticking. It moves the frontier
-- (the highest place whose turn has come) while fewer than N shop, and tells every
-- server on the group's channel. The article's lock, lease and fence once more: the
-- ticker's lease keeps the others idle, and its fencing token is checked here, so a
-- ticker that paused past its lease and wakes late changes nothing. Preceded by
-- now_ms.lua and open_sale.lua.
--
-- KEYS[1]  room hash  lease:{group}:~room      epoch, fence (the highest ticker token
--                     accepted), frontier, issued, prequeue, open
-- KEYS[2]  admitted   lease:{group}:~admitted  member -> expires_at_ms (arrived shoppers)
-- KEYS[3]  turns      lease:{group}:~turns     place -> when its turn came, Unix ms (not
--                     arrived yet)
-- KEYS[4]  since      lease:{group}:~since     member -> admitted at, Unix ms
-- KEYS[5]  gone       lease:{group}:~gone      places whose holder left before their turn
-- ARGV[1]  the ticker's fencing token
-- ARGV[2]  shoppers: at most this many shop at once (>= 1)
-- ARGV[3]  the arrival window, ms: a turn not taken within it is over
-- ARGV[4]  the on-sale time, Unix ms (0: on sale)
-- ARGV[5]  the group's channel, where the room's state is published
-- ARGV[6]  an epoch for the room if it has none yet (random)
-- ARGV[7]  how long the room's keys live after an advance, ms
--
-- Reply, and the message published as 'room <epoch> <frontier> <issued> <prequeue>
-- <open> <shopping> <now>':
--   {'ticked', epoch, frontier, issued, prequeue, open (0/1), shopping, now_ms}
--   {'fenced', highest token accepted}: a newer ticker has ticked; nothing written
local room_key, admitted_key, turns_key, since_key, gone_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, shoppers, window_ms = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local on_sale, channel, keep_ms = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[7])
local now = now_ms()

-- The fence, before any write: a token older than one already accepted is refused.
local fence = tonumber(redis.call('HGET', room_key, 'fence') or '0')
if token < fence then
  return {'fenced', fence}
end
-- A new ticker's first step also renews the room's keys, so a room nobody has joined
-- yet does not live for ever.
local renew_keys = token > fence
if renew_keys then
  redis.call('HSET', room_key, 'fence', token)
end
redis.call('HSETNX', room_key, 'epoch', ARGV[6])
local room = open_sale(room_key, now, on_sale)

-- Admissions that lapsed end: their places are free.
local lapsed = redis.call('ZRANGEBYSCORE', admitted_key, '-inf', now)
if #lapsed > 0 then
  redis.call('ZREMRANGEBYSCORE', admitted_key, '-inf', now)
  redis.call('HDEL', since_key, unpack(lapsed))
end

-- A turn nobody took within the arrival window is over: a buyer gone for good costs
-- one window of an idle place, no more.
redis.call('ZREMRANGEBYSCORE', turns_key, '-inf', now - window_ms)

-- Advance while a place is free. Every place passed gets its turn now, except those
-- whose holder left the line before it came.
local shopping = redis.call('ZCARD', admitted_key) + redis.call('ZCARD', turns_key)
local frontier = room.frontier
if room.open then
  while shopping < shoppers and frontier < room.issued do
    local upto = math.min(frontier + shoppers - shopping, room.issued)
    local left = {}
    for _, place in ipairs(redis.call('ZRANGEBYSCORE', gone_key, '(' .. frontier, upto)) do
      left[tonumber(place)] = true
    end
    redis.call('ZREMRANGEBYSCORE', gone_key, '-inf', upto)
    local turns = {}
    for place = frontier + 1, upto do
      if not left[place] then
        turns[#turns + 1] = now
        turns[#turns + 1] = place
      end
    end
    -- ZADD in slices: Lua's unpack takes a few thousand values at most.
    for i = 1, #turns, 1000 do
      redis.call('ZADD', turns_key, unpack(turns, i, math.min(i + 999, #turns)))
    end
    shopping = shopping + #turns / 2
    frontier = upto
  end
  if frontier ~= room.frontier then
    redis.call('HSET', room_key, 'frontier', frontier)
    renew_keys = true
  end
end
if renew_keys then
  for _, key in ipairs(KEYS) do
    redis.call('PEXPIRE', key, keep_ms + math.max(on_sale - now, 0))
  end
end

local open = room.open and 1 or 0
redis.call('PUBLISH', channel, string.format('room %s %d %d %d %d %d %d',
  room.epoch, frontier, room.issued, room.prequeue, open, shopping, now))
return {'ticked', room.epoch, frontier, room.issued, room.prequeue, open, shopping, now}
