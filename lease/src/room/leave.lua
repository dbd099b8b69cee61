-- leave.lua: a holder leaves a waiting room (seatlock: after buying, or the Leave
-- button). An admission ends at once, and so does a turn not yet taken: the place is
-- free for the ticker's next step. A place still waiting in line is marked gone, so
-- the ticker skips it. Either way the holder's next join is at the back.
--
-- KEYS[1]  room hash  lease:{group}:~room      epoch, frontier
-- KEYS[2]  admitted   lease:{group}:~admitted  member -> expires_at_ms
-- KEYS[3]  turns      lease:{group}:~turns     place -> when its turn came
-- KEYS[4]  places     lease:{group}:~places    holder -> place
-- KEYS[5]  since      lease:{group}:~since     member -> admitted at
-- KEYS[6]  gone       lease:{group}:~gone      places whose holder left before their turn
-- ARGV[1]  member: the admission's owner token
-- ARGV[2]  holder label
-- ARGV[3]  the holder's place in line, from their ticket (0: none known, so the room's
--          own record of the holder's place is used)
-- ARGV[4]  the room's epoch the ticket was given in
--
-- Reply: 1 if an admission or an open turn ended, else 0
local room_key, admitted_key, turns_key, places_key, since_key, gone_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local member, holder, place = ARGV[1], ARGV[2], tonumber(ARGV[3])
local ended = redis.call('ZREM', admitted_key, member)
redis.call('HDEL', since_key, member)
local room = redis.call('HMGET', room_key, 'epoch', 'frontier')
local this_epoch = room[1] == ARGV[4]
if place == 0 then
  -- No ticket came. The room's own record names the place, in this life of the room.
  -- A pre-queue place ('p<k>') has no place in line yet: nothing to skip.
  place = tonumber(redis.call('HGET', places_key, holder) or '') or 0
  this_epoch = true
end
if place > 0 and this_epoch then
  if redis.call('ZREM', turns_key, place) == 1 then
    ended = 1
  elseif place > tonumber(room[2] or '0') then
    redis.call('ZADD', gone_key, place, place)
  end
end
redis.call('HDEL', places_key, holder)
return ended
