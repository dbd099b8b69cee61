-- enter.lua: a buyer's one step into a waiting room (the article's lock generalised to
-- N permits: a semaphore whose permits are leases), run at every visit and every poll
-- of the queue page. It queues the member if it is not admitted (once; a second call
-- only marks it as still there), admits from the head of the queue while fewer than N
-- are admitted, renews the member's admission if it has one, and says where it stands.
-- Every time is the Redis clock's (now_ms.lua): app servers' clocks decide nothing.
-- The room lives in one slot beside its group's leases, so acquire.lua can check an
-- admission in the same atomic step as a grant. Preceded by now_ms.lua and
-- admission_ended.lua.
--
-- KEYS[1]  queue        lease:{group}:~queue        zset member -> place (a pre-queue
--                       draw in (0, 1), else the next place 1, 2, …: FIFO)
-- KEYS[2]  seen         lease:{group}:~queue-seen   zset member -> last seen (Unix ms)
-- KEYS[3]  admitted     lease:{group}:~admitted     zset member -> expires_at_ms
-- KEYS[4]  room hash    lease:{group}:~room         next_place, ended, ended_ms,
--                       joined:<member> (Unix ms), since:<member> (admitted at, Unix ms)
-- ARGV[1]  member: the admission's owner token (secret: whoever knows it may shop)
-- ARGV[2]  shoppers: at most this many admitted at once (>= 1)
-- ARGV[3]  admission TTL in milliseconds; each visit renews it to this…
-- ARGV[4]  …but never past admitted-at + this cap, in milliseconds
-- ARGV[5]  the on-sale time, Unix ms (0: on sale); nobody is admitted before it
-- ARGV[6]  the pre-queue draw: a number in (0, 1), random but fixed per member (the
--          caller derives it from the member's token), the member's place if it joins
--          before the on-sale (so the pre-queue is in random order, and joining again
--          draws nothing new)
-- ARGV[7]  grace in milliseconds: a queued member not seen for this long, on the room's
--          clock (below), has left
-- ARGV[8]  '1' if the member is here (seatlock: a map view by a session it already had),
--          which turns an arrival window into the full admission; '0' for a poll
-- ARGV[9]  the arrival window in milliseconds (at most the TTL): how long a new
--          admission lasts until the member is here
--
-- Reply {status, a, b, c, waits}:
--   {'admitted', expires_at_ms, 0, queue_length, waits}
--   {'queued', position (1 = next in), queue_length, wait_estimate_ms, waits}
--   {'prequeue', ms until the on-sale, queue_length, 0, waits}
-- waits: the queue waits, in ms, of the members this call admitted (for a histogram).
local queue_key, seen_key, admitted_key, room_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local member, shoppers = ARGV[1], tonumber(ARGV[2])
local ttl_ms, cap_ms, on_sale = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local draw, grace_ms = ARGV[6], tonumber(ARGV[7])
local here, arrival_ms = ARGV[8] == '1', math.min(tonumber(ARGV[9]), ttl_ms)
local now = now_ms()
local waits = {}

-- The room's clock, for telling who went quiet: it follows the Redis clock, but never
-- advances more than a third of the grace per call, so a stall of the store or of every
-- server (SIGSTOP, a failover) does not count as every buyer being away. Buyers poll
-- every few seconds, so while anyone waits the two clocks advance alike.
local last_real = tonumber(redis.call('HGET', room_key, 'clock_real') or now)
local room_now = tonumber(redis.call('HGET', room_key, 'clock_room') or now)
room_now = room_now + math.min(math.max(now - last_real, 0), math.floor(grace_ms / 3))
redis.call('HSET', room_key, 'clock_real', now, 'clock_room', room_now)

-- Lapsed admissions end first, so their places are free for the queue below (a lease
-- that lapsed is as good as released).
local lapsed = redis.call('ZRANGEBYSCORE', admitted_key, '-inf', now, 'WITHSCORES')
for i = 1, #lapsed, 2 do
  admission_ended(lapsed[i], tonumber(lapsed[i + 1]))
end

-- Queued members that stopped asking (a closed tab) leave the queue, a bounded batch per
-- call, so that positions count only buyers still waiting.
local quiet = redis.call('ZRANGEBYSCORE', seen_key, '-inf', room_now - grace_ms, 'LIMIT', 0, 100)
for _, gone in ipairs(quiet) do
  redis.call('ZREM', queue_key, gone)
  redis.call('ZREM', seen_key, gone)
  redis.call('HDEL', room_key, 'joined:' .. gone)
end

-- The member itself, if not admitted: it joins once, at the back, or in the pre-queue at
-- a random place; a later call only marks it as still there.
if not redis.call('ZSCORE', admitted_key, member) then
  if not redis.call('ZSCORE', queue_key, member) then
    local place = draw
    if now >= on_sale then
      place = redis.call('HINCRBY', room_key, 'next_place', 1)
    end
    redis.call('ZADD', queue_key, place, member)
    redis.call('HSET', room_key, 'joined:' .. member, now)
  end
  redis.call('ZADD', seen_key, room_now, member)
end

-- Admission, FIFO: while a place is free, the head of the queue is admitted with a
-- short lease, the arrival window: a member admitted while away (a tab closed a moment
-- ago, a crawler that never comes back) frees the place soon, not after a whole TTL.
-- The member's next call as one who is here turns it into the full admission (below).
-- A head that went quiet is dropped, not admitted (a bounded number per call). Every
-- server runs this same step atomically, so however many admit at the same instant, no
-- more than N are admitted.
if now >= on_sale then
  local free = shoppers - redis.call('ZCARD', admitted_key)
  local dropped = 0
  while free > 0 and dropped < 100 do
    local head = redis.call('ZRANGE', queue_key, 0, 0)[1]
    if not head then break end
    local seen = tonumber(redis.call('ZSCORE', seen_key, head) or 0)
    local joined = tonumber(redis.call('HGET', room_key, 'joined:' .. head) or now)
    redis.call('ZREM', queue_key, head)
    redis.call('ZREM', seen_key, head)
    redis.call('HDEL', room_key, 'joined:' .. head)
    if seen >= room_now - grace_ms then
      redis.call('ZADD', admitted_key, now + arrival_ms, head)
      redis.call('HSET', room_key, 'since:' .. head, now)
      waits[#waits + 1] = now - math.max(joined, on_sale)
      free = free - 1
    else
      dropped = dropped + 1
    end
  end
end

-- An admitted member that is here: its admission is renewed by the visit to a full TTL
-- from now, but never past admitted-at + the cap. A poll renews nothing.
local expires = redis.call('ZSCORE', admitted_key, member)
if expires and here then
  local since = tonumber(redis.call('HGET', room_key, 'since:' .. member) or now)
  local renewed = math.min(now + ttl_ms, since + cap_ms)
  if renewed > tonumber(expires) then
    redis.call('ZADD', admitted_key, renewed, member)
    expires = renewed
  end
end

-- The room is forgotten once nobody has asked for longer than anything in it can live.
local keep_ms = cap_ms + grace_ms + math.max(on_sale - now, 0)
for _, key in ipairs(KEYS) do
  redis.call('PEXPIRE', key, keep_ms)
end

local length = redis.call('ZCARD', queue_key)
if expires then
  return {'admitted', tonumber(expires), 0, length, waits}
end
if now < on_sale then
  return {'prequeue', on_sale - now, length, 0, waits}
end
-- Queued: the estimate is one mean admission (the TTL until one has ended) for the first
-- N in the queue, and one more for each N after them.
local position = redis.call('ZRANK', queue_key, member) + 1
local ended = tonumber(redis.call('HGET', room_key, 'ended') or 0)
local mean_ms = ttl_ms
if ended > 0 then
  mean_ms = math.floor(tonumber(redis.call('HGET', room_key, 'ended_ms')) / ended)
end
return {'queued', position, length, math.ceil(position / shoppers) * mean_ms, waits}
