-- Record a sealed digest closed, with the notification made of it and its event: once,
-- however many closers made that notification.
--
-- Keys and arguments: ``streams.digests.store.digest_close_call`` lays them out.
-- KEYS: the digest (a hash), its items (a list), the shard's digests by closing time, the
--       shard's events
-- ARGV: the digest id, the notification made of it ("" for none: every item left), now (ms),
--       how long (ms) a closed digest is kept, its ``DigestClosed`` event (encoded)
--
-- Reply: 1 when this call closed it; 0 when it was closed before, is gone, or is not sealed.

local digest, items, due, events = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, nid, now, keep_ms, event = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local state = redis.call("HGET", digest, "state")
if state == "open" then
  return 0 -- never sealed: not for closing
end
redis.call("ZREM", due, id)
if state ~= "sealed" then
  return 0
end
redis.call("HSET", digest, "state", "closed", "notification_id", nid, "closed_ms", now)
redis.call("PEXPIRE", digest, keep_ms)
redis.call("PEXPIRE", items, keep_ms)
redis.call("XADD", events, "*", "e", event)
return 1
