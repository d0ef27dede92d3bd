-- Record sealed digests closed, each with the notification made of it and its event: once,
-- however many closers made that notification. One call for a closer's batch of one shard.
--
-- Keys and arguments: ``streams.digests.closing.digest_close_call`` lays them out.
-- KEYS: the shard's digests by closing time, the shard's events; then per digest: the
--       digest (a hash), its items (a list)
-- ARGV: now (ms), how long (ms) a closed digest is kept; then per digest: its member of the
--       due set ("<id> <open key>"), the notification made of it ("" for none: every item
--       left), its ``DigestClosed`` event (encoded)
--
-- Reply, per digest: 1 when this call closed it; 0 when it was closed before, is gone, or is
-- not sealed.

local KEYS_EACH, ARGS_EACH = 2, 3
local due, events = KEYS[1], KEYS[2]
local now, keep_ms = ARGV[1], tonumber(ARGV[2])

local function close(k, a)
  local digest, items = KEYS[k + 1], KEYS[k + 2]
  local member, nid, event = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local state = redis.call("HGET", digest, "state")
  if state == "open" then
    return 0 -- never sealed: not for closing
  end
  redis.call("ZREM", due, member)
  if state ~= "sealed" then
    return 0
  end
  redis.call("HSET", digest, "state", "closed", "notification_id", nid, "closed_ms", now)
  redis.call("PEXPIRE", digest, keep_ms)
  redis.call("PEXPIRE", items, keep_ms)
  redis.call("XADD", events, "*", "e", event)
  return 1
end

local replies = {}
for i = 0, (#KEYS - 2) / KEYS_EACH - 1 do
  replies[#replies + 1] = close(2 + i * KEYS_EACH, 2 + i * ARGS_EACH)
end
return replies
