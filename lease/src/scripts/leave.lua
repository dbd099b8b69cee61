-- leave.lua: a member leaves a waiting room (seatlock: at checkout, or the buyer's
-- Leave button): out of the queue, and its admission, if any, ends at once, freeing the
-- place for the next buyer (admitted at the next enter.lua of anyone). Preceded by
-- now_ms.lua and admission_ended.lua.
--
-- KEYS[1]  queue, KEYS[2] seen, KEYS[3] admitted, KEYS[4] room hash (as in enter.lua)
-- ARGV[1]     member: the admission's owner token
-- Reply: 1 if an admission ended, 0 if the member was only queued or not there
local member = ARGV[1]
redis.call('ZREM', KEYS[1], member)
redis.call('ZREM', KEYS[2], member)
redis.call('HDEL', KEYS[4], 'joined:' .. member)
if redis.call('ZSCORE', KEYS[3], member) then
  admission_ended(member, now_ms())
  return 1
end
return 0
