-- A cancelled notification leaves the digest it joined, while the digest is open.
--
-- Keys and arguments: ``streams.digests.store.digest_leave_call`` lays them out.
-- KEYS: the digest (a hash), its items (a list of "<notification id> <data JSON>")
-- ARGV: the notification id
--
-- An open digest holds at most its ``max_items``, so finding the item is a short scan.
--
-- Reply: "LEFT"; or, when it is not in the digest's items any more, the digest's state
-- ("sealed", "closed": too late, it is in the digest's notification) or "GONE".

local digest, items = KEYS[1], KEYS[2]
local prefix = ARGV[1] .. " "
local state = redis.call("HGET", digest, "state")
if state ~= "open" then
  return state or "GONE"
end
for _, entry in ipairs(redis.call("LRANGE", items, 0, -1)) do
  if string.sub(entry, 1, #prefix) == prefix then
    redis.call("LREM", items, 1, entry)
    redis.call("HINCRBY", digest, "bytes", #prefix - #entry)
    return "LEFT"
  end
end
return "GONE"
