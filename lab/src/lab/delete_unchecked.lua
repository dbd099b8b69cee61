-- delete_unchecked.lua: the lab's UNSAFE delete (src/racelab/lab/unsafe_ops.rs), what a
-- first attempt at a lock does where the article's step 3 compares first: a plain DEL of
-- the lease key, whoever holds it. Used as the release with step 3 off, and as the
-- overwrite with step 1 off (SET without NX replaces the key another server created).
-- The previous value is read in the same script only so that the lab's table can say
-- whose key was deleted; the DEL itself checks nothing. Compare release.lua.
--
-- KEYS[1]  lease key   lease:{group}:<name>
--
-- Reply: the owner token the key held before the DEL, or false if it was absent.
local previous = redis.call('GET', KEYS[1])
redis.call('DEL', KEYS[1])
return previous
