-- join.lua: a holder's place in a waiting room's line, given once. A new arrival is the
-- only caller that costs the room a round trip: the place goes into a signed ticket in
-- the browser, and from then on the holder's position is worked out from the ticket and
-- the room's frontier, with no store read. Preceded by now_ms.lua and open_sale.lua.
--
-- KEYS[1]  room hash  lease:{group}:~room    epoch, fence, frontier, issued, prequeue, open
-- KEYS[2]  places     lease:{group}:~places  holder -> 'p<k>' (k-th into the pre-queue)
--                     or '<n>' (place n in line): one place per holder
-- ARGV[1]  holder label (public; seatlock: the buyer id)
-- ARGV[2]  the on-sale time, Unix ms (0: on sale)
-- ARGV[3]  an epoch for the room if it has none yet (random): it names this life of the
--          room, so a ticket from before Redis lost the room is known to be stale
-- ARGV[4]  how long the room's keys live after this write, ms
--
-- Reply {epoch, kind, number}:
--   kind 'pre'    number k: the k-th holder to join before the on-sale; the caller
--                 draws the place at the on-sale
--   kind 'place'  number n: the place in line (1 = first)
local room_key, places_key = KEYS[1], KEYS[2]
local holder, on_sale, keep_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
local now = now_ms()

redis.call('HSETNX', room_key, 'epoch', ARGV[3])
local room = open_sale(room_key, now, on_sale)

-- One place per holder: a second tab, or a reload without the ticket, gets the same.
local place = redis.call('HGET', places_key, holder)
if not place then
  if room.open then
    place = tostring(redis.call('HINCRBY', room_key, 'issued', 1))
  else
    place = 'p' .. redis.call('HINCRBY', room_key, 'prequeue', 1)
  end
  redis.call('HSET', places_key, holder, place)
end

local keep = keep_ms + math.max(on_sale - now, 0)
for _, key in ipairs(KEYS) do
  redis.call('PEXPIRE', key, keep)
end
if string.sub(place, 1, 1) == 'p' then
  return {room.epoch, 'pre', tonumber(string.sub(place, 2))}
end
return {room.epoch, 'place', tonumber(place)}
