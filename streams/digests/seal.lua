-- Close a digest to further joins, before its items are read to make its notification.
--
-- Keys and arguments: ``streams.digests.store.seal_call`` lays them out.
-- KEYS: the digest (a hash), the open digest of its (recipient, type, key): "<id> <closes ms>"
-- ARGV: the digest id
--
-- An open digest becomes sealed, and stops being the open one (a notification joining after
-- this opens a new digest); sealing again changes nothing.
--
-- Reply: the digest's state after the call ("sealed", "closed"), or "GONE".

local digest, open = KEYS[1], KEYS[2]
local state = redis.call("HGET", digest, "state")
if not state then
  return "GONE"
end
if state == "open" then
  redis.call("HSET", digest, "state", "sealed")
  state = "sealed"
end
local current = redis.call("GET", open)
if current and string.sub(current, 1, #ARGV[1] + 1) == ARGV[1] .. " " then
  redis.call("DEL", open)
end
return state
