-- extend.lua: "Need more time?". It extends one holder's leases in a group, all or none,
-- to the TTL from now, in one atomic script. It is renew.lua's compare-and-pexpire with
-- a budget: at most ARGV[2] extensions per lease, and at most ARGV[3] ms from its grant.
-- The leases stay the same leases: same owner token, same fencing token.
-- A lease that lapsed stays lapsed: no key is ever created here.
-- Preceded by now_ms.lua (scripts.rs).
--
-- KEYS[1]  holders hash   lease:{group}:~holders  <name> -> "<token> <expires_at_ms> <holder>"
-- KEYS[2]  holder's set   lease:{group}:~held-by:<holder>  (PX: the longest lease in it)
-- KEYS[3]  admitted zset  lease:{group}:~admitted  read only when ARGV[5] names one
-- KEYS[2+2i]  lease key i          lease:{group}:<name i>  string: owner token, PX TTL
-- KEYS[3+2i]  extension record i   lease:{group}:~extended:<name i>
--                                  "<fencing token> <granted_at_ms> <extensions>", with
--                                  the lease's own PX: it lapses with the lease
-- ARGV[1]  TTL in milliseconds: each extension sets the expiry to now + TTL
-- ARGV[2]  the most extensions of one lease
-- ARGV[3]  the longest a lease may last from its grant, in milliseconds
-- ARGV[4]  holder label (public): every lease must be recorded as this holder's
-- ARGV[5]  admission: the owner token of the holder's admission to the waiting room.
--          It must be live for anything to be extended. '': no room.
-- ARGV[4+2i]  the resource name of lease i
-- ARGV[5+2i]  the owner token of lease i
--
-- Reply {status, a, name, expiries}:
--   {'extended', extensions, '', {expires_at_ms 1, ...}}  every lease extended. extensions:
--                                      the most any of them has had, this one included.
--                                      Expiries in Unix ms, Redis clock, in KEYS order
--   {'expired', 0, name, {}}            name lapsed, was released, or is another owner's:
--                                      nothing extended
--   {'extension_limit', limit, name, {}}  name was extended `limit` times: nothing
--                                      extended
--   {'life_limit', max_life_ms, name, {}}  name already lasts to its grant + ARGV[3]:
--                                      nothing extended
--   {'not_admitted', 0, '', {}}         ARGV[5] names no live admission: nothing extended
local holders_key, held_by_key, admitted_key = KEYS[1], KEYS[2], KEYS[3]
local ttl_ms, max_extensions, max_life_ms = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local holder, admission = ARGV[4], ARGV[5]
local now = now_ms()

-- The waiting room's gate, as in acquire.lua: only a live admission buys more time.
-- An admission that ended keeps the seats until their countdown ends, and no longer.
if admission ~= '' then
  local admitted_until = redis.call('ZSCORE', admitted_key, admission)
  if not admitted_until or tonumber(admitted_until) <= now then
    return {'not_admitted', 0, '', {}}
  end
end

-- Check every lease before touching any: all or none.
local plans = {}
for i = 1, (#KEYS - 3) / 2 do
  local lease_key, record_key = KEYS[2 + 2 * i], KEYS[3 + 2 * i]
  local name, owner = ARGV[4 + 2 * i], ARGV[5 + 2 * i]
  -- The owner check. A lapsed key reads as nil, so a lapsed lease is never recreated.
  local entry = redis.call('HGET', holders_key, name) or ''
  local token, expires, by = string.match(entry, '^(%d+) (%d+) (.*)$')
  if redis.call('GET', lease_key) ~= owner or by ~= holder then
    return {'expired', 0, name, {}}
  end
  expires = tonumber(expires)
  -- The budget of this grant. The record names the grant by its fencing token.
  -- Without one, this is the first extension: the grant was its first expiry less the TTL.
  local record = redis.call('GET', record_key) or ''
  local for_token, granted_at, extensions = string.match(record, '^(%d+) (%d+) (%d+)$')
  if for_token ~= token then
    granted_at, extensions = expires - ttl_ms, 0
  end
  granted_at, extensions = tonumber(granted_at), tonumber(extensions)
  if extensions >= max_extensions then
    return {'extension_limit', max_extensions, name, {}}
  end
  -- The new expiry: a TTL from now, but never past the grant's last moment.
  -- A lease that already lasts to that moment has nothing left to gain.
  local last = granted_at + max_life_ms
  if last <= expires then
    return {'life_limit', max_life_ms, name, {}}
  end
  local ends_at = math.max(expires, math.min(now + ttl_ms, last))
  plans[i] = {lease_key, record_key, name, token, granted_at, extensions + 1, ends_at}
end

-- Every check passed. Extend each lease, its holding and its record together.
local most, longest, expiries = 0, 0, {}
for i, p in ipairs(plans) do
  local lease_key, record_key, name, token, granted_at, extensions, ends_at = unpack(p)
  redis.call('PEXPIRE', lease_key, ends_at - now)
  redis.call('HSET', holders_key, name, string.format('%s %d %s', token, ends_at, holder))
  redis.call('SET', record_key, string.format('%s %d %d', token, granted_at, extensions),
    'PX', ends_at - now)
  most, longest, expiries[i] = math.max(most, extensions), math.max(longest, ends_at - now), ends_at
end

-- The holder's set must outlive its longest lease: held_by.lua lists the holds from it,
-- and acquire.lua counts the holder's limit with it. Lengthened, never shortened, as
-- acquire.lua does it.
if redis.call('PEXPIRE', held_by_key, longest, 'GT') == 0 then
  redis.call('PEXPIRE', held_by_key, longest, 'NX')
end
return {'extended', most, '', expiries}
