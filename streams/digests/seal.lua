-- Close taken digests to further joins and read what their notifications are made of: one
-- call for a closer's batch of one shard.
--
-- Keys and arguments: ``streams.digests.closing.digest_seal_call`` lays them out.
-- KEYS: the shard's digests by closing time; then per digest: the digest (a hash), its items
--       (a list), the open digest of its (recipient, type, key) ("<id> <closes ms>")
-- ARGV: per digest: its member of the due set ("<id> <open key>")
--
-- An open digest becomes sealed, and stops being the open one (a notification joining after
-- this opens a new digest); sealing again changes nothing. A digest gone or closed already
-- leaves the due set.
--
-- Reply, per digest: {"sealed", its fields (HGETALL), its items}, or {"closed"} or {"GONE"}.

local KEYS_EACH = 3
local due = KEYS[1]

local function seal(k, member)
  local digest, items, open = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  local id = string.sub(member, 1, string.find(member, " ", 1, true) - 1)
  local state = redis.call("HGET", digest, "state")
  if state ~= "open" and state ~= "sealed" then
    redis.call("ZREM", due, member)
    return { state or "GONE" }
  end
  if state == "open" then
    redis.call("HSET", digest, "state", "sealed")
  end
  local current = redis.call("GET", open)
  if current and string.sub(current, 1, #id + 1) == id .. " " then
    redis.call("DEL", open)
  end
  return { "sealed", redis.call("HGETALL", digest), redis.call("LRANGE", items, 0, -1) }
end

local replies = {}
for i = 1, #ARGV do
  replies[i] = seal(1 + (i - 1) * KEYS_EACH, ARGV[i])
end
return replies
