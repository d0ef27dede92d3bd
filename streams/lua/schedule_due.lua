-- Move work items whose time has come from ``delayed`` to their work streams.
--
-- KEYS: delayed, work:high, work:normal, work:low, dlq
-- ARGV: now (ms), most items to move
-- A member is "<high|normal|low> <encoded work item>".
-- Reply: {moved count, due time of the next waiting member in ms, or -1}
local delayed = KEYS[1]
local streams = { high = KEYS[2], normal = KEYS[3], low = KEYS[4] }
local due = redis.call("ZRANGEBYSCORE", delayed, "-inf", ARGV[1], "LIMIT", 0, tonumber(ARGV[2]))
for _, member in ipairs(due) do
  local space = string.find(member, " ", 1, true)
  local stream = space and streams[string.sub(member, 1, space - 1)]
  if stream then
    redis.call("XADD", stream, "*", "w", string.sub(member, space + 1))
  else  -- not ours to understand: park it where an operator looks
    redis.call("XADD", KEYS[5], "*", "reason", "unreadable delayed member", "member", member)
  end
  redis.call("ZREM", delayed, member)
end
local next_due = redis.call("ZRANGE", delayed, 0, 0, "WITHSCORES")
return { #due, next_due[2] or -1 }
