-- lapse.lua: step mode's "the lease runs out now" (lab/src/lab/stepper.rs). In a timed
-- run a lease lapses when its TTL passes; in step mode the reader is the clock, so the
-- holder's lease is given 1 ms left and Redis expires it as it would any key. Only the
-- holder's own key, and only one that has a TTL: a key made without PX (step 2 off)
-- never lapses, which is the point of step 2.
--
-- KEYS[1]  lease key    lease:{group}:<name>
-- ARGV[1]  owner token  the holder's
--
-- Reply: 1 the lease will lapse within 1 ms; 0 the key is not this owner's (it lapsed
-- already, or another server holds it); -1 the key is this owner's and has no expiry.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if redis.call('PTTL', KEYS[1]) == -1 then
  return -1
end
redis.call('PEXPIRE', KEYS[1], 1)
return 1
