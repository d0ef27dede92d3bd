-- A cancelled notification leaves the digest it joined, while the digest is open.
--
-- Keys and arguments: ``streams.digests.store.leave_call`` lays them out.
-- KEYS: the digest (a hash), its items (a hash) and their order (a list)
-- ARGV: the notification id
--
-- Reply: "LEFT"; or, when it is not in the digest's items any more, the digest's state
-- ("sealed", "closed": too late, it is in the digest's notification) or "GONE".

local digest, items, order = KEYS[1], KEYS[2], KEYS[3]
local nid = ARGV[1]
local state = redis.call("HGET", digest, "state")
if state ~= "open" then
  return state or "GONE"
end
local item = redis.call("HGET", items, nid)
if not item then
  return "GONE"
end
redis.call("HDEL", items, nid)
redis.call("LREM", order, 1, nid)
redis.call("HINCRBY", digest, "count", -1)
redis.call("HINCRBY", digest, "bytes", -#item)
return "LEFT"
