-- arrive.lua: a holder whose turn has come arrives (seatlock: opens the map), or an
-- admitted holder's visit renews the admission. The admission is a lease on the room's
-- places, its owner token the member; acquire.lua checks it in the same step as a grant.
-- Preceded by now_ms.lua.
--
-- KEYS[1]  room hash  lease:{group}:~room      epoch, frontier, issued
-- KEYS[2]  admitted   lease:{group}:~admitted  member -> expires_at_ms
-- KEYS[3]  turns      lease:{group}:~turns     place -> when its turn came, Unix ms
-- KEYS[4]  places     lease:{group}:~places    holder -> place
-- KEYS[5]  since      lease:{group}:~since     member -> admitted at, Unix ms
-- ARGV[1]  member: the admission's owner token (secret: whoever knows it may shop)
-- ARGV[2]  holder label (public)
-- ARGV[3]  the holder's place in line, from their ticket
-- ARGV[4]  the room's epoch the ticket was given in
-- ARGV[5]  admission TTL, ms: an arrival, or a visit, renews it to this from now…
-- ARGV[6]  …but never past admitted-at + this cap, ms
-- ARGV[7]  the arrival window, ms
-- ARGV[8]  how long the room's keys live after this write, ms
-- ARGV[9]  the place as the ticket says join.lua gave it: 'p<k>' or '<n>'
--
-- Reply {status, n}:
--   {'arrived', expires_at_ms}   the turn is taken: shopping until then (Unix ms,
--                                Redis clock)
--   {'admitted', expires_at_ms}  already shopping: renewed, until then
--   {'waiting', 0}               the place's turn has not come
--   {'spent', place}             the turn came and is over (left, lapsed or missed):
--                                a new place at the back of the line
--   {'other_epoch', 0}           the ticket is from an earlier life of the room, or
--                                names a place this holder no longer has
local room_key, admitted_key, turns_key, places_key, since_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local member, holder, place = ARGV[1], ARGV[2], tonumber(ARGV[3])
local ttl_ms, cap_ms, window_ms, keep_ms = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local now = now_ms()

local room = redis.call('HMGET', room_key, 'epoch', 'frontier')
if room[1] ~= ARGV[4] then
  return {'other_epoch', 0}
end

-- One place per holder. A ticket kept from a place the holder left, once they joined
-- again, names another place than the room's record: it is stale, like one of another
-- epoch. A holder with no record left and did not join again: the turn logic below
-- finds their old turn over.
local recorded = redis.call('HGET', places_key, holder)
if recorded and recorded ~= ARGV[9] then
  return {'other_epoch', 0}
end

local function renew_keys()
  for _, key in ipairs(KEYS) do
    redis.call('PEXPIRE', key, keep_ms)
  end
end

-- Already shopping: the visit renews the admission, up to the cap.
local expires = tonumber(redis.call('ZSCORE', admitted_key, member) or '0')
if expires > now then
  local since = tonumber(redis.call('HGET', since_key, member) or now)
  local renewed = math.min(now + ttl_ms, since + cap_ms)
  if renewed > expires then
    redis.call('ZADD', admitted_key, renewed, member)
    expires = renewed
  end
  return {'admitted', expires}
end

if place > tonumber(room[2] or '0') then
  return {'waiting', 0}
end

-- The turn has come and is still open: the holder is admitted, and the place becomes
-- an admission until it lapses or ends.
local turn = redis.call('ZSCORE', turns_key, place)
if turn and now < tonumber(turn) + window_ms then
  redis.call('ZREM', turns_key, place)
  redis.call('ZADD', admitted_key, now + ttl_ms, member)
  redis.call('HSET', since_key, member, now)
  renew_keys()
  return {'arrived', now + ttl_ms}
end

-- The turn is over. The holder goes to the back of the line, with a new place.
redis.call('ZREM', turns_key, place)
redis.call('ZREM', admitted_key, member)
local back = redis.call('HINCRBY', room_key, 'issued', 1)
redis.call('HSET', places_key, holder, back)
renew_keys()
return {'spent', back}
